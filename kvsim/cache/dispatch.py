"""Attention over several rows, each its own sequence with its own cache: the batched form of ``cache.attend``.

Contract
- ``attend_batched(queries, keys, values, caches, scale=None)``: queries (B, H_q, S, D), keys/values
  (B, H_kv, S, ·), ``caches[r]`` the cache of row r (any kvsim layout, one per row, as the
  CachePool hands them out). Row r is stored and attended through ``caches[r].attend`` (row
  isolation: row r never sees another row's keys), so each row's cache picks its own read path
  (dense SDPA, quantized, paged block table) and keeps its own window semantics. Returns
  (B, H_q, S, D_v). The seed's ``cache::attend_batched`` has the same contract.
- The rows run one after another here (rows at different offsets see different numbers of keys). A decode
  step (S = 1) goes through each row's ``attend_step`` (the dense layouts' one-token path: fewer host calls
  per row, the same numbers; a layout with its own read path answers through its ``attend``).
- ``attend_any(cache, queries, keys, values, scale)``: ``cache.attend`` for kvsim's caches; a cache
  without ``attend`` (mlx-lm's own caches, which kvsim's models also run on) is read through the
  mlx-lm protocol: mask from ``make_mask`` before ``update_and_fetch``, then dense SDPA.
"""

from __future__ import annotations

import mlx.core as mx

from .sdpa import sdpa

__all__ = ["attend_batched", "attend_any"]


def attend_any(cache, queries: mx.array, keys: mx.array, values: mx.array, scale: float | None = None) -> mx.array:
    """cache.attend(queries, keys, values, scale), or mlx-lm's protocol for a cache that has no attend."""
    if hasattr(cache, "attend"):
        return cache.attend(queries, keys, values, scale)
    mask = cache.make_mask(queries.shape[2], window_size=None, return_array=False)
    k, v = cache.update_and_fetch(keys, values)
    return sdpa(queries, k, v, mask, scale)


def attend_batched(queries: mx.array, keys: mx.array, values: mx.array, caches, scale: float | None = None) -> mx.array:
    """Row r: caches[r].attend(queries[r], keys[r], values[r]) (:func:`attend_any`); rows concatenated (B, H_q, S, D_v)."""
    caches = list(caches)
    if queries.ndim != 4 or len(caches) != queries.shape[0]:
        raise ValueError(f"caches must hold one cache per row: queries have {queries.shape[0] if queries.ndim else 0} "
                         f"rows, got {len(caches)} caches")
    if any(x.ndim != 4 or x.shape[0] != len(caches) for x in (keys, values)):   # before any row stores a thing
        raise ValueError(f"keys and values must be (B, H_kv, S, ·) with B = {len(caches)} rows, got shapes "
                         f"{tuple(keys.shape)} and {tuple(values.shape)}")
    rows = zip(caches, *(mx.split(x, len(caches), axis=0) for x in (queries, keys, values)))   # (1, H, S, ·) each
    step = queries.shape[2] == 1                   # a decode step: each row's one-token path (the same numbers)
    outs = [c.attend_step(q, k, v, scale) if step and hasattr(c, "attend_step") else attend_any(c, q, k, v, scale)
            for c, q, k, v in rows]
    return mx.concatenate(outs, axis=0)
