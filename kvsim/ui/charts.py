"""Drawing shared by more than one lesson: KV bytes against tokens (lessons 00 and 02).

Each function builds its artists once per Axes and shape and afterwards only updates them
(:func:`kvsim.ui.style.reuse`), so a slider redraw does not clear the Axes.
"""

from __future__ import annotations

import numpy as np

from ..calc.units import UNIT_BYTES
from .style import decorate, keep, label_inward, label_level, legend_below, reuse

_STYLES = ["-", "--", ":", "-."]


def _build_kv_vs_tokens(ax, shape):
    n_curves, n_hlines, n_points = shape
    ax.clear()
    note = dict(textcoords="offset points", fontsize=9)
    return keep(ax, "kv_vs_tokens", shape, {
        "curves": [ax.plot([], [], _STYLES[i % len(_STYLES)], lw=2)[0] for i in range(n_curves)],
        "hlines": [(ax.axhline(0, color="grey", ls=":", lw=1.5),
                    ax.annotate("", (0, 0), xytext=(-4, -4), color="dimgrey", **note)) for _ in range(n_hlines)],
        "points": [(ax.plot([], [], "o", color="black", ms=5)[0], ax.annotate("", (0, 0), xytext=(6, 6), **note))
                   for _ in range(n_points)],
    })


def plot_kv_vs_tokens(ax, tokens, curves: dict, hlines: dict | None = None, unit: str = "GiB",
                      points: dict | None = None, title: str | None = None):
    """Lines of bytes against tokens; ``hlines`` are constant levels (e.g. weights), ``points`` labelled marks."""
    hlines, points = hlines or {}, points or {}
    s = UNIT_BYTES[unit]
    shape = (len(curves), len(hlines), len(points))
    art = reuse(ax, "kv_vs_tokens", shape) or _build_kv_vs_tokens(ax, shape)
    for line, (label, y) in zip(art["curves"], curves.items()):
        line.set_data(tokens, np.asarray(y, dtype=float) / s)
        line.set_label(label)
    for (line, note), (label, level) in zip(art["hlines"], hlines.items()):
        line.set_ydata([level / s, level / s])
        note.set_text(label)
    for (dot, note), (label, (x, y)) in zip(art["points"], points.items()):
        dot.set_data([x], [y / s])
        note.set_text(label)
        note.xy = (x, y / s)
        label_inward(note, x, tokens[0], tokens[-1])  # never past either end of the x axis
    decorate(ax, xlabel="tokens held in the cache (T × B)", ylabel=f"KV cache ({unit})",
             xlim=(0, tokens[-1]), title=title)
    for (_, note), level in zip(art["hlines"], hlines.values()):
        label_level(note, level / s, [line.get_data() for line in art["curves"]])
    return ax
