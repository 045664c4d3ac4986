"""Plots for windowed caches: a buffer's slots step by step, bytes by layer kind, measured vs formula.

Drawing only: callers pass what :mod:`kvsim.measure.ring_slots`, :mod:`kvsim.calc.window_bytes`, :mod:`kvsim.measure.growth`
or :mod:`kvsim.calc.memory` computed or measured.
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PatchCollection, PathCollection
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Rectangle
from matplotlib.textpath import TextPath
from matplotlib.transforms import Affine2D

from .size import UNIT_BYTES
from .style import decorate

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


def plot_slot_history(ax, positions, slots, visible, written, sinks: int = 0, title: str | None = None):
    """One row per decode step, one column per slot; the number is the token a slot holds.

    Coloured: the step's query attends to it. Grey: held but no longer visible (stale).
    Blank: never written. A black frame marks the slot the step wrote; sink slots are hatched.
    """
    ax.clear()
    slots = np.asarray(slots)
    steps, width = slots.shape
    extent = (-0.5, width - 0.5, steps - 0.5, -0.5)
    # one image per layer (fast to render): visible positions coloured, held-but-stale cells grey
    shown = np.where(visible, slots, np.nan).astype(float)
    ax.imshow(shown, cmap="viridis", aspect="auto", vmin=0, vmax=max(1, np.nanmax(slots)), alpha=0.55,
              interpolation="nearest", extent=extent, zorder=1)
    ax.imshow(np.where(slots >= 0, 0.88, 1.0), cmap="gray", vmin=0, vmax=1, aspect="auto",
              interpolation="nearest", extent=extent, zorder=0)
    rows, cols = np.nonzero(slots >= 0)
    _numbers(ax, cols, rows, [str(v) for v in slots[rows, cols]],
             ["black" if v else "0.55" for v in np.asarray(visible)[rows, cols]])
    frames = [Rectangle((w - 0.5, i - 0.5), 1, 1) for i, w in enumerate(written) if w >= 0]
    ax.add_collection(PatchCollection(frames, facecolor="none", edgecolor="black", linewidth=1.8, zorder=3))
    if sinks:
        ax.add_patch(Rectangle((-0.5, -0.5), min(sinks, width), steps, fill=False, hatch="//", ec="0.6",
                               lw=0, zorder=1.5))
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(steps - 0.5, -0.5)
    ax.set_xticks(range(width))
    ax.set_yticks(range(steps), [f"token {p}" for p in positions], fontsize=8)
    ax.set_xlabel("slot in the cache buffer")
    ax.set_ylabel("decode step (newest at the bottom)")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_bytes_by_kind(ax, tokens, by_kind: dict, reference: dict | None = None, unit: str = "GiB",
                       points: dict | None = None, title: str | None = None):
    """Stacked areas of KV bytes per layer kind against tokens, the total as a line, references dashed."""
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    base = np.zeros(len(x))
    for kind, y in by_kind.items():
        top = base + np.asarray(y, dtype=float) / s
        ax.fill_between(x, base, top, alpha=0.35, color=KIND_COLORS.get(kind), lw=0, label=f"{kind} layers")
        base = top
    ax.plot(x, base, "-", lw=2, color="black", label="real spec (total)")
    for label, y in (reference or {}).items():
        ax.plot(x, np.asarray(y, dtype=float) / s, "--", lw=2, color="tab:red", label=label)
    for label, (px, py) in (points or {}).items():
        ax.plot([px], [py / s], "o", color="black", ms=5)
        ax.annotate(label, (px, py / s), xytext=(-6, 8), textcoords="offset points", ha="right", fontsize=9)
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
