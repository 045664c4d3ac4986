"""Lesson 05's pictures: one recurrent state update sketched beside a growing K/V stack, and the
short-context crossover of hybrids against their all-attention twins.

Drawing only: sizes and bytes come from :mod:`kvsim.calc.short_context` and :mod:`kvsim.calc.memory`.
Both update the artists of an earlier call on the same Axes in place (:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..calc.units import UNIT_BYTES, format_bytes
from ..ui.style import clear_for, keep, legend, log_scale, relimit, reuse

UPDATES = {  # family: (state symbol, the update, what is read out)
    "mamba": ("h", r"$h_t = e^{\Delta_t A} \odot h_{t-1} + \Delta_t B_t\, x_t$", r"$y_t = C_t\, h_t$"),
    "mamba2": ("h", r"$h_t = e^{\Delta_t a} \, h_{t-1} + \Delta_t\, x_t B_t^\top$", r"$y_t = h_t C_t$"),
    "gated_deltanet": ("S", r"$S_t = \alpha_t S_{t-1}(I - \beta_t k_t k_t^\top) + \beta_t v_t k_t^\top$",
                       r"$o_t = S_t\, q_t$"),
    "rg_lru": ("h", r"$h_t = a_t \odot h_{t-1} + \sqrt{1 - a_t^2} \odot (i_t \odot x_t)$", r"$y_t = h_t$"),
}


def _rect(ax, x, y, w, h, color, text=None, fontsize=9, hatch=None):
    """A filled box with a black outline and an optional centred label: (patch, outline, label or None)."""
    patch = ax.add_patch(Rectangle((x, y), w, h, fc=color, ec="none", hatch=hatch))
    outline = ax.plot([x, x + w, x + w, x, x], [y, y, y + h, y + h, y], color="black", lw=0.8)[0]
    label = ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize) if text else None
    return patch, outline, label


def _resize(rect, w):
    """Give a box from :func:`_rect` the width ``w`` (its left edge stays)."""
    patch, outline, _ = rect
    x, y, h = patch.get_x(), patch.get_y(), patch.get_height()
    patch.set_width(w)
    outline.set_data([x, x + w, x + w, x, x], [y, y, y + h, y + h, y])


def _arrow(ax, a, b, text=None):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, color="0.25", lw=1.2))
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 - 0.8, text, ha="center", va="bottom", fontsize=8)


def _build_state_update(ax):
    """The sketch's artists; what the data changes is kept by name, the rest is never touched again."""
    clear_for(ax, "state_update")
    art = {"old": _rect(ax, 0, 0, 10, 6, "tab:cyan", " ", 10)}
    _arrow(ax, (10.3, 3), (15.7, 3), "forget / decay")
    _rect(ax, 16, 0.5, 2, 5, "white")
    ax.text(17, 3, "+", ha="center", va="center", fontsize=14)
    _rect(ax, 15.5, 7.5, 3, 3, "tab:orange", "write\n$x_t$", 8)
    _arrow(ax, (17, 7.4), (17, 5.6))
    _arrow(ax, (18.3, 3), (23.7, 3))
    art["new"] = _rect(ax, 24, 0, 10, 6, "tab:cyan", " ", 10)
    _arrow(ax, (34.3, 3), (38.7, 3), "read")
    art["read"] = ax.text(39, 3, "", ha="left", va="center", fontsize=11)
    art["update"] = ax.text(0, -1.2, "", ha="left", va="bottom", fontsize=11)
    y = 14  # below: widths proportional to bytes, one unit of height
    art["state"] = _rect(ax, 0, y, 1, 2.2, "tab:cyan")
    art["state_label"] = ax.text(0, y - 0.4, "", fontsize=9, va="bottom")
    art["kv"] = _rect(ax, 0, y + 4.6, 1, 2.2, "tab:orange")
    art["cross"] = ax.plot([0, 0], [y + 4.2, y + 7.2], color="tab:red", lw=1.5, ls="--")[0]
    art["kv_label"] = ax.text(0, y + 4.2, "", fontsize=9, va="bottom")
    art["cross_label"] = ax.text(0, y + 7.6, "", color="tab:red", ha="center", va="top", fontsize=9)
    ax.set_xlim(-1, 60)
    ax.set_ylim(y + 8.8, -3.5)  # y grows downward: the update on top, the sizes below
    ax.set_aspect("equal")
    ax.set_axis_off()
    return keep(ax, "state_update", (), art)


