"""make_caches: one layout per layer kind; summed nbytes equal the calculator for real dtypes."""

import mlx.core as mx
import pytest
from lockstep import random_kv

from kvsim.cache import (
    ChunkedKVCache,
    KVCache,
    LatentCache,
    QuantizedKVCache,
    RecurrentStateCache,
    RotatingKVCache,
    make_caches,
)
from kvsim.calc.config import LayerSpec, ModelSpec
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.memory import (
    allocated_bytes,
    fixed_state_bytes,
    kv_bytes,
    parse_kv_dtype,
)
from kvsim.calc.registry import load_model

BASE = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "vocab_size": 100}
CONFIGS = {
    "gemma3": {**BASE, "model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window": 8,
               "sliding_window_pattern": 3},
    "llama4": {**BASE, "model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 8},
    "deepseek": {**BASE, "model_type": "deepseek_v3", "num_hidden_layers": 2, "kv_lora_rank": 32,
                 "qk_rope_head_dim": 32},
    "jamba": {**BASE, "model_type": "jamba", "num_hidden_layers": 4, "attn_layer_period": 2,
              "attn_layer_offset": 1, "mamba_d_state": 4, "hidden_size": 16, "head_dim": 32},
}


def _feed(caches, spec, tokens, batch, dtype, seed=0):
    """Run ``tokens`` (a list of chunk sizes) through every attention/MLA cache of the model."""
    for i, S in enumerate(tokens):
        for j, (layer, cache) in enumerate(zip(spec.layers, caches)):
            s = seed * 10_000 + i * 100 + j  # other K/V for every call, chunk and layer
            if layer.kind == "mla":  # latent (batch, 1, S, kv_lora_rank), rope key (batch, 1, S, qk_rope_head_dim)
                cache.update_and_fetch(*random_kv(S, B=batch, H=1, D=layer.kv_lora_rank,
                                                  Dv=layer.qk_rope_head_dim, dtype=dtype, seed=s))
            elif layer.has_kv_heads:
                cache.update_and_fetch(*random_kv(S, B=batch, H=layer.num_key_value_heads, D=layer.head_dim,
                                                  Dv=layer.v_head_dim, dtype=dtype, seed=s))


def test_layout_per_layer_kind():
    gemma = make_caches(from_hf_config(CONFIGS["gemma3"]), step=16)
    assert [type(c) for c in gemma] == [RotatingKVCache, RotatingKVCache, KVCache] * 2
    assert gemma[0].max_size == 8 and gemma[0].keep == 0 and gemma[2].step == 16
    llama4 = make_caches(from_hf_config(CONFIGS["llama4"]))
    assert [type(c) for c in llama4] == [ChunkedKVCache] * 3 + [KVCache]  # every 4th layer global
    assert llama4[0].chunk_size == 8
    assert [type(c) for c in make_caches(from_hf_config(CONFIGS["deepseek"]))] == [LatentCache] * 2
    jamba = make_caches(from_hf_config(CONFIGS["jamba"]), batch=3, dtype=mx.bfloat16)
    assert [type(c) for c in jamba] == [RecurrentStateCache, KVCache] * 2
    assert jamba[0].batch == 3 and jamba[0].dtype == mx.bfloat16
    spec = ModelSpec("x", "custom", (LayerSpec("none"), LayerSpec("full", 1, 8)), 8, 1, 10)
    assert [type(c) for c in make_caches(spec)] == [type(None), KVCache]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("dtype,dt_name", [(mx.bfloat16, "bf16"), (mx.float16, "fp16")])
def test_summed_nbytes_equal_the_calculator(name, dtype, dt_name):
    spec = from_hf_config(CONFIGS[name])
    caches = make_caches(spec, batch=2, step=16, dtype=dtype)
    chunks = [5, 1, 1, 20, 1]
    _feed(caches, spec, chunks, 2, dtype)
    T = sum(chunks)
    kv = sum(c.nbytes for layer, c in zip(spec.layers, caches) if layer.kind != "recurrent")
    assert kv == allocated_bytes(spec, T, batch=2, kv_dtype=dt_name, step=16)
    used = sum(c.used_bytes for layer, c in zip(spec.layers, caches) if layer.kind != "recurrent")
    assert used == kv_bytes(spec, T, batch=2, kv_dtype=dt_name)
    state = sum(c.nbytes for layer, c in zip(spec.layers, caches) if layer.kind == "recurrent")
    assert state == fixed_state_bytes(spec, batch=2, state_dtype=dt_name)


@pytest.mark.parametrize("name", ["gemma3", "deepseek", "jamba"])
def test_quantized_storage_is_independent_of_layout(name):
    spec = from_hf_config(CONFIGS[name])
    caches = make_caches(spec, kv_dtype="q4", group_size=32, step=16)
    for layer, c in zip(spec.layers, caches):
        if layer.kind != "recurrent":
            assert isinstance(c, QuantizedKVCache) and c.bits == 4 and c.group_size == 32
            assert c.max_size == (layer.sliding_window if layer.kind == "sliding" else None)
    _feed(caches, spec, [9, 1, 12], 1, mx.bfloat16)
    kv = sum(c.nbytes for layer, c in zip(spec.layers, caches) if layer.kind != "recurrent")
    q4 = parse_kv_dtype("q4", group_size=32, scale_dtype="bf16")
    assert kv == allocated_bytes(spec, 22, kv_dtype=q4, step=16)


@pytest.mark.parametrize("config,kwargs,message", [
    ("llama4", {"kv_dtype": "q4"}, "chunked layers have no quantized layout"),
    ("gemma3", {"kv_dtype": "q8", "keep": 4}, "keep no sink tokens"),
    ("gemma3", {"kv_dtype": "fp8"}, "has no MLX cache layout"),
    ("gemma3", {"kv_dtype": "int5"}, "is unknown"),
    ("gemma3", {"kv_dtype": "q4", "group_size": 48}, "group_size 48"),
])
def test_unsupported_combinations_raise(config, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_caches(from_hf_config(CONFIGS[config]), **kwargs)


def test_options_reach_the_caches():
    spec = from_hf_config(CONFIGS["gemma3"])
    caches = make_caches(spec, inplace=False, keep=2, rewind_tokens=3, ordered=False, kv_dtype="bf16")
    assert caches[0].keep == 2 and caches[0].rewind_tokens == 3 and caches[2].inplace is False
    assert caches[0].ordered is False
    with pytest.raises(ValueError, match="spec must be a kvsim.calc.config.ModelSpec"):
        make_caches({"model_type": "llama"})


# ---------------------------------------------------------------- issue 12, defects 1 and 2


def _all_layouts():
    """One used cache of every layout make_caches builds (the tiny CONFIGS above), plus a quantized one."""
    out = []
    for name in sorted(CONFIGS):
        spec = from_hf_config(CONFIGS[name])
        caches = make_caches(spec, step=16)
        _feed(caches, spec, [9, 1], 1, mx.float32)
        out += [(layer, c) for layer, c in zip(spec.layers, caches)]
    spec = from_hf_config(CONFIGS["gemma3"])
    caches = make_caches(spec, kv_dtype="q4", group_size=32, step=16)
    _feed(caches, spec, [9, 1], 1, mx.float32)
    return out + list(zip(spec.layers, caches))


def test_deepcopy_of_used_caches_is_independent():
    """Defect 1: copy.deepcopy(used cache) raised 'cannot pickle Dtype'; the copy must not share arrays."""
    import copy

    from reference_cache import fingerprint

    for layer, cache in _all_layouts():
        if isinstance(cache, RecurrentStateCache):
            cache["ssm"] = mx.full(cache["ssm"].shape, 3.0, dtype=cache["ssm"].dtype)
            cache.advance(10)
        before = fingerprint(cache)
        twin = copy.deepcopy(cache)
        assert fingerprint(twin) == before, type(cache).__name__
        if isinstance(cache, RecurrentStateCache):
            cache["ssm"][:, 0] = 7.0                # an in-place write into the original's array
            cache.advance(1)
        else:
            spec = ModelSpec("x", "custom", (layer,), 8, 1, 10)
            _feed([cache], spec, [3], 1, mx.float32, seed=1)
        assert fingerprint(twin) == before and fingerprint(cache) != before, type(cache).__name__


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fresh_caches_are_trimmable_as_mlx_lm_reads_it(name):
    """Defect 2: a fresh cache said is_trimmable() False; mlx-lm reads it as a capability."""
    caches = make_caches(from_hf_config(CONFIGS[name]))
    for c in caches:
        assert c.is_trimmable() == (not isinstance(c, RecurrentStateCache)), type(c).__name__
    quantized = make_caches(from_hf_config(CONFIGS["gemma3"]), kv_dtype="q8")
    assert all(c.is_trimmable() for c in quantized)


def test_layers_with_attention_and_a_state_are_refused_not_half_cached():
    # Falcon-H1 runs attention and Mamba-2 side by side in every layer: a KVCache alone would drop the state
    spec = load_model("falcon-h1-0.5b")
    with pytest.raises(ValueError, match="K/V and a mamba2 state side by side"):
        make_caches(spec)
