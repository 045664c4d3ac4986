"""Benchmark: real decode on the MLX model, three measurements in one run.

1. cached vs uncached (the seeds' scenario, prompt P + answer A, at a CPU-friendly scale; default
   250 + 250, ``--prompt 1000 --answer 1000`` for the seeds' exact sizes): wall time of
   ``generate(caches="auto")`` vs ``generate(caches=None)`` on a toy GQA model, the measured ratio
   beside two theoretical ones: token positions fed (1,499,500 / 1,999 = 750 at 1,000 + 1,000) and
   a FLOP model (2·matmul params per position + 4·H·D·context per layer for attention).
2. decode step time vs bytes read per step (weights + cache, :func:`kvsim.calc.memory.read_bytes_per_step`)
   on Llama 3 8B's attention geometry (2 layers, real hidden/heads/KV heads/head_dim; vocab and FFN
   reduced), at several contexts; caches are filled with random K/V rows (a decode step reads the
   same bytes whatever wrote them). Achieved bytes/s next to numpy's copy bandwidth (read + write)
   measured in the same process: the machine's physical limit.
3. if mlx-lm is installed: the same model, same weights, same contexts decoded by mlx-lm's llama with
   its own KVCache (and kvsim's model on mlx-lm's KVCache; kvsim.measure.twins); steps interleaved
   (kvsim.measure.roofline.interleaved_times). Target: kvsim <= 1.05x mlx-lm. Also a greedy
   end-to-end run through both must give the same tokens.

float32 throughout (MLX bf16/fp16 math is slow on a Linux CPU). Step times: best (min) and median
of interleaved repeats. The machine is shared (2 cores, other jobs): interference only adds time,
so the best-of time is the estimate used for bytes/s and for the kvsim / mlx-lm ratio.
Writes benchmarks/results/decode.{json,md}. Run: python benchmarks/bench_decode.py [--quick]
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from kvsim.cache import make_caches
from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.decode import generate, positions_fed
from kvsim.measure.bandwidth import measure_copy_bandwidth
from kvsim.measure.roofline import interleaved_times
from kvsim.measure.step_time import fill_caches, model_matmul_params, model_weights_read_bytes
from kvsim.measure.twins import mlx_lm_version, twin
from kvsim.model import build_model, toy_spec

OUT = Path(__file__).parent / "results"
GEOMETRY = dict(num_layers=2, vocab_size=4096, intermediate_size=2048)   # Llama 3 8B attention


# ---------------------------------------------------------------- 1. cached vs uncached


def flops_per_step(model, fed: int, context: int) -> float:
    """2·(matmul params) per fed position + attention 4·H·D per (query, key) pair, causal."""
    linear = model_matmul_params(model)                                         # all but the lookup table
    attn = sum(4 * b.mixer.n_heads * b.mixer.head_dim for b in model.blocks)
    pairs = fed * context - fed * (fed - 1) / 2                           # query i sees context - fed + i + 1 keys
    return 2 * linear * fed + attn * pairs


def cached_vs_uncached(prompt: int, answer: int) -> dict:
    model = build_model(toy_spec("gqa"), seed=0)
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, model.spec.vocab_size, prompt)]
    runs = {}
    for name, caches in (("cached", "auto"), ("uncached", None)):
        g = generate(model, tokens, answer, caches=caches, trace=True)
        runs[name] = g
    same = runs["cached"].tokens == runs["uncached"].tokens
    flops = {name: sum(flops_per_step(model, s.positions_fed, s.context_tokens) for s in g.trace)
             for name, g in runs.items()}
    t = {name: g.seconds for name, g in runs.items()}
    return {
        "model": "toy gqa (hidden 64, 4 heads, 2 KV heads, head_dim 32, 2 layers, vocab 128)",
        "prompt_tokens": prompt, "answer_tokens": answer, "tokens_identical": same,
        "positions_fed": {k: g.positions_fed for k, g in runs.items()},
        "positions_fed_analytic": {"cached": positions_fed(prompt, answer, True),
                                   "uncached": positions_fed(prompt, answer, False)},
        "seconds": t,
        "measured_time_ratio": t["uncached"] / t["cached"],
        "theoretical_positions_ratio": positions_fed(prompt, answer, False) / positions_fed(prompt, answer, True),
        "theoretical_flops_ratio": flops["uncached"] / flops["cached"],
        "seeds_scenario_positions": {"cached": positions_fed(1000, 1000, True),
                                     "uncached": positions_fed(1000, 1000, False)},
    }


# ---------------------------------------------------------------- 2. bytes/s


def step_seconds(model_fn, caches, token: int = 1) -> float:
    """One decode step: forward of one token + mx.eval of the logits."""
    start = time.perf_counter()
    mx.eval(model_fn(mx.array([[token]]), caches))
    return time.perf_counter() - start


def bandwidth(model, contexts, repeats: int) -> list[dict]:
    rows = []
    weight_read = model_weights_read_bytes(model)                           # all but the table, plus one row
    for T in contexts:
        caches = make_caches(model.spec)
        fill_caches(model, caches, T)
        step_seconds(model, caches)                                   # warm-up
        times = [step_seconds(model, caches) for _ in range(repeats)]
        cache_read = int(memory.read_bytes_per_step(model.spec, T + 1, kv_dtype="fp32"))
        t = min(times)
        rows.append({"context_tokens": T, "step_ms": 1e3 * t, "median_step_ms": 1e3 * statistics.median(times),
                     "weight_bytes": int(weight_read),
                     "cache_read_bytes": cache_read,
                     "achieved_gb_per_s": (weight_read + cache_read) / t / 1e9})
        del caches
    return rows


# ---------------------------------------------------------------- 3. mlx-lm side by side


def greedy(step, caches, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens: ``step(tokens (1, L), caches) -> logits``, prompt fed at once."""
    logits, out = step(mx.array([prompt]), caches), []
    for _ in range(n):
        out.append(int(mx.argmax(logits[0, -1])))
        logits = step(mx.array([[out[-1]]]), caches)
    return out


