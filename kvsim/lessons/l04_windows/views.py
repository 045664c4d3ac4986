"""Lesson 04 (sliding windows and chunks): the lesson's controls: each view wraps this lesson's data/measure
functions and its plots; it computes nothing.

Lesson 04 views: a real ring buffer and a real chunk buffer step by step, and KV bytes by layer kind.

The slot pictures are read from real caches (:mod:`kvsim.lessons.l04_windows.measure`): every redraw builds a
fresh RotatingKVCache / ChunkedKVCache, decodes ``step`` tokens into it and draws what its buffer holds.

Lesson 04 views: which keys each query sees (masks), where a ring keeps them, and which layers hold the bytes.

Contract (one numbering: token t sits at position t, 0-based; the slider picks the newest token)
- :func:`draw_masks` / :func:`mask_view`: :func:`kvsim.lessons.l04_windows.data.attention_mask` for full, sliding(W),
  chunked(C) and sliding(W) + sink tokens, the chosen token's row framed.
- :func:`draw_ring_link` / :func:`ring_link_view`: that token's mask row, the slots of a real
  RotatingKVCache after writing it (:func:`kvsim.lessons.l04_windows.measure.ring_history`), and the same keys
  in temporal order.
- :func:`draw_kind_shares` / :func:`kind_share_view`: each attention kind's share of a model's layers
  and of its KV bytes (:func:`kvsim.lessons.l04_windows.data.kind_shares`).
"""

from __future__ import annotations

from ...calc import units
from ...ui.base import dropdown, int_slider, log_slider, make_view
from .data import (LAST_MASK_POSITION, MASK_TOKENS, attended_label, attention_mask, model_kind_shares,
                   padded_history_rows, position_ordinal, ring_link_numbers, window_bytes_numbers, windowed_models)
from .measure import EMPTY, chunk_history, ring_history
from .plots import plot_bytes_by_kind, plot_kind_shares, plot_masks, plot_ring_link, plot_slot_history


ROWS = 12  # decode steps shown (the most recent)


def _draw_history(ax, name, h, step, sinks):
    title = (f"{name}: after token {h.positions[-1]}, {h.capacity[-1]} slots = {h.nbytes[-1]} B;\n"
             f"its query attended to positions {attended_label(h.visible[-1])}")
    # always ROWS rows, the empty ones on top: the grid keeps its size while the step slider moves
    positions, slots, visible, written = padded_history_rows(h.positions, h.slots, h.visible_mask(), h.written,
                                                             step, ROWS, empty=EMPTY)
    return plot_slot_history(ax, positions, slots, visible, written, sinks=sinks, title=title)


def draw_ring_buffer(ax, step=11, window=6, sinks=0):
    """A real RotatingKVCache(max_size=window+sinks, keep=sinks) after ``step`` decode steps."""
    name, history = ring_history(window, sinks, step)
    return _draw_history(ax, name, history, step, sinks)


def ring_buffer_view(step=11, window=6, sinks=0):
    """Sliders for decode step, window and sink tokens over :func:`draw_ring_buffer`."""
    return make_view(draw_ring_buffer, {
        "step": int_slider("decode step", step, 1, 40),
        "window": int_slider("window W", window, 2, 12),
        "sinks": int_slider("sink tokens (keep)", sinks, 0, 4),
    }, figsize=(7.5, 4.6))


def draw_chunks(ax, step=12, chunk_size=8):
    """A real ChunkedKVCache(chunk_size) after ``step`` decode steps: stale rows of the old chunk in grey."""
    name, history = chunk_history(chunk_size, step)
    return _draw_history(ax, name, history, step, 0)


def chunk_view(step=12, chunk_size=8):
    """Sliders for decode step and chunk size over :func:`draw_chunks`."""
    return make_view(draw_chunks, {
        "step": int_slider("decode step", step, 1, 40),
        "chunk_size": int_slider("chunk C", chunk_size, 2, 16),
    }, figsize=(7.5, 4.6))


