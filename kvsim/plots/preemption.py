"""Lesson 07's picture: a few requests step by step on a real block allocator, preemptions marked.

Drawing only: the states come from :func:`kvsim.serving.preemption_story.preemption_story`. A redraw for
as many requests updates the artists of an earlier call in place (:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ..ui.style import Pool, clear_for, keep, reuse

STATE_COLORS = ("white", "0.85", "tab:orange", "tab:blue", "tab:red", "0.97")
STATE_NAMES = ("not arrived", "waiting", "prefill (or recompute)", "decode", "preempted", "done")


def _build(ax, n):
    clear_for(ax, "preemption_story")
    art = keep(ax, "preemption_story", n, {
        "states": [],  # the quad mesh of the last call (one cell per request and step)
        "marks": Pool(lambda: ax.text(0, 0, "×", ha="center", va="center", color="white", fontsize=11,
                                      fontweight="bold")),
        "steps": ax.add_collection(LineCollection([], colors="white", linewidths=0.6), autolim=False)})
    ax.set_xlabel("step")
    handles = [Patch(fc=c, ec="0.6", label=t) for c, t in zip(STATE_COLORS[1:5], STATE_NAMES[1:5])]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, fontsize=8, frameon=False)
    return art


def plot_preemption_story(ax, states: np.ndarray, preempted, title: str | None = None):
    """One row per request, one column per step, coloured by state; preemptions carry an ×."""
    n, steps = states.shape
    art = reuse(ax, "preemption_story", n) or _build(ax, n)
    mesh = art["states"]
    if mesh and mesh[0].get_array().shape == states.shape:
        mesh[0].set_array(states)
    else:  # a quad mesh (an image would be resampled to the screen on every render, 5× slower) per shape
        for old in mesh:
            old.remove()
        mesh[:] = [ax.pcolormesh(np.arange(steps + 1), np.arange(n + 1), states, cmap=ListedColormap(STATE_COLORS),
                                 vmin=-0.5, vmax=len(STATE_COLORS) - 0.5, zorder=0)]
    for r, c in zip(*np.nonzero(states == 4)):
        art["marks"].take(x=c + 0.5, y=r + 0.5)
    art["marks"].hide_rest()
    art["steps"].set_segments([[(x, 0), (x, n)] for x in range(steps + 1)])  # white lines between steps
    ax.set_yticks(np.arange(n) + 0.5, [f"request {i + 1}: preempted {p}×" for i, p in enumerate(preempted)],
                  fontsize=9)
    ax.set_xticks(np.arange(0, steps, 2) + 0.5, [str(s) for s in range(0, steps, 2)], fontsize=8)
    ax.set_xlim(0, steps)
    ax.set_ylim(n, 0)
    ax.set_title(title or "", fontsize=11)
    return ax
