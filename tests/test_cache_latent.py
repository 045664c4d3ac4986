"""LatentCache (MLA): concatenation reference, calculator bytes, validation, persistence."""

import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import load_cache, save_cache
from kvsim.cache.latent import LatentCache
from kvsim.calc.config import LayerSpec
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.memory import layer_kv_bytes


def _np(a):
    return np.array(a.view(mx.uint16) if a.dtype == mx.bfloat16 else a)


OPS = st.lists(st.one_of(st.tuples(st.just("update"), st.integers(1, 7)),
                         st.tuples(st.just("trim"), st.integers(0, 6)),
                         st.tuples(st.just("save"), st.sampled_from(["state", "file"]))),
               min_size=1, max_size=15)


@settings(max_examples=40)
@given(B=st.integers(1, 2), r=st.sampled_from([8, 16]), rope=st.sampled_from([4, 8]),
       step=st.integers(1, 8), inplace=st.booleans(),
       dtype=st.sampled_from([mx.bfloat16, mx.float16, mx.float32]), ops=OPS, seed=st.integers(0, 999))
def test_matches_concatenation_and_calculator(B, r, rope, step, inplace, dtype, ops, seed):
    layer = LayerSpec(kind="mla", kv_lora_rank=r, qk_rope_head_dim=rope)
    cache = LatentCache.for_layer(layer, step=step, inplace=inplace)
    ref_c = ref_pe = None  # every latent / RoPE key so far, by concatenation
    peak, key = 0, mx.random.key(seed)
    kv_dtype = {mx.bfloat16: "bf16", mx.float16: "fp16", mx.float32: "fp32"}[dtype]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (op, arg) in enumerate(ops):
            key, k1, k2 = mx.random.split(key, 3)
            if op == "update":
                c = mx.random.normal((B, 1, arg, r), key=k1).astype(dtype)
                pe = mx.random.normal((B, 1, arg, rope), key=k2).astype(dtype)
                T = cache.offset + arg
                assert np.array_equal(np.array(cache.visibility_mask(arg)),
                                      np.arange(T)[None, :] <= np.arange(T - arg, T)[:, None])
                got_c, got_pe = cache.update_and_fetch(c, pe)
                ref_c = c if ref_c is None else mx.concatenate([ref_c, c], axis=2)
                ref_pe = pe if ref_pe is None else mx.concatenate([ref_pe, pe], axis=2)
                assert np.array_equal(_np(got_c), _np(ref_c)) and np.array_equal(_np(got_pe), _np(ref_pe))
            elif op == "trim":
                n = min(arg, cache.offset)
                assert cache.trim(arg) == n
                if ref_c is not None:
                    ref_c, ref_pe = ref_c[:, :, :cache.offset], ref_pe[:, :, :cache.offset]
            else:
                before = (cache.meta_state, cache.nbytes)
                if arg == "state":
                    cache = LatentCache.from_state(cache.state, cache.meta_state)
                else:
                    path = Path(tmp) / f"l{i}.safetensors"
                    save_cache(path, cache)
                    cache = load_cache(path, LatentCache)
                assert (cache.meta_state, cache.nbytes) == before
                assert (cache.kv_lora_rank, cache.qk_rope_head_dim) == (r, rope)
            peak = max(peak, cache.offset)
            if ref_c is not None:
                assert cache.offset == ref_c.shape[2]
                assert np.array_equal(_np(cache.latent), _np(ref_c))
                assert np.array_equal(_np(cache.k_pe), _np(ref_pe))
            if inplace:  # the calculator's allocated view: B · slots · (r + rope) · itemsize
                assert cache.nbytes == layer_kv_bytes(layer, peak, kv_dtype, B, "allocated", step)
            else:  # concatenation keeps no slack
                assert cache.nbytes == layer_kv_bytes(layer, cache.offset, kv_dtype, B, "theoretical")
            assert cache.used_bytes == layer_kv_bytes(layer, cache.offset, kv_dtype, B, "theoretical")


def test_deepseek_v3_bytes_per_token():
    """DeepSeek-V3 geometry (r 512, rope 64) in bf16: 1,152 B per token per layer, no head factor."""
    spec = from_hf_config({"model_type": "deepseek_v3", "num_hidden_layers": 2, "hidden_size": 7168,
                           "num_attention_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                           "vocab_size": 1000})
    cache = LatentCache.for_layer(spec.layers[0])
    cache.update_and_fetch(mx.zeros((1, 1, 10, 512), dtype=mx.bfloat16), mx.zeros((1, 1, 10, 64), dtype=mx.bfloat16))
    assert cache.used_bytes == 10 * 1152
    assert cache.nbytes == 256 * 1152 == layer_kv_bytes(spec.layers[0], 10, "bf16", 1, "allocated")


def test_bad_inputs_raise_and_leave_cache_unchanged():
    cache = LatentCache(step=4, kv_lora_rank=16, qk_rope_head_dim=8)
    c, pe = mx.ones((1, 1, 2, 16)), mx.ones((1, 1, 2, 8))
    cache.update_and_fetch(c, pe)
    before = (cache.meta_state, cache.nbytes, _np(cache.latent))
    for args, match in (((mx.ones((1, 2, 2, 16)), mx.ones((1, 2, 2, 8))), r"latent.shape\[1\] must be 1"),
                        ((c, mx.ones((1, 1, 2, 4))), r"k_pe.shape\[3\] must be qk_rope_head_dim = 8"),
                        ((mx.ones((1, 1, 2, 12)), pe), r"latent.shape\[3\] must be kv_lora_rank = 16"),
                        ((c.astype(mx.float16), pe.astype(mx.float16)), "dtype"),
                        ((mx.ones((2, 1, 2, 16)), mx.ones((2, 1, 2, 8))), "batch")):
        with pytest.raises(ValueError, match=match):
            cache.update_and_fetch(*args)
        after = (cache.meta_state, cache.nbytes, _np(cache.latent))
        assert after[:2] == before[:2] and np.array_equal(after[2], before[2])
    with pytest.raises(ValueError, match="kv_lora_rank"):
        LatentCache(kv_lora_rank=0)
