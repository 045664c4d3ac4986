"""Lesson 09 (speculative decoding and rewind): the lesson's controls: each view wraps this lesson's
data/measure functions and its plots; it computes nothing.

Lesson 09 views: measured tokens per target pass, and the expected speedup of speculative decoding.

Contract
- :func:`draw_tokens_per_pass`: a :func:`kvsim.lessons.l09_speculation.measure.speculation_sweep`'s tokens per
  target pass against k, beside the i.i.d. expectation from the measured acceptance at k = 1.
- :func:`draw_expected_speedup` / :func:`speculation_view`: :mod:`kvsim.lessons.l09_speculation.data` with sliders.

Lesson 09 view: one speculative round drawn (draft, verify in one pass, accept, trim back).

Contract
- :func:`draw_round` / :func:`round_view`: :func:`kvsim.lessons.l09_speculation.data.round_stages` for k drafts of
  which n are accepted (n is capped at k), on a cache that held 20 tokens before the round.

Lesson 09 static pictures: decode-lookahead memory of two designs, and a padded prefill's mask.

Contract
- :func:`draw_lookahead_rows`: :func:`kvsim.lessons.l09_speculation.data.lookahead_curve` for one sliding layer
  of a registry model (its window and row bytes in the title).
- :func:`draw_padded_mask`: :func:`kvsim.lessons.l09_speculation.data.padded_mask` for P real tokens padded to M.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from ...calc import memory
from ...calc.registry import load_model
from ...calc.units import format_bytes
from ...ui.base import int_slider, make_view
from .data import HIDDEN, PAD_KEY, PAD_ROW, REAL, lookahead_curve, padded_mask, slider_round, speedup_curve
from .measure import SpeculationRun, tokens_per_pass_series
from .plots import plot_against_k, plot_lookahead_rows, plot_padded_mask, plot_round


def draw_tokens_per_pass(ax, runs: list[SpeculationRun]):
    """Measured tokens per target pass against k per draft, with the i.i.d. expectation from α at k = 1."""
    series, expected = tokens_per_pass_series(runs)
    return plot_against_k(ax, series, expected, ylabel="tokens per target pass (measured)",
                          title="each target pass verifies k drafts and adds one token of its own")


def draw_expected_speedup(ax, acceptance=0.7, draft_cost=0.1, max_draft=12):
    """Expected tokens per pass and speedup against k for acceptance α and draft cost c; the best k starred."""
    d = speedup_curve(acceptance, draft_cost, max_draft)
    k, best = d["k"], d["best_k"]
    marks = {f"best k = {best}: {d['best_speedup']:.2f}x": (best, d["best_speedup"])}
    return plot_against_k(ax, {"speedup over plain decoding": (k, d["speedup"])},
                          {"tokens per target pass": (k, d["tokens_per_pass"]),
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


OFFSET = 20  # tokens in the target's cache before the round


def draw_round(ax, num_draft=4, accepted=2):
    """The four stages of one round with k = ``num_draft`` proposals and n = ``accepted``."""
    r = slider_round(OFFSET, num_draft, accepted)
    return plot_round(ax, r, title=(
        f"k = {r.num_draft}, n = {r.accepted} accepted: {r.emitted} token{'s' if r.emitted > 1 else ''} "
        f"emitted for one target pass; the cache goes {r.offset_before} → {r.offset_after_verify} → "
        f"{r.offset_after}"))


def round_view(num_draft=4, accepted=2):
    """Sliders for the draft length k and the accepted count n over :func:`draw_round`."""
    return make_view(draw_round, {
        "num_draft": int_slider("draft tokens k", num_draft, 1, 8),
        "accepted": int_slider("accepted n", accepted, 0, 8),
    }, figsize=(9, 5.2), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.9))


def draw_lookahead_rows(ax, model="gemma-3-27b", max_k=8):
    """Rows beyond the ring to undo k appends: spare slots (always) vs the overwrite log (pending, committed)."""
    layer = next(x for x in load_model(model).layers if x.kind == "sliding")
    d = lookahead_curve(layer.sliding_window, max_k)
    row = memory.layer_token_bytes(layer, "bf16")
    copied = d["copied_per_step"]
    lines = {f"spare slots, R = k − 1 (always; copies {copied['spare_slots']} rows per step)":
             (d["spare_slots"], "o-"),
             f"overwrite log, lookahead pending (copies {copied['overwrite_log']} row per step)":
             (d["overwrite_log_pending"], "s-"),
             "overwrite log, after commit": (d["overwrite_log_idle"], "^--")}
    return plot_lookahead_rows(ax, d["k"], lines, title=(
        f"{model} sliding layer: W = {d['window']:,} rows, one row = {format_bytes(row)} (bf16)"))


def draw_padded_mask(ax, prompt_tokens=6, padded_tokens=8):
    """The causal mask of a prefill of ``prompt_tokens`` real tokens padded to ``padded_tokens``."""
    names = {HIDDEN: "masked (future)", REAL: "real query sees real key",
             PAD_ROW: "pad query's row (thrown away)", PAD_KEY: "pad key (only pad queries see it)"}
    return plot_padded_mask(ax, padded_mask(prompt_tokens, padded_tokens), prompt_tokens, names, title=(
        f"{prompt_tokens} real tokens padded to {padded_tokens}: no real query sees a pad"))
