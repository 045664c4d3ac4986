"""Lesson 04 views: a real ring buffer and a real chunk buffer step by step, and KV bytes by layer kind.

The slot pictures are read from real caches (:mod:`kvsim.measure.ring_slots`): every redraw builds a
fresh RotatingKVCache / ChunkedKVCache, decodes ``step`` tokens into it and draws what its buffer holds.
"""

from __future__ import annotations

import numpy as np

from ..calc import memory, units
from ..calc import window_bytes as windows
from ..calc.counterfactual import full_attention
from ..calc.registry import load_model, model_names
from ..measure.ring_slots import EMPTY, chunk_history, ring_history
from ..plots.windows import plot_bytes_by_kind, plot_slot_history
from ..ui.base import dropdown, int_slider, log_slider, make_view

ROWS = 12  # decode steps shown (the most recent)


def _span(vis) -> str:
    """'0-3' style text for consecutive positions, comma-separated runs otherwise."""
    runs, start = [], vis[0]
    for a, b in zip(vis, list(vis[1:]) + [None]):
        if b is None or b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}–{a}")
            start = b
    return ", ".join(runs)


def _draw_history(ax, name, h, step, sinks):
    keep = slice(max(0, step - ROWS), step)
    vis = h.visible[-1]
    title = (f"{name}: after token {h.positions[-1]}, {h.capacity[-1]} slots = {h.nbytes[-1]} B;\n"
             f"its query attended to positions {_span(list(vis))} ({len(vis)} key{'s' if len(vis) != 1 else ''})")
    # always ROWS rows, the empty ones on top: the grid keeps its size while the step slider moves
    missing = ROWS - len(h.positions[keep])
    slots = np.vstack([np.full((missing, h.slots.shape[1]), EMPTY), h.slots[keep]])
    visible = np.vstack([np.zeros((missing, h.slots.shape[1]), dtype=bool), h.visible_mask()[keep]])
    written = np.concatenate([np.full(missing, -1), h.written[keep]])
    return plot_slot_history(ax, [None] * missing + list(h.positions[keep]), slots, visible, written,
                             sinks=sinks, title=title)


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


def windowed_models() -> list[str]:
    """Registry models with at least one sliding or chunked layer."""
    return [n for n in model_names() if windows.largest_window_tokens(load_model(n)) is not None]


def draw_window_bytes(ax, model="gemma-3-27b", tokens=131_072, kv_dtype="bf16", points: int = 257):
    """KV bytes by layer kind against tokens, with the window-ignoring calculator as a dashed line."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    ignored = full_attention(spec)
    s = windows.window_savings(spec, tokens, kv_dtype=kv_dtype)
    plot_bytes_by_kind(
        ax, t, windows.bytes_by_kind(spec, t, kv_dtype=kv_dtype),
        reference={"windows ignored (every layer full)": memory.kv_bytes(ignored, t, kv_dtype=kv_dtype)},
        points={units.format_bytes(s["real_bytes"]): (tokens, s["real_bytes"])},
        title=f"{spec.name}: layers {windows.pattern_period(spec)} repeated, {kv_dtype}\n"
              f"{s['ratio']:.1f}× smaller than a window-ignoring calculator at {tokens:,} tokens")
    return ax


def window_bytes_view(model="gemma-3-27b", tokens=131_072, kv_dtype="bf16"):
    """Sliders for model, tokens and KV dtype over :func:`draw_window_bytes`."""
    return make_view(draw_window_bytes, {
        "model": dropdown("model", windowed_models(), model),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
        "kv_dtype": dropdown("KV dtype", tuple(units.DTYPE_BYTES), kv_dtype),
    })
