"""Lesson 10 (the engine): drawing only (calc and kvsim.ui.style); every function takes computed numbers and an Axes.

Contract
- :func:`plot_pool_timeline`: one stacked bar per pool event, one segment per active SequenceId (its bytes),
  the calculator's allocated view as a black tick on each bar.
- :func:`plot_against_rate`: one line per policy against arrival rate (requests per iteration).
- :func:`plot_queue_over_time`: requests waiting and sequences running per iteration, per policy.
- :func:`plot_schedule`: the batch over time: rows = requests, columns = steps, coloured by
  not arrived / waiting / prefill / decode / finished (the codes of
  :meth:`kvsim.decode.continuous.Schedule.codes`), the decode batch size written above each column.
Each function rebuilds its own artists on the Axes (:func:`kvsim.ui.style.clear_for`).
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ...ui.style import add_legend, clear_for, decorate, keep

POLICY_STYLE = {"wait": dict(color="tab:blue", marker="o"), "busy": dict(color="tab:red", marker="s")}
# codes 0..4 = "", waiting, prefill, decode, finished (kvsim.decode.continuous.CELLS)
CELL_COLORS = ("white", "0.82", "tab:orange", "tab:blue", "0.95")
CELL_NAMES = ("not arrived", "waiting", "prefill", "decode", "finished")


def plot_pool_timeline(ax, labels, per_sequence, calculator, title: str | None = None):
    """Stacked bytes per SequenceId for each event; ``calculator`` (one value per event) as black ticks."""
    clear_for(ax, "pool_timeline")
    x = np.arange(len(labels))
    ids = sorted({sid for seqs in per_sequence for sid in seqs})
    bottom = np.zeros(len(labels))
    bars = []
    for sid in ids:
        h = np.array([seqs.get(sid, 0) for seqs in per_sequence], dtype=float) / 1024
        bars.append(ax.bar(x, h, bottom=bottom, width=0.6, color=f"C{sid % 10}", edgecolor="white",
                           label=f"SequenceId {sid}"))
        bottom += h
    ticks = ax.plot(x, np.asarray(calculator, dtype=float) / 1024, "_", color="black", ms=28, mew=2.5,
                    label="calculator's allocated view")
    ax.set_xticks(x, labels, fontsize=8)
    decorate(ax, ylabel="memory_usage_bytes() (KiB)", xlim=(-0.6, len(labels) - 0.4),
             ylim=(0, 1.35 * max(bottom.max(), 1)), legend_loc="upper left", title=title)
    add_legend(ax, loc="upper left", fontsize=8, ncol=3)
    keep(ax, "pool_timeline", len(labels), {"bars": [p for b in bars for p in b.patches], "ticks": ticks})
    return ax


def plot_against_rate(ax, rates, series: dict, ylabel: str, title: str | None = None, ylim=(0, None)):
    """One line per policy {policy: y} against arrival rate."""
    clear_for(ax, "against_rate")
    lines = [ax.plot(np.asarray(rates, dtype=float), np.asarray(y, dtype=float), lw=1.5, ms=5, label=policy,
                     **POLICY_STYLE.get(policy, {}))[0] for policy, y in series.items()]
    decorate(ax, xlabel="arrival rate (requests per iteration)", ylabel=ylabel, ylim=ylim, title=title,
             legend_loc="upper left")
    keep(ax, "against_rate", len(series), {"lines": lines})
    return ax


def plot_queue_over_time(ax, queue_length: dict, running: dict, max_sequences: int, title: str | None = None):
    """Waiting requests (solid) and running sequences (dotted) per iteration, per policy; the slot count dashed."""
    clear_for(ax, "queue_over_time")
    lines = []
    for policy, q in queue_length.items():
        color = POLICY_STYLE.get(policy, {}).get("color")
        lines.append(ax.step(np.arange(len(q)), q, where="post", color=color, lw=1.5, label=f"{policy}: waiting")[0])
        r = running[policy]
        lines.append(ax.step(np.arange(len(r)), r, where="post", color=color, lw=1, ls=":",
                             label=f"{policy}: running")[0])
    lines.append(ax.axhline(max_sequences, color="black", ls="--", lw=1, label=f"max_sequences = {max_sequences}"))
    longest = max(len(q) for q in queue_length.values())
    top = max(max(int(np.max(q, initial=0)) for q in queue_length.values()), max_sequences)
    decorate(ax, xlabel="iteration", ylabel="requests", xlim=(0, longest), ylim=(0, 1.3 * top + 1),
             title=title, legend_loc=None)
    add_legend(ax, loc="upper right", fontsize=8, ncol=3)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # requests come whole
    keep(ax, "queue_over_time", len(queue_length), {"lines": lines})
    return ax


def plot_schedule(ax, codes, batch, labels=None, title: str | None = None):
    """rows = requests, columns = steps coloured by state; the decode batch size above each column."""
    clear_for(ax, "schedule")
    codes = np.asarray(codes)
    n, steps = codes.shape
    mesh = ax.pcolormesh(np.arange(steps + 1) - 0.5, np.arange(n + 1) - 0.5, codes,
                         cmap=ListedColormap(CELL_COLORS), vmin=-0.5, vmax=len(CELL_COLORS) - 0.5,
                         edgecolors="white", linewidth=1)
    notes = [ax.text(s, -0.75, str(b), ha="center", va="bottom", fontsize=8) for s, b in enumerate(batch)]
    notes.append(ax.text(-0.6, -0.75, "decode batch:", ha="right", va="bottom", fontsize=8))
    ax.set_xlim(-0.5, steps - 0.5)
    ax.set_ylim(n - 0.5, -1.4)
    ax.set_yticks(np.arange(n), labels if labels is not None else [f"request {r}" for r in range(n)], fontsize=8)
    ax.set_xticks(np.arange(steps))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("step")
    ax.set_title(title or "", fontsize=10)
    handles = [Patch(fc=c, ec="0.6", label=t) for c, t in zip(CELL_COLORS[1:], CELL_NAMES[1:])]
    add_legend(ax, handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, fontsize=8, frameon=False)
    keep(ax, "schedule", (n, steps), {"mesh": mesh, "notes": notes})
    return ax
