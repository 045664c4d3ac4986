"""kvsim, its tests, benchmarks, tools and notebooks use the public API of their dependencies only: no private
name of matplotlib, mlx-lm, transformers or vLLM, and no kvsim attribute stored on a matplotlib object (issue 16).
Checked on the syntax tree of every .py file under kvsim/, tests/, benchmarks/, tools/ and notebooks/.

What counts as a private name of a library: any ``_name`` (not a ``__dunder__``, not IPython's ``_repr_*_``
display protocol) that the installed library defines or uses: every such identifier in its sources (and, for
matplotlib, its stubs and every such attribute of the classes and modules of its public modules, which also
covers the compiled extensions: ``FT2Font._render_glyph`` appears in no .py file). vLLM is not installed here
(its planning code is read from its unzipped source, tools/vllm_golden.py): for it only the syntactic rules apply.

Flagged, for each library: ``from lib... import _x`` and imports of ``lib...._module`` (also as a string, e.g.
``importlib.import_module("mlx_lm._version")``); ``name._x`` (also getattr, setattr, hasattr, delattr) where
``name`` is bound by an import from the library; ``obj._x`` with ``_x`` one of the library's private names, in a
file that imports the library; in a class derived from a library class, ``self._x``, ``super()._x`` and a
method ``def _x`` (overriding a private method); and anywhere, an attribute named ``_kvsim...`` (kept state
belongs in kvsim's own objects, see :class:`kvsim.ui.style.Kept`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("kvsim", "tests", "benchmarks", "tools", "notebooks")  # notebooks: their jupytext .py files
# top-level import name -> the library it belongs to
LIBRARIES = {"matplotlib": "matplotlib", "mpl_toolkits": "matplotlib", "mlx_lm": "mlx_lm",
             "transformers": "transformers", "vllm": "vllm"}
MATPLOTLIB_PUBLIC_MODULES = [
    "matplotlib", "matplotlib.artist", "matplotlib.axes", "matplotlib.axis", "matplotlib.backend_bases",
    "matplotlib.backends.backend_agg", "matplotlib.collections", "matplotlib.colors", "matplotlib.figure",
    "matplotlib.font_manager", "matplotlib.ft2font", "matplotlib.image", "matplotlib.layout_engine",
    "matplotlib.legend", "matplotlib.lines", "matplotlib.mathtext", "matplotlib.offsetbox", "matplotlib.patches",
    "matplotlib.path", "matplotlib.spines", "matplotlib.text", "matplotlib.ticker", "matplotlib.transforms"]
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}
DOTTED_LIBRARY_NAME = re.compile(rf"(?:{'|'.join(LIBRARIES)})(?:\.\w+)+")


def _is_private(name: str) -> bool:
    return (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and not re.fullmatch(r"_repr_\w+_", name))


@cache
def private_names(library: str) -> frozenset[str]:
    """Every private name of the installed ``library`` (empty when it is not installed): identifiers in its
    sources (matplotlib: also its stubs, and attributes of the classes and modules of its public modules)."""
    spec = importlib.util.find_spec(library)
    if spec is None:
        return frozenset()
    names = set()
    for path in Path(spec.origin).parent.rglob("*.py*"):
        if path.suffix in (".py", ".pyi") and "tests" not in path.parts:
            names |= set(re.findall(r"(?<![\w])_[A-Za-z]\w*", path.read_text(encoding="utf-8", errors="replace")))
    for module_name in MATPLOTLIB_PUBLIC_MODULES if library == "matplotlib" else ():
        module = importlib.import_module(module_name)
        names |= set(dir(module))
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("matplotlib"):
                names |= set(dir(cls))
    return frozenset(n for n in names if _is_private(n))


def all_private_names() -> dict[str, frozenset[str]]:
    return {library: private_names(library) for library in set(LIBRARIES.values())}


def _root_name(node) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _attribute_call(node) -> tuple[ast.expr, str] | None:
    """(object, attribute name) of ``getattr(obj, "name")`` (or setattr, hasattr, delattr), else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_CALLS
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return node.args[0], node.args[1].value
    return None


def _attribute(node) -> tuple[ast.expr, str] | None:
    """(object, attribute name) of ``obj.name`` or ``getattr(obj, "name")``, else None."""
    return (node.value, node.attr) if isinstance(node, ast.Attribute) else _attribute_call(node)


def _private_parts(dotted: str) -> list[str]:
    return [part for part in dotted.split(".") if _is_private(part)]


