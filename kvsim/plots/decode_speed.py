"""Plots of decode speed: the bandwidth floor of a served model, and bytes stored against bytes read.

:func:`plot_step_floor` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from .size import UNIT_BYTES
from ..ui.style import decorate, keep, label_level, reuse

_K = FuncFormatter(lambda v, _: f"{v / 1024:,.4g}K" if v else "0")  # token counts: 32768 -> 32K


def _merged(stored: dict, read: dict) -> list[tuple[str, np.ndarray, bool]]:
    """Curves with equal values drawn once: [(label naming every method it stands for, y, stored?)]."""
    out: list[tuple[list, list, np.ndarray]] = []
    for kind, series in (("stored", stored), ("read", read)):
        for label, y in series.items():
            y = np.asarray(y, dtype=float)
            same = next((c for c in out if np.array_equal(c[2], y)), None)
            if same is None:
                out.append(([], [], y))
                same = out[-1]
            (same[0] if kind == "stored" else same[1]).append(label)
    return [("; ".join(f"{kind}: {', '.join(names)}" for kind, names in (("stored", s), ("read per step", r)) if names),
             y, bool(s)) for s, r, y in out]


def plot_stored_vs_read(ax, tokens, stored: dict, read: dict, unit: str = "GiB", title: str | None = None):
    """Bytes kept in the cache (solid) and bytes one decode step reads (dashed) against tokens; curves that
    coincide are drawn once, labelled with every method they stand for (one legend entry per visible line)."""
    ax.clear()
    s = UNIT_BYTES[unit]
    t = np.asarray(tokens, dtype=float)
    for i, (label, y, is_stored) in enumerate(_merged(stored, read)):
        ax.plot(t, y / s, "-" if is_stored else "--", color=f"C{i}", lw=2, label=label)
    ax.set_xticks(np.linspace(0, t[-1], 5))
    ax.xaxis.set_major_formatter(_K)
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
    ax.set_xticks(np.linspace(0, t[-1], 5))
    ax.xaxis.set_major_formatter(_K)
    decorate(ax, xlabel="tokens in each sequence's cache", ylabel="minimum step time (ms)", xlim=(0, t[-1]),
             ylim=(0, 1.1 * top), title=title)
    for (_, note), level in zip(art["hlines"], hlines.values()):
        label_level(note, level, [line.get_data() for line in art["curves"]])
    return ax
