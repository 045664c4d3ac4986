"""Partial attention and its log-sum-exp merge: split-K (Flash-Decoding) and cascade attention equal dense
attention over all the keys (fp32 within 1e-5), for any split points, prefix length and suffix mask
(hypothesis), GQA included; the cascade gate and the bytes it saves."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import cascade_attention, cascade_reference, merge_partials, split_k_attention
from kvsim.cache.partials import attention_partial, split_points
from kvsim.cache.sdpa import reference_sdpa
from kvsim.calc.paged_read import (CASCADE_MIN_SHARED_PAGES, cascade_break_even_pages, cascade_pays,
                                   cascade_step_bytes)

ATOL = 1e-5
FAST = settings(max_examples=25, deadline=None)


def rand(seed, *shape):
    return mx.random.normal(shape, key=mx.random.key(seed))


def np_attention(q, k, v, mask=None):
    """An independent float64 numpy softmax(q kᵀ/√D) v, GQA by repeating KV heads."""
    q, k, v = (np.array(a, dtype=np.float64) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(np.array(mask), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


# ---------------------------------------------------------------- partials and merge

def test_a_partial_and_the_merge_of_two_halves_equal_full_attention():
    q, k, v = rand(0, 2, 4, 3, 8), rand(1, 2, 2, 20, 8), rand(2, 2, 2, 20, 5)
    out, lse = attention_partial(q, k, v)
    assert np.allclose(np.array(out), np_attention(q, k, v), atol=ATOL)
    s = np.array(q, dtype=np.float64).reshape(2, 2, 2, 3, 8) @ np.array(k)[:, :, None].swapaxes(-1, -2) / np.sqrt(8)
    assert np.allclose(np.array(lse).reshape(2, 2, 2, 3), np.log(np.exp(s).sum(-1)), atol=1e-5)
    merged, lse2 = merge_partials([attention_partial(q, k[:, :, :7], v[:, :, :7]),
                                   attention_partial(q, k[:, :, 7:], v[:, :, 7:])])
    assert mx.allclose(merged, out, atol=ATOL) and mx.allclose(lse2, lse, atol=ATOL)


def test_a_part_no_query_can_see_weighs_nothing():
    q, k, v = rand(0, 1, 2, 2, 8), rand(1, 1, 2, 10, 8), rand(2, 1, 2, 10, 8)
    hidden = attention_partial(q, k[:, :, 5:], v[:, :, 5:], mx.zeros((2, 5), dtype=mx.bool_))
    assert mx.all(hidden[0] == 0) and mx.all(mx.isinf(hidden[1]))
    merged = merge_partials([attention_partial(q, k[:, :, :5], v[:, :, :5]), hidden])[0]
    assert mx.allclose(merged, reference_sdpa(q, k[:, :, :5], v[:, :, :5]), atol=ATOL)
    with pytest.raises(ValueError, match="at least one"):
        merge_partials([])


# ---------------------------------------------------------------- split-K

@FAST
@given(T=st.integers(1, 40), data=st.data(), L=st.integers(1, 3), rep=st.sampled_from([1, 2, 4]),
       masked=st.booleans(), seed=st.integers(0, 10_000))
def test_split_k_equals_dense_for_any_split_points(T, data, L, rep, masked, seed):
    cuts = sorted(data.draw(st.sets(st.integers(1, T - 1), max_size=min(6, T - 1))) if T > 1 else [])
    q, k, v = rand(seed, 2, 2 * rep, L, 8), rand(seed + 1, 2, 2, T, 8), rand(seed + 2, 2, 2, T, 4)
    mask = None
    if masked:                                   # causal for queries at the last L positions, plus random holes
        holes = mx.random.bernoulli(0.7, (L, T), key=mx.random.key(seed + 3))
        mask = (mx.arange(T)[None] <= mx.arange(T - L, T)[:, None]) & holes
        mask = mask | (mx.arange(T)[None] == 0)  # every query sees at least key 0
    want = reference_sdpa(q, k, v, mask)
    assert mx.allclose(split_k_attention(q, k, v, cuts, mask), want, atol=ATOL)
    S = data.draw(st.integers(1, T))
    assert mx.allclose(split_k_attention(q, k, v, S, mask), want, atol=ATOL)


def test_split_points_are_validated():
    assert split_points(10, 3) == [0, 3, 6, 10] and split_points(10, [2, 9]) == [0, 2, 9, 10]
    for bad in ([0], [10], [5, 3], [4, 4]):
        with pytest.raises(ValueError, match="split points must be increasing integers in \\(0, 10\\)"):
            split_points(10, bad)
    with pytest.raises(ValueError, match="splits must be in \\[1, 10\\]"):
        split_points(10, 11)


# ---------------------------------------------------------------- cascade

@FAST
@given(B=st.integers(1, 4), P=st.integers(0, 24), lengths=st.lists(st.integers(0, 9), min_size=4, max_size=4),
       L=st.integers(1, 3), rep=st.sampled_from([1, 3]), masked=st.booleans(), as_list=st.booleans(),
       seed=st.integers(0, 10_000))
def test_cascade_equals_dense_over_the_concatenation(B, P, lengths, L, rep, masked, as_list, seed):
    Hkv, D, Dv = 2, 8, 6
    if as_list:
        lengths = lengths[:B]
    else:
        lengths = [lengths[0]] * B
    if P == 0:                                   # without a prefix each row needs L suffix keys to see
        lengths = [max(s, L) for s in lengths]
    q = rand(seed, B, Hkv * rep, L, D)
    pk, pv = rand(seed + 1, Hkv, P, D), rand(seed + 2, 1, Hkv, P, Dv)
    sk = [rand(seed + 3 + b, 1, Hkv, s, D) for b, s in enumerate(lengths)]
    sv = [rand(seed + 20 + b, 1, Hkv, s, Dv) for b, s in enumerate(lengths)]
    masks = None
    if masked:                                   # causal within the suffix: the L queries are its last L tokens
        masks = [mx.arange(s)[None] <= mx.arange(s - L, s)[:, None] for s in lengths]
    if not as_list:
        sk, sv = mx.concatenate(sk, axis=0), mx.concatenate(sv, axis=0)
        if masked:
            masks = masks[0]
    got = cascade_attention(q, pk, pv, sk, sv, suffix_mask=masks)
    want = cascade_reference(q, pk, pv, sk, sv, suffix_mask=masks)
    assert got.shape == (B, Hkv * rep, L, Dv)
    assert mx.allclose(got, want, atol=ATOL)


def test_cascade_matches_numpy_with_a_per_head_mask_and_a_scale():
    B, Hkv, rep, L, P, S = 3, 2, 2, 2, 11, 5
    q, pk, pv = rand(0, B, Hkv * rep, L, 8), rand(1, Hkv, P, 8), rand(2, Hkv, P, 8)
    sk, sv = rand(3, B, Hkv, S, 8), rand(4, B, Hkv, S, 8)
    mask = mx.random.bernoulli(0.5, (B, Hkv * rep, L, S), key=mx.random.key(5))
    got = cascade_attention(q * 2.0, pk, pv, sk, sv, scale=8 ** -0.5 / 2.0, suffix_mask=mask)
    keys = mx.concatenate([mx.broadcast_to(pk[None], (B, Hkv, P, 8)), sk], axis=2)
    values = mx.concatenate([mx.broadcast_to(pv[None], (B, Hkv, P, 8)), sv], axis=2)
    full = mx.concatenate([mx.ones((B, Hkv * rep, L, P), dtype=mx.bool_), mask], axis=-1)
    assert np.allclose(np.array(got), np_attention(q, keys, values, full), atol=ATOL)


def test_cascade_input_errors():
    q = rand(0, 2, 4, 1, 8)
    pk = rand(1, 2, 5, 8)
    with pytest.raises(ValueError, match="one entry per row"):
        cascade_attention(q, pk, pk, [rand(2, 1, 2, 3, 8)], [rand(3, 1, 2, 3, 8)])
    with pytest.raises(ValueError, match="multiple of H_kv"):
        cascade_attention(q, rand(1, 3, 5, 8), rand(1, 3, 5, 8), rand(2, 2, 3, 3, 8), rand(2, 2, 3, 3, 8))
    empty = rand(1, 2, 0, 8)
    with pytest.raises(ValueError, match="needs at least one key"):
        cascade_attention(q, empty, empty, [empty, empty], [empty, empty])


# ---------------------------------------------------------------- when cascade pays

def test_cascade_bytes_and_gate():
    # lesson 07's workload: 100 requests sharing a 500-token prompt, each 1 decoded token so far
    tb = 8 * 128 * 2 * 2                                       # Llama-3-8B, one layer, bf16
    b = cascade_step_bytes(500, [1] * 100, tb)
    assert b == {"dense_bytes": 100 * 501 * tb, "cascade_bytes": (500 + 100) * tb}
    assert cascade_pays(2, 2) and not cascade_pays(1, 100) and not cascade_pays(64, 1)
    assert cascade_pays(3, 1, min_members=3, min_shared_pages=1)
    # the default shared-page threshold is the break-even at Llama-3-8B sizes for every group size
    evens = [cascade_break_even_pages(B, 16, tb, 32, 128) for B in range(2, 65)]
    assert max(evens) == CASCADE_MIN_SHARED_PAGES and cascade_break_even_pages(1, 16, tb, 32, 128) is None
    # break-even is exact: one token fewer than its bound and cascade would not save bytes
    B, bs = 4, 1
    P = cascade_break_even_pages(B, bs, tb, 32, 128)
    extra = 2 * B * 32 * 1 * 129 * 4
    assert (B - 1) * P * tb > extra >= (B - 1) * (P - 1) * tb
    with pytest.raises(ValueError, match="members"):
        cascade_pays(0, 3)
