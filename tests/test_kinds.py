"""One source for layer kinds: :class:`kvsim.calc.config.Kind` and the LayerSpec properties that ask about it."""

import ast
from pathlib import Path

import pytest

from kvsim.calc.config import ConfigError, Kind, LayerSpec
from kvsim.calc.registry import load_model, model_names

ROOT = Path(__file__).resolve().parents[1]

LAYERS = {
    "full": LayerSpec("full", num_key_value_heads=8, head_dim=128),
    "sliding": LayerSpec("sliding", num_key_value_heads=8, head_dim=128, sliding_window=4096),
    "chunked": LayerSpec("chunked", num_key_value_heads=8, head_dim=128, attention_chunk_size=8192),
    "mla": LayerSpec("mla", kv_lora_rank=512, qk_rope_head_dim=64),
    "recurrent": LayerSpec("recurrent", recurrent_family="mamba2", state_shapes=(("ssm", (8, 64, 128)),)),
    "none": LayerSpec("none"),
}
# (has_kv_heads, caches_tokens, is_windowed): MLA is attention that caches tokens, but has no K/V heads
EXPECTED = {"full": (True, True, False), "sliding": (True, True, True), "chunked": (True, True, True),
            "mla": (False, True, False), "recurrent": (False, False, False), "none": (False, False, False)}


def test_every_kind_has_a_layer_here():
    assert tuple(LAYERS) == Kind.ALL == ("full", "sliding", "chunked", "mla", "recurrent", "none")


@pytest.mark.parametrize("kind", Kind.ALL)
def test_layer_properties_answer_from_kind(kind):
    layer = LAYERS[kind]
    assert (layer.has_kv_heads, layer.caches_tokens, layer.is_windowed) == EXPECTED[kind]
    assert (layer.window_tokens is not None) == layer.is_windowed


def test_unknown_kind_is_refused_with_the_list():
    with pytest.raises(ConfigError, match="is not one of full, sliding, chunked, mla, recurrent, none"):
        LayerSpec("dense")


def test_every_registry_layer_is_a_known_kind():
    assert {layer.kind for name in model_names() for layer in load_model(name).layers} <= set(Kind.ALL)


def _kind_tuples(path: Path):
    """Tuple or list literals of two or more kind names, as (line, values)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and e.value in Kind.ALL for e in node.elts):
            yield node.lineno, tuple(e.value for e in node.elts)


def test_no_module_spells_out_its_own_tuple_of_kinds():
    found = [f"{p.relative_to(ROOT)}:{line} {values}" for p in sorted((ROOT / "kvsim").rglob("*.py"))
             for line, values in _kind_tuples(p) if p != ROOT / "kvsim" / "calc" / "config.py"]
    assert found == [], found
