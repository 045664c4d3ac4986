"""Lesson 06 views: the bytes of a quantized KV cache (data, scales and biases, exact recent tokens)
beside the attention error a real QuantizedKVCache gives at those settings.

Every redraw fills a fresh :class:`~kvsim.cache.QuantizedKVCache` with seeded structured K/V
(:func:`kvsim.quantization.synthetic_qkv`, 2 KV heads to keep redraws quick) and measures the
error of :func:`kvsim.attention.quantized_sdpa` against dense attention.
"""

from __future__ import annotations

from functools import lru_cache

import ipywidgets as widgets

from .. import memory, quantization
from ..plots.quantized import plot_bytes_bars
from ..registry import load_model
from .base import log_slider, make_view

BITS = (2, 3, 4, 6, 8)
GROUPS = (32, 64, 128)
VIEW_HEADS = dict(queries=4, num_attention_heads=8, num_key_value_heads=2)


@lru_cache(maxsize=8)
def _exact(tokens: int):
    qkv = quantization.synthetic_qkv(tokens, **VIEW_HEADS)
    return qkv, quantization.exact_attention(qkv)


@lru_cache(maxsize=256)
def _error(bits: int, group_size: int, recent_tokens: int, tokens: int) -> float:
    qkv, exact = _exact(tokens)
    return quantization.attention_error(qkv, bits, group_size, recent_tokens, exact=exact).relative_error


def quantized_bars(model: str, bits: int, group_size: int, recent_tokens: int, tokens: int) -> dict:
    """{"bf16": {...}, "q<bits> g<group> R=<r>": {...}}: the parts of one sequence's KV bytes."""
    spec = load_model(model)
    dt = memory.parse_kv_dtype(f"q{bits}", group_size=group_size, full_precision_tokens=recent_tokens)
    return {"bf16": {"bf16": memory.kv_bytes(spec, tokens, kv_dtype="bf16")},
            f"q{bits} g{group_size} R={recent_tokens}": quantization.sequence_bytes_split(spec, tokens, dt)}


def draw_quantized_kv(ax, bits=4, group_size=64, recent_tokens=128, tokens=1024, model="llama-3-8b"):
    """Bytes of one sequence (bf16 vs quantized) and the measured attention error in the title."""
    bars = quantized_bars(model, bits, group_size, recent_tokens, tokens)
    err = _error(bits, group_size, recent_tokens, tokens)
    full, small = (sum(parts.values()) for parts in bars.values())
    notes = {label: memory.format_bytes(sum(parts.values())) for label, parts in bars.items()}
    notes[list(bars)[1]] += f"  = {100 * small / full:.1f} % of bf16"
    plot_bytes_bars(ax, bars, notes=notes, title=(
        f"{model}, {tokens:,} tokens: relative attention error {100 * err:.2f} %\n"
        f"(real QuantizedKVCache vs dense attention, seeded structured K/V)"))
    return ax


def quantized_kv_view(bits=4, group_size=64, recent_tokens=128, tokens=1024):
    """Sliders for bits, group size, full-precision recent tokens and tokens over :func:`draw_quantized_kv`."""
    return make_view(draw_quantized_kv, {
        "bits": widgets.SelectionSlider(options=BITS, value=bits, description="bits", continuous_update=False),
        "group_size": widgets.SelectionSlider(options=GROUPS, value=group_size, description="group size",
                                              continuous_update=False),
        "recent_tokens": widgets.IntSlider(value=recent_tokens, min=0, max=512, step=32,
                                           description="full-precision recent R", continuous_update=False),
        "tokens": log_slider("tokens", tokens, 256, 4096),
    }, figsize=(7.5, 3.4), margins=dict(left=0.2, right=0.97, bottom=0.3, top=0.83))
