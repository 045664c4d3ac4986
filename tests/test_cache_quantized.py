"""QuantizedKVCache against a naive reference, the calculator's bytes, and dense attention."""

import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_cache import ReferenceCache

from kvsim.cache import load_cache, save_cache
from kvsim.cache.base import dtype_name
from kvsim.cache.quantized import QuantizedKVCache
from kvsim.cache.quantized_parts import QuantizedKV
from kvsim.cache.sdpa import quantized_sdpa, sdpa
from kvsim.calc.config import LayerSpec
from kvsim.calc.memory import layer_kv_bytes, layer_token_bytes, parse_kv_dtype

SCALE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _layer(H, D, Dv, window):
    if window is None:
        return LayerSpec(kind="full", num_key_value_heads=H, head_dim=D, v_head_dim=Dv)
    return LayerSpec(kind="sliding", num_key_value_heads=H, head_dim=D, v_head_dim=Dv, sliding_window=window)


def _kv_dtype(cache, dtype):
    return parse_kv_dtype(f"q{cache.bits}", group_size=cache.group_size,
                          scale_dtype=SCALE_NAMES[dtype_name(dtype)],
                          full_precision_tokens=cache.full_precision_tokens)


def _np(a):
    """numpy copy, bit-exact (numpy has no bfloat16: compare its raw 16-bit patterns)."""
    return np.array(a.view(mx.uint16) if a.dtype == mx.bfloat16 else a)


def _snapshot(cache):
    """Everything observable about a cache, to check a failed call changed nothing."""
    return (cache.meta_state, cache.nbytes, [_np(a) for a in cache.state])


def _same(a, b):
    return a[:2] == b[:2] and len(a[2]) == len(b[2]) and all(
        x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a[2], b[2]))


def _check_fetch(kv: QuantizedKV, ref_k, ref_v, positions, fp_from, cache):
    """Quantized part == mx.quantize of the reference tokens older than fp_from; rest exact."""
    n_q = int((np.array(positions) < fp_from).sum())
    n_fp = len(positions) - n_q
    for part, ref in ((kv.keys, ref_k[:, :, :n_q]), (kv.values, ref_v[:, :, :n_q])):
        if n_q == 0:
            assert part is None
            continue
        want = mx.quantize(ref, group_size=cache.group_size, bits=cache.bits)
        for got, exp in zip(part, want):
            assert got.dtype == exp.dtype and np.array_equal(_np(got), _np(exp))
    if cache.full_precision_tokens == 0:
        assert kv.recent_keys is None and n_fp == 0
        return
    assert kv.recent_keys.shape[2] == n_fp
    assert np.array_equal(_np(kv.recent_keys), _np(ref_k[:, :, n_q:]))
    assert np.array_equal(_np(kv.recent_values), _np(ref_v[:, :, n_q:]))


def _check_attention(kv, cache, mask, key):
    """quantized_sdpa on the fetch == dense sdpa on its dequantized + full-precision tokens."""
    B, H = cache._geom["B"], cache._geom["H"]
    S = mask.shape[0]
    q = mx.random.normal((B, 2 * H, S, cache._geom["k_dim"]), key=key)
    parts_k, parts_v = [], []
    if kv.keys is not None:
        parts_k.append(mx.dequantize(*kv.keys, group_size=kv.group_size, bits=kv.bits))
        parts_v.append(mx.dequantize(*kv.values, group_size=kv.group_size, bits=kv.bits))
    if kv.recent_keys is not None:
        parts_k.append(kv.recent_keys)
        parts_v.append(kv.recent_values)
    dense = sdpa(q, mx.concatenate(parts_k, axis=2), mx.concatenate(parts_v, axis=2), mask)
    out = quantized_sdpa(q, kv.keys, kv.values, mask, group_size=kv.group_size, bits=kv.bits,
                         recent_keys=kv.recent_keys, recent_values=kv.recent_values)
    np.testing.assert_allclose(np.array(out), np.array(dense), atol=2e-5)


OPS = st.lists(st.one_of(st.tuples(st.just("update"), st.integers(1, 6)),
                         st.tuples(st.just("trim"), st.integers(0, 5)),
                         st.tuples(st.just("save"), st.sampled_from(["state", "file"]))),
               min_size=1, max_size=14)


@settings(max_examples=60)
@given(bits=st.sampled_from([2, 3, 4, 6, 8]), group_size=st.sampled_from([32, 64]),
       dims=st.sampled_from([(64, 64), (64, 128), (128, 64)]), B=st.integers(1, 2), H=st.integers(1, 2),
       step=st.integers(1, 8), R=st.integers(0, 5), window=st.one_of(st.none(), st.integers(1, 9)),
       dtype=st.sampled_from([mx.float32, mx.bfloat16, mx.float16]), ops=OPS, seed=st.integers(0, 999))
