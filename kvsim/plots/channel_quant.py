"""Lesson 06's picture: a key head's magnitudes and its quantization error, per token vs per channel.

Drawing only: the maps come from :func:`kvsim.measure.channel_quant.key_error_map`.
"""

from __future__ import annotations

import numpy as np

GAP = 14  # columns between panels


def plot_key_error_maps(ax, maps: dict, notes: dict | None = None, title: str | None = None):
    """Heatmaps side by side (rows = tokens, columns = channels); the error panels share one colour scale."""
    ax.clear()
    errors = [m for name, m in maps.items() if name != "|K|"]
    vmax = max(float(np.max(m)) for m in errors) if errors else 1.0
    x0 = 0
    for name, m in maps.items():
        rows, cols = m.shape
        cmap, top = ("Greys", float(np.percentile(m, 99))) if name == "|K|" else ("magma_r", vmax)
        ax.imshow(m, cmap=cmap, vmin=0, vmax=top, extent=(x0, x0 + cols, rows, 0), interpolation="nearest",
                  aspect="equal")
        ax.text(x0 + cols / 2, -3, name + (f"\n{notes[name]}" if notes and name in notes else ""),
                ha="center", va="bottom", fontsize=9)
        ax.text(x0 + cols / 2, rows + 4, f"channel 0-{cols - 1}", ha="center", va="top", fontsize=8, color="0.35")
        x0 += cols + GAP
    rows = next(iter(maps.values())).shape[0]
    ax.text(-3, rows / 2, f"token 0-{rows - 1}", rotation=90, ha="right", va="center", fontsize=8, color="0.35")
    ax.set_xlim(-12, x0 - GAP + 1)
    ax.set_ylim(rows + 14, -26)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax
