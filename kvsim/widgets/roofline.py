"""Lesson 08 views: decode and prefill on the roofline, measured points on it, and the H200 dataset.

Contract
- :func:`draw_roofline` / :func:`roofline_view`: rooflines of measured machines (default: the H200 of
  ``data/h200``; the lesson adds the reader's machine) and the arithmetic intensity of decode at B = 1,
  decode at B and a prefill of P tokens of a registry model in bf16 (:mod:`kvsim.calc.phases`).
- :func:`draw_measured_roofline` / :func:`draw_time_and_floors`: measured decode points
  (:func:`kvsim.measure.roofline.decode_point` dicts) on a roofline, and their step times against the
  bandwidth floor (bytes / bandwidth) and the compute floor (FLOPs / FLOP per s).
- :func:`draw_h200_time_vs_bytes`, :func:`draw_batch_floors` / :func:`batch_floor_view`,
  :func:`draw_h200_variants` / :func:`h200_variants_view`: the H200 dataset (:mod:`kvsim.calc.h200`).
"""

from __future__ import annotations

from functools import lru_cache

import ipywidgets as widgets
import numpy as np

from ..calc import h200, memory, phases
from ..calc.registry import load_model
from ..calc.weights import weights_bytes
from ..plots.roofline import (
    plot_roofline,
    plot_time_and_floors,
    plot_time_vs_bytes,
    plot_variants,
)
from ..ui.base import dropdown, log_slider, make_view

MODELS = ("llama-3-8b", "llama-3-70b", "mistral-7b-v0.1", "gemma-3-27b", "deepseek-v3", "qwen3-8b")
BATCH_TOKENS = (128, 1024, 8192, 32_768, 131_072)


@lru_cache(maxsize=1)
def _run() -> h200.Run:
    return h200.load_run()


def h200_roof(run: h200.Run | None = None) -> dict:
    """{label: (bytes/s, FLOP/s)} of the H200 as measured in the dataset."""
    run = run or _run()
    return {f"{run.device['name']} ({run.meta['dtype']}, measured)": (run.bytes_per_s, run.flops_per_s)}


def _side(intensity: float, ridge: float) -> str:
    return "memory-bound" if intensity < ridge else "compute-bound"


def draw_roofline(ax, model="llama-3-8b", batch=64, tokens=8192, prompt_tokens=2048, machines=None):
    """Rooflines of ``machines`` {label: (bytes/s, FLOP/s)}, with decode (B = 1 and B) and prefill marked."""
    machines = machines or h200_roof()
    spec = load_model(model)
    one, many = phases.decode_cost(spec, tokens, 1), phases.decode_cost(spec, tokens, batch)
    prefill = phases.prefill_cost(spec, prompt_tokens)
    marks = {f"decode, B = 1, {tokens:,} tokens: {one.intensity:,.3g} FLOP/B": one.intensity,
             f"decode, B = {batch}: {many.intensity:,.3g} FLOP/B": many.intensity,
             f"prefill of {prompt_tokens:,} tokens: {prefill.intensity:,.4g} FLOP/B": prefill.intensity}
    name, (bw, peak) = next(iter(machines.items()))
    ridge = peak / bw
    title = (f"{model}, bf16, on the {name.split(' (')[0]}: decode at B = {batch} is {_side(many.intensity, ridge)}, "
             f"prefill {_side(prefill.intensity, ridge)}")
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


def _achieved(points: list[dict]):
    """(intensities, achieved FLOP/s) of measured points."""
    return (np.array([p["flops"] / p["read_bytes"] for p in points]),
            np.array([p["flops"] / (p["step_ms"]["kvsim"] / 1e3) for p in points]))


def draw_measured_roofline(ax, points: dict, roofs: dict, title: str | None = None):
    """Measured points {label: [decode points]} at (intensity, achieved FLOP/s) under ``roofs``."""
    return plot_roofline(ax, roofs, {}, {label: _achieved(p) for label, p in points.items()}, title=title)


def draw_time_and_floors(ax, points: list[dict], bytes_per_s: float, flops_per_s: float, x: str = "context_tokens",
                         title: str | None = None, label: str = "measured step"):
    """Measured step times against x (context or batch) with the bandwidth and compute floors of each point."""
    xs = np.array([p[x] for p in points], dtype=float)
    measured = {label: (xs, [p["step_ms"]["kvsim"] for p in points])}
    floors = {f"bandwidth floor: bytes / {bytes_per_s / 1e9:,.1f} GB/s":
              (xs, [1e3 * p["read_bytes"] / bytes_per_s for p in points]),
              f"compute floor: FLOPs / {flops_per_s / 1e9:,.1f} GFLOP/s":
              (xs, [1e3 * p["flops"] / flops_per_s for p in points])}
    xlabel = "tokens in the cache" if x == "context_tokens" else "sequences decoded together (B)"
    return plot_time_and_floors(ax, measured, floors, xlabel=xlabel, title=title, logx=x == "batch")


