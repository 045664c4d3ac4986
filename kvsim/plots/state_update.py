"""Lesson 05's pictures: one recurrent state update sketched beside a growing K/V stack, and the
short-context crossover of hybrids against their all-attention twins.

Drawing only: sizes and bytes come from :mod:`kvsim.calc.short_context` and :mod:`kvsim.calc.memory`.
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..calc.units import UNIT_BYTES, format_bytes

UPDATES = {  # family: (state symbol, the update, what is read out)
    "mamba": ("h", r"$h_t = e^{\Delta_t A} \odot h_{t-1} + \Delta_t B_t\, x_t$", r"$y_t = C_t\, h_t$"),
    "mamba2": ("h", r"$h_t = e^{\Delta_t a} \, h_{t-1} + \Delta_t\, x_t B_t^\top$", r"$y_t = h_t C_t$"),
    "gated_deltanet": ("S", r"$S_t = \alpha_t S_{t-1}(I - \beta_t k_t k_t^\top) + \beta_t v_t k_t^\top$",
                       r"$o_t = S_t\, q_t$"),
    "rg_lru": ("h", r"$h_t = a_t \odot h_{t-1} + \sqrt{1 - a_t^2} \odot (i_t \odot x_t)$", r"$y_t = h_t$"),
}


def _rect(ax, x, y, w, h, color, text=None, fontsize=9, hatch=None):
    ax.add_patch(Rectangle((x, y), w, h, fc=color, ec="none", hatch=hatch))
    ax.plot([x, x + w, x + w, x, x], [y, y, y + h, y + h, y], color="black", lw=0.8)
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, a, b, text=None):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, color="0.25", lw=1.2))
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 - 0.8, text, ha="center", va="bottom", fontsize=8)


def plot_state_update(ax, family: str, tokens: int, state_bytes: int, kv_token_bytes: int, crossover: int,
                      title: str | None = None):
    """Top: one update of the state (decay the old state, add the new token's write, read out).
    Bottom: after ``tokens`` tokens, the state (fixed) beside one attention layer's K/V (one row per token)."""
    ax.clear()
    sym, update, read = UPDATES[family]
    _rect(ax, 0, 0, 10, 6, "tab:cyan", f"${sym}_{{t-1}}$\nstate", 10)
    _arrow(ax, (10.3, 3), (15.7, 3), "forget / decay")
    _rect(ax, 16, 0.5, 2, 5, "white")
    ax.text(17, 3, "+", ha="center", va="center", fontsize=14)
    _rect(ax, 15.5, 7.5, 3, 3, "tab:orange", "write\n$x_t$", 8)
    _arrow(ax, (17, 7.4), (17, 5.6))
    _arrow(ax, (18.3, 3), (23.7, 3))
    _rect(ax, 24, 0, 10, 6, "tab:cyan", f"${sym}_t$\nsame size", 10)
    _arrow(ax, (34.3, 3), (38.7, 3), "read")
    ax.text(39, 3, read, ha="left", va="center", fontsize=11)
    ax.text(0, -1.2, update, ha="left", va="bottom", fontsize=11)
    # bottom: widths proportional to bytes, one unit of height
    scale = 44 / max(state_bytes, kv_token_bytes * max(tokens, crossover))
    y = 14
    _rect(ax, 0, y, state_bytes * scale, 2.2, "tab:cyan")
    ax.text(0, y - 0.4, f"one recurrent layer's state: {format_bytes(state_bytes)} at any length", fontsize=9,
            va="bottom")
    kv = kv_token_bytes * tokens * scale
    _rect(ax, 0, y + 4.6, max(kv, 0.05), 2.2, "tab:orange")
    ax.plot([crossover * kv_token_bytes * scale] * 2, [y + 4.2, y + 7.2], color="tab:red", lw=1.5, ls="--")
    ax.text(0, y + 4.2, f"one attention layer's K/V after {tokens:,} tokens: {format_bytes(kv_token_bytes * tokens)} "
                        f"({format_bytes(kv_token_bytes)} per token)", fontsize=9, va="bottom")
    ax.text(crossover * kv_token_bytes * scale, y + 7.6, f"equal at {crossover:,} tokens", color="tab:red",
            ha="center", va="top", fontsize=9)
    ax.set_xlim(-1, 60)
    ax.set_ylim(y + 8.8, -3.5)  # y grows downward: the update on top, the sizes below
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_short_context(ax, tokens, curves: dict, crossings: dict, unit: str = "MiB", title: str | None = None):
    """Per-sequence bytes against tokens (log-log): each hybrid solid, its all-attention twin dashed, same colour;
    ``crossings`` {model: T} marked where the twin catches up."""
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    for i, (name, (hyb, twin)) in enumerate(curves.items()):
        color = f"C{i}"
        ax.plot(x, np.asarray(hyb, dtype=float) / s, "-", color=color, lw=2, label=f"{name} (hybrid)")
        ax.plot(x, np.asarray(twin, dtype=float) / s, "--", color=color, lw=1.5, label=f"{name}, all attention")
        t, b = crossings[name]
        ax.plot([t], [b / s], "o", color=color, ms=6)
        ax.annotate(f"{t:,}", (t, b / s), xytext=(6, -12), textcoords="offset points", color=color, fontsize=9,
                    fontweight="bold")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x[0], x[-1])
    ax.set_xlabel("tokens per sequence")
    ax.set_ylabel(f"cache per sequence ({unit}, log)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8, ncol=1)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
