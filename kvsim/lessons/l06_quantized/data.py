"""Lesson 06's numbers: the bytes of one sequence's KV in bf16 and in one quantized setting, by model name.

Contract (pure: calc only, no MLX, no drawing)
- :func:`quantized_bars`: lesson 06's two bars (bf16 vs one quantized setting) for one model, each
  split as :func:`kvsim.calc.quant_bytes.sequence_bytes_split` splits it.
"""

from __future__ import annotations

from ...calc.memory import kv_bytes, parse_kv_dtype
from ...calc.quant_bytes import sequence_bytes_split
from ...calc.registry import load_model


def quantized_bars(model: str, bits: int, group_size: int, recent_tokens: int, tokens: int) -> dict:
    """{"bf16": {...}, "q<bits> g<group> R=<r>": {...}}: the parts of one sequence's KV bytes."""
    spec = load_model(model)
    dt = parse_kv_dtype(f"q{bits}", group_size=group_size, full_precision_tokens=recent_tokens)
    return {"bf16": {"bf16": kv_bytes(spec, tokens, kv_dtype="bf16")},
            f"q{bits} g{group_size} R={recent_tokens}": sequence_bytes_split(spec, tokens, dt)}
