"""Plots of decode speed: measured step times, limit lines, and bytes stored against bytes read.

:func:`plot_step_floor` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from .size import UNIT_BYTES
from .style import decorate, keep, label_level, reuse

_MARKERS = ["o", "s", "^", "D", "v"]


def plot_measured(ax, series: dict, limits: dict | None = None, xlabel: str = "", ylabel: str = "",
                  title: str | None = None, x_scale: float = 1.0, y_scale: float = 1.0):
    """Measured points joined by lines, one series per label: {label: (x, y)}.

    ``limits`` are dashed reference lines {label: (x, y)} (e.g. time = bytes / bandwidth);
    x and y are divided by ``x_scale`` / ``y_scale`` before drawing.
    """
    ax.clear()
    for i, (label, (x, y)) in enumerate(series.items()):
        ax.plot(np.asarray(x, dtype=float) / x_scale, np.asarray(y, dtype=float) / y_scale,
                marker=_MARKERS[i % len(_MARKERS)], color=f"C{i}", lw=1.5, ms=6, label=label)
    for j, (label, (x, y)) in enumerate((limits or {}).items()):
        ax.plot(np.asarray(x, dtype=float) / x_scale, np.asarray(y, dtype=float) / y_scale,
                ls=["--", ":", "-."][j % 3], color="black", lw=1.2, label=label)
    decorate(ax, xlabel=xlabel, ylabel=ylabel, title=title)
    return ax


def plot_stored_vs_read(ax, tokens, stored: dict, read: dict, unit: str = "GiB", title: str | None = None):
    """Bytes kept in the cache (solid) and bytes one decode step reads (dashed) against tokens."""
    ax.clear()
    s = UNIT_BYTES[unit]
    t = np.asarray(tokens, dtype=float)
    for i, (label, y) in enumerate(stored.items()):
        ax.plot(t, np.asarray(y, dtype=float) / s, "-", color=f"C{i}", lw=2, label=f"stored: {label}")
    for i, (label, y) in enumerate(read.items()):
        ax.plot(t, np.asarray(y, dtype=float) / s, "--", color=f"C{i}", lw=2, label=f"read per step: {label}")
    decorate(ax, xlabel="tokens in the sequence", ylabel=f"bytes ({unit})", xlim=(0, t[-1]),
             legend_fontsize=8, title=title)
    return ax


def _build_step_floor(ax, shape):
    n_curves, n_hlines, has_point = shape
    ax.clear()
    return keep(ax, "step_floor", shape, {
        "curves": [ax.plot([], [], ["-", "--"][i % 2], color=f"C{i}", lw=2)[0] for i in range(n_curves)],
        # the point's label above and left of the point (the curve comes from below)
        "hlines": [(ax.axhline(0, color="grey", ls=":", lw=1.5),
                    ax.annotate("", (0, 0), xytext=(-4, -4), textcoords="offset points", color="dimgrey",
                                fontsize=9)) for _ in range(n_hlines)],
        "point": (ax.plot([], [], "o", color="black", ms=5)[0],
                  ax.annotate("", (0, 0), xytext=(-8, 6), textcoords="offset points", fontsize=9, ha="right",
                              va="bottom")) if has_point else None})


def plot_step_floor(ax, tokens, curves: dict, hlines: dict | None = None, point: tuple | None = None,
                    title: str | None = None):
    """Lower bounds on step time (ms) against context; ``point`` = (x, y_ms, label) marks the chosen context."""
    hlines = hlines or {}
    t = np.asarray(tokens, dtype=float)
    shape = (len(curves), len(hlines), point is not None)
    art = reuse(ax, "step_floor", shape) or _build_step_floor(ax, shape)
    for line, (label, y) in zip(art["curves"], curves.items()):
        line.set_data(t, np.asarray(y, dtype=float))
        line.set_label(label)
    top = max([float(np.max(y)) for y in curves.values()] + list(hlines.values()))
    for (line, note), (label, level) in zip(art["hlines"], hlines.items()):
        line.set_ydata([level, level])
        note.set_text(label)
    if point is not None:
        x, y, label = point
        art["point"][0].set_data([x], [y])
        art["point"][1].set_text(label)
        art["point"][1].xy = (x, y)
    decorate(ax, xlabel="tokens in each sequence's cache", ylabel="minimum step time (ms)", xlim=(0, t[-1]),
             ylim=(0, 1.1 * top), title=title)
    for (_, note), level in zip(art["hlines"], hlines.values()):
        label_level(note, level, [line.get_data() for line in art["curves"]])
    return ax
