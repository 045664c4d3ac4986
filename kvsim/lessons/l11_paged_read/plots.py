"""Lesson 11 (how a paged cache is read): drawing only (calc and kvsim.ui.style); every function takes computed
numbers (rows of :mod:`kvsim.lessons.l11_paged_read.data`) and an Axes.

Pictures: bytes copied and read per decode step against context (gather vs block table); bytes read
against the fraction of pages kept (sparse page indirection); bytes per step of a cascade group against
its shared pages, the gate's thresholds marked; the H200's measured cascade step time against fused dense
attention; blocks of GPU work against the number of split-K chunks.

The lines of a picture are built once per Axes and shape and then only get new data
(:func:`kvsim.ui.style.reuse`), so a view redraws without clearing the Axes.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ...ui.style import clear_for, decorate, keep, legend_below, reuse, set_fill_between

GIB = 2**30
PATH_COLORS = {"gather": "tab:red", "block_table": "tab:blue"}
CASE_COLORS = {"cascade": "tab:green", "dense (explicit)": "tab:orange", "dense (mx.fast sdpa)": "tab:blue"}
RUN_STYLES = ("-", ":")


def _k_tokens(ax, xs):
    """Log-2 x axis with ticks at ``xs`` read as 1K, 2K, ..."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(xs)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1024:g}K" if v >= 1024 else f"{v:g}"))


def _lines(ax, key, styles):
    """Lines of ``styles`` [(color, linestyle, marker, label[, linewidth, alpha])] on a cleared Axes, kept
    under ``key``."""
    clear_for(ax, key)
    return keep(ax, key, len(styles), {"lines": [ax.plot([], [], color=c, ls=s, marker=m, ms=5, label=lab,
                                                         lw=rest[0] if rest else 1.6, alpha=rest[1] if rest else 1)[0]
                                                 for c, s, m, lab, *rest in styles]})


def plot_copy_vs_context(ax, rows, title: str | None = None):
    """Bytes one decode step copies (solid) and reads (dashed) per path against context (GiB, all layers)."""
    styles = [(PATH_COLORS["gather"], "-", "o", "gather: copied"), (PATH_COLORS["gather"], "--", None, "gather: read"),
              (PATH_COLORS["block_table"], "-", "s", "block table: copied (none)"),
              (PATH_COLORS["block_table"], "-", None, "block table: read (as many bytes as gather copies)", 6, 0.35)]
    art = reuse(ax, "copy_vs_context", 4) or _lines(ax, "copy_vs_context", styles)
    contexts = sorted({r["context"] for r in rows})
    for i, (path, what) in enumerate((("gather", "copied_bytes"), ("gather", "read_bytes"),
                                      ("block_table", "copied_bytes"), ("block_table", "read_bytes"))):
        ys = [r[what] / GIB for r in rows if r["path"] == path]
        art["lines"][i].set_data(contexts, ys)
    _k_tokens(ax, contexts)
    decorate(ax, xlabel="context (tokens)", ylabel="GiB per decode step (all layers)", title=title, xlim=None,
             legend_loc="upper left")
    return ax


def plot_sparse(ax, rows, title: str | None = None):
    """Bytes read through the block table against the fraction of pages kept; dense (every page) dashed."""
    art = reuse(ax, "sparse", 2) or _lines(ax, "sparse", [("tab:purple", "-", "o", "kept pages only"),
                                                         ("0.4", "--", None, "every page (dense)")])
    f = [r["fraction"] for r in rows]
    art["lines"][0].set_data(f, [r["read_bytes"] / GIB for r in rows])
    art["lines"][1].set_data(f, [r["dense_bytes"] / GIB for r in rows])
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(f))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "1" if v >= 1 else f"1/{round(1 / v)}"))
    decorate(ax, xlabel="fraction of pages kept", ylabel="GiB read per decode step (all layers)", title=title,
             xlim=None, legend_loc="upper left")
    return ax


