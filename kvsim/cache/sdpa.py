"""Scaled dot-product attention over what a cache returns: dense or quantized K/V.

Contract
- ``reference_sdpa(q, k, v, mask, scale)``: the plain definition, softmax(scale · q kᵀ + mask) v
  written out with explicit matmuls. It is what the lessons show, and the yardstick the fast
  path is tested against; nothing on the decode path calls it.
- ``sdpa(q, k, v, mask, scale)``: the same function through ``mx.fast.scaled_dot_product_attention``
  (dense caches: KVCache, Rotating, Chunked, Latent). On Metal and CUDA the fused decode kernel
  runs when ``mask`` is None (one query or a few, every key visible): the scores never reach
  memory, which is what lets a decode step run near the bandwidth floor. A mask array makes MLX
  fall back to the same composed matmuls as the reference, so the caches answer None whenever
  every key is visible (:meth:`kvsim.cache.base.BaseCache.make_mask`). On a CPU both are the
  composed matmuls.
- ``quantized_sdpa(q, q_keys, q_values, mask, scale, group_size=, bits=, recent_keys=,
  recent_values=)``: a QuantizedKVCache; scores and outputs come straight from the packed
  data with ``mx.quantized_matmul`` (as mlx-lm's quantized attention), so no dequantized copy
  of the cache is ever built. The optional full-precision recent tokens are appended after the
  quantized ones (they are newer), so one mask over the concatenated key axis covers both parts.
- Shapes: q (B, H_q, L, D); k (B, H_kv, T, D); v (B, H_kv, T, D_v); output (B, H_q, L, D_v).
  Grouped-query attention: query heads are reshaped to (B, H_kv, rep, L, D) with
  rep = H_q // H_kv, and K/V get a size-1 axis that broadcasts; K/V are never repeated (the
  fused kernel does the same grouping internally).
- ``mask``: None (every key visible to every query), a bool array (True = may attend)
  or an additive float array; shape (L, T) or (B|1, H_q|1, L, T). The string ``"causal"`` (what
  mlx-lm's caches answer for a multi-token chunk) means query i, at position T - L + i, sees keys
  0 … T - L + i; it is turned into that bool array.
- ``dequantized_sdpa(...)``: the same attention on quantized K/V by another road: dequantize the
  packed data to the query's dtype, then :func:`sdpa`. It reads the packed bytes once but writes and
  reads a dense copy, so it is slower than a quantized kernel; it exists because MLX 0.32.4's CUDA
  backend has no ``quantized_matmul`` kernel for the decode shape (measured on an H200:
  ``benchmarks/results/roofline_cuda*.md``, "Quantized KV").
- Softmax runs with ``precise=True`` (float32 accumulation even for bf16/fp16 inputs).
"""

from __future__ import annotations

import mlx.core as mx

__all__ = ["sdpa", "reference_sdpa", "quantized_sdpa", "dequantized_sdpa", "as_mask"]


def _check_dense(q: mx.array, k: mx.array, v: mx.array) -> None:
    """Shapes as the contract says; every message names the argument and what is expected."""
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(ks) != 4 or len(vs) != 4 or ks[:3] != vs[:3]:
        raise ValueError(f"k and v must be (B, H_kv, T, D) with equal B, H_kv, T; got {tuple(ks)} and {tuple(vs)}")
    if len(qs) != 4:
        raise ValueError(f"q must have shape (B, H_q, L, D), got {tuple(qs)}")
    if qs[1] % ks[1]:
        raise ValueError(f"query heads {qs[1]} must be a multiple of the KV heads {ks[1]}")
    if qs[3] != ks[3]:
        raise ValueError(f"q head_dim {qs[3]} != k head_dim {ks[3]}")


def as_mask(mask, L: int, T: int):
    """None or a mask array as given; mlx-lm's ``"causal"`` as the bool (L, T) array it stands for
    (the last L of T positions query, each sees the keys up to itself)."""
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be an array, None or 'causal', got {mask!r}")
        return mx.arange(T)[None, :] <= mx.arange(T - L, T)[:, None]
    return mask


def _check_mask(mask: mx.array | None, L: int, T: int) -> None:
    if mask is None:
        return
    if mask.ndim not in (2, 4):
        raise ValueError(f"mask must have shape (L, T) or (B, H, L, T), got {tuple(mask.shape)}")
    if tuple(mask.shape[-2:]) != (L, T):
        raise ValueError(f"mask (.., L, T) = {tuple(mask.shape[-2:])} does not match "
                         f"queries x keys = {(L, T)}")


