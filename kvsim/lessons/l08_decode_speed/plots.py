"""Lesson 08 (decode is memory-bound): drawing only (calc and kvsim.ui.style); every function takes computed
numbers and an Axes.

Plots of decode speed: the bandwidth floor of a served model, and bytes stored against bytes read.

:func:`plot_step_floor` updates the artists of an earlier call on the same Axes in place
(:func:`kvsim.ui.style.reuse`).

Plots of decode on the roofline: rooflines with marked intensities, step times against their floors.

Drawing only: every number comes in from :mod:`kvsim.calc` (roofline, phases, h200) or from a
measurement. :func:`plot_roofline`, :func:`plot_time_and_floors` and :func:`plot_variants` update the
artists of an earlier call on the same Axes in place (:func:`kvsim.ui.style.reuse`).

:func:`plot_step_breakdown`: one stacked bar per context (parts of a measured step), with ticks for other
steps measured beside it.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullLocator

from ...calc.units import UNIT_BYTES
from ...ui.style import add_legend, decorate, keep, label_level, reuse

_K = FuncFormatter(lambda v, _: f"{v / 1024:,.4g}K" if v else "0")  # token counts: 32768 -> 32K


def _merged(stored: dict, read: dict) -> list[tuple[str, np.ndarray, bool]]:
    """Curves with equal values drawn once: [(label naming every method it stands for, y, stored?)]."""
    out: list[tuple[list, list, np.ndarray]] = []
    for kind, series in (("stored", stored), ("read", read)):
        for label, y in series.items():
            y = np.asarray(y, dtype=float)
            same = next((c for c in out if np.array_equal(c[2], y)), None)
            if same is None:
                out.append(([], [], y))
                same = out[-1]
            (same[0] if kind == "stored" else same[1]).append(label)
    return [("; ".join(f"{kind}: {', '.join(names)}" for kind, names in (("stored", s), ("read per step", r)) if names),
             y, bool(s)) for s, r, y in out]


def plot_stored_vs_read(ax, tokens, stored: dict, read: dict, unit: str = "GiB", title: str | None = None):
    """Bytes kept in the cache (solid) and bytes one decode step reads (dashed) against tokens, both axes
    logarithmic; curves that coincide are drawn once, labelled with every method they stand for (one legend
    entry per visible line)."""
    ax.clear()
    s = UNIT_BYTES[unit]
    t = np.asarray(tokens, dtype=float)
    for i, (label, y, is_stored) in enumerate(_merged(stored, read)):
        ax.plot(t, y / s, "-" if is_stored else "--", color=f"C{i}", lw=2, label=label)
    ax.set_xscale("log", base=2)                            # log-log: the reads, 1/16 of the stored bytes or
    ax.set_yscale("log")                                    # less, stay apart from the stored lines
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(_K)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    decorate(ax, xlabel="tokens in the sequence (log scale)", ylabel=f"bytes ({unit}, log scale)",
             xlim=(t[0], t[-1]), ylim=(None, None), legend_fontsize=8, title=title)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 8)                                  # headroom for the legend above the lines
    return ax


def _build_step_floor(ax, shape):
    n_curves, n_hlines, has_point = shape
    ax.clear()
    return keep(ax, "step_floor", shape, {
        "curves": [ax.plot([], [], ["-", "--"][i % 2], color=f"C{i}", lw=2)[0] for i in range(n_curves)],
        # the point's label above and left of the point (the curve comes from below)
        "hlines": [(ax.axhline(0, color="grey", ls=":", lw=1.5),
                    ax.annotate("", (0, 0), xytext=(-4, -4), textcoords="offset points", color="dimgrey",
                                fontsize=9)) for _ in range(n_hlines)],
        "point": (ax.plot([], [], "o", color="black", ms=5)[0],
                  ax.annotate("", (0, 0), xytext=(-8, 6), textcoords="offset points", fontsize=9, ha="right",
                              va="bottom")) if has_point else None})


def plot_step_floor(ax, tokens, curves: dict, hlines: dict | None = None, point: tuple | None = None,
                    title: str | None = None):
    """Lower bounds on step time (ms) against context; ``point`` = (x, y_ms, label) marks the chosen context."""
    hlines = hlines or {}
    t = np.asarray(tokens, dtype=float)
    shape = (len(curves), len(hlines), point is not None)
    art = reuse(ax, "step_floor", shape) or _build_step_floor(ax, shape)
    for line, (label, y) in zip(art["curves"], curves.items()):
        line.set_data(t, np.asarray(y, dtype=float))
        line.set_label(label)
    top = max([float(np.max(y)) for y in curves.values()] + list(hlines.values()))
    for (line, note), (label, level) in zip(art["hlines"], hlines.items()):
        line.set_ydata([level, level])
        note.set_text(label)
    if point is not None:
        x, y, label = point
        art["point"][0].set_data([x], [y])
        art["point"][1].set_text(label)
        art["point"][1].xy = (x, y)
    ax.set_xticks(np.linspace(0, t[-1], 5))
    ax.xaxis.set_major_formatter(_K)
    decorate(ax, xlabel="tokens in each sequence's cache", ylabel="minimum step time (ms)", xlim=(0, t[-1]),
             ylim=(0, 1.1 * top), title=title)
    for (_, note), level in zip(art["hlines"], hlines.values()):
        label_level(note, level, [line.get_data() for line in art["curves"]])
    return ax


ROOF_COLORS = ("tab:blue", "tab:red", "tab:purple")
MARK_COLORS = ("tab:green", "tab:orange", "tab:brown")
POINT_MARKERS = ("o", "s", "^", "D", "v")
FLOOR_STYLES = ("--", ":", "-.")


def _flops_label(v, _=None) -> str:
    """1e12 -> '1 T', 3e9 -> '3 G': FLOP/s with an SI prefix."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1, "")):
        if v >= scale:
            return f"{v / scale:g} {prefix}"
    return f"{v:g}"


