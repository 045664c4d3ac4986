"""Lesson 02's numbers: the KV-vs-tokens curves and one accelerator's memory split, by model name.

Contract (pure: calc only, no MLX, no drawing)
- :func:`kv_curves`: x (tokens per sequence), the model's KV bytes for a batch and, when the model is
  not MHA already, its MHA counterfactual (:func:`kvsim.calc.counterfactual.as_mha`).
- :func:`memory_split`: one accelerator's memory shared by the weights, the KV of the sequences that
  fit, the unused KV budget and the reserve (lesson 02's bar).
"""

from __future__ import annotations

import numpy as np

from ...calc import memory, weights
from ...calc.capacity import kv_budget_bytes, max_concurrent_sequences, per_sequence_bytes
from ...calc.counterfactual import as_mha
from ...calc.hardware import get_accelerator
from ...calc.registry import load_model


def kv_curves(model: str, tokens: int, batch: int = 1, kv_dtype: str = "bf16", points: int = 256):
    """x (tokens per sequence), the model's KV bytes for the batch, and its MHA counterfactual."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    curves = {f"{spec.name} (B={batch})": memory.kv_bytes(spec, t, batch, kv_dtype)}
    if any(layer.kind in ("full", "sliding", "chunked") for layer in spec.layers):
        mha = as_mha(spec)
        if mha.layers != spec.layers:
            label = f"same model if MHA ({spec.num_attention_heads} KV heads)"
            curves[label] = memory.kv_bytes(mha, t, batch, kv_dtype)
    return t, curves


def memory_split(model: str, accelerator: str, tokens: int, utilization: float = 0.9, kv_dtype="bf16"):
    """Device memory split into weights, KV of the sequences that fit, unused KV budget and reserve."""
    spec, acc = load_model(model), get_accelerator(accelerator)
    w = weights.weights_bytes(spec, "bf16")
    n = max_concurrent_sequences(spec, tokens, acc.memory_bytes, utilization, kv_dtype, weights_bytes=w)
    budget = kv_budget_bytes(acc.memory_bytes, utilization, w)
    used = n * int(per_sequence_bytes(spec, tokens, kv_dtype))
    held = min(w, acc.memory_bytes)  # the weights part of the device
    parts = {"weights (bf16)": held, f"KV of {n} sequences": used, "KV budget left": budget - used,
             "reserve / activations": acc.memory_bytes - max(budget, 0) - held}
    return acc.memory_bytes, {k: max(v, 0) for k, v in parts.items()}, n
