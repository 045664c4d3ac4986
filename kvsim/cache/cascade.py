"""Cascade attention: a group of sequences sharing a prefix reads the prefix once, then each its own suffix.

Contract
- ``cascade_attention(queries, prefix_keys, prefix_values, suffix_keys, suffix_values, scale=None,
  suffix_mask=None)``: queries (B, H_q, L, D); prefix K/V (H_kv, P, D) or (1, H_kv, P, D), the same
  for all B rows (P may be 0); suffix K/V per row, either (B, H_kv, S, D) arrays or lists of B
  arrays (1, H_kv, S_b, D) or (H_kv, S_b, D) of different lengths (S_b may be 0). Every query sees
  every prefix key (the prefix precedes the queries); ``suffix_mask`` (bool, True = may attend)
  says which suffix keys each query sees: (L, S) or (B|1, H_q|1, L, S) for arrays, a list of B
  such masks (L, S_b) / (1, H_q|1, L, S_b) for lists; None = every suffix key.
- Computation: two partials (:mod:`kvsim.cache.partials`), merged by their log-sum-exp.
  The prefix partial folds the B rows into the query rows of ONE product, (1, H_kv, B·rep·L, D)
  against (1, H_kv, P, D): the prefix is read once for the group, not B times. The suffix partial is
  one batched product for suffix arrays, one product per row for lists. Returns (B, H_q, L, D_v) float32.
- Yardstick: :func:`cascade_reference`, dense attention of each row over its concatenation
  [prefix, suffix_b] with the mask [all visible, suffix_mask_b] (:func:`kvsim.cache.sdpa.reference_sdpa`);
  tests: fp32 within 1e-5. When cascade pays (the seed's minimum members and minimum shared pages)
  and the bytes it saves: :mod:`kvsim.calc.paged_read`.
"""

from __future__ import annotations

import mlx.core as mx

from .partials import attention_partial, merge_partials
from .sdpa import reference_sdpa

__all__ = ["cascade_attention", "cascade_reference"]


def _as_4d(a: mx.array, name: str) -> mx.array:
    if a.ndim == 3:
        return a[None]
    if a.ndim != 4 or a.shape[0] != 1:
        raise ValueError(f"{name} must be (H_kv, T, D) or (1, H_kv, T, D), got {tuple(a.shape)}")
    return a


def _rows(keys, values, masks, B: int):
    """Suffix as a list of B (k (1,H,S_b,D), v, mask or None)."""
    if isinstance(keys, mx.array):
        if keys.ndim != 4 or keys.shape[0] != B or values.shape[:3] != keys.shape[:3]:
            raise ValueError(f"suffix_keys/values must be (B={B}, H_kv, S, D) with equal B, H_kv, S; "
                             f"got {tuple(keys.shape)} and {tuple(values.shape)}")
        keys = [keys[b:b + 1] for b in range(B)]
        values = [values[b:b + 1] for b in range(B)]
        if masks is not None and not isinstance(masks, (list, tuple)):
            masks = [masks if masks.ndim == 2 or masks.shape[0] == 1 else masks[b:b + 1] for b in range(B)]
    if len(keys) != B or len(values) != B or (masks is not None and len(masks) != B):
        raise ValueError(f"suffix_keys, suffix_values (and suffix_mask) must hold one entry per row "
                         f"(B = {B}), got {len(keys)}, {len(values)}")
    masks = [None] * B if masks is None else list(masks)
    return [(_as_4d(k, "suffix_keys[b]"), _as_4d(v, "suffix_values[b]"), m)
            for k, v, m in zip(keys, values, masks)]


