"""Lesson 06's picture: a key head's magnitudes and its quantization error, per token vs per channel.

Drawing only: the maps come from :func:`kvsim.measure.channel_quant.key_error_map`. A redraw with maps of
the same names and shape updates the images and labels of an earlier call in place
(:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ..ui.style import clear_for, keep, reuse

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
