"""Lesson 02's numbers: the KV-vs-tokens curves and one accelerator's memory split, by model name.

Contract (pure: calc only, no MLX, no drawing)
- :func:`kv_curves`: x (tokens per sequence), the model's KV bytes for a batch and, when the model is
  not MHA already, its MHA counterfactual (:func:`kvsim.calc.counterfactual.as_mha`).
- :func:`memory_split`: one accelerator's memory shared by the weights, the KV of the sequences that
  fit, the unused KV budget and the reserve (lesson 02's bar).
- :func:`kv_size_numbers`: the KV-size view's curves, weights, bytes at T and per token.
- :func:`seed_figure_numbers`: seed 001's figure (curves, crossovers where the cache equals the bf16
  weights, marks at 8K and 128K, spaced ticks); :func:`seed_figure_data` memoizes the model part.
- :func:`engines_all_numbers`: one request sized by every engine (:func:`kvsim.calc.engines_all.engine_table`)
  for each of :data:`ENGINE_MODELS`, the numbers of lesson 02's engines figure.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...calc import memory, weights
from ...calc.engines_all import engine_table
from ...calc.capacity import crossover_tokens, kv_budget_bytes, max_concurrent_sequences, per_sequence_bytes
from ...calc.counterfactual import as_mha
from ...calc.hardware import get_accelerator
from ...calc.registry import load_model
from ...calc.units import UNIT_BYTES


def kv_curves(model: str, tokens: int, batch: int = 1, kv_dtype: str = "bf16", points: int = 256):
    """x (tokens per sequence), the model's KV bytes for the batch, and its MHA counterfactual."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    curves = {f"{spec.name} (B={batch})": memory.kv_bytes(spec, t, batch, kv_dtype)}
    if any(layer.has_kv_heads for layer in spec.layers):
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


def kv_size_numbers(model: str, tokens: int, batch: int = 1, kv_dtype: str = "bf16") -> dict:
    """The KV-size view's numbers: :func:`kv_curves`, the bf16 weights, KV bytes of the batch at ``tokens``
    and the bytes one token adds (M_token, :func:`kvsim.calc.memory.bytes_per_token`)."""
    spec = load_model(model)
    t, curves = kv_curves(model, tokens, batch, kv_dtype)
    return {"name": spec.name, "tokens": t, "curves": curves, "weights_bytes": weights.weights_bytes(spec, "bf16"),
            "at_bytes": memory.kv_bytes(spec, tokens, batch, kv_dtype),
            "per_token_bytes": memory.bytes_per_token(spec, kv_dtype)}


TICKS = (8192, 32_768, 131_072, 262_144, 524_288, 1_048_576, 2_097_152)


@lru_cache(maxsize=32)
def seed_figure_data(model="llama-3.1-8b", kv_dtype="bf16"):
    """(spec, its MHA twin, bf16 weights bytes, {name: crossover tokens or None}), memoized per setting."""
    spec = load_model(model)
    mha = as_mha(spec)
    w = weights.weights_bytes(spec, "bf16")
    cross = {"model": crossover_tokens(spec, kv_dtype), "mha": crossover_tokens(mha, kv_dtype)}
    return spec, mha, w, cross


def spaced_ticks(end: int) -> list[int]:
    """The context-length ticks up to ``end``, dropping any closer than 6 % of the range to the previous."""
    out: list[int] = []
    for t in TICKS:
        if t <= end and (not out or t - out[-1] >= 0.06 * end):
            out.append(t)
    return out


def seed_figure_numbers(model="llama-3.1-8b", kv_dtype="bf16") -> dict:
    """Seed 001's figure: KV bytes of one sequence and of its MHA twin along 0..end (end = max(160K, 1.15 ×
    the later crossover)), bytes per token of each, the weights, the crossovers and KV bytes at 8K and 128K."""
    spec, mha, w, cross = seed_figure_data(model, kv_dtype)
    end = max(160 * 1024, int(1.15 * max(c or 0 for c in cross.values())))
    t = np.linspace(0, end, 257).astype(np.int64)
    return {"name": spec.name, "num_attention_heads": spec.num_attention_heads, "end": end, "tokens": t,
            "per_token_bytes": {"model": memory.bytes_per_token(spec, kv_dtype),
                                "mha": memory.bytes_per_token(mha, kv_dtype)},
            "kv_bytes": {"model": memory.kv_bytes(spec, t, 1, kv_dtype), "mha": memory.kv_bytes(mha, t, 1, kv_dtype)},
            "weights_bytes": w, "crossover_tokens": cross,
            "marks": {n: memory.kv_bytes(spec, n, 1, kv_dtype) for n in (8192, 131_072)},
            "ticks": spaced_ticks(end)}


TOKENS_PER_K = 1024  # context lengths are named in binary thousands: 8K = 8,192 tokens, 128K = 131,072


def k_tokens_label(tokens: int) -> str:
    """A context length in binary thousands: 8192 -> '8K' (tokens // TOKENS_PER_K)."""
    return f"{tokens // TOKENS_PER_K}K"


def weights_label(weights_bytes: int) -> str:
    """The weights line's label in both units: 'bf16 weights: 14.96 GiB (16.1 GB)' (bytes / 2**30, bytes / 1e9)."""
    return (f"bf16 weights: {weights_bytes / UNIT_BYTES['GiB']:.2f} GiB "
            f"({weights_bytes / UNIT_BYTES['GB']:.1f} GB)")


# one of each cache shape: full GQA, sliding + full, MLA, Mamba hybrid, Gated DeltaNet hybrid
ENGINE_MODELS = ("llama-3-8b", "gemma-3-27b", "deepseek-v3", "jamba-v0.1", "qwen3-next-80b-a3b")


def engines_all_numbers(models=ENGINE_MODELS, prompt_tokens: int = 8192, decode_steps: int = 0,
                        kv_dtype: str = "bf16") -> dict:
    """{model: :func:`kvsim.calc.engines_all.engine_table`} for one request of ``prompt_tokens`` prompt tokens
    and ``decode_steps`` decode steps: bytes per layer kind held by kvsim, mlx-lm, transformers (dynamic and
    static) and vLLM, or an engine's one-line refusal."""
    return {name: engine_table(load_model(name), prompt_tokens, decode_steps, kv_dtype) for name in models}
