"""Plots of speculative decoding: acceptance and tokens per target pass against the draft length k.

:func:`plot_against_k` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ..ui.style import decorate, keep, label_inward, reuse


def _build_against_k(ax, shape):
    n_series, n_expected, n_marks = shape
    ax.clear()
    return keep(ax, "against_k", shape, {
        "series": [ax.plot([], [], marker="o", color=f"C{i}", lw=1.5)[0] for i in range(n_series)],
        "expected": [ax.plot([], [], "--", color=f"C{i}", lw=1.2)[0] for i in range(n_expected)],
        "marks": [(ax.plot([], [], "*", color="black", ms=12)[0],
                   ax.annotate("", (0, 0), xytext=(8, 4), textcoords="offset points", fontsize=9))
                  for _ in range(n_marks)]})


def plot_against_k(ax, series: dict, expected: dict | None = None, ylabel: str = "", title: str | None = None,
                   ylim: tuple | None = None, marks: dict | None = None):
    """Measured ``series`` {label: (k, y)} as markers and lines; ``expected`` {label: (k, y)} dashed.

    ``marks`` {label: (k, y)} are single labelled points (e.g. the best k), labelled towards the middle.
    """
    expected, marks = expected or {}, marks or {}
    art = reuse(ax, "against_k", shape := (len(series), len(expected), len(marks))) or _build_against_k(ax, shape)
    for line, (label, (k, y)) in zip(art["series"] + art["expected"], list(series.items()) + list(expected.items())):
        line.set_data(np.asarray(k, dtype=float), np.asarray(y, dtype=float))
        line.set_label(label)
    ks = np.concatenate([np.asarray(k, dtype=float) for k, _ in series.values()])
    for (star, note), (label, (x, y)) in zip(art["marks"], marks.items()):
        star.set_data([x], [y])
        note.set_text(label)
        note.xy = (x, y)
        label_inward(note, x, ks.min(), ks.max(), dx=8, dy=4)  # never past the first or last k
    decorate(ax, xlabel="draft tokens proposed per round (k)", ylabel=ylabel, xlim=None,
             ylim=(0, None) if ylim is None else ylim, legend_loc="best", title=title)
    return ax
