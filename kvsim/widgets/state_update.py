"""Lesson 05 views: one recurrent state update beside an attention layer's growing K/V, and the
short-context crossover (below it a hybrid holds MORE than its all-attention twin).

Contract
- :func:`draw_state_update` / :func:`state_update_view`: the update rule of the model's recurrent family,
  one recurrent layer's state bytes (fixed) and one attention layer's K/V after ``tokens`` tokens, with
  :func:`kvsim.calc.short_context.layer_crossover` marked.
- :func:`draw_short_context` / :func:`short_context_view`: per-sequence bytes of hybrids and their
  all-attention twins against tokens (log-log), crossovers from
  :func:`kvsim.calc.short_context.hybrid_crossover_tokens`.
"""

from __future__ import annotations

import numpy as np

from ..calc import hybrid
from ..calc.registry import load_model
from ..calc.short_context import (
    hybrid_crossover_tokens,
    layer_crossover,
    short_context_curves,
)
from ..plots.state_update import plot_short_context, plot_state_update
from .base import dropdown, int_slider, make_view

HYBRIDS = ("jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b")


def draw_state_update(ax, model="jamba-v0.1", tokens=40):
    """The model's recurrent update, and one layer's state vs one attention layer's K/V after ``tokens``."""
    spec = load_model(model)
    layer = next(x for x in spec.layers if x.kind == "recurrent")
    c = layer_crossover(spec)
    shapes = " + ".join(f"{name} {'×'.join(map(str, shape))}" for name, shape in layer.state_shapes)
    return plot_state_update(ax, layer.recurrent_family, tokens, c["state_bytes"], c["kv_token_bytes"], c["tokens"],
                             title=f"{spec.name}: a {layer.recurrent_family} layer keeps {shapes} elements, "
                                   "updated in place")


def state_update_view(model="jamba-v0.1", tokens=40):
    """A hybrid and a token count over :func:`draw_state_update`."""
    return make_view(draw_state_update, {
        "model": dropdown("model", HYBRIDS, model),
        "tokens": int_slider("tokens", tokens, 1, 2048),
    }, figsize=(9, 4.6), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.92))


def draw_short_context(ax, models=HYBRIDS, max_tokens=4096):
    """Hybrids (solid) against their all-attention twins (dashed), 1..max_tokens tokens, crossovers marked."""
    t = np.unique(np.geomspace(1, max_tokens, 160).astype(np.int64))
    curves, crossings = {}, {}
    for name in models:
        spec = load_model(name)
        c = short_context_curves(spec, t)
        curves[name] = (c["hybrid"], c["all-attention"])
        at = hybrid_crossover_tokens(spec)
        crossings[name] = (at, int(hybrid.cache_split(spec, at)["total"]))
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