def _decades(lo: float, hi: float) -> tuple[float, float]:
    return 10.0 ** np.floor(np.log10(lo)), 10.0 ** np.ceil(np.log10(hi))


def _build_roofline(ax, shape):
    roofs, n_marks, points = shape
    ax.clear()
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_locator(NullLocator())  # minor ticks over 8 decades: hundreds of artists per render
    ax.yaxis.set_major_formatter(FuncFormatter(_flops_label))
    ax.set_xlabel("arithmetic intensity (FLOPs per byte read)")
    ax.set_ylabel("attainable FLOP/s")
    return keep(ax, "roofline", shape, {
        "roofs": [ax.plot([], [], "-", color=ROOF_COLORS[i % 3], lw=2.2)[0] for i in range(len(roofs))],
        "ridges": [(ax.plot([], [], "o", color=ROOF_COLORS[i % 3], ms=6)[0],
                    ax.annotate("", (1, 1), xytext=(6, -14), textcoords="offset points", fontsize=9,
                                color=ROOF_COLORS[i % 3])) for i in range(len(roofs))],
        "marks": [ax.axvline(1, color=MARK_COLORS[i % 3], ls="--", lw=1.6) for i in range(n_marks)],
        "points": [ax.plot([], [], POINT_MARKERS[i % 5], color="black", mfc="none" if i else "black", ms=6)[0]
                   for i in range(len(points))]})


def plot_roofline(ax, roofs: dict, marks: dict, points: dict | None = None, title: str | None = None):
    """Rooflines min(peak, I · bandwidth) for ``roofs`` {label: (bytes/s, FLOP/s)}, their ridges, vertical
    lines at ``marks`` {label: intensity}, and measured ``points`` {label: (intensities, FLOP/s)}."""
    points = points or {}
    shape = (tuple(roofs), len(marks), tuple(points))
    art = reuse(ax, "roofline", shape) or _build_roofline(ax, shape)
    ridges = [f / b for b, f in roofs.values()]
    xs = ridges + list(marks.values()) + [float(v) for x, _ in points.values() for v in np.atleast_1d(x)]
    x_lo, x_hi = _decades(min(xs) / 3, max(xs) * 3)
    grid = np.geomspace(x_lo, x_hi, 200)
    for line, (label, (bw, peak)) in zip(art["roofs"], roofs.items()):
        line.set_data(grid, np.minimum(peak, grid * bw))
        line.set_label(label)
    for (dot, note), ridge, (bw, peak) in zip(art["ridges"], ridges, roofs.values()):
        dot.set_data([ridge], [peak])
        note.xy = (ridge, peak)
        note.set_text(f"ridge {ridge:,.3g} FLOP/B")
    for line, (label, x) in zip(art["marks"], marks.items()):
        line.set_xdata([x, x])
        line.set_label(label)
    for line, (label, (x, y)) in zip(art["points"], points.items()):
        line.set_data(np.atleast_1d(x), np.atleast_1d(y))
        line.set_label(label)
    ys = [peak for _, peak in roofs.values()] + [float(v) for _, y in points.values() for v in np.atleast_1d(y)]
    y_lo = min([x_lo * bw for bw, _ in roofs.values()] + ys)
    decorate(ax, xlim=None, ylim=None, title=title, legend_loc="upper left", legend_fontsize=8)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(*_decades(y_lo, max(ys) * 30))  # headroom above the roofs for the legend
    return ax