def side_by_side(model, contexts, repeats: int) -> dict:
    """kvsim, kvsim's model on mlx-lm's caches, and mlx-lm's llama (same weights), steps interleaved."""
    t = twin(model)
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, model.spec.vocab_size, 64)]
    ours = generate(model, prompt, 16).tokens
    theirs = greedy(lambda x, c: t.model(x, cache=c), t.make_caches(), prompt, 16)
    rows = []
    for T in contexts:
        setups = {"kvsim": (model, make_caches(model.spec)),
                  "kvsim model + mlx-lm KVCache": (model, t.make_caches()),
                  "mlx-lm": (t.model, t.make_caches())}
        for fn, caches in setups.values():
            fill_caches(model, caches, T)
        x = mx.array([[1]])
        times = interleaved_times({name: (lambda fn=fn, c=caches: fn(x, c)) for name, (fn, caches) in setups.items()},
                                  repeats)
        best = {name: 1e3 * min(ts) for name, ts in times.items()}
        med = {name: 1e3 * statistics.median(ts) for name, ts in times.items()}
        rows.append({"context_tokens": T, "step_ms": best, "median_step_ms": med,
                     "kvsim_over_mlx_lm": best["kvsim"] / best["mlx-lm"],
                     "kvsim_over_mlx_lm_median": med["kvsim"] / med["mlx-lm"],
                     "kvsim_model_over_mlx_lm_caches": best["kvsim"] / best["kvsim model + mlx-lm KVCache"]})
    return {"greedy_tokens_identical": ours == theirs, "rows": rows,
            "worst_kvsim_over_mlx_lm": max(r["kvsim_over_mlx_lm"] for r in rows)}


# ---------------------------------------------------------------- main