def test_matches_reference_and_calculator(bits, group_size, dims, B, H, step, R, window, dtype, ops, seed):
    D, Dv = dims
    cache = QuantizedKVCache(bits, group_size, step, full_precision_tokens=R, max_size=window)
    ref = ReferenceCache("full") if window is None else ReferenceCache("sliding", max_size=window, keep=0)
    layer, kvd = _layer(H, D, Dv, window), None
    fp_from, held, peak = 0, 0, 0  # reference: positions >= fp_from are full precision
    key = mx.random.key(seed)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (op, arg) in enumerate(ops):
            key, k1, k2, k3 = mx.random.split(key, 4)
            if op == "update":
                S = arg
                k = mx.random.normal((B, H, S, D), key=k1).astype(dtype)
                v = mx.random.normal((B, H, S, Dv), key=k2).astype(dtype)
                mask = cache.visibility_mask(S)
                assert np.array_equal(np.array(mask), np.array(ref.visibility_mask(S)))
                positions = ref.key_positions(S)
                assert np.array_equal(np.array(cache.key_positions(S)), positions)
                kv = cache.update_and_fetch(k, v)
                ref_k, ref_v = ref.update_and_fetch(k, v)
                fp_from = max(fp_from, ref.offset - R)
                held = ref.offset if window is None else min(held + S, window)
                _check_fetch(kv, ref_k, ref_v, positions, fp_from, cache)
                if dtype == mx.float32:
                    _check_attention(kv, cache, mask, k3)
                kvd = _kv_dtype(cache, dtype)
            elif op == "trim":
                can = ref.offset if held == ref.offset else max(0, held - window + 1)
                assert cache.trimmable_tokens == can and cache.is_trimmable() == (can == ref.offset)
                n = ref.trim(min(arg, can))  # trim rewinds what it can exactly, and says how much
                assert cache.trim(arg) == n
                held -= n
                fp_from = min(fp_from, ref.offset)
            elif arg == "state":
                before = _snapshot(cache)
                cache = QuantizedKVCache.from_state(cache.state, cache.meta_state)
                assert _same(before, _snapshot(cache))
            else:
                path = Path(tmp) / f"c{i}.safetensors"
                before = _snapshot(cache)
                save_cache(path, cache)
                cache = load_cache(path, QuantizedKVCache)
                assert _same(before, _snapshot(cache))
            peak = max(peak, ref.offset)
            assert cache.offset == ref.offset and cache.size() == held
            if kvd is not None:  # the calculator's allocated view, to the byte
                assert cache.nbytes == layer_kv_bytes(layer, peak, kvd, B, "allocated", step)
                n_fp = max(0, ref.offset - max(fp_from, ref.offset - held))
                used = B * ((held - n_fp) * layer_token_bytes(layer, kvd)
                            + n_fp * layer_token_bytes(layer, kvd, full_precision=True))
                assert cache.used_bytes == used


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_nbytes_equals_calculator_per_token_rate(dtype, bits, group_size):
    """300 tokens of a 128-dim, 2-head layer: D·bits/8 + 2·(D/g)·2 bytes per head and token, K and V."""
    cache = QuantizedKVCache(bits, group_size)
    cache.update_and_fetch(mx.zeros((1, 2, 300, 128), dtype=dtype), mx.zeros((1, 2, 300, 128), dtype=dtype))
    per_head_token = 128 * bits // 8 + 2 * (128 // group_size) * 2
    assert cache.capacity == 512
    assert cache.nbytes == 512 * 2 * 2 * per_head_token
    layer = _layer(2, 128, 128, None)
    assert cache.nbytes == layer_kv_bytes(layer, 300, _kv_dtype(cache, dtype), 1, "allocated")
    assert cache.used_bytes == layer_kv_bytes(layer, 300, _kv_dtype(cache, dtype), 1, "theoretical")


def test_full_precision_window_capacity():
    """R = 300, step 256: full-precision slots 256 -> 300 (capped), quantized slots start at T > R."""
    cache = QuantizedKVCache(4, 64, full_precision_tokens=300)
    x = mx.zeros((1, 1, 1, 64), dtype=mx.bfloat16)
    seen = []
    for T in range(1, 560):
        cache.update_and_fetch(x, x)
        if T in (1, 256, 257, 300, 301, 556, 557):
            seen.append((T, cache.quantized_capacity, cache.full_precision_capacity))
    assert seen == [(1, 0, 256), (256, 0, 256), (257, 0, 300), (300, 0, 300), (301, 256, 300),
                    (556, 256, 300), (557, 512, 300)]


