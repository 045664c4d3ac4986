"""Plots of bytes per token for the ways of storing K and V (MHA, GQA, MQA, MLA).

:func:`plot_bytes_per_token` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ..calc.units import format_bytes
from ..ui.style import keep, log_scale, reuse


def _build_bytes_per_token(ax, shape):
    n_labels, names, log = shape
    ax.clear()
    x = np.arange(n_labels)
    width = 0.8 / len(names)
    value = dict(xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    bars, values = [], []
    for i, name in enumerate(names):
        container = ax.bar(x + (i - (len(names) - 1) / 2) * width, np.ones(n_labels), width, label=name,
                           color=f"C{i}")
        bars.append(container)
        values.append([ax.annotate("", (b.get_x() + b.get_width() / 2, 0), **value) for b in container])
    notes = [ax.annotate("", (xi, 0), xytext=(0, 14), textcoords="offset points", ha="center", fontsize=9,
                         fontweight="bold") for xi in x]
    if log:
        log_scale(ax, "y")
    ax.set_ylabel("KV cache bytes per token")
    ax.grid(alpha=0.3, axis="y")
    if len(names) > 1:
        ax.legend(loc="upper right", fontsize=9)
    return keep(ax, "bytes_per_token", shape, {"bars": bars, "values": values, "notes": notes})


def plot_bytes_per_token(ax, labels, series: dict, notes=None, title: str | None = None, log: bool = True):
    """Grouped bars of bytes per token: one group per label, one bar per series (e.g. formula, measured).

    ``notes`` (one string per label) are written above the group, e.g. the share of MHA.
    """
    shape = (len(labels), tuple(series), log)
    art = reuse(ax, "bytes_per_token", shape) or _build_bytes_per_token(ax, shape)
    tops = np.zeros(len(labels))
    for bars, texts, values in zip(art["bars"], art["values"], series.values()):
        values = np.asarray(values, dtype=float)
        for b, text, v in zip(bars, texts, values):
            b.set_height(v)
            text.set_text(format_bytes(v))
            text.xy = (text.xy[0], v)
        tops = np.maximum(tops, values)
    notes = list(notes or [])
    for i, (text, top) in enumerate(zip(art["notes"], tops)):
        text.set_text(notes[i] if i < len(notes) else "")
        text.xy = (i, top)
    ax.set_xticks(np.arange(len(labels)), labels)
    if log:
        ax.set_ylim(max(tops.min() / 3, 1), tops.max() * 12)
    else:
        ax.set_ylim(0, tops.max() * 1.25)
    ax.set_title(title or "", fontsize=11)
    return ax