def draw_h200_time_vs_bytes(ax, run: h200.Run | None = None):
    """Every H200 point (variants and the batch sweep): step time against bytes read, with the floor."""
    run = run or _run()
    series = {run.label(v): ([p["read_bytes"] for p in run.points(v)], [p["step_ms"]["kvsim"] for p in run.points(v)])
              for v in run.measured_variants()}
    sweep = run.batch_sweep
    series[f"batch sweep B = 1-64, {sweep['variant'].split(' (')[0]} at {sweep['context_tokens'] // 1024}K"] = (
        [p["read_bytes"] for p in sweep["points"]], [p["step_ms"]["kvsim"] for p in sweep["points"]])
    return plot_time_vs_bytes(ax, series, run.bytes_per_s,
                              f"floor: bytes / {run.bytes_per_s / 1e12:.2f} TB/s (measured copy)",
                              title=f"{run.device['name']}: every step time follows the bytes it reads")


def draw_batch_floors(ax, tokens=8192, run: h200.Run | None = None):
    """Llama 3 8B on the H200: bandwidth and compute floors against batch at ``tokens``, the measured sweep."""
    run = run or _run()
    sweep = run.batch_sweep
    spec = load_model(run.variants[sweep["variant"]]["geometry"]["source"])
    batches = 2 ** np.arange(0, 13)
    costs = [phases.decode_cost(spec, tokens, int(b)) for b in batches]
    floors = {f"bandwidth floor at {tokens:,} tokens": (batches, [1e3 * c.read_bytes / run.bytes_per_s for c in costs]),
              "compute floor": (batches, [1e3 * c.flops / run.flops_per_s for c in costs])}
    shown = tokens == sweep["context_tokens"]  # the sweep was measured at one context: its points show there
    points = sweep["points"] if shown else []
    measured = {f"measured at {sweep['context_tokens']:,} tokens (kvsim)":
                ([p["batch"] for p in points], [p["step_ms"]["kvsim"] for p in points])}
    # sequences whose caches fit beside all the weights (held, not the bytes a step reads)
    full = (run.device["memory_total_bytes"] - weights_bytes(spec, "bf16")) // int(memory.kv_bytes(spec, tokens))
    cross = phases.ridge_batch(spec, tokens, run.bytes_per_s, run.flops_per_s)
    verdict = (f"compute-bound from B = {cross:,.0f}" if cross else
               f"memory-bound at any B (FLOP/B → {phases.decode_cost(spec, tokens, 2**20).intensity:.0f} < "
               f"ridge {run.flops_per_s / run.bytes_per_s:.0f})")
    # the memory-full line lies beyond the x range when a full memory holds more than 4,096 sequences
    return plot_time_and_floors(ax, measured, floors, {f"memory full at B = {full:,}": full},
                                xlabel="sequences decoded together (B)", title=f"{spec.name}, H200, {tokens:,} tokens: "
                                f"{verdict}", logx=True, logy=True, ylim=(0.01, 1e5))


def batch_floor_view(tokens=8192):
    """Context over :func:`draw_batch_floors`."""
    control = widgets.SelectionSlider(options=[(f"{t:,}", t) for t in BATCH_TOKENS], value=tokens,
                                      description="context", continuous_update=False)
    return make_view(draw_batch_floors, {"tokens": control}, figsize=(8, 4.6))


def draw_h200_variants(ax, variant="GQA-8 (Llama 3 8B)", run: h200.Run | None = None):
    """H200 step time against context for every variant; ``variant`` with its mlx-lm twin and its floor."""
    run = run or _run()
    series = {run.label(v): ([p["context_tokens"] for p in run.points(v)],
                             [p["step_ms"]["kvsim"] for p in run.points(v)])
              for v in run.measured_variants()}
    pts = run.points(variant)
    x = [p["context_tokens"] for p in pts]
    return plot_variants(ax, series, run.label(variant), (x, [p["step_ms"]["mlx-lm"] for p in pts]),
                         (x, [1e3 * p["read_bytes"] / run.bytes_per_s for p in pts]),
                         title=f"{run.device['name']}: which variant's step grows with the context, and how fast")


def h200_variants_view(variant="GQA-8 (Llama 3 8B)"):
    """A variant over :func:`draw_h200_variants`."""
    return make_view(draw_h200_variants, {"variant": dropdown("variant", _run().measured_variants(), variant)},
                     figsize=(8, 4.8))
