"""Lesson 01 (why a KV cache): the lesson's controls: each view wraps this lesson's data/measure functions and
its plots; it computes nothing.

Lesson 01 views: the recompute-vs-cache grid with a step slider, and tokens fed on a log axis.

Contract
- :func:`draw_step_grid` / :func:`step_grid_view`: :func:`kvsim.lessons.l01_why_a_cache.data.step_grid` without
  and with a cache, side by side, up to the chosen decode step.
- :func:`draw_tokens_fed_log` / :func:`tokens_fed_log_view`: the positions fed against answer length
  on a log axis, so the linear with-cache line is not flattened onto the x axis.

Lesson 01 views: token positions fed without and with a cache, and a measured decode's time.

Contract
- :func:`draw_tokens_fed` / :func:`recompute_view`: the quadratic and the linear curve of
  :func:`kvsim.calc.tokens_fed.fed_curves` with sliders for prompt and answer length.
- :func:`draw_fed_each_step`: :func:`kvsim.lessons.l01_why_a_cache.data.fed_each_step` on a linear axis: the
  positions fed AT each step (the area under each line is its total), so the quadratic shows as a rising line.
- :func:`draw_decode_time` draws a :class:`~kvsim.lessons.l01_why_a_cache.measure.DecodeComparison`'s measured time.
"""

from __future__ import annotations

from ...calc.tokens_fed import fed_curves
from ...ui.base import int_slider, make_view
from .data import fed_curves_log, fed_each_step, fed_log_ylim, fed_totals, step_grid_panels
from .measure import DecodeComparison
from .plots import plot_cumulative_time, plot_step_grids, plot_tokens_fed


ANSWER_TOKENS = 10  # rows of the grid: steps shown


def draw_step_grid(ax, step=4, prompt_tokens=4, answer_tokens=ANSWER_TOKENS):
    """Which positions each step feeds, without and with a cache, for steps 1..``step``."""
    d = step_grid_panels(step, prompt_tokens, answer_tokens)
    step, grids, fed, now = d["step"], d["grids"], d["fed_so_far"], d["fed_now"]
    title = (f"prompt {prompt_tokens} tokens; step {step} feeds {now['without a cache']} "
             f"positions without a cache, {now['with a cache']} with one")
    return plot_step_grids(ax, grids, step, fed, title=title)


def step_grid_view(step=4, prompt_tokens=4):
    """Sliders for the decode step and the prompt length over :func:`draw_step_grid`."""
    return make_view(draw_step_grid, {
        "step": int_slider("decode step", step, 1, ANSWER_TOKENS),
        "prompt_tokens": int_slider("prompt tokens", prompt_tokens, 1, 8),
    }, figsize=(9, 4.6), margins=dict(left=0.01, right=0.99, bottom=0.1, top=0.9))


def draw_tokens_fed_log(ax, prompt_tokens=1000, answer_tokens=1000):
    """Positions fed against answer length, log y axis: quadratic without a cache, linear with one."""
    a, curves = fed_curves_log(prompt_tokens, answer_tokens)
    un, ca, ratio = fed_totals(prompt_tokens, answer_tokens)
    plot_tokens_fed(ax, a, curves,
                    points={f"{un:,}": (answer_tokens, un), f"{ca:,}": (answer_tokens, ca)}, log=True,
                    title=f"prompt {prompt_tokens:,} tokens: {ratio:,.0f}× more positions without a cache")
    ax.set_ylim(*fed_log_ylim(prompt_tokens, un))  # headroom for the labels
    ax.set_ylabel("token positions fed (log scale)")
    return ax


def tokens_fed_log_view(prompt_tokens=1000, answer_tokens=1000):
    """Sliders for prompt and answer length over :func:`draw_tokens_fed_log`."""
    return make_view(draw_tokens_fed_log, {
        "prompt_tokens": int_slider("prompt tokens", prompt_tokens, 100, 8000, step=100),
        "answer_tokens": int_slider("answer tokens", answer_tokens, 100, 8000, step=100),
    }, figsize=(7, 4), margins=dict(left=0.12, right=0.97, bottom=0.13, top=0.91))


def draw_tokens_fed(ax, prompt_tokens=1000, answer_tokens=1000):
    """Positions fed against answer length: quadratic without a cache, linear with one."""
    a, curves = fed_curves(prompt_tokens, answer_tokens)
    un, ca, ratio = fed_totals(prompt_tokens, answer_tokens)
    plot_tokens_fed(ax, a, curves, points={f"{un:,}": (answer_tokens, un), f"{ca:,}": (answer_tokens, ca)},
                    title=f"prompt {prompt_tokens:,} tokens: {ratio:,.0f}× more positions without a cache")
    return ax


def recompute_view(prompt_tokens=1000, answer_tokens=1000):
    """Sliders for prompt and answer length over :func:`draw_tokens_fed`."""
    return make_view(draw_tokens_fed, {
        "prompt_tokens": int_slider("prompt tokens", prompt_tokens, 100, 8000, step=100),
        "answer_tokens": int_slider("answer tokens", answer_tokens, 100, 8000, step=100),
    }, figsize=(7, 4))


def draw_fed_each_step(ax, prompt_tokens=1000, answer_tokens=1000):
    """Positions fed at each decode step, linear axis: P + k − 1 without a cache, P then 1 with one."""
    k, curves = fed_each_step(prompt_tokens, answer_tokens)
    un, ca, _ = fed_totals(prompt_tokens, answer_tokens)
    last = {label: int(y[-1]) for label, y in curves.items()}
    plot_tokens_fed(ax, k, curves, points={f"{v:,} at step {answer_tokens:,}": (answer_tokens, v)
                                           for v in last.values()},
                    title=f"area under each line = its total: {un:,} vs {ca:,} positions")
    ax.set_xlabel("decode step k (step 1 is the prefill)")
    ax.set_ylabel("token positions fed at step k")
    return ax


def draw_decode_time(ax, comparison: DecodeComparison):
    """Measured cumulative decode time against answer tokens, with and without a cache."""
    a, seconds = comparison.cumulative_seconds()
    ratio = comparison.slowdown()
    return plot_cumulative_time(ax, a, seconds, title=(
        f"prompt {comparison.prompt_tokens}, answer {comparison.answer_tokens} tokens: "
        f"{ratio:.0f}× slower without a cache (measured)"))
