"""Structure of the lesson notebooks, their jupytext pairs, and that no notebook is missing from a test run.

What nbval and the browser tests cannot see is checked here:
- every lesson `notebooks/NN_topic.ipynb` and every solutions notebook `notebooks/solutions/NN_topic.ipynb` is
  stored executed, top to bottom in one fresh kernel (execution counts 1..N), with outputs, no stored errors and
  no SVG/PDF figures (nbval compares those byte for byte);
- it imports its logic from kvsim and defines no functions or classes except in exercise cells (first line
  `# Exercise`); its kernelspec is python3; no cell expects an exception (Run All in JupyterLab stops at the
  first one);
- learners read no test plumbing: nbval markers are cell tags, never `# NBVAL_...` comments, and no cell
  carries a `noqa` comment;
- a lesson opens with a Korean summary naming the seed section it covers, ends with a "Self-test" section
  whose cells are tagged `self-test` and hold the package's asserts, and lessons 01-09 have 2-4 "your turn"
  cells (`name = None  # your turn`, then `check("NN.k", name)`) stored with the placeholder's verdict;
- each lesson with your-turn cells has a solutions notebook of the same name whose every check is correct;
- its jupytext py:percent pair holds the same cells;
- the nbval stage collects every notebook (lessons and solutions) and the browser stage every lesson (and only
  lessons), with the exact pytest arguments `make test` uses (read from the Makefile).
"""

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager
from test_stages import makefile_vars  # the one reader of the Makefile's NAME := value lines

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
SOLVED = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
LESSON_NAME = re.compile(r"[0-9]{2}_[a-z0-9_]+\.ipynb")
KVSIM_IMPORT = re.compile(r"^\s*(from\s+kvsim(\.\w+)*\s+import\b|import\s+kvsim\b)", re.M)
NBVAL_MARKER = re.compile(r"#\s*NBVAL_\w+")
NOQA = re.compile(r"#\s*noqa\b", re.I)
HANGUL = re.compile(r"[\uac00-\ud7a3]")
YOUR_TURN = re.compile(r"^(\w+) = None  # your turn", re.M)
CHECK_CALL = re.compile(r"""^check\("(\d\d)\.(\d)", (\w+)\)$""", re.M)
# Lessons another issue is still rewriting: their structure checks must fail until then (strict xfail).
PENDING: dict[str, str] = {}
# Reading a notebook imports nbformat and its jsonschema (~3 CPU-s): make test runs this file in the nbval stage,
# whose processes import nbformat anyway (NB_TEST_FILES in the Makefile); the unit stage ignores it.


def all_notebooks():
    """Every .ipynb under notebooks/, except hidden directories (checkpoints)."""
    return sorted(p for p in NOTEBOOKS.rglob("*.ipynb") if not any(part.startswith(".") for part in p.relative_to(NOTEBOOKS).parts))


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def python_of(source):
    """Cell source as plain Python (IPython magics and shell escapes translated)."""
    return TransformerManager().transform_cell(source)


def is_exercise(source):
    lines = [ln for ln in source.splitlines() if ln.strip()]
    return bool(lines) and lines[0].strip().lower().startswith("# exercise")


def text_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def read(path):
    import nbformat  # here, not at the top: collecting this file costs no nbformat import

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    nb.path = path
    return nb


def pending(paths):
    """Parameters with a strict xfail for the lessons in PENDING."""
    return [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=PENDING[p.name[:2]]))
            if p.name[:2] in PENDING else p for p in paths]


