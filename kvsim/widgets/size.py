"""Lesson 02 views: KV size against tokens, and serving capacity on one accelerator."""

from __future__ import annotations

import numpy as np

from .. import capacity, memory
from ..hardware import accelerator_names, get_accelerator
from ..plots.size import plot_kv_vs_tokens, plot_memory_split
from ..registry import load_model, model_names
from ..variants import as_mha
from ..weights import weights_bytes
from .base import dropdown, log_slider, make_view

FLOAT_DTYPES = ("bf16", "fp16", "fp32", "fp8")


def kv_curves(model: str, tokens: int, batch: int = 1, kv_dtype: str = "bf16", points: int = 256):
    """x (tokens per sequence), the model's KV bytes for the batch, and its MHA counterfactual."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    curves = {f"{spec.name} (B={batch})": memory.kv_bytes(spec, t, batch, kv_dtype)}
    if any(layer.kind in ("full", "sliding", "chunked") for layer in spec.layers):
        mha = as_mha(spec)
        if mha.layers != spec.layers:
            curves[f"same model if MHA ({spec.num_attention_heads} KV heads)"] = memory.kv_bytes(mha, t, batch, kv_dtype)
    return t, curves


def draw_kv_vs_tokens(ax, model="llama-3.1-8b", tokens=131_072, batch=1, kv_dtype="bf16"):
    """KV bytes against tokens per sequence with the bf16 weights as a horizontal line."""
    spec = load_model(model)
    t, curves = kv_curves(model, tokens, batch, kv_dtype)
    w = weights_bytes(spec, "bf16")
    at = memory.kv_bytes(spec, tokens, batch, kv_dtype)
    plot_kv_vs_tokens(ax, t, curves, hlines={f"bf16 weights {w / 1e9:.1f} GB": w}, unit="GiB",
                      points={memory.format_bytes(at): (tokens, at)},
                      title=f"{spec.name}: {memory.format_bytes(memory.bytes_per_token(spec, kv_dtype))} per token, {kv_dtype}")
    ax.set_xlabel(f"tokens per sequence (batch {batch})")
    return ax


def kv_size_view(model="llama-3.1-8b", tokens=131_072, batch=1, kv_dtype="bf16"):
    """Sliders for model, tokens, batch and KV dtype over :func:`draw_kv_vs_tokens`."""
    return make_view(draw_kv_vs_tokens, {
        "model": dropdown("model", model_names(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
        "batch": log_slider("batch", batch, 1, 64),
        "kv_dtype": dropdown("KV dtype", FLOAT_DTYPES, kv_dtype),
    })


def memory_split(model: str, accelerator: str, tokens: int, utilization: float = 0.9, kv_dtype="bf16"):
    """Device memory split into weights, KV of the sequences that fit, unused KV budget and reserve."""
    spec, acc = load_model(model), get_accelerator(accelerator)
    w = weights_bytes(spec, "bf16")
    n = capacity.max_concurrent_sequences(spec, tokens, acc.memory_bytes, utilization, kv_dtype, weights_bytes=w)
    budget = capacity.kv_budget_bytes(acc.memory_bytes, utilization, w)
    used = n * int(capacity.per_sequence_bytes(spec, tokens, kv_dtype))
    parts = {"weights (bf16)": min(w, acc.memory_bytes), f"KV of {n} sequences": used,
             "KV budget left": budget - used, "reserve / activations": acc.memory_bytes - max(budget, 0) - min(w, acc.memory_bytes)}
    return acc.memory_bytes, {k: max(v, 0) for k, v in parts.items()}, n


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
