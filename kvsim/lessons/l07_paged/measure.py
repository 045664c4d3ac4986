"""Paged attention against dense attention on real MLX arrays, step by step.

Contract
- :func:`paged_vs_dense` feeds the same seeded keys, values and queries (one layer's real geometry,
  float32) to a dense cache (KVCache, RotatingKVCache for sliding layers, ChunkedKVCache for
  chunked ones) and to a :class:`~kvsim.cache.paged.PagedKVCache` in its own pool, runs
  :func:`kvsim.cache.sdpa.sdpa` over what each returns with the cache's own mask, and records per
  step the largest absolute difference of the outputs and what each cache holds. A prefill of
  ``prompt_tokens`` is followed by ``decode_steps`` single-token steps.
- Nothing here is simulated: the outputs, byte counts and block tables are read from the caches.
"""

from __future__ import annotations

import mlx.core as mx

from ...cache import ChunkedKVCache, KVCache, RotatingKVCache
from ...cache.paged import PagedKVPool
from ...cache.sdpa import sdpa
from ...calc.config import LayerSpec
from ...calc.progress import Progress
from ...calc.units import DEFAULT_BLOCK_SIZE
from ...serving.block_pool import cdiv


def _dense(layer: LayerSpec):
    if layer.kind == "full":
        return KVCache()
    if layer.kind == "sliding":
        return RotatingKVCache(layer.sliding_window)
    if layer.kind == "chunked":
        return ChunkedKVCache(layer.attention_chunk_size)
    raise ValueError(f"layer.kind must be full, sliding or chunked, got {layer.kind!r}")


def paged_vs_dense(layer: LayerSpec, prompt_tokens: int = 100, decode_steps: int = 40,
                   num_attention_heads: int | None = None, block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0,
                   progress: bool = False) -> list[dict]:
    """One row per step: tokens so far, max |O_paged − O_dense|, blocks and bytes each cache holds."""
    if prompt_tokens < 1 or decode_steps < 0:
        raise ValueError("prompt_tokens must be >= 1 and decode_steps >= 0")
    H, D, Dv = layer.num_key_value_heads, layer.head_dim, layer.v_head_dim
    Hq = num_attention_heads or 4 * H
    total = prompt_tokens + decode_steps
    pool = PagedKVPool.for_layer(layer, 1, block_size=block_size, num_blocks=cdiv(total, block_size) + 2,
                                 dtype=mx.float32)
    pool.add_sequence("s")
    paged, dense = pool.caches("s")[0], _dense(layer)
    sizes = [prompt_tokens] + [1] * decode_steps
    it = Progress(sizes, desc=f"paged vs dense ({layer.kind})", unit="steps", enabled=progress)
    key, rows, done = mx.random.key(seed), [], 0
    for S in it:
        key, kk, kv, kq = mx.random.split(key, 4)
        k = mx.random.normal((1, H, S, D), key=kk)
        v = mx.random.normal((1, H, S, Dv), key=kv)
        q = mx.random.normal((1, Hq, S, D), key=kq)
        outs = []
        for cache in (dense, paged):
            mask = cache.make_mask(S)
            keys, values = cache.update_and_fetch(k, v)
            outs.append(sdpa(q, keys, values, mask))
        done += S
        table = pool.allocator.block_table("s")
        rows.append({"tokens": done, "max |paged - dense|": float(mx.abs(outs[0] - outs[1]).max()),
                     "paged blocks held": sum(b >= 0 for b in table), "paged nbytes": paged.nbytes,
                     "dense nbytes": dense.nbytes})
    return rows


def summarize(rows: list[dict]) -> dict:
    """Over all steps of :func:`paged_vs_dense`: the largest difference, the most blocks held, the end state."""
    last = rows[-1]
    return {"steps": len(rows), "tokens": last["tokens"],
            "max |paged - dense|": max(r["max |paged - dense|"] for r in rows),
            "most blocks held": max(r["paged blocks held"] for r in rows),
            "blocks at end": last["paged blocks held"], "paged nbytes at end": last["paged nbytes"],
            "dense nbytes at end": last["dense nbytes"]}
