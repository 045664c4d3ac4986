"""Plots of speculative decoding: acceptance and tokens per target pass against the draft length k."""

from __future__ import annotations

import numpy as np

from .style import decorate


def plot_against_k(ax, series: dict, expected: dict | None = None, ylabel: str = "", title: str | None = None,
                   ylim: tuple | None = None, marks: dict | None = None):
    """Measured ``series`` {label: (k, y)} as markers and lines; ``expected`` {label: (k, y)} dashed.

    ``marks`` {label: (k, y)} are single labelled points (e.g. the best k).
    """
    ax.clear()
    for i, (label, (k, y)) in enumerate(series.items()):
        ax.plot(np.asarray(k, dtype=float), np.asarray(y, dtype=float), marker="o", color=f"C{i}", lw=1.5,
                label=label)
    for i, (label, (k, y)) in enumerate((expected or {}).items()):
        ax.plot(np.asarray(k, dtype=float), np.asarray(y, dtype=float), "--", color=f"C{i}", lw=1.2, label=label)
    for label, (x, y) in (marks or {}).items():
        ax.plot([x], [y], "*", color="black", ms=12)
        ax.annotate(label, (x, y), xytext=(6, 6), textcoords="offset points", fontsize=9)
    decorate(ax, xlabel="draft tokens proposed per round (k)", ylabel=ylabel, xlim=None,
             ylim=(0, None) if ylim is None else ylim, legend_loc="best", title=title)
    return ax
