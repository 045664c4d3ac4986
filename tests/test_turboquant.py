"""TurboQuant-style storage: the randomized Hadamard rotation is exact, the cache's two read paths
agree with a plain reference, byte counts equal real nbytes, rotation helps keys with outliers, and
make_caches(quant_mode="rotated") builds it per layer (refusing what it cannot rotate)."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import QuantizedKVCache
from kvsim.cache.sdpa import sdpa
from kvsim.cache.turboquant import (
    RandomizedHadamard,
    TurboQuantKVCache,
    storage_bytes,
    storage_mode_errors,
)
from kvsim.decode import generate
from kvsim.model import build_model, toy_spec


def outlier_kv(T=128, H=2, D=64, seed=0, outlier=20.0, every=16):
    k1, k2, k3 = mx.random.split(mx.random.key(seed), 3)
    channel = mx.where(mx.arange(D) % every == 0, outlier, 1.0)    # every `every`-th key channel is large
    k = mx.random.normal((1, H, T, D), key=k1) * channel
    v = mx.random.normal((1, H, T, D), key=k2)
    q = mx.random.normal((1, 2 * H, 4, D), key=k3)
    return q, k, v


@settings(max_examples=25, deadline=None)
@given(log_d=st.integers(0, 9), seed=st.integers(0, 2**31), rows=st.integers(1, 6))
def test_rotation_is_exact_in_fp32(log_d, seed, rows):
    rot = RandomizedHadamard(2 ** log_d, seed)
    x = mx.random.normal((rows, 2 ** log_d), key=mx.random.key(seed % 1000))
    assert mx.abs(rot.inverse(rot.rotate(x)) - x).max().item() <= 1e-6 * max(1.0, mx.abs(x).max().item())
    R = rot.matrix()
    assert np.allclose(R @ R.T, np.eye(2 ** log_d), atol=1e-12)                # orthogonal
    assert np.allclose(np.array(rot.rotate(x)), np.array(x) @ R.T, atol=1e-5)   # fast = plain matrix


def test_rotation_rejects_sizes_without_a_sylvester_matrix():
    for bad in (0, 3, 96, 16384, 2.0):
        with pytest.raises(ValueError, match="power of two"):
            RandomizedHadamard(bad)
    assert RandomizedHadamard(128).nbytes == 128


@pytest.mark.parametrize("recent", [0, 8])
def test_cache_reads_equal_the_plain_reference(recent):
    q, k, v = outlier_kv()
    cache = TurboQuantKVCache(4, 64, step=32, full_precision_tokens=recent, seed=3)
    keys, values = cache.update_and_fetch(k[:, :, :100], v[:, :, :100])
    keys, values = cache.update_and_fetch(k[:, :, 100:], v[:, :, 100:])
    # plain reference: R as a matrix, mx.quantize / dequantize of the rotated rows, Rᵀ back
    Rk, Rv = (mx.array(r.matrix().astype(np.float32)) for r in (cache.key_rotation, cache.value_rotation))
    n_q = k.shape[2] - recent

    def ref(x, R):
        rx = x @ R.T
        deq = mx.dequantize(*mx.quantize(rx[:, :, :n_q], group_size=64, bits=4), group_size=64, bits=4)
        return mx.concatenate([deq, rx[:, :, n_q:]], axis=2) @ R

    assert mx.allclose(keys, ref(k, Rk), atol=1e-4).item() and mx.allclose(values, ref(v, Rv), atol=1e-4).item()
    # the fast path (rotate q, attend over codes, rotate the output back) = attention on the dense read
    cache2 = TurboQuantKVCache(4, 64, step=32, full_precision_tokens=recent, seed=3)
    fast = cache2.attend_codes(q, cache2.update_and_fetch_quantized(k, v))
    assert mx.allclose(fast, sdpa(q, keys, values, None), atol=1e-4).item()


@pytest.mark.parametrize("bits,group", [(2, 32), (4, 64), (8, 128), (3, 64)])
def test_byte_counts_equal_real_nbytes(bits, group):
    _, k, v = outlier_kv(T=96, D=128)
    for mode, cache in (("uniform", QuantizedKVCache(bits, group, step=32)),
                        ("rotated", TurboQuantKVCache(bits, group, step=32))):
        fetched = cache.update_and_fetch(k[:, :, :64], v[:, :, :64]) if mode == "uniform" else \
            cache.update_and_fetch_quantized(k[:, :, :64], v[:, :, :64])
        counted = storage_bytes(mode, 64, 2, 128, 128, bits, group, scale_bytes=4)
        assert cache.nbytes == counted["total"]
        data = fetched.keys.data.nbytes + fetched.values.data.nbytes
        assert data == counted["data"] and cache.nbytes - data == counted["metadata"]
    assert storage_bytes("fp16", 64, 2, 128)["total"] == mx.zeros((1, 2, 64, 128), mx.float16).nbytes * 2
    with pytest.raises(ValueError, match="mode"):
        storage_bytes("fp8", 1, 1, 64)


def test_rotation_helps_outlier_keys_at_equal_bytes():
    # 4 outlier channels of 128 at 8x (measure.quant_error.synthetic_qkv's defaults)
    rows = storage_mode_errors(*outlier_kv(T=256, D=128, outlier=8.0, every=32), bits=(2, 3, 4, 8))
    by = {(r["mode"], r["bits"]): r for r in rows}
    for b in (2, 3, 4, 8):
        u, r = by["uniform", b], by["rotated", b]
        assert r["nbytes"] == r["total"] and u["nbytes"] == u["total"]
        assert r["total"] - u["total"] == 2 * 128                     # only the two sign vectors differ
    for b in (3, 4, 8):                                               # at 2 bits neither is usable
        assert by["rotated", b]["relative_error"] < 0.6 * by["uniform", b]["relative_error"]
    assert by["fp16", 16]["relative_error"] < by["rotated", 8]["relative_error"] < by["rotated", 3]["relative_error"]
    # without outliers the rotation neither helps nor hurts much
    plain = {(r["mode"], r["bits"]): r["relative_error"]
             for r in storage_mode_errors(*outlier_kv(T=256, D=128, outlier=1.0), bits=(4, 8))}
    for b in (4, 8):
        assert 0.8 < plain["rotated", b] / plain["uniform", b] < 1.2


def test_a_model_decodes_on_rotated_storage():
    model = build_model(toy_spec("gqa"), seed=7)
    exact = generate(model, [1, 2, 3, 4, 5], 6)
    caches = [TurboQuantKVCache(8, 32) for _ in model.blocks]
    rot = generate(model, [1, 2, 3, 4, 5], 6, caches=caches)
    err = mx.abs(rot.logits - exact.logits).max().item() / mx.abs(exact.logits).max().item()
    assert err < 0.02 and rot.tokens[0] == exact.tokens[0]


def test_make_caches_builds_rotated_storage_and_decodes_like_hand_built_caches():
    from kvsim.cache import LatentCache, make_caches
    spec = toy_spec("gqa")
    caches = make_caches(spec, kv_dtype="q8", group_size=32, quant_mode="rotated", seed=5)
    assert [type(c) for c in caches] == [TurboQuantKVCache] * len(spec.layers)
    assert [type(c) for c in make_caches(spec, kv_dtype="q8", group_size=32)] == [QuantizedKVCache] * len(spec.layers)
    model = build_model(spec, seed=7)
    by_hand = [TurboQuantKVCache(8, 32, seed=5 + 2 * i) for i in range(len(spec.layers))]
    a = generate(model, [1, 2, 3, 4, 5], 6, caches=caches)
    b = generate(model, [1, 2, 3, 4, 5], 6, caches=by_hand)
    assert a.tokens == b.tokens and mx.array_equal(a.logits, b.logits).item()
    # every layer rotates with its own signs, and its bytes are the exact storage count (+ the signs)
    signs = {tuple(np.array(c.key_rotation.signs).tolist()) for c in caches}
    assert len(signs) == len(caches)
    layer = spec.layers[0]
    counted = storage_bytes("rotated", 256, layer.num_key_value_heads, layer.head_dim, layer.v_head_dim, 8, 32,
                            scale_bytes=4)                                  # float32 model: fp32 scales, 256 slots
    assert all(c.nbytes == counted["total"] for c in caches)
    # MLA: the latent (keys slot) and the RoPE key (values slot) are rotated and decode
    mla_spec = toy_spec("mla")
    mla = make_caches(mla_spec, kv_dtype="q8", group_size=32, quant_mode="rotated")
    assert [type(c) for c in mla] == [TurboQuantKVCache] * len(mla_spec.layers)
    exact = generate(build_model(mla_spec, seed=1), [3, 1, 4, 1, 5], 4, caches=make_caches(mla_spec))
    assert isinstance(make_caches(mla_spec)[0], LatentCache)
    rot = generate(build_model(mla_spec, seed=1), [3, 1, 4, 1, 5], 4, caches=mla)
    assert mx.abs(rot.logits - exact.logits).max().item() < 0.02 * mx.abs(exact.logits).max().item()


@pytest.mark.parametrize("kwargs,match", [
    (dict(kv_dtype="q4", quant_mode="hadamard"), "quant_mode must be one of uniform, rotated"),
    (dict(kv_dtype="bf16", quant_mode="rotated"), "quant_mode 'rotated' needs a quantized kv_dtype"),
    (dict(kv_dtype=None, quant_mode="rotated"), "quant_mode 'rotated' needs a quantized kv_dtype"),
    (dict(kv_dtype="q4", quant_mode="rotated", seed=-1), "seed must be an integer >= 0"),
])
def test_make_caches_refuses_rotations_it_cannot_build(kwargs, match):
    from kvsim.cache import make_caches
    with pytest.raises(ValueError, match=match):
        make_caches(toy_spec("gqa"), **kwargs)


def test_make_caches_refuses_a_width_without_a_hadamard_matrix():
    from kvsim.cache import make_caches
    spec = toy_spec("gqa", head_dim=48)
    with pytest.raises(ValueError, match="layer 0's head_dim must be a power of two .* got 48"):
        make_caches(spec, kv_dtype="q8", group_size=32, quant_mode="rotated")
