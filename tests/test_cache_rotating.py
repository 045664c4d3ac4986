"""RotatingKVCache: window semantics, bounded memory and trim rules against the naive reference."""


import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant
from lockstep import LockstepMachine, position_kv, random_kv
from reference_cache import Lockstep, ReferenceCache, attention, fingerprint

from kvsim.cache import RotatingKVCache
from kvsim.calc.config import LayerSpec
from kvsim.calc.memory import allocated_slots, layer_kv_bytes


def _lockstep(max_size, keep, step, rewind, ordered=True):
    cache = RotatingKVCache(max_size, keep=keep, step=step, rewind_tokens=rewind, ordered=ordered)
    ref = ReferenceCache("sliding", max_size=max_size, keep=keep)
    layer = None
    if rewind == 0:  # the calculator has no rewind slots; with none it must agree exactly
        layer = LayerSpec(kind="sliding", num_key_value_heads=2, head_dim=4, v_head_dim=3,
                          sliding_window=max_size)
    return Lockstep(cache, ref, lambda peak, off: allocated_slots(peak, step, max_size + rewind), layer)


class RotatingMachine(LockstepMachine):
    """Any mix of decode steps, chunks, trims and save/load, for any window, sinks and step."""

    @initialize(max_size=st.integers(1, 12), keep=st.integers(0, 3), step=st.integers(1, 8),
                rewind=st.sampled_from([0, 0, 2]), ordered=st.booleans())
    def setup(self, max_size, keep, step, rewind, ordered):
        self.ls = _lockstep(max_size, min(keep, max_size - 1), step, rewind, ordered)

    @invariant()
    def bounded_and_matches_calculator(self):
        if hasattr(self, "ls"):
            self.ls.check()
            c = self.ls.cache
            assert c.capacity <= c.max_size + c.rewind_tokens and c.size() <= c.capacity


RotatingMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestRotatingStateful = RotatingMachine.TestCase


def test_mlx_lm_trace_in_temporal_order_without_the_transient():
    # mlx-lm trace (max_size=8, keep=2): a 3-token chunk at offset 13 returns [0, 1, 8..15]
    cache = RotatingKVCache(8, keep=2)
    cache.update_and_fetch(*position_kv(5))
    for t in range(5, 13):
        k, _ = cache.update_and_fetch(*position_kv(1, t))
    assert np.array(k[0, 0, :, 0]).tolist() == [0, 1, 7, 8, 9, 10, 11, 12]
    k, _ = cache.update_and_fetch(*position_kv(3, 13))
    assert np.array(k[0, 0, :, 0]).tolist() == [0, 1, 8, 9, 10, 11, 12, 13, 14, 15]
    assert cache.capacity == 8 and cache.size() == 8  # mlx-lm keeps 10 rows here
    assert np.array(cache.state[0][0, 0, :, 0]).tolist() == [0, 1, 10, 11, 12, 13, 14, 15]


def test_long_prefill_keeps_only_the_window():
    layer = LayerSpec(kind="sliding", num_key_value_heads=2, head_dim=4, v_head_dim=3, sliding_window=16)
    cache = RotatingKVCache(16, step=4)
    k, v = cache.update_and_fetch(*random_kv(100))
    assert k.shape[2] == 100  # every query of the prefill needs its own window: a temporary
    assert cache.capacity == 16 and cache.nbytes == layer_kv_bytes(layer, 100, "fp32", view="allocated", step=4)
    mask = RotatingKVCache(16).visibility_mask(100)
    assert np.array(mask).sum(axis=1).tolist() == [min(i + 1, 16) for i in range(100)]


def test_decode_writes_into_a_fixed_ring():
    cache = RotatingKVCache(6, keep=1, step=4)
    cache.update_and_fetch(*position_kv(6))
    buffer_shape = cache.keys.shape
    for t in range(6, 40):
        mask = cache.visibility_mask(1)
        k, _ = cache.update_and_fetch(*position_kv(1, t))
        assert cache.keys.shape == buffer_shape
        assert np.array(k[0, 0, :, 0]).tolist() == [0] + list(range(t - 4, t + 1))  # sink + window 5
        assert bool(mx.all(mask).item()) and mask.shape == (1, 6)


@pytest.mark.parametrize("dtype,name", [(mx.bfloat16, "bf16"), (mx.float16, "fp16")])
def test_nbytes_real_dtypes(dtype, name):
    layer = LayerSpec(kind="sliding", num_key_value_heads=2, head_dim=8, sliding_window=600)
    cache = RotatingKVCache(600)
    for T, S in ((1, 1), (300, 299), (600, 300), (1000, 400)):  # grows 256 -> 512 -> 600, then stays
        cache.update_and_fetch(*random_kv(S, B=2, D=8, Dv=8, dtype=dtype))
        assert cache.nbytes == layer_kv_bytes(layer, T, name, batch=2, view="allocated")
    assert cache.capacity == 600 and cache.keys.dtype == dtype


