"""Plots of bytes per token for the ways of storing K and V (MHA, GQA, MQA, MLA)."""

from __future__ import annotations

import numpy as np

_UNITS = (("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def _fmt(n: float) -> str:
    for unit, s in _UNITS:
        if n >= s:
            v = n / s
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:,.0f} {unit}"
    return "0 B"


def plot_bytes_per_token(ax, labels, series: dict, notes=None, title: str | None = None, log: bool = True):
    """Grouped bars of bytes per token: one group per label, one bar per series (e.g. formula, measured).

    ``notes`` (one string per label) are written above the group, e.g. the share of MHA.
    """
    ax.clear()
    x = np.arange(len(labels))
    width = 0.8 / len(series)
    tops = np.zeros(len(labels))
    for i, (name, values) in enumerate(series.items()):
        values = np.asarray(values, dtype=float)
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name, color=f"C{i}")
        for b, v in zip(bars, values):
            ax.annotate(_fmt(v), (b.get_x() + b.get_width() / 2, v), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
        tops = np.maximum(tops, values)
    for xi, top, note in zip(x, tops, notes or []):
        ax.annotate(note, (xi, top), xytext=(0, 14), textcoords="offset points", ha="center", fontsize=9,
                    fontweight="bold")
    ax.set_xticks(x, labels)
    ax.set_ylabel("KV cache bytes per token")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(max(tops.min() / 3, 1), tops.max() * 12)
    else:
        ax.set_ylim(0, tops.max() * 1.25)
    ax.grid(alpha=0.3, axis="y")
    if len(series) > 1:
        ax.legend(loc="upper right", fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
