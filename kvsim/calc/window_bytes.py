"""Windowed layers: how sliding windows and attention chunks bound the KV cache, kind by kind.

Contract
- Pure arithmetic over :mod:`kvsim.calc.memory` (no MLX), vectorized over ``tokens`` like it.
- A sliding layer keeps min(T, W) tokens (W = ``sliding_window``), a chunked layer the tokens of
  the current chunk, T - C·⌊(T-1)/C⌋ (C = ``attention_chunk_size``), a full layer all T.
- :func:`bytes_by_kind` splits a model's theoretical KV bytes by layer kind.
- :func:`window_savings` compares a model with the window-ignoring calculator
  (:func:`kvsim.calc.counterfactual.full_attention`: every sliding/chunked layer counted as full).
- :func:`layer_pattern` writes the layer kinds as letters (``S`` sliding, ``F`` full,
  ``C`` chunked, ``N`` full without RoPE, ``M`` MLA, ``R`` recurrent).
"""

from __future__ import annotations

import numpy as np

from . import memory
from .config import Kind, ModelSpec
from .counterfactual import full_attention

CACHE_KINDS = Kind.WINDOWED + tuple(k for k in Kind.CACHED if k not in Kind.WINDOWED)  # windows first


def bytes_by_kind(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16") -> dict:
    """{kind: Σ over that kind's layers of kept(T)·token_bytes·B}, for the cache kinds present."""
    out = {}
    for kind in CACHE_KINDS:
        groups = [(layer, n) for layer, n in memory.layer_groups(spec) if layer.kind == kind]
        if not groups:
            continue
        total = sum(n * np.asarray(memory.layer_kv_bytes(layer, tokens, kv_dtype, batch), dtype=np.int64)
                    for layer, n in groups)
        out[kind] = int(total) if np.ndim(tokens) == 0 else np.asarray(total, dtype=np.int64)
    return out


def window_savings(spec: ModelSpec, tokens: int, batch: int = 1, kv_dtype="bf16") -> dict:
    """Real KV bytes, bytes if windows were ignored, and their ratio (ignored / real) at ``tokens``."""
    real = memory.kv_bytes(spec, tokens, batch, kv_dtype)
    ignored = memory.kv_bytes(full_attention(spec), tokens, batch, kv_dtype)
    return {"real_bytes": int(real), "windows_ignored_bytes": int(ignored),
            "ratio": ignored / real if real else float("nan")}


def largest_window_tokens(spec: ModelSpec) -> int | None:
    """The largest window or chunk: beyond it only the full layers still grow (None: no windowed layer)."""
    sizes = [layer.window_tokens for layer in spec.layers if layer.window_tokens is not None]
    return max(sizes) if sizes else None


def _letter(layer) -> str:
    if layer.kind == "full":
        return "F" if layer.use_rope else "N"
    return {"sliding": "S", "chunked": "C", "mla": "M", "recurrent": "R", "none": "-"}[layer.kind]


def layer_pattern(spec: ModelSpec) -> str:
    """Layer kinds as letters in model order, e.g. gemma-3: 'SSSSSFSSSSSF...'."""
    return "".join(_letter(layer) for layer in spec.layers)


def pattern_period(spec: ModelSpec) -> str:
    """The shortest repeating unit of :func:`layer_pattern` (the whole pattern if none repeats)."""
    p = layer_pattern(spec)
    for n in range(1, len(p) + 1):
        unit = p[:n]
        if (unit * (len(p) // n + 1))[: len(p)] == p:
            return unit
    return p
