"""Which K/V head each query head reads (MHA, GQA, MQA), and bytes per token as area squares.

Contract (pure)
- :func:`kv_head_of`: query head i reads K/V head ⌊i / (n_h / n_kv)⌋ (consecutive query heads share,
  as Hugging Face's ``repeat_kv`` and kvsim's grouped attention arrange them).
- :func:`area_sides`: the side of a square whose AREA is proportional to each value, the largest
  side given; so 16× more bytes look 16× bigger, not 2× (log bars) or a sliver (linear bars).
"""

from __future__ import annotations

import math

import numpy as np

from ...calc.units import InputError, positive_int


def kv_head_of(num_attention_heads: int, num_key_value_heads: int) -> np.ndarray:
    """(n_h,) index of the K/V head each query head reads: i // (n_h / n_kv)."""
    n_h, n_kv = positive_int("num_attention_heads", num_attention_heads), positive_int("num_key_value_heads",
                                                                                      num_key_value_heads)
    if n_h % n_kv:
        raise InputError(f"num_attention_heads ({n_h}) must be a multiple of num_key_value_heads ({n_kv})")
    return np.arange(n_h) // (n_h // n_kv)


def area_sides(values: dict, largest_side: float = 1.0) -> dict:
    """{name: side} with side² ∝ value; the largest value gets ``largest_side``."""
    top = max(values.values())
    if top <= 0:
        raise InputError("area_sides needs at least one positive value")
    return {k: largest_side * math.sqrt(max(v, 0) / top) for k, v in values.items()}
