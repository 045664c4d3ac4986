"""Plots of cache size: KV bytes against tokens, and how device memory is split."""

from __future__ import annotations

import numpy as np

from .style import decorate

# bytes per display unit: binary (KiB, MiB, GiB) and decimal (KB, MB, GB) - always say which
UNIT_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_STYLES = ["-", "--", ":", "-."]


def plot_kv_vs_tokens(ax, tokens, curves: dict, hlines: dict | None = None, unit: str = "GiB",
                      points: dict | None = None, title: str | None = None):
    """Lines of bytes against tokens; ``hlines`` are constant levels (e.g. weights), ``points`` labelled marks."""
    ax.clear()
    s = UNIT_BYTES[unit]
    for i, (label, y) in enumerate(curves.items()):
        ax.plot(tokens, np.asarray(y, dtype=float) / s, _STYLES[i % len(_STYLES)], lw=2, label=label)
    for label, level in (hlines or {}).items():
        ax.axhline(level / s, color="grey", ls=":", lw=1.5)
        ax.annotate(label, (tokens[0], level / s), xytext=(4, 4), textcoords="offset points",
                    color="dimgrey", fontsize=9)
    for label, (x, y) in (points or {}).items():
        ax.plot([x], [y / s], "o", color="black", ms=5)
        ax.annotate(label, (x, y / s), xytext=(6, -12), textcoords="offset points", fontsize=9)
    decorate(ax, xlabel="tokens held in the cache (T × B)", ylabel=f"KV cache ({unit})",
             xlim=(0, tokens[-1]), title=title)
    return ax


def plot_memory_split(ax, parts: dict, total_bytes: float, unit: str = "GiB", title: str | None = None):
    """One horizontal stacked bar: how ``total_bytes`` of device memory is shared by ``parts``."""
    ax.clear()
    s = UNIT_BYTES[unit]
    left = 0.0
    for label, value in parts.items():
        ax.barh([0], [value / s], left=left, label=f"{label}: {value / s:.1f} {unit} ({100 * value / total_bytes:.0f} %)")
        left += value / s
    ax.set_xlim(0, total_bytes / s)
    ax.set_yticks([])
    ax.set_xlabel(f"device memory ({unit})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
