"""Lesson 06 (quantized KV): the lesson's controls: each view wraps this lesson's data/measure functions and
its plots; it computes nothing.

Lesson 06 views: the bytes of a quantized KV cache (data, scales and biases, exact recent tokens)
beside the attention error a real QuantizedKVCache gives at those settings.

Every new setting fills a fresh :class:`~kvsim.cache.QuantizedKVCache` with seeded structured K/V
(:func:`kvsim.lessons.l06_quantized.measure.view_error`, the lesson's own sample) and measures the
error of :func:`kvsim.cache.sdpa.quantized_sdpa` against dense attention.

Lesson 06 view: keys quantized per token (kvsim's QuantizedKVCache, mlx-lm) or per channel (KIVI),
on the same synthetic tensors with outlier channels.

Contract
- :func:`draw_channel_quant` / :func:`channel_quant_view`: three panels: |K| of one KV head (the outlier
  channels are the dark stripes), |K̂ − K| under both groupings on one colour scale (one colour bar), and each scheme's relative
  attention error on the whole sample (:func:`kvsim.lessons.l06_quantized.measure.lesson_scheme_errors`).
"""

from __future__ import annotations

import ipywidgets as widgets

from ...calc.units import BITS, GROUP_SIZES
from ...ui.base import log_slider, make_view
from .data import bar_notes, percent, quantized_bars
from .measure import lesson_key_error_map, lesson_scheme_errors, view_error
from .plots import plot_bytes_bars, plot_key_error_maps


def draw_quantized_kv(ax, bits=4, group_size=64, recent_tokens=128, tokens=1024, model="llama-3-8b"):
    """Bytes of one sequence (bf16 vs quantized) and the measured attention error in the title."""
    bars = quantized_bars(model, bits, group_size, recent_tokens, tokens)
    err = view_error(bits, group_size, recent_tokens, tokens)
    plot_bytes_bars(ax, bars, notes=bar_notes(bars), title=(
        f"{model}, {tokens:,} tokens: relative attention error {percent(err):.2f} %\n"
        f"(real QuantizedKVCache vs dense attention, seeded structured K/V)"))
    return ax


def quantized_kv_view(bits=4, group_size=64, recent_tokens=128, tokens=1024):
    """Sliders for bits, group size, full-precision recent tokens and tokens over :func:`draw_quantized_kv`."""
    return make_view(draw_quantized_kv, {
        "bits": widgets.SelectionSlider(options=BITS, value=bits, description="bits", continuous_update=False),
        "group_size": widgets.SelectionSlider(options=GROUP_SIZES, value=group_size, description="group size",
                                              continuous_update=False),
        "recent_tokens": widgets.IntSlider(value=recent_tokens, min=0, max=512, step=32,
                                           description="full-precision recent R", continuous_update=False),
        "tokens": log_slider("tokens", tokens, 256, 4096),
    }, figsize=(7.5, 3.4), margins=dict(left=0.2, right=0.97, bottom=0.3, top=0.83))


def draw_channel_quant(axes, bits=2, group_size=64):
    """|K| and the key error per token vs per channel (three Axes, then one for the colour bar); attention errors
    in the panel titles."""
    errs = lesson_scheme_errors(bits, group_size)
    notes = {"|K|": "(one KV head; outlier channels dark)",
             "error, per token": f"attention error {percent(errs['keys per token']):.1f} %",
             "error, per channel": f"attention error {percent(errs['keys per channel (KIVI)']):.1f} %"}
    return plot_key_error_maps(axes, lesson_key_error_map(bits, group_size), notes, title=(
        f"keys at {bits} bits, groups of {group_size}: one scale per token and {group_size} channels, "
        f"or per channel and {group_size} tokens"))


def channel_quant_view(bits=2, group_size=64):
    """Sliders for bits and group size over :func:`draw_channel_quant`."""
    return make_view(draw_channel_quant, {
        "bits": widgets.SelectionSlider(options=BITS, value=bits, description="bits", continuous_update=False),
        "group_size": widgets.SelectionSlider(options=GROUP_SIZES, value=group_size, description="group size",
                                              continuous_update=False),
    }, figsize=(10, 3.6), subplots=(1, 4), margins=dict(left=0.05, right=0.95, bottom=0.15, top=0.78, wspace=0.15))
