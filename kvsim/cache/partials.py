"""Partial attention and its log-sum-exp merge: the one merge that split-K, cascade and paged reads share.

Contract
- A *partial* is attention over a subset of the keys, kept with the log-sum-exp of its scores:
  ``attention_partial(q, k, v, mask, scale) -> (out, lse)``, out = softmax(s) v over that subset
  (B, H_q, L, D_v) and lse = log Σ_j exp(s_j) (B, H_q, L), float32, s = scale · q kᵀ (masked keys
  left out). A query row that sees no key of the subset has lse = -inf and out = 0.
- ``merge_partials([(out_1, lse_1), ...])`` is attention over the union of disjoint subsets:
  M = max_i lse_i, w_i = exp(lse_i − M), out = Σ w_i out_i / Σ w_i, lse = M + log Σ w_i. It is
  exact (the softmax normaliser of the union is the sum of the parts' normalisers) and associative,
  so parts may be merged in any grouping: one at a time as they are read (online softmax), all at
  once (Flash-Decoding's reduction) or prefix-then-suffix (cascade attention).
- ``split_k_attention(q, k, v, splits, mask, scale)``: Flash-Decoding. The key axis is cut into
  chunks (``splits`` = a number of near-equal chunks, or the list of cut points), each chunk is one
  partial, and the partials are merged by :func:`merge_partials`.
- Shapes: q (B, H_q, L, D); k (B, H_kv, T, D); v (B, H_kv, T, D_v); mask None, bool (True = may
  attend) of shape (L, T) or (B|1, H_q|1, L, T). Grouped-query attention by grouping query heads
  (rep = H_q // H_kv), K/V never repeated, as :mod:`kvsim.cache.sdpa`.
- Everything is written with explicit matmuls; K and V are read in their own dtype (a float32 copy
  would double what a bf16 cache step reads), scores, softmax and merge run in float32; the plain yardstick is
  :func:`kvsim.cache.sdpa.reference_sdpa` over all keys (tests: fp32 within 1e-5).
"""

from __future__ import annotations

import mlx.core as mx

from .sdpa import as_mask

__all__ = ["attention_partial", "merge_partials", "merge_stacked", "split_k_attention", "split_points",
           "softmax_stats", "finish_partial"]

NEG_INF = float("-inf")


def _grouped_mask(mask, B: int, Hkv: int, rep: int, L: int, T: int):
    """A bool mask broadcastable to grouped scores (B, H_kv, rep, L, T), or None."""
    if mask is None:
        return None
    mask = as_mask(mask, L, T)
    if mask.dtype != mx.bool_:
        raise ValueError(f"mask must be a bool array (True = may attend), got dtype {mask.dtype}")
    if tuple(mask.shape[-2:]) != (L, T) or mask.ndim not in (2, 4):
        raise ValueError(f"mask must have shape (L, T) = {(L, T)} or (B, H_q, L, T), got {tuple(mask.shape)}")
    if mask.ndim == 4:
        if mask.shape[1] == 1:
            return mask[:, :, None]                                # (B|1, 1, 1, L, T)
        return mask.reshape(mask.shape[0], Hkv, rep, L, T)
    return mask


def softmax_stats(scores: mx.array, mask=None):
    """Per row of float32 ``scores`` (…, T): max m (−inf for a row with no visible key), p = exp(s − m)
    with masked keys at 0, and l = Σ p. Rows with no visible key get m = −inf, p = 0, l = 0."""
    if mask is not None:
        scores = mx.where(mask, scores, NEG_INF)
    m = scores.max(axis=-1, keepdims=True)
    m_safe = mx.where(mx.isinf(m), 0.0, m)                       # an empty row: exp(−inf − 0) = 0
    p = mx.exp(scores - m_safe)
    return m_safe, p, p.sum(axis=-1, keepdims=True), mx.isinf(m)


def finish_partial(acc: mx.array, m: mx.array, l: mx.array, empty: mx.array):
    """(out, lse) from an unnormalised accumulator acc = Σ p v, its max m and normaliser l."""
    out = mx.where(l > 0, acc / mx.where(l > 0, l, 1.0), 0.0)
    lse = mx.where(empty, NEG_INF, m + mx.log(mx.where(l > 0, l, 1.0)))
    return out, lse.squeeze(-1)


