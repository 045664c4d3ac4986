"""Plots for windowed caches: a buffer's slots step by step, bytes by layer kind, measured vs formula.

Drawing only: callers pass what :mod:`kvsim.measure.ring_slots`, :mod:`kvsim.calc.window_bytes`,
:mod:`kvsim.measure.growth` or :mod:`kvsim.calc.memory` computed or measured. The slot picture and the
bytes-by-kind areas update the artists of an earlier call on the same Axes in place (:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PatchCollection, PathCollection
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Rectangle
from matplotlib.textpath import TextPath
from matplotlib.transforms import Affine2D

from ..calc.units import UNIT_BYTES
from .style import clear_for, decorate, keep, reuse, set_fill_between

KIND_COLORS = {"sliding": "tab:green", "chunked": "tab:purple", "full": "tab:orange", "mla": "tab:blue",
               "recurrent": "tab:cyan"}


_GLYPHS: dict = {}


def _glyph(text: str, size: float = 8):
    """The outline of ``text`` in points, centred on (0, 0) (cached per string)."""
    if (text, size) not in _GLYPHS:
        path = TextPath((0, 0), text, prop=FontProperties(size=size))
        e = path.get_extents()
        _GLYPHS[text, size] = path.transformed(Affine2D().translate(-(e.x0 + e.x1) / 2, -(e.y0 + e.y1) / 2))
    return _GLYPHS[text, size]


def _numbers(ax, x, y, texts, colors, size: float = 8):
    """Centred labels at data (x, y) as ONE collection of glyph outlines: far faster to render than Text artists."""
    coll = PathCollection([_glyph(t, size) for t in texts], offsets=np.column_stack([x, y]),
                          offset_transform=ax.transData, facecolors=colors, edgecolors="none", zorder=2)
    coll.set_transform(Affine2D().scale(1 / 72) + ax.figure.dpi_scale_trans)  # points -> pixels at any dpi
    ax.add_collection(coll, autolim=False)
    return coll


def _build_slots(ax, shape):
    steps, width, sinks = shape
    clear_for(ax, "slot_history")  # a new window or chunk size: replace the picture, keep the Axes
    x, y, empty = np.arange(width + 1) - 0.5, np.arange(steps + 1) - 0.5, np.zeros((steps, width))
    art = keep(ax, "slot_history", shape, {
        # one quad mesh per layer (an image would be resampled to the screen on every render, 5× slower):
        # visible positions coloured, held-but-stale cells grey, never-written cells white
        "visible": ax.pcolormesh(x, y, empty, cmap="viridis", alpha=0.55, zorder=1),
        "grey": ax.pcolormesh(x, y, empty, cmap="gray", vmin=0, vmax=1, zorder=0),
        "numbers": _numbers(ax, [], [], [], []),
        "frames": ax.add_collection(PatchCollection([], facecolor="none", edgecolor="black", linewidth=1.8,
                                                    zorder=3), autolim=False),
        "sinks": ax.add_patch(Rectangle((-0.5, -0.5), min(sinks, width), steps, fill=False, hatch="//",
                                        ec="0.6", lw=0, zorder=1.5)) if sinks else None})
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(steps - 0.5, -0.5)
    ax.set_xticks(range(width))
    ax.set_xlabel("slot in the cache buffer")
    ax.set_ylabel("decode step (newest at the bottom)")
    return art


def plot_slot_history(ax, positions, slots, visible, written, sinks: int = 0, title: str | None = None):
    """One row per decode step, one column per slot; the number is the token a slot holds.

    Coloured: the step's query attends to it. Grey: held but no longer visible (stale).
    Blank: never written. A black frame marks the slot the step wrote; sink slots are hatched.
    A position of None is an empty row (no step yet).
    """
    slots, visible = np.asarray(slots), np.asarray(visible)
    steps, width = slots.shape
    shape = (steps, width, sinks)
    art = reuse(ax, "slot_history", shape) or _build_slots(ax, shape)
    art["grey"].set_array(np.where(slots >= 0, 0.88, 1.0))
    art["visible"].set_array(np.ma.masked_invalid(np.where(visible, slots, np.nan).astype(float)))
    art["visible"].set_clim(0, max(1, np.nanmax(slots)))
    rows, cols = np.nonzero(slots >= 0)
    numbers = art["numbers"]
    numbers.set_paths([_glyph(str(v)) for v in slots[rows, cols]])
    numbers.set_offsets(np.column_stack([cols, rows]) if len(rows) else np.zeros((0, 2)))
    numbers.set_facecolors(["black" if v else "0.55" for v in visible[rows, cols]])
    art["frames"].set_paths([Rectangle((w - 0.5, i - 0.5), 1, 1) for i, w in enumerate(written) if w >= 0])
    ax.set_yticks(range(steps), ["" if p is None else f"token {p}" for p in positions], fontsize=8)
    ax.set_title(title or "", fontsize=10)
    return ax


def _build_bytes_by_kind(ax, shape):
    kinds, references, n_points = shape
    clear_for(ax, "bytes_by_kind")  # another model's layer kinds: replace the picture, keep the Axes
    return keep(ax, "bytes_by_kind", shape, {
        "areas": [ax.fill_between([0, 1], 0, 0, alpha=0.35, color=KIND_COLORS.get(kind), lw=0,
                                  label=f"{kind} layers") for kind in kinds],
        "total": ax.plot([], [], "-", lw=2, color="black", label="real spec (total)")[0],
        "references": [ax.plot([], [], "--", lw=2, color="tab:red", label=label)[0] for label in references],
        "points": [(ax.plot([], [], "o", color="black", ms=5)[0],
                    ax.annotate("", (0, 0), xytext=(-6, 8), textcoords="offset points", ha="right", fontsize=9))
                   for _ in range(n_points)]})


def plot_bytes_by_kind(ax, tokens, by_kind: dict, reference: dict | None = None, unit: str = "GiB",
                       points: dict | None = None, title: str | None = None):
    """Stacked areas of KV bytes per layer kind against tokens, the total as a line, references dashed."""
    reference, points = reference or {}, points or {}
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    shape = (tuple(by_kind), tuple(reference), len(points))
    art = reuse(ax, "bytes_by_kind", shape) or _build_bytes_by_kind(ax, shape)
    base = np.zeros(len(x))
    for area, y in zip(art["areas"], by_kind.values()):
        top = base + np.asarray(y, dtype=float) / s
        set_fill_between(area, x, base, top)
        base = top
    art["total"].set_data(x, base)
    for line, y in zip(art["references"], reference.values()):
        line.set_data(x, np.asarray(y, dtype=float) / s)
    for (dot, note), (label, (px, py)) in zip(art["points"], points.items()):
        dot.set_data([px], [py / s])
        note.set_text(label)
        note.xy = (px, py / s)
    decorate(ax, xlim=(0, x[-1]), xlabel="tokens per sequence", ylabel=f"KV cache ({unit})", title=title)
    return ax


def plot_measured_vs_formula(ax, tokens, measured: dict, formula: dict, unit: str = "MiB",
                             vlines: dict | None = None, title: str | None = None):
    """Measured ``nbytes`` as markers over formula lines of the same colour (same key order)."""
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    colors = ["tab:green", "tab:orange", "tab:blue", "tab:purple"]
    for i, (label, y) in enumerate(formula.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, "-", lw=1.5, color=colors[i % 4], label=label)
    for i, (label, y) in enumerate(measured.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, "o", ms=5, mfc="none", color=colors[i % 4], label=label)
    for label, at in (vlines or {}).items():
        ax.axvline(at, color="grey", ls=":", lw=1.2)
        ax.annotate(label, (at, 0), xytext=(4, 6), textcoords="offset points", color="dimgrey", fontsize=9)
    decorate(ax, xlim=(0, x[-1]), xlabel="tokens appended", ylabel=f"cache nbytes ({unit})", title=title)
    return ax
