"""Lesson 02 (how big is it): the lesson's controls: each view wraps this lesson's data/measure functions and
its plots; it computes nothing.

Lesson 02 views: KV size against tokens, and serving capacity on one accelerator.

Lesson 02 view: seed 001's figure (Llama 3 8B's KV against tokens, its MHA twin, the bf16 weights)
with its marks computed by kvsim: 8K = 1 GiB, 128K = 16 GiB, and the tokens at which each cache
equals the weights (:func:`kvsim.calc.capacity.crossover_tokens`).
"""

from __future__ import annotations

from ...calc import units
from ...calc.hardware import accelerator_names
from ...calc.registry import model_names
from ...ui.base import dropdown, log_slider, make_view
from ...ui.charts import plot_kv_vs_tokens
from .data import (engines_all_numbers, k_tokens_label, kv_size_numbers, memory_split, seed_figure_numbers,
                   weights_label)
from .plots import plot_engines_all, plot_kv_with_marks, plot_memory_split


def draw_kv_vs_tokens(ax, model="llama-3.1-8b", tokens=131_072, batch=1, kv_dtype="bf16"):
    """KV bytes against tokens per sequence with the bf16 weights as a horizontal line."""
    d = kv_size_numbers(model, tokens, batch, kv_dtype)
    w, at = d["weights_bytes"], d["at_bytes"]
    plot_kv_vs_tokens(ax, d["tokens"], d["curves"], hlines={f"bf16 weights {units.format_bytes(w)}": w}, unit="GiB",
                      points={units.format_bytes(at): (tokens, at)},
                      title=f"{d['name']}: {units.format_bytes(d['per_token_bytes'])} per token, {kv_dtype}")
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


MODELS = ("llama-3.1-8b", "llama-3-70b", "mistral-7b-v0.1", "qwen2.5-7b", "qwen3-8b")


def draw_seed_figure(ax, model="llama-3.1-8b", kv_dtype="bf16"):
    """KV bytes of one sequence against tokens, the MHA counterfactual, the weights and the crossovers."""
    d = seed_figure_numbers(model, kv_dtype)
    name, per, kv, w, cross = d["name"], d["per_token_bytes"], d["kv_bytes"], d["weights_bytes"], d["crossover_tokens"]
    curves = {f"{name}: {units.format_bytes(per['model'])} per token": ("model", kv["model"]),
              f"same model as MHA ({d['num_attention_heads']} KV heads): {units.format_bytes(per['mha'])}":
              ("mha", kv["mha"])}
    crossings = {f"{c:,}": (c, k) for k, c in cross.items() if c is not None}
    marks = {f"{units.format_bytes(b)} at {k_tokens_label(n)}": (n, b) for n, b in d["marks"].items()}
    label = weights_label(w)
    return plot_kv_with_marks(ax, d["tokens"], curves, w, label, crossings, marks, d["ticks"],
                              title=f"{name}, {kv_dtype} KV: the cache equals the weights at "
                                    f"{cross['model']:,} tokens" if cross["model"] else name)


def seed_figure_view(model="llama-3.1-8b", kv_dtype="bf16"):
    """A model and a KV dtype over :func:`draw_seed_figure`."""
    return make_view(draw_seed_figure, {
        "model": dropdown("model", MODELS, model),
        "kv_dtype": dropdown("KV dtype", ("bf16", "fp8", "fp32"), kv_dtype),
    }, figsize=(8, 4.6), margins=dict(left=0.09, right=0.98, bottom=0.12, top=0.92))


def draw_engines_all(axes, prompt_tokens=8192, decode_steps=0):
    """Lesson 02's engines figure: what kvsim, mlx-lm, transformers and vLLM hold for one request, per model
    (:func:`kvsim.lessons.l02_how_big.data.engines_all_numbers`)."""
    tables = engines_all_numbers(prompt_tokens=prompt_tokens, decode_steps=decode_steps)
    return plot_engines_all(list(axes), tables, title=(
        f"one request, {prompt_tokens:,}-token prompt + {decode_steps:,} decode steps, bf16: "
        "what each engine holds"))
