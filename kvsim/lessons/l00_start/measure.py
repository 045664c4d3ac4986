"""Lesson 00 measured: a real KVCache fed a prompt, for the predict-then-measure exercise.

Contract
- :func:`kv_cache_after_prompt`: one layer of a registry model's geometry (its first attention layer's
  ``num_key_value_heads`` × ``head_dim``) in a real :class:`~kvsim.cache.KVCache` (``step`` slots at a time)
  fed a prompt of ``tokens`` in one update; returns what the cache reports: offset, capacity, nbytes, used_bytes.
"""

from __future__ import annotations

import mlx.core as mx

from ...cache import KVCache
from ...cache.base import mx_dtype
from ...calc.registry import load_model
from ...calc.units import DEFAULT_STEP, positive_int


def kv_cache_after_prompt(tokens: int = 300, model: str = "llama-3-8b", dtype: str = "bf16",
                          step: int = DEFAULT_STEP) -> dict:
    """{"offset", "capacity", "nbytes", "used_bytes"} of a real KVCache(step) after a ``tokens``-token prefill."""
    t = positive_int("tokens", tokens, ValueError)
    layer = next(x for x in load_model(model).layers if x.num_key_value_heads)
    x = mx.zeros((1, layer.num_key_value_heads, t, layer.head_dim), dtype=mx_dtype(dtype))
    cache = KVCache(step=step)
    cache.update_and_fetch(x, x)
    return {"offset": cache.offset, "capacity": cache.capacity, "nbytes": cache.nbytes, "used_bytes": cache.used_bytes}
