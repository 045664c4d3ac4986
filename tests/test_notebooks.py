"""Structure of the lesson notebooks, their jupytext pairs, and that no notebook is missing from a test run.

What nbval and the browser tests cannot see is checked here:
- every lesson `notebooks/NN_topic.ipynb` is stored executed, top to bottom in one fresh kernel (execution counts
  1..N), with outputs, no stored errors and no SVG/PDF figures (nbval compares those byte for byte);
- it imports its logic from kvsim, defines no functions or classes except in exercise cells (first line
  `# Exercise`, after any NBVAL marker lines), and has a "check yourself" cell with an `assert`;
- its kernelspec is python3; no cell expects an exception (Run All in JupyterLab stops at the first one);
- its jupytext py:percent pair holds the same cells;
- the nbval stage collects every notebook and the browser stage every lesson, with the exact pytest
  arguments `make test` uses (read from the Makefile).
"""

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
LESSON_NAME = re.compile(r"[0-9]{2}_[a-z0-9_]+\.ipynb")
KVSIM_IMPORT = re.compile(r"^\s*(from\s+kvsim(\.\w+)*\s+import\b|import\s+kvsim\b)", re.M)
NBVAL_MARKER = re.compile(r"^\s*#\s*NBVAL_\w+\s*$")


def all_notebooks():
    """Every .ipynb under notebooks/, except hidden directories (checkpoints)."""
    return sorted(p for p in NOTEBOOKS.rglob("*.ipynb") if not any(part.startswith(".") for part in p.relative_to(NOTEBOOKS).parts))


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def python_of(source):
    """Cell source as plain Python (IPython magics and shell escapes translated)."""
    return TransformerManager().transform_cell(source)


def is_exercise(source):
    lines = [ln for ln in source.splitlines() if ln.strip() and not NBVAL_MARKER.match(ln)]
    return bool(lines) and lines[0].strip().lower().startswith("# exercise")


@pytest.fixture(params=LESSONS, ids=lambda p: p.stem)
def lesson(request):
    nb = nbformat.read(request.param, as_version=4)
    nbformat.validate(nb)
    nb.path = request.param
    return nb


def test_notebook_file_names():
    top = [p.name for p in NOTEBOOKS.glob("*.ipynb")]
    assert [n for n in top if not LESSON_NAME.fullmatch(n)] == [], "notebooks/ holds only NN_topic.ipynb lessons"


def test_kernelspec_is_python3(lesson):
    assert lesson.metadata.get("kernelspec", {}).get("name") == "python3"


def test_stored_executed_top_to_bottom_with_outputs(lesson):
    cells = code_cells(lesson)
    assert cells, "a lesson without code cells"
    assert all(c.source.strip() for c in cells), "empty code cells (delete them)"
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"execution counts {counts}: re-run the lesson top to bottom in a fresh kernel (make notebooks)"
    )
    assert any(c.outputs for c in cells), "no stored outputs"


def test_no_stored_errors_or_vector_figures(lesson):
    for i, cell in enumerate(code_cells(lesson)):
        assert not any(NBVAL_MARKER.match(ln) and "RAISES_EXCEPTION" in ln for ln in cell.source.splitlines()), (
            f"code cell {i} expects an exception: Run All stops there in JupyterLab; catch and print it instead"
        )
        for out in cell.outputs:
            assert out.output_type != "error", f"code cell {i} has a stored error: {out.get('ename')}"
            assert not ({"image/svg+xml", "application/pdf"} & set(out.get("data", {}))), (
                f"code cell {i} stores an SVG/PDF figure, which nbval compares byte for byte; keep PNG"
            )


def test_imports_from_kvsim(lesson):
    assert any(KVSIM_IMPORT.search(c.source) for c in code_cells(lesson)), "a lesson must use kvsim"


def test_defines_no_functions_outside_exercises(lesson):
    for i, cell in enumerate(code_cells(lesson)):
        if is_exercise(cell.source):
            continue
        tree = ast.parse(python_of(cell.source))
        defs = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        assert not defs, f"code cell {i} defines {defs}: logic belongs in kvsim (or start the cell with '# Exercise')"


def test_has_a_check_yourself_assert(lesson):
    last_markdown = ""
    for cell in lesson.cells:
        if cell.cell_type == "markdown":
            last_markdown = cell.source
            continue
        has_assert = any(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(python_of(cell.source))))
        if has_assert and re.search(r"check\s+yourself", cell.source + "\n" + last_markdown, re.I):
            return
    pytest.fail("no 'check yourself' cell with an assert (a code cell with `assert` under a 'Check yourself' heading)")


@pytest.mark.parametrize("notebook", all_notebooks(), ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_jupytext_pair_in_sync(notebook):
    pair = notebook.with_suffix(".py")
    assert pair.exists(), f"missing {pair.relative_to(ROOT)}: run `make notebooks` (jupytext --sync)"

    def cells(nb):
        return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]

    assert cells(jupytext.read(pair)) == cells(jupytext.read(notebook)), (
        f"{pair.name} and {notebook.name} differ: run `make notebooks` (it syncs, re-executes, syncs)"
    )


def test_every_jupytext_script_has_its_notebook():
    scripts = [p for p in NOTEBOOKS.rglob("*.py") if p.read_text(encoding="utf-8").startswith("# ---\n# jupyter:")]
    assert [p.name for p in scripts if not p.with_suffix(".ipynb").exists()] == []


def test_jupytext_pairing_configured():
    assert 'formats = "ipynb,py:percent"' in (NOTEBOOKS / "jupytext.toml").read_text()


# --- no notebook missing from a run -------------------------------------------------------------------

def makefile_args(name):
    """The pytest arguments `make test` passes to a stage (NAME := ... in the Makefile)."""
    m = re.search(rf"^{name}\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, f"{name} not defined in the Makefile"
    return shlex.split(m.group(1))


def collect(args):
    """Node ids pytest collects for `args`, run from the repository root as make does."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert proc.returncode in (0, 5), f"collection failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln]


def test_nbval_stage_runs_every_notebook():
    collected = {node.split("::")[0] for node in collect(makefile_args("NBVAL_ARGS"))}
    expected = {str(p.relative_to(ROOT)) for p in all_notebooks()}
    assert collected == expected


def test_browser_stage_runs_every_lesson():
    nodes = collect(makefile_args("UI_ARGS"))
    test = "test_lesson_runs_and_every_view_redraws"  # runs the lesson and moves every control of every view
    ran = {m.group(1) for n in nodes if (m := re.search(rf"::{test}\[(?:chromium-)?(.+)\]$", n))}
    assert ran == {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
