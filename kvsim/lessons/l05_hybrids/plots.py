"""Lesson 05 (hybrids): drawing only (calc and kvsim.ui.style); every function takes computed numbers and an
Axes.

Plots for hybrid and recurrent models: fixed state beside growing KV, and measured bytes per layer.

Drawing only: callers pass what :mod:`kvsim.calc.hybrid`, :mod:`kvsim.calc.memory` computed or what a real
decode (:mod:`kvsim.decode`) measured. :func:`plot_state_vs_kv` updates the artists of an earlier call on the
same Axes in place (:func:`kvsim.ui.style.reuse`).

Lesson 05's pictures: one recurrent state update sketched beside a growing K/V stack, and the
short-context crossover of hybrids against their all-attention twins.

Drawing only: sizes and bytes come from :mod:`kvsim.lessons.l05_hybrids.data` and :mod:`kvsim.calc.memory`.
Both update the artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ...calc.units import UNIT_BYTES, format_bytes
from ...ui.style import add_legend, clear_for, keep, legend, legend_below, log_scale, relimit, reuse


_STYLES = ["-", "--", "-.", ":"]


def tokens_label(x, _=None) -> str:
    """Token counts as context lengths are quoted (binary K and M): 65536 -> '64K', 1048576 -> '1M', 16 -> '16'."""
    if x >= 2**20:
        return f"{x / 2**20:g}M"
    return f"{x / 1024:g}K" if x >= 1024 else f"{x:g}"


def _plain(y, _=None) -> str:
    """Log-axis byte counts in the axis unit as plain numbers: 0.1, 10, 1,000."""
    return f"{y:,.0f}" if y >= 1 else f"{y:g}"


def _build_state_vs_kv(ax, shape):
    growing, fixed, n_points, log = shape
    clear_for(ax, "state_vs_kv")  # another model's mix of layers: replace the picture, keep the Axes
    art = keep(ax, "state_vs_kv", shape, {
        "growing": [ax.plot([], [], _STYLES[i % 4], lw=2)[0] for i in range(growing)],
        "fixed": [ax.plot([], [], "--", lw=2)[0] for _ in range(fixed)],
        "points": [(ax.plot([], [], "o", color="black", ms=5)[0],
                    ax.annotate("", (0, 0), xytext=(-6, 6), textcoords="offset points", ha="right", fontsize=9))
                   for _ in range(n_points)]})
    ax.set_xscale("log", base=2) if log else ax.set_xscale("linear")
    ax.set_yscale("log" if log else "linear")
    if log:  # x ticks every 4× as context lengths (1K, 4K, ... 256K), y ticks as plain numbers
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(tokens_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.set_xlabel("tokens per sequence")
    ax.grid(False, which="both")
    ax.grid(alpha=0.3, which="both" if log else "major")
    return art


def plot_state_vs_kv(ax, tokens, growing: dict, fixed: dict | None = None, unit: str = "GiB",
                     log: bool = False, points: dict | None = None, title: str | None = None,
                     legend_loc: str = "upper left"):
    """Growing caches as lines against tokens; fixed (recurrent) states as flat dashed lines.

    ``log``: log-log axes (a fixed state and a growing KV many times its size both stay visible), tokens
    labelled 1K, 4K, ... ``legend_loc`` "below" puts the legend under the Axes, clear of every line."""
    fixed, points = fixed or {}, points or {}
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    shape = (len(growing), len(fixed), len(points), log)
    art = reuse(ax, "state_vs_kv", shape) or _build_state_vs_kv(ax, shape)
    for line, (label, y) in zip(art["growing"], growing.items()):
        line.set_data(x, np.asarray(y, dtype=float) / s)
        line.set_label(label)
    for line, (label, level) in zip(art["fixed"], fixed.items()):
        line.set_data(x, np.full(len(x), level / s))
        line.set_label(label)
    for (dot, note), (label, (px, py)) in zip(art["points"], points.items()):
        dot.set_data([px], [py / s])
        note.set_text(label)
        note.xy = (px, py / s)
    relimit(ax, xlim=(x[0], x[-1]), ylim=None if log else (0, None))
    if not log:  # headroom for the point labels above the highest line
        top = max(line.get_ydata().max() for line in art["growing"] + art["fixed"])
        ax.set_ylim(0, 1.12 * top if top > 0 else 1)
    ax.set_ylabel(f"cache per sequence ({unit}{', log' if log else ''})")
    if legend_loc == "below":
        legend_below(ax, fontsize=8, ncol=2)
    else:
        legend(ax, loc=legend_loc, fontsize=8)
    ax.set_title(title or "", fontsize=11)
    return ax


def plot_layer_bytes(ax, tokens, measured, formula, labels, unit: str = "KiB", title: str | None = None):
    """One line per layer of measured bytes against tokens in context, formula values as dots on top.

    ``measured`` and ``formula`` are (layers, steps) arrays; ``labels`` names each layer.
    """
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    for i, label in enumerate(labels):
        (line,) = ax.plot(x, np.asarray(measured[i], dtype=float) / s, "-", lw=2.5, alpha=0.6,
                          drawstyle="steps-post", label=f"{label}: measured nbytes")
        ax.plot(x, np.asarray(formula[i], dtype=float) / s, ".", ms=4, color=line.get_color(),
                label=f"{label}: kvsim.calc.memory")
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens in context")
    ax.set_ylabel(f"bytes held by the layer's cache ({unit})")
    ax.grid(alpha=0.3)
    add_legend(ax, loc="center right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


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
