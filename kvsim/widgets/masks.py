"""Lesson 04 views: which keys each query sees (masks), where a ring keeps them, and which layers hold the bytes.

Contract (one numbering: token t sits at position t, 0-based; the slider picks the newest token)
- :func:`draw_masks` / :func:`mask_view`: :func:`kvsim.calc.masks.attention_mask` for full, sliding(W),
  chunked(C) and sliding(W) + sink tokens, the chosen token's row framed.
- :func:`draw_ring_link` / :func:`ring_link_view`: that token's mask row, the slots of a real
  RotatingKVCache after writing it (:func:`kvsim.measure.ring_slots.ring_history`), and the same keys
  in temporal order.
- :func:`draw_kind_shares` / :func:`kind_share_view`: each attention kind's share of a model's layers
  and of its KV bytes (:func:`kvsim.calc.kind_share.kind_shares`).
"""

from __future__ import annotations

from ..calc.kind_share import kind_shares
from ..calc.masks import attention_mask
from ..calc.registry import load_model
from ..measure.ring_slots import ring_history
from ..plots.masks import plot_kind_shares, plot_masks, plot_ring_link
from ..ui.base import dropdown, int_slider, log_slider, make_view
from .windows import windowed_models

TOKENS = 20  # positions shown in the mask panels


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def draw_masks(ax, token=16, window=6, chunk=8, sinks=2):
    """Four query × key masks over positions 0..19, the row of token ``token`` framed."""
    masks = {"full": attention_mask(TOKENS, "full"),
             f"sliding, W = {window}": attention_mask(TOKENS, "sliding", window=window),
             f"chunked, C = {chunk}": attention_mask(TOKENS, "chunked", chunk=chunk),
             f"sliding W = {window} + {sinks} sinks": attention_mask(TOKENS, "sliding", window=window, sinks=sinks)}
    return plot_masks(ax, masks, token, title=f"token {token} (the {ordinal(token + 1)} token of the sequence) "
                                              "attends to the blue keys of its row")


def mask_view(token=16, window=6, chunk=8, sinks=2):
    """Sliders for the token, the window W, the chunk C and the sink tokens over :func:`draw_masks`."""
    return make_view(draw_masks, {
        "token": int_slider("token", token, 0, TOKENS - 1),
        "window": int_slider("window W", window, 1, 12),
        "chunk": int_slider("chunk C", chunk, 1, 12),
        "sinks": int_slider("sink tokens", sinks, 0, 4),
    }, figsize=(10, 3.8), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.88))


def draw_ring_link(ax, token=16, window=6, sinks=2):
    """Token ``token``'s mask row, a real ring's slots after writing it, and the keys oldest first."""
    name, history = ring_history(window, sinks, token + 1)
    row = attention_mask(token + 1, "sliding", window=window, sinks=sinks)[token]
    return plot_ring_link(ax, token, row, history.slots[-1], sinks, title=(
        f"{name} after token {token}: {int(row.sum())} keys; RoPE rotated each key before it was written"))


def ring_link_view(token=16, window=6, sinks=2):
    """Sliders for the token, the window and the sinks over :func:`draw_ring_link`."""
    return make_view(draw_ring_link, {
        "token": int_slider("token", token, 0, 30),
        "window": int_slider("window W", window, 1, 12),
        "sinks": int_slider("sink tokens", sinks, 0, 4),
    }, figsize=(10, 3.4), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.88))


def draw_kind_shares(ax, model="gemma-3-27b", tokens=131_072, kv_dtype="bf16"):
    """Layers and KV bytes of ``model`` at ``tokens`` split by attention kind."""
    spec = load_model(model)
    return plot_kind_shares(ax, kind_shares(spec, tokens, kv_dtype),
                            title=f"{spec.name} at {tokens:,} tokens: share of layers vs share of KV bytes")


def kind_share_view(model="gemma-3-27b", tokens=131_072):
    """A model and a token count over :func:`draw_kind_shares`."""
    return make_view(draw_kind_shares, {
        "model": dropdown("model", windowed_models(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
    }, figsize=(8, 2.8), margins=dict(left=0.12, right=0.97, bottom=0.42, top=0.86))
