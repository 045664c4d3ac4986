"""Benchmark: one decode step of attention over a paged cache against the dense KVCache.

A decode step = ``update_and_fetch`` of 1 token + attention of 32 query heads + ``mx.eval``.
Dense: KVCache (a view of its buffer) with kvsim's explicit ``sdpa`` or MLX's fused
``mx.fast.scaled_dot_product_attention``. Paged (block sizes 16 and 32): the protocol path (gather
the blocks by block table into (1, H, T, D), then kvsim ``sdpa``) and ``PagedKVCache.attend``
(``mx.gather_mm`` on the pool, no gathered copy). The paged sequence's blocks are interleaved
with a neighbour's (two sequences prefilled in turns of 64 tokens), so reads jump around the pool.

Config: B=1, 8 KV heads, 32 query heads, head_dim 64, float32, one layer, contexts 1K/4K/16K.
Median over ``steps`` rounds after 5 warm-up rounds; every round steps every case once, so all
cases share the same background load (the machine is shared). Target (issue 5): paged / dense
<= 1.5x, judged for ``attend`` against the fastest dense path at each context.
Writes benchmarks/results/paged.{json,md}. Run: python benchmarks/bench_paged.py [--steps 40]
"""

import argparse
import json
import platform
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from kvsim.cache import KVCache
from kvsim.cache.paged import PagedKVPool
from kvsim.cache.sdpa import sdpa

OUT = Path(__file__).parent / "results"
H, HQ, D = 8, 32, 64
TARGET = 1.5
DENSE = {"kvsim sdpa": lambda q, c, k, v: sdpa(q, k, v),
         "mx.fast sdpa": lambda q, c, k, v: mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5)}
PAGED = {"gather + kvsim sdpa": lambda q, c, k, v: sdpa(q, k, v),
         "attend (gather_mm)": lambda q, c, k, v: c.attend(q)}


def _rows(T, seed):
    k = mx.random.normal((1, H, T, D), key=mx.random.key(seed))
    mx.eval(k)
    return k


def dense_cache(T):
    cache = KVCache()
    for start in range(0, T, 4096):
        k = _rows(min(4096, T - start), start)
        mx.eval(cache.update_and_fetch(k, k))
    return cache


def paged_cache(T, block_size, steps):
    """The measured sequence, its blocks interleaved with a neighbour's in turns of 64 tokens."""
    blocks = 2 * (-(-(T + steps + 64) // block_size) + 1)
    pool = PagedKVPool(1, H, D, block_size=block_size, num_blocks=blocks, dtype=mx.float32,
                       enable_prefix_caching=False)
    for s in ("seq", "neighbour"):
        pool.add_sequence(s)
    caches = {s: pool.caches(s)[0] for s in ("seq", "neighbour")}
    for start in range(0, T, 64):
        for s, cache in caches.items():
            k = _rows(min(64, T - start), start + (s == "seq"))
            mx.eval(cache.update_and_fetch(k, k))
    return caches["seq"]


def step_us(cache, attend, q, k):
    t0 = time.perf_counter()
    keys, values = cache.update_and_fetch(k, k)
    mx.eval(attend(q, cache, keys, values))
    return (time.perf_counter() - t0) * 1e6


def run(contexts, steps):
    q = mx.random.normal((1, HQ, 1, D), key=mx.random.key(1))
    k = mx.random.normal((1, H, 1, D), key=mx.random.key(2))
    mx.eval(q, k)
    cases = {}  # (T, cache, attention) -> (cache object, attention function)
    for T in contexts:
        for name, fn in DENSE.items():
            cases[(T, "dense", name)] = (dense_cache(T), fn)
        for bs in (16, 32):
            for name, fn in PAGED.items():
                cases[(T, f"paged bs={bs}", name)] = (paged_cache(T, bs, steps + 5), fn)
    times = {key: [] for key in cases}
    for r in range(steps + 5):
        for key, (cache, fn) in cases.items():
            us = step_us(cache, fn, q, k)
            if r >= 5:
                times[key].append(us)
    rows = [{"context_tokens": T, "cache": c, "attention": a, "median_us": float(np.median(v))}
            for (T, c, a), v in times.items()]
    for row in rows:
        dense = [r["median_us"] for r in rows
                 if r["context_tokens"] == row["context_tokens"] and r["cache"] == "dense"]
        row["ratio_to_fastest_dense"] = round(row["median_us"] / min(dense), 3)
    return rows


def markdown(rows, contexts):
    lines = ["Decode step (µs; update_and_fetch of 1 token + attention + mx.eval), B=1, 8 KV heads, "
             "32 query heads, head_dim 64, float32. In brackets: / the fastest dense path at that context.", "",
             "| cache | attention | " + " | ".join(f"{T // 1024}K" for T in contexts) + " |",
             "|---|---|" + "---:|" * len(contexts)]
    for c, a in dict.fromkeys((r["cache"], r["attention"]) for r in rows):
        cells = []
        for T in contexts:
            r = next(x for x in rows if x["context_tokens"] == T and x["cache"] == c and x["attention"] == a)
            cells.append(f"{r['median_us']:,.0f} ({r['ratio_to_fastest_dense']:.2f}x)")
        lines.append(f"| {c} | {a} | " + " | ".join(cells) + " |")
    worst = max(r["ratio_to_fastest_dense"] for r in rows if r["attention"].startswith("attend"))
    lines += ["", f"Worst paged attend / fastest dense: {worst:.2f}x (target <= {TARGET}x): "
                  f"{'met' if worst <= TARGET else 'NOT met'}."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 16384])
    args = ap.parse_args()
    rows = run(args.contexts, args.steps)
    OUT.mkdir(exist_ok=True)
    meta = {"machine": platform.platform(), "processor": platform.processor(), "mlx": mx.__version__,
            "steps": args.steps, "target_ratio": TARGET,
            "config": {"kv_heads": H, "query_heads": HQ, "head_dim": D, "dtype": "float32"}}
    (OUT / "paged.json").write_text(json.dumps({**meta, "results": rows}, indent=2) + "\n")
    (OUT / "paged.md").write_text(markdown(rows, args.contexts))
    print(markdown(rows, args.contexts))


if __name__ == "__main__":
    main()
