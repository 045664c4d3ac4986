"""Lesson 08 measured: FlashAttention's promise (same bytes, less time) checked on this machine.

Contract
- :func:`fused_vs_reference` times one decode query over a filled K/V cache two ways, interleaved,
  best of ``repeats``: :func:`kvsim.cache.sdpa.reference_sdpa` (softmax(scale · q kᵀ) v written
  out: the scores go to memory and come back) and :func:`kvsim.cache.sdpa.sdpa`
  (``mx.fast.scaled_dot_product_attention``: on Metal and CUDA the fused decode kernel, scores never
  in memory; on a CPU MLX composes the same matmuls). It returns the K/V bytes both read
  (q: (1, H, 1, d_h); K, V: (1, n_kv, T, d_h), ``nbytes`` of the real arrays), the bytes of the
  score matrix the reference writes and reads back (H · T · element bytes, each way), both times
  and their largest difference in output. Nothing is computed from a formula but the score bytes.
"""

from __future__ import annotations

import mlx.core as mx

from ...cache.sdpa import reference_sdpa, sdpa
from ...calc.units import DTYPE_BYTES
from ...measure.roofline import device_summary, interleaved_times

_MX_DTYPES = {"fp32": mx.float32, "bf16": mx.bfloat16, "fp16": mx.float16}


def fused_vs_reference(context: int = 4096, num_attention_heads: int = 32, num_key_value_heads: int = 8,
                       head_dim: int = 128, dtype: str = "fp32", repeats: int = 5, seed: int = 0) -> dict:
    """One decode query over ``context`` cached tokens: reference vs fused attention, same K/V bytes read."""
    if dtype not in _MX_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_MX_DTYPES)}, got {dtype!r}")
    mx.random.seed(seed)
    dt = _MX_DTYPES[dtype]
    q = mx.random.normal((1, num_attention_heads, 1, head_dim)).astype(dt)
    k, v = (mx.random.normal((1, num_key_value_heads, context, head_dim)).astype(dt) for _ in range(2))
    mx.eval(q, k, v)
    scale = head_dim ** -0.5
    fns = {"reference": lambda: reference_sdpa(q, k, v, None, scale), "fused": lambda: sdpa(q, k, v, None, scale)}
    best = {name: 1e3 * min(t) for name, t in interleaved_times(fns, repeats).items()}
    diff = mx.abs(fns["reference"]().astype(mx.float32) - fns["fused"]().astype(mx.float32)).max().item()
    return {"device": device_summary()["name"], "context_tokens": context, "dtype": dtype,
            "kv_bytes": k.nbytes + v.nbytes, "score_bytes": num_attention_heads * context * DTYPE_BYTES[dtype],
            "reference_ms": best["reference"], "fused_ms": best["fused"], "max_abs_difference": diff}