def test_attention_error_shrinks_with_bits_and_group_size():
    """Relative error of quantized attention vs dense attention on the unquantized K/V (float32)."""
    B, Hkv, rep, T, D, L = 1, 4, 2, 128, 128, 16
    k1, k2, k3 = mx.random.split(mx.random.key(0), 3)
    k, v = mx.random.normal((B, Hkv, T, D), key=k1), mx.random.normal((B, Hkv, T, D), key=k2)
    q = 2 * mx.random.normal((B, Hkv * rep, L, D), key=k3)  # peaked enough to matter
    dense = sdpa(q, k, v)
    errors = {}
    for gs in (32, 64, 128):
        for bits in (2, 3, 4, 6, 8):
            kv = QuantizedKVCache(bits, gs).update_and_fetch(k, v)
            out = quantized_sdpa(q, kv.keys, kv.values, group_size=gs, bits=bits)
            errors[gs, bits] = (mx.linalg.norm((out - dense).flatten()) / mx.linalg.norm(dense.flatten())).item()
    for gs in (32, 64, 128):
        by_bits = [errors[gs, b] for b in (2, 3, 4, 6, 8)]
        assert by_bits == sorted(by_bits, reverse=True) and len(set(by_bits)) == 5
    for bits in (2, 3, 4, 6, 8):
        assert errors[32, bits] < errors[64, bits] < errors[128, bits]
    assert errors[128, 8] < 0.02 and errors[32, 4] < 0.2 and errors[128, 2] > 0.5
    # keeping every token in full precision gives dense attention back exactly
    kv = QuantizedKVCache(4, 64, full_precision_tokens=T).update_and_fetch(k, v)
    assert kv.keys is None
    out = quantized_sdpa(q, None, None, recent_keys=kv.recent_keys, recent_values=kv.recent_values)
    np.testing.assert_allclose(np.array(out), np.array(dense), atol=1e-5)


def test_bad_arguments_and_inputs_leave_cache_unchanged():
    for kwargs, field in (({"bits": 5}, "bits"), ({"group_size": 16}, "group_size"),
                          ({"full_precision_tokens": -1}, "full_precision_tokens"),
                          ({"max_size": 0}, "max_size"), ({"step": 0}, "step")):
        with pytest.raises(ValueError, match=field):
            QuantizedKVCache(**kwargs)
    cache = QuantizedKVCache(4, 64, step=4, full_precision_tokens=2)
    x = mx.ones((1, 2, 3, 64), dtype=mx.bfloat16)
    with pytest.raises(ValueError, match=r"keys.shape\[3\] \(head_dim\) 96 must be a multiple of group_size 64"):
        cache.update_and_fetch(mx.ones((1, 2, 3, 96), dtype=mx.bfloat16), mx.ones((1, 2, 3, 64), dtype=mx.bfloat16))
    assert cache.nbytes == 0 and cache.offset == 0 and cache.state == ()
    cache.update_and_fetch(x, x)
    before = _snapshot(cache)
    bad = [(x.astype(mx.float32), x.astype(mx.float32)), (x[:, :1], x[:, :1]),
           (x, x[..., :32]), (x[0], x[0]), (x, x[:, :, :2])]
    for k, v in bad:
        with pytest.raises(ValueError):
            cache.update_and_fetch(k, v)
        assert _same(before, _snapshot(cache))
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        cache.trim(-1)
    assert _same(before, _snapshot(cache))


# ---------------------------------------------------------------- issue 12, defect 8


def test_fetch_unpacks_as_mlx_lm_triples_and_the_cache_has_bits():
    """Defect 8: update_and_fetch returned a 6-field tuple; mlx-lm unpacks (keys, values) triples and
    reads cache.bits / cache.group_size for its quantized attention."""
    cache = QuantizedKVCache(bits=4, group_size=32)
    k = mx.random.normal((1, 2, 5, 64), key=mx.random.key(1))
    v = mx.random.normal((1, 2, 5, 64), key=mx.random.key(2))
    keys, values = cache.update_and_fetch(k, v)
    assert (cache.bits, cache.group_size) == (4, 32)
    for got, x in ((keys, k), (values, v)):
        want = mx.quantize(x, group_size=32, bits=4)
        assert len(got) == 3 and all(mx.array_equal(a, b).item() for a, b in zip(got, want))
    exact = QuantizedKVCache(bits=8, group_size=32, full_precision_tokens=2)
    kv = exact.update_and_fetch(k, v)
    assert kv.recent_keys.shape[2] == 2   # kvsim's named fields stay
    with pytest.raises(ValueError, match="full-precision"):
        keys, values = kv                 # mlx-lm's triples cannot carry the exact tokens


def test_kv_cache_to_quantized_holds_the_same_tokens():
    """Defect 8: KVCache had no to_quantized (mlx-lm's generate_step calls it with kv_bits)."""
    from kvsim.cache import KVCache

    dense = KVCache(step=16)
    k = mx.random.normal((1, 2, 20, 64), key=mx.random.key(3))
    dense.update_and_fetch(k, k)
    dense.trim(3)
    q = dense.to_quantized(group_size=64, bits=8)
    assert isinstance(q, QuantizedKVCache) and (q.bits, q.group_size, q.offset, q.step) == (8, 64, 17, 16)
    keys, _ = q.update_and_fetch(k[:, :, :1], k[:, :, :1])
    want = mx.quantize(mx.concatenate([k[:, :, :17], k[:, :, :1]], axis=2), group_size=64, bits=8)
    assert all(mx.array_equal(a, b).item() for a, b in zip(keys, want))
    assert KVCache().to_quantized().offset == 0
