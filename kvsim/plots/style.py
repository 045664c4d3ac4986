"""The finishing touches every kvsim plot shares: labels, limits from zero, grid, legend, title."""

from __future__ import annotations


def decorate(ax, xlabel: str | None = None, ylabel: str | None = None, title: str | None = None,
             xlim=(0, None), ylim=(0, None), legend_loc: str | None = "upper left", legend_fontsize: int = 9):
    """Label the axes, set limits (``None`` ends stay automatic), add a light grid, legend and title."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if xlim is not None:
        ax.set_xlim(*xlim)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    if legend_loc is not None:
        ax.legend(loc=legend_loc, fontsize=legend_fontsize)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
