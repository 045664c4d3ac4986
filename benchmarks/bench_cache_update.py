"""Benchmark: cost of one decode step (update_and_fetch of 1 token + mx.eval) against the offset.

For each structural layout, in place vs concatenation, at offsets 1K..32K tokens. Target (issue 3):
in-place decode is flat, cost at 32K within 1.3x of cost at 1K, while concatenation grows with T.
Concatenation baselines: KVCache(inplace=False), and for the window/chunk layouts the naive
ReferenceCache (concatenate everything, slice out the window or chunk). The rotating cache runs
twice: returning the window in temporal order (a copy of the window once it wraps around the
ring: O(window) per step, flat in the offset) and with ordered=False (the ring as stored, a view).

Config: B=1, 8 KV heads, head_dim 64, float32 (MLX on CPU is fastest in fp32), K and V.
Reported: the median over `steps` decode steps after 5 warm-up steps, with the caches of all
offsets stepped in turn (see decode_step_us). Concatenation baselines use steps // 10 steps.
Writes benchmarks/results/cache_update.{json,md}. Run: python benchmarks/bench_cache_update.py
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from kvsim.cache import ChunkedKVCache, KVCache, RotatingKVCache

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the naive reference cache is a test harness
from reference_cache import ReferenceCache  # noqa: E402

OUT = Path(__file__).parent / "results"
B, H, D = 1, 8, 64
WINDOW, CHUNK = 1024, 8192  # Gemma 3's sliding window, Llama 4's attention chunk
CASES = {  # name: (mode, factory)
    "KVCache": ("in place", lambda: KVCache()),
    "KVCache(inplace=False)": ("concatenation", lambda: KVCache(inplace=False)),
    f"RotatingKVCache({WINDOW})": ("in place", lambda: RotatingKVCache(WINDOW)),
    f"RotatingKVCache({WINDOW}, ordered=False)": ("in place", lambda: RotatingKVCache(WINDOW, ordered=False)),
    f"Reference sliding {WINDOW}": ("concatenation", lambda: ReferenceCache("sliding", max_size=WINDOW)),
    f"ChunkedKVCache({CHUNK})": ("in place", lambda: ChunkedKVCache(CHUNK)),
    f"Reference chunked {CHUNK}": ("concatenation", lambda: ReferenceCache("chunked", chunk_size=CHUNK)),
}


def _prefill(cache, T):
    """Bring the cache to offset T (the reference by assignment: its (T, T) rule table is too big)."""
    k = mx.random.normal((B, H, T, D), key=mx.random.key(T))
    mx.eval(k)
    if isinstance(cache, ReferenceCache):
        cache.keys, cache.values, cache.offset = k, k, T
    else:
        for start in range(0, T, 4096):  # chunked prefill, as generate loops do
            out = cache.update_and_fetch(k[..., start:start + 4096, :], k[..., start:start + 4096, :])
            mx.eval(out)
            del out


def decode_step_us(factory, offsets, steps):
    """Median per-step time (µs) of decode steps, per starting offset.

    One cache per offset is prefilled first; then every round times one decode step on each cache
    in turn, so all offsets share the same background load (the machine is shared). The first 5
    rounds are warm-up (they absorb the one growth reallocation a step-256 buffer makes).
    """
    x = mx.random.normal((B, H, 1, D), key=mx.random.key(1))
    caches = [factory() for _ in offsets]
    for cache, T in zip(caches, offsets):
        _prefill(cache, T)
    times = [[] for _ in offsets]
    for _ in range(5 + steps):
        for cache, row in zip(caches, times):
            t0 = time.perf_counter()
            k, v = cache.update_and_fetch(x, x)
            mx.eval(k, v)
            del k, v  # a model drops them after attention; holding them would block in-place writes
            row.append(time.perf_counter() - t0)
    return [round(1e6 * float(np.median(row[5:])), 1) for row in times]


def main(offsets, steps):
    cases = {}
    for name, (mode, factory) in CASES.items():
        # concatenation is up to 10,000x slower at 32K and grows far beyond any noise
        us = decode_step_us(factory, offsets, steps if mode == "in place" else max(5, steps // 10))
        cases[name] = {"mode": mode, "median_us": us, "ratio_last_over_first": round(us[-1] / us[0], 2)}
        print(f"{name:38s} {mode:13s} " + " ".join(f"{u:10.1f}" for u in us) + f"  x{us[-1] / us[0]:.2f}")
    flat = all(c["ratio_last_over_first"] <= 1.3 for c in cases.values() if c["mode"] == "in place")
    grows = all(c["ratio_last_over_first"] > 2 for c in cases.values() if c["mode"] == "concatenation")
    result = {
        "offsets_tokens": offsets, "batch": B, "n_kv_heads": H, "head_dim": D, "dtype": "float32",
        "steps": steps, "cases": cases, "target_in_place_ratio": 1.3,
        "in_place_flat": flat, "concatenation_grows": grows,
        "mlx": mx.__version__, "machine": platform.machine(), "python": platform.python_version(),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "cache_update.json").write_text(json.dumps(result, indent=2) + "\n")
    head = " | ".join(f"{T // 1024}K" for T in offsets)
    rows = [f"| {name} | {c['mode']} | " + " | ".join(f"{u:,.0f}" for u in c["median_us"])
            + f" | {c['ratio_last_over_first']}x |" for name, c in cases.items()]
    (OUT / "cache_update.md").write_text(
        f"Decode step cost (µs, update_and_fetch + mx.eval), B={B}, {H} KV heads, head_dim {D}, float32.\n\n"
        f"| cache | mode | {head} | {offsets[-1] // 1024}K / {offsets[0] // 1024}K |\n"
        f"|---|---|{'---|' * len(offsets)}---|\n" + "\n".join(rows) + "\n\n"
        f"In place flat (<= 1.3x): {flat}. Concatenation grows (> 2x): {grows}.\n")
    print(json.dumps({k: result[k] for k in ("in_place_flat", "concatenation_grows")}))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="timed decode steps per sample (in place)")
    p.add_argument("--quick", action="store_true", help="offsets 1K and 4K only")
    a = p.parse_args()
    main([1024, 4096] if a.quick else [1024, 2048, 4096, 8192, 16384, 32768], a.steps)
