"""Lesson 01 (why a KV cache): drawing only (calc and kvsim.ui.style); every function takes computed numbers
and an Axes.

Lesson 01's picture: token positions × decode steps, recomputed or read from the cache.

Drawing only: the grids come from :func:`kvsim.lessons.l01_why_a_cache.data.step_grid`. The picture is built once per
Axes and redrawn by updating its cells and labels (:func:`kvsim.ui.style.reuse`).

Plots of recompute vs cache: token positions fed and measured decode time against answer length.

:func:`plot_tokens_fed` updates the artists of an earlier call on the same Axes in place (see
:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from ...ui.style import add_legend, Pool, clear_for, decorate, keep, log_scale, reuse
from .data import CODE_NAMES, FUTURE, NEW, PRODUCED, READ, RECOMPUTED


COLORS = {FUTURE: "white", RECOMPUTED: "tab:red", READ: "tab:blue", NEW: "tab:green", PRODUCED: "gold"}
GAP = 3  # empty columns between two grids


def _rgba(grid: np.ndarray, step: int) -> np.ndarray:
    """One RGBA pixel per cell; rows after ``step`` faded (the steps still to come)."""
    palette = np.array([to_rgba(COLORS[c], 0.85) for c in sorted(COLORS)])
    img = palette[grid]
    img[step:, :, 3] = 0.12
    return img


def _build(ax, shape):
    labels, rows = shape
    clear_for(ax, "step_grids")
    art = {"grids": [{"mesh": [],  # the quad mesh of the last call (one per grid shape)
                      "lines": ax.add_collection(LineCollection([], colors="white", linewidths=0.8, zorder=2)),
                      "frame": ax.add_patch(Rectangle((0, 0), 1, 1, fill=False, ec="black", lw=2, zorder=3)),
                      "header": ax.text(0, -0.6, "", ha="center", va="bottom", fontsize=10)} for _ in labels],
           "steps": [ax.text(-0.3, r + 0.5, f"step {r + 1}", ha="right", va="center", fontsize=8) for r in range(rows)],
           "columns": Pool(lambda: ax.text(0, rows + 0.15, "", ha="center", va="top", fontsize=7, color="0.3")),
           "axis_labels": [ax.text(0, rows + 1.1, "token position", ha="center", va="top", fontsize=9, color="0.3")
                           for _ in range(2)]}
    ax.set_aspect("equal")
    ax.set_axis_off()
    handles = [Patch(fc=COLORS[c], ec="0.5", label=CODE_NAMES[c]) for c in (RECOMPUTED, READ, NEW, PRODUCED)]
    add_legend(ax, handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8, frameon=False)
    return keep(ax, "step_grids", shape, art)


def _grid(ax, art, x0: float, grid: np.ndarray, step: int, header: str):
    """One grid at column ``x0``: its cells, white cell lines and step ``step``'s row framed."""
    rows, cols = grid.shape
    mesh = art["mesh"]
    if mesh and mesh[0].get_array().shape[:2] == grid.shape:
        mesh[0].set_array(_rgba(grid, step))
    else:  # a quad mesh of RGBA cells (an image would be resampled to the screen on every render)
        for old in mesh:
            old.remove()
        mesh[:] = [ax.pcolormesh(x0 + np.arange(cols + 1), np.arange(rows + 1), _rgba(grid, step), zorder=1)]
    art["lines"].set_segments([[(x0 + c, 0), (x0 + c, rows)] for c in range(cols + 1)]
                              + [[(x0, r), (x0 + cols, r)] for r in range(rows + 1)])
    art["frame"].set_bounds(x0, step - 1, cols, 1)
    art["header"].set(x=x0 + cols / 2, text=header)


def plot_step_grids(ax, grids: dict, step: int, fed_so_far: dict, title: str | None = None):
    """Grids side by side (e.g. without / with a cache); step ``step``'s row framed, later rows faded.

    ``grids``: {label: (A, W) codes}; ``fed_so_far``: {label: positions fed in steps 1..step}. Built once per
    Axes and labels; a redraw sets the cells and texts (:func:`kvsim.ui.style.reuse`).
    """
    rows, cols = next(iter(grids.values())).shape
    art = reuse(ax, "step_grids", (tuple(grids), rows)) or _build(ax, (tuple(grids), rows))
    x0 = 0
    for held, (label, grid) in zip(art["grids"], grids.items()):
        _grid(ax, held, x0, grid, step, f"{label}\n{fed_so_far[label]:,} positions fed in steps 1-{step}")
        for c in range(cols):
            art["columns"].take(x=x0 + c + 0.5, text=str(c))
        x0 += cols + GAP
    art["columns"].hide_rest()
    for r, text in enumerate(art["steps"]):
        text.set_fontweight("bold" if r == step - 1 else "normal")
    for text, x in zip(art["axis_labels"], (x0 - GAP - cols / 2, cols / 2)):
        text.set_x(x)
    ax.set_xlim(-3.2, x0 - GAP + 0.2)
    ax.set_ylim(rows + 2.0, -3.2)
    ax.set_title(title or "", fontsize=11)
    return ax


_STYLES = {"without a cache": ("tab:red", "-"), "with a cache": ("tab:blue", "-")}


def _line(ax, x, y, label, i):
    color, ls = _STYLES.get(label, (f"C{i}", "--"))
    return ax.plot(x, y, ls, color=color, lw=2, label=label)[0]


def plot_tokens_fed(ax, answer_tokens, curves: dict, points: dict | None = None, title: str | None = None,
                    log: bool = False):
    """Token positions fed against answer length, one line per mode; ``points`` labelled marks (x, y)."""
    points = points or {}
    shape = (tuple(curves), len(points), log)
    art = reuse(ax, "tokens_fed", shape)
    if art is None:
        ax.clear()
        art = keep(ax, "tokens_fed", shape, {
            "curves": [_line(ax, [], [], label, i) for i, label in enumerate(curves)],
            "points": [(ax.plot([], [], "o", color="black", ms=5)[0],
                        ax.annotate("", (0, 0), xytext=(-8, 8), textcoords="offset points", fontsize=9, ha="right"))
                       for _ in points]})
        ax.set_xlabel("answer tokens generated")
        ax.set_ylabel("token positions fed to the model")
        if log:
            log_scale(ax, "y")
        else:  # whole numbers with thousands separators: "1,600,000"
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    for line, y in zip(art["curves"], curves.values()):
        line.set_data(answer_tokens, np.asarray(y, dtype=float))
    for (dot, note), (label, (x, y)) in zip(art["points"], points.items()):
        dot.set_data([x], [y])
        note.set_text(label)
        note.xy = (x, y)
    if not log:
        top = max(float(np.max(y)) for y in curves.values())
        ax.set_ylim(0, 1.12 * top if top > 0 else 1)  # headroom for the point labels
    decorate(ax, xlim=(0, answer_tokens[-1]), ylim=None, title=title)
    return ax


def plot_cumulative_time(ax, answer_tokens, seconds: dict, title: str | None = None):
    """Measured wall time spent so far against answer tokens generated, one line per mode."""
    ax.clear()
    for i, (label, y) in enumerate(seconds.items()):
        _line(ax, answer_tokens, np.asarray(y, dtype=float), label, i)
    decorate(ax, xlabel="answer tokens generated", ylabel="measured time so far (s)",
             xlim=(0, answer_tokens[-1]), title=title)
    return ax
