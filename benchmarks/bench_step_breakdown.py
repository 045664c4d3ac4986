"""Benchmark: where one decode step's time goes, per context (GQA-8 at Llama 3 8B's shapes).

Measured in one process, steps interleaved, best of N, per context T:
- ``step_eager``: kvsim's eager step (``model(tokens, caches)``); ``step_compiled``: the compiled step
  (:mod:`kvsim.model.compiled`); ``step_mlx_lm``: mlx-lm's own model and caches on the same weights;
- ``gemv_eager`` / ``gemv_compiled``: the weight matrix-vector products alone, every layer's fused QKV,
  output, gate|up and down products chained (no attention, no norms), eager and under ``mx.compile``;
- ``build_eager`` / ``build_compiled`` / ``build_mlx_lm``: the time to build one step's graph in Python,
  before ``mx.eval`` (MLX is lazy: on a GPU this host time is not hidden behind the kernels of the step);
- floors from the copy bandwidth measured in the same run: weights (bytes every step reads) and cache
  (kvsim.calc.memory.read_bytes_per_step).
The breakdown a lesson stacks (each part in ms, summing to ``step_eager``): weights' floor; MLX's
matrix-vector efficiency (gemv_compiled − weights' floor); the cache's floor; launch and graph overhead
(step_eager − step_compiled); the rest (step_compiled − gemv_compiled − cache floor).

Run: python benchmarks/bench_step_breakdown.py [--device cpu|gpu] [--out DIR] [--repeats N]
Writes benchmarks/results/step_breakdown_<backend>.{json,md} (and under --out).
"""

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import mlx.core as mx

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.model.compiled import compiled_step
from kvsim.measure.roofline import device_limits, device_summary, fitted_model, interleaved_times
from kvsim.measure.step_time import fill_caches, model_weights_read_bytes
from kvsim.measure.twins import mlx_lm_version, twin

RESULTS = Path(__file__).parent / "results"
K = 1024


def gemv_chain(model, step):
    """x -> every block's fused qkv, output, gate|up and down products in turn; x (1, 1, hidden)."""
    hidden = model.spec.hidden_size
    weights = [(w["qkv"], b.mixer.wo, w["gate_up"], b.ffn.down) for b, w in zip(model.blocks, step.weights)]
    inter = model.blocks[0].ffn.down.shape[1]

    def chain(x, *flat):
        for i in range(0, len(flat), 4):
            qkv, wo, gate_up, down = flat[i:i + 4]
            a = (x @ qkv.T)[..., :wo.shape[1]]
            x = a @ wo.T
            x = (x @ gate_up.T)[..., :inter] @ down.T
        return x

    flat = [w for ws in weights for w in ws]
    x = mx.ones((1, 1, hidden), dtype=model.dtype)
    compiled = mx.compile(chain)
    nbytes = sum(w.nbytes for w in flat)
    return (lambda: chain(x, *flat)), (lambda: compiled(x, *flat)), nbytes


