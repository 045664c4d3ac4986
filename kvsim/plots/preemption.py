"""Lesson 07's picture: a few requests step by step on a real block allocator, preemptions marked.

Drawing only: the states come from :func:`kvsim.serving.preemption_story.preemption_story`.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

STATE_COLORS = ("white", "0.85", "tab:orange", "tab:blue", "tab:red", "0.97")
STATE_NAMES = ("not arrived", "waiting", "prefill (or recompute)", "decode", "preempted", "done")


def plot_preemption_story(ax, states: np.ndarray, preempted, title: str | None = None):
    """One row per request, one column per step, coloured by state; preemptions carry an ×."""
    ax.clear()
    n, steps = states.shape
    ax.imshow(states, cmap=ListedColormap(STATE_COLORS), vmin=-0.5, vmax=len(STATE_COLORS) - 0.5,
              extent=(0, steps, n, 0), interpolation="nearest", aspect="auto")
    for r, c in zip(*np.nonzero(states == 4)):
        ax.text(c + 0.5, r + 0.5, "×", ha="center", va="center", color="white", fontsize=11, fontweight="bold")
    ax.set_yticks(np.arange(n) + 0.5, [f"request {i + 1}: preempted {p}×" for i, p in enumerate(preempted)],
               fontsize=9)
    ax.set_xticks(np.arange(0, steps, 2) + 0.5, [str(s) for s in range(0, steps, 2)], fontsize=8)
    ax.set_xlabel("step")
    ax.set_xlim(0, steps)
    ax.set_ylim(n, 0)
    for x in range(steps + 1):
        ax.axvline(x, color="white", lw=0.6)
    handles = [Patch(fc=c, ec="0.6", label=t) for c, t in zip(STATE_COLORS[1:5], STATE_NAMES[1:5])]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
