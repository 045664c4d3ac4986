"""Lesson 05 (hybrids): a real hybrid's caches after one prompt, and their measured bytes (MLX).

Contract
- :func:`prompt_caches_nbytes` builds :func:`kvsim.cache.make_caches` for a registry model (bf16 K/V, each
  recurrent state in its reference dtype), writes one prompt of ``tokens`` zero keys and values into every
  attention layer's cache and reads ``nbytes`` back, split into the attention caches and the recurrent
  states (a recurrent state's size does not depend on what was written into it).
  Nothing is computed from a formula here: the checker of exercise 05.4 compares these with
  :func:`kvsim.calc.memory.allocated_bytes` and :func:`kvsim.calc.memory.fixed_state_bytes`.
"""

from __future__ import annotations

import mlx.core as mx

from ...cache import make_caches
from ...calc.registry import load_model


def prompt_caches_nbytes(model: str = "jamba-v0.1", tokens: int = 1000) -> dict:
    """{"kv_bytes", "state_bytes", "nbytes"} of the model's real caches after one ``tokens``-token prompt."""
    spec = load_model(model)
    caches = make_caches(spec, dtype=mx.bfloat16)
    kv = state = 0
    for layer, cache in zip(spec.layers, caches):
        if layer.kind == "recurrent":
            state += cache.nbytes
            continue
        k = mx.zeros((1, layer.num_key_value_heads, tokens, layer.head_dim), dtype=mx.bfloat16)
        v = mx.zeros((1, layer.num_key_value_heads, tokens, layer.v_head_dim), dtype=mx.bfloat16)
        cache.update_and_fetch(k, v)
        kv += cache.nbytes
    return {"kv_bytes": kv, "state_bytes": state, "nbytes": kv + state}
