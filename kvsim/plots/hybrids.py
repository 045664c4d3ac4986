"""Plots for hybrid and recurrent models: fixed state beside growing KV, and measured bytes per layer.

Drawing only: callers pass what :mod:`kvsim.calc.hybrid`, :mod:`kvsim.calc.memory` computed or what a real
decode (:mod:`kvsim.decode`) measured. :func:`plot_state_vs_kv` updates the artists of an earlier call on the
same Axes in place (:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ..calc.units import UNIT_BYTES
from ..ui.style import clear_for, keep, legend, relimit, reuse

_STYLES = ["-", "--", "-.", ":"]


def _build_state_vs_kv(ax, shape):
    growing, fixed, n_points, log = shape
    clear_for(ax, "state_vs_kv")  # another model's mix of layers: replace the picture, keep the Axes
    art = keep(ax, "state_vs_kv", shape, {
        "growing": [ax.plot([], [], _STYLES[i % 4], lw=2)[0] for i in range(growing)],
        "fixed": [ax.plot([], [], "--", lw=2)[0] for _ in range(fixed)],
        "points": [(ax.plot([], [], "o", color="black", ms=5)[0],
                    ax.annotate("", (0, 0), xytext=(-6, 6), textcoords="offset points", ha="right", fontsize=9))
                   for _ in range(n_points)]})
    ax.set_xscale("log", base=2) if log else ax.set_xscale("linear")
    ax.set_yscale("log" if log else "linear")
    ax.set_xlabel("tokens per sequence")
    ax.grid(False, which="both")
    ax.grid(alpha=0.3, which="both" if log else "major")
    return art


def plot_state_vs_kv(ax, tokens, growing: dict, fixed: dict | None = None, unit: str = "GiB",
                     log: bool = False, points: dict | None = None, title: str | None = None):
    """Growing caches as lines against tokens; fixed (recurrent) states as flat dashed lines."""
    fixed, points = fixed or {}, points or {}
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    shape = (len(growing), len(fixed), len(points), log)
    art = reuse(ax, "state_vs_kv", shape) or _build_state_vs_kv(ax, shape)
    for line, (label, y) in zip(art["growing"], growing.items()):
        line.set_data(x, np.asarray(y, dtype=float) / s)
        line.set_label(label)
    for line, (label, level) in zip(art["fixed"], fixed.items()):
        line.set_data(x, np.full(len(x), level / s))
        line.set_label(label)
    for (dot, note), (label, (px, py)) in zip(art["points"], points.items()):
        dot.set_data([px], [py / s])
        note.set_text(label)
        note.xy = (px, py / s)
    relimit(ax, xlim=(x[0], x[-1]), ylim=None if log else (0, None))
    if not log:  # headroom for the point labels above the highest line
        top = max(line.get_ydata().max() for line in art["growing"] + art["fixed"])
        ax.set_ylim(0, 1.12 * top if top > 0 else 1)
    ax.set_ylabel(f"cache per sequence ({unit})")
    legend(ax, loc="upper left", fontsize=8)
    ax.set_title(title or "", fontsize=11)
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
