"""Lesson 02's figure as seed 001 draws it: KV bytes against tokens held, the weights as a level,
and the marks that carry the lesson (8K = 1 GiB, where the cache equals the weights).

Drawing only: every number comes in from :mod:`kvsim.calc` (memory, capacity, weights).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from ..calc.units import UNIT_BYTES

STYLES = {"model": dict(color="tab:orange", ls="-", lw=2.2), "mha": dict(color="tab:red", ls="--", lw=2)}


def _k(x, _=None) -> str:
    """8192 -> '8K', 131072 -> '128K' (binary K, as context lengths are quoted)."""
    return f"{x / 1024:g}K" if x else "0"


def plot_kv_with_marks(ax, tokens, curves: dict, weights_bytes: int, weights_label: str,
                       crossings: dict, marks: dict, ticks, unit: str = "GiB", title: str | None = None):
    """``curves``: {label: (style key, bytes)}; ``crossings``: {label: (tokens, style key)} where a curve
    meets the weights; ``marks``: {label: (tokens, bytes)} dots; ``ticks``: x ticks in tokens."""
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    for label, (style, y) in curves.items():
        ax.plot(x, np.asarray(y, dtype=float) / s, label=label, **STYLES[style])
    ax.axhline(weights_bytes / s, color="0.35", ls=":", lw=1.6)
    at = np.mean([t for t, _ in crossings.values()]) if crossings else x[-1] / 2  # between the crossings
    ax.annotate(weights_label, (at, weights_bytes / s), xytext=(0, 5), textcoords="offset points",
                ha="center", color="0.25", fontsize=9)
    for label, (t, style) in crossings.items():
        color = STYLES[style]["color"]
        ax.plot([t, t], [0, weights_bytes / s], color=color, lw=1, ls=":")
        ax.plot([t], [weights_bytes / s], "o", color=color, ms=6)
        ax.annotate(label, (t, weights_bytes / s), xytext=(5, -16), textcoords="offset points",
                    color=color, fontsize=9, fontweight="bold")
    for label, (t, b) in marks.items():
        ax.plot([t], [b / s], "o", color="black", ms=5, zorder=4)
        ax.annotate(label, (t, b / s), xytext=(6, 4), textcoords="offset points", fontsize=9)
    ax.set_xticks(list(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(_k))
    first = float(np.max(np.asarray(next(iter(curves.values()))[1], dtype=float))) / s
    ax.set_xlim(0, x[-1])
    ax.set_ylim(0, max(first, weights_bytes / s) * 1.6)  # steeper curves may leave through the top
    ax.set_xlabel("tokens held in the cache (context × requests)")
    ax.set_ylabel(f"KV cache ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
