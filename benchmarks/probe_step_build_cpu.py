"""Host time to BUILD one decode step's graph on this CPU, kvsim vs mlx-lm, for tiny many-layer models.

Contract: tiny fp32 models (``--layers`` layers of hidden 64, kvsim's toy geometry: full GQA, sliding
window 8 and MLA), caches filled with ``--context`` tokens; for each variant, the median over
``--repeats`` rounds of the seconds ``model(tokens, caches)`` takes to return its lazy output
(Python only, nothing evaluated), kvsim's eager step and its mlx-lm twin alternating; each step is
evaluated afterwards (untimed) so the caches advance as in real decoding. The graph-build time is
host work, so it shows what benchmarks/probe_step_build.py shows on a GPU without one. Prints one
line per variant: both build times (µs per step and per layer) and their ratio kvsim / mlx-lm, then
the best-of-5 µs of the model-level checks one step runs before any layer (check_tokens on a (1, 1) id,
check_caches over every layer's filled cache), which change nothing and so can be timed alone.
"""

import argparse
import statistics
import time

import mlx.core as mx

from kvsim.measure.step_time import fill_caches
from kvsim.measure.twins import twin
from kvsim.model import build_model, toy_spec
from kvsim.model.cache_checks import check_caches, check_tokens

VARIANTS = {"GQA": "gqa", "sliding": "sliding", "MLA": "mla"}


def build_times(model, context: int, repeats: int) -> dict:
    """Median build seconds per side over ``repeats`` alternating rounds."""
    tw, tok = twin(model), mx.array([[1]])
    kc, tc = model.make_caches(), tw.make_caches(None)
    fill_caches(model, kc, context)
    fill_caches(model, tc, context)
    sides = {"kvsim": lambda: model(tok, kc), "mlx-lm": lambda: tw.model(tok, cache=tc)}
    times = {k: [] for k in sides}
    for _ in range(3):                                   # warm-up
        for fn in sides.values():
            mx.eval(fn())
    for _ in range(repeats):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t0)
            mx.eval(out)
    return {k: statistics.median(v) for k, v in times.items()}


def check_times(model, context: int, loops: int = 300) -> dict:
    """Best-of-5 µs per call of the step's model-level checks (check_tokens, check_caches)."""
    caches, tok = model.make_caches(), mx.array([[1]])
    fill_caches(model, caches, context)
    calls = {"check_tokens": lambda: check_tokens(tok, model.spec.vocab_size),
             "check_caches": lambda: check_caches(model.spec, caches, 1, model.dtype)}
    best = {}
    for name, fn in calls.items():
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(loops):
                fn()
            runs.append((time.perf_counter() - t0) / loops)
        best[name] = 1e6 * min(runs)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--only", default="GQA,sliding,MLA")
    args = ap.parse_args()
    for label, kind in VARIANTS.items():
        if label not in args.only.split(","):
            continue
        model = build_model(toy_spec(kind, num_hidden_layers=args.layers))
        t = build_times(model, args.context, args.repeats)
        k, m = 1e6 * t["kvsim"], 1e6 * t["mlx-lm"]
        print(f"{label} ({args.layers} layers) @ {args.context}: kvsim build {k:.0f} µs "
              f"({k / args.layers:.1f}/layer), mlx-lm {m:.0f} µs ({m / args.layers:.1f}/layer), "
              f"ratio {k / m:.2f}", flush=True)
        c = check_times(model, args.context)
        print(f"  checks: check_tokens {c['check_tokens']:.1f} µs, check_caches {c['check_caches']:.1f} µs "
              f"({c['check_caches'] / args.layers:.2f}/layer)", flush=True)


if __name__ == "__main__":
    main()