def build_time(fn, repeats: int) -> float:
    """Best seconds to build (not evaluate) one step's graph; each graph is then evaluated."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
        mx.eval(out)
    return best


def point(model, step, tw, T: int, repeats: int, bw: float) -> dict:
    tokens = mx.array([[1]])
    caches = {name: (model.make_caches() if name != "mlx_lm" else tw.make_caches(None))
              for name in ("eager", "compiled", "mlx_lm")}
    for c in caches.values():
        fill_caches(model, c, T)
    fns = {"step_eager": lambda: model(tokens, caches["eager"]),
           "step_compiled": lambda: step(tokens, caches["compiled"]),
           "step_mlx_lm": lambda: tw.model(tokens, cache=caches["mlx_lm"])}
    g_eager, g_comp, g_bytes = gemv_chain(model, step)
    fns.update(gemv_eager=g_eager, gemv_compiled=g_comp)
    times = {k: 1e3 * min(v) for k, v in interleaved_times(fns, repeats).items()}
    builds = {f"build_{k[5:]}": 1e3 * build_time(fns[k], repeats) for k in ("step_eager", "step_compiled",
                                                                           "step_mlx_lm")}
    held = T + 2 + 2 * repeats
    w_floor = 1e3 * model_weights_read_bytes(model) / bw
    c_floor = 1e3 * memory.read_bytes_per_step(model.spec, held, 1) / bw
    parts = {"weights_floor": w_floor, "gemv_efficiency": times["gemv_compiled"] - w_floor, "cache_floor": c_floor,
             "launch_and_graph": times["step_eager"] - times["step_compiled"],
             "rest": times["step_compiled"] - times["gemv_compiled"] - c_floor}
    return {"context_tokens": T, "ms": times, "build_ms": builds, "gemv_weight_bytes": g_bytes,
            "gemv_floor_ms": 1e3 * g_bytes / bw, "breakdown_ms": parts,
            "compiled_over_mlx_lm": times["step_compiled"] / times["step_mlx_lm"],
            "eager_over_mlx_lm": times["step_eager"] / times["step_mlx_lm"]}


def markdown(res: dict) -> str:
    m = res["meta"]
    lines = [f"# Where a decode step's time goes ({res['device']['name']}, {res['device']['backend']})", "",
             f"GQA-8 at Llama 3 8B's shapes, {res['geometry']['num_layers']} layers, {m['dtype']}; MLX {m['mlx']}, "
             f"mlx-lm {m['mlx_lm']}, {m['date']}; best of {m['repeats']}; copy bandwidth "
             f"{res['copy_bytes_per_s'] / 1e9:.0f} GB/s.", "",
             "| context | eager ms | compiled ms | mlx-lm ms | compiled / mlx-lm | GEMV chain eager | compiled | "
             "GEMV floor | build eager | build compiled | build mlx-lm |", "|---|" + "---|" * 10]
    for p in res["points"]:
        t, b = p["ms"], p["build_ms"]
        lines.append(f"| {p['context_tokens']:,} | {t['step_eager']:.2f} | {t['step_compiled']:.2f} | "
                     f"{t['step_mlx_lm']:.2f} | {p['compiled_over_mlx_lm']:.2f} | {t['gemv_eager']:.2f} | "
                     f"{t['gemv_compiled']:.2f} | {p['gemv_floor_ms']:.2f} | {b['build_eager']:.2f} | "
                     f"{b['build_compiled']:.2f} | {b['build_mlx_lm']:.2f} |")
    names = list(res["points"][0]["breakdown_ms"]) if res["points"] else []
    lines += ["", "Breakdown of the eager step (ms): " + ", ".join(names), "",
              "| context | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {p['context_tokens']:,} | " + " | ".join(f"{p['breakdown_ms'][n]:.2f}" for n in names) + " |"
              for p in res["points"]]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="gpu" if mx.is_available(mx.gpu) else "cpu")
    ap.add_argument("--out")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    gpu = args.device == "gpu"
    mx.set_default_device(mx.gpu if gpu else mx.cpu)
    dtype, repeats = ("bf16", args.repeats or 10) if gpu else ("fp32", args.repeats or 5)
    build = {} if gpu else {"num_layers": 2, "vocab_size": 4096, "intermediate_size": 2048}
    contexts = (1 * K, 8 * K, 32 * K, 128 * K) if gpu else (256, 1 * K, 4 * K)
    dev = device_summary()
    limits = device_limits(2 * 2**30 if gpu else 256 * 2**20, 8192 if gpu else 1024, dtype)
    model = fitted_model(load_model("llama-3-8b"), dtype, dev["memory_available_bytes"], **build)
    step, tw = compiled_step(model), None
    tw = twin(model)
    res = {"meta": {"mlx": mx.__version__, "mlx_lm": mlx_lm_version(), "dtype": dtype, "repeats": repeats,
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "python": sys.version.split()[0]},
           "device": dev, "copy_bytes_per_s": limits["copy_bytes_per_s"],
           "geometry": {"num_layers": len(model.spec.layers), "weights_read_bytes": model_weights_read_bytes(model)},
           "points": []}
    for T in contexts:
        res["points"].append(point(model, step, tw, T, repeats, limits["copy_bytes_per_s"]))
        mx.clear_cache()
        print(markdown(res).splitlines()[-1], flush=True)
    name = f"step_breakdown_{dev['backend']}"
    for folder in {RESULTS, *([Path(args.out)] if args.out else [])}:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
        (folder / f"{name}.md").write_text(markdown(res))
    print(markdown(res), flush=True)


if __name__ == "__main__":
    main()
