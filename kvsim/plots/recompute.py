"""Plots of recompute vs cache: token positions fed and measured decode time against answer length.

:func:`plot_tokens_fed` updates the artists of an earlier call on the same Axes in place (see
:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from ..ui.style import decorate, keep, log_scale, reuse

_STYLES = {"without a cache": ("tab:red", "-"), "with a cache": ("tab:blue", "-")}


def _line(ax, x, y, label, i):
    color, ls = _STYLES.get(label, (f"C{i}", "--"))
    return ax.plot(x, y, ls, color=color, lw=2, label=label)[0]


def plot_tokens_fed(ax, answer_tokens, curves: dict, points: dict | None = None, title: str | None = None,
                    log: bool = False):
    """Token positions fed against answer length, one line per mode; ``points`` labelled marks (x, y)."""
    points = points or {}
    shape = (tuple(curves), len(points), log)
    art = reuse(ax, "tokens_fed", shape)
    if art is None:
        ax.clear()
        art = keep(ax, "tokens_fed", shape, {
            "curves": [_line(ax, [], [], label, i) for i, label in enumerate(curves)],
            "points": [(ax.plot([], [], "o", color="black", ms=5)[0],
                        ax.annotate("", (0, 0), xytext=(-8, 8), textcoords="offset points", fontsize=9, ha="right"))
                       for _ in points]})
        ax.set_xlabel("answer tokens generated")
        ax.set_ylabel("token positions fed to the model")
        if log:
            log_scale(ax, "y")
        else:  # whole numbers with thousands separators: "1,600,000"
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    for line, y in zip(art["curves"], curves.values()):
        line.set_data(answer_tokens, np.asarray(y, dtype=float))
    for (dot, note), (label, (x, y)) in zip(art["points"], points.items()):
        dot.set_data([x], [y])
        note.set_text(label)
        note.xy = (x, y)
    if not log:
        top = max(float(np.max(y)) for y in curves.values())
        ax.set_ylim(0, 1.12 * top if top > 0 else 1)  # headroom for the point labels
    decorate(ax, xlim=(0, answer_tokens[-1]), ylim=None, title=title)
    return ax


def plot_cumulative_time(ax, answer_tokens, seconds: dict, title: str | None = None):
    """Measured wall time spent so far against answer tokens generated, one line per mode."""
    ax.clear()
    for i, (label, y) in enumerate(seconds.items()):
        _line(ax, answer_tokens, np.asarray(y, dtype=float), label, i)
    decorate(ax, xlabel="answer tokens generated", ylabel="measured time so far (s)",
             xlim=(0, answer_tokens[-1]), title=title)
    return ax
