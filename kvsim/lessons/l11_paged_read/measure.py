"""Lesson 11 (how a paged cache is read): the read paths run on real MLX arrays, each against dense attention.

Contract
- Every function builds a real :class:`~kvsim.cache.paged.PagedKVPool` (float32, small head geometry so
  a run takes well under a second), or real arrays, and compares kvsim's read with the plain yardstick
  :func:`kvsim.cache.sdpa.reference_sdpa` over the same keys; rows carry the largest absolute difference.
- :func:`interleaved_cache`: the measured sequence's blocks interleave with a neighbour's (written in
  turns), so its block table is not contiguous; returns the cache and every key/value it was given.
- :func:`read_path_rows`: the paths ``gather``, ``block_table``, ``online`` of
  :meth:`kvsim.cache.paged.PagedKVCache.read` for the newest query; the gather path's copy MEASURED as the
  nbytes of the arrays :meth:`~kvsim.cache.paged.PagedKVCache.gather_pages` builds, beside the formula.
- :func:`sparse_rows`: ``read(q, pages=kept)`` over every other / every fourth / ... page (the newest
  page always kept) against dense attention over exactly the positions of the kept pages.
- :func:`cascade_run`: lesson 07's group on one layer: a 500-token prompt written once, forked to 100
  requests that each write 60 own tokens and one decode token (copy-on-write of the partly shared
  block); :func:`kvsim.cache.paged.cascade_read` against each row's own paged read.
- :func:`split_k_rows`: :func:`kvsim.cache.partials.split_k_attention` for S near-equal chunks and for
  random cut points, against dense attention.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ...cache.paged import PagedKVPool, cascade_read
from ...cache.partials import split_k_attention
from ...cache.sdpa import reference_sdpa
from ...calc.units import DEFAULT_BLOCK_SIZE
from ...serving.block_pool import cdiv

H, HQ, D = 2, 8, 16          # small heads: 4 query heads per KV head (GQA), as Llama 3's 32 / 8


def _normal(seed: int, *shape) -> mx.array:
    return mx.random.normal(shape, key=mx.random.key(seed))


def interleaved_cache(context: int, block_size: int = DEFAULT_BLOCK_SIZE, turn: int = 24, seed: int = 0):
    """(cache, keys (1, H, T, D), values) of a sequence written in turns with a neighbour in one pool."""
    pool = PagedKVPool(1, H, D, block_size=block_size, num_blocks=2 * cdiv(context, block_size) + 4,
                       dtype=mx.float32, enable_prefix_caching=False)
    for s in ("neighbour", "seq"):
        pool.add_sequence(s)
    cache, other = pool.caches("seq")[0], pool.caches("neighbour")[0]
    ks, vs = [], []
    for i, start in enumerate(range(0, context, turn)):
        n = min(turn, context - start)
        other.update_and_fetch(_normal(seed + 7 * i + 1, 1, H, n, D), _normal(seed + 7 * i + 2, 1, H, n, D))
        k, v = _normal(seed + 7 * i + 3, 1, H, n, D), _normal(seed + 7 * i + 4, 1, H, n, D)
        cache.update_and_fetch(k, v)
        ks.append(k)
        vs.append(v)
    return cache, mx.concatenate(ks, axis=2), mx.concatenate(vs, axis=2)


def _diff(a: mx.array, b: mx.array) -> float:
    return float(mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max())


def read_path_rows(context: int = 1000, block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> list[dict]:
    """Per read path: max |path − dense|, bytes read and copied (formula), the copy measured (nbytes)."""
    cache, keys, values = interleaved_cache(context, block_size, seed=seed)
    q = _normal(seed + 999, 1, HQ, 1, D)                       # the decode query at position T − 1
    dense = reference_sdpa(q, keys, values)                   # the newest query sees every key
    table = cache.pool.allocator.block_table("seq")
    gathered = cache.gather_pages([b for b in table if b >= 0])
    rows = []
    for path in ("gather", "block_table", "online"):
        b = cache.read_bytes(path)
        rows.append({"path": path, "max |path - dense|": _diff(cache.read(q, path=path), dense),
                     "pages": len([t for t in table if t >= 0]), "read_bytes": b["read_bytes"],
                     "copied_bytes": b["copied_bytes"],
                     "copy measured (nbytes)": sum(a.nbytes for a in gathered) if path == "gather" else 0})
    return rows


def block_table_of(cache) -> list[int]:
    """The physical block of each logical page of ``cache``'s sequence."""
    return [b for b in cache.pool.allocator.block_table(cache.seq_id) if b >= 0]