def plot_cascade(ax, rows, min_shared_pages: int, title: str | None = None, mark_pages: int | None = None):
    """Dense vs cascade bytes per step against whole shared pages; the gate's open range shaded, its minimum
    shared pages and the break-even (cascade's extra partial paid back) as vertical lines."""
    art = reuse(ax, "cascade", ()) or _build_cascade(ax)
    p = np.array([r["shared_pages"] for r in rows], dtype=float)
    dense = np.array([r["dense_bytes"] for r in rows]) / GIB
    cascade = np.array([r["cascade_bytes"] for r in rows]) / GIB
    art["dense"].set_data(p, dense)
    art["cascade"].set_data(p, cascade)
    top = 1.08 * max(dense.max(), cascade.max())
    gate = np.array([r["gate_open"] for r in rows])
    if gate.any():  # the gate opens from some page on and stays open (pages only grow past min_shared_pages)
        set_fill_between(art["gate"], [p[gate].min(), p.max()], [top, top], [0.0, 0.0])
    art["gate"].set_visible(bool(gate.any()))
    art["min_pages"].set_data([min_shared_pages] * 2, [0, top])
    even = rows[0]["break_even_pages"]
    art["even"].set_data([even if even is not None else np.nan] * 2, [0, top])
    art["even"].set_visible(even is not None)
    art["mark"].set_data([mark_pages] * 2 if mark_pages is not None else [np.nan] * 2, [0, top])
    art["mark"].set_visible(mark_pages is not None)
    for name, label in (("gate", "gate open"), ("even", "break-even pages"), ("mark", "lesson 07's prompt")):
        art[name].set_label(label if art[name].get_visible() else f"_{label}")   # hidden: not in the legend
    decorate(ax, xlabel="whole pages the group shares", ylabel="GiB read per decode step (all layers)",
             title=title, xlim=(0, p.max()), ylim=(0, top), legend_loc=None)
    legend_below(ax, ncol=3, fontsize=8)
    return ax


def _build_cascade(ax):
    clear_for(ax, "cascade")
    return keep(ax, "cascade", (), {
        "gate": ax.fill_between([0, 1], [0, 0], [0, 0], color="tab:green", alpha=0.12, lw=0, label="gate open"),
        "dense": ax.plot([], [], color="tab:orange", lw=1.8, label="dense: every row reads the prefix")[0],
        "cascade": ax.plot([], [], color="tab:green", lw=1.8, label="cascade: prefix once + extra partial")[0],
        "min_pages": ax.plot([], [], color="black", ls="--", lw=1, label="min shared pages")[0],
        "even": ax.plot([], [], color="tab:red", ls=":", lw=1.4, label="break-even pages")[0],
        "mark": ax.plot([], [], color="0.5", ls="-.", lw=1, label="lesson 07's prompt")[0]})


def plot_gpu_cascade(ax, rows, title: str | None = None):
    """Measured step time against group size per case; one line style per benchmark run."""
    runs = list(dict.fromkeys(r["run"] for r in rows))
    cases = list(dict.fromkeys(r["case"] for r in rows))
    clear_for(ax, "gpu_cascade")
    for j, run in enumerate(runs):
        for case in cases:
            pts = sorted((r["sequences"], r["step_us"]) for r in rows if r["run"] == run and r["case"] == case)
            ax.plot(*zip(*pts), color=CASE_COLORS.get(case, "0.3"), ls=RUN_STYLES[j % len(RUN_STYLES)], marker="o",
                    ms=4, label=f"{case} ({run})")
    xs = sorted({r["sequences"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(xs))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    decorate(ax, xlabel="sequences sharing the prefix", ylabel="µs per decode step (one layer)", title=title,
             xlim=None, legend_loc=None)
    legend_below(ax, ncol=2, fontsize=8)
    return ax


def plot_split_k(ax, rows, sms: int, title: str | None = None):
    """Blocks of GPU work against the number of chunks S (log 2), the SM count as a line (K/V bytes: the title)."""
    art = reuse(ax, "split_k", 2) or _lines(ax, "split_k", [
        ("tab:blue", "-", "o", "blocks of work (sequence × query head × chunk)"),
        ("black", "--", None, "streaming multiprocessors")])
    s = [r["splits"] for r in rows]
    art["lines"][0].set_data(s, [r["work_blocks"] for r in rows])
    art["lines"][1].set_data(s, [sms] * len(s))
    ax.set_yscale("log", base=2)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(s))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    decorate(ax, xlabel="chunks S (MLXCEL_PAGED_DECODE_SPLITS)", ylabel="blocks of threads (log scale)", title=title,
             xlim=None, ylim=None, legend_loc=None)
    legend_below(ax, ncol=2, fontsize=8)
    return ax
