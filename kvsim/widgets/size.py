"""Lesson 02 views: KV size against tokens, and serving capacity on one accelerator."""

from __future__ import annotations

from ..calc import memory, units
from ..calc.capacity import memory_split
from ..calc.counterfactual import kv_curves
from ..calc.hardware import accelerator_names
from ..calc.registry import load_model, model_names
from ..calc.weights import weights_bytes
from ..plots.size import plot_kv_vs_tokens, plot_memory_split
from ..ui.base import dropdown, log_slider, make_view


def draw_kv_vs_tokens(ax, model="llama-3.1-8b", tokens=131_072, batch=1, kv_dtype="bf16"):
    """KV bytes against tokens per sequence with the bf16 weights as a horizontal line."""
    spec = load_model(model)
    t, curves = kv_curves(model, tokens, batch, kv_dtype)
    w = weights_bytes(spec, "bf16")
    at = memory.kv_bytes(spec, tokens, batch, kv_dtype)
    plot_kv_vs_tokens(ax, t, curves, hlines={f"bf16 weights {units.format_bytes(w)}": w}, unit="GiB",
                      points={units.format_bytes(at): (tokens, at)},
                      title=f"{spec.name}: {units.format_bytes(memory.bytes_per_token(spec, kv_dtype))} per token, "
                            f"{kv_dtype}")
    ax.set_xlabel(f"tokens per sequence (batch {batch})")
    return ax


def kv_size_view(model="llama-3.1-8b", tokens=131_072, batch=1, kv_dtype="bf16"):
    """Sliders for model, tokens, batch and KV dtype over :func:`draw_kv_vs_tokens`."""
    return make_view(draw_kv_vs_tokens, {
        "model": dropdown("model", model_names(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
        "batch": log_slider("batch", batch, 1, 64),
        "kv_dtype": dropdown("KV dtype", tuple(units.DTYPE_BYTES), kv_dtype),
    })


def draw_capacity(ax, model="llama-3-8b", accelerator="A100 40GB", tokens=8192, utilization=0.9):
    total, parts, n = memory_split(model, accelerator, tokens, utilization)
    plot_memory_split(ax, parts, total, title=f"{model} on {accelerator}: {n} sequences of {tokens:,} tokens")
    return ax


def capacity_view(model="llama-3-8b", accelerator="A100 40GB", tokens=8192, utilization=0.9):
    """Sliders for model, accelerator, tokens and utilization over :func:`draw_capacity`."""
    import ipywidgets as widgets
    util = widgets.FloatSlider(value=utilization, min=0.5, max=1.0, step=0.05, description="utilization",
                               continuous_update=False)
    return make_view(draw_capacity, {
        "model": dropdown("model", model_names(), model),
        "accelerator": dropdown("accelerator", accelerator_names(), accelerator),
        "tokens": log_slider("tokens", tokens, 1024, 131_072),
        "utilization": util,
    }, figsize=(7.5, 2.6), margins=dict(left=0.03, right=0.97, bottom=0.55, top=0.85))
