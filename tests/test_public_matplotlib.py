"""kvsim and its tests use matplotlib's public API only: no private matplotlib name, no kvsim attribute stored on
a matplotlib object (issue 16). Checked on the syntax tree of every file under kvsim/ and tests/.

What counts as a private matplotlib name: any ``_name`` (not a ``__dunder__``, not IPython's ``_repr_*_``
display protocol) that the installed matplotlib defines or uses: every such identifier in its sources and
stubs, and every such attribute of the classes and modules of its public modules (which also covers the
compiled extensions: ``FT2Font._render_glyph`` appears in no .py file).

Flagged: ``from matplotlib... import _x`` and imports of ``matplotlib...._module``; ``obj._x`` and
``getattr(obj, "_x")`` (also setattr, hasattr, delattr) with ``_x`` one of those names, in a file that imports
matplotlib; in a class derived from a matplotlib class, ``self._x``, ``super()._x`` and a method ``def _x``
(overriding a private method); and anywhere, an attribute named ``_kvsim...`` (kept state belongs in kvsim's
own objects, see :class:`kvsim.ui.style.Kept`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import matplotlib

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("kvsim", "tests")
PUBLIC_MODULES = ["matplotlib", "matplotlib.artist", "matplotlib.axes", "matplotlib.axis", "matplotlib.backend_bases",
                  "matplotlib.backends.backend_agg", "matplotlib.collections", "matplotlib.colors",
                  "matplotlib.figure", "matplotlib.font_manager", "matplotlib.ft2font", "matplotlib.image",
                  "matplotlib.layout_engine", "matplotlib.legend", "matplotlib.lines", "matplotlib.mathtext",
                  "matplotlib.offsetbox", "matplotlib.patches", "matplotlib.path",
                  "matplotlib.spines", "matplotlib.text", "matplotlib.ticker", "matplotlib.transforms"]
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}


def _is_private(name: str) -> bool:
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and not re.fullmatch(r"_repr_\w+_", name))


@cache
def matplotlib_private_names() -> frozenset[str]:
    """Every private name of the installed matplotlib: identifiers in its sources and stubs, attributes of the
    classes and modules of its public modules."""
    names = set()
    for path in Path(matplotlib.__file__).parent.rglob("*.py*"):
        if path.suffix in (".py", ".pyi") and "tests" not in path.parts:
            names |= set(re.findall(r"(?<![\w])_[A-Za-z]\w*", path.read_text(encoding="utf-8", errors="replace")))
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names |= set(dir(module))
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("matplotlib"):
                names |= set(dir(cls))
    return frozenset(n for n in names if _is_private(n))


MATPLOTLIB = ("matplotlib", "mpl_toolkits")


def _root_name(node) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _attribute_string(node) -> str | None:
    """The attribute name of ``getattr(obj, "name")`` (or setattr, hasattr, delattr), else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_CALLS
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return node.args[1].value
    return None


def private_uses(source: str, private: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) of every private matplotlib name used in ``source`` (see the module docstring)."""
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    found, bound, imports_matplotlib = [], set(), False  # bound: names this file binds to matplotlib objects
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in MATPLOTLIB:
            imports_matplotlib = True
            bound |= {a.asname or a.name for a in n.names}
            found += [(n.lineno, part) for part in n.module.split(".") if part.startswith("_")]
            found += [(n.lineno, a.name) for a in n.names if _is_private(a.name)]
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] in MATPLOTLIB:
                    imports_matplotlib = True
                    bound.add((a.asname or a.name).split(".")[0])
                    found += [(n.lineno, part) for part in a.name.split(".") if part.startswith("_")]
        name = n.attr if isinstance(n, ast.Attribute) else _attribute_string(n)
        if name is not None and name.startswith("_") and name.lstrip("_").startswith("kvsim"):
            found.append((n.lineno, name))  # anywhere: kvsim state stored as someone's private attribute
    if imports_matplotlib:  # attributes of anything but self / cls (a kvsim class's own are checked below)
        for n in nodes:
            if isinstance(n, ast.Attribute) and n.attr in private and _root_name(n.value) not in ("self", "cls"):
                found.append((n.lineno, n.attr))
            elif _attribute_string(n) in private:
                found.append((n.lineno, _attribute_string(n)))
    for cls in (n for n in nodes if isinstance(n, ast.ClassDef)):  # subclasses of matplotlib classes
        if not any(_root_name(base) in bound for base in cls.bases):
            continue
        for n in ast.walk(cls):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in private:
                found.append((n.lineno, n.name))  # overrides a private method
            if isinstance(n, ast.Attribute) and n.attr in private and (
                    _root_name(n.value) in ("self", "cls")
                    or (isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                        and n.value.func.id == "super")):
                found.append((n.lineno, n.attr))
    return sorted(set(found))


def _python_files():
    for folder in SCANNED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_private_matplotlib_name_in_kvsim_or_its_tests():
    private = matplotlib_private_names()
    uses = {f"{path.relative_to(ROOT)}:{line}": name for path in _python_files()
            for line, name in private_uses(path.read_text(encoding="utf-8"), private)}
    assert uses == {}


def test_the_check_finds_what_the_old_renderer_used():
    # the private names kvsim's views stood on before issue 16, each in the form it had; all exist in
    # matplotlib 3.8 and later, so the check must find every one
    old = '''
import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.text import _get_text_metrics_with_cache
from matplotlib.font_manager import fontManager


class FrameRenderer(RendererAgg):
    def _update_methods(self):
        super()._update_methods()
        self.draw_markers = self._renderer.draw_markers

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        font = self._prepare_font(prop)
        fontManager._find_fonts_by_props(prop)


class FrameCanvas(FigureCanvasAgg):
    def get_renderer(self):
        if self._lastKey is None:
            return None


def titles(ax):
    ax._autotitlepos = False
    return [ax.title, getattr(ax, "_left_title", None), ax._right_title]


def keep(ax, artists):
    ax._kvsim_kept = artists
    return getattr(ax, "_kvsim_kept", None)
'''
    found = {name for _, name in private_uses(old, matplotlib_private_names())}
    assert found == {"_get_text_metrics_with_cache", "_update_methods", "_renderer", "_prepare_font",
                     "_find_fonts_by_props", "_lastKey", "_autotitlepos", "_left_title", "_right_title",
                     "_kvsim_kept"}


def test_kvsim_own_private_names_and_public_matplotlib_pass():
    clean = '''
import matplotlib as mpl
from matplotlib.artist import Artist


class Kept(Artist):
    def __init__(self, artists):
        super().__init__()
        self.artists = artists

    def draw(self, renderer):
        pass


def keep(ax, view):
    ax.add_artist(Kept([]))
    view.drawn = mpl.rcParams["axes.titley"]
    return view._repr_mimebundle_()
'''
    assert private_uses(clean, matplotlib_private_names()) == []
