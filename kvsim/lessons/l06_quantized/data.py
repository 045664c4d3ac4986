"""Lesson 06's numbers: the bytes of one sequence's KV in bf16 and in one quantized setting, by model name.

Contract (pure: calc only, no MLX, no drawing)
- :func:`quantized_bars`: lesson 06's two bars (bf16 vs one quantized setting) for one model, each
  split as :func:`kvsim.calc.quant_bytes.sequence_bytes_split` splits it.
- :func:`bar_totals`: each bar's total and the quantized bar's percentage of bf16 (the view's notes).
"""

from __future__ import annotations

from ...calc.memory import kv_bytes, parse_kv_dtype
from ...calc.quant_bytes import sequence_bytes_split
from ...calc.registry import load_model
from ...calc.units import format_bytes


def quantized_bars(model: str, bits: int, group_size: int, recent_tokens: int, tokens: int) -> dict:
    """{"bf16": {...}, "q<bits> g<group> R=<r>": {...}}: the parts of one sequence's KV bytes."""
    spec = load_model(model)
    dt = parse_kv_dtype(f"q{bits}", group_size=group_size, full_precision_tokens=recent_tokens)
    return {"bf16": {"bf16": kv_bytes(spec, tokens, kv_dtype="bf16")},
            f"q{bits} g{group_size} R={recent_tokens}": sequence_bytes_split(spec, tokens, dt)}


def bar_totals(bars: dict) -> tuple[dict, float]:
    """Each bar's total bytes and the second bar's share of the first in percent: 100 · total₂ / total₁."""
    totals = {label: sum(parts.values()) for label, parts in bars.items()}
    full, small = totals.values()
    return totals, 100 * small / full


def bar_notes(bars: dict) -> dict:
    """Each bar's total (format_bytes); the second bar's note adds its share of the first: '6 MiB  = 18.8 % of bf16'."""
    totals, percent_of_first = bar_totals(bars)
    notes = {label: format_bytes(total) for label, total in totals.items()}
    second = list(bars)[1]
    notes[second] = f"{notes[second]}  = {percent_of_first:.1f} % of bf16"
    return notes


def percent(fraction: float) -> float:
    """A fraction in percent: 100 · fraction."""
    return 100 * fraction
