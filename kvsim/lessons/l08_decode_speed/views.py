"""Lesson 08 (decode is memory-bound): the lesson's controls: each view wraps this lesson's data/measure
functions and its plots; it computes nothing.

Lesson 08 views: stored vs read, and the calculator's floor on a served model's step time.

Contract
- :func:`draw_stored_vs_read`: what a cache stores and what one step reads, dense vs NSA vs DSA
  (curves that coincide drawn once, one legend entry per visible line).
- :func:`draw_decode_speed_limit` / :func:`decode_speed_view`: the floor on step time of a served
  model on an accelerator, (weights + B·cache read) / memory bandwidth, with sliders.

Lesson 08 views: decode and prefill on the roofline, measured points on it, and the H200 dataset.

Contract
- :func:`draw_roofline` / :func:`roofline_view`: rooflines of measured machines (default: the H200 of
  ``data/h200``; the lesson adds the reader's machine) and the arithmetic intensity of decode at B = 1,
  decode at B and a prefill of P tokens of a registry model in bf16 (:mod:`kvsim.calc.phases`).
- :func:`draw_measured_roofline` / :func:`draw_time_and_floors`: measured decode points
  (:func:`kvsim.measure.roofline.decode_point` dicts) on a roofline, and their step times against the
  bandwidth floor (bytes / bandwidth) and the compute floor (FLOPs / FLOP per s).
- :func:`draw_h200_time_vs_bytes`, :func:`draw_batch_floors` / :func:`batch_floor_view`,
  :func:`draw_h200_variants` / :func:`h200_variants_view`: the H200 dataset (:mod:`kvsim.lessons.l08_decode_speed.data`).
- :func:`draw_step_breakdown`: where the H200's eager step goes, one stacked bar per context
  (:func:`kvsim.lessons.l08_decode_speed.data.step_segments`), the compiled and mlx-lm steps as ticks.
"""

from __future__ import annotations

from functools import lru_cache

import ipywidgets as widgets

from ...calc.hardware import accelerator_names
from ...calc.registry import model_names
from ...ui.base import dropdown, log_slider, make_view
from . import data
from .data import (
    achieved,
    batch_floors,
    decode_speed_limit,
    h200_time_vs_bytes,
    h200_variant_series,
    roofline_marks,
    stored_vs_read,
    time_and_floors,
)
from .plots import (
    plot_step_breakdown,
    plot_roofline,
    plot_step_floor,
    plot_stored_vs_read,
    plot_time_and_floors,
    plot_time_vs_bytes,
    plot_variants,
)


SPEED_VIEW_KV_DTYPES = ("bf16", "fp8", "q8", "q4", "q2", "fp32")  # the decode-speed view's dtype dropdown


def draw_stored_vs_read(ax, model: str = "deepseek-v3", tokens: int = 131_072):
    """Stored (solid) and read-per-step (dashed) bytes of one sequence: sparse attention cuts only the reads."""
    t, stored, read = stored_vs_read(model, tokens)
    return plot_stored_vs_read(ax, t, stored, read, unit="GiB",
                               title=f"{model}, bf16: what is stored vs what one step reads")


def draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, kv_dtype="bf16",
                            tokens=131_072):
    """Minimum decode step time against context for a batch, and the tokens/s ceiling at ``tokens``."""
    d = decode_speed_limit(model, accelerator, batch, kv_dtype, tokens)
    t, w_ms, step_ms = d["tokens"], d["weights_ms"], d["step_ms"]
    label = f"{d['per_sequence_tokens_per_s']:,.0f} tok/s per sequence, {d['all_tokens_per_s']:,.0f} in all"
    plot_step_floor(ax, t, {f"weights + KV of {batch} sequence(s), {kv_dtype}": step_ms},
                    hlines={f"weights only: {w_ms:.2f} ms": w_ms},
                    point=(t[-1], step_ms[-1], label),
                    title=data.decode_speed_title(model, accelerator, d["fits"], d["held_bytes"]))
    return ax


def decode_speed_view(model="llama-3.1-8b", accelerator="H100 80GB", batch=1, kv_dtype="bf16", tokens=131_072):
    """Sliders for model, accelerator, batch, KV dtype and context over :func:`draw_decode_speed_limit`."""
    return make_view(draw_decode_speed_limit, {
        "model": dropdown("model", model_names(), model),
        "accelerator": dropdown("accelerator", accelerator_names(), accelerator),
        "batch": log_slider("batch", batch, 1, 256),
        "kv_dtype": dropdown("KV dtype", SPEED_VIEW_KV_DTYPES, kv_dtype),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
    })


MODELS = ("llama-3-8b", "llama-3-70b", "mistral-7b-v0.1", "gemma-3-27b", "deepseek-v3", "qwen3-8b")
BATCH_TOKENS = (128, 1024, 8192, 32_768, 131_072)


@lru_cache(maxsize=1)
def _run() -> data.Run:
    return data.load_run()


def h200_roof(run: data.Run | None = None) -> dict:
    """{label: (bytes/s, FLOP/s)} of the H200 as measured in the dataset (:func:`data.h200_roof`)."""
    return data.h200_roof(run or _run())


def draw_roofline(ax, model="llama-3-8b", batch=64, tokens=8192, prompt_tokens=2048, machines=None):
    """Rooflines of ``machines`` {label: (bytes/s, FLOP/s)}, with decode (B = 1 and B) and prefill marked."""
    machines = machines or h200_roof()
    name, (bw, peak) = next(iter(machines.items()))
    m = roofline_marks(model, batch, tokens, prompt_tokens, bw, peak)
    marks = {f"decode, B = 1, {tokens:,} tokens: {m['decode_1']:,.3g} FLOP/B": m["decode_1"],
             f"decode, B = {batch}: {m['decode_b']:,.3g} FLOP/B": m["decode_b"],
             f"prefill of {prompt_tokens:,} tokens: {m['prefill']:,.4g} FLOP/B": m["prefill"]}
    title = (f"{model}, bf16, on the {name.split(' (')[0]}: decode at B = {batch} is {m['decode_b_side']}, "
             f"prefill {m['prefill_side']}")
    return plot_roofline(ax, machines, marks, title=title)


