"""Plots for hybrid and recurrent models: fixed state beside growing KV, and measured bytes per layer.

Drawing only: callers pass what :mod:`kvsim.calc.hybrid`, :mod:`kvsim.calc.memory` computed or what a real
decode (:mod:`kvsim.decode`) measured.
"""

from __future__ import annotations

import numpy as np

from .size import UNIT_BYTES

_STYLES = ["-", "--", "-.", ":"]


def plot_state_vs_kv(ax, tokens, growing: dict, fixed: dict | None = None, unit: str = "GiB",
                     log: bool = False, points: dict | None = None, title: str | None = None):
    """Growing caches as lines against tokens; fixed (recurrent) states as flat dashed lines."""
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    for i, (label, y) in enumerate(growing.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, _STYLES[i % 4], lw=2, label=label)
    for label, level in (fixed or {}).items():
        ax.plot(x, np.full(len(x), level / s), "--", lw=2, label=label)
    for label, (px, py) in (points or {}).items():
        ax.plot([px], [py / s], "o", color="black", ms=5)
        ax.annotate(label, (px, py / s), xytext=(-6, 6), textcoords="offset points", ha="right", fontsize=9)
    ax.set_xlim(x[0], x[-1])
    if log:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens per sequence")
    ax.set_ylabel(f"cache per sequence ({unit})")
    ax.grid(alpha=0.3, which="both" if log else "major")
    ax.legend(loc="upper left", fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_layer_bytes(ax, tokens, measured, formula, labels, unit: str = "KiB", title: str | None = None):
    """One line per layer of measured bytes against tokens in context, formula values as dots on top.

    ``measured`` and ``formula`` are (layers, steps) arrays; ``labels`` names each layer.
    """
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    for i, label in enumerate(labels):
        (line,) = ax.plot(x, np.asarray(measured[i], dtype=float) / s, "-", lw=2.5, alpha=0.6,
                          drawstyle="steps-post", label=f"{label}: measured nbytes")
        ax.plot(x, np.asarray(formula[i], dtype=float) / s, ".", ms=4, color=line.get_color(),
                label=f"{label}: kvsim.calc.memory")
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens in context")
    ax.set_ylabel(f"bytes held by the layer's cache ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