def draw_window_bytes(ax, model="gemma-3-27b", tokens=131_072, kv_dtype="bf16", points: int = 257):
    """KV bytes by layer kind against tokens (log-log), with the window-ignoring calculator as a dashed line."""
    d = window_bytes_numbers(model, tokens, kv_dtype, points)
    plot_bytes_by_kind(
        ax, d["tokens"], d["by_kind"], reference={"windows ignored (every layer full)": d["ignored"]},
        points={units.format_bytes(d["real_bytes"]): (tokens, d["real_bytes"])},
        title=f"{d['name']}: layers {d['pattern']} repeated, {kv_dtype}\n"
              f"{d['ratio']:.1f}× smaller than a window-ignoring calculator at {tokens:,} tokens")
    return ax


def window_bytes_view(model="gemma-3-27b", tokens=131_072, kv_dtype="bf16"):
    """Sliders for model, tokens and KV dtype over :func:`draw_window_bytes`."""
    return make_view(draw_window_bytes, {
        "model": dropdown("model", windowed_models(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
        "kv_dtype": dropdown("KV dtype", tuple(units.DTYPE_BYTES), kv_dtype),
    })


def draw_masks(ax, token=16, window=6, chunk=8, sinks=2):
    """Four query × key masks over positions 0..19, the row of token ``token`` framed."""
    masks = {"full": attention_mask(MASK_TOKENS, "full"),
             f"sliding, W = {window}": attention_mask(MASK_TOKENS, "sliding", window=window),
             f"chunked, C = {chunk}": attention_mask(MASK_TOKENS, "chunked", chunk=chunk),
             f"sliding W = {window} + {sinks} sinks": attention_mask(MASK_TOKENS, "sliding", window=window,
                                                                     sinks=sinks)}
    return plot_masks(ax, masks, token, title=f"token {token} (the {position_ordinal(token)} token of the sequence) "
                                              "attends to the blue keys of its row")


def mask_view(token=16, window=6, chunk=8, sinks=2):
    """Sliders for the token, the window W, the chunk C and the sink tokens over :func:`draw_masks`."""
    return make_view(draw_masks, {
        "token": int_slider("token", token, 0, LAST_MASK_POSITION),
        "window": int_slider("window W", window, 1, 12),
        "chunk": int_slider("chunk C", chunk, 1, 12),
        "sinks": int_slider("sink tokens", sinks, 0, 4),
    }, figsize=(10, 3.8), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.88))


def draw_ring_link(ax, token=16, window=6, sinks=2):
    """Token ``token``'s mask row, a real ring's slots after writing it, and the keys oldest first."""
    d = ring_link_numbers(token, window, sinks)
    name, history = ring_history(window, sinks, d["tokens_written"])
    return plot_ring_link(ax, token, d["row"], history.slots[-1], sinks, title=(
        f"{name} after token {token}: {d['keys']} keys; RoPE rotated each key before it was written"))


def ring_link_view(token=16, window=6, sinks=2):
    """Sliders for the token, the window and the sinks over :func:`draw_ring_link`."""
    return make_view(draw_ring_link, {
        "token": int_slider("token", token, 0, 30),
        "window": int_slider("window W", window, 1, 12),
        "sinks": int_slider("sink tokens", sinks, 0, 4),
    }, figsize=(10, 3.4), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.88))


def draw_kind_shares(ax, model="gemma-3-27b", tokens=131_072, kv_dtype="bf16"):
    """Layers and KV bytes of ``model`` at ``tokens`` split by attention kind."""
    name, shares = model_kind_shares(model, tokens, kv_dtype)
    return plot_kind_shares(ax, shares, title=f"{name} at {tokens:,} tokens: share of layers vs share of KV bytes")


def kind_share_view(model="gemma-3-27b", tokens=131_072):
    """A model and a token count over :func:`draw_kind_shares`."""
    return make_view(draw_kind_shares, {
        "model": dropdown("model", windowed_models(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
    }, figsize=(8, 2.8), margins=dict(left=0.12, right=0.97, bottom=0.42, top=0.86))
