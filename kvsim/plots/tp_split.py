"""Lesson 07's tensor-parallel picture: KV bytes per token held by each GPU against tp.

Drawing only: the bytes come from :func:`kvsim.calc.memory.bytes_per_token` with ``tp``. A redraw for as
many tp values and models updates the bars of an earlier call in place (:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ..calc.units import format_bytes
from ..ui.style import clear_for, keep, legend, reuse


def _build(ax, shape):
    tps, n_series = shape
    clear_for(ax, "tp_bytes")
    x = np.arange(len(tps))
    width = 0.8 / n_series
    series = []
    for i in range(n_series):  # one bar per tp, each with its label above
        bars = ax.bar(x + (i - (n_series - 1) / 2) * width, np.zeros(len(tps)), width, color=f"C{i}")
        series.append((bars, [ax.annotate("", (b.get_x() + b.get_width() / 2, 0), xytext=(0, 2),
                                          textcoords="offset points", ha="center", va="bottom", fontsize=7)
                              for b in bars]))
    ax.set_xticks(x, [f"tp = {t}" for t in tps])
    ax.set_yticks([])
    ax.set_ylabel("KV bytes per token, each GPU")
    ax.grid(alpha=0.3, axis="y")
    return keep(ax, "tp_bytes", shape, {"series": series})


def plot_tp_bytes(ax, tps, series: dict, title: str | None = None):
    """Grouped linear bars: one group per tp, one bar per model, each labelled with its bytes."""
    shape = (tuple(tps), len(series))
    art = reuse(ax, "tp_bytes", shape) or _build(ax, shape)
    for (bars, notes), (label, values) in zip(art["series"], series.items()):
        bars.set_label(label)
        for bar, note, v in zip(bars, notes, values):
            bar.set_height(v)
            note.set_text(format_bytes(v))
            note.xy = (note.xy[0], v)
    ax.set_ylim(0, max(max(v) for v in series.values()) * 1.25)
    legend(ax, loc="upper right", fontsize=9)
    ax.set_title(title or "", fontsize=11)
    return ax
