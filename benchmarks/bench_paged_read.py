"""Benchmark: how a paged cache is read per decode step: gather vs block table vs cascade (bytes and time).

CPU mode (default; the numbers in benchmarks/results/paged_read.{json,md}):
- One layer, B=1, 2 KV heads, 8 query heads, head_dim 64, float32, block size 16, contexts 1K-32K.
  The measured sequence's blocks interleave with a neighbour's (prefilled in turns of 64 tokens).
- A decode step = ``PagedKVCache.attend(q, k, v, path=...)`` (write one token, read) + ``mx.eval``,
  then ``trim(1)`` outside the timing, so every step sees the same context. Paths: ``gather`` (copy
  the pages into contiguous K/V, then SDPA), ``block_table`` (one partial per block with
  ``mx.gather_mm`` on the pool, log-sum-exp merge) and, up to 4K, ``online`` (the readable loop);
  ``dense`` = a KVCache (one contiguous buffer, no copy) for scale.
- Bytes: read and copied per step from :func:`kvsim.calc.paged_read.read_step_bytes`, the copy
  MEASURED two ways: ``nbytes`` of the arrays the gather path builds, and MLX's peak memory during
  the step above what was allocated before it (``mx.get_peak_memory``; includes scores and outputs).
- Cascade: 8 sequences share a prefix of (context − 64) tokens, each has its own 64-token suffix;
  one decode query per sequence. ``dense`` = attention of each row over its own copy of
  [prefix, suffix] (B·context tokens read), ``cascade`` = :func:`kvsim.cache.cascade_attention`
  (prefix read once); both also with MLX's fused SDPA for dense. Bytes from :func:`kvsim.calc.paged_read.cascade_step_bytes`, checked against
  the nbytes of the arrays each reads.
- Median over ``--steps`` rounds after 3 warm-up rounds; each round steps every case once, so all
  cases share the same background load (the machine is shared: the load average is recorded).

GPU mode (``--gpu``, for an H200 with MLX CUDA): cascade's step time for 8-64 sequences sharing a
4K prefix (+ a 64-token suffix each), 8 KV heads, 32 query heads, head_dim 128, bf16, against dense
attention over each row's own [prefix, suffix] copy with MLX's fused SDPA (and kvsim's explicit
partial attention over the same keys, the cascade's own arithmetic without the sharing). Writes paged_read_gpu.{json,md}.
Run: python benchmarks/bench_paged_read.py [--steps 15] [--max-context 32768] | --gpu [--steps 50]
``--out DIR`` writes elsewhere (a smoke run).
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import mlx.core as mx

from kvsim.cache import KVCache, attention_partial, cascade_attention
from kvsim.cache.paged import PagedKVPool
from kvsim.calc.paged_read import cascade_step_bytes, read_step_bytes

OUT = Path(__file__).parent / "results"
BS = 16


def _normal(shape, seed, dtype=mx.float32):
    a = mx.random.normal(shape, key=mx.random.key(seed)).astype(dtype)
    mx.eval(a)
    return a


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------- CPU: gather vs block table

def paged_cache(T, H, D, steps_room=2):
    """The measured sequence at T tokens, its blocks interleaved with a neighbour's in turns of 64 tokens."""
    blocks = 2 * (-(-(T + 64 + steps_room) // BS) + 1)
    pool = PagedKVPool(1, H, D, block_size=BS, num_blocks=blocks, dtype=mx.float32, enable_prefix_caching=False)
    caches = {}
    for s in ("seq", "neighbour"):
        pool.add_sequence(s)
        caches[s] = pool.caches(s)[0]
    for start in range(0, T, 64):
        n = min(64, T - start)
        for i, c in enumerate(caches.values()):
            k = _normal((1, H, n, D), 2 * start + i)
            mx.eval(c.update_and_fetch(k, k))
    return caches["seq"]


def dense_cache(T, H, D):
    cache = KVCache()
    for start in range(0, T, 4096):
        k = _normal((1, H, min(4096, T - start), D), start)
        mx.eval(cache.update_and_fetch(k, k))
    return cache


def _step_paged(cache, q, k, path):
    out = cache.attend(q, k, k, path=path)
    mx.eval(out)
    return out


def _step_dense(cache, q, k):
    out = cache.attend(q, k, k)
    mx.eval(out)
    return out


def _measure_peak(fn) -> int:
    """Bytes MLX allocated above the active memory at the start, at its peak during fn()."""
    mx.synchronize()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    fn()
    return mx.get_peak_memory() - base


def cpu_read_paths(contexts, steps, H=2, HQ=8, D=64):
    rows = []
    for T in contexts:
        paged, dense = paged_cache(T, H, D), dense_cache(T, H, D)
        q, k = _normal((1, HQ, 1, D), 7), _normal((1, H, 1, D), 8)
        cases = {"gather": lambda: _step_paged(paged, q, k, "gather"),
                 "block_table": lambda: _step_paged(paged, q, k, "block_table"),
                 "dense KVCache": lambda: _step_dense(dense, q, k)}
        if T <= 4096:
            cases["online (loop)"] = lambda: _step_paged(paged, q, k, "online")
        times = {name: [] for name in cases}
        peaks = {}
        for r in range(steps + 3):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                (paged if name != "dense KVCache" else dense).trim(1)
                if r >= 3:
                    times[name].append(dt)
        for name, fn in cases.items():
            peaks[name] = _measure_peak(fn)
            (paged if name != "dense KVCache" else dense).trim(1)
        # the gather path's copy, measured as the nbytes of the arrays it builds (held pages at T + 1)
        paged.pool.write(paged.seq_id, paged.layer, k, k)
        blocks = [b for b in paged.pool.allocator.block_table("seq") if b >= 0]
        keys, values = paged.gather_pages(blocks)
        copy_nbytes = keys.nbytes + values.nbytes
        formula = {p: paged.read_bytes(p) for p in ("gather", "block_table")}
        paged.trim(1)
        assert copy_nbytes == formula["gather"]["copied_bytes"], "gather copy != formula"
        for name in cases:
            path = {"gather": "gather", "dense KVCache": None}.get(name, "block_table")
            b = formula[path] if path else {"read_bytes": (T + 1) * H * 2 * D * 4, "copied_bytes": 0}
            rows.append({"section": "read paths", "context_tokens": T, "case": name,
                         "step_us": statistics.median(times[name]) * 1e6,
                         "read_bytes": b["read_bytes"], "copied_bytes": b["copied_bytes"],
                         "copy_nbytes_measured": copy_nbytes if name == "gather" else 0,
                         "peak_alloc_bytes_measured": peaks[name]})
        del paged, dense
    return rows


# ---------------------------------------------------------------- cascade (CPU and GPU)

def cascade_case(B, P, S, H, HQ, D, dtype, seed=0):
    q = _normal((B, HQ, 1, D), seed, dtype)
    pk, pv = _normal((H, P, D), seed + 1, dtype), _normal((H, P, D), seed + 2, dtype)
    sk, sv = _normal((B, H, S, D), seed + 3, dtype), _normal((B, H, S, D), seed + 4, dtype)
    # dense: every row holds its own contiguous copy of [prefix, suffix] (B·(P+S) tokens read)
    dk = mx.concatenate([mx.broadcast_to(pk[None], (B, H, P, D)), sk], axis=2)
    dv = mx.concatenate([mx.broadcast_to(pv[None], (B, H, P, D)), sv], axis=2)
    mx.eval(dk, dv)
    return q, pk, pv, sk, sv, dk, dv


def cascade_rows(B, P, S, H, HQ, D, dtype, steps, fused_dense: bool, section: str):
    q, pk, pv, sk, sv, dk, dv = cascade_case(B, P, S, H, HQ, D, dtype)
    tb = H * 2 * D * dtype.size
    b = cascade_step_bytes(P, [S] * B, tb)
    assert dk.nbytes + dv.nbytes == b["dense_bytes"]
    assert pk.nbytes + pv.nbytes + sk.nbytes + sv.nbytes == b["cascade_bytes"]
    scale = D ** -0.5
    cases = {"cascade": lambda: cascade_attention(q, pk, pv, sk, sv, scale=scale),
             "dense (explicit)": lambda: attention_partial(q, dk, dv, None, scale)[0]}
    if fused_dense:
        cases["dense (mx.fast sdpa)"] = lambda: mx.fast.scaled_dot_product_attention(q, dk, dv, scale=scale)
    want = cases["dense (explicit)"]().astype(mx.float32)
    err = mx.abs(cases["cascade"]().astype(mx.float32) - want).max().item()
    times = {name: [] for name in cases}
    for r in range(steps + 3):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            mx.eval(fn())
            if r >= 3:
                times[name].append(time.perf_counter() - t0)
    out = []
    for name in cases:
        out.append({"section": section, "sequences": B, "prefix_tokens": P, "suffix_tokens": S,
                    "context_tokens": P + S, "case": name, "step_us": statistics.median(times[name]) * 1e6,
                    "read_bytes": b["cascade_bytes"] if name == "cascade" else b["dense_bytes"],
                    "max_abs_diff_vs_dense": err})
    return out


# ---------------------------------------------------------------- tables

def _fmt_bytes(n):
    return f"{n / 2**20:,.2f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB"


def md_cpu(result):
    rows = result["rows"]
    lines = [f"Paged read per decode step on this CPU ({result['device']}); load average before/after: "
             f"{result['load_before']} / {result['load_after']} (shared machine, 2 cores, run while other jobs "
             "loaded it: the absolute µs carry that load; compare the paths within one context, where every round "
             "steps every case under the same load). "
             f"One layer, B=1, 2 KV heads, 8 query heads, head_dim 64, fp32, block 16; median of {result['steps']} "
             "steps (µs). Read/copied bytes: kvsim.calc.paged_read; 'copy measured' = nbytes of the gathered "
             "K/V; 'peak alloc' = MLX peak memory during the step above the memory held before it.", "",
             "| context | path | step µs | read | copied (formula) | copy measured | peak alloc |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in (r for r in rows if r["section"] == "read paths"):
        lines.append(f"| {r['context_tokens']:,} | {r['case']} | {r['step_us']:,.0f} | {_fmt_bytes(r['read_bytes'])} | "
                     f"{_fmt_bytes(r['copied_bytes'])} | {_fmt_bytes(r['copy_nbytes_measured'])} | "
                     f"{_fmt_bytes(r['peak_alloc_bytes_measured'])} |")
    lines += ["", "Cascade: 8 sequences, shared prefix = context − 64, 64-token suffix each, one decode query "
              "per sequence (same heads, fp32). Dense = each row attends over its own [prefix, suffix] copy.", "",
              "| context | case | step µs | K/V read | max abs diff vs dense |", "|---:|---|---:|---:|---:|"]
    for r in (r for r in rows if r["section"] == "cascade"):
        lines.append(f"| {r['context_tokens']:,} | {r['case']} | {r['step_us']:,.0f} | {_fmt_bytes(r['read_bytes'])} | "
                     f"{r['max_abs_diff_vs_dense']:.1e} |")
    return "\n".join(lines) + "\n"


def md_gpu(result):
    lines = [f"Cascade vs dense decode attention on {result['device']}: B sequences share a 4K prefix (+64 own "
             f"tokens), 8 KV heads, 32 query heads, head_dim 128, bf16; median of {result['steps']} steps (µs).", "",
             "| sequences | case | step µs | K/V read | / fused dense |", "|---:|---|---:|---:|---:|"]
    rows = result["rows"]
    for B in sorted({r["sequences"] for r in rows}):
        group = [r for r in rows if r["sequences"] == B]
        ref = next(r["step_us"] for r in group if r["case"] == "dense (mx.fast sdpa)")
        for r in group:
            lines.append(f"| {B} | {r['case']} | {r['step_us']:,.0f} | {_fmt_bytes(r['read_bytes'])} | "
                         f"{r['step_us'] / ref:.2f}x |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--max-context", type=int, default=32768)
    ap.add_argument("--gpu", action="store_true", help="cascade vs dense at 8-64 sequences, 4K prefix, bf16")
    ap.add_argument("--sequences", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    meta = {"device": str(mx.default_device()) + f" ({platform.processor() or platform.machine()})",
            "mlx": mx.__version__, "steps": args.steps, "load_before": _load()}
    if args.gpu:
        rows = []
        for B in args.sequences:
            rows += cascade_rows(B, args.prefix, 64, 8, 32, 128, mx.bfloat16, args.steps, True, "cascade gpu")
        name, md = "paged_read_gpu", md_gpu
    else:
        contexts = [T for T in (1024, 2048, 4096, 8192, 16384, 32768) if T <= args.max_context]
        rows = cpu_read_paths(contexts, args.steps)
        for T in contexts:
            rows += cascade_rows(8, T - 64, 64, 2, 8, 64, mx.float32, args.steps, True, "cascade")
        name, md = "paged_read", md_cpu
    result = {**meta, "load_after": _load(), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    (args.out / f"{name}.md").write_text(md(result))
    print(md(result))


if __name__ == "__main__":
    main()
