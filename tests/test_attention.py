"""kvsim.cache.sdpa: the fused path equals the written-out reference for every variant and mask kind;
both match an independent numpy reference; quantized SDPA equals dense SDPA on the dequantized data;
a decode step over every cache make_caches builds attends without a mask (the fused fast path)."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim.cache.base as cache_base
from kvsim.cache import make_caches
from kvsim.cache.sdpa import quantized_sdpa, reference_sdpa, sdpa
from kvsim.model import TOY_KINDS, build_model, reference_mask, toy_spec


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
    for attention in (sdpa, reference_sdpa):
        out = attention(q, k, v, mask, scale=D ** -0.5)
        assert out.shape == (B, kv_heads * rep, L, Dv)
        np.testing.assert_allclose(np.array(out), _naive(q, k, v, mask, D ** -0.5), atol=1e-5)


@pytest.mark.parametrize("attention", [sdpa, reference_sdpa])
def test_sdpa_default_scale_per_head_and_additive_masks(attention):
    q, k, v = _rand(0, (2, 4, 3, 16)), _rand(1, (2, 2, 5, 16)), _rand(2, (2, 2, 5, 16))
    np.testing.assert_allclose(np.array(attention(q, k, v)), _naive(q, k, v, None, 0.25), atol=1e-5)
    per_head = _rand(3, (2, 4, 3, 5)) > 0  # a different bool mask per batch row and query head
    per_head[..., 0] = True                 # every query sees at least one key
    np.testing.assert_allclose(np.array(attention(q, k, v, per_head)),
                               _naive(q, k, v, per_head, 0.25), atol=1e-5)
    additive = _rand(4, (3, 5))
    np.testing.assert_allclose(np.array(attention(q, k, v, additive)),
                               _naive(q, k, v, additive, 0.25), atol=1e-5)


@pytest.mark.parametrize("attention", [sdpa, reference_sdpa])
def test_sdpa_bad_shapes_raise(attention):
    q, k, v = _rand(0, (1, 3, 2, 8)), _rand(1, (1, 2, 4, 8)), _rand(2, (1, 2, 4, 8))
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        attention(q, k, v)
    with pytest.raises(ValueError, match="mask"):
        attention(_rand(0, (1, 2, 2, 8)), k, v, mx.ones((2, 3), dtype=mx.bool_))
    with pytest.raises(ValueError, match="head_dim"):
        attention(_rand(0, (1, 2, 2, 16)), k, v)
    with pytest.raises(ValueError, match="k and v"):
        attention(_rand(0, (1, 2, 2, 8)), k, v[:, :, :3])


# ---------------------------------------------------------------- fused == reference

VARIANTS = {"MHA": 4, "GQA": 2, "MQA": 1}                  # KV heads under 4 query heads
TOLERANCE = {mx.float32: 1e-5, mx.bfloat16: 3e-2}           # bf16: a few units of its 8-bit mantissa


def _mask(kind: str, B: int, L: int, T: int):
    """Every mask attention is given; queries are the last L of T positions."""
    off = T - L
    if kind == "none":
        return None
    if kind == "causal":
        return reference_mask(L, T, off)
    if kind == "sliding":
        return reference_mask(L, T, off, window=3)
    if kind == "chunked":
        return reference_mask(L, T, off, chunk=4)
    if kind == "padding":                                   # left padding: row b starts at pad[b]
        pad = mx.array([0, 2])[:B, None, None, None]
        return reference_mask(L, T, off)[None, None] & (mx.arange(T) >= pad)
    return _rand(9, (L, T))                                 # additive float


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("L", [1, 5])
@pytest.mark.parametrize("kind", ["none", "causal", "sliding", "chunked", "padding", "additive"])
def test_fused_sdpa_equals_the_reference(variant, dtype, L, kind):
    B, T, D, Dv = 2, 12, 32, 16
    q = _rand(0, (B, 4, L, D)).astype(dtype)
    k = _rand(1, (B, VARIANTS[variant], T, D)).astype(dtype)
    v = _rand(2, (B, VARIANTS[variant], T, Dv)).astype(dtype)
    mask = _mask(kind, B, L, T)
    fused, ref = sdpa(q, k, v, mask), reference_sdpa(q, k, v, mask)
    assert fused.dtype == ref.dtype == dtype and fused.shape == ref.shape == (B, 4, L, Dv)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(np.array(fused.astype(mx.float32)), np.array(ref.astype(mx.float32)),
                               atol=tol, rtol=tol)
    exact = _naive(q.astype(mx.float32), k.astype(mx.float32), v.astype(mx.float32),
                   None if mask is None else mask, D ** -0.5)
    np.testing.assert_allclose(np.array(fused.astype(mx.float32)), exact, atol=4 * tol, rtol=4 * tol)


# ---------------------------------------------------------------- decode takes the no-mask path

ATTENTION_TOYS = [k for k in TOY_KINDS if k not in ("mamba", "mamba2")]


@pytest.mark.parametrize("kind", ATTENTION_TOYS)
def test_decode_over_every_cache_needs_no_mask(kind):
    """After a prefill longer than the window and the chunk, each decode step's cache answers None."""
    spec = toy_spec(kind)
    caches = make_caches(spec)
    model = build_model(spec)
    model(mx.array([list(range(1, 21))]), caches)           # 20 tokens: window 8 wrapped, chunk 8 passed
    for step in range(12):                                  # every position of the ring and the chunk
        assert all(c.make_mask(1) is None for c in caches if c is not None), f"step {step}"
        model(mx.array([[step + 1]]), caches)


