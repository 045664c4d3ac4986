"""Where a hybrid's fixed state stops being a cost: the short-context crossover.

Contract (pure, over :mod:`kvsim.calc.hybrid`)
- A hybrid pays its recurrent state from the first token; the same-depth all-attention transformer
  (:func:`kvsim.calc.hybrid.all_attention`) pays K/V in every layer instead. Below the crossover
  the hybrid holds MORE bytes per sequence; from it on, less.
- :func:`hybrid_crossover_tokens` = the first T with all-attention KV(T) ≥ hybrid KV(T) + state,
  with kvsim's default state dtype (:func:`kvsim.calc.hybrid.cache_split`).
- :func:`short_context_curves`: both per-sequence sizes against T, for the lesson 05 plot.
- :func:`layer_crossover`: the same in one layer: one recurrent layer's state bytes against one attention
  layer's K/V bytes per token, and the first T at which that attention layer holds at least as much.
"""

from __future__ import annotations

import math

import numpy as np

from . import hybrid, memory
from .config import ModelSpec
from .search import first_tokens
from .units import InputError

def _gap(spec: ModelSpec, twin: ModelSpec, t, kv_dtype):
    """all-attention bytes − hybrid bytes at T (negative: the hybrid holds more)."""
    return (np.asarray(memory.kv_bytes(twin, t, 1, kv_dtype), dtype=np.int64)
            - np.asarray(hybrid.cache_split(spec, t, 1, kv_dtype)["total"], dtype=np.int64))


def hybrid_crossover_tokens(spec: ModelSpec, kv_dtype="bf16") -> int | None:
    """First T at which the all-attention counterfactual holds at least the hybrid's KV + state."""
    if "recurrent" not in spec.kinds:
        raise InputError(f"{spec.name} has no recurrent layer: there is no state to amortize")
    twin = hybrid.all_attention(spec)
    # the gap never shrinks as T grows; None e.g. for windowed attention (the counterfactual stops growing too)
    return first_tokens(lambda t: _gap(spec, twin, t, kv_dtype) >= 0)


def short_context_curves(spec: ModelSpec, tokens, kv_dtype="bf16") -> dict:
    """{"hybrid": KV + state, "all-attention": KV} bytes per sequence at each T of ``tokens``."""
    t = np.asarray(tokens, dtype=np.int64)
    return {"hybrid": np.asarray(hybrid.cache_split(spec, t, 1, kv_dtype)["total"], dtype=np.int64),
            "all-attention": np.asarray(memory.kv_bytes(hybrid.all_attention(spec), t, 1, kv_dtype),
                                        dtype=np.int64)}


def layer_crossover(spec: ModelSpec, kv_dtype="bf16") -> dict:
    """{"state_bytes": one recurrent layer's state, "kv_token_bytes": one attention layer's K/V per token,
    "tokens": ⌈state / per-token⌉, the first T at which that layer holds at least the state}."""
    recurrent = [layer for layer in spec.layers if layer.kind == "recurrent"]
    attention = [layer for layer in spec.layers if layer.caches_tokens]
    if not recurrent or not attention:
        raise InputError(f"{spec.name} needs a recurrent and an attention layer to compare")
    state = memory.state_bytes(recurrent[0])  # kvsim's default state dtype
    per_token = memory.layer_token_bytes(attention[0], kv_dtype)
    return {"state_bytes": state, "kv_token_bytes": per_token, "tokens": math.ceil(state / per_token)}
