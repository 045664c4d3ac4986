"""Hybrid and recurrent models: a fixed recurrent state beside the KV of the few attention layers.

Contract
- Pure arithmetic over :mod:`kvsim.calc.memory` (no MLX), vectorized over ``tokens`` like it.
- A recurrent layer (Mamba, Mamba-2, Gated DeltaNet, RG-LRU) keeps ``Σ prod(shape)·b`` bytes per
  sequence whatever T is, each state tensor in its own dtype (``state_dtype=None``: as the reference
  implementation, e.g. Qwen3-Next's delta-rule state in fp32 beside a bf16 conv window; a name
  overrides all, :func:`kvsim.calc.memory.state_bytes`); attention layers keep their K/V as usual.
- :func:`cache_split` returns the two parts and their sum for B sequences.
- :func:`all_attention` is the counterfactual "same depth, every layer attention": each recurrent
  layer replaced by the model's first attention layer (Jamba: 32 full layers of 8 KV heads, the
  geometry of Mixtral 8x7B).
- :func:`tokens_to_reach` finds the first T at which a model's per-sequence cache reaches a byte
  count (e.g. a recurrent model's whole state).
- :func:`mixers` counts layers per mixer: attention kinds and recurrent families.
- :func:`allocated_layer_bytes` is what each layer's MLX cache should hold after T tokens: allocated
  K/V (growth in steps of ``step`` tokens) or the fixed state; compare it with measured ``nbytes``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import memory
from .config import ModelSpec
from .search import first_tokens
from .units import DEFAULT_STEP, InputError



def mixers(spec: ModelSpec) -> dict[str, int]:
    """Layer counts by mixer: 'full', 'sliding', ... for attention, the family for recurrent layers."""
    out: dict[str, int] = {}
    for layer in spec.layers:
        key = layer.recurrent_family if layer.kind == "recurrent" else layer.kind
        out[key] = out.get(key, 0) + 1
    return out


def cache_split(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", state_dtype=None) -> dict:
    """{'kv': attention KV bytes(T), 'state': fixed recurrent bytes, 'total': kv + state}, for B sequences."""
    kv = memory.kv_bytes(spec, tokens, batch, kv_dtype)
    state = memory.fixed_state_bytes(spec, batch, state_dtype)
    total = np.asarray(kv, dtype=np.int64) + state
    return {"kv": kv, "state": state, "total": int(total) if np.ndim(tokens) == 0 else total}


def all_attention(spec: ModelSpec) -> ModelSpec:
    """Every recurrent layer replaced by ``spec``'s first attention layer (the all-attention counterfactual)."""
    attention = [layer for layer in spec.layers if layer.caches_tokens]
    if not attention:
        raise InputError(f"{spec.name} has no attention layer to copy (it is purely recurrent)")
    layers = tuple(attention[0] if layer.kind == "recurrent" else layer for layer in spec.layers)
    return replace(spec, name=f"{spec.name} if every layer were attention", layers=layers)


def tokens_to_reach(spec: ModelSpec, target_bytes: int, kv_dtype="bf16", state_dtype=None) -> int | None:
    """First T with KV(T) + state ≥ ``target_bytes`` for one sequence; None if the cache never gets there."""
    def size(t):
        return int(cache_split(spec, t, 1, kv_dtype, state_dtype)["total"])

    return first_tokens(lambda t: size(t) >= target_bytes)  # the cache never shrinks as T grows


def allocated_layer_bytes(spec: ModelSpec, tokens, kv_dtype="bf16", state_dtype=None, step: int = DEFAULT_STEP,
                          model_dtype="bf16") -> np.ndarray:
    """(layers, len(tokens)) bytes per layer: allocated K/V (slots = min(⌈T/step⌉·step, W or C)) + fixed state."""
    t = np.atleast_1d(np.asarray(tokens, dtype=np.int64))
    return np.stack([np.asarray(memory.layer_kv_bytes(layer, t, kv_dtype, view="allocated", step=step), dtype=np.int64)
                     + memory.state_bytes(layer, state_dtype, model_dtype) for layer in spec.layers])
