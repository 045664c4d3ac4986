"""Lesson 06 views: the bytes of a quantized KV cache (data, scales and biases, exact recent tokens)
beside the attention error a real QuantizedKVCache gives at those settings.

Every new setting fills a fresh :class:`~kvsim.cache.QuantizedKVCache` with seeded structured K/V
(:func:`kvsim.measure.quant_error.view_error`, 2 KV heads to keep redraws quick) and measures the
error of :func:`kvsim.cache.sdpa.quantized_sdpa` against dense attention.
"""

from __future__ import annotations

import ipywidgets as widgets

from ..calc import units
from ..calc.quant_bytes import quantized_bars
from ..calc.units import BITS, GROUP_SIZES
from ..measure.quant_error import view_error
from ..plots.quantized import plot_bytes_bars
from ..ui.base import log_slider, make_view


def draw_quantized_kv(ax, bits=4, group_size=64, recent_tokens=128, tokens=1024, model="llama-3-8b"):
    """Bytes of one sequence (bf16 vs quantized) and the measured attention error in the title."""
    bars = quantized_bars(model, bits, group_size, recent_tokens, tokens)
    err = view_error(bits, group_size, recent_tokens, tokens)
    full, small = (sum(parts.values()) for parts in bars.values())
    notes = {label: units.format_bytes(sum(parts.values())) for label, parts in bars.items()}
    notes[list(bars)[1]] += f"  = {100 * small / full:.1f} % of bf16"
    plot_bytes_bars(ax, bars, notes=notes, title=(
        f"{model}, {tokens:,} tokens: relative attention error {100 * err:.2f} %\n"
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
