"""Lesson 05 (hybrids): the lesson's controls: each view wraps this lesson's data/measure functions and its plots; it computes nothing.

Lesson 05 views: a hybrid's fixed recurrent state beside its growing KV, and models compared.

Lesson 05 views: one recurrent state update beside an attention layer's growing K/V, and the
short-context crossover (below it a hybrid holds MORE than its all-attention twin).

Contract
- :func:`draw_state_update` / :func:`state_update_view`: the update rule of the model's recurrent family,
  one recurrent layer's state bytes (fixed) and one attention layer's K/V after ``tokens`` tokens, with
  :func:`kvsim.lessons.l05_hybrids.data.layer_crossover` marked.
- :func:`draw_short_context` / :func:`short_context_view`: per-sequence bytes of hybrids and their
  all-attention twins against tokens (log-log), crossovers from
  :func:`kvsim.lessons.l05_hybrids.data.hybrid_crossover_tokens`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...calc import hybrid, memory, units
from ...calc.registry import load_model, model_names
from ...ui.base import dropdown, int_slider, log_slider, make_view
from .data import hybrid_crossover_tokens, layer_crossover, short_context_curves
from .plots import plot_short_context, plot_state_update, plot_state_vs_kv


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


HYBRIDS = ("jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b")


@lru_cache(maxsize=16)
def _recurrent_layer(model: str):
    """(name, the first recurrent layer, :func:`layer_crossover`) of a registry model (memoized per model)."""
    spec = load_model(model)
    return spec.name, next(x for x in spec.layers if x.kind == "recurrent"), layer_crossover(spec)


def draw_state_update(ax, model="jamba-v0.1", tokens=40):
    """The model's recurrent update, and one layer's state vs one attention layer's K/V after ``tokens``."""
    name, layer, c = _recurrent_layer(model)
    shapes = " + ".join(f"{part} {'×'.join(map(str, shape))}" for part, shape in layer.state_shapes)
    return plot_state_update(ax, layer.recurrent_family, tokens, c["state_bytes"], c["kv_token_bytes"], c["tokens"],
                             title=f"{name}: a {layer.recurrent_family} layer keeps {shapes} elements, "
                                   "updated in place")


def state_update_view(model="jamba-v0.1", tokens=40):
    """A hybrid and a token count over :func:`draw_state_update`."""
    return make_view(draw_state_update, {
        "model": dropdown("model", HYBRIDS, model),
        "tokens": int_slider("tokens", tokens, 1, 2048),
    }, figsize=(9, 4.6), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.92))


def _lengths(max_tokens: int) -> np.ndarray:
    """160 log-spaced token counts from 1 to ``max_tokens`` (duplicates dropped)."""
    return np.unique(np.geomspace(1, max_tokens, 160).astype(np.int64))


@lru_cache(maxsize=16)
def _short_context(model: str, max_tokens: int):
    """(:func:`short_context_curves` on 160 log-spaced lengths up to ``max_tokens``, (crossover T, bytes
    there)) of a registry model, memoized: a redraw recomputes nothing it computed before."""
    spec = load_model(model)
    at = hybrid_crossover_tokens(spec)
    return short_context_curves(spec, _lengths(max_tokens)), (at, int(hybrid.cache_split(spec, at)["total"]))


def draw_short_context(ax, models=HYBRIDS, max_tokens=4096):
    """Hybrids (solid) against their all-attention twins (dashed), 1..max_tokens tokens, crossovers marked."""
    t = _lengths(max_tokens)
    data = {name: _short_context(name, max_tokens) for name in models}
    curves = {name: (c["hybrid"], c["all-attention"]) for name, (c, _) in data.items()}
    crossings = {name: at for name, (_, at) in data.items()}
    return plot_short_context(ax, t, curves, crossings, title=(
        "each hybrid holds MORE than its all-attention twin below the marked length"))


def draw_one_short_context(ax, model="jamba-v0.1", max_tokens=4096):
    """:func:`draw_short_context` for one model."""
    return draw_short_context(ax, (model,), max_tokens)


def short_context_view(model="jamba-v0.1", max_tokens=4096):
    """One hybrid and the token range over :func:`draw_one_short_context`."""
    return make_view(draw_one_short_context, {
        "model": dropdown("model", HYBRIDS, model),
        "max_tokens": dropdown("up to tokens", (1024, 4096, 16_384), max_tokens),
    }, figsize=(7.5, 4.4), margins=dict(left=0.12, right=0.97, bottom=0.12, top=0.9))
