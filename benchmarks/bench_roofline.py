"""Benchmark: decode steps on the roofline, kvsim beside mlx-lm, on a CPU, an Apple GPU or an NVIDIA GPU.

For each variant (GQA = Llama 3 8B geometry; MQA and MHA = the same with 1 and 32 KV heads; sliding =
Mistral 7B, window 4096; MLA = DeepSeek-V3 dimensions, a few layers) and each context, one decode step of
kvsim's model is timed against the same step of its mlx-lm twin (same weights; mlx-lm's llama or
deepseek_v3 and its own caches), steps interleaved, best of N. Caches are filled with random K/V (a decode
step reads the same bytes whatever wrote them). Then a batch sweep (GQA at one context, B = 1 … 64 on a
GPU), GQA with 8-bit quantized caches (mlx-lm's QuantizedKVCache beside kvsim's), and MLA's absorbed
attention kernel two ways. The device's copy bandwidth and matmul FLOP/s are
measured in the same process; every point gets its bytes read (weights: all but the embedding table, of
which one row; cache: kvsim.calc.memory.read_bytes_per_step), its FLOPs, arithmetic intensity, its floor
(bytes read / bandwidth) and its time / floor.

GPU: bf16, real vocabulary and FFN, all 32 layers (as many as fit in 60 % of the memory; MLA: 4), contexts
1K … 128K, best of 8; CPU: fp32, 2 layers (MLA: 1), vocab 4096, FFN 2048, contexts 256 … 4K (--quick) or 16K. A point that does not fit in the device's memory (two cache sets)
runs kvsim and mlx-lm one after the other, or is skipped; a failing point is recorded and the run goes on;
--budget-s stops starting new points. Results are rewritten after every point:
benchmarks/results/roofline_<backend>[_quick].{json,md}, and the same files under --out if given.
Imports: mlx, mlx-lm's model modules (not mlx_lm's top level), numpy and kvsim only.

Run: python benchmarks/bench_roofline.py [--device cpu|gpu] [--quick] [--out DIR] [--budget-s S] [--repeats N]
(kvsim's commit is $KVSIM_COMMIT when set, else read with git.)
"""

import argparse
import datetime
import gc
import json
import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx

import kvsim
from kvsim.calc import roofline
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.registry import load_model
from kvsim.measure import bandwidth
from kvsim.measure.roofline import (
    batched_point,
    decode_point,
    device_limits,
    device_summary,
    fitted_model,
    mla_kernels,
    on_roofline,
    quantized_kernels,
    point_bytes_needed,
)
from kvsim.model.compiled import compiled_step
from kvsim.measure.step_time import model_weights_read_bytes
from kvsim.measure.twins import mlx_lm_version, twin

RESULTS = Path(__file__).parent / "results"
K = 1024


@dataclass
class Variant:
    label: str
    model: str
    kv_heads: int | None = None                    # override of num_key_value_heads (MQA, MHA)
    build: dict = field(default_factory=dict)      # build_model reductions (layers, vocab, FFN)
    contexts: tuple = ()
    kv_dtype: str | None = None                    # 'q8': quantized caches on both sides


