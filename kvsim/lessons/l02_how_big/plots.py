"""Lesson 02's pictures: how one accelerator's memory is split (:func:`plot_memory_split`), and the
figure as seed 001 draws it: KV bytes against tokens held, the weights as a level, and the marks that
carry the lesson (8K = 1 GiB, where the cache equals the weights).

Drawing only: every number comes in from :mod:`kvsim.calc` (memory, capacity, weights). A redraw updates
the artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter

from ...calc.units import UNIT_BYTES, format_bytes
from ...ui.style import add_legend, clear_for, keep, legend, legend_below, reuse

STYLES = {"model": dict(color="tab:orange", ls="-", lw=2.2), "mha": dict(color="tab:red", ls="--", lw=2)}


def _k(x, _=None) -> str:
    """8192 -> '8K', 131072 -> '128K' (binary K, as context lengths are quoted)."""
    return f"{x / 1024:g}K" if x else "0"


def _build(ax, shape):
    styles, crossing_styles, n_marks = shape
    clear_for(ax, "kv_with_marks")  # another number of curves or marks: replace them, keep the Axes
    note = dict(textcoords="offset points", fontsize=9)
    art = keep(ax, "kv_with_marks", shape, {
        "curves": [ax.plot([], [], **STYLES[style])[0] for style in styles],
        "weights": (ax.axhline(0, color="0.35", ls=":", lw=1.6),
                    ax.annotate("", (0, 0), xytext=(0, 5), ha="center", color="0.25", **note)),
        "crossings": [(ax.plot([], [], color=STYLES[style]["color"], lw=1, ls=":")[0],
                       ax.plot([], [], "o", color=STYLES[style]["color"], ms=6)[0],
                       ax.annotate("", (0, 0), xytext=(5, -16), color=STYLES[style]["color"], fontweight="bold",
                                   **note)) for style in crossing_styles],
        "marks": [(ax.plot([], [], "o", color="black", ms=5, zorder=4)[0],
                   ax.annotate("", (0, 0), xytext=(6, 4), **note)) for _ in range(n_marks)]})
    ax.xaxis.set_major_formatter(FuncFormatter(_k))
    ax.set_xlabel("tokens held in the cache (context × requests)")
    ax.grid(alpha=0.3)
    return art


def plot_kv_with_marks(ax, tokens, curves: dict, weights_bytes: int, weights_label: str,
                       crossings: dict, marks: dict, ticks, unit: str = "GiB", title: str | None = None):
    """``curves``: {label: (style key, bytes)}; ``crossings``: {label: (tokens, style key)} where a curve
    meets the weights; ``marks``: {label: (tokens, bytes)} dots; ``ticks``: x ticks in tokens.

    A redraw with the same styles and numbers of marks updates the artists of the previous call."""
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    shape = (tuple(style for style, _ in curves.values()), tuple(style for _, style in crossings.values()),
             len(marks))
    art = reuse(ax, "kv_with_marks", shape) or _build(ax, shape)
    for line, (label, (_, y)) in zip(art["curves"], curves.items()):
        line.set_data(x, np.asarray(y, dtype=float) / s)
        line.set_label(label)
    w = weights_bytes / s
    level, note = art["weights"]
    level.set_ydata([w, w])
    note.set_text(weights_label)
    note.xy = (np.mean([t for t, _ in crossings.values()]) if crossings else x[-1] / 2, w)  # between the crossings
    for (drop, dot, note), (label, (t, _)) in zip(art["crossings"], crossings.items()):
        drop.set_data([t, t], [0, w])
        dot.set_data([t], [w])
        note.set_text(label)
        note.xy = (t, w)
    for (dot, note), (label, (t, b)) in zip(art["marks"], marks.items()):
        dot.set_data([t], [b / s])
        note.set_text(label)
        note.xy = (t, b / s)
    ax.set_xticks(list(ticks))
    first = float(np.max(np.asarray(next(iter(curves.values()))[1], dtype=float))) / s
    ax.set_xlim(0, x[-1])
    ax.set_ylim(0, max(first, w) * 1.6)  # steeper curves may leave through the top
    ax.set_ylabel(f"KV cache ({unit})")
    legend(ax, loc="upper left", fontsize=9)
    ax.set_title(title or "", fontsize=11)
    return ax


def plot_memory_split(ax, parts: dict, total_bytes: float, unit: str = "GiB", title: str | None = None):
    """One horizontal stacked bar: how ``total_bytes`` of device memory is shared by ``parts``."""
    s = UNIT_BYTES[unit]
    art = reuse(ax, "memory_split", len(parts))
    if art is None:
        ax.clear()
        art = keep(ax, "memory_split", len(parts), {"bars": [ax.barh([0], [0])[0] for _ in parts]})
        ax.set_yticks([])
    left = 0.0
    for bar, (label, value) in zip(art["bars"], parts.items()):
        bar.set_x(left)
        bar.set_width(value / s)
        bar.set_label(f"{label}: {value / s:.1f} {unit} ({100 * value / total_bytes:.0f} %)")
        left += value / s
    ax.set_xlim(0, total_bytes / s)
    ax.set_ylim(-0.5, 0.5)
    ax.set_xlabel(f"device memory ({unit})")
    legend_below(ax, ncol=2, fontsize=9)  # the layout fit makes room for it
    ax.set_title(title or "", fontsize=11)
    return ax


KIND_COLORS = {"full": "tab:orange", "sliding": "tab:green", "chunked": "tab:purple", "mla": "tab:blue",
               "recurrent": "tab:cyan", "none": "0.7"}


def plot_engines_all(axes, tables: dict, title: str | None = None):
    """One panel per model (``tables``: {model: engine_table}): a bar per engine, stacked by layer kind, its
    total written at the end; an engine that refuses the model gets its reason instead of a bar."""
    for ax, (name, t) in zip(axes, tables.items()):
        ax.clear()
        cols = t["engines"]
        top = max(c.get("total_bytes", 0) for c in cols)
        unit = "GiB" if top >= 2**30 else "MiB"
        s = UNIT_BYTES[unit]
        y = np.arange(len(cols))[::-1]  # the first engine on top
        for yi, c in zip(y, cols):
            if "refused" in c:
                ax.text(0, yi, f"  refused: {c['refused']}", va="center", fontsize=8, color="0.3")
                continue
            left = 0.0
            for k in t["kinds"]:
                b = c["bytes_by_kind"][k] / s
                ax.barh([yi], [b], left=left, height=0.7, color=KIND_COLORS.get(k, "0.7"), ec="white", lw=0.5,
                        label=f"{k} layers" if yi == y[0] else None)
                left += b
            ax.text(left, yi, f" {format_bytes(c['total_bytes'])}", va="center", fontsize=8)
        ax.set_yticks(y, [c["engine"] for c in cols], fontsize=8)
        ax.set_xlim(0, top / s * 1.22)  # room for the total's label
        ax.set_ylim(-0.6, len(cols) - 0.4)
        ax.set_xlabel(unit, fontsize=8, labelpad=1)
        ax.tick_params(axis="x", labelsize=8)
        layers = ", ".join(f"{t['layers_by_kind'][k]} {k}" for k in t["kinds"])
        ax.set_title(f"{name} ({layers})", fontsize=9, loc="left")
        ax.grid(axis="x", alpha=0.3)
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig = axes[0].figure
    add_legend(fig, handles.values(), handles.keys(), loc="outside lower center", ncol=len(handles), fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    return axes
