"""The folder list is the architecture: layers import downward only, and nothing imports in a circle.

Every import counts, also one inside a function and one between two modules of the same folder.
Engine folders are roles by folder; in the lesson wing each file of a lesson package is a role
(``lesson.data``, ``lesson.measure``, ``lesson.plots``, ``lesson.views``) and a lesson never imports
another lesson.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "kvsim"

# What each role may import from kvsim (its own folder always; a lesson file its own lesson's files
# as listed in OWN_LESSON). The top-level cli may use the pure folders, and measure/ for
# `kvsim measure` (imported inside that command only). An entry with a dot names one module
# (``ui.style``), without a dot a whole role.
ALLOWED = {
    "calc": set(),
    "serving": {"calc"},
    "cache": {"calc", "serving"},
    "model": {"calc", "cache"},
    "decode": {"calc", "cache", "model"},
    "measure": {"calc", "serving", "cache", "model", "decode"},
    "ui": {"calc"},
    "lesson.data": {"calc", "serving"},
    "lesson.plots": {"calc", "ui.style"},
    "lesson.measure": {"calc", "serving", "cache", "model", "decode", "measure"},
    "lesson.views": {"calc", "serving", "ui"},
    "lesson.__init__": set(),
    "lessons": {"calc", "serving", "lesson.data"},  # VIEWS (lazy), the exercises and their checker
    "cli": {"calc", "serving", "measure"},
    "__main__": {"cli"},
    "__init__": set(),
}
# Which files of its own lesson a lesson file may import: views wrap data, measure and plots; plots
# may read the names of the codes its data produces (lesson 01's step grid); nothing imports views.
OWN_LESSON = {
    "lesson.data": {"lesson.data"},
    "lesson.measure": {"lesson.data", "lesson.measure"},
    "lesson.plots": {"lesson.data", "lesson.plots"},
    "lesson.views": {"lesson.data", "lesson.measure", "lesson.plots", "lesson.views"},
    "lesson.__init__": set(),
}
# The sizing core: these calc modules may import only each other. A number that exists for one
# lesson's picture belongs in that lesson's data.py, not here.
CORE_CALC = {
    "capacity", "config", "counterfactual", "engines", "explain", "families", "families_recurrent",
    "hardware", "hf_config", "hybrid", "layer_fields", "memory", "mlx_lm_rules", "phases", "progress",
    "quant_bytes", "registry", "report", "roofline", "tables", "tokens_fed", "units", "weights",
    "weights_common", "weights_recurrent", "window_bytes", "search", "extras", "mla_paths", "paged_read",
    "pool_bytes", "padded_prefill", "engines_transformers", "families_decoder",
    "engines_vllm", "engines_all", "validate", "families_hybrid", "families_attention",
}
PURE_FOLDERS = ("calc", "serving")
HEAVY = ("mlx", "matplotlib", "ipywidgets")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
LESSONS = sorted(p.name for p in (PACKAGE / "lessons").glob("l[0-9][0-9]_*") if p.is_dir())


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str):
    """Every module ``name`` imports, as (target, line): kvsim modules resolved, others by top-level name."""
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name).split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{module}.{alias.name}"
                yield (sub if sub in MODULES else module), node.lineno


def kvsim_edges() -> dict[str, set[str]]:
    """Module graph of kvsim; importing a.b.c also runs the package a.b's __init__."""
    edges = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _ in imports(name):
            if target in MODULES and target != name:
                edges[name].add(target)
                pkg = target.rpartition(".")[0]
                if pkg in MODULES and pkg != name and not name.startswith(pkg + "."):
                    edges[name].add(pkg)
    return edges


def folder(name: str) -> str:
    """The role of module ``name``: its engine folder, ``ui``, ``lessons`` or ``lesson.<file>``."""
    parts = name.split(".")
    if len(parts) == 1:
        return "__init__"
    if parts[1] == "lessons" and len(parts) > 2 and parts[2] in LESSONS:
        return "lesson." + (parts[3] if len(parts) > 3 else "__init__")
    return parts[1]


