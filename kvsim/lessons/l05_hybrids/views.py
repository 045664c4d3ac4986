"""Lesson 05 (hybrids): the lesson's controls: each view wraps this lesson's data/measure functions and its
plots; it computes nothing.

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

from ...calc import units
from ...ui.base import dropdown, int_slider, log_slider, make_view
from .data import (
    CACHE_UNIT,
    hybrid_cache_numbers,
    mixers_text,
    hybrid_models,
    recurrent_layer,
    short_context_lengths,
    short_context_numbers,
    state_shapes_text,
    state_vs_kv_curves,
)
from .plots import plot_short_context, plot_state_update, plot_state_vs_kv


COMPARE = ("mixtral-8x7b", "jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b",
           "mamba2-2.7b", "falcon-mamba-7b")


def draw_hybrid_cache(ax, model="jamba-v0.1", tokens=262_144, batch=1, kv_dtype="bf16", points: int = 257):
    """KV of the attention layers, the fixed recurrent state, their sum, and the all-attention counterfactual,
    on log-log axes: the flat state, the KV below it at short context and the total above both stay visible."""
    d = hybrid_cache_numbers(model, tokens, batch, kv_dtype, points)
    split, n_att, end = d["split"], d["attention_layers"], d["end_bytes"]
    growing = {}
    if n_att:  # a purely recurrent model has no KV: only its flat state is drawn
        growing = {f"KV of the {n_att} attention layers": split["kv"], "total (KV + state)": split["total"],
                   f"if all {d['num_hidden_layers']} layers were attention": d["all_attention"]}
    plot_state_vs_kv(ax, d["tokens"], growing, {f"recurrent state of {d['recurrent_layers']} layers": split["state"]},
                     unit=CACHE_UNIT, log=True, points={units.format_bytes(end): (tokens, end)},
                     title=f"{d['name']}: {mixers_text(d['mixers'])}; batch {batch}, {kv_dtype}")
    return ax


def hybrid_view(model="jamba-v0.1", tokens=262_144, batch=1):
    """Sliders for model, tokens and batch over :func:`draw_hybrid_cache`."""
    return make_view(draw_hybrid_cache, {
        "model": dropdown("model", hybrid_models(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
        "batch": log_slider("batch", batch, 1, 64),
    }, figsize=(7.5, 4.6))


def draw_state_vs_kv(ax, tokens=262_144, models=COMPARE, kv_dtype="bf16", points: int = 65):
    """Per-sequence cache (KV + state) of several models against tokens, on log-log axes."""
    t, curves = state_vs_kv_curves(models, tokens, kv_dtype, points)
    growing = {f"{name} ({mixers_text(mixers)})": total for name, (mixers, total) in curves.items()}
    return plot_state_vs_kv(ax, t, growing, unit=CACHE_UNIT, log=True, legend_loc="below",
                            title=f"cache per sequence, {kv_dtype}: fixed states stay flat, KV grows")


HYBRIDS = ("jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b")


def draw_state_update(ax, model="jamba-v0.1", tokens=40):
    """The model's recurrent update, and one layer's state vs one attention layer's K/V after ``tokens``."""
    name, layer, c = recurrent_layer(model)
    shapes = state_shapes_text(layer.state_shapes)
    return plot_state_update(ax, layer.recurrent_family, tokens, c["state_bytes"], c["kv_token_bytes"], c["tokens"],
                             title=f"{name}: a {layer.recurrent_family} layer keeps {shapes} elements, "
                                   "updated in place")


def state_update_view(model="jamba-v0.1", tokens=40):
    """A hybrid and a token count over :func:`draw_state_update`."""
    return make_view(draw_state_update, {
        "model": dropdown("model", HYBRIDS, model),
        "tokens": int_slider("tokens", tokens, 1, 2048),
    }, figsize=(9, 4.6), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.92))


def draw_short_context(ax, models=HYBRIDS, max_tokens=4096):
    """Hybrids (solid) against their all-attention twins (dashed), 1..max_tokens tokens, crossovers marked."""
    t = short_context_lengths(max_tokens)
    data = {name: short_context_numbers(name, max_tokens) for name in models}
    curves = {name: (c["hybrid"], c["all-attention"]) for name, (c, _) in data.items()}
    crossings = {name: at for name, (_, at) in data.items()}
    return plot_short_context(ax, t, curves, crossings, unit=CACHE_UNIT, title=(
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
