"""Lesson 06 (quantized KV): drawing only (calc and kvsim.ui.style); every function takes computed numbers and
an Axes.

Plots for quantized KV: attention error against bits or bytes, and stacked bytes bars.

Drawing only: callers pass what :mod:`kvsim.lessons.l06_quantized.measure` measured or computed. :func:`plot_bytes_bars`
updates the artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).

Lesson 06's picture: a key head's magnitudes and its quantization error, per token vs per channel.

Drawing only: the maps come from :func:`kvsim.lessons.l06_quantized.measure.key_error_map`. A redraw with maps of
the same names and shape updates the images and labels of an earlier call in place
(:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ...calc.units import UNIT_BYTES
from ...ui.style import clear_for, keep, legend_below, reuse


_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
PART_COLORS = {"packed data": "tab:blue", "scales + biases": "tab:orange",
               "full-precision recent": "tab:green", "bf16": "0.6"}


def plot_error_vs_bits(ax, curves: dict, dashed: dict | None = None, title: str | None = None,
                       xlabel: str = "bits per element"):
    """Relative error (log scale) against bits: one solid line per label, optional dashed twins.

    ``curves``/``dashed``: {label: (x, error)}; a dashed entry reuses the colour of the solid line
    with the same position in the dict.
    """
    ax.clear()
    xs = set()
    for i, (label, (x, y)) in enumerate(curves.items()):
        ax.plot(x, y, "o-", color=_COLORS[i % len(_COLORS)], lw=2, label=label)
        xs.update(np.asarray(x).tolist())
    for i, (label, (x, y)) in enumerate((dashed or {}).items()):
        ax.plot(x, y, "s--", color=_COLORS[i % len(_COLORS)], lw=1.5, alpha=0.8, label=label)
    ax.set_yscale("log")
    ax.set_xticks(sorted(xs))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("relative attention error ‖O_q − O‖ / ‖O‖")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncol=2)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_error_vs_bytes(ax, points: dict, title: str | None = None, unit: str = "KiB"):
    """Error (log) against bytes per token: {series label: (bytes, error, point labels)}."""
    ax.clear()
    s = UNIT_BYTES[unit]
    for i, (label, (b, e, names)) in enumerate(points.items()):
        b = np.asarray(b, dtype=float) / s
        ax.plot(b, e, "o-", color=_COLORS[i % len(_COLORS)], lw=1.5, label=label)
        for x, y, name in zip(b, e, names):
            ax.annotate(str(name), (x, y), xytext=(3, 3), textcoords="offset points", fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel(f"KV bytes per token ({unit}, incl. scales and biases)")
    ax.set_ylabel("relative attention error")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def _build_bytes_bars(ax, shape):
    ax.clear()
    seen, rows = set(), []
    for row, parts in enumerate(shape):
        rows.append([ax.barh([row], [0], color=PART_COLORS.get(part), label=None if part in seen else part)[0]
                     for part in parts])
        seen.update(parts)
    art = keep(ax, "bytes_bars", shape, {"rows": rows, "notes": [
        ax.annotate("", (0, row), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
        for row in range(len(shape))]})
    ax.set_yticks(range(len(shape)))
    ax.set_ylim(len(shape) - 0.5, -0.5)  # first bar on top
    legend_below(ax, ncol=4, fontsize=8)  # the layout fit makes room for it
    return art


def plot_bytes_bars(ax, bars: dict, unit: str = "MiB", title: str | None = None, notes: dict | None = None):
    """Horizontal stacked bars, top to bottom: {bar label: {part: bytes}}; ``notes`` text after each bar."""
    s = UNIT_BYTES[unit]
    notes = notes or {}
    shape = tuple(tuple(parts) for parts in bars.values())
    art = reuse(ax, "bytes_bars", shape) or _build_bytes_bars(ax, shape)
    for row, (patches, note, (label, parts)) in enumerate(zip(art["rows"], art["notes"], bars.items())):
        left = 0.0
        for patch, value in zip(patches, parts.values()):
            patch.set_x(left)
            patch.set_width(value / s)
            left += value / s
        note.set_text(notes.get(label, ""))
        note.xy = (left, row)
    ax.set_yticklabels(list(bars))
    widest = max(sum(parts.values()) for parts in bars.values()) / s
    ax.set_xlim(0, 1.35 * widest if widest else 1)
    ax.set_xlabel(f"KV cache of one sequence ({unit})")
    ax.set_title(title or "", fontsize=10)
    return ax


GAP = 14  # columns between panels


def _build(ax, shape):
    names, (rows, cols) = shape
    clear_for(ax, "key_error_maps")
    panels = []
    for i, name in enumerate(names):
        x0 = i * (cols + GAP)
        panels.append((
            ax.imshow(np.zeros((rows, cols)), cmap="Greys" if name == "|K|" else "magma_r",
                      extent=(x0, x0 + cols, rows, 0), interpolation="nearest", aspect="equal"),
            ax.text(x0 + cols / 2, -3, "", ha="center", va="bottom", fontsize=9),
            ax.text(x0 + cols / 2, rows + 4, f"channel 0-{cols - 1}", ha="center", va="top", fontsize=8,
                    color="0.35")))
    ax.text(-3, rows / 2, f"token 0-{rows - 1}", rotation=90, ha="right", va="center", fontsize=8, color="0.35")
    ax.set_xlim(-12, len(names) * (cols + GAP) - GAP + 1)
    ax.set_ylim(rows + 14, -26)
    ax.set_axis_off()
    return keep(ax, "key_error_maps", shape, {"panels": panels})


def plot_key_error_maps(ax, maps: dict, notes: dict | None = None, title: str | None = None):
    """Heatmaps side by side (rows = tokens, columns = channels); the error panels share one colour scale."""
    shape = (tuple(maps), next(iter(maps.values())).shape)
    art = reuse(ax, "key_error_maps", shape) or _build(ax, shape)
    errors = [m for name, m in maps.items() if name != "|K|"]
    vmax = max(float(np.max(m)) for m in errors) if errors else 1.0
    for (image, label, _), (name, m) in zip(art["panels"], maps.items()):
        image.set_data(m)
        image.set_clim(0, float(np.percentile(m, 99)) if name == "|K|" else vmax)
        label.set_text(name + (f"\n{notes[name]}" if notes and name in notes else ""))
    ax.set_title(title or "", fontsize=11)
    return ax