def _group_queries(q: mx.array, kv_heads: int, scale: float | None) -> mx.array:
    """(B, H_q, L, D) -> (B, H_kv, rep, L, D), already multiplied by the scale (default D^-1/2)."""
    if q.ndim != 4:
        raise ValueError(f"q must have shape (B, H_q, L, D), got {tuple(q.shape)}")
    B, Hq, L, D = q.shape
    if kv_heads <= 0 or Hq % kv_heads:
        raise ValueError(f"query heads {Hq} must be a multiple of the KV heads {kv_heads}")
    scale = D ** -0.5 if scale is None else scale
    return (q * scale).reshape(B, kv_heads, Hq // kv_heads, L, D)


def _apply_mask(scores: mx.array, mask: mx.array | None) -> mx.array:
    """Mask (B, H_kv, rep, L, T) scores: bool masks select, float masks are added."""
    if mask is None:
        return scores
    mask = as_mask(mask, scores.shape[-2], scores.shape[-1])
    _check_mask(mask, scores.shape[-2], scores.shape[-1])
    if mask.ndim == 4:
        B, Hkv, rep, L, T = scores.shape
        if mask.shape[1] == 1:
            mask = mask[:, :, None]                          # (B|1, 1, 1, L, T)
        else:
            mask = mask.reshape(mask.shape[0], Hkv, rep, L, T)
    if mask.dtype == mx.bool_:
        return mx.where(mask, scores, mx.finfo(scores.dtype).min)
    return scores + mask.astype(scores.dtype)


def _ungroup(out: mx.array) -> mx.array:
    """(B, H_kv, rep, L, D_v) -> (B, H_q, L, D_v)."""
    B, Hkv, rep, L, Dv = out.shape
    return out.reshape(B, Hkv * rep, L, Dv)


def reference_sdpa(q: mx.array, k: mx.array, v: mx.array, mask: mx.array | None = None,
                   scale: float | None = None) -> mx.array:
    """Dense attention written out: softmax(scale · q kᵀ + mask) v, GQA by grouping query heads.

    Scores are (B, H_kv, rep, L, T); scale defaults to 1/sqrt(D).
    """
    _check_dense(q, k, v)
    qg = _group_queries(q, k.shape[1], scale)
    scores = qg @ k[:, :, None].swapaxes(-1, -2)             # (B, H_kv, rep, L, T)
    probs = mx.softmax(_apply_mask(scores, mask), axis=-1, precise=True)
    return _ungroup(probs @ v[:, :, None])                    # (B, H_kv, rep, L, D_v)


def sdpa(q: mx.array, k: mx.array, v: mx.array, mask: mx.array | None = None,
         scale: float | None = None) -> mx.array:
    """The same softmax(scale · q kᵀ + mask) v through MLX's fused kernel (no mask: fused decode).

    A float mask is cast to q's dtype (the kernel wants a mask that promotes to the output dtype).
    """
    _check_dense(q, k, v)
    if mask is not None:                                   # None: the fused decode path, nothing to check
        mask = as_mask(mask, q.shape[2], k.shape[2])
        _check_mask(mask, q.shape[2], k.shape[2])
        if mask.dtype != mx.bool_:
            mask = mask.astype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


def quantized_sdpa(q: mx.array, q_keys, q_values, mask: mx.array | None = None,
                   scale: float | None = None, *, group_size: int = 64, bits: int = 8,
                   recent_keys: mx.array | None = None,
                   recent_values: mx.array | None = None) -> mx.array:
    """Attention on quantized K/V: scores = quantized_matmul(scale·q, Kq, transpose=True).

    ``q_keys``/``q_values`` are (data, scales, biases) triples as ``mx.quantize`` returns
    them, shapes (B, H_kv, T_q, D·bits/32) and (B, H_kv, T_q, D/group_size); T_q may be 0.
    ``recent_keys``/``recent_values`` (B, H_kv, T_r, D) are the newest tokens in full
    precision (T_r may be 0 or None). Empty parts are skipped (a zero-length
    ``quantized_matmul`` crashes MLX 0.32 on CPU). Keys axis of ``mask`` = T_q + T_r, oldest first.
    """
    n_quant = 0 if q_keys is None else q_keys[0].shape[2]
    n_recent = 0 if recent_keys is None else recent_keys.shape[2]
    if n_quant + n_recent == 0:
        raise ValueError("attention needs at least one cached token, got none")
    kv_heads = q_keys[0].shape[1] if n_quant else recent_keys.shape[1]
    qg = _group_queries(q, kv_heads, scale)
    parts = []
    if n_quant:
        # size-1 axis at -3 so every one of the rep query heads reads the same KV head
        qk = [a[:, :, None] for a in q_keys]
        parts.append(mx.quantized_matmul(qg, *qk, transpose=True,
                                         group_size=group_size, bits=bits))
    if n_recent:
        parts.append(qg @ recent_keys[:, :, None].swapaxes(-1, -2))
    scores = parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=-1)
    probs = mx.softmax(_apply_mask(scores, mask), axis=-1, precise=True)
    out = None
    if n_quant:
        qv = [a[:, :, None] for a in q_values]
        out = mx.quantized_matmul(probs[..., :n_quant], *qv, transpose=False,
                                  group_size=group_size, bits=bits)
    if n_recent:
        recent = probs[..., n_quant:] @ recent_values[:, :, None]
        out = recent if out is None else out + recent
    return _ungroup(out)


def dequantized_sdpa(q: mx.array, q_keys, q_values, mask: mx.array | None = None,
                     scale: float | None = None, *, group_size: int = 64, bits: int = 8,
                     recent_keys: mx.array | None = None,
                     recent_values: mx.array | None = None) -> mx.array:
    """:func:`quantized_sdpa`'s result as sdpa(q, dequantize(Kq) ‖ K_recent, dequantize(Vq) ‖ V_recent).

    Same arguments and shapes as :func:`quantized_sdpa`; the dense copy is in q's dtype.
    """
    keys, values = [], []
    if q_keys is not None and q_keys[0].shape[2]:
        keys.append(mx.dequantize(*q_keys, group_size=group_size, bits=bits).astype(q.dtype))
        values.append(mx.dequantize(*q_values, group_size=group_size, bits=bits).astype(q.dtype))
    if recent_keys is not None and recent_keys.shape[2]:
        keys.append(recent_keys.astype(q.dtype))
        values.append(recent_values.astype(q.dtype))
    if not keys:
        raise ValueError("attention needs at least one cached token, got none")
    cat = (lambda xs: xs[0] if len(xs) == 1 else mx.concatenate(xs, axis=2))
    return sdpa(q, cat(keys), cat(values), mask, scale)