def sparse_rows(context: int = 1000, block_size: int = DEFAULT_BLOCK_SIZE, strides=(1, 2, 4, 8, 16),
                seed: int = 0) -> list[dict]:
    """Per stride s: read every s-th page (the newest always) through the block table against dense
    attention over those pages' positions only; kept pages, bytes read, max |diff|."""
    cache, keys, values = interleaved_cache(context, block_size, seed=seed)
    q = _normal(seed + 999, 1, HQ, 1, D)
    pages = cdiv(context, block_size)
    rows = []
    for s in strides:
        kept = sorted(set(range(0, pages, s)) | {pages - 1})
        positions = np.array([t for p in kept for t in range(p * block_size, min((p + 1) * block_size, context))])
        idx = mx.array(positions)
        want = reference_sdpa(q, keys[:, :, idx], values[:, :, idx])
        got = cache.read(q, path="block_table", pages=kept)
        rows.append({"every n-th page": s, "kept pages": len(kept), "of pages": pages,
                     "kept fraction": len(kept) / pages, "read_bytes": cache.read_bytes(pages=kept)["read_bytes"],
                     "max |sparse - dense over kept|": _diff(got, want)})
    return rows


def cascade_run(requests: int = 100, prompt_tokens: int = 500, own_tokens: int = 60,
                block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> dict:
    """Lesson 07's group on one real pool: shared pages, blocks held, max |cascade − per-row read|."""
    per_row = cdiv(prompt_tokens + own_tokens + 1, block_size) - prompt_tokens // block_size
    pool = PagedKVPool(1, H, D, block_size=block_size, num_blocks=cdiv(prompt_tokens, block_size) + requests * per_row,
                       dtype=mx.float32, enable_prefix_caching=False)
    pool.add_sequence("prompt")
    k = _normal(seed, 1, H, prompt_tokens, D)
    pool.caches("prompt")[0].update_and_fetch(k, 0.5 * k)
    caches = []
    for r in range(requests):
        pool.fork("prompt", r)                        # shares every block, the partly filled last one too
        cache = pool.caches(r)[0]
        n = own_tokens + 1                            # its own tokens and one decode token
        cache.update_and_fetch(_normal(seed + 2 * r + 1, 1, H, n, D), _normal(seed + 2 * r + 2, 1, H, n, D))
        caches.append(cache)
    pool.free("prompt")
    q = _normal(seed + 10**6, requests, HQ, 1, D)
    out = cascade_read(caches, q)
    alone = mx.concatenate([c.read(q[b:b + 1]) for b, c in enumerate(caches)], axis=0)
    return {"requests": requests, "context": caches[0].offset,
            "shared pages": pool.shared_prefix_pages(list(range(requests))),
            "blocks held": pool.allocator.num_used_blocks,
            "blocks without sharing": requests * cdiv(caches[0].offset, block_size),
            "max |cascade - each row alone|": _diff(out, alone)}


def split_k_rows(context: int = 4096, splits=(1, 2, 4, 8, 16), cut_sets: int = 3, seed: int = 0) -> list[dict]:
    """Per split: max |split-K − dense| for S near-equal chunks, then for ``cut_sets`` random cut points."""
    k, v = _normal(seed + 1, 1, H, context, D), _normal(seed + 2, 1, H, context, D)
    q = _normal(seed + 3, 1, HQ, 1, D)
    dense = reference_sdpa(q, k, v)
    rows = [{"chunks": f"S = {S} (equal)", "cut points": S - 1,
             "max |split-K - dense|": _diff(split_k_attention(q, k, v, S), dense)} for S in splits]
    rng = np.random.default_rng(seed)
    for _ in range(cut_sets):
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, context), size=int(rng.integers(1, 9)), replace=False))
        rows.append({"chunks": f"random cuts {cuts[:3]}{' …' if len(cuts) > 3 else ''}", "cut points": len(cuts),
                     "max |split-K - dense|": _diff(split_k_attention(q, k, v, cuts), dense)})
    return rows
