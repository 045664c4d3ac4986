"""The folder list is the architecture: layers import downward only, and nothing imports in a circle.

Every import counts, also one inside a function and one between two modules of the same folder.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "kvsim"

# What each folder may import from kvsim (its own folder always). The top-level cli may use the pure
# folders, and measure/ for `kvsim measure` (imported inside that command only).
ALLOWED = {
    "calc": set(),
    "serving": {"calc"},
    "cache": {"calc", "serving"},
    "model": {"calc", "cache"},
    "decode": {"calc", "cache", "model"},
    "measure": {"calc", "serving", "cache", "model", "decode"},
    "ui": set(),
    "plots": {"calc", "ui"},
    "widgets": {"calc", "serving", "measure", "plots", "ui"},
    "cli": {"calc", "serving", "measure"},
    "__main__": {"cli"},
    "__init__": set(),
}
PURE_FOLDERS = ("calc", "serving")
HEAVY = ("mlx", "matplotlib", "ipywidgets")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


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
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


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


def test_no_import_cycle_anywhere():
    assert find_cycles(kvsim_edges()) == []


def test_the_cycle_finder_finds_cycles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(edges) == [["a", "b", "c"]]


def test_folders_import_only_lower_layers():
    bad = []
    for name in MODULES:
        own = folder(name)
        for target, line in imports(name):
            if target.startswith("kvsim.") and folder(target) not in ALLOWED[own] | {own}:
                bad.append(f"{name}:{line} imports {target}")
    assert not bad, bad


@pytest.mark.parametrize("own", ["ui", "widgets", "plots", "calc", "serving"])
def test_no_mlx_above_measure_or_in_pure_folders(own):
    bad = [f"{name}:{line} imports {target}" for name in MODULES if folder(name) == own
           for target, line in imports(name) if target.split(".")[0] == "mlx"]
    assert not bad, bad


PURE_MODULES = [name for name in MODULES if folder(name) in PURE_FOLDERS] + ["kvsim", "kvsim.cli"]


def test_pure_modules_load_nothing_heavy_in_a_fresh_interpreter():
    # one fresh interpreter per module: a module must not rely on another one having loaded first
    code = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))")
    procs = {name: subprocess.Popen([sys.executable, "-c", code, name], cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for name in PURE_MODULES}
    loaded = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"importing {name} failed: {err.strip().splitlines()[-1:]}"
        loaded[name] = out.strip()
    assert {name: got for name, got in loaded.items() if got != "[]"} == {}
