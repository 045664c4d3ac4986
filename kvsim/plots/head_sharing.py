"""Lesson 03's pictures: query heads coloured by the K/V head they read, bytes per token as area
squares, and MLA's latent fanning out through W^UK / W^UV beside its separate RoPE key.

Drawing only: head groups and square sides come from :mod:`kvsim.calc.head_sharing`, bytes from
:mod:`kvsim.calc.memory`.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.collections import PatchCollection
from matplotlib.patches import FancyArrowPatch, Rectangle

ROW_H = 4.0


def _group_colors(groups: np.ndarray):
    n = int(groups.max()) + 1
    cmap = colormaps["tab20" if n <= 20 else "turbo"]
    return [cmap((g % 20) / 20 if n <= 20 else g / n) for g in groups]


def _heads_rows(ax, groups: np.ndarray, y_q: float, y_kv: float):
    """Row of query heads (one cell each) and below it one bar per K/V head spanning its group."""
    n_h, n_kv = len(groups), int(groups.max()) + 1
    colors = _group_colors(groups)
    ax.add_collection(PatchCollection([Rectangle((i, y_q), 1, ROW_H) for i in range(n_h)], facecolors=colors,
                                      edgecolors="white", linewidths=0.3 if n_h > 32 else 1))
    width = n_h / n_kv
    ax.add_collection(PatchCollection([Rectangle((g * width, y_kv), width, ROW_H) for g in range(n_kv)],
                                      facecolors=_group_colors(np.arange(n_kv)), edgecolors="black", linewidths=0.6))
    if width >= 8:  # room for the K/V head's name
        for g in range(n_kv):
            ax.text((g + 0.5) * width, y_kv + ROW_H / 2, f"K,V {g}", ha="center", va="center", fontsize=8)
    for i in range(n_kv):  # each group's query heads point at their K/V head
        x = (i + 0.5) * width
        ax.plot([x, x], [y_q + ROW_H, y_kv], color="0.4", lw=0.6 if n_kv > 16 else 1)
    ax.text(-1.5, y_q + ROW_H / 2, f"{n_h} query heads", ha="right", va="center", fontsize=9)
    ax.text(-1.5, y_kv + ROW_H / 2, f"{n_kv} K/V head{'s' if n_kv > 1 else ''}\n(in the cache)", ha="right",
            va="center", fontsize=9)


def plot_head_sharing(ax, groups: np.ndarray, sides: dict, labels: dict, highlight: str, title: str | None = None):
    """Head rows above; below, one square per design with area ∝ bytes per token (``sides`` in head cells)."""
    ax.clear()
    n_h = len(groups)
    y_q, y_kv = 0.0, 2.5 * ROW_H
    _heads_rows(ax, groups, y_q, y_kv)
    base = y_kv + ROW_H + 4 + max(sides.values())  # squares stand on this line
    x = 0.0
    for name, side in sides.items():
        hot = name == highlight
        ax.add_patch(Rectangle((x, base - side), side, side, fc="tab:orange" if hot else "0.75", ec="none"))
        _outline(ax, x, base - side, side, side, color="black", lw=1.5 if hot else 0.6)
        ax.text(x + side / 2, base + 1.2, labels[name], ha="center", va="top", fontsize=9,
                fontweight="bold" if hot else "normal")
        x += max(side, 14) + 4
    ax.text(x, base - 2, "area ∝ bytes per token", ha="left", va="bottom", fontsize=9, color="0.3")
    ax.set_xlim(-22, max(n_h, x + 22) + 1)
    ax.set_ylim(base + 8, -2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def _outline(ax, x, y, w, h, **kw):
    """A rectangle's edge as a line (its size then shows in the view's data, for tests)."""
    ax.plot([x, x + w, x + w, x, x], [y, y, y + h, y + h, y], **kw)


def _box(ax, x, y, w, h, text, color, fontsize=9):
    ax.add_patch(Rectangle((x, y), w, h, fc=color, ec="none"))
    _outline(ax, x, y, w, h, color="black", lw=0.8)
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, a, b, text=None, color="0.2", ls="-"):
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=10, color=color, lw=1, ls=ls,
                                 shrinkA=2, shrinkB=2))
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 0.5, text, ha="center", va="bottom", fontsize=8, color=color)


def plot_mla_fanout(ax, kv_lora_rank: int, qk_rope_head_dim: int, head_dim: int, num_heads: int,
                    shown: int = 3, title: str | None = None):
    """Cached latent c (d_c) and RoPE key k^R (d_h^R) on the left; per-head keys (above) and values
    (below) rebuilt from the latent on the right. Box widths are proportional to vector lengths."""
    ax.clear()
    u = 40 / max(kv_lora_rank, head_dim)  # data units per element
    lw, rw, hw = kv_lora_rank * u, max(qk_rope_head_dim * u, 1.0), head_dim * u
    y_lat, x_k = 7 * shown + 1, lw + 18  # keys above the latent, values below
    _box(ax, 0, y_lat, lw, 5, f"latent $c^{{KV}}$: $d_c$ = {kv_lora_rank}", "tab:blue")
    _box(ax, 0, 2, rw, 5, "", "tab:purple")
    ax.text(rw + 1.5, 4.5, f"RoPE key $k^R$: $d_h^R$ = {qk_rope_head_dim},\nRoPE applied before caching",
            ha="left", va="center", fontsize=8)
    for i in range(shown):
        h = "h" if i == shown - 1 else str(i + 1)
        y_k, y_v = i * 7, y_lat + 7 + i * 7
        _box(ax, x_k, y_k, hw, 5, f"$k^C_{{{h}}}$", "tab:green")
        _box(ax, x_k + hw, y_k, rw, 5, "$k^R$" if rw >= 3 else "", "tab:purple", fontsize=7)
        _box(ax, x_k, y_v, hw, 5, f"$v_{{{h}}}$", "tab:orange")
        _arrow(ax, (lw, y_lat + 2.5), (x_k, y_k + 2.5))
        _arrow(ax, (lw, y_lat + 2.5), (x_k, y_v + 2.5), color="tab:orange")
    white = dict(fc="white", ec="none", pad=0.5)
    ax.text(x_k - 8, y_lat - 4.5, "$W^{UK}_h$", fontsize=10, ha="center", bbox=white)
    ax.text(x_k - 8, y_lat + 10.5, "$W^{UV}_h$", fontsize=10, ha="center", color="tab:orange", bbox=white)
    right = x_k + hw + rw + 2
    ax.text(right, 2.5 + 7 * (shown - 1) / 2, f"key of head h = [$k^C_h$ ; $k^R$]:\n{head_dim} + {qk_rope_head_dim} "
            "elements, $k^R$ the same\nin every head", fontsize=8, va="center")
    ax.text(right, y_lat + 9.5 + 7 * (shown - 1) / 2, f"value of head h:\n{head_dim} elements", fontsize=8,
            va="center")
    bottom = y_lat + 7 * (shown + 1)
    ax.text(0, bottom, f"cached per token and layer: {kv_lora_rank} + {qk_rope_head_dim} = "
                           f"{kv_lora_rank + qk_rope_head_dim:,} elements", fontsize=9, fontweight="bold", va="top")
    ax.text(0, bottom + 3.5, f"Rebuilt for each of the {num_heads} heads (materialized path), or never built: "
                       "fold $W^{UK}_h$ into the query\nand $W^{UV}_h$ into the output (absorbed path). "
                       "$k^R$ keeps RoPE out of $W^{UK}_h$, so the fold stays valid.", fontsize=8, va="top",
            color="0.25")
    ax.set_xlim(-1, right + 30)
    ax.set_ylim(bottom + 10, -2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax
