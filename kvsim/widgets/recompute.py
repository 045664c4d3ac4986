"""Lesson 01 views: token positions fed without and with a cache, and a measured decode's time.

Contract
- :func:`draw_tokens_fed` / :func:`recompute_view`: the quadratic and the linear curve of
  :func:`kvsim.calc.tokens_fed.fed_curves` with sliders for prompt and answer length.
- :func:`draw_decode_time` draws a :class:`~kvsim.measure.cache_speedup.DecodeComparison`'s measured time.
"""

from __future__ import annotations

from ..calc.tokens_fed import CACHED, UNCACHED, fed_curves, tokens_fed
from ..measure.cache_speedup import DecodeComparison
from ..plots.recompute import plot_cumulative_time, plot_tokens_fed
from ..ui.base import int_slider, make_view


def draw_tokens_fed(ax, prompt_tokens=1000, answer_tokens=1000):
    """Positions fed against answer length: quadratic without a cache, linear with one."""
    a, curves = fed_curves(prompt_tokens, answer_tokens)
    un, ca = (tokens_fed(prompt_tokens, answer_tokens, c) for c in (False, True))
    plot_tokens_fed(ax, a, curves, points={f"{un:,}": (answer_tokens, un), f"{ca:,}": (answer_tokens, ca)},
                    title=f"prompt {prompt_tokens:,} tokens: {un / ca:,.0f}× more positions without a cache")
    return ax


def recompute_view(prompt_tokens=1000, answer_tokens=1000):
    """Sliders for prompt and answer length over :func:`draw_tokens_fed`."""
    return make_view(draw_tokens_fed, {
        "prompt_tokens": int_slider("prompt tokens", prompt_tokens, 100, 8000, step=100),
        "answer_tokens": int_slider("answer tokens", answer_tokens, 100, 8000, step=100),
    }, figsize=(7, 4))


def draw_decode_time(ax, comparison: DecodeComparison):
    """Measured cumulative decode time against answer tokens, with and without a cache."""
    a, seconds = comparison.cumulative_seconds()
    ratio = seconds[UNCACHED][-1] / max(seconds[CACHED][-1], 1e-12)
    return plot_cumulative_time(ax, a, seconds, title=(
        f"prompt {comparison.prompt_tokens}, answer {comparison.answer_tokens} tokens: "
        f"{ratio:.0f}× slower without a cache (measured)"))
