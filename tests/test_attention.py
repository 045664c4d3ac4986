"""kvsim.cache.sdpa: dense and quantized SDPA against independent references (float32)."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache.sdpa import quantized_sdpa, sdpa


def _naive(q, k, v, mask, scale):
    """Textbook attention in numpy: K/V repeated per query head, float64."""
    q, k, v = (np.array(a, dtype=np.float64) for a in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = scale * q @ k.swapaxes(-1, -2)
    if mask is not None:
        m = np.array(mask)
        s = np.where(m, s, -np.inf) if m.dtype == bool else s + m
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


def _rand(key, shape):
    return mx.random.normal(shape, key=mx.random.key(key))


def _causal(L, T):
    """Last L of T positions query; key j visible to query i iff j <= T - L + i."""
    return mx.arange(T)[None, :] <= mx.arange(T - L, T)[:, None]


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 2), kv_heads=st.integers(1, 3), rep=st.integers(1, 3),
       L=st.integers(1, 4), extra=st.integers(0, 6), D=st.sampled_from([8, 16]),
       Dv=st.sampled_from([8, 24]), seed=st.integers(0, 2**16))
def test_sdpa_matches_naive_and_fast(B, kv_heads, rep, L, extra, D, Dv, seed):
    T = L + extra
    q = _rand(seed, (B, kv_heads * rep, L, D))
    k, v = _rand(seed + 1, (B, kv_heads, T, D)), _rand(seed + 2, (B, kv_heads, T, Dv))
    mask = _causal(L, T)
    out = sdpa(q, k, v, mask, scale=D ** -0.5)
    assert out.shape == (B, kv_heads * rep, L, Dv)
    np.testing.assert_allclose(np.array(out), _naive(q, k, v, mask, D ** -0.5), atol=1e-5)
    fast = mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5, mask=mask)
    np.testing.assert_allclose(np.array(out), np.array(fast), atol=1e-5)


def test_sdpa_default_scale_per_head_and_additive_masks():
    q, k, v = _rand(0, (2, 4, 3, 16)), _rand(1, (2, 2, 5, 16)), _rand(2, (2, 2, 5, 16))
    np.testing.assert_allclose(np.array(sdpa(q, k, v)), _naive(q, k, v, None, 0.25), atol=1e-5)
    per_head = _rand(3, (2, 4, 3, 5)) > 0  # a different bool mask per batch row and query head
    per_head[..., 0] = True                 # every query sees at least one key
    np.testing.assert_allclose(np.array(sdpa(q, k, v, per_head)),
                               _naive(q, k, v, per_head, 0.25), atol=1e-5)
    additive = _rand(4, (3, 5))
    np.testing.assert_allclose(np.array(sdpa(q, k, v, additive)),
                               _naive(q, k, v, additive, 0.25), atol=1e-5)


def test_sdpa_bad_shapes_raise():
    q, k, v = _rand(0, (1, 3, 2, 8)), _rand(1, (1, 2, 4, 8)), _rand(2, (1, 2, 4, 8))
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        sdpa(q, k, v)
    with pytest.raises(ValueError, match="mask"):
        sdpa(_rand(0, (1, 2, 2, 8)), k, v, mx.ones((2, 3), dtype=mx.bool_))
    with pytest.raises(ValueError, match="head_dim"):
        sdpa(_rand(0, (1, 2, 2, 16)), k, v)


@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64])
def test_quantized_sdpa_equals_dense_on_dequantized(bits, group_size):
    """quantized_matmul on packed data == dense attention on mx.dequantize of the same data."""
    B, Hkv, rep, L, T, D = 1, 2, 2, 3, 9, 64
    q = _rand(0, (B, Hkv * rep, L, D))
    qk = mx.quantize(_rand(1, (B, Hkv, T, D)), group_size=group_size, bits=bits)
    qv = mx.quantize(_rand(2, (B, Hkv, T, D)), group_size=group_size, bits=bits)
    dk, dv = (mx.dequantize(*t, group_size=group_size, bits=bits) for t in (qk, qv))
    mask = _causal(L, T)
    out = quantized_sdpa(q, qk, qv, mask, group_size=group_size, bits=bits)
    np.testing.assert_allclose(np.array(out), np.array(sdpa(q, dk, dv, mask)), atol=1e-5)


def test_quantized_sdpa_with_recent_part_and_without_quantized_part():
    B, Hkv, rep, L, D, gs, bits = 2, 1, 4, 2, 32, 32, 4
    q = _rand(0, (B, Hkv * rep, L, D))
    qk = mx.quantize(_rand(1, (B, Hkv, 5, D)), group_size=gs, bits=bits)
    qv = mx.quantize(_rand(2, (B, Hkv, 5, D)), group_size=gs, bits=bits)
    rk, rv = _rand(3, (B, Hkv, 3, D)), _rand(4, (B, Hkv, 3, D))
    dk = mx.concatenate([mx.dequantize(*qk, group_size=gs, bits=bits), rk], axis=2)
    dv = mx.concatenate([mx.dequantize(*qv, group_size=gs, bits=bits), rv], axis=2)
    mask = _causal(L, 8)
    out = quantized_sdpa(q, qk, qv, mask, group_size=gs, bits=bits, recent_keys=rk, recent_values=rv)
    np.testing.assert_allclose(np.array(out), np.array(sdpa(q, dk, dv, mask)), atol=1e-5)
    only_recent = quantized_sdpa(q, None, None, _causal(L, 3), recent_keys=rk, recent_values=rv)
    np.testing.assert_allclose(np.array(only_recent), np.array(sdpa(q, rk, rv, _causal(L, 3))), atol=1e-5)
    with pytest.raises(ValueError, match="at least one cached token"):
        quantized_sdpa(q, None, None)
