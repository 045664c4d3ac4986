"""Lesson 07 (paged attention and serving): drawing only (calc and kvsim.ui.style); every function takes
computed numbers and an Axes.

Plots for paged KV and serving: block tables, memory split per policy, memory split over time.

Drawing only: callers pass what :mod:`kvsim.lessons.l07_paged.data` read from a real allocator or what
:mod:`kvsim.serving.fragmentation` / :mod:`kvsim.serving.sim` computed. :func:`plot_split_over_time` updates
the artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).

Lesson 07's picture: a few requests step by step on a real block allocator, preemptions marked.

Drawing only: the states come from :func:`kvsim.lessons.l07_paged.data.preemption_story`. A redraw for
as many requests updates the artists of an earlier call in place (:func:`kvsim.ui.style.reuse`).

Lesson 07's tensor-parallel picture: KV bytes per token held by each GPU against tp.

Drawing only: the bytes come from :func:`kvsim.calc.memory.bytes_per_token` with ``tp``. A redraw for as
many tp values and models updates the bars of an earlier call in place (:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from ...calc.units import format_bytes
from ...ui.style import add_legend, Pool, Sketch, clear_for, keep, legend, legend_below, reuse, set_fill_between


SEQ_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink"]
STATE_COLORS = {"shared": "gold", "cached": "0.85", "free": "white"}
PART_COLORS = {"token_states": "tab:green", "reservation": "tab:olive", "internal_frag": "tab:orange",
               "cached": "tab:cyan", "external_frag": "tab:red", "idle": "0.85"}
PART_LABELS = {"token_states": "token states", "reservation": "reservation",
               "internal_frag": "internal fragmentation", "cached": "cached prefix blocks",
               "external_frag": "external fragmentation & others", "idle": "idle (nobody waiting)"}


def sequence_colors(snaps) -> dict:
    """One colour per sequence name, in order of first appearance over ``snaps`` (stable across steps)."""
    names = list(dict.fromkeys(n for s in snaps for n in s.tables))
    return {n: SEQ_COLORS[i % len(SEQ_COLORS)] for i, n in enumerate(names)}


def _block_sketch(ax) -> Sketch:
    """Rectangles, texts, lines and copy arrows of the block-table picture, added without data limits (the
    limits are set by the plot); arrows over every rectangle (zorder), as when they were added last."""
    def add(artist):
        return ax.add_artist(artist)
    return Sketch(rect=lambda: add(Rectangle((0, 0), 1, 1)), text=lambda: ax.text(0, 0, ""),
                  line=lambda: add(Line2D([], [])),
                  arrow=lambda: add(FancyArrowPatch((0, 0), (1, 1), connectionstyle="arc3,rad=0.4",
                                                    arrowstyle="-|>", mutation_scale=12, lw=1.5, zorder=1.5)))


def plot_block_tables(ax, snap, colors: dict | None = None, title: str | None = None):
    """Physical pool on top (id, reference count, state), one row of logical blocks per sequence below,
    a line from every logical block to the physical block its table names; CoW copies as arrows.

    A redraw re-styles the artists of the earlier call (:class:`kvsim.ui.style.Sketch`): no ``ax.clear()``,
    nothing made or removed unless the picture needs more of one kind than before.
    """
    held = reuse(ax, "block_tables", ())
    if held is None:
        ax.clear()
        ax.set_axis_off()
        held = keep(ax, "block_tables", (), {"sketch": _block_sketch(ax)})
    sketch = held["sketch"]
    names = list(snap.tables)
    colors = colors or sequence_colors([snap])
    _draw_pool(snap, colors, sketch)
    _draw_tables(snap, names, colors, sketch)
    for src, dst in snap.copies:
        sketch["arrow"].take(color="crimson").set_positions((src + 0.45, 0), (dst + 0.45, 0))
        _text(sketch, (src + dst) / 2 + 0.45, -0.55, "copy-on-write", color="crimson", ha="center", fontsize=8)
    ax.set_xlim(-2.6, snap.num_blocks + 1.4)
    ax.set_ylim(2 + 1.3 * len(names) + 0.1, -1.0)
    _text(sketch, snap.num_blocks + 0.1, 0.45, "physical\nblocks", fontsize=8, va="center")
    sketch.finish()
    ax.set_title(title or snap.label, fontsize=10)
    return ax


def _text(sketch, x, y, s, ha="left", va="baseline", fontsize=8, color="black", fontweight="normal"):
    return sketch["text"].take(x=x, y=y, text=s, ha=ha, va=va, fontsize=fontsize, color=color, fontweight=fontweight)


def _rect(sketch, xy, width, face, edge, lw=1.0, hatch=None, alpha=None):
    return sketch["rect"].take(xy=xy, width=width, height=0.9, facecolor=face, edgecolor=edge, linewidth=lw,
                               hatch=hatch, alpha=alpha)


def _draw_pool(snap, colors, sketch):
    """The physical blocks: colour of the owner (or the free/cached state), id and reference count."""
    for b in range(snap.num_blocks):
        state = snap.state(b)
        face = colors[snap.owners(b)[0]] if state == "used" else STATE_COLORS[state]
        _rect(sketch, (b, 0), 0.9, face, "0.3", hatch="//" if state == "cached" else None,
              alpha=0.85 if state == "used" else 1.0)
        _text(sketch, b + 0.45, 0.32, f"P{b}", ha="center", va="center", fontweight="bold")
        if snap.ref_count[b] or state == "cached":
            _text(sketch, b + 0.45, 0.7, f"ref {snap.ref_count[b]}", ha="center", va="center", fontsize=7)


def _draw_tables(snap, names, colors, sketch):
    """One row of logical blocks per sequence (filled as far as written), a line to each physical block."""
    for row, name in enumerate(names):
        y = 2 + 1.3 * row
        _text(sketch, -0.2, y + 0.45, f"{name}\n{snap.tokens[name]} tokens", ha="right", va="center")
        for i, b in enumerate(snap.tables[name]):
            fill = snap.fill(name, i) / snap.block_size
            _rect(sketch, (i, y), 0.9, "white", colors[name], lw=1.5)
            _rect(sketch, (i, y), 0.9 * fill, colors[name], "none", lw=0, alpha=0.45)
            _text(sketch, i + 0.45, y + 0.45, f"L{i}→P{b}" if b >= 0 else f"L{i} released", ha="center",
                  va="center", fontsize=7)
            if b >= 0:
                sketch["line"].take(data=([i + 0.45, b + 0.45], [y, 0.9]), color=colors[name], linewidth=1,
                                    alpha=0.7)


def plot_policy_split(ax, splits: dict, reference: dict | None = None, title: str | None = None):
    """One horizontal stacked bar per policy: {policy label: {part: share}} (shares of KV memory);
    ``reference`` {policy label: token-state %} is marked with a black diamond (e.g. Kwon et al.)."""
    ax.clear()
    labels = list(splits)
    seen = set()
    for row, label in enumerate(labels):
        left = 0.0
        for part, share in splits[label].items():
            ax.barh([row], [100 * share], left=left, color=PART_COLORS.get(part), height=0.6,
                    label=None if part in seen else PART_LABELS.get(part, part))
            seen.add(part)
            left += 100 * share
        ts = 100 * splits[label].get("token_states", 0)
        ax.text(ts / 2, row, f"{ts:.1f} %", ha="center", va="center", fontsize=8, color="white", weight="bold")
    if reference:
        pts = [(reference[label], row) for row, label in enumerate(labels) if label in reference]
        if pts:
            x, y = zip(*pts)
            ax.plot(x, y, "D", color="black", ms=6, label="token states in Kwon et al. Fig. 2")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of KV memory (%)")
    legend_below(ax, ncol=2, fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def _build_split_over_time(ax, parts):
    ax.clear()
    art = keep(ax, "split_over_time", parts, {
        "areas": [ax.fill_between([0, 1], 0, 0, color=PART_COLORS.get(p), alpha=0.8, lw=0,
                                  label=PART_LABELS.get(p, p)) for p in parts],
        "edges": [ax.plot([], [], "-", color="0.25", lw=0.5)[0] for _ in parts]})
    ax.set_ylim(0, 100)
    ax.set_xlabel("time (model iterations)")
    ax.set_ylabel("share of KV memory (%)")
    legend_below(ax, ncol=3, fontsize=8)
    return art


def plot_split_over_time(ax, t, shares: dict, title: str | None = None, running=None):
    """Stacked shares of KV memory against time (iterations); boundaries drawn as lines."""
    t = np.asarray(t, dtype=float)
    art = reuse(ax, "split_over_time", tuple(shares)) or _build_split_over_time(ax, tuple(shares))
    bottom = np.zeros_like(t)
    for area, edge, share in zip(art["areas"], art["edges"], shares.values()):
        top = bottom + 100 * np.asarray(share, dtype=float)
        set_fill_between(area, t, bottom, top)
        edge.set_data(t, top)
        bottom = top
    ax.set_xlim(t[0], t[-1])
    ax.set_title(title or "", fontsize=10)
    return ax


STORY_COLORS = ("white", "0.85", "tab:orange", "tab:blue", "tab:red", "0.97")
STATE_NAMES = ("not arrived", "waiting", "prefill (or recompute)", "decode", "preempted", "done")


def _build_story(ax, n):
    clear_for(ax, "preemption_story")
    art = keep(ax, "preemption_story", n, {
        "states": [],  # the quad mesh of the last call (one cell per request and step)
        "marks": Pool(lambda: ax.text(0, 0, "×", ha="center", va="center", color="white", fontsize=11,
                                      fontweight="bold")),
        "steps": ax.add_collection(LineCollection([], colors="white", linewidths=0.6), autolim=False)})
    ax.set_xlabel("step")
    handles = [Patch(fc=c, ec="0.6", label=t) for c, t in zip(STORY_COLORS[1:5], STATE_NAMES[1:5])]
    add_legend(ax, handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, fontsize=8, frameon=False)
    return art


def plot_preemption_story(ax, states: np.ndarray, preempted, title: str | None = None):
    """One row per request, one column per step, coloured by state; preemptions carry an ×."""
    n, steps = states.shape
    art = reuse(ax, "preemption_story", n) or _build_story(ax, n)
    mesh = art["states"]
    if mesh and mesh[0].get_array().shape == states.shape:
        mesh[0].set_array(states)
    else:  # a quad mesh (an image would be resampled to the screen on every render, 5× slower) per shape
        for old in mesh:
            old.remove()
        mesh[:] = [ax.pcolormesh(np.arange(steps + 1), np.arange(n + 1), states, cmap=ListedColormap(STORY_COLORS),
                                 vmin=-0.5, vmax=len(STORY_COLORS) - 0.5, zorder=0)]
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


def _build_tp(ax, shape):
    tps, n_series = shape
    clear_for(ax, "tp_bytes")
    x = np.arange(len(tps))
    width = 0.8 / n_series
    series = []
    for i in range(n_series):  # one bar per tp, each with its label above
        bars = ax.bar(x + (i - (n_series - 1) / 2) * width, np.zeros(len(tps)), width, color=f"C{i}")
        series.append((bars, [ax.annotate("", (b.get_x() + b.get_width() / 2, 0), xytext=(0, 2),
                                          textcoords="offset points", ha="center", va="bottom", fontsize=7)
                              for b in bars]))
    ax.set_xticks(x, [f"tp = {t}" for t in tps])
    ax.set_yticks([])
    ax.set_ylabel("KV bytes per token, each GPU")
    ax.grid(alpha=0.3, axis="y")
    return keep(ax, "tp_bytes", shape, {"series": series})


def plot_tp_bytes(ax, tps, series: dict, title: str | None = None):
    """Grouped linear bars: one group per tp, one bar per model, each labelled with its bytes."""
    shape = (tuple(tps), len(series))
    art = reuse(ax, "tp_bytes", shape) or _build_tp(ax, shape)
    for (bars, notes), (label, values) in zip(art["series"], series.items()):
        bars.set_label(label)
        for bar, note, v in zip(bars, notes, values):
            bar.set_height(v)
            note.set_text(format_bytes(v))
            note.xy = (note.xy[0], v)
    ax.set_ylim(0, max(max(v) for v in series.values()) * 1.25)
    legend(ax, loc="upper right", fontsize=9)
    ax.set_title(title or "", fontsize=11)
    return ax
