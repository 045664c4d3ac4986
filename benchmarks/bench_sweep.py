"""Benchmark: the full calculator sweep - every registry model × 4096 token counts × three views.

Target (issue 2): under 50 ms for the whole sweep. Writes benchmarks/results/sweep.{json,md}.
Run: python benchmarks/bench_sweep.py
"""

import json
import platform
import time
from pathlib import Path

import numpy as np

from kvsim.calc import memory
from kvsim.calc.registry import load_model, model_names

OUT = Path(__file__).parent / "results"


def sweep(specs, tokens):
    """Theoretical, allocated (step 256) and read bytes for every spec at every token count."""
    return [(memory.kv_bytes(s, tokens), memory.allocated_bytes(s, tokens),
             memory.read_bytes_per_step(s, tokens)) for s in specs]


def main(repeats: int = 20):
    specs = [load_model(n) for n in model_names()]
    tokens = np.unique(np.geomspace(1, 10_485_760, 4096).astype(np.int64))
    tokens = np.concatenate([tokens, np.arange(1, 4097 - len(tokens) + 1) * 7])[:4096]
    sweep(specs, tokens)  # warm caches (layer groups) once, as a lesson's first call does
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sweep(specs, tokens)
        times.append(time.perf_counter() - t0)
    result = {
        "models": len(specs), "token_counts": int(len(tokens)), "views": 3,
        "median_ms": round(1000 * float(np.median(times)), 2), "min_ms": round(1000 * min(times), 2),
        "target_ms": 50, "repeats": repeats, "machine": platform.machine(), "python": platform.python_version(),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "sweep.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / "sweep.md").write_text(
        "| models | token counts | views | median | min | target |\n|---|---|---|---|---|---|\n"
        f"| {result['models']} | {result['token_counts']} | 3 | {result['median_ms']} ms | "
        f"{result['min_ms']} ms | < 50 ms |\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
