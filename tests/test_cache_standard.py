"""KVCache: in place vs concatenation vs the naive reference; nbytes vs the calculator; bad input."""

import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from lockstep import random_kv
from reference_cache import Lockstep, ReferenceCache, attention, fingerprint

from kvsim.cache import KVCache
from kvsim.calc.config import LayerSpec
from kvsim.calc.memory import allocated_slots, layer_kv_bytes, layer_token_bytes

LAYER = LayerSpec(kind="full", num_key_value_heads=2, head_dim=4, v_head_dim=3)


class KVCacheMachine(RuleBasedStateMachine):
    """In-place and concatenating caches in lockstep with the reference, through any operations."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.inplace = Lockstep(KVCache(step=8), ReferenceCache("full"),
                                slots=lambda peak, off: allocated_slots(peak, 8), layer=LAYER)
        self.concat = Lockstep(KVCache(step=8, inplace=False), ReferenceCache("full"),
                               slots=lambda peak, off: off)
        self.saves = 0

    @rule(S=st.integers(1, 11), seed=st.integers(0, 2**16))
    def update(self, S, seed):
        self.inplace.update(S, seed)
        self.concat.update(S, seed)

    @rule(n=st.integers(0, 12))
    def trim(self, n):
        self.inplace.trim(n)
        self.concat.trim(n)

    @rule()
    def save_load(self):
        self.saves += 1
        for name, ls in (("a", self.inplace), ("b", self.concat)):
            ls.save_load(Path(self.dir.name) / f"{name}{self.saves}.safetensors")

    @invariant()
    def matches_calculator(self):
        self.inplace.check()
        self.concat.check()
        assert self.inplace.cache.offset == self.concat.cache.offset

    def teardown(self):
        self.dir.cleanup()


KVCacheMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestKVCacheStateful = KVCacheMachine.TestCase


def test_growth_follows_allocated_slots_fp16():
    # fp16, 8 KV heads, head_dim 64: 2 * 8 * 64 * 2 = 2048 bytes per token slot
    layer = LayerSpec(kind="full", num_key_value_heads=8, head_dim=64)
    cache, peak = KVCache(), 0
    for S, cap in ((1, 256), (10, 256), (255, 512), (1, 512), (1, 512), (300, 768)):
        cache.update_and_fetch(*random_kv(S, H=8, D=64, Dv=64, dtype=mx.float16))
        peak = cache.offset
        assert cache.capacity == cap == allocated_slots(peak)
        assert cache.nbytes == cap * 2048 == layer_kv_bytes(layer, peak, "fp16", view="allocated")
    assert cache.offset == 568
    assert cache.trim(5) == 5 and cache.nbytes == 768 * 2048  # trim frees nothing
    assert cache.used_bytes == 563 * layer_token_bytes(layer, "fp16")


@pytest.mark.parametrize("dtype,name", [(mx.bfloat16, "bf16"), (mx.float16, "fp16"), (mx.float32, "fp32")])
def test_nbytes_real_dtypes(dtype, name):
    layer = LayerSpec(kind="full", num_key_value_heads=2, head_dim=16)
    cache = KVCache(step=16)
    for S in (1, 20, 3, 9):
        k, v = cache.update_and_fetch(*random_kv(S, B=3, D=16, Dv=16, dtype=dtype))
        assert k.dtype == v.dtype == cache.keys.dtype == dtype
    assert cache.nbytes == layer_kv_bytes(layer, 33, name, batch=3, view="allocated", step=16)
    assert cache.used_bytes == layer_kv_bytes(layer, 33, name, batch=3)


def test_trim_then_update_overwrites_stale_rows():
    # mlx-lm's ConcatenateKVCache: 5 tokens, trim 2, add 1 -> offset 6; here offset 4
    for inplace in (True, False):
        cache = KVCache(inplace=inplace)
        k5, v5 = random_kv(5, seed=1)
        cache.update_and_fetch(k5, v5)
        assert cache.trim(2) == 2
        k1, v1 = random_kv(1, seed=2)
        keys, values = cache.update_and_fetch(k1, v1)
        assert cache.offset == 4 and keys.shape[2] == 4
        assert mx.array_equal(keys, mx.concatenate([k5[..., :3, :], k1], axis=2)).item()
        assert mx.array_equal(values, mx.concatenate([v5[..., :3, :], v1], axis=2)).item()


def test_trim_clamps_to_offset_and_rejects_bad_n():
    cache = KVCache()
    cache.update_and_fetch(*random_kv(3))
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        cache.trim(-1)
    assert cache.offset == 3
    assert cache.trim(10) == 3 and cache.offset == 0 and cache.is_trimmable() is True  # a capability


BAD_INPUTS = [
    ("keys must be 4-D", lambda: (mx.zeros((2, 1, 4)), mx.zeros((2, 1, 3)))),
    ("keys.dtype must be float32", lambda: (mx.zeros((1, 2, 1, 4), mx.int32), mx.zeros((1, 2, 1, 3), mx.int32))),
    (r"keys.shape\[1\] \(n_kv_heads\) must be 2", lambda: random_kv(1, H=3)),
    (r"keys.shape\[3\] \(head_dim\) must be 4", lambda: random_kv(1, D=5)),
    (r"values.shape\[3\] \(head_dim\) must be 3", lambda: random_kv(1, Dv=4)),
    (r"keys.shape\[0\] \(batch\) must be 1", lambda: random_kv(1, B=2)),
    ("keys.dtype must be float32 as in earlier", lambda: random_kv(1, dtype=mx.float16)),
    (r"values.shape\[:3\]", lambda: (mx.zeros((1, 2, 2, 4)), mx.zeros((1, 2, 1, 3)))),
    ("values.dtype must equal keys.dtype", lambda: (mx.zeros((1, 2, 1, 4)), mx.zeros((1, 2, 1, 3), mx.float16))),
    ("at least 1", lambda: (mx.zeros((1, 2, 0, 4)), mx.zeros((1, 2, 0, 3)))),
    ("keys must be an mx.array", lambda: (np.zeros((1, 2, 1, 4)), mx.zeros((1, 2, 1, 3)))),
]


@pytest.mark.parametrize("message,make", BAD_INPUTS, ids=[m for m, _ in BAD_INPUTS])
@pytest.mark.parametrize("inplace", [True, False])
def test_bad_input_raises_and_leaves_cache_unchanged(message, make, inplace):
    cache = KVCache(step=4, inplace=inplace)
    cache.update_and_fetch(*random_kv(3))
    before = fingerprint(cache)
    with pytest.raises(ValueError, match=message):
        cache.update_and_fetch(*make())
    assert fingerprint(cache) == before


def test_mask_is_boolean_causal_and_works_with_fast_sdpa():
    cache = KVCache()
    cache.update_and_fetch(*random_kv(4, seed=3))
    mask = cache.make_mask(3)
    assert mask.dtype == mx.bool_ and mask.shape == (3, 7)
    assert np.array(mask).tolist() == [[j <= 4 + i for j in range(7)] for i in range(3)]
    assert cache.make_mask(1) is None  # a decode step: every key visible, no mask (the fused fast path)
    assert cache.visibility_mask(1).shape == (1, 5) and bool(mx.all(cache.visibility_mask(1)).item())
    windowed = np.array(cache.make_mask(3, window_size=2))
    assert windowed.sum(axis=1).tolist() == [2, 2, 2]
    k, v = cache.update_and_fetch(*random_kv(3, seed=4))
    q = mx.array(np.random.default_rng(5).standard_normal((1, 2, 3, 4)).astype(np.float32))
    fast = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5, mask=mask)
    assert mx.allclose(fast, attention(q, k, v, mask), atol=1e-5).item()


def test_empty_cache_is_truthy_for_mlx_lm():
    # mlx-lm's create_attention_mask asks `if cache` before cache.make_mask: no __len__ allowed
    cache = KVCache()
    assert bool(cache) and not hasattr(cache, "__len__") and cache.size() == 0 and cache.empty()


def test_constructor_validation():
    with pytest.raises(ValueError, match="step must be a positive integer"):
        KVCache(step=0)
    with pytest.raises(ValueError, match="N must be a positive integer"):
        KVCache().make_mask(0)
