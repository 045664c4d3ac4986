"""Lesson 02 (how big is it): a real model's caches, filled by one prompt, and their measured bytes (MLX).

Contract
- :func:`prompt_caches_nbytes` builds :func:`kvsim.cache.make_caches` for a registry model (bf16 K/V), writes
  one prompt of ``tokens`` zero keys and values into every layer's cache (one ``update_and_fetch`` each) and
  reads ``nbytes`` (the buffers held) and ``used_bytes`` (the tokens held) back from the caches.
  Nothing is computed from a formula here: the checker of exercise 02.4 compares these with
  :func:`kvsim.calc.memory.allocated_bytes`.
"""

from __future__ import annotations

import mlx.core as mx

from ...cache import make_caches
from ...calc.registry import load_model


def prompt_caches_nbytes(model: str = "llama-3.2-1b", tokens: int = 1000) -> dict:
    """{"layers", "nbytes", "used_bytes"} of the model's real bf16 caches after one ``tokens``-token prompt."""
    spec = load_model(model)
    caches = make_caches(spec, dtype=mx.bfloat16)
    for layer, cache in zip(spec.layers, caches):
        k = mx.zeros((1, layer.num_key_value_heads, tokens, layer.head_dim), dtype=mx.bfloat16)
        v = mx.zeros((1, layer.num_key_value_heads, tokens, layer.v_head_dim), dtype=mx.bfloat16)
        cache.update_and_fetch(k, v)
    return {"layers": len(caches), "nbytes": sum(c.nbytes for c in caches),
            "used_bytes": sum(c.used_bytes for c in caches)}
