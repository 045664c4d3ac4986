"""Lesson 04's pictures: query × key masks of full, sliding, chunked and sink layers; one query's keys
in the ring's slots and in temporal order; each attention kind's share of layers and bytes.

Drawing only: masks from :mod:`kvsim.calc.masks`, slots read from a real ring, shares from
:mod:`kvsim.calc.kind_share`. Each picture is built once per Axes (and shape) and redrawn by updating its
artists (:func:`kvsim.plots.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.patches import Rectangle

from ..ui.style import Sketch, clear_for, keep, legend_below, reuse
from .windows import KIND_COLORS

GAP = 4  # cells between two mask panels


def _build_masks(ax, shape):
    panels, n = shape
    clear_for(ax, "masks")
    edges = np.arange(n + 1)
    art = []
    for i in range(panels):
        x0 = i * (n + GAP)
        art.append((
            # a quad mesh (an image would be resampled to the screen on every render)
            ax.pcolormesh(x0 + edges, edges, np.zeros((n, n)), cmap="Blues", vmin=0, vmax=1, zorder=0),
            ax.add_patch(Rectangle((x0, 0), n, 1, fill=False, ec="tab:red", lw=1.8)),
            ax.text(x0 + n / 2, -0.8, "", ha="center", va="bottom", fontsize=9)))
        for t in range(0, n, 4 if n > 12 else 1):
            ax.text(x0 + t + 0.5, n + 0.3, str(t), ha="center", va="top", fontsize=7, color="0.35")
    x1 = panels * (n + GAP)
    for t in range(0, n, 4 if n > 12 else 1):
        ax.text(-0.4, t + 0.5, str(t), ha="right", va="center", fontsize=7, color="0.35")
    ax.text(-2.2, n / 2, "query position", rotation=90, ha="right", va="center", fontsize=9)
    ax.text((x1 - GAP) / 2, n + 1.8, "key position (blue: may attend)", ha="center", va="top", fontsize=9)
    ax.set_xlim(-3.6, x1 - GAP + 0.3)
    ax.set_ylim(n + 3, -4.2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return keep(ax, "masks", shape, {"panels": art})


def plot_masks(ax, masks: dict, query: int, title: str | None = None):
    """Mask panels side by side (rows = query positions, columns = key positions); row ``query`` framed.

    Built once per number of panels and positions; a redraw sets the masks, the frame and the labels."""
    shape = (len(masks), next(iter(masks.values())).shape[0])
    art = reuse(ax, "masks", shape) or _build_masks(ax, shape)
    for (mesh, frame, label), (name, mask) in zip(art["panels"], masks.items()):
        img = np.where(mask, 0.75, 0.0)
        img[query] = np.where(mask[query], 1.0, 0.12)  # the current query's row stands out
        mesh.set_array(img)
        frame.set_y(query)
        label.set_text(f"{name}\n{int(mask[query].sum())} key{'s' if mask[query].sum() != 1 else ''} "
                       f"for token {query}")
    ax.set_title(title or "", fontsize=11)
    return ax


def _build_ring_link(ax):
    clear_for(ax, "ring_link")
    sketch = Sketch(cell=lambda: ax.add_patch(Rectangle((0, 0), 1, 1, ec="white", lw=1)),
                    number=lambda: ax.text(0, 0, "", ha="center", va="center", fontsize=8),
                    link=lambda: ax.plot([], [], lw=1)[0])
    notes = [ax.text(0, y, "", va="center", fontsize=9) for y in (0.5, 4.5, 8.5)]
    ax.set_ylim(10, -1.2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return keep(ax, "ring_link", (), {"sketch": sketch, "notes": notes})


def _row(sketch, y, xs, labels, colors, hatch=None, h=1.0):
    for x, label, color, hat in zip(xs, labels, colors, hatch or [None] * len(xs)):
        sketch["cell"].take(xy=(x, y), height=h, facecolor=color, hatch=hat)
        if label != "":
            sketch["number"].take(x=x + 0.5, y=y + h / 2, text=str(label))


def plot_ring_link(ax, query: int, mask_row: np.ndarray, slots: np.ndarray, sinks: int, title: str | None = None):
    """Top: the keys token ``query`` may see (its mask row). Middle: the ring's slots as stored.
    Bottom: the same keys oldest first. Lines join each held key to its slot and its place in order.

    Cells, numbers and lines come from pools kept on the Axes (:class:`kvsim.plots.style.Sketch`)."""
    art = reuse(ax, "ring_link", ()) or _build_ring_link(ax)
    sketch = art["sketch"]
    cmap = colormaps["viridis"]
    n = len(mask_row)
    color = {t: cmap(0.15 + 0.7 * t / max(n - 1, 1)) for t in range(n)}
    visible = [t for t in range(n) if mask_row[t]]
    _row(sketch, 0, range(n), range(n), [color[t] if mask_row[t] else "0.9" for t in range(n)])
    _row(sketch, 4, range(len(slots)), [s if s >= 0 else "" for s in slots],
         [color[s] if s >= 0 and mask_row[s] else "0.9" for s in slots],
         ["//" if i < sinks else None for i in range(len(slots))])
    _row(sketch, 8, range(len(visible)), visible, [color[t] for t in visible])
    order = {t: i for i, t in enumerate(visible)}
    for i, s in enumerate(slots):
        if s >= 0 and mask_row[s]:
            sketch["link"].take(data=([s + 0.5, i + 0.5], [1, 4]), color=color[s])
            sketch["link"].take(data=([i + 0.5, order[s] + 0.5], [5, 8]), color=color[s])
    sketch.finish()
    right = max(n, len(slots)) + 0.8
    for note, text in zip(art["notes"], (f"mask row of token {query}: keys 0-{n - 1}",
                                         f"ring slots 0-{len(slots) - 1} as stored (ordered=False)",
                                         "the same keys oldest first (ordered=True, 'linearized')")):
        note.set(x=right, text=text)
    ax.set_xlim(-0.5, right + 22)
    ax.set_title(title or "", fontsize=11)
    return ax


def _build_kind_shares(ax, kinds):
    clear_for(ax, "kind_shares")  # another model's kinds: replace the bars, keep the Axes
    rows = {}
    for y, key in ((1, "layers %"), (0, "bytes %")):
        rows[key] = [(ax.barh([y], [0], color=KIND_COLORS.get(kind), alpha=0.8, ec="white",
                              label=kind if y == 1 else None)[0],
                      ax.text(0, y, "", ha="center", va="center", fontsize=9),  # inside the bar
                      ax.annotate("", (0, y), xytext=(4, 12), textcoords="offset points", fontsize=9,
                                  arrowprops=dict(arrowstyle="-", color="0.3", lw=0.8)))  # beside a thin one
                     for kind in kinds]
    ax.set_yticks([1, 0], ["layers", "KV bytes"])
    ax.set_xlim(0, 100)
    ax.set_xlabel("share (%)")
    art = keep(ax, "kind_shares", kinds, rows)
    legend_below(ax, ncol=len(kinds), fontsize=9)
    return art


def plot_kind_shares(ax, shares: dict, title: str | None = None):
    """Two 100 % bars, layers and bytes, split by attention kind and labelled with percentages."""
    art = reuse(ax, "kind_shares", tuple(shares)) or _build_kind_shares(ax, tuple(shares))
    for key, row in art.items():
        left = 0.0
        for (bar, inside, beside), (kind, share) in zip(row, shares.items()):
            w = share[key]
            bar.set_x(left)
            bar.set_width(w)
            inside.set(visible=w >= 4, x=left + w / 2, text=f"{w:.1f} %")
            beside.set(visible=0 < w < 4, text=f"{kind} {w:.2g} %")  # too thin for its label: beside the bar
            beside.xy = (left + w, beside.xy[1])
            left += w
    ax.set_title(title or "", fontsize=11)
    return ax
