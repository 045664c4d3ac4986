"""Lesson 03 (MHA, GQA, MQA, MLA): drawing only (calc and kvsim.ui.style); every function takes computed
numbers and an Axes.

Lesson 03's pictures: query heads coloured by the K/V head they read, bytes per token as area
squares, and MLA's latent fanning out through W^UK / W^UV beside its separate RoPE key.

Drawing only: head groups and square sides come from :mod:`kvsim.lessons.l03_attention_variants.data`, bytes from
:mod:`kvsim.calc.memory`. Both pictures are built once per Axes and redrawn by moving and re-labelling
their artists (:class:`kvsim.ui.style.Sketch`), so a slider move creates none.

Plots of bytes per token for the ways of storing K and V (MHA, GQA, MQA, MLA).

:func:`plot_mla_path_costs`: FLOPs (left) and bytes (right) of one MLA call, absorbed vs materialized,
against query tokens per call, from :func:`kvsim.lessons.l03_attention_variants.data.mla_path_curves`.

:func:`plot_bytes_per_token` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.ui.style.reuse`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.collections import LineCollection, PatchCollection, PolyCollection
from matplotlib.patches import FancyArrowPatch, Rectangle

from ...calc.units import format_bytes
from ...ui.style import add_legend, Sketch, clear_for, keep, log_scale, reuse


ROW_H = 4.0


def _group_colors(groups: np.ndarray):
    n = int(groups.max()) + 1
    cmap = colormaps["tab20" if n <= 20 else "turbo"]
    return [cmap((g % 20) / 20 if n <= 20 else g / n) for g in groups]


def _sketch(ax, key: str) -> Sketch:
    """Boxes (filled, no edge), their outlines as lines (sizes then show in a view's data, for tests), texts
    and arrows, taken in drawing order by the plot functions below."""
    clear_for(ax, key)
    sketch = Sketch(box=lambda: ax.add_patch(Rectangle((0, 0), 1, 1, ec="none")),
                    outline=lambda: ax.plot([], [], color="black")[0],
                    text=lambda: ax.text(0, 0, ""),
                    arrow=lambda: ax.add_patch(FancyArrowPatch((0, 0), (1, 1), arrowstyle="-|>", mutation_scale=10,
                                                               lw=1, shrinkA=2, shrinkB=2)))
    ax.set_aspect("equal")
    ax.set_axis_off()
    return sketch


def _text(sketch, x, y, s, ha="center", va="center", fontsize=9, color="black", fontweight="normal", bbox=None):
    return sketch["text"].take(x=x, y=y, text=s, ha=ha, va=va, fontsize=fontsize, color=color,
                               fontweight=fontweight, bbox=bbox)


def _box(sketch, x, y, w, h, text, color, fontsize=9, lw=0.8, fontweight="normal"):
    """A filled rectangle, its outline and a centred label."""
    sketch["box"].take(xy=(x, y), width=w, height=h, facecolor=color)
    sketch["outline"].take(data=([x, x + w, x + w, x, x], [y, y, y + h, y + h, y]), linewidth=lw)
    if text:
        _text(sketch, x + w / 2, y + h / 2, text, fontsize=fontsize, fontweight=fontweight)


def _build_heads(ax, n_h):
    sketch = _sketch(ax, "head_sharing")
    heads = ax.add_collection(PatchCollection([Rectangle((i, 0), 1, ROW_H) for i in range(n_h)], edgecolors="white",
                                              linewidths=0.3 if n_h > 32 else 1))
    kv = ax.add_collection(PolyCollection([], edgecolors="black", linewidths=0.6))
    links = ax.add_collection(LineCollection([], colors="0.4"))
    return keep(ax, "head_sharing", n_h, {"heads": heads, "kv": kv, "links": links, "sketch": sketch})


def _heads_rows(art, groups: np.ndarray, y_q: float, y_kv: float):
    """Row of query heads (one cell each) and below it one bar per K/V head spanning its group."""
    n_h, n_kv = len(groups), int(groups.max()) + 1
    sketch = art["sketch"]
    art["heads"].set_facecolors(_group_colors(groups))
    width = n_h / n_kv
    x = np.arange(n_kv) * width
    art["kv"].set_verts([[(a, y_kv), (a + width, y_kv), (a + width, y_kv + ROW_H), (a, y_kv + ROW_H)] for a in x])
    art["kv"].set_facecolors(_group_colors(np.arange(n_kv)))
    if width >= 8:  # room for the K/V head's name
        for g in range(n_kv):
            _text(sketch, (g + 0.5) * width, y_kv + ROW_H / 2, f"K,V {g}", fontsize=8)
    # each group's query heads point at their K/V head
    art["links"].set_segments([[(a + width / 2, y_q + ROW_H), (a + width / 2, y_kv)] for a in x])
    art["links"].set_linewidth(0.6 if n_kv > 16 else 1)
    _text(sketch, -1.5, y_q + ROW_H / 2, f"{n_h} query heads", ha="right")
    _text(sketch, -1.5, y_kv + ROW_H / 2, f"{n_kv} K/V head{'s' if n_kv > 1 else ''}\n(in the cache)", ha="right")


def plot_head_sharing(ax, groups: np.ndarray, sides: dict, labels: dict, highlight: str, title: str | None = None):
    """Head rows above; below, one square per design with area ∝ bytes per token (``sides`` in head cells)."""
    n_h = len(groups)
    art = reuse(ax, "head_sharing", n_h) or _build_heads(ax, n_h)
    sketch = art["sketch"]
    y_q, y_kv = 0.0, 2.5 * ROW_H
    _heads_rows(art, groups, y_q, y_kv)
    base = y_kv + ROW_H + 4 + max(sides.values())  # squares stand on this line
    x = 0.0
    for name, side in sides.items():
        hot = name == highlight
        _box(sketch, x, base - side, side, side, "", "tab:orange" if hot else "0.75", lw=1.5 if hot else 0.6)
        _text(sketch, x + side / 2, base + 1.2, labels[name], va="top", fontweight="bold" if hot else "normal")
        x += max(side, 14) + 4
    _text(sketch, x, base - 2, "area ∝ bytes per token", ha="left", va="bottom", color="0.3")
    sketch.finish()
    ax.set_xlim(-22, max(n_h, x + 22) + 1)
    ax.set_ylim(base + 8, -2)
    ax.set_title(title or "", fontsize=11)
    return ax


def _arrow(sketch, a, b, color="0.2"):
    sketch["arrow"].take(color=color).set_positions(a, b)


def plot_mla_fanout(ax, kv_lora_rank: int, qk_rope_head_dim: int, head_dim: int, num_heads: int,
                    shown: int = 3, title: str | None = None):
    """Cached latent c (d_c) and RoPE key k^R (d_h^R) on the left; per-head keys (above) and values
    (below) rebuilt from the latent on the right. Box widths are proportional to vector lengths."""
    sketch = reuse(ax, "mla_fanout", ()) or keep(ax, "mla_fanout", (), _sketch(ax, "mla_fanout"))
    u = 40 / max(kv_lora_rank, head_dim)  # data units per element
    lw, rw, hw = kv_lora_rank * u, max(qk_rope_head_dim * u, 1.0), head_dim * u
    # keys above the latent, values below; the heads' column stays put however narrow the latent gets
    y_lat, x_k = 7 * shown + 1, max(lw, rw, 40) + 18
    latent = f"latent $c^{{KV}}$: $d_c$ = {kv_lora_rank}"
    _box(sketch, 0, y_lat, lw, 5, latent if lw >= 30 else "", "tab:blue")
    if lw < 30:  # too narrow to hold its label: write it below
        _text(sketch, 0, y_lat + 6, latent, ha="left", va="top", fontsize=9)
    _box(sketch, 0, 2, rw, 5, "", "tab:purple")
    _text(sketch, 0, 8, f"RoPE key $k^R$: $d_h^R$ = {qk_rope_head_dim},\nRoPE applied before caching",
          ha="left", va="top", fontsize=8)
    for i in range(shown):
        h = "h" if i == shown - 1 else str(i + 1)
        y_k, y_v = i * 7, y_lat + 7 + i * 7
        _box(sketch, x_k, y_k, hw, 5, f"$k^C_{{{h}}}$", "tab:green")
        _box(sketch, x_k + hw, y_k, rw, 5, "$k^R$" if rw >= 3 else "", "tab:purple", fontsize=7)
        _box(sketch, x_k, y_v, hw, 5, f"$v_{{{h}}}$", "tab:orange")
        _arrow(sketch, (lw, y_lat + 2.5), (x_k, y_k + 2.5))
        _arrow(sketch, (lw, y_lat + 2.5), (x_k, y_v + 2.5), color="tab:orange")
    white = dict(fc="white", ec="none", pad=0.5)
    _text(sketch, x_k - 8, y_lat - 4.5, "$W^{UK}_h$", va="baseline", fontsize=10, bbox=white)
    _text(sketch, x_k - 8, y_lat + 10.5, "$W^{UV}_h$", va="baseline", fontsize=10, color="tab:orange", bbox=white)
    right = x_k + hw + rw + 2
    _text(sketch, right, 2.5 + 7 * (shown - 1) / 2, f"key of head h = [$k^C_h$ ; $k^R$]:\n{head_dim} + "
          f"{qk_rope_head_dim} elements, $k^R$ the same\nin every head", ha="left", fontsize=8)
    _text(sketch, right, y_lat + 9.5 + 7 * (shown - 1) / 2, f"value of head h:\n{head_dim} elements", ha="left",
          fontsize=8)
    bottom = y_lat + 7 * (shown + 1)
    _text(sketch, 0, bottom, f"cached per token and layer: {kv_lora_rank} + {qk_rope_head_dim} = "
          f"{kv_lora_rank + qk_rope_head_dim:,} elements", ha="left", va="top", fontweight="bold")
    _text(sketch, 0, bottom + 3.5, f"Rebuilt for each of the {num_heads} heads (materialized path), or never built: "
          "fold $W^{UK}_h$ into the query\nand $W^{UV}_h$ into the output (absorbed path). "
          "$k^R$ keeps RoPE out of $W^{UK}_h$, so the fold stays valid.", ha="left", va="top", fontsize=8,
          color="0.25")
    sketch.finish()
    ax.set_xlim(-1, right + 30)
    ax.set_ylim(bottom + 10, -2)
    ax.set_title(title or "", fontsize=11)
    return ax


def _build_bytes_per_token(ax, shape):
    n_labels, names, log = shape
    ax.clear()
    x = np.arange(n_labels)
    width = 0.8 / len(names)
    value = dict(xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    bars, values = [], []
    for i, name in enumerate(names):
        container = ax.bar(x + (i - (len(names) - 1) / 2) * width, np.ones(n_labels), width, label=name,
                           color=f"C{i}")
        bars.append(container)
        values.append([ax.annotate("", (b.get_x() + b.get_width() / 2, 0), **value) for b in container])
    notes = [ax.annotate("", (xi, 0), xytext=(0, 14), textcoords="offset points", ha="center", fontsize=9,
                         fontweight="bold") for xi in x]
    if log:
        log_scale(ax, "y")
    ax.set_ylabel("KV cache bytes per token")
    ax.grid(alpha=0.3, axis="y")
    if len(names) > 1:
        add_legend(ax, loc="upper right", fontsize=9)
    return keep(ax, "bytes_per_token", shape, {"bars": bars, "values": values, "notes": notes})


def plot_bytes_per_token(ax, labels, series: dict, notes=None, title: str | None = None, log: bool = True):
    """Grouped bars of bytes per token: one group per label, one bar per series (e.g. formula, measured).

    ``notes`` (one string per label) are written above the group, e.g. the share of MHA.
    """
    shape = (len(labels), tuple(series), log)
    art = reuse(ax, "bytes_per_token", shape) or _build_bytes_per_token(ax, shape)
    tops = np.zeros(len(labels))
    for bars, texts, values in zip(art["bars"], art["values"], series.values()):
        values = np.asarray(values, dtype=float)
        for b, text, v in zip(bars, texts, values):
            b.set_height(v)
            text.set_text(format_bytes(v))
            text.xy = (text.xy[0], v)
        tops = np.maximum(tops, values)
    notes = list(notes or [])
    for i, (text, top) in enumerate(zip(art["notes"], tops)):
        text.set_text(notes[i] if i < len(notes) else "")
        text.xy = (i, top)
    ax.set_xticks(np.arange(len(labels)), labels)
    if log:
        ax.set_ylim(max(tops.min() / 3, 1), tops.max() * 12)
    else:
        ax.set_ylim(0, tops.max() * 1.25)
    ax.set_title(title or "", fontsize=11)
    return ax


PATH_COLORS = {"absorbed": "tab:blue", "materialized": "tab:orange"}
POINT_MARKERS = ("s", "D", "^", "o")


def plot_mla_path_costs(ax_flops, ax_bytes, curves: dict, title: str | None = None):
    """Two log-log panels of one MLA call's cost against L: solid lines at the largest C, dashed at C = 0;
    a vertical line at each crossover; the named calls as markers, filled in the colour of the path chosen."""
    L, by_c = curves["L"], curves["curves"]
    cs = sorted(by_c)
    for ax, key, unit in ((ax_flops, "flops", "FLOPs"), (ax_bytes, "bytes", "bytes read + written")):
        ax.clear()
        for C in cs:
            style = "-" if C == cs[-1] else "--"
            for path, color in PATH_COLORS.items():
                ax.plot(L, by_c[C][path][key], style, color=color, lw=2 if style == "-" else 1.2,
                        label=f"{path}, C = {C:,} cached")
        for C in cs:
            x = curves["crossover"][C]
            if x is not None:
                ax.axvline(x, color="0.4", lw=1, ls="-" if C == cs[-1] else "--")
                last = C == cs[-1]      # the C = max label left of its line, the others right of theirs
                ax.annotate(f"crossover\nL = {x:,}\n(C = {C:,})", (x, 0.02), xycoords=("data", "axes fraction"),
                            xytext=(-4 if last else 4, 0), textcoords="offset points", fontsize=7, color="0.3",
                            va="bottom", ha="right" if last else "left")
        for marker, row in zip(POINT_MARKERS, curves["points"]):
            y = row[f"{row['path']}_{key}"]
            ax.plot([row["query_tokens"]], [y], marker, ms=8, color=PATH_COLORS[row["path"]], mec="black",
                    label=f"{row['label']} → {row['path']}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("query tokens per call L")
        ax.set_ylabel(f"{unit} per layer")
        ax.grid(alpha=0.3, which="both")
    ax_flops.set_title("compute", fontsize=10)
    ax_bytes.set_title("memory traffic", fontsize=10)
    handles, labels = ax_flops.get_legend_handles_labels()
    add_legend(ax_flops.figure, handles, labels, loc="outside lower center", ncol=3, fontsize=7.5)
    if title:
        ax_flops.figure.suptitle(title, fontsize=11)
    return ax_flops, ax_bytes