def _build_floors(ax, shape, xlabel, ylabel, logx, logy):
    n_measured, n_floors, n_vlines = shape[:3]
    ax.clear()
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return keep(ax, "time_and_floors", shape, {
        "measured": [ax.plot([], [], "-" + POINT_MARKERS[i % 5], color=f"C{i}", lw=1.5, ms=6)[0]
                     for i in range(n_measured)],
        "floors": [ax.plot([], [], FLOOR_STYLES[i % 3], color="black", lw=1.3)[0] for i in range(n_floors)],
        "vlines": [(ax.axvline(1, color="grey", lw=1, alpha=0.8),
                    ax.annotate("", (1, 1), xycoords=("data", "axes fraction"), xytext=(-4, -4),
                                textcoords="offset points", ha="right", va="top", fontsize=9, color="dimgrey",
                                rotation=90, bbox=dict(fc="white", ec="none", alpha=0.85, pad=1)))
                   for _ in range(n_vlines)]})


def plot_time_and_floors(ax, measured: dict, floors: dict, vlines: dict | None = None, xlabel: str = "",
                         ylabel: str = "decode step time (ms)", title: str | None = None, logx: bool = True,
                         logy: bool = False, ylim: tuple | None = None):
    """Measured step times {label: (x, ms)} (markers) against floors {label: (x, ms)} (black, dashed/dotted);
    ``vlines`` {label: x} mark a value of x (e.g. where memory is full); ``ylim`` fixed y limits (a view whose
    tick labels keep their width keeps its layout), else from the data."""
    vlines = vlines or {}
    shape = (len(measured), len(floors), len(vlines), logx, logy, xlabel, ylabel)
    art = reuse(ax, "time_and_floors", shape) or _build_floors(ax, shape, xlabel, ylabel, logx, logy)
    for line, (label, (x, y)) in zip(art["measured"] + art["floors"], {**measured, **floors}.items()):
        line.set_data(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
        line.set_label(label)
    for (line, note), (label, x) in zip(art["vlines"], vlines.items()):
        line.set_xdata([x, x])
        note.xy = (x, 1)
        note.set_text(label)
    # a series may be empty
    xs = np.concatenate([np.asarray(x, dtype=float) for x, _ in {**measured, **floors}.values()])
    ys = np.concatenate([np.asarray(y, dtype=float) for _, y in {**measured, **floors}.values()])
    decorate(ax, xlim=None, ylim=None, title=title, legend_fontsize=8)
    ax.set_xlim(xs.min() / 1.3, xs.max() * 1.3) if logx else ax.set_xlim(0, xs.max() * 1.05)
    lo, hi = ax.get_xlim()
    for (line, note), x in zip(art["vlines"], vlines.values()):
        line.set_visible(lo <= x <= hi)                      # a mark beyond the data is not drawn at all
        note.set_visible(lo <= x <= hi)
    top = float(np.nanmax(ys))
    if ylim is not None:
        ax.set_ylim(*ylim)
    elif logy:
        ax.set_ylim(float(np.nanmin(ys[ys > 0])) / 2, top * 8)  # headroom for the legend
    else:
        ax.set_ylim(0, top * 1.35)
    return ax


def plot_time_vs_bytes(ax, series: dict, bytes_per_s: float, floor_label: str, title: str | None = None):
    """Step time (ms) against bytes read (GB), one marker style per series {label: (bytes, ms)}, with the
    floor time = bytes / bandwidth and twice it."""
    ax.clear()
    top = max(float(np.max(b)) for b, _ in series.values()) * 1.08
    x = np.array([0.0, top])
    ax.plot(x / 1e9, 1e3 * x / bytes_per_s, "--", color="black", lw=1.3, label=floor_label)
    ax.plot(x / 1e9, 2e3 * x / bytes_per_s, ":", color="grey", lw=1.3, label="twice the floor")
    for i, (label, (b, ms)) in enumerate(series.items()):
        ax.plot(np.asarray(b, dtype=float) / 1e9, ms, POINT_MARKERS[i % 5], color=f"C{i}", ms=6, label=label,
                mfc="none" if i % 2 else f"C{i}")
    decorate(ax, xlabel="bytes read per step: weights + cache (GB)", ylabel="decode step time (ms)",
             xlim=(0, top / 1e9), title=title, legend_fontsize=8)
    return ax


def _build_variants(ax, shape):
    ax.clear()
    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1024:g}K"))
    ax.set_xlabel("tokens in the cache")
    ax.set_ylabel("decode step time (ms)")
    return keep(ax, "variants", shape, {
        "kvsim": [ax.plot([], [], "-o", color=f"C{i}", ms=4)[0] for i in range(len(shape))],
        "twin": ax.plot([], [], "x", color="black", ms=7)[0],
        "floor": ax.plot([], [], "--", color="black", lw=1.3)[0]})