@pytest.fixture(params=LESSONS + SOLVED, ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def lesson(request):
    return read(request.param)


def test_notebook_file_names():
    top = [p.name for p in NOTEBOOKS.glob("*.ipynb")]
    assert [n for n in top if not LESSON_NAME.fullmatch(n)] == [], "notebooks/ holds only NN_topic.ipynb lessons"
    solved = [p.name for p in SOLUTIONS.glob("*.ipynb")]
    assert [n for n in solved if n not in {p.name for p in LESSONS}] == [], (
        "notebooks/solutions/ holds only solutions named after a lesson (NN_topic.ipynb)")
    assert not [p for p in NOTEBOOKS.rglob("*.ipynb") if p.parent not in (NOTEBOOKS, SOLUTIONS)
                and ".ipynb_checkpoints" not in p.parts], "notebooks live in notebooks/ and notebooks/solutions/ only"


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
        assert "raises-exception" not in cell.metadata.get("tags", []) and "RAISES_EXCEPTION" not in cell.source, (
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


@pytest.mark.parametrize("path", pending(LESSONS + SOLVED), ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_no_test_plumbing_in_cells(path):
    for i, cell in enumerate(read(path).cells):
        assert not NBVAL_MARKER.search(cell.source), f"cell {i}: nbval markers go in cell tags, not comments"
        assert not NOQA.search(cell.source), f"cell {i}: lint exemptions belong in the linter's config, not in cells"


@pytest.mark.parametrize("path", pending(LESSONS), ids=lambda p: p.stem)
def test_opens_with_a_korean_summary_of_a_seed_section(path):
    first = next(c for c in read(path).cells if c.cell_type == "markdown").source
    assert HANGUL.search(first) and re.search(r"seed 00[01] 「[^」]+」", first), (
        "the first markdown cell needs a Korean summary naming the seed section it covers: seed 00N 「title」")


def test_start_here_has_a_korean_english_glossary():
    nb = read(next(p for p in LESSONS if p.name.startswith("00_")))
    glossary = next(c.source for c in nb.cells if c.cell_type == "markdown" and "Glossary" in c.source)
    rows = [ln for ln in glossary.splitlines() if ln.startswith("| ") and HANGUL.search(ln)]
    assert len(rows) >= 20 and all(t in glossary for t in ("prefill", "프리필", "sliding window", "투기적 디코딩"))


@pytest.mark.parametrize("path", pending(LESSONS), ids=lambda p: p.stem)
def test_ends_with_a_tagged_self_test(path):
    cells = read(path).cells
    heading = max(i for i, c in enumerate(cells) if c.cell_type == "markdown" and re.search(r"^## Self-test", c.source, re.M))
    tail = [c for c in cells[heading + 1:] if c.cell_type == "code"]
    assert tail and all("self-test" in c.metadata.get("tags", []) for c in tail), (
        "every code cell after the last '## Self-test' heading is tagged self-test")
    assert any(isinstance(n, ast.Assert) for c in tail for n in ast.walk(ast.parse(python_of(c.source))))
    outside = [c for c in cells[:heading] if "self-test" in c.metadata.get("tags", [])]
    assert not outside, "self-test cells belong in the final Self-test section"


def your_turns(nb):
    """[(exercise key, variable, placeholder cell, check cell)] in notebook order."""
    code = code_cells(nb)
    out = []
    for a, b in zip(code, code[1:]):
        m, c = YOUR_TURN.search(a.source), CHECK_CALL.search(b.source)
        if m and c and c.group(3) == m.group(1):
            out.append((f"{c.group(1)}.{c.group(2)}", m.group(1), a, b))
    return out


@pytest.mark.parametrize("path", pending([p for p in LESSONS if p.name[:2] != "00"]), ids=lambda p: p.stem)
def test_learners_compute_two_or_three_checked_answers(path):
    turns = your_turns(read(path))
    # 2-3 computed answers, plus (issue 20) one predict-then-measure item where a lesson has it
    assert 2 <= len(turns) <= 4, f"{len(turns)} your-turn cells (a `x = None  # your turn` cell, then check(...))"
    assert [k.split(".")[0] for k, *_ in turns] == [path.name[:2]] * len(turns)
    for key, _, placeholder, checked in turns:
        assert placeholder.source.strip().count("\n") == 0, f"{key}: the your-turn cell holds only the placeholder"
        assert "not answered yet" in text_of(checked), f"{key}: stored with something other than the placeholder"
    solution = SOLUTIONS / path.name
    assert solution.exists(), f"missing worked solutions {solution.relative_to(ROOT)}"
    solved = {m.group(1) + "." + m.group(2) for c in code_cells(read(solution)) for m in CHECK_CALL.finditer(c.source)}
    assert {k for k, *_ in turns} <= solved, "every your-turn exercise is worked in the solutions notebook"


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: p.stem)
def test_every_worked_solution_is_correct(path):
    checks = [c for c in code_cells(read(path)) if CHECK_CALL.search(c.source)]
    assert checks, "a solutions notebook checks its answers with check(...)"
    for c in checks:
        out = text_of(c)
        assert "  correct: " in out and "not yet" not in out and "not answered" not in out, out


@pytest.mark.parametrize("notebook", all_notebooks(), ids=lambda p: str(p.relative_to(NOTEBOOKS)))
def test_jupytext_pair_in_sync(notebook):
    pair = notebook.with_suffix(".py")
    assert pair.exists(), f"missing {pair.relative_to(ROOT)}: run `make notebooks` (jupytext --sync)"

    import jupytext

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
    """The pytest arguments `make test` passes to a stage (NAME := ... in the Makefile, variables expanded)."""
    variables = makefile_vars()
    assert name in variables, f"{name} not defined in the Makefile"
    return shlex.split(variables[name])


def collect(args):
    """Node ids pytest collects for `args`, run from the repository root as make does."""
    proc = subprocess.run(
        # -n 0 last: collect in this process (the stage itself spreads over workers with pytest-xdist)
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args, "-n", "0"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert proc.returncode in (0, 5), f"collection failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln]


def test_nbval_stage_runs_every_notebook():
    collected = {node.split("::")[0] for node in collect(makefile_args("NBVAL_ARGS")) if ".ipynb::" in node}
    expected = {str(p.relative_to(ROOT)) for p in all_notebooks()}
    assert collected == expected


def test_browser_stage_runs_every_lesson():
    nodes = collect(makefile_args("UI_ARGS"))
    test = "test_lesson_runs_and_every_view_redraws"  # runs the lesson and moves every control of every view
    ran = {m.group(1) for n in nodes if (m := re.search(rf"::{test}\[(?:chromium-)?(.+)\]$", n))}
    assert ran == {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