def roofline_view(model="llama-3-8b", batch=64, tokens=8192, prompt_tokens=2048, machines=None):
    """Model, batch, context and prompt length over :func:`draw_roofline` (``machines`` as there)."""
    def draw(ax, **values):
        return draw_roofline(ax, machines=machines, **values)
    draw.__name__ = "draw_roofline"
    return make_view(draw, {
        "model": dropdown("model", MODELS, model),
        "batch": log_slider("batch", batch, 2, 1024),
        "tokens": log_slider("context", tokens, 1024, 131_072),
        "prompt_tokens": log_slider("prompt", prompt_tokens, 128, 32_768),
    }, figsize=(8, 4.8))


def draw_measured_roofline(ax, points: dict, roofs: dict, title: str | None = None):
    """Measured points {label: [decode points]} at (intensity, achieved FLOP/s) under ``roofs``."""
    return plot_roofline(ax, roofs, {}, {label: achieved(p) for label, p in points.items()}, title=title)


def draw_time_and_floors(ax, points: list[dict], bytes_per_s: float, flops_per_s: float, x: str = "context_tokens",
                         title: str | None = None, label: str = "measured step"):
    """Measured step times against x (context or batch) with the bandwidth and compute floors of each point."""
    xs, measured_ms, bandwidth_ms, compute_ms = time_and_floors(points, bytes_per_s, flops_per_s, x)
    measured = {label: (xs, measured_ms)}
    bandwidth_label, compute_label = data.floor_labels(bytes_per_s, flops_per_s)
    floors = {bandwidth_label: (xs, bandwidth_ms), compute_label: (xs, compute_ms)}
    xlabel = "tokens in the cache" if x == "context_tokens" else "sequences decoded together (B)"
    return plot_time_and_floors(ax, measured, floors, xlabel=xlabel, title=title, logx=x == "batch")


def draw_h200_time_vs_bytes(ax, run: data.Run | None = None):
    """Every H200 point (variants and the batch sweep): step time against bytes read, with the floor."""
    run = run or _run()
    return plot_time_vs_bytes(ax, h200_time_vs_bytes(run), run.bytes_per_s,
                              data.copy_floor_label(run.bytes_per_s),
                              title=f"{run.device['name']}: step time against the bytes each step reads")


def draw_batch_floors(ax, tokens=8192, run: data.Run | None = None):
    """Llama 3 8B on the H200: bandwidth and compute floors against batch at ``tokens``, the measured sweep."""
    d = batch_floors(run or _run(), tokens)
    floors = {f"bandwidth floor at {tokens:,} tokens": (d["batches"], d["bandwidth_ms"]),
              "compute floor": (d["batches"], d["compute_ms"])}
    measured = {f"measured: {label}": xy for label, xy in d["measured"].items()}
    cross, full = d["ridge_batch"], d["memory_full_batch"]
    verdict = (f"compute-bound from B = {cross:,.0f}" if cross else
               f"memory-bound at any B (FLOP/B → {d['limit_intensity']:.0f} < ridge {d['ridge']:.0f})")
    # the memory-full line lies beyond the x range when a full memory holds more than 4,096 sequences
    return plot_time_and_floors(ax, measured, floors, {f"memory full at B = {full:,}": full},
                                xlabel="sequences decoded together (B)", title=f"{d['model']}, H200, {tokens:,} tokens: "
                                f"{verdict}", logx=True, logy=True, ylim=(0.01, 1e5))


def batch_floor_view(tokens=8192):
    """Context over :func:`draw_batch_floors`."""
    control = widgets.SelectionSlider(options=[(f"{t:,}", t) for t in BATCH_TOKENS], value=tokens,
                                      description="context", continuous_update=False)
    return make_view(draw_batch_floors, {"tokens": control}, figsize=(8, 4.6))


def draw_step_breakdown(ax, breakdown: dict | None = None):
    """Where the H200's eager decode step goes, one stacked bar per context (:func:`data.step_segments`)."""
    b = breakdown or data.load_breakdown()
    parts = [data.step_segments(p) for p in b["points"]]
    segments = {k: [p["segments"][k] for p in parts] for k in data.SEGMENTS}
    marks = {"compiled step (mx.compile)": [p["compiled_ms"] for p in parts],
             "mlx-lm's step": [p["mlx_lm_ms"] for p in parts]}
    return plot_step_breakdown(ax, [p["context_tokens"] for p in parts], segments, [p["step_ms"] for p in parts],
                               marks, title=f"{b['device']['name']}, Llama 3 8B (32 layers, bf16): where one "
                               "eager decode step goes")


def draw_h200_variants(ax, variant="GQA-8 (Llama 3 8B)", run: data.Run | None = None):
    """H200 step time against context for every variant; ``variant`` with its mlx-lm twin and its floor."""
    run = run or _run()
    d = h200_variant_series(run, variant)
    return plot_variants(ax, d["series"], d["label"], d["mlx_lm"], d["floor"],
                         title=f"{run.device['name']}: which variant's step grows with the context, and how fast")


def h200_variants_view(variant="GQA-8 (Llama 3 8B)"):
    """A variant over :func:`draw_h200_variants`."""
    return make_view(draw_h200_variants, {"variant": dropdown("variant", _run().measured_variants(), variant)},
                     figsize=(8, 4.8))
