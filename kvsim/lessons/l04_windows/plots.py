"""Lesson 04 (sliding windows and chunks): drawing only (calc and kvsim.ui.style); every function takes
computed numbers and an Axes.

Plots for windowed caches: a buffer's slots step by step, bytes by layer kind, measured vs formula.

Drawing only: callers pass what :mod:`kvsim.lessons.l04_windows.measure`, :mod:`kvsim.calc.window_bytes`,
:mod:`kvsim.measure.growth` or :mod:`kvsim.calc.memory` computed or measured. The slot picture and the
bytes-by-kind areas update the artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).

Lesson 04's pictures: query × key masks of full, sliding, chunked and sink layers; one query's keys
in the ring's slots and in temporal order; each attention kind's share of layers and bytes.

Drawing only: masks from :mod:`kvsim.lessons.l04_windows.data`, slots read from a real ring, shares from
:mod:`kvsim.lessons.l04_windows.data`. Each picture is built once per Axes (and shape) and redrawn by updating its
artists (:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.collections import PatchCollection, PathCollection
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.patches import Rectangle
from matplotlib.textpath import TextPath
from matplotlib.transforms import Affine2D

from ...calc.units import UNIT_BYTES, format_bytes
from ...ui.style import Sketch, clear_for, decorate, keep, legend_below, reuse, set_fill_between


KIND_COLORS = {"sliding": "tab:green", "chunked": "tab:purple", "full": "tab:orange", "mla": "tab:blue",
               "recurrent": "tab:cyan"}


_GLYPHS: dict = {}


def _glyph(text: str, size: float = 8):
    """The outline of ``text`` in points, centred on (0, 0) (cached per string)."""
    if (text, size) not in _GLYPHS:
        path = TextPath((0, 0), text, prop=FontProperties(size=size))
        e = path.get_extents()
        _GLYPHS[text, size] = path.transformed(Affine2D().translate(-(e.x0 + e.x1) / 2, -(e.y0 + e.y1) / 2))
    return _GLYPHS[text, size]


def _numbers(ax, x, y, texts, colors, size: float = 8):
    """Centred labels at data (x, y) as ONE collection of glyph outlines: far faster to render than Text artists."""
    coll = PathCollection([_glyph(t, size) for t in texts], offsets=np.column_stack([x, y]),
                          offset_transform=ax.transData, facecolors=colors, edgecolors="none", zorder=2)
    coll.set_transform(Affine2D().scale(1 / 72) + ax.figure.dpi_scale_trans)  # points -> pixels at any dpi
    ax.add_collection(coll, autolim=False)
    return coll


def _build_slots(ax, shape):
    steps, width, sinks = shape
    clear_for(ax, "slot_history")  # a new window or chunk size: replace the picture, keep the Axes
    x, y, empty = np.arange(width + 1) - 0.5, np.arange(steps + 1) - 0.5, np.zeros((steps, width))
    art = keep(ax, "slot_history", shape, {
        # one quad mesh per layer (an image would be resampled to the screen on every render, 5× slower):
        # visible positions coloured, held-but-stale cells grey, never-written cells white
        "visible": ax.pcolormesh(x, y, empty, cmap="viridis", alpha=0.55, zorder=1),
        "grey": ax.pcolormesh(x, y, empty, cmap="gray", vmin=0, vmax=1, zorder=0),
        "numbers": _numbers(ax, [], [], [], []),
        "frames": ax.add_collection(PatchCollection([], facecolor="none", edgecolor="black", linewidth=1.8,
                                                    zorder=3), autolim=False),
        "sinks": ax.add_patch(Rectangle((-0.5, -0.5), min(sinks, width), steps, fill=False, hatch="//",
                                        ec="0.6", lw=0, zorder=1.5)) if sinks else None})
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(steps - 0.5, -0.5)
    ax.set_xticks(range(width))
    ax.set_xlabel("slot in the cache buffer")
    ax.set_ylabel("decode step (newest at the bottom)")
    return art


def plot_slot_history(ax, positions, slots, visible, written, sinks: int = 0, title: str | None = None):
    """One row per decode step, one column per slot; the number is the token a slot holds.

    Coloured: the step's query attends to it. Grey: held but no longer visible (stale).
    Blank: never written. A black frame marks the slot the step wrote; sink slots are hatched.
    A position of None is an empty row (no step yet).
    """
    slots, visible = np.asarray(slots), np.asarray(visible)
    steps, width = slots.shape
    shape = (steps, width, sinks)
    art = reuse(ax, "slot_history", shape) or _build_slots(ax, shape)
    art["grey"].set_array(np.where(slots >= 0, 0.88, 1.0))
    art["visible"].set_array(np.ma.masked_invalid(np.where(visible, slots, np.nan).astype(float)))
    art["visible"].set_clim(0, max(1, np.nanmax(slots)))
    rows, cols = np.nonzero(slots >= 0)
    numbers = art["numbers"]
    numbers.set_paths([_glyph(str(v)) for v in slots[rows, cols]])
    numbers.set_offsets(np.column_stack([cols, rows]) if len(rows) else np.zeros((0, 2)))
    numbers.set_facecolors(["black" if v else "0.55" for v in visible[rows, cols]])
    art["frames"].set_paths([Rectangle((w - 0.5, i - 0.5), 1, 1) for i, w in enumerate(written) if w >= 0])
    ax.set_yticks(range(steps), ["" if p is None else f"token {p}" for p in positions], fontsize=8)
    ax.set_title(title or "", fontsize=10)
    return ax


def _tokens_label(x, _=None) -> str:
    """Token counts as context lengths are quoted (binary K and M): 65536 -> '64K', 1048576 -> '1M'."""
    if x >= 2**20:
        return f"{x / 2**20:g}M"
    return f"{x / 1024:g}K" if x >= 1024 else f"{x:g}"


def _build_bytes_by_kind(ax, shape):
    kinds, references, n_points = shape
    clear_for(ax, "bytes_by_kind")  # another model's layer kinds: replace the picture, keep the Axes
    art = keep(ax, "bytes_by_kind", shape, {
        "total": ax.plot([], [], "-", lw=2.5, color="black", label="real spec (total)")[0],
        "references": [ax.plot([], [], "--", lw=2, color="tab:red", label=label)[0] for label in references],
        "kinds": [ax.plot([], [], "-", lw=1.8, color=KIND_COLORS.get(kind)) for kind in kinds],
        "points": [(ax.plot([], [], "o", color="black", ms=5)[0],
                    ax.annotate("", (0, 0), xytext=(-6, 8), textcoords="offset points", ha="right", fontsize=9))
                   for _ in range(n_points)]})
    art["kinds"] = [lines[0] for lines in art["kinds"]]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens_label))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    return art


def plot_bytes_by_kind(ax, tokens, by_kind: dict, reference: dict | None = None, unit: str = "MiB",
                       points: dict | None = None, title: str | None = None):
    """KV bytes per layer kind against tokens as lines on log-log axes (a window's flat line stays visible
    beside gigabytes of full layers), the total in black, references dashed; ``tokens`` must be > 0."""
    reference, points = reference or {}, points or {}
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    shape = (tuple(by_kind), tuple(reference), len(points))
    art = reuse(ax, "bytes_by_kind", shape) or _build_bytes_by_kind(ax, shape)
    total = np.zeros(len(x))
    for line, (kind, y) in zip(art["kinds"], by_kind.items()):
        line.set_label(f"{kind} layers: {format_bytes(int(np.asarray(y)[-1]))} at {_tokens_label(x[-1])}")
        y = np.asarray(y, dtype=float) / s
        line.set_data(x, y)
        total = total + y
    art["total"].set_data(x, total)
    for line, y in zip(art["references"], reference.values()):
        line.set_data(x, np.asarray(y, dtype=float) / s)
    for (dot, note), (label, (px, py)) in zip(art["points"], points.items()):
        dot.set_data([px], [py / s])
        note.set_text(label)
        note.xy = (px, py / s)
    decorate(ax, xlim=(x[0], x[-1]), ylim=(None, None), xlabel="tokens per sequence",
             ylabel=f"KV cache ({unit}, log)", title=title)
    ax.grid(alpha=0.3, which="both")
    return ax


def plot_measured_vs_formula(ax, tokens, measured: dict, formula: dict, unit: str = "MiB",
                             vlines: dict | None = None, title: str | None = None):
    """Measured ``nbytes`` as markers over formula lines of the same colour (same key order)."""
    ax.clear()
    s = UNIT_BYTES[unit]
    x = np.asarray(tokens)
    colors = ["tab:green", "tab:orange", "tab:blue", "tab:purple"]
    for i, (label, y) in enumerate(formula.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, "-", lw=1.5, color=colors[i % 4], label=label)
    for i, (label, y) in enumerate(measured.items()):
        ax.plot(x, np.asarray(y, dtype=float) / s, "o", ms=5, mfc="none", color=colors[i % 4], label=label)
    for label, at in (vlines or {}).items():
        ax.axvline(at, color="grey", ls=":", lw=1.2)
        ax.annotate(label, (at, 0), xytext=(4, 6), textcoords="offset points", color="dimgrey", fontsize=9)
    decorate(ax, xlim=(0, x[-1]), xlabel="tokens appended", ylabel=f"cache nbytes ({unit})", title=title)
    return ax


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

    Cells, numbers and lines come from pools kept on the Axes (:class:`kvsim.ui.style.Sketch`)."""
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
