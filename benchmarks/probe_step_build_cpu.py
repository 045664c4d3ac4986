"""Host work to BUILD one decode step's graph on this CPU, kvsim (eager and compiled) vs mlx-lm, for tiny
many-layer models: Python calls per layer and µs per layer.

Contract: tiny fp32 models (``--layers`` layers of hidden 64, kvsim's toy geometry: full GQA, sliding
window 8 and MLA), caches filled with ``--context`` tokens; three sides per variant: kvsim's eager step
``model(tokens, caches)``, kvsim's compiled step ``model.compiled_step()(tokens, caches)`` and the mlx-lm
twin ``twin.model(tokens, cache=...)``, each on its own caches. For each side:
- ``build_us``: the median over ``--repeats`` rounds of the seconds the call takes to return its lazy
  output (Python only, nothing evaluated), the three sides alternating; each step is evaluated
  afterwards (untimed) so the caches advance as in real decoding. The graph-build time is host work,
  so it shows what benchmarks/probe_step_build.py shows on a GPU without one.
  ``build_us_min`` is the fastest round (on a shared, loaded machine the least disturbed one).
- ``calls``: the Python-level calls one step makes, counted with ``sys.setprofile`` (``py``: Python
  functions entered; ``c``: builtins called, e.g. ``len``, ``isinstance``; MLX's own functions and
  array operators are not seen by the profiler), and ``ops``: the MLX operations in the step's lazy
  graph (``mx.export_to_dot``; each one is a node built on the host and, on a GPU, about one kernel).
  Counts do not depend on the machine's load; times do.
Per-layer figures divide the step's totals by the layer count (the per-step part, token checks,
embedding and head, is spread over the layers; with 32 layers it is a small share).
Then the best-of-5 µs of the model-level checks one step runs before any layer (check_tokens on a
(1, 1) id, check_caches over every layer's filled cache), which change nothing and so can be timed alone.
``ops_by_kind``: the same graph's nodes counted by MLX primitive (one layer's share, step totals / layers), so
two sides can be compared op by op (on this CPU the ``mx.fast`` calls show as their fallback primitives:
RMSNorm as Square/Sum/Rsqrt/Multiply, RoPE as Cos/Sin/..., SDPA as Matmul/Softmax; on a GPU each is one kernel).
``cache_copy``: whether a step makes an extra pass over the whole cache (a slice update that cannot write in
place copies the buffer): at ``--copy-context`` tokens (2 layers), the step's peak memory above the memory held
before it, over the bytes of its caches; a full copy would put it at >= 1, writing in place keeps it far below.
``--json PATH`` writes the numbers; ``--before PATH`` (an earlier ``--json``) adds a before/after
markdown table, written to ``--md PATH``.
"""

import argparse
import collections
import io
import json
import platform
import statistics
import sys
import time

import re

import mlx.core as mx

from kvsim.measure.step_time import fill_caches
from kvsim.measure.twins import twin
from kvsim.model import build_model, toy_spec
from kvsim.model.cache_checks import check_caches, check_tokens

VARIANTS = {"GQA": "gqa", "sliding": "sliding", "MLA": "mla"}
_NODE = re.compile(r'label ="([^"]+)", shape=rectangle')   # one MLX op in export_to_dot's output
SIDES = ("kvsim", "kvsim-compiled", "mlx-lm")


def _sides(model, context: int) -> dict:
    """name -> zero-argument step function, each side on its own filled caches."""
    tw, tok = twin(model), mx.array([[1]])
    kc, cc, tc = model.make_caches(), model.make_caches(), tw.make_caches(None)
    for caches in (kc, cc, tc):
        fill_caches(model, caches, context)
    step = model.compiled_step()
    return {"kvsim": lambda: model(tok, kc), "kvsim-compiled": lambda: step(tok, cc),
            "mlx-lm": lambda: tw.model(tok, cache=tc)}