def plot_variants(ax, series: dict, highlight: str, twin, floor, title: str | None = None):
    """Step time against context {variant: (tokens, ms)}; ``highlight`` bold, with its mlx-lm times ``twin``
    (tokens, ms) and its floor (tokens, ms); the others thin."""
    shape = tuple(series)
    art = reuse(ax, "variants", shape) or _build_variants(ax, shape)
    for line, (label, (x, y)) in zip(art["kvsim"], series.items()):
        line.set_data(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
        chosen = label == highlight
        line.set_linewidth(2.4 if chosen else 1)
        line.set_alpha(1 if chosen else 0.45)
        line.set_label(f"kvsim: {label}")
    art["twin"].set_data(*twin)
    art["twin"].set_label(f"mlx-lm: {highlight}")
    art["floor"].set_data(*floor)
    art["floor"].set_label(f"floor of {highlight.split(' (')[0]}: bytes / copy bandwidth")
    top = max(float(np.max(y)) for _, y in series.values())
    xs = np.concatenate([np.asarray(x, dtype=float) for x, _ in series.values()])
    legend = decorate(ax, xlim=None, ylim=None, title=title, legend_fontsize=8).get_legend()
    for handle, line in zip(legend.legend_handles, art["kvsim"]):  # a kept legend keeps its handles' old styles
        handle.set_linewidth(line.get_linewidth())
        handle.set_alpha(line.get_alpha())
    ax.set_xlim(xs.min() / 1.3, xs.max() * 1.3)
    ax.set_ylim(0, 1.6 * top)  # room for the legend above the lines
    return ax


def plot_step_breakdown(ax, contexts, segments: dict, step_ms, marks: dict | None = None, title: str | None = None):
    """One stacked bar per context: ``segments`` {part: [ms per context]} bottom to top, the measured step
    ``step_ms`` written above each bar; ``marks`` {label: [ms per context]} drawn as short black ticks
    (e.g. the compiled step, mlx-lm's step)."""
    ax.clear()
    x = np.arange(len(contexts))
    bottom = np.zeros(len(contexts))
    hatches = ("", "//", "", "xx", "..")
    for i, (label, ms) in enumerate(segments.items()):
        ms = np.asarray(ms, dtype=float)
        ax.bar(x, ms, 0.55, bottom=bottom, color=f"C{i}", hatch=hatches[i % 5], edgecolor="white", lw=0.5,
               label=label)
        bottom += ms
    for t, total in zip(x, step_ms):
        ax.annotate(f"{total:.2f} ms", (t, total), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=9)
    for (label, ms), style in zip((marks or {}).items(), ("_", "x")):
        ax.plot(x + 0.4, ms, style, color="black", ms=12 if style == "_" else 7, mew=2, label=label)
    ax.set_xticks(x, [f"{t / 1024:,.0f}K" for t in contexts])
    decorate(ax, xlabel="tokens in the cache", ylabel="decode step time (ms)", xlim=(-0.6, len(x) - 0.2),
             ylim=(0, float(np.max(bottom)) * 1.12), title=title, legend_loc=None)
    by_label = dict(zip(*ax.get_legend_handles_labels()[::-1]))
    order = list(segments)[::-1] + list(marks or {})                  # the legend reads like the bars: top first
    add_legend(ax, [by_label[k] for k in order], order, loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    return ax