def test_trim_rules():
    cache = RotatingKVCache(8, step=4)
    cache.update_and_fetch(*random_kv(8))
    assert cache.trimmable_tokens == 8  # nothing overwritten yet
    cache.update_and_fetch(*random_kv(1))
    assert cache.trimmable_tokens == 1  # the next query sees positions 2..8: only 8 may go
    assert not cache.is_trimmable()  # mlx-lm: offset < max_size; a partial rewind is not "trimmable"
    assert cache.trim(2) == 1 and cache.offset == 8  # trims what it can exactly and says so (mlx-lm)
    assert cache.trim(1) == 0 and cache.offset == 8  # nothing more: the next query needs positions 1..8
    k, _ = cache.update_and_fetch(*random_kv(1, seed=5))  # the ring continues from offset 8 correctly
    assert cache.offset == 9 and k.shape[2] == 8


def test_speculative_rewind_with_rewind_tokens():
    # verify 5 draft tokens, accept 2: rewind 3, then continue exactly like the reference
    cache, ref = RotatingKVCache(8, rewind_tokens=4), ReferenceCache("sliding", max_size=8)
    for S, seed in ((20, 1), (1, 2), (5, 3)):
        cache.update_and_fetch(*random_kv(S, seed=seed))
        ref.update_and_fetch(*random_kv(S, seed=seed))
    assert cache.trimmable_tokens == 5 and cache.capacity == 12
    assert cache.trim(3) == ref.trim(3) == 3
    k, v = cache.update_and_fetch(*random_kv(2, seed=4))
    rk, rv = ref.update_and_fetch(*random_kv(2, seed=4))
    assert mx.array_equal(k, rk).item() and mx.array_equal(v, rv).item()


def test_ring_order_is_a_view_with_honest_positions():
    ring = RotatingKVCache(4, step=4, rewind_tokens=4, ordered=False)  # 8 slots, position t in slot t % 8
    ring.update_and_fetch(*position_kv(14))
    assert ring.trim(4) == 4  # rows 10..13 rewound; 11, 12, 13 stay in slots 3, 4, 5 until overwritten
    not_held = 2**31 - 1
    assert np.array(ring.key_positions(1)).tolist() == [8, 9, 10, not_held, not_held, not_held, 6, 7]
    mask = ring.visibility_mask(1)
    k, _ = ring.update_and_fetch(*position_kv(1, 10))  # window 7..10 wraps: the ring as stored
    assert k.shape == ring.keys.shape and np.array(k[0, 0, :, 0]).tolist() == [8, 9, 10, 11, 12, 13, 6, 7]
    ring.update_and_fetch(*position_kv(1, 11))  # writes slot 3; the answer already returned is untouched
    assert np.array(k[0, 0, :, 0]).tolist() == [8, 9, 10, 11, 12, 13, 6, 7]
    assert np.array(mask).tolist() == [[True, True, True, False, False, False, False, True]]
    ordered = RotatingKVCache(4, step=4, rewind_tokens=4)
    ordered.update_and_fetch(*position_kv(10))
    assert np.array(ordered.update_and_fetch(*position_kv(1, 10))[0][0, 0, :, 0]).tolist() == [7, 8, 9, 10]


def test_mask_with_fast_sdpa():
    cache = RotatingKVCache(5, keep=1)
    cache.update_and_fetch(*random_kv(9, seed=1))
    mask = cache.visibility_mask(4)
    k, v = cache.update_and_fetch(*random_kv(4, seed=2))
    q = mx.array(np.random.default_rng(3).standard_normal((1, 2, 4, 4)).astype(np.float32))
    fast = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.5, mask=mask)
    assert mx.allclose(fast, attention(q, k, v, mask), atol=1e-5).item()


def test_bad_input_leaves_ring_unchanged():
    cache = RotatingKVCache(4, keep=1, step=2)
    cache.update_and_fetch(*random_kv(7))
    before = fingerprint(cache)
    with pytest.raises(ValueError, match=r"keys.shape\[3\] \(head_dim\) must be 4"):
        cache.update_and_fetch(*random_kv(2, D=6))
    with pytest.raises(ValueError, match="keys.dtype must be float32 as in earlier"):
        cache.update_and_fetch(*random_kv(2, dtype=mx.bfloat16))
    assert fingerprint(cache) == before


@pytest.mark.parametrize("kwargs,message", [
    ({"max_size": 0}, "max_size must be an integer >= 1"),
    ({"max_size": 4, "keep": 4}, r"keep must be in \[0, max_size - 1\]"),
    ({"max_size": 4, "rewind_tokens": -1}, "rewind_tokens must be an integer >= 0"),
    ({"max_size": 4, "step": 0}, "step must be a positive integer"),
])
def test_constructor_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RotatingKVCache(**kwargs)


@settings(max_examples=200, deadline=None)
@given(window=st.integers(1, 9), keep=st.integers(0, 3), rewind=st.integers(0, 4), offset=st.integers(0, 60))
def test_decode_ring_answer_closed_form_equals_the_slot_rule(window, keep, rewind, offset):
    cache = RotatingKVCache(window + keep, keep=keep, rewind_tokens=rewind, ordered=False)
    P = keep + offset
    assert cache._ring_answer(P, 1) == cache._ring_answer_by_slots(P, 1)
