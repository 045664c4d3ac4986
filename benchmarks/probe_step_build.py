"""Host time to BUILD one decode step's graph (Python, no evaluation) beside the whole step, kvsim vs mlx-lm.

Contract: for each variant of bench_roofline's plan named by --only, at one context, the median over
--repeats of (a) the seconds `model(tokens, caches)` takes to return its lazy output and (b) the seconds of
the whole step (build + mx.eval), for kvsim's eager step and its mlx-lm twin. If (a)'s difference is
about (b)'s, the gap is host-side graph building, not kernels. Prints one line per variant and side.
"""

import argparse
import statistics
import time

import mlx.core as mx

from bench_roofline import build, plan
from kvsim.measure.roofline import device_summary
from kvsim.measure.step_time import fill_caches
from kvsim.measure.twins import twin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="sliding,MLA,GQA-8 (Llama")
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    p = plan(mx.is_available(mx.gpu), quick=True)
    for v in p["variants"]:
        if not any(o.strip() in v.label for o in args.only.split(",")) or v.kv_dtype:
            continue
        model = build(v, "bf16", device_summary()["memory_available_bytes"] // 3)
        tw, tok = twin(model), mx.array([[1]])
        kc = model.make_caches()
        fill_caches(model, kc, args.context)
        tc = tw.make_caches(None)
        fill_caches(model, tc, args.context)
        sides = {"kvsim": lambda: model(tok, kc), "mlx-lm": lambda: tw.model(tok, cache=tc)}
        times = {k: ([], []) for k in sides}
        for name, fn in sides.items():
            mx.eval(fn())
        for _ in range(args.repeats):
            for name, fn in sides.items():
                t0 = time.perf_counter()
                out = fn()
                t1 = time.perf_counter()
                mx.eval(out)
                t2 = time.perf_counter()
                times[name][0].append(t1 - t0)
                times[name][1].append(t2 - t0)
        for name, (b, s) in times.items():
            print(f"{v.label} @ {args.context} {name}: build {1e3 * statistics.median(b):.3f} ms, "
                  f"step {1e3 * statistics.median(s):.3f} ms ({len(model.blocks)} layers)", flush=True)
        del kc, tc, model, tw
        mx.clear_cache()


if __name__ == "__main__":
    main()
