"""Lesson 06 (quantized KV): drawing only (calc and kvsim.ui.style); every function takes computed numbers and
an Axes.

Plots for quantized KV: attention error against bits or bytes, and stacked bytes bars.

Drawing only: callers pass what :mod:`kvsim.lessons.l06_quantized.measure` measured or computed. :func:`plot_bytes_bars`
updates the artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).

:func:`plot_storage_modes`: attention error against bits per element (metadata included) for the seed's storage
modes (fp16, uniform, rotated), from :func:`kvsim.lessons.l06_quantized.measure.storage_mode_rows`.

Lesson 06's picture: a key head's magnitudes and its quantization error, per token vs per channel.

Drawing only: the maps come from :func:`kvsim.lessons.l06_quantized.measure.key_error_map`. A redraw with maps of
the same names and shape updates the images and labels of an earlier call in place
(:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np

from ...calc.units import UNIT_BYTES
from ...ui.style import add_legend, clear_for, keep, legend_below, reuse


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
    add_legend(ax, fontsize=8, ncol=2)
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
    add_legend(ax, fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


MODE_STYLE = {"uniform": ("o-", "tab:blue", "uniform (QuantizedKVCache)"),
              "rotated": ("s-", "tab:red", "rotated (TurboQuantKVCache)"),
              "fp16": ("*", "0.3", "fp16")}


def plot_storage_modes(ax, rows: list[dict], title: str | None = None):
    """Relative error (log) against bits per stored element, metadata included, one line per mode."""
    ax.clear()
    for mode, (style, color, label) in MODE_STYLE.items():
        mine = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["bits"])
        x = [r["bits_per_element"] for r in mine]
        y = [r["relative_error"] for r in mine]
        ax.plot(x, y, style, color=color, lw=2, ms=9 if mode == "fp16" else 6, label=label)
        for r in mine:
            if mode != "rotated":         # one label per bit width: the rotated point sits beside the uniform one
                ax.annotate(f"{r['bits']}-bit", (r["bits_per_element"], r["relative_error"]), xytext=(5, 4),
                            textcoords="offset points", fontsize=7, color="0.3")
    ax.set_yscale("log")
    ax.set_xlabel("bits per stored element (codes + scales + biases + signs)")
    ax.set_ylabel("relative attention error ‖O_q − O‖ / ‖O‖")
    ax.grid(alpha=0.3, which="both")
    add_legend(ax, fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
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


def _build_panel(ax, name: str, shape, first: bool):
    """One heatmap on its own Axes (rows = tokens, columns = channels), kept for :func:`reuse`."""
    rows, cols = shape
    clear_for(ax, "key_error_map")
    image = ax.imshow(np.zeros(shape), cmap="Greys" if name == "|K|" else "magma_r",
                      extent=(0, cols, rows, 0), interpolation="nearest", aspect="auto")
    ax.set_xticks([0, cols], ["0", str(cols - 1)], fontsize=7)
    ax.set_yticks([0, rows], ["0", str(rows - 1)] if first else [], fontsize=7)
    ax.set_xlabel("channel", fontsize=8, color="0.35")
    ax.set_ylabel("token" if first else "", fontsize=8, color="0.35")
    return keep(ax, "key_error_map", (name, shape), {"image": image})


def _colorbar(cax, image):
    """The error panels' colour bar, drawn into its own Axes ``cax`` (kept narrow when it sits in a grid)."""
    cax.clear()
    spec = cax.get_subplotspec()
    if spec is not None:                        # a (1, n + 1) grid: the last column is the bar's, narrow
        grid = spec.get_gridspec()
        grid.set_width_ratios([1] * (grid.ncols - 1) + [0.05])
        for ax in cax.figure.axes:              # place the grid's Axes again at the new ratios
            if ax.get_subplotspec() is not None and ax.get_subplotspec().get_gridspec() is grid:
                ax.set_subplotspec(ax.get_subplotspec())
    bar = cax.figure.colorbar(image, cax=cax)
    cax.tick_params(labelsize=7)
    bar.set_label(r"$|\hat{K} - K|$", fontsize=8)
    return bar


def plot_key_error_maps(axes, maps: dict, notes: dict | None = None, title: str | None = None):
    """Heatmaps side by side, one Axes each (``axes``: one per map, in order, then optionally one more for the
    colour bar); the error panels share one colour scale, which that colour bar shows."""
    axes = list(np.ravel(axes))
    if len(axes) not in (len(maps), len(maps) + 1):
        raise ValueError(f"axes must hold one Axes per map ({len(maps)}), plus one for the colour bar, "
                         f"got {len(axes)}")
    cax = axes.pop() if len(axes) > len(maps) else None
    shape = next(iter(maps.values())).shape
    errors = [m for name, m in maps.items() if name != "|K|"]
    vmax = max(float(np.max(m)) for m in errors) if errors else 1.0
    built, error_image = False, None
    for i, (ax, (name, m)) in enumerate(zip(axes, maps.items())):
        art = reuse(ax, "key_error_map", (name, shape))
        if art is None:
            art, built = _build_panel(ax, name, shape, first=i == 0), True
        art["image"].set_data(m)
        art["image"].set_clim(0, float(np.percentile(m, 99)) if name == "|K|" else vmax)
        ax.set_title(name + (f"\n{notes[name]}" if notes and name in notes else ""), fontsize=9)
        if name != "|K|":
            error_image = art["image"]
    if built and error_image is not None and cax is not None:
        _colorbar(cax, error_image)
    axes[0].figure.suptitle(title or "", fontsize=11)
    return axes
