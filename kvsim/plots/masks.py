"""Lesson 04's pictures: query × key masks of full, sliding, chunked and sink layers; one query's keys
in the ring's slots and in temporal order; each attention kind's share of layers and bytes.

Drawing only: masks from :mod:`kvsim.calc.masks`, slots read from a real ring, shares from
:mod:`kvsim.calc.kind_share`.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.patches import Rectangle

from .windows import KIND_COLORS

GAP = 4  # cells between two mask panels


def plot_masks(ax, masks: dict, query: int, title: str | None = None):
    """Mask panels side by side (rows = query positions, columns = key positions); row ``query`` framed."""
    ax.clear()
    x0 = 0
    for label, mask in masks.items():
        n = mask.shape[0]
        img = np.where(mask, 0.75, 0.0)
        img[query] = np.where(mask[query], 1.0, 0.12)  # the current query's row stands out
        ax.imshow(img, cmap="Blues", vmin=0, vmax=1, extent=(x0, x0 + n, n, 0), interpolation="nearest")
        ax.add_patch(Rectangle((x0, query), n, 1, fill=False, ec="tab:red", lw=1.8))
        ax.text(x0 + n / 2, -0.8, f"{label}\n{int(mask[query].sum())} keys for token {query}", ha="center",
                va="bottom", fontsize=9)
        for t in range(0, n, 4 if n > 12 else 1):
            ax.text(x0 + t + 0.5, n + 0.3, str(t), ha="center", va="top", fontsize=7, color="0.35")
        x0 += n + GAP
    n = next(iter(masks.values())).shape[0]
    for t in range(0, n, 4 if n > 12 else 1):
        ax.text(-0.4, t + 0.5, str(t), ha="right", va="center", fontsize=7, color="0.35")
    ax.text(-2.2, n / 2, "query position", rotation=90, ha="right", va="center", fontsize=9)
    ax.text((x0 - GAP) / 2, n + 1.8, "key position (blue: may attend)", ha="center", va="top", fontsize=9)
    ax.set_xlim(-3.6, x0 - GAP + 0.3)
    ax.set_ylim(n + 3, -4.2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def _row(ax, y, xs, labels, colors, hatch=None, h=1.0):
    for x, label, color, hat in zip(xs, labels, colors, hatch or [None] * len(xs)):
        ax.add_patch(Rectangle((x, y), 1, h, fc=color, ec="white", lw=1, hatch=hat))
        if label != "":
            ax.text(x + 0.5, y + h / 2, str(label), ha="center", va="center", fontsize=8)


def plot_ring_link(ax, query: int, mask_row: np.ndarray, slots: np.ndarray, sinks: int, title: str | None = None):
    """Top: the keys token ``query`` may see (its mask row). Middle: the ring's slots as stored.
    Bottom: the same keys oldest first. Lines join each held key to its slot and its place in order."""
    ax.clear()
    cmap = colormaps["viridis"]
    n = len(mask_row)
    color = {t: cmap(0.15 + 0.7 * t / max(n - 1, 1)) for t in range(n)}
    visible = [t for t in range(n) if mask_row[t]]
    _row(ax, 0, range(n), range(n), [color[t] if mask_row[t] else "0.9" for t in range(n)])
    _row(ax, 4, range(len(slots)), [s if s >= 0 else "" for s in slots],
         [color[s] if s >= 0 and mask_row[s] else "0.9" for s in slots],
         ["//" if i < sinks else None for i in range(len(slots))])
    _row(ax, 8, range(len(visible)), visible, [color[t] for t in visible])
    order = {t: i for i, t in enumerate(visible)}
    for i, s in enumerate(slots):
        if s >= 0 and mask_row[s]:
            ax.plot([s + 0.5, i + 0.5], [1, 4], color=color[s], lw=1)
            ax.plot([i + 0.5, order[s] + 0.5], [5, 8], color=color[s], lw=1)
    right = max(n, len(slots)) + 0.8
    for y, text in ((0.5, f"mask row of token {query}: keys 0-{n - 1}"),
                    (4.5, f"ring slots 0-{len(slots) - 1} as stored (ordered=False)"),
                    (8.5, "the same keys oldest first (ordered=True, 'linearized')")):
        ax.text(right, y, text, va="center", fontsize=9)
    ax.set_xlim(-0.5, right + 22)
    ax.set_ylim(10, -1.2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def plot_kind_shares(ax, shares: dict, title: str | None = None):
    """Two 100 % bars, layers and bytes, split by attention kind and labelled with percentages."""
    ax.clear()
    for y, key in ((1, "layers %"), (0, "bytes %")):
        left = 0.0
        for kind, row in shares.items():
            w = row[key]
            ax.barh([y], [w], left=left, color=KIND_COLORS.get(kind), alpha=0.8, ec="white",
                    label=kind if y == 1 else None)
            if w >= 4:
                ax.text(left + w / 2, y, f"{w:.1f} %", ha="center", va="center", fontsize=9)
            elif w > 0:  # too thin for its label: write it beside the bar
                ax.annotate(f"{kind} {w:.2g} %", (left + w, y), xytext=(4, 12), textcoords="offset points",
                            fontsize=9, arrowprops=dict(arrowstyle="-", color="0.3", lw=0.8))
            left += w
    ax.set_yticks([1, 0], ["layers", "KV bytes"])
    ax.set_xlim(0, 100)
    ax.set_xlabel("share (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=len(shares), fontsize=9, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