def count_calls(fn) -> dict:
    """Python functions entered ('py') and C functions called ('c') while ``fn()`` builds its graph."""
    counts = {"py": 0, "c": 0}

    def profile(frame, event, arg):
        if event == "call":
            counts["py"] += 1
        elif event == "c_call":
            counts["c"] += 1

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    counts["c"] -= 1                                   # sys.setprofile(None) itself
    dot = io.StringIO()
    mx.export_to_dot(dot, out)                         # the step's lazy graph: one rectangle per MLX op
    counts["ops"] = dot.getvalue().count("shape=rectangle")
    counts["by_kind"] = collections.Counter(_NODE.findall(dot.getvalue()))
    mx.eval(out)
    return counts


def build_times(sides: dict, repeats: int) -> dict:
    """(median, min) build seconds per side over ``repeats`` alternating rounds."""
    times = {k: [] for k in sides}
    for _ in range(3):                                   # warm-up (the compiled step traces here)
        for fn in sides.values():
            mx.eval(fn())
    for _ in range(repeats):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t0)
            mx.eval(out)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


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


def cache_copy(label: str, context: int, layers: int = 2) -> dict:
    """Per side: peak bytes one step allocates above what is held before it, over its caches' bytes."""
    model = build_model(toy_spec(VARIANTS[label], num_hidden_layers=layers))
    tw, tok = twin(model), mx.array([[1]])
    held = {"kvsim": model.make_caches(), "kvsim-compiled": model.make_caches(), "mlx-lm": tw.make_caches(None)}
    step = model.compiled_step()
    fns = {"kvsim": lambda c: model(tok, c), "kvsim-compiled": lambda c: step(tok, c),
           "mlx-lm": lambda c: tw.model(tok, cache=c)}
    out = {}
    for name, caches in held.items():
        fill_caches(model, caches, context)
        for _ in range(2):                                  # warm-up (the compiled step traces here)
            mx.eval(fns[name](caches))
        cache_bytes = sum(a.nbytes for c in caches for a in (c.keys, c.values))
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        mx.eval(fns[name](caches))
        extra = mx.get_peak_memory() - before
        out[name] = {"cache_bytes": cache_bytes, "step_peak_extra_bytes": extra, "over_cache": extra / cache_bytes}
    return out


def probe(label: str, layers: int, context: int, repeats: int, copy_context: int = 16384) -> dict:
    model = build_model(toy_spec(VARIANTS[label], num_hidden_layers=layers))
    sides = _sides(model, context)
    t = build_times(sides, repeats)
    row = {"variant": label, "layers": layers, "context": context}
    for name, fn in sides.items():
        c = count_calls(fn)
        row[name] = {"build_us": 1e6 * t[name][0], "build_us_per_layer": 1e6 * t[name][0] / layers,
                     "build_us_min": 1e6 * t[name][1], "build_us_min_per_layer": 1e6 * t[name][1] / layers,
                     "py_calls": c["py"], "c_calls": c["c"], "ops": c["ops"], "ops_per_layer": c["ops"] / layers,
                     "calls_per_layer": (c["py"] + c["c"]) / layers,
                     "py_calls_per_layer": c["py"] / layers,
                     "ops_by_kind": {k: n / layers for k, n in sorted(c["by_kind"].items())}}
    row["checks_us"] = check_times(model, context)
    row["cache_copy"] = {"context": copy_context, **cache_copy(label, copy_context)}
    return row


_COLS = (("calls_per_layer", "calls / layer", ".1f"), ("ops_per_layer", "MLX ops / layer", ".1f"),
         ("build_us_per_layer", "build µs / layer (median)", ".1f"),
         ("build_us_min_per_layer", "build µs / layer (min)", ".1f"))