def plot_state_update(ax, family: str, tokens: int, state_bytes: int, kv_token_bytes: int, crossover: int,
                      title: str | None = None):
    """Top: one update of the state (decay the old state, add the new token's write, read out).
    Bottom: after ``tokens`` tokens, the state (fixed) beside one attention layer's K/V (one row per token).

    The sketch is built once per Axes; a redraw changes only its formulas, bar widths and labels.
    """
    art = reuse(ax, "state_update", ()) or _build_state_update(ax)
    sym, update, read = UPDATES[family]
    art["old"][2].set_text(f"${sym}_{{t-1}}$\nstate")
    art["new"][2].set_text(f"${sym}_t$\nsame size")
    art["read"].set_text(read)
    art["update"].set_text(update)
    scale = 44 / max(state_bytes, kv_token_bytes * max(tokens, crossover))
    _resize(art["state"], state_bytes * scale)
    art["state_label"].set_text(f"one recurrent layer's state: {format_bytes(state_bytes)} at any length")
    _resize(art["kv"], max(kv_token_bytes * tokens * scale, 0.05))
    x = crossover * kv_token_bytes * scale
    art["cross"].set_xdata([x, x])
    art["kv_label"].set_text(f"one attention layer's K/V after {tokens:,} tokens: "
                             f"{format_bytes(kv_token_bytes * tokens)} ({format_bytes(kv_token_bytes)} per token)")
    art["cross_label"].set_x(x)
    art["cross_label"].set_text(f"equal at {crossover:,} tokens")
    ax.set_title(title or "", fontsize=11)
    return ax


def _build_short_context(ax, names):
    clear_for(ax, "short_context")  # other models: replace the curves, keep the Axes and their ticks
    art = keep(ax, "short_context", names, {"models": [(
        ax.plot([], [], "-", color=f"C{i}", lw=2)[0], ax.plot([], [], "--", color=f"C{i}", lw=1.5)[0],
        ax.plot([], [], "o", color=f"C{i}", ms=6)[0],
        ax.annotate("", (1, 1), xytext=(6, -12), textcoords="offset points", color=f"C{i}", fontsize=9,
                    fontweight="bold")) for i in range(len(names))]})
    log_scale(ax, "x", "y")  # minor ticks and grid lines at 2 and 5 of each decade
    ax.set_xlabel("tokens per sequence")
    ax.grid(alpha=0.3, which="both")
    return art


def plot_short_context(ax, tokens, curves: dict, crossings: dict, unit: str = "MiB", title: str | None = None):
    """Per-sequence bytes against tokens (log-log): each hybrid solid, its all-attention twin dashed, same colour;
    ``crossings`` {model: T} marked where the twin catches up. A redraw for the same models updates the curves."""
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    art = reuse(ax, "short_context", tuple(curves)) or _build_short_context(ax, tuple(curves))
    for (hybrid, twin, dot, note), (name, (hyb, tw)) in zip(art["models"], curves.items()):
        hybrid.set_data(x, np.asarray(hyb, dtype=float) / s)
        hybrid.set_label(f"{name} (hybrid)")
        twin.set_data(x, np.asarray(tw, dtype=float) / s)
        twin.set_label(f"{name}, all attention")
        t, b = crossings[name]
        dot.set_data([t], [b / s])
        note.set_text(f"{t:,}")
        note.xy = (t, b / s)
    relimit(ax, xlim=(x[0], x[-1]), ylim=None)
    ax.set_ylabel(f"cache per sequence ({unit}, log)")
    legend(ax, loc="lower right", fontsize=8, ncol=1)
    ax.set_title(title or "", fontsize=11)
    return ax
