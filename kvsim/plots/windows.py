"""Plots for windowed caches: a buffer's slots step by step, bytes by layer kind, measured vs formula.

Drawing only: callers pass what :mod:`kvsim.ringview`, :mod:`kvsim.windows`, :mod:`kvsim.growth`
or :mod:`kvsim.memory` computed or measured.
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from .size import _SCALE

KIND_COLORS = {"sliding": "tab:green", "chunked": "tab:purple", "full": "tab:orange", "mla": "tab:blue",
               "recurrent": "tab:cyan"}


def plot_slot_history(ax, positions, slots, visible, written, sinks: int = 0, title: str | None = None):
    """One row per decode step, one column per slot; the number is the token a slot holds.

    Coloured: the step's query attends to it. Grey: held but no longer visible (stale).
    Blank: never written. A black frame marks the slot the step wrote; sink slots are hatched.
    """
    ax.clear()
    slots = np.asarray(slots)
    steps, width = slots.shape
    shown = np.where(visible, slots, np.nan).astype(float)
    ax.imshow(shown, cmap="viridis", aspect="auto", vmin=0, vmax=max(1, np.nanmax(slots)),
              alpha=0.55, interpolation="nearest", extent=(-0.5, width - 0.5, steps - 0.5, -0.5))
    for i in range(steps):
        for j in range(width):
            if slots[i, j] < 0:
                continue
            if not visible[i, j]:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color="0.88", zorder=0))
            ax.text(j, i, str(slots[i, j]), ha="center", va="center", fontsize=8,
                    color="black" if visible[i, j] else "0.55")
        if written[i] >= 0:
            ax.add_patch(Rectangle((written[i] - 0.5, i - 0.5), 1, 1, fill=False, lw=1.8, ec="black"))
    for j in range(min(sinks, width)):
        ax.add_patch(Rectangle((j - 0.5, -0.5), 1, steps, fill=False, hatch="//", ec="0.6", lw=0))
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(steps - 0.5, -0.5)
    ax.set_xticks(range(width))
    ax.set_yticks(range(steps), [f"token {p}" for p in positions], fontsize=8)
    ax.set_xlabel("slot in the cache buffer")
    ax.set_ylabel("decode step (newest at the bottom)")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_bytes_by_kind(ax, tokens, by_kind: dict, reference: dict | None = None, unit: str = "GiB",
                       points: dict | None = None, title: str | None = None):
    """Stacked areas of KV bytes per layer kind against tokens, the total as a line, references dashed."""
    ax.clear()
    s = _SCALE[unit]
    x = np.asarray(tokens)
    base = np.zeros(len(x))
    for kind, y in by_kind.items():
        top = base + np.asarray(y, dtype=float) / s
        ax.fill_between(x, base, top, alpha=0.35, color=KIND_COLORS.get(kind), lw=0, label=f"{kind} layers")
        base = top
    ax.plot(x, base, "-", lw=2, color="black", label="real spec (total)")
    for label, y in (reference or {}).items():
        ax.plot(x, np.asarray(y, dtype=float) / s, "--", lw=2, color="tab:red", label=label)
    for label, (px, py) in (points or {}).items():
        ax.plot([px], [py / s], "o", color="black", ms=5)
        ax.annotate(label, (px, py / s), xytext=(-6, 8), textcoords="offset points", ha="right", fontsize=9)
    ax.set_xlim(0, x[-1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens per sequence")
    ax.set_ylabel(f"KV cache ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_measured_vs_formula(ax, tokens, measured: dict, formula: dict, unit: str = "MiB",
                             vlines: dict | None = None, title: str | None = None):
    """Measured ``nbytes`` as markers over formula lines of the same colour (same key order)."""
    ax.clear()
    s = _SCALE[unit]
    x = np.asarray(tokens)
    colors = ["tab:green", "tab:orange", "tab:blue", "tab:purple"]
    for i, (label, y) in enumerate(formula.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, "-", lw=1.5, color=colors[i % 4], label=label)
    for i, (label, y) in enumerate(measured.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, "o", ms=5, mfc="none", color=colors[i % 4], label=label)
    for label, at in (vlines or {}).items():
        ax.axvline(at, color="grey", ls=":", lw=1.2)
        ax.annotate(label, (at, 0), xytext=(4, 6), textcoords="offset points", color="dimgrey", fontsize=9)
    ax.set_xlim(0, x[-1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens appended")
    ax.set_ylabel(f"cache nbytes ({unit})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