def test_decode_step_hands_attention_no_mask(monkeypatch):
    """The model passes mask=None to the fused kernel at decode, a bool mask at prefill."""
    seen = []

    def spy(q, k, v, mask=None, scale=None):
        seen.append(None if mask is None else mask.dtype)
        return sdpa(q, k, v, mask, scale)

    monkeypatch.setattr(cache_base, "sdpa", spy)   # the dense caches' attend calls it (cache dispatch)
    for kind in ("gqa", "sliding", "chunked"):
        model, seen[:] = build_model(toy_spec(kind)), []
        caches = make_caches(model.spec)
        model(mx.array([list(range(1, 21))]), caches)
        assert seen and all(m == mx.bool_ for m in seen)
        seen[:] = []
        for t in range(10):
            model(mx.array([[t + 1]]), caches)
        assert seen and all(m is None for m in seen), kind


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


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_mla_absorbed_equals_materialized_for_a_batch(dtype):
    """Absorbed decode folds the heads into one matmul per sequence: rows of a batch stay apart."""
    model = build_model(toy_spec("mla"), dtype=dtype)
    tokens = mx.array([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    outs = {}
    for path in ("absorbed", "materialized"):
        model.mla_path = path
        caches = make_caches(model.spec)
        model(tokens[:, :5], caches)
        outs[path] = mx.concatenate([model(tokens[:, t:t + 1], caches) for t in range(5, 8)], axis=1)
    tol = 1e-5 if dtype == "fp32" else 5e-2
    np.testing.assert_allclose(np.array(outs["absorbed"].astype(mx.float32)),
                               np.array(outs["materialized"].astype(mx.float32)), rtol=tol, atol=tol)


@pytest.mark.parametrize("attention", [sdpa, reference_sdpa])
def test_causal_string_is_the_bottom_right_causal_mask(attention):
    """mlx-lm's caches answer "causal" for a chunk: query i (position T - L + i) sees keys <= itself."""
    q, k, v = _rand(0, (1, 4, 3, 16)), _rand(1, (1, 2, 7, 16)), _rand(2, (1, 2, 7, 16))
    np.testing.assert_allclose(np.array(attention(q, k, v, "causal")),
                               np.array(attention(q, k, v, _causal(3, 7))), atol=1e-6)
    with pytest.raises(ValueError, match="'causal'"):
        attention(q, k, v, "sliding")