def markdown(res: dict) -> str:
    a = res["cached_vs_uncached"]
    lines = ["# Decode benchmark (kvsim MLX model, float32, CPU)", "",
             f"Machine: {res['machine']}; numpy copy bandwidth {res['copy_gb_per_s']:.2f} GB/s (read + write).", "",
             f"## Cached vs uncached, prompt {a['prompt_tokens']} + answer {a['answer_tokens']} ({a['model']})", "",
             "| | cached | uncached | ratio |", "|---|---|---|---|",
             f"| positions fed (measured) | {a['positions_fed']['cached']:,} | {a['positions_fed']['uncached']:,} "
             f"| {a['theoretical_positions_ratio']:.1f}x |",
             f"| FLOP model | | | {a['theoretical_flops_ratio']:.1f}x |",
             f"| wall time (s) | {a['seconds']['cached']:.2f} | {a['seconds']['uncached']:.2f} "
             f"| **{a['measured_time_ratio']:.1f}x** |", "",
             f"Tokens identical: {a['tokens_identical']}. Seeds' 1,000 + 1,000: "
             f"{a['seeds_scenario_positions']['uncached']:,} vs {a['seeds_scenario_positions']['cached']:,} positions.", "",
             "## Decode step vs bytes read (Llama 3 8B attention geometry, 2 layers, vocab 4096, FFN 2048)", "",
             "| context | step ms (best) | median | weights MB | cache read MB | achieved GB/s | of copy bw |",
             "|---|---|---|---|---|---|---|"]
    for r in res["bandwidth"]:
        lines.append(f"| {r['context_tokens']:,} | {r['step_ms']:.1f} | {r['median_step_ms']:.1f} | "
                     f"{r['weight_bytes'] / 1e6:.0f} | "
                     f"{r['cache_read_bytes'] / 1e6:.0f} | {r['achieved_gb_per_s']:.2f} | "
                     f"{r['achieved_gb_per_s'] / res['copy_gb_per_s']:.0%} |")
    m = res.get("mlx_lm")
    if m:
        lines += ["", f"## Side by side with mlx-lm {res['mlx_lm_version']} (same weights)", "",
                  f"Greedy tokens identical: {m['greedy_tokens_identical']}. Worst kvsim / mlx-lm: "
                  f"**{m['worst_kvsim_over_mlx_lm']:.2f}x** (target <= 1.05x).", "",
                  "Best-of step times (ms); the last column is the ratio of medians.", "",
                  "| context | kvsim | kvsim model + mlx-lm KVCache | mlx-lm | kvsim / mlx-lm | (medians) |",
                  "|---|---|---|---|---|---|"]
        for r in m["rows"]:
            s = r["step_ms"]
            lines.append(f"| {r['context_tokens']:,} | {s['kvsim']:.1f} | {s['kvsim model + mlx-lm KVCache']:.1f} "
                         f"| {s['mlx-lm']:.1f} | {r['kvsim_over_mlx_lm']:.2f}x | {r['kvsim_over_mlx_lm_median']:.2f}x |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=250)
    ap.add_argument("--answer", type=int, default=250)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    contexts = [256, 2048] if args.quick else [256, 4096, 16384]
    repeats = 3 if args.quick else 15
    prompt, answer = (50, 50) if args.quick else (args.prompt, args.answer)
    res = {"machine": f"{platform.machine()}, {platform.system()}, MLX {mx.__version__}",
           "copy_gb_per_s": measure_copy_bandwidth().rate / 1e9,
           "cached_vs_uncached": cached_vs_uncached(prompt, answer)}
    model = build_model(load_model("llama-3-8b"), **GEOMETRY)
    res["bandwidth"] = bandwidth(model, contexts, repeats)
    res["mlx_lm_version"] = mlx_lm_version()
    res["mlx_lm"] = side_by_side(model, contexts, repeats) if res["mlx_lm_version"] else None
    OUT.mkdir(exist_ok=True)
    suffix = "_quick" if args.quick else ""
    (OUT / f"decode{suffix}.json").write_text(json.dumps(res, indent=2) + "\n")
    (OUT / f"decode{suffix}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