def private_uses(source: str, private: dict[str, frozenset[str]]) -> list[tuple[int, str]]:
    """(line, name) of every private name of a library used in ``source`` (see the module docstring);
    ``private``: each library's private names (:func:`all_private_names`)."""
    nodes = list(ast.walk(ast.parse(source)))
    found, bound, imported = [], {}, set()  # bound: name -> the library whose object this file binds it to
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module.split(".")[0] in LIBRARIES:
            library = LIBRARIES[n.module.split(".")[0]]
            imported.add(library)
            bound |= {a.asname or a.name: library for a in n.names}
            found += [(n.lineno, part) for part in _private_parts(n.module)]
            found += [(n.lineno, a.name) for a in n.names if _is_private(a.name)]
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] in LIBRARIES:
                    imported.add(LIBRARIES[a.name.split(".")[0]])
                    bound[(a.asname or a.name).split(".")[0]] = LIBRARIES[a.name.split(".")[0]]
                    found += [(n.lineno, part) for part in _private_parts(a.name)]
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and DOTTED_LIBRARY_NAME.fullmatch(n.value):
            found += [(n.lineno, part) for part in _private_parts(n.value)]  # a module named in a string
        attribute = _attribute(n)
        if attribute is not None and attribute[1].startswith("_") and attribute[1].lstrip("_").startswith("kvsim"):
            found.append((n.lineno, attribute[1]))  # anywhere: kvsim state stored as someone's private attribute
    for n in nodes:
        attribute = _attribute(n)
        if attribute is None or not _is_private(attribute[1]):
            continue
        obj, name = attribute
        root = _root_name(obj)
        if root in bound:  # a private attribute of a name imported from a library
            found.append((n.lineno, name))
        elif root not in ("self", "cls") and any(name in private[library] for library in imported):
            found.append((n.lineno, name))  # a library's private name, on an object of this file
    for cls in (n for n in nodes if isinstance(n, ast.ClassDef)):  # subclasses of library classes
        libraries = {bound[_root_name(base)] for base in cls.bases if _root_name(base) in bound}
        names = frozenset().union(*(private[library] for library in libraries))
        for n in ast.walk(cls) if libraries else ():
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names:
                found.append((n.lineno, n.name))  # overrides a private method
            if isinstance(n, ast.Attribute) and n.attr in names and (
                    _root_name(n.value) in ("self", "cls")
                    or (isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                        and n.value.func.id == "super")):
                found.append((n.lineno, n.attr))
    return sorted(set(found))


def _python_files():
    for folder in SCANNED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_private_name_of_a_dependency_in_kvsim_its_tests_benchmarks_tools_or_notebooks():
    private = all_private_names()
    files = list(_python_files())
    uses = {f"{path.relative_to(ROOT)}:{line}": name for path in files
            for line, name in private_uses(path.read_text(encoding="utf-8"), private)}
    assert uses == {}
    assert len(files) > 200 and all(private[lib] for lib in ("matplotlib", "mlx_lm", "transformers"))  # it read


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
    found = {name for _, name in private_uses(old, all_private_names())}
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
    assert private_uses(clean, all_private_names()) == []


def test_the_check_finds_private_names_of_mlx_lm_transformers_and_vllm():
    # _get_classes is what kvsim.measure.mlx_lm_bytes used before; the others are private names of the
    # installed mlx-lm and transformers in each form the check knows (vLLM: syntax only, it is not installed)
    old = '''
import importlib
import mlx_lm.utils
from mlx_lm.utils import _get_classes, load_model
from mlx_lm.models import cache
from transformers import DynamicCache
import transformers.modeling_utils as mu
from vllm.v1 import _private_module
from vllm.v1.core import kv_cache_utils


def build(config):
    model_cls, args_cls = _get_classes(config)
    version = importlib.import_module("mlx_lm._version").__version__
    return mlx_lm.utils._get_classes(config), load_model._private, getattr(cache, "_BaseCache", None), version


def transformers_cache(config):
    c = DynamicCache(config=config)
    return c._distributed_cache_data, mu._init_weights, kv_cache_utils._private_helper


class Mine(DynamicCache):
    def _init_weights(self, module):
        return super()._initialize_weights(module), self._kvsim_own
'''
    found = {name for _, name in private_uses(old, all_private_names())}
    assert found == {"_get_classes", "_version", "_private", "_BaseCache", "_distributed_cache_data",
                     "_init_weights", "_private_module", "_private_helper", "_initialize_weights", "_kvsim_own"}


def test_public_mlx_lm_and_transformers_pass():
    clean = '''
import importlib
from mlx_lm.utils import MODEL_REMAPPING
from transformers import DynamicCache


class Ours:
    def __init__(self):
        self._built = {}

    def same(self, other):
        return other._built == self._built


def build(config):
    module = importlib.import_module(f"mlx_lm.models.{MODEL_REMAPPING.get(config['model_type'])}")
    return module.Model(module.ModelArgs.from_dict(config)), DynamicCache.__name__, module.__version__
'''
    assert private_uses(clean, all_private_names()) == []