def _md(rows: list, before: list | None, meta: dict) -> str:
    lines = [f"# Decode step graph build on this CPU (host work per layer): kvsim vs mlx-lm",
             "",
             f"{meta['machine']}, MLX {meta['mlx']}, {meta['layers']} layers (toy hidden 64, fp32), "
             f"context {meta['context']}, median of {meta['repeats']} alternating builds; "
             "calls = Python functions entered + builtins called; MLX ops = nodes of the step's lazy graph; "
             "both per step / layers. Times: µs to build one step's graph, per layer.",
             ""]
    old = {r["variant"]: r for r in (before or [])}
    cols = [c for key, label, fmt in _COLS
            for c in ([(key, f"{label} before", fmt, True), (key, "after", fmt, False)] if before
                      else [(key, label, fmt, False)])]
    ratio_cols = (["/ mlx-lm (median) before", "after", "/ mlx-lm (min) before", "after"] if before
                  else ["/ mlx-lm (median)", "/ mlx-lm (min)"])
    lines += ["| variant | side | " + " | ".join(c[1] for c in cols) + " | " + " | ".join(ratio_cols) + " |",
              "|---|---|" + "---|" * (len(cols) + len(ratio_cols))]
    for r in rows:
        o = old.get(r["variant"])
        for side in SIDES:
            cells = []
            for key, _, fmt, is_before in cols:
                if is_before and not o:                  # a variant the earlier run did not probe
                    cells.append("—")
                    continue
                src = o[side] if is_before else r[side]
                cells.append(format(src[key], fmt) if (o or not is_before) and key in src else "—")
            ratios = []
            for key in ("build_us", "build_us_min"):
                if before:
                    ratios.append(f"{o[side][key] / o['mlx-lm'][key]:.2f}" if o and key in o[side] else "—")
                ratios.append(f"**{r[side][key] / r['mlx-lm'][key]:.2f}**")
            lines.append(f"| {r['variant']} | {side} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "Model-level checks per step (µs, best of 5): " + "; ".join(
        f"{r['variant']}: check_tokens {r['checks_us']['check_tokens']:.1f}, check_caches "
        f"{r['checks_us']['check_caches']:.1f}" for r in rows), ""]
    lines += ["Extra pass over the cache? A step's peak memory above what it held, over its caches' bytes "
              "(>= 1 would mean a full copy; in-place writes keep it far below):", ""]
    lines += [f"- {r['variant']} @ {r['cache_copy']['context']} tokens: " + ", ".join(
        f"{side} {r['cache_copy'][side]['over_cache']:.3f}" for side in SIDES) for r in rows if "cache_copy" in r]
    for r in rows:
        kinds = sorted(set().union(*(r[side].get("ops_by_kind", {}) for side in SIDES)))
        if not kinds:
            continue
        lines += ["", f"{r['variant']}: MLX ops per layer by primitive (this CPU's graph)", "",
                  "| op | " + " | ".join(SIDES) + " |", "|---|" + "---|" * len(SIDES)]
        lines += [f"| {k} | " + " | ".join(f"{r[side].get('ops_by_kind', {}).get(k, 0):.2f}" for side in SIDES) + " |"
                  for k in kinds]
    return "\n".join(lines + [""])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--only", default="GQA,sliding,MLA")
    ap.add_argument("--copy-context", type=int, default=16384, help="context of the full-cache-copy check")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--before", default=None, help="an earlier --json: the md table shows before and after")
    ap.add_argument("--md", default=None, help="write the markdown table here")
    args = ap.parse_args()
    rows = []
    for label in VARIANTS:
        if label not in args.only.split(","):
            continue
        r = probe(label, args.layers, args.context, args.repeats, args.copy_context)
        rows.append(r)
        for side in SIDES:
            s = r[side]
            print(f"{label} ({args.layers} layers) @ {args.context} {side}: {s['calls_per_layer']:.1f} calls/layer "
                  f"({s['py_calls_per_layer']:.1f} Python), {s['ops_per_layer']:.1f} ops/layer, "
                  f"min {s['build_us_min_per_layer']:.1f} µs/layer, build {s['build_us']:.0f} µs "
                  f"({s['build_us_per_layer']:.1f}/layer), / mlx-lm {s['build_us'] / r['mlx-lm']['build_us']:.2f}",
                  flush=True)
        print(f"  peak over cache bytes @ {args.copy_context}: " + ", ".join(
            f"{side} {r['cache_copy'][side]['over_cache']:.3f}" for side in SIDES), flush=True)
        c = r["checks_us"]
        print(f"  checks: check_tokens {c['check_tokens']:.1f} µs, check_caches {c['check_caches']:.1f} µs "
              f"({c['check_caches'] / args.layers:.2f}/layer)", flush=True)
    meta = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "mlx": mx.__version__,
            "layers": args.layers, "context": args.context, "repeats": args.repeats}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if args.md:
        before = json.load(open(args.before))["rows"] if args.before else None
        with open(args.md, "w") as f:
            f.write(_md(rows, before, meta))


if __name__ == "__main__":
    main()