def lesson_of(name: str) -> str | None:
    """``l04_windows`` for ``kvsim.lessons.l04_windows.views``; None outside a lesson package."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "lessons" and parts[2] in LESSONS else None


def allowed(name: str, target: str) -> bool:
    """May module ``name`` import kvsim module ``target``?"""
    own, role = folder(name), folder(target)
    if lesson_of(target) and lesson_of(name):
        return lesson_of(target) == lesson_of(name) and role in OWN_LESSON[own]
    if own == "lessons" and lesson_of(target):
        return role in ALLOWED[own] or target == "kvsim.lessons"
    rules = ALLOWED[own] | ({own} if not own.startswith("lesson.") else set())
    return role in rules or ".".join(target.split(".")[1:3]) in rules


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), plus self-loops."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_lives_in_a_known_folder():
    assert {folder(name) for name in MODULES} <= set(ALLOWED), sorted({folder(n) for n in MODULES} - set(ALLOWED))
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "cli.py"], top


def test_every_lesson_package_has_only_the_known_files():
    notebooks = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [name[1:3] for name in LESSONS] == notebooks, LESSONS   # one lesson package per lesson notebook
    for lesson in LESSONS:
        files = {p.name for p in (PACKAGE / "lessons" / lesson).glob("*.py")}
        assert {"__init__.py", "data.py", "views.py"} <= files <= {"__init__.py", "data.py", "measure.py",
                                                                  "plots.py", "views.py"}, (lesson, files)


def test_no_import_cycle_anywhere():
    assert find_cycles(kvsim_edges()) == []


def test_the_cycle_finder_finds_cycles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(edges) == [["a", "b", "c"]]


def test_folders_import_only_lower_layers():
    bad = []
    for name in MODULES:
        for target, line in imports(name):
            if target.startswith("kvsim.") and not allowed(name, target):
                bad.append(f"{name}:{line} imports {target}")
    assert not bad, bad


def test_every_kvsim_import_names_a_module_or_a_package_member():
    # `from .gone import x` would otherwise pass the folder rule (its folder is allowed) unnoticed
    bad = [f"{name}:{line} imports {target}" for name in MODULES for target, line in imports(name)
           if target.startswith("kvsim") and target not in MODULES]
    assert not bad, bad


def test_core_calc_imports_only_core_calc():
    calc = {name.split(".")[2] for name in MODULES if folder(name) == "calc" and name != "kvsim.calc"}
    assert calc <= CORE_CALC, f"not in CORE_CALC: {sorted(calc - CORE_CALC)} (a lesson's numbers go to its data.py)"
    bad = [f"{name}:{line} imports {target}" for name in MODULES if folder(name) == "calc"
           for target, line in imports(name) if target.startswith("kvsim.")
           and not (target == "kvsim.calc" or target.split(".")[1:2] == ["calc"] and target.split(".")[2] in CORE_CALC)]
    assert not bad, bad


def test_the_rules_catch_a_core_module_importing_lesson_data():
    # what tests above would report if calc/memory.py imported lesson 09's draft round
    assert not allowed("kvsim.calc.memory", "kvsim.lessons.l09_speculation.data")
    assert not allowed("kvsim.lessons.l04_windows.views", "kvsim.lessons.l05_hybrids.data")
    assert not allowed("kvsim.lessons.l04_windows.data", "kvsim.lessons.l04_windows.measure")
    assert not allowed("kvsim.lessons.l04_windows.plots", "kvsim.ui.base")
    assert not allowed("kvsim.lessons.l04_windows.views", "kvsim.measure.growth")
    assert not allowed("kvsim.ui.base", "kvsim.measure.growth")
    assert allowed("kvsim.lessons.l04_windows.views", "kvsim.lessons.l04_windows.measure")
    assert allowed("kvsim.lessons.l04_windows.plots", "kvsim.ui.style")
    assert allowed("kvsim.lessons.exercises", "kvsim.lessons.l09_speculation.data")
    assert not allowed("kvsim.lessons.exercises", "kvsim.lessons.l09_speculation.measure")


@pytest.mark.parametrize("own", ["ui", "lesson.data", "lesson.plots", "lesson.views", "lessons", "calc", "serving"])
def test_no_mlx_above_measure_or_in_pure_folders(own):
    bad = [f"{name}:{line} imports {target}" for name in MODULES if folder(name) == own
           for target, line in imports(name) if target.split(".")[0] == "mlx"]
    assert not bad, bad


PURE_MODULES = ([name for name in MODULES if folder(name) in PURE_FOLDERS + ("lesson.data",)]
                + ["kvsim", "kvsim.cli", "kvsim.lessons"])
UI_MODULES = [name for name in MODULES if folder(name) == "ui"]


def _loaded_in_fresh_interpreters(names, heavy, batch=8):
    """{module: sorted heavy top-level packages importing it loaded}, one fresh interpreter per module
    (a module must not rely on another one having loaded first); at most ``batch`` at a time."""
    code = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))")
    loaded = {}
    for i in range(0, len(names), batch):
        procs = {name: subprocess.Popen([sys.executable, "-c", code, name], cwd=ROOT, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True) for name in names[i:i + batch]}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"importing {name} failed: {err.strip().splitlines()[-1:]}"
            loaded[name] = out.strip()
    return {name: got for name, got in loaded.items() if got != "[]"}


def test_pure_modules_load_nothing_heavy_in_a_fresh_interpreter():
    # calc, serving, every lesson's data.py and kvsim.lessons itself (VIEWS resolves lazily)
    assert _loaded_in_fresh_interpreters(PURE_MODULES, HEAVY) == {}


def test_ui_loads_no_mlx_in_a_fresh_interpreter():
    assert _loaded_in_fresh_interpreters(UI_MODULES, ("mlx",)) == {}


def test_one_view_lookup_imports_one_lesson():
    code = ("import sys; from kvsim.lessons import VIEWS; VIEWS['masks']; "
            "print(sorted({m.split('.')[2] for m in sys.modules if m.startswith('kvsim.lessons.l')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['l04_windows']"


# Views compute nothing: every number a view shows (and every label built from a number) comes from a pure function
# in its lesson's data.py or in calc that a test checks. A view may format a number it is given ({n:,}), pick
# items, and pass values on; it may not do arithmetic. No allow-list: layout numbers are literals or named constants.
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)
NUMBER_BUILTINS = {"min", "max", "round", "sum", "abs", "pow", "divmod"}
NUMBER_METHODS = {"sum", "mean", "min", "max", "prod", "cumsum", "round"}  # numpy reductions on an array


def view_arithmetic(source: str, filename: str = "<views>") -> list[str]:
    """'file:line what' for each arithmetic operator, unary minus of a non-literal, or number builtin/reduction."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        what = None
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ARITHMETIC):
            what = f"{type(node.op).__name__}: {ast.unparse(node)}"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not isinstance(node.operand,
                                                                                                 ast.Constant):
            what = f"USub: {ast.unparse(node)}"
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in NUMBER_BUILTINS or \
                    isinstance(f, ast.Attribute) and f.attr in NUMBER_METHODS:
                what = f"call: {ast.unparse(node)}"
        if what:
            found.append(f"{filename}:{node.lineno} {what}")
    return found


def test_views_do_no_arithmetic():
    views = sorted((PACKAGE / "lessons").glob("l[0-9][0-9]_*/views.py"))
    assert len(views) == len(LESSONS)
    bad = [hit for p in views for hit in view_arithmetic(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    assert not bad, "move these into the lesson's data.py (a named, tested function):\n" + "\n".join(bad)


def test_the_view_scan_finds_arithmetic():
    snippet = """
def draw(ax, n, w, steps, row, s):
    a = n // 1024
    b = f"{w / 2**30:.2f} GiB"
    c = steps[min(n, len(steps) - 1)]
    d = int(row.sum())
    e = "x" + s
    n += 1
    f = -n
    g = round(w), abs(w), max(1, n), sum(steps)
    ok = f"{n:,} tokens", steps[-1], len(steps), dict(a=1.5, b=-2)
"""
    hits = [h.split(" ", 1)[1].split(":")[0] for h in view_arithmetic(snippet)]
    # min, row.sum, round, abs, max, sum: six calls; "x" + s and n += 1: two Adds; -2 is a literal
    assert sorted(hits) == sorted(["FloorDiv", "Div", "Pow", "Sub", "Add", "Add", "USub"] + ["call"] * 6), hits