def cascade_attention(queries: mx.array, prefix_keys: mx.array, prefix_values: mx.array,
                      suffix_keys, suffix_values, scale: float | None = None, suffix_mask=None) -> mx.array:
    """Attention over [shared prefix, own suffix] per row: merge(prefix partial, suffix partial) by LSE.

    out_b = (e^{lse_p} out_p + e^{lse_s} out_s) / (e^{lse_p} + e^{lse_s}); see the module contract.
    """
    if queries.ndim != 4:
        raise ValueError(f"queries must be (B, H_q, L, D), got {tuple(queries.shape)}")
    B, Hq, L, D = queries.shape
    pk, pv = _as_4d(prefix_keys, "prefix_keys"), _as_4d(prefix_values, "prefix_values")
    Hkv = pk.shape[1]
    if Hq % Hkv or pv.shape[:3] != pk.shape[:3] or pk.shape[3] != D:
        raise ValueError(f"prefix K/V must be (H_kv, P, D={D}) with H_q {Hq} a multiple of H_kv; "
                         f"got {tuple(pk.shape)} and {tuple(pv.shape)}")
    batched = isinstance(suffix_keys, mx.array)          # equal suffix lengths: one product for all rows
    rows = _rows(suffix_keys, suffix_values, suffix_mask, B)
    rep = Hq // Hkv
    parts = []
    if pk.shape[2]:
        # (B, H_q, L, D) -> (1, H_kv, B·rep·L, D): every row's queries in one product with the prefix
        q_fold = queries.reshape(B, Hkv, rep * L, D).transpose(1, 0, 2, 3).reshape(1, Hkv, B * rep * L, D)
        out, lse = attention_partial(q_fold, pk, pv, None, scale)            # (1, H_kv, B·rep·L, ·)
        out = out.reshape(Hkv, B, rep * L, -1).transpose(1, 0, 2, 3).reshape(B, Hq, L, -1)
        lse = lse.reshape(Hkv, B, rep * L).transpose(1, 0, 2).reshape(B, Hq, L)
        parts.append((out, lse))
    if batched and suffix_keys.shape[2]:
        parts.append(attention_partial(queries, suffix_keys, suffix_values, suffix_mask, scale))
    elif any(k.shape[2] for k, _, _ in rows):
        outs, lses = [], []
        for b, (k, v, m) in enumerate(rows):
            if k.shape[2]:
                o, s = attention_partial(queries[b:b + 1], k, v, m, scale)
            else:  # an empty suffix: this row sees only the prefix
                o = mx.zeros((1, Hq, L, v.shape[3]), dtype=mx.float32)
                s = mx.full((1, Hq, L), float("-inf"))
            outs.append(o)
            lses.append(s)
        parts.append((mx.concatenate(outs, axis=0), mx.concatenate(lses, axis=0)))
    if not parts:
        raise ValueError("cascade_attention needs at least one key: the prefix and every suffix are empty")
    return merge_partials(parts)[0]


def cascade_reference(queries: mx.array, prefix_keys: mx.array, prefix_values: mx.array,
                      suffix_keys, suffix_values, scale: float | None = None, suffix_mask=None) -> mx.array:
    """Dense attention of each row over concat(prefix, suffix_b), mask [all True, suffix_mask_b]."""
    B, Hq, L, _ = queries.shape
    pk, pv = _as_4d(prefix_keys, "prefix_keys"), _as_4d(prefix_values, "prefix_values")
    outs = []
    for b, (k, v, m) in enumerate(_rows(suffix_keys, suffix_values, suffix_mask, B)):
        keys = mx.concatenate([pk, k], axis=2).astype(mx.float32)
        values = mx.concatenate([pv, v], axis=2).astype(mx.float32)
        mask = None
        if m is not None:
            m = m if m.ndim == 4 else m[None, None]                               # (1, H|1, L, S_b)
            head_axis = m.shape[1]
            pre = mx.ones((1, head_axis, L, pk.shape[2]), dtype=mx.bool_)
            mask = mx.concatenate([pre, m], axis=-1)
        outs.append(reference_sdpa(queries[b:b + 1].astype(mx.float32), keys, values, mask, scale))
    return mx.concatenate(outs, axis=0)
