"""Lesson 07's tensor-parallel picture: KV bytes per token held by each GPU against tp.

Drawing only: the bytes come from :func:`kvsim.calc.memory.bytes_per_token` with ``tp``.
"""

from __future__ import annotations

import numpy as np

from ..calc.units import format_bytes


def plot_tp_bytes(ax, tps, series: dict, title: str | None = None):
    """Grouped linear bars: one group per tp, one bar per model, each labelled with its bytes."""
    ax.clear()
    x = np.arange(len(tps))
    width = 0.8 / len(series)
    top = max(max(v) for v in series.values())
    for i, (label, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label, color=f"C{i}")
        for b, v in zip(bars, values):
            ax.annotate(format_bytes(v), (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [f"tp = {t}" for t in tps])
    ax.set_ylim(0, top * 1.25)
    ax.set_yticks([])
    ax.set_ylabel("KV bytes per token, each GPU")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper right", fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
