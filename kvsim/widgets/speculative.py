"""Lesson 09 views: measured tokens per target pass, and the expected speedup of speculative decoding.

Contract
- :func:`draw_tokens_per_pass`: a :func:`kvsim.measure.speculation_runs.speculation_sweep`'s tokens per
  target pass against k, beside the i.i.d. expectation from the measured acceptance at k = 1.
- :func:`draw_expected_speedup` / :func:`speculation_view`: :mod:`kvsim.calc.speculation` with sliders.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from ..calc.speculation import expected_speedup, expected_tokens_per_pass
from ..measure.speculation_runs import SpeculationRun
from ..plots.speculative import plot_against_k
from ..ui.base import int_slider, make_view


def draw_tokens_per_pass(ax, runs: list[SpeculationRun]):
    """Measured tokens per target pass against k per draft, with the i.i.d. expectation from α at k = 1."""
    series, expected = {}, {}
    for label in dict.fromkeys(r.draft for r in runs):
        mine = [r for r in runs if r.draft == label]
        k = [r.num_draft for r in mine]
        series[label] = (k, [len(r.result.tokens) / r.result.rounds for r in mine])
        alpha = next((r.result.acceptance_rate for r in mine if r.num_draft == 1), None)
        if alpha is not None:
            expected[f"i.i.d. α = {alpha:.2f}"] = (k, expected_tokens_per_pass(alpha, k))
    return plot_against_k(ax, series, expected, ylabel="tokens per target pass (measured)",
                          title="each target pass verifies k drafts and adds one token of its own")


def draw_expected_speedup(ax, acceptance=0.7, draft_cost=0.1, max_draft=12):
    """Expected tokens per pass and speedup against k for acceptance α and draft cost c; the best k starred."""
    k = np.arange(1, max_draft + 1)
    speed = expected_speedup(acceptance, k, draft_cost)
    best = int(k[np.argmax(speed)])
    marks = {f"best k = {best}: {speed.max():.2f}x": (best, speed.max())}
    return plot_against_k(ax, {"speedup over plain decoding": (k, speed)},
                          {"tokens per target pass": (k, expected_tokens_per_pass(acceptance, k)),
                           "plain decoding (1x)": (k, np.ones(len(k)))},
                          ylabel="tokens / speedup", marks=marks,
                          title=f"α = {acceptance:.2f}, draft step = {draft_cost:.2f} target steps")


def speculation_view(acceptance=0.7, draft_cost=0.1, max_draft=12):
    """Sliders for acceptance, draft cost and the largest k over :func:`draw_expected_speedup`."""
    return make_view(draw_expected_speedup, {
        "acceptance": widgets.FloatSlider(value=acceptance, min=0.05, max=0.95, step=0.05, description="acceptance α",
                                          continuous_update=False),
        "draft_cost": widgets.FloatSlider(value=draft_cost, min=0.0, max=1.0, step=0.05, description="draft cost c",
                                          continuous_update=False),
        "max_draft": int_slider("largest k", max_draft, 2, 16),
    })
