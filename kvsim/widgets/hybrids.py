"""Lesson 05 views: a hybrid's fixed recurrent state beside its growing KV, and models compared."""

from __future__ import annotations

import numpy as np

from ..calc import hybrid, memory, units
from ..calc.registry import load_model, model_names
from ..plots.hybrids import plot_state_vs_kv
from ..ui.base import dropdown, log_slider, make_view

COMPARE = ("mixtral-8x7b", "jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b",
           "mamba2-2.7b", "falcon-mamba-7b")


def hybrid_models() -> list[str]:
    """Registry models with at least one recurrent layer."""
    return [n for n in model_names() if "recurrent" in load_model(n).kinds]


def draw_hybrid_cache(ax, model="jamba-v0.1", tokens=262_144, batch=1, kv_dtype="bf16", points: int = 257):
    """KV of the attention layers, the fixed recurrent state, their sum, and the all-attention counterfactual."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    split = hybrid.cache_split(spec, t, batch, kv_dtype)
    counts = hybrid.mixers(spec)
    n_rec = spec.count("recurrent")
    n_att = spec.num_hidden_layers - n_rec
    growing = {}
    if n_att:  # a purely recurrent model has no KV: only its flat state is drawn
        growing = {f"KV of the {n_att} attention layers": split["kv"], "total (KV + state)": split["total"]}
        growing[f"if all {spec.num_hidden_layers} layers were attention"] = memory.kv_bytes(
            hybrid.all_attention(spec), t, batch, kv_dtype)
    end = int(split["total"][-1])
    plot_state_vs_kv(ax, t, growing, {f"recurrent state of {n_rec} layers": split["state"]},
                     unit="GiB" if end >= 2**30 else "MiB", points={units.format_bytes(end): (tokens, end)},
                     title=f"{spec.name}: " + ", ".join(f"{n} {k}" for k, n in counts.items())
                     + f"; batch {batch}, {kv_dtype}")
    return ax


def hybrid_view(model="jamba-v0.1", tokens=262_144, batch=1):
    """Sliders for model, tokens and batch over :func:`draw_hybrid_cache`."""
    return make_view(draw_hybrid_cache, {
        "model": dropdown("model", hybrid_models(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
        "batch": log_slider("batch", batch, 1, 64),
    })


def draw_state_vs_kv(ax, tokens=262_144, models=COMPARE, kv_dtype="bf16", points: int = 65):
    """Per-sequence cache (KV + state) of several models against tokens, on log-log axes."""
    t = np.unique(np.geomspace(256, tokens, points).astype(np.int64))
    growing = {}
    for name in models:
        spec = load_model(name)
        kinds = ", ".join(f"{n} {k}" for k, n in hybrid.mixers(spec).items())
        growing[f"{name} ({kinds})"] = hybrid.cache_split(spec, t, 1, kv_dtype)["total"]
    return plot_state_vs_kv(ax, t, growing, unit="MiB", log=True,
                            title=f"cache per sequence, {kv_dtype}: fixed states stay flat, KV grows")
