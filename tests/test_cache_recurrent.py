"""RecurrentStateCache: calculator bytes per family, snapshot/restore, checks, persistence."""

import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import load_cache, save_cache
from kvsim.cache.recurrent import RecurrentSnapshot, RecurrentStateCache
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.memory import state_bytes

TINY_CONFIGS = {
    "mamba": {"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 16, "intermediate_size": 32,
              "state_size": 4, "conv_kernel": 4, "vocab_size": 50},
    "mamba2": {"model_type": "mamba2", "num_hidden_layers": 2, "hidden_size": 16, "expand": 2,
               "state_size": 8, "head_dim": 8, "n_groups": 1, "vocab_size": 50},
    "gated_deltanet": {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 32,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
                       "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                       "linear_key_head_dim": 8, "linear_value_head_dim": 8, "vocab_size": 50},
    "rg_lru": {"model_type": "recurrent_gemma", "num_hidden_layers": 3, "hidden_size": 16,
               "num_attention_heads": 2, "attention_window_size": 8, "lru_width": 24, "vocab_size": 50},
}
DTYPES = {"fp32": mx.float32, "bf16": mx.bfloat16, "fp16": mx.float16}


def _np(a):
    return np.array(a.view(mx.uint16) if a.dtype == mx.bfloat16 else a)


def _layer(family):
    spec = from_hf_config(TINY_CONFIGS[family])
    return next(layer for layer in spec.layers if layer.kind == "recurrent")


# the tensors each family's reference implementation keeps in fp32 whatever the model dtype
REFERENCE_FP32 = {"mamba": set(), "mamba2": {"ssm"}, "gated_deltanet": {"ssm"}, "rg_lru": {"ssm"}}


@pytest.mark.parametrize("family", sorted(TINY_CONFIGS))
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_nbytes_equals_calculator_state_bytes(family, dtype):
    layer = _layer(family)
    assert layer.recurrent_family == family
    cache = RecurrentStateCache.for_layer(layer, batch=3, dtype=DTYPES[dtype])
    assert cache.nbytes == 3 * state_bytes(layer, model_dtype=dtype) == cache.used_bytes
    for name, shape in layer.state_shapes:
        want = mx.float32 if name in REFERENCE_FP32[family] else DTYPES[dtype]
        assert cache[name].shape == (3, *shape) and cache[name].dtype == want == cache.dtypes[name]
    cache.advance(1000)  # the state does not grow with tokens
    assert cache.nbytes == 3 * state_bytes(layer, model_dtype=dtype) and cache.capacity == 0
    forced = RecurrentStateCache.for_layer(layer, batch=3, dtype=mx.float32, state_dtype=dtype)
    assert set(forced.dtypes.values()) == {DTYPES[dtype]}  # an explicit state dtype overrides all
    assert forced.nbytes == 3 * state_bytes(layer, dtype)


def _fingerprint(cache):
    return cache.offset, [_np(cache[n]) for n in cache.names]


def _equal(a, b):
    return a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))


WRITES = st.lists(st.tuples(st.sampled_from(["conv", "ssm", "inplace"]), st.integers(0, 5)),
                  min_size=1, max_size=8)


@settings(max_examples=40)
@given(before=WRITES, after=WRITES, dtype=st.sampled_from(list(DTYPES.values())),
       batch=st.integers(1, 3), seed=st.integers(0, 999))
def test_snapshot_restore_after_random_writes(before, after, dtype, batch, seed):
    cache = RecurrentStateCache([("conv", (3, 6)), ("ssm", (6, 4))], batch=batch, dtype=dtype)
    key = mx.random.key(seed)

    def write(ops):
        nonlocal key
        for name, n in ops:
            key, sub = mx.random.split(key)
            if name == "inplace":  # a layer may also write into the array it read
                cache["ssm"][:, 0] = mx.random.normal((batch, 4), key=sub).astype(dtype)
            else:
                cache[name] = mx.random.normal(cache[name].shape, key=sub).astype(dtype)
            cache.advance(n)

    write(before)
    snap = cache.snapshot()
    saved = _fingerprint(cache)
    write(after)  # e.g. speculative tokens that get rejected
    cache.restore(snap)
    assert _equal(_fingerprint(cache), saved)
    write(after)  # writing after a restore must not alter the snapshot
    cache.restore(snap)
    assert _equal(_fingerprint(cache), saved)


