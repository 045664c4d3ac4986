"""Lesson 06 view: keys quantized per token (kvsim's QuantizedKVCache, mlx-lm) or per channel (KIVI),
on the same synthetic tensors with outlier channels.

Contract
- :func:`draw_channel_quant` / :func:`channel_quant_view`: |K| of one KV head (the outlier channels are
  the dark stripes), |K̂ − K| under both groupings on one colour scale, and each scheme's relative
  attention error on the whole sample (:func:`kvsim.measure.channel_quant.lesson_scheme_errors`).
"""

from __future__ import annotations

import ipywidgets as widgets

from ..calc.units import BITS, GROUP_SIZES
from ..measure.channel_quant import lesson_key_error_map, lesson_scheme_errors
from ..plots.channel_quant import plot_key_error_maps
from ..ui.base import make_view


def draw_channel_quant(ax, bits=2, group_size=64):
    """|K| and the key error per token vs per channel; attention errors in the panel titles."""
    errs = lesson_scheme_errors(bits, group_size)
    notes = {"|K|": "(one KV head; outlier channels dark)",
             "error, per token": f"attention error {100 * errs['keys per token']:.1f} %",
             "error, per channel": f"attention error {100 * errs['keys per channel (KIVI)']:.1f} %"}
    return plot_key_error_maps(ax, lesson_key_error_map(bits, group_size), notes, title=(
        f"keys at {bits} bits, groups of {group_size}: one scale per token and {group_size} channels, "
        f"or per channel and {group_size} tokens"))


def channel_quant_view(bits=2, group_size=64):
    """Sliders for bits and group size over :func:`draw_channel_quant`."""
    return make_view(draw_channel_quant, {
        "bits": widgets.SelectionSlider(options=BITS, value=bits, description="bits", continuous_update=False),
        "group_size": widgets.SelectionSlider(options=GROUP_SIZES, value=group_size, description="group size",
                                              continuous_update=False),
    }, figsize=(10, 3.4), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.88))
