"""Lesson 08 views: stored vs read, and the calculator's floor on a served model's step time.

Contract
- :func:`draw_stored_vs_read`: what a cache stores and what one step reads, dense vs NSA vs DSA
  (curves that coincide drawn once, one legend entry per visible line).
- :func:`draw_decode_speed_limit` / :func:`decode_speed_view`: the floor on step time of a served
  model on an accelerator, (weights + B·cache read) / memory bandwidth, with sliders.
"""

from __future__ import annotations

from ..calc import units
from ..calc.hardware import accelerator_names, get_accelerator
from ..calc.registry import model_names
from ..calc.speed_floor import speed_floor, stored_vs_read
from ..plots.decode_speed import plot_step_floor, plot_stored_vs_read
from ..ui.base import dropdown, log_slider, make_view

KV_DTYPES = ("bf16", "fp8", "q8", "q4", "q2", "fp32")


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