def plan(gpu: bool, quick: bool) -> dict:
    """Variants, batch sweep, repeats and calibration sizes for the device."""
    if gpu:
        contexts = (1 * K, 8 * K, 32 * K, 128 * K) if quick else tuple(2**i * K for i in range(8))
        full, mla = {}, {"num_layers": 4}
        sliding_ctx, batches, batch_ctx = contexts, ((1, 8, 64) if quick else (1, 2, 4, 8, 16, 32, 64)), 8 * K
        repeats, copy_bytes, matmul_n = 8, 2 * 2**30, 8192
    else:
        contexts = (256, 1 * K, 4 * K) if quick else (256, 1 * K, 4 * K, 16 * K)
        full = {"num_layers": 2, "vocab_size": 4096, "intermediate_size": 2048}
        mla = {"num_layers": 1, "vocab_size": 4096, "intermediate_size": 2048}
        sliding_ctx = (256, 4 * K, 8 * K) if quick else (256, 1 * K, 4 * K, 8 * K, 16 * K)
        batches, batch_ctx = (1, 4, 16), 1 * K
        repeats, copy_bytes, matmul_n = (5 if quick else 7), 256 * 2**20, (1024 if quick else 2048)
    variants = [Variant("GQA-8 (Llama 3 8B)", "llama-3-8b", None, full, contexts),
                Variant("MLA (DeepSeek-V3)", "deepseek-v3", None, mla, contexts),
                Variant("sliding 4096 (Mistral 7B)", "mistral-7b-v0.1", None, full, sliding_ctx),
                Variant("MQA (Llama 3 8B, 1 KV head)", "llama-3-8b", 1, full, contexts),
                Variant("MHA (Llama 3 8B, 32 KV heads)", "llama-3-8b", 32, full, contexts),
                Variant("GQA-8, 8-bit KV (q8)", "llama-3-8b", None, full, contexts, "q8")]
    quant_contexts = (32 * K, 128 * K) if gpu else (4 * K,)
    return {"variants": variants, "batches": batches, "batch_context": batch_ctx, "repeats": repeats,
            "quant_contexts": quant_contexts,
            "copy_bytes": copy_bytes, "matmul_n": matmul_n}