def attention_partial(q: mx.array, k: mx.array, v: mx.array, mask=None, scale: float | None = None):
    """(out, lse) of softmax(scale · q kᵀ) v over these keys; lse = log Σ_j exp(scale · q·k_j).

    q (B, H_q, L, D), k (B, H_kv, T, D), v (B, H_kv, T, D_v) -> out (B, H_q, L, D_v), lse (B, H_q, L),
    both float32.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"q, k, v must be (B, H_q, L, D), (B, H_kv, T, D), (B, H_kv, T, D_v); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, Hq, L, D = q.shape
    Hkv, T = k.shape[1], k.shape[2]
    if Hq % Hkv or q.shape[3] != k.shape[3] or k.shape[0] not in (1, B):
        raise ValueError(f"query heads {Hq} must be a multiple of KV heads {Hkv}, head dims equal "
                         f"({q.shape[3]} vs {k.shape[3]}), and k's batch 1 or {B}; got k {tuple(k.shape)}")
    rep = Hq // Hkv
    scale = D ** -0.5 if scale is None else scale
    qg = (q * scale).astype(k.dtype).reshape(B, Hkv, rep, L, D)
    # K/V are read in their own dtype (never copied to float32); scores and softmax in float32
    s = (qg @ k[:, :, None].swapaxes(-1, -2)).astype(mx.float32)          # (B, H_kv, rep, L, T)
    m, p, l, empty = softmax_stats(s, _grouped_mask(mask, B, Hkv, rep, L, T))
    acc = (p.astype(v.dtype) @ v[:, :, None]).astype(mx.float32)          # (B, H_kv, rep, L, D_v)
    out, lse = finish_partial(acc, m, l, empty)
    return out.reshape(B, Hq, L, -1), lse.reshape(B, Hq, L)


def merge_partials(partials):
    """Attention over the union of the parts' keys: out = Σ_i e^{lse_i − M} out_i / Σ_i e^{lse_i − M}.

    ``partials``: a non-empty sequence of (out (…, D_v), lse (…)); returns (out, lse) with
    lse = M + log Σ_i e^{lse_i − M}, M = max_i lse_i. Rows no part can see stay out = 0, lse = −inf.
    """
    partials = list(partials)
    if not partials:
        raise ValueError("merge_partials needs at least one (out, lse) partial, got none")
    if len(partials) == 1:
        return partials[0]
    return merge_stacked(mx.stack([out for out, _ in partials]), mx.stack([lse for _, lse in partials]))


def merge_stacked(outs: mx.array, lses: mx.array):
    """:func:`merge_partials` for parts stacked on axis 0: outs (P, …, D_v), lses (P, …)."""
    M = lses.max(axis=0)
    M_safe = mx.where(mx.isinf(M), 0.0, M)
    w = mx.exp(lses - M_safe)                                               # −inf parts weigh 0
    total = w.sum(axis=0)
    out = (w[..., None] * outs).sum(axis=0) / mx.where(total > 0, total, 1.0)[..., None]
    lse = mx.where(total > 0, M_safe + mx.log(mx.where(total > 0, total, 1.0)), NEG_INF)
    return out, lse


def split_points(T: int, splits) -> list[int]:
    """Cut points 0 = c_0 < … < c_S = T: ``splits`` chunks of near-equal length (an int), or the given
    interior cut points (a list of ints in (0, T), increasing)."""
    if isinstance(splits, int) and not isinstance(splits, bool):
        if not 1 <= splits <= max(T, 1):
            raise ValueError(f"splits must be in [1, {T}] (one key per chunk at most), got {splits}")
        return [T * i // splits for i in range(splits + 1)]
    cuts = [int(c) for c in splits]
    if any(not 0 < c < T for c in cuts) or cuts != sorted(set(cuts)):
        raise ValueError(f"split points must be increasing integers in (0, {T}), got {list(splits)}")
    return [0, *cuts, T]


def split_k_attention(q: mx.array, k: mx.array, v: mx.array, splits=2, mask=None,
                      scale: float | None = None) -> mx.array:
    """Flash-Decoding: attention over keys cut into chunks [c_i, c_{i+1}), one partial per chunk, LSE-merged.

    out = merge_partials([attention_partial(q, k[c_i:c_{i+1}], v[c_i:c_{i+1}]) for each chunk]).
    On a GPU each chunk is a separate block of threads, so a decode step at batch 1 (one query per
    head: too few rows to fill the machine) gets S times as much parallel work over the same bytes;
    the seed's engine sets S with ``MLXCEL_PAGED_DECODE_SPLITS``. Returns (B, H_q, L, D_v) float32.
    """
    T = k.shape[2]
    cuts = split_points(T, splits)
    L = q.shape[2]
    full = None if mask is None else as_mask(mask, L, T)
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        m = None if full is None else full[..., a:b]
        parts.append(attention_partial(q, k[:, :, a:b], v[:, :, a:b], m, scale))
    return merge_partials(parts)[0]
