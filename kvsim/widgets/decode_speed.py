"""Lesson 08 views: measured step time against bytes read, stored vs read, and the calculator's floor.

Contract
- :func:`draw_step_time_vs_context` / :func:`draw_step_time_vs_bytes`: measurements from
  :mod:`kvsim.measure.step_time`, the latter with the limit line time = bytes / copy bandwidth
  (:func:`kvsim.measure.bandwidth.measure_copy_bandwidth`).
- :func:`draw_stored_vs_read`: what a cache stores and what one step reads, dense vs NSA vs DSA.
- :func:`draw_decode_speed_limit` / :func:`decode_speed_view`: the floor on step time of a served
  model on an accelerator, (weights + B·cache read) / memory bandwidth, with sliders.
"""

from __future__ import annotations

import numpy as np

from ..calc import units
from ..calc.hardware import accelerator_names, get_accelerator
from ..calc.registry import model_names
from ..calc.speed_floor import speed_floor, stored_vs_read
from ..measure.step_time import StepTime, by_label
from ..plots.decode_speed import plot_measured, plot_step_floor, plot_stored_vs_read
from .base import dropdown, log_slider, make_view

KV_DTYPES = ("bf16", "fp8", "q8", "q4", "q2", "fp32")


def draw_step_time_vs_context(ax, results: list[StepTime]):
    """Measured step time (ms) against tokens already cached, one line per model."""
    series = {k: ([r.context_tokens for r in v], [r.seconds for r in v]) for k, v in by_label(results).items()}
    return plot_measured(ax, series, xlabel="tokens already in the cache", ylabel="decode step time (ms)",
                         title="measured on this machine: one token per step", y_scale=1e-3)


def draw_step_time_vs_bytes(ax, results: list[StepTime], copy_bytes_per_s: float):
    """Measured step time against bytes read per step, with time = bytes / copy bandwidth as the limit."""
    series = {k: ([r.read_bytes for r in v], [r.seconds for r in v]) for k, v in by_label(results).items()}
    top = max(r.read_bytes for r in results) * 1.05
    x = np.array([0.0, top])
    limits = {f"bytes / copy bandwidth ({copy_bytes_per_s / 1e9:.1f} GB/s)": (x, x / copy_bytes_per_s)}
    return plot_measured(ax, series, limits, xlabel="bytes read per step: weights + cache (MB)",
                         ylabel="decode step time (ms)", title="step time grows with the bytes it reads",
                         x_scale=1e6, y_scale=1e-3)


def draw_stored_vs_read(ax, model: str = "deepseek-v3", tokens: int = 131_072):
    """Stored (solid) and read-per-step (dashed) bytes of one sequence: sparse attention cuts only the reads."""
    t, stored, read = stored_vs_read(model, tokens)
    return plot_stored_vs_read(ax, t, stored, read, unit="GiB",
                               title=f"{model}, bf16: what is stored vs what one step reads")


def draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, kv_dtype="bf16",
                            tokens=131_072):
    """Minimum decode step time against context for a batch, and the tokens/s ceiling at ``tokens``."""
    t, w_s, step_s = speed_floor(model, accelerator, batch, kv_dtype, tokens)
    per_seq = 1 / step_s[-1]
    label = f"{per_seq:,.0f} tok/s per sequence, {batch * per_seq:,.0f} in all"
    # bytes read at the last point = what must sit in memory (weights + B caches + states)
    needed = step_s[-1] * get_accelerator(accelerator).memory_bandwidth_bytes_per_s
    fits = needed <= get_accelerator(accelerator).memory_bytes
    plot_step_floor(ax, t, {f"weights + KV of {batch} sequence(s), {kv_dtype}": 1e3 * step_s},
                    hlines={f"weights only: {1e3 * w_s:.2f} ms": 1e3 * w_s},
                    point=(t[-1], 1e3 * step_s[-1], label),
                    title=f"{model} on {accelerator}: memory-bandwidth floor"
                          + ("" if fits else f" (needs {units.format_bytes(needed)}: does not fit)"))
    return ax


def decode_speed_view(model="llama-3.1-8b", accelerator="H100 80GB", batch=1, kv_dtype="bf16", tokens=131_072):
    """Sliders for model, accelerator, batch, KV dtype and context over :func:`draw_decode_speed_limit`."""
    return make_view(draw_decode_speed_limit, {
        "model": dropdown("model", model_names(), model),
        "accelerator": dropdown("accelerator", accelerator_names(), accelerator),
        "batch": log_slider("batch", batch, 1, 256),
        "kv_dtype": dropdown("KV dtype", KV_DTYPES, kv_dtype),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
    })