def kvsim_commit() -> str:
    """$KVSIM_COMMIT if set (a copied tree may carry a stale .git), else git HEAD (+ '-dirty'), else 'unknown'."""
    if os.environ.get("KVSIM_COMMIT"):
        return os.environ["KVSIM_COMMIT"]
    root = Path(kvsim.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("KVSIM_COMMIT", "unknown")


def build(v: Variant, dtype: str, available_bytes: int):
    """The variant's model, with as many of its layers as fit in 60 % of the available memory."""
    spec = load_model(v.model)
    if v.kv_heads is not None:
        spec = from_hf_config({**spec.config, "num_key_value_heads": v.kv_heads},
                              name=f"{spec.name}-kv{v.kv_heads}")
    return fitted_model(spec, dtype, available_bytes, **v.build)


def geometry(model) -> dict:
    s, layer = model.spec, model.spec.layers[0]
    g = {"source": model.info.source_name, "num_layers": len(s.layers), "hidden_size": s.hidden_size,
         "num_attention_heads": s.num_attention_heads, "vocab_size": s.vocab_size,
         "intermediate_size": s.intermediate_size, "dtype": model.info.dtype,
         "weights_read_bytes": model_weights_read_bytes(model), "layer": {k: v for k, v in vars(layer).items() if v}}
    return g


class Run:
    """The results dict, the clock, and writing both files after every point."""

    def __init__(self, args, gpu: bool):
        self.args, self.gpu, self.start = args, gpu, time.perf_counter()
        self.res = {"meta": {}, "device": {}, "calibration": {}, "variants": {}, "batch_sweep": None,
                    "mla_kernels": [], "quantized_kernels": [], "errors": [], "skipped": []}

    def left_s(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.start)

    def points(self):
        yield from (pt for v in self.res["variants"].values() for pt in v["points"])
        yield from (self.res["batch_sweep"] or {"points": []})["points"]

    def save(self):
        """Place every point on the roofline of the best calibration so far, then write both files."""
        self.res["elapsed_s"] = time.perf_counter() - self.start
        cal = self.res["calibration"]
        for pt in self.points():
            pt.update(on_roofline(pt, cal["copy_bytes_per_s"], cal["matmul_flops_per_s"]))
        name = f"roofline_{self.res['device'].get('backend', 'unknown')}{'_quick' if self.args.quick else ''}"
        for folder in {RESULTS, *([Path(self.args.out)] if self.args.out else [])}:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.json").write_text(json.dumps(self.res, indent=1) + "\n")
            (folder / f"{name}.md").write_text(markdown(self.res))

    def fail(self, where: str, err: Exception):
        self.res["errors"].append({"where": where, "error": f"{type(err).__name__}: {err}",
                                   "trace": traceback.format_exc(limit=4)})
        print(f"  FAILED {where}: {type(err).__name__}: {err}", flush=True)


def calibrate(run: Run, p: dict, dtype: str):
    """Copy bandwidth and matmul FLOP/s; called at the start and the end, the faster of each is kept
    (a shared machine only ever slows a measurement down)."""
    nbytes = int(min(p["copy_bytes"], run.res["device"]["memory_available_bytes"] // 8))
    now, old = device_limits(nbytes, p["matmul_n"], dtype, repeats=10 if run.gpu else 5), run.res["calibration"]
    runs = old.get("runs", []) + [{k: now[k] for k in ("copy_bytes_per_s", "matmul_flops_per_s")}]
    bw = max(r["copy_bytes_per_s"] for r in runs)
    flops = max(r["matmul_flops_per_s"] for r in runs)
    cal = {**now, "copy_bytes_per_s": bw, "matmul_flops_per_s": flops, "runs": runs,
           "machine_balance_flop_per_byte": roofline.machine_balance(flops, bw)}
    if not run.gpu:                                            # the host's own limit, for comparison
        numpy_copy = bandwidth.measure_copy_bandwidth(nbytes, repeats=5).rate
        cal["numpy_copy_bytes_per_s"] = max(numpy_copy, old.get("numpy_copy_bytes_per_s", 0))
    run.res["calibration"] = cal
    print(f"copy {now['copy_bytes_per_s'] / 1e9:.1f} GB/s, matmul {now['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s "
          f"({dtype}), balance {now['machine_balance_flop_per_byte']:.1f} FLOP/B", flush=True)


def measure(run: Run, model, tw, context: int, batch: int, repeats: int, where: str, kv_dtype=None,
            compiled=None, batched: bool = False):
    """One point: every side's caches if they fit, else one side after the other, else skipped."""
    if run.left_s() <= 0:
        run.res["skipped"].append({"where": where, "why": "time budget"})
        return None
    mx.clear_cache()
    avail = device_summary()["memory_available_bytes"]
    sets = 1 + (tw is not None) + (compiled is not None)
    if point_bytes_needed(model, context, batch, repeats, sets, kv_dtype) > 0.9 * avail:
        if sets == 1 or point_bytes_needed(model, context, batch, repeats, 1, kv_dtype) > 0.9 * avail:
            run.res["skipped"].append({"where": where, "why": f"memory ({avail / 2**30:.0f} GiB available)"})
            print(f"  skipped {where}: does not fit", flush=True)
            return None
        interleave = False
    else:
        interleave = True
    try:
        if batched:
            point = batched_point(model, context, batch, repeats, tw, compiled, interleave=interleave)
        else:
            point = decode_point(model, context, batch, repeats, tw, interleave=interleave, kv_dtype=kv_dtype,
                                 compiled=compiled)
    except Exception as err:                                     # noqa: BLE001 - one point must not end the run
        run.fail(where, err)
        return None
    finally:
        mx.clear_cache()
    cal = run.res["calibration"]
    point.update(on_roofline(point, cal["copy_bytes_per_s"], cal["matmul_flops_per_s"]))   # again at save
    ms, ratio = point["step_ms"], point.get("kvsim_over_mlx_lm")
    print(f"  {where}: kvsim {ms['kvsim']:.2f} ms" + (f", compiled {ms['kvsim-compiled']:.2f} ms"
          if 'kvsim-compiled' in ms else "") + (f", mlx-lm {ms['mlx-lm']:.2f} ms, ratio {ratio:.2f}"
          if ratio else "") + f", floor {point['floor_ms']:.2f} ms ({point['kvsim_over_floor']:.2f}x)", flush=True)
    return point


def run_variant(run: Run, v: Variant, p: dict, dtype: str):
    if run.left_s() <= 0:
        run.res["skipped"].append({"where": v.label, "why": "time budget"})
        return
    try:
        mx.clear_cache()
        model = build(v, dtype, device_summary()["memory_available_bytes"])
        # before the twin: the fused projections become views that kvsim, compiled kvsim and mlx-lm all read
        cstep = None if run.args.no_compiled else compiled_step(model)
        tw = twin(model) if not run.args.no_mlx_lm else None
    except Exception as err:                                     # noqa: BLE001
        run.fail(f"build {v.label}", err)
        return
    entry = run.res["variants"][v.label] = {"geometry": geometry(model), "points": []}
    print(f"{v.label}: {entry['geometry']['num_layers']} layers, weights read "
          f"{entry['geometry']['weights_read_bytes'] / 1e9:.2f} GB", flush=True)
    for T in v.contexts:
        point = measure(run, model, tw, T, 1, p["repeats"], f"{v.label} @ {T}", v.kv_dtype, cstep)
        if point:
            entry["points"].append(point)
        run.save()
    if v.model == "llama-3-8b" and v.kv_heads is None and v.kv_dtype is None:   # batch sweep: GQA's model
        sweep = run.res["batch_sweep"] = {"variant": v.label, "context_tokens": p["batch_context"], "points": [],
                                          "what": "kvsim: one cache per sequence, Rows per layer (batched_generate's "
                                                  "step); mlx-lm: BatchKVCache (BatchGenerator's cache)"}
        for B in p["batches"]:
            point = measure(run, model, tw, p["batch_context"], B, p["repeats"],
                            f"{v.label} @ {p['batch_context']} B={B}", compiled=cstep, batched=True)
            if point:
                sweep["points"].append(point)
            run.save()
    if v.model == "deepseek-v3":
        for T in v.contexts:
            if run.left_s() > 0:
                try:
                    run.res["mla_kernels"].append(mla_kernels(model.blocks[0].mixer, T, p["repeats"]))
                except Exception as err:                          # noqa: BLE001
                    run.fail(f"mla kernels @ {T}", err)
        run.save()
    if v.model == "llama-3-8b" and v.kv_heads is None and v.kv_dtype == "q8":   # the quantized KV kernels
        for T in p["quant_contexts"]:
            if run.left_s() > 0:
                try:
                    run.res["quantized_kernels"].append(quantized_kernels(T, p["repeats"], dtype=model.dtype))
                except Exception as err:                          # noqa: BLE001
                    run.fail(f"quantized kernels @ {T}", err)
        run.save()
    del model, tw, cstep
    gc.collect()
    mx.clear_cache()


def _row(label, pt) -> str:
    ms = pt["step_ms"]
    twin_ms = f"{ms['mlx-lm']:.2f}" if "mlx-lm" in ms else "–"
    comp_ms = f"{ms['kvsim-compiled']:.2f}" if "kvsim-compiled" in ms else "–"
    comp = f"**{pt['compiled_over_mlx_lm']:.2f}**" if "compiled_over_mlx_lm" in pt else "–"
    ratio = f"**{pt['kvsim_over_mlx_lm']:.2f}**" if "kvsim_over_mlx_lm" in pt else "–"
    ratio_med = f"{pt['kvsim_over_mlx_lm_paired']:.2f}" if "kvsim_over_mlx_lm_paired" in pt else "–"
    over = f"{pt['mlx_lm_over_floor']:.2f}" if "mlx_lm_over_floor" in pt else "–"
    mark = "" if pt["interleaved"] else " †"
    return (f"| {label} | {pt['context_tokens']:,} | {pt['batch']} | {ms['kvsim']:.2f} | {comp_ms} | {twin_ms} "
            f"| {ratio}{mark} | {comp} "
            f"| {ratio_med} | {pt['read_bytes'] / 1e9:.3f} | {pt['floor_ms']:.2f} | {pt['kvsim_over_floor']:.2f} "
            f"| {over} | {pt['intensity_flop_per_byte']:.2f} | {pt['achieved_bytes_per_s'] / 1e9:.1f} |")


HEADER = ["| variant | context | B | kvsim ms | compiled ms | mlx-lm ms | kvsim / mlx-lm | compiled / mlx-lm | (paired) "
          "| read GB | floor ms | kvsim / floor | mlx-lm / floor | FLOP/B | kvsim GB/s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def summary(res: dict) -> str:
    """Geometric mean and worst of kvsim / mlx-lm over every point, best-of and median."""
    pts = [pt for v in res["variants"].values() for pt in v["points"] if "kvsim_over_mlx_lm" in pt]
    if not pts:
        return "No point has an mlx-lm time."
    best = [pt["kvsim_over_mlx_lm"] for pt in pts]
    paired = [pt["kvsim_over_mlx_lm_paired"] for pt in pts]
    worst = max(pts, key=lambda pt: pt["kvsim_over_mlx_lm"])
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))          # noqa: E731
    text = (f"kvsim / mlx-lm over {len(pts)} points: geometric mean {geo(best):.3f} of the best-of ratios, "
            f"{geo(paired):.3f} of the paired ones (median over rounds of the two back-to-back steps); "
            f"worst best-of {max(best):.2f} ({worst['context_tokens']:,} tokens, "
            f"{next(k for k, v in res['variants'].items() if worst in v['points'])}), worst paired {max(paired):.2f}.")
    comp = [pt for pt in pts if "compiled_over_mlx_lm" in pt]
    if comp:
        c_best = [pt["compiled_over_mlx_lm"] for pt in comp]
        c_paired = [pt["compiled_over_mlx_lm_paired"] for pt in comp]
        text += (f" Compiled kvsim / mlx-lm over {len(comp)} points: geometric mean {geo(c_best):.3f} best-of, "
                 f"{geo(c_paired):.3f} paired; worst best-of {max(c_best):.2f}, worst paired {max(c_paired):.2f}.")
    return text


def markdown(res: dict) -> str:
    m, d, c = res["meta"], res["device"], res["calibration"]
    lines = [f"# Decode on the roofline: kvsim beside mlx-lm ({d.get('name', '?')}, {d.get('backend', '?')})", "",
             f"MLX {m.get('mlx')}, mlx-lm {m.get('mlx_lm')}, kvsim {m.get('kvsim_commit')}, {m.get('date')}; "
             f"{m.get('dtype')}; best of {m.get('repeats')} interleaved steps"
             f"{' (--quick)' if m.get('quick') else ''}; {res.get('elapsed_s', 0):.0f} s.", ""]
    if c:
        lines.append(f"Measured here: copy bandwidth **{c['copy_bytes_per_s'] / 1e9:.1f} GB/s** (MLX, read + write), "
                     f"matmul **{c['matmul_flops_per_s'] / 1e9:,.1f} GFLOP/s** ({m.get('dtype')}, n = {c['matmul_n']}); "
                     f"machine balance {c['machine_balance_flop_per_byte']:.1f} FLOP/B (the faster of "
                     f"{len(c.get('runs', []))} calibrations)"
                     + (f"; numpy copy {c['numpy_copy_bytes_per_s'] / 1e9:.1f} GB/s" if "numpy_copy_bytes_per_s" in c else "")
                     + ". Floor = bytes read / copy bandwidth.")
    lines += ["", *HEADER]
    for label, v in res["variants"].items():
        lines += [_row(label, pt) for pt in v["points"]]
    lines += ["", summary(res)]
    if res.get("batch_sweep") and res["batch_sweep"]["points"]:
        lines += ["", f"## Batch sweep: {res['batch_sweep']['variant']} at {res['batch_sweep']['context_tokens']:,} tokens",
                  "", *HEADER]
        lines += [_row(res["batch_sweep"]["variant"], pt) for pt in res["batch_sweep"]["points"]]
    if res["mla_kernels"]:
        ways = list(res["mla_kernels"][0]["step_ms"])
        lines += ["", "## MLA absorbed decode attention, one layer (ms)", "", "| context | " + " | ".join(ways) + " |",
                  "|---|" + "---|" * len(ways)]
        lines += [f"| {k['context_tokens']:,} | " + " | ".join(f"{k['step_ms'][w]:.3f}" for w in ways) + " |"
                  for k in res["mla_kernels"]]
    if res.get("quantized_kernels"):
        ways = list(res["quantized_kernels"][0]["step_ms"])
        lines += ["", "## Quantized KV: one layer's decode attention (ms; 32 query heads, 8 KV heads, head dim 128)", "",
                  "| context | " + " | ".join(ways) + " |", "|---|" + "---|" * len(ways)]
        lines += [f"| {k['context_tokens']:,} | " + " | ".join(f"{k['step_ms'][w]:.3f}" for w in ways) + " |"
                  for k in res["quantized_kernels"]]
        errs = res["quantized_kernels"][0]["errors"]
        if errs:
            lines += ["", "Ways with no kernel on this device: " + "; ".join(f"{w} ({e})" for w, e in errs.items())]
    if res.get("batch_sweep") and res["batch_sweep"]["points"] and "tokens_per_s" in res["batch_sweep"]["points"][0]:
        sides = list(res["batch_sweep"]["points"][0]["tokens_per_s"])
        lines += ["", "Tokens per second in the batch sweep: " + res["batch_sweep"].get("what", ""), "",
                  "| B | " + " | ".join(sides) + " |", "|---|" + "---|" * len(sides)]
        lines += [f"| {pt['batch']} | " + " | ".join(f"{pt['tokens_per_s'][k]:,.0f}" for k in sides) + " |"
                  for pt in res["batch_sweep"]["points"]]
    if any(not pt["interleaved"] for v in res["variants"].values() for pt in v["points"]) or any(
            not pt["interleaved"] for pt in (res.get("batch_sweep") or {"points": []})["points"]):
        lines += ["", "† kvsim and mlx-lm timed one after the other (two cache sets do not fit in memory)."]
    for what, items in (("Skipped", res["skipped"]), ("Errors", res["errors"])):
        if items:
            lines += ["", f"{what}: " + "; ".join(f"{i['where']} ({i.get('why') or i.get('error')})" for i in items)]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="gpu" if mx.is_available(mx.gpu) else "cpu")
    ap.add_argument("--quick", action="store_true", help="fewer contexts and batch sizes")
    ap.add_argument("--out", help="also write the results into this folder")
    ap.add_argument("--budget-s", type=float, default=None, help="start no new point after this many seconds")
    ap.add_argument("--no-mlx-lm", action="store_true", help="kvsim alone")
    ap.add_argument("--no-compiled", action="store_true", help="no compiled kvsim step (kvsim.model.compiled)")
    ap.add_argument("--only", default=None, help="comma-separated substrings: run only variants whose label matches")
    ap.add_argument("--repeats", type=int, default=None, help="timed steps per point (default 8 GPU, 5/7 CPU)")
    args = ap.parse_args()
    gpu = args.device == "gpu"
    mx.set_default_device(mx.gpu if gpu else mx.cpu)
    args.budget_s = args.budget_s or (420 if gpu else 900)
    dtype, p = ("bf16" if gpu else "fp32"), plan(gpu, args.quick)
    p["repeats"] = args.repeats or p["repeats"]
    run = Run(args, gpu)
    run.res["device"] = device_summary()
    run.res["meta"] = {"mlx": mx.__version__, "mlx_lm": mlx_lm_version(), "kvsim_commit": kvsim_commit(),
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "python": sys.version.split()[0], "dtype": dtype, "quick": args.quick,
                       "repeats": p["repeats"], "budget_s": args.budget_s}
    print(f"{run.res['device']['name']} ({run.res['device']['backend']}), MLX {mx.__version__}, "
          f"mlx-lm {run.res['meta']['mlx_lm']}, {dtype}", flush=True)
    try:
        calibrate(run, p, dtype)
    except Exception as err:                                     # noqa: BLE001
        run.fail("calibration", err)
        run.save()
        raise
    run.save()
    for v in p["variants"]:
        if args.only is None or any(o.strip() in v.label for o in args.only.split(",")):
            run_variant(run, v, p, dtype)
    try:
        calibrate(run, p, dtype)                               # again at the end: keep the faster
    except Exception as err:                                     # noqa: BLE001
        run.fail("calibration at the end", err)
    run.save()
    print(markdown(run.res), flush=True)


if __name__ == "__main__":
    main()
