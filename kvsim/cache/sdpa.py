"""Scaled dot-product attention over what a cache returns: dense or quantized K/V.

Contract
- ``sdpa(q, k, v, mask, scale)``: dense caches (KVCache, Rotating, Chunked, Latent).
- ``quantized_sdpa(q, q_keys, q_values, mask, scale, group_size=, bits=, recent_keys=,
  recent_values=)``: a QuantizedKVCache; scores and outputs come straight from the packed
  data with ``mx.quantized_matmul``, so no dequantized copy of the cache is ever built.
  The optional full-precision recent tokens are appended after the quantized ones (they
  are newer), so one mask over the concatenated key axis covers both parts.
- Shapes: q (B, H_q, L, D); k (B, H_kv, T, D); v (B, H_kv, T, D_v); output (B, H_q, L, D_v).
  Grouped-query attention: query heads are reshaped to (B, H_kv, rep, L, D) with
  rep = H_q // H_kv, and K/V get a size-1 axis that broadcasts; K/V are never repeated.
- ``mask``: None (every key visible to every query), a bool array (True = may attend)
  or an additive float array; shape (L, T) or (B|1, H_q|1, L, T).
- Softmax runs with ``precise=True`` (float32 accumulation even for bf16/fp16 inputs).
"""

from __future__ import annotations

import mlx.core as mx

__all__ = ["sdpa", "quantized_sdpa"]


def _group_queries(q: mx.array, kv_heads: int, scale: float | None) -> tuple[mx.array, float]:
    """(B, H_q, L, D) -> (B, H_kv, rep, L, D), already multiplied by the scale."""
    if q.ndim != 4:
        raise ValueError(f"q must have shape (B, H_q, L, D), got {tuple(q.shape)}")
    B, Hq, L, D = q.shape
    if kv_heads <= 0 or Hq % kv_heads:
        raise ValueError(f"query heads {Hq} must be a multiple of the KV heads {kv_heads}")
    scale = D ** -0.5 if scale is None else scale
    return (q * scale).reshape(B, kv_heads, Hq // kv_heads, L, D), scale


def _apply_mask(scores: mx.array, mask: mx.array | None) -> mx.array:
    """Mask (B, H_kv, rep, L, T) scores: bool masks select, float masks are added."""
    if mask is None:
        return scores
    if mask.ndim == 4:
        B, Hkv, rep, L, T = scores.shape
        if mask.shape[1] == 1:
            mask = mask[:, :, None]                          # (B|1, 1, 1, L, T)
        else:
            mask = mask.reshape(mask.shape[0], Hkv, rep, L, T)
    elif mask.ndim != 2:
        raise ValueError(f"mask must have shape (L, T) or (B, H, L, T), got {tuple(mask.shape)}")
    if mask.shape[-1] != scores.shape[-1] or mask.shape[-2] != scores.shape[-2]:
        raise ValueError(f"mask (.., L, T) = {tuple(mask.shape[-2:])} does not match "
                         f"queries x keys = {tuple(scores.shape[-2:])}")
    if mask.dtype == mx.bool_:
        return mx.where(mask, scores, mx.finfo(scores.dtype).min)
    return scores + mask.astype(scores.dtype)


def _ungroup(out: mx.array) -> mx.array:
    """(B, H_kv, rep, L, D_v) -> (B, H_q, L, D_v)."""
    B, Hkv, rep, L, Dv = out.shape
    return out.reshape(B, Hkv * rep, L, Dv)


def sdpa(q: mx.array, k: mx.array, v: mx.array, mask: mx.array | None = None,
         scale: float | None = None) -> mx.array:
    """Dense attention: softmax(scale · q kᵀ + mask) v, GQA by grouping query heads.

    Scores are (B, H_kv, rep, L, T); scale defaults to 1/sqrt(D).
    """
    if k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must be (B, H_kv, T, D) with equal B, H_kv, T; "
                         f"got {tuple(k.shape)} and {tuple(v.shape)}")
    qg, _ = _group_queries(q, k.shape[1], scale)
    if qg.shape[-1] != k.shape[-1]:
        raise ValueError(f"q head_dim {qg.shape[-1]} != k head_dim {k.shape[-1]}")
    scores = qg @ k[:, :, None].swapaxes(-1, -2)             # (B, H_kv, rep, L, T)
    probs = mx.softmax(_apply_mask(scores, mask), axis=-1, precise=True)
    return _ungroup(probs @ v[:, :, None])                    # (B, H_kv, rep, L, D_v)


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
    qg, _ = _group_queries(q, kv_heads, scale)
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
