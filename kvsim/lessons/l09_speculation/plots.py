"""Lesson 09 (speculative decoding and rewind): drawing only (calc and kvsim.ui.style); every function takes
computed numbers and an Axes.

Plots of speculative decoding: acceptance and tokens per target pass against the draft length k.

:func:`plot_against_k` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.ui.style.reuse`).

Lesson 09's picture: one draft → verify → accept / rewind round on the target's cache.

Drawing only: the offsets come from :func:`kvsim.lessons.l09_speculation.data.round_stages`. The picture is built
once per Axes and redrawn by re-styling its cells (:class:`kvsim.ui.style.Sketch`).

Static pictures of the decode-lookahead memory (:func:`plot_lookahead_rows`) and of a padded prefill's mask
(:func:`plot_padded_mask`); each clears its Axes and draws once.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle

from ...ui.style import add_legend, Sketch, clear_for, decorate, keep, label_inward, reuse


def _build_against_k(ax, shape):
    n_series, n_expected, n_marks = shape
    ax.clear()
    return keep(ax, "against_k", shape, {
        "series": [ax.plot([], [], marker="o", color=f"C{i}", lw=1.5)[0] for i in range(n_series)],
        "expected": [ax.plot([], [], "--", color=f"C{i}", lw=1.2)[0] for i in range(n_expected)],
        "marks": [(ax.plot([], [], "*", color="black", ms=12)[0],
                   ax.annotate("", (0, 0), xytext=(8, 4), textcoords="offset points", fontsize=9))
                  for _ in range(n_marks)]})


def plot_against_k(ax, series: dict, expected: dict | None = None, ylabel: str = "", title: str | None = None,
                   ylim: tuple | None = None, marks: dict | None = None):
    """Measured ``series`` {label: (k, y)} as markers and lines; ``expected`` {label: (k, y)} dashed.

    ``marks`` {label: (k, y)} are single labelled points (e.g. the best k), labelled towards the middle.
    """
    expected, marks = expected or {}, marks or {}
    art = reuse(ax, "against_k", shape := (len(series), len(expected), len(marks))) or _build_against_k(ax, shape)
    for line, (label, (k, y)) in zip(art["series"] + art["expected"], list(series.items()) + list(expected.items())):
        line.set_data(np.asarray(k, dtype=float), np.asarray(y, dtype=float))
        line.set_label(label)
    ks = np.concatenate([np.asarray(k, dtype=float) for k, _ in series.values()])
    for (star, note), (label, (x, y)) in zip(art["marks"], marks.items()):
        star.set_data([x], [y])
        note.set_text(label)
        note.xy = (x, y)
        label_inward(note, x, ks.min(), ks.max(), dx=8, dy=4)  # never past the first or last k
    decorate(ax, xlabel="draft tokens proposed per round (k)", ylabel=ylabel, xlim=None,
             ylim=(0, None) if ylim is None else ylim, legend_loc="best", title=title)
    return ax


COLORS = {"cache": "0.8", "last": "gold", "draft": "tab:blue", "ok": "tab:green", "no": "tab:red",
          "gone": "0.93", "own": "orange"}
SHOWN = 3  # cached positions shown before the round's first one


def _build(ax):
    clear_for(ax, "draft_round")
    sketch = Sketch(cell=lambda: ax.add_patch(Rectangle((0, 0), 1, 1, lw=1.2)),
                    text=lambda: ax.text(0, 0, "", ha="center", va="center", fontsize=8))
    art = {"sketch": sketch, "rows": [ax.text(-0.4, i * 1.6 + 0.5, "", ha="right", va="center", fontsize=9)
                                      for i in range(5)],
           "trim": ax.plot([], [], color="tab:red", lw=2)[0], "P": ax.plot([], [], color="black", lw=1, ls=":")[0],
           "P_label": ax.text(0, 7.6, "", ha="center", va="top", fontsize=8)}
    handles = [Patch(fc=COLORS[c], ec="0.5", label=t) for c, t in (
        ("cache", "in the target's cache"), ("last", "last token (fed next)"), ("draft", "draft proposal"),
        ("ok", "accepted"), ("no", "first rejection"), ("own", "target's own token"))]
    add_legend(ax, handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False)
    ax.set_ylim(9.8, -0.6)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return keep(ax, "draft_round", (), art)


def _cell(sketch, x, y, text, color, hatch=None, edge="white", text_color="black"):
    sketch["cell"].take(xy=(x, y), facecolor=color, edgecolor=edge, hatch=hatch)
    sketch["text"].take(x=x + 0.5, y=y + 0.5, text=text, color=text_color)


def plot_round(ax, r, title: str | None = None):
    """Five rows (before, draft, verify, trim, next round); columns are positions P-3 .. P+k+1.

    Cells come from pools kept on the Axes (:class:`kvsim.ui.style.Sketch`): a redraw creates no artist."""
    art = reuse(ax, "draft_round", ()) or _build(ax)
    sketch = art["sketch"]
    p, k, n = r.offset_before, r.num_draft, r.accepted
    x = {pos: i for i, pos in enumerate(range(p - SHOWN, p + k + 2))}  # position -> column
    rows = ["before the round", f"draft proposes k = {k}", "target verifies k + 1\nin one pass",
            f"trim({r.trimmed}): offset back\nto P + n + 1 = {r.offset_after}",
            f"next round: t{n} is\nthe new last token"]
    for text, label in zip(art["rows"], rows):
        text.set_text(label)
    for pos in range(p - SHOWN, p):  # row 0: what the cache holds, and the last token (not yet cached)
        _cell(sketch, x[pos], 0, "", COLORS["cache"])
    _cell(sketch, x[p], 0, "last", COLORS["last"])
    for i in range(1, k + 1):  # row 1: drafts at positions p + i
        _cell(sketch, x[p + i], 1.6, f"d{i}", COLORS["draft"], text_color="white")
    y = 3.2  # row 2: the verify pass writes positions p .. p+k; mark each draft's fate
    for pos in range(p - SHOWN, p):
        _cell(sketch, x[pos], y, "", COLORS["cache"])
    _cell(sketch, x[p], y, "last", COLORS["last"], edge="black")
    for i in range(1, k + 1):
        fate = "ok" if i <= n else "no" if i == n + 1 else "gone"
        _cell(sketch, x[p + i], y, f"d{i} " + {"ok": "✓", "no": "✗", "gone": ""}[fate], COLORS[fate], edge="black",
              text_color="white" if fate != "gone" else "0.4")
    y = 4.8  # row 3: after the trim the rows past the offset are stale until overwritten
    for pos in range(p - SHOWN, p + n + 1):
        _cell(sketch, x[pos], y, "", COLORS["cache"])
    for pos in range(p + n + 1, p + k + 1):
        _cell(sketch, x[pos], y, "stale", "white", hatch="//", edge="0.7", text_color="0.5")
    art["trim"].set_data([x[p + n + 1]] * 2, [y - 0.2, y + 1.2])
    y = 6.4  # row 4: the target's own token is the next round's last token
    for pos in range(p - SHOWN, p + n + 1):
        _cell(sketch, x[pos], y, "", COLORS["cache"])
    _cell(sketch, x[p + n + 1], y, f"t{n}", COLORS["own"])
    sketch.finish()
    art["P"].set_data([x[p], x[p]], [-0.3, 7.5])
    art["P_label"].set(x=x[p], text=f"P = {p}")
    ax.set_xlim(-8, len(x) + 0.3)
    ax.set_title(title or "", fontsize=11)
    return ax


def plot_lookahead_rows(ax, k, lines: dict, title: str | None = None):
    """Rows kept beyond the ring against the lookahead depth k; ``lines`` {label: (rows, style)}."""
    ax.clear()
    for label, (rows, style) in lines.items():
        ax.plot(np.asarray(k), np.asarray(rows), style, lw=2, ms=6, label=label)
    ax.set_xticks(np.asarray(k))
    return decorate(ax, xlabel="speculative one-token appends to undo (k)",
                    ylabel="rows kept beyond the W-row ring", title=title, xlim=(0.5, k[-1] + 0.5),
                    ylim=(-0.3, None), legend_loc="upper left")


MASK_COLORS = ("white", "tab:blue", "0.75", "tab:orange")   # hidden, real, pad row, pad key


def plot_padded_mask(ax, codes: np.ndarray, prompt_tokens: int, names: dict, title: str | None = None):
    """The (M, M) mask of a padded prefill: rows queries, columns keys; a line where the pads begin."""
    ax.clear()
    m = codes.shape[0]
    palette = np.array([to_rgba(c) for c in MASK_COLORS])
    ax.pcolormesh(np.arange(m + 1), np.arange(m + 1), palette[codes], edgecolors="white", linewidth=1)
    for pos in (prompt_tokens,):
        ax.axvline(pos, color="black", lw=1.5, ls="--")
        ax.axhline(pos, color="black", lw=1.5, ls="--")
    ticks = np.arange(m) + 0.5
    labels = [str(t) if t < prompt_tokens else f"pad" for t in range(m)]
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlim(0, m)
    ax.set_ylim(m, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    handles = [Patch(fc=MASK_COLORS[c], ec="0.5", label=names[c]) for c in sorted(names) if c]
    add_legend(ax, handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    ax.set_title(title or "", fontsize=10)
    return ax
