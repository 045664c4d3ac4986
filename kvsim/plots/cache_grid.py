"""Lesson 01's picture: token positions × decode steps, recomputed or read from the cache.

Drawing only: the grids come from :func:`kvsim.calc.step_grid.step_grid`.
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle

from ..calc.step_grid import CODE_NAMES, FUTURE, NEW, PRODUCED, READ, RECOMPUTED

COLORS = {FUTURE: "white", RECOMPUTED: "tab:red", READ: "tab:blue", NEW: "tab:green", PRODUCED: "gold"}
GAP = 3  # empty columns between two grids


def _rgba(grid: np.ndarray, step: int) -> np.ndarray:
    """One RGBA pixel per cell; rows after ``step`` faded (the steps still to come)."""
    palette = np.array([to_rgba(COLORS[c], 0.85) for c in sorted(COLORS)])
    img = palette[grid]
    img[step:, :, 3] = 0.12
    return img


def _cell_lines(ax, x0: float, rows: int, cols: int):
    segs = [[(x0 + c, 0), (x0 + c, rows)] for c in range(cols + 1)]
    segs += [[(x0, r), (x0 + cols, r)] for r in range(rows + 1)]
    ax.add_collection(LineCollection(segs, colors="white", linewidths=0.8, zorder=2))


def plot_step_grids(ax, grids: dict, step: int, fed_so_far: dict, title: str | None = None):
    """Grids side by side (e.g. without / with a cache); step ``step``'s row framed, later rows faded.

    ``grids``: {label: (A, W) codes}; ``fed_so_far``: {label: positions fed in steps 1..step}.
    """
    ax.clear()
    x0 = 0
    rows = cols = 0
    for label, grid in grids.items():
        rows, cols = grid.shape
        ax.imshow(_rgba(grid, step), extent=(x0, x0 + cols, rows, 0), interpolation="nearest", zorder=1)
        _cell_lines(ax, x0, rows, cols)
        ax.add_patch(Rectangle((x0, step - 1), cols, 1, fill=False, ec="black", lw=2, zorder=3))
        ax.text(x0 + cols / 2, -0.6, f"{label}\n{fed_so_far[label]:,} positions fed in steps 1-{step}",
                ha="center", va="bottom", fontsize=10)
        for c in range(cols):
            ax.text(x0 + c + 0.5, rows + 0.15, str(c), ha="center", va="top", fontsize=7, color="0.3")
        x0 += cols + GAP
    for r in range(rows):
        ax.text(-0.3, r + 0.5, f"step {r + 1}", ha="right", va="center", fontsize=8,
                fontweight="bold" if r == step - 1 else "normal")
    ax.text(x0 - GAP - cols / 2, rows + 1.1, "token position", ha="center", va="top", fontsize=9, color="0.3")
    ax.text(cols / 2, rows + 1.1, "token position", ha="center", va="top", fontsize=9, color="0.3")
    ax.set_xlim(-3.2, x0 - GAP + 0.2)
    ax.set_ylim(rows + 2.0, -3.2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    handles = [Patch(fc=COLORS[c], ec="0.5", label=CODE_NAMES[c]) for c in (RECOMPUTED, READ, NEW, PRODUCED)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