def test_restore_rejects_foreign_snapshots_and_leaves_cache_unchanged():
    cache = RecurrentStateCache([("conv", (3, 6)), ("ssm", (6, 4))])
    cache["ssm"] = mx.ones((1, 6, 4))
    cache.advance(2)
    before = _fingerprint(cache)
    other = RecurrentStateCache([("conv", (3, 6)), ("ssm", (6, 5))])
    for snap, match in ((other.snapshot(), "does not match"), ("state", "RecurrentSnapshot"),
                        (RecurrentStateCache([("conv", (3, 6)), ("ssm", (6, 4))], batch=2).snapshot(),
                         "does not match")):
        with pytest.raises(ValueError, match=match):
            cache.restore(snap)
        assert _equal(_fingerprint(cache), before)
    assert isinstance(cache.snapshot(), RecurrentSnapshot)


def test_bad_writes_and_protocol_limits():
    cache = RecurrentStateCache([("conv", (3, 6)), ("ssm", (6, 4))], batch=2, dtype="bf16")
    before = _fingerprint(cache)
    for name, value, match in (("ssm", mx.ones((2, 6, 5), dtype=mx.bfloat16), r"shape \(2, 6, 4\)"),
                               ("ssm", mx.ones((2, 6, 4), dtype=mx.float32), "dtype must be bfloat16"),
                               ("h", mx.ones((2, 6, 4), dtype=mx.bfloat16), "not one of conv, ssm"),
                               ("conv", np.ones((2, 3, 6)), "mx.array")):
        with pytest.raises(ValueError, match=match):
            cache[name] = value
    with pytest.raises(ValueError, match="not one of conv, ssm"):
        cache["h"]
    assert _equal(_fingerprint(cache), before)
    cache.advance(5)
    assert not cache.is_trimmable() and cache.trim(0) == 0
    assert cache.trim(2) == 0 and cache.offset == 5  # nothing can be rewound: trim says so
    with pytest.raises(ValueError, match="non-negative integer"):
        cache.trim(-1)
    with pytest.raises(TypeError, match="advance"):
        cache.update_and_fetch(mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 1, 4)))
    assert cache.make_mask(3) is None and cache.visibility_mask(3).shape == (3, 0)  # nothing to mask
    for args, match in ((([],), "at least one"), (([("a", (2,)), ("a", (3,))],), "unique"),
                        (([("a", (0, 2))],), "positive integers"), (([("a", (2,))], 0), "batch"),
                        (([("a", (2,))], 1, mx.int32), "dtype")):
        with pytest.raises(ValueError, match=match):
            RecurrentStateCache(*args)


def test_save_load_round_trip():
    layer = _layer("mamba2")
    cache = RecurrentStateCache.for_layer(layer, batch=2, dtype=mx.bfloat16)
    for name, shape in layer.state_shapes:
        cache[name] = mx.random.normal((2, *shape), key=mx.random.key(len(name))).astype(cache.dtypes[name])
    cache.advance(17)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.safetensors"
        save_cache(path, cache)
        loaded = load_cache(path, RecurrentStateCache)
    assert _equal(_fingerprint(loaded), _fingerprint(cache))
    assert loaded.shapes == cache.shapes and loaded.nbytes == cache.nbytes and loaded.dtype == mx.bfloat16
    assert loaded.dtypes == cache.dtypes == {"conv": mx.bfloat16, "ssm": mx.float32}
    again = RecurrentStateCache.from_state(cache.state, cache.meta_state)
    assert _equal(_fingerprint(again), _fingerprint(cache))


def test_indexed_like_mlx_lm_arrays_cache():
    """Defect 7: mlx-lm's mamba2 / jamba / qwen3_next read and write cache[0] (conv) and cache[1] (ssm)."""
    cache = RecurrentStateCache.for_layer(_layer("gated_deltanet"), batch=2)
    assert cache[0] is cache["conv"] and cache[1] is cache["ssm"]
    new = mx.ones(cache[1].shape)
    cache[1] = new
    assert cache["ssm"] is new
    with pytest.raises(IndexError):
        cache[2]
    assert cache.lengths is None and cache.left_padding is None   # read by mlx-lm's SSM layers
    assert cache.make_mask(5) is None and bool(cache)              # create_ssm_mask: None
