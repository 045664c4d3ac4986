"""Serving capacity: how many sequences, or how long a context, fit next to the weights.

Contract (pure arithmetic, no MLX)
- KV budget per GPU = memory · utilization − weights / tp (never below 0).
- Per-sequence bytes = KV bytes of one sequence at T tokens (in the chosen view) + its fixed
  recurrent state; under tensor parallelism KV heads are split (``n_kv / tp``, or one replicated head
  per rank when tp is a multiple of n_kv; any other tp is refused) and the MLA latent is replicated, as
  :func:`kvsim.calc.memory.heads_per_rank` computes.
- ``max_concurrent_sequences`` = ⌊budget / per-sequence bytes⌋;
  ``max_context_tokens`` = the largest T whose batch fits (None when no T is too long, i.e. every
  cache layer is windowed); ``crossover_tokens`` = the first T at which the cache equals the weights.
- :func:`held_bytes`: weights / tp + B · per-sequence bytes, what a device holds to decode a batch (every
  expert of a mixture counts); the one "does it fit" number of the lessons.
"""

from __future__ import annotations

import numpy as np

from . import memory, weights
from .config import ModelSpec
from .search import T_MAX, first_tokens, last_true
from .units import DEFAULT_STEP, InputError


def _weights_bytes(spec: ModelSpec, weights_dtype, tp):
    return weights.weights_bytes(spec, weights_dtype) // tp


def kv_budget_bytes(memory_bytes: float, utilization: float = 0.9, weights_bytes: float = 0) -> int:
    """KV budget = memory · utilization − weights, at least 0."""
    if not 0 < utilization <= 1:
        raise InputError(f"utilization must be in (0, 1], got {utilization!r}")
    if memory_bytes <= 0:
        raise InputError(f"memory_bytes must be > 0, got {memory_bytes!r}")
    return max(0, int(memory_bytes * utilization - weights_bytes))


def per_sequence_bytes(spec: ModelSpec, tokens, kv_dtype="bf16", tp: int = 1, view: str = "theoretical",
                       block_size: int | None = None, step: int = DEFAULT_STEP, state_dtype=None):
    """Bytes one sequence of T tokens needs on one rank: KV (in ``view``) + recurrent state."""
    kv = memory.model_kv_bytes(spec, tokens, 1, kv_dtype, view, step, block_size, tp)
    return np.asarray(kv, dtype=np.int64) + memory.fixed_state_bytes(spec, 1, state_dtype)


def max_concurrent_sequences(spec: ModelSpec, tokens, memory_bytes: float, utilization: float = 0.9,
                             kv_dtype="bf16", weights_dtype="bf16", tp: int = 1,
                             weights_bytes: float | None = None, view: str = "theoretical",
                             block_size: int | None = None, state_dtype=None):
    """⌊(memory · utilization − weights/tp) / per-sequence bytes at T tokens⌋, vectorized over T."""
    w = _weights_bytes(spec, weights_dtype, tp) if weights_bytes is None else weights_bytes
    budget = kv_budget_bytes(memory_bytes, utilization, w)
    per_seq = per_sequence_bytes(spec, tokens, kv_dtype, tp, view, block_size, state_dtype=state_dtype)
    out = np.where(per_seq > 0, budget // np.maximum(per_seq, 1), np.iinfo(np.int64).max)
    return int(out) if np.ndim(tokens) == 0 else out


def max_context_tokens(spec: ModelSpec, batch: int, memory_bytes: float, utilization: float = 0.9,
                       kv_dtype="bf16", weights_dtype="bf16", tp: int = 1,
                       weights_bytes: float | None = None, state_dtype=None) -> int | None:
    """Largest T with batch · per-sequence bytes(T) ≤ budget; None if every T fits (all layers windowed)."""
    w = _weights_bytes(spec, weights_dtype, tp) if weights_bytes is None else weights_bytes
    budget = kv_budget_bytes(memory_bytes, utilization, w)

    def fits(t):
        return batch * int(per_sequence_bytes(spec, t, kv_dtype, tp, state_dtype=state_dtype)) <= budget

    if not fits(0):
        return 0
    if fits(T_MAX):
        return None
    return last_true(fits, 0, T_MAX)  # theoretical bytes never shrink as T grows


def crossover_tokens(spec: ModelSpec, kv_dtype="bf16", weights_dtype="bf16", batch: int = 1,
                     weights_bytes: float | None = None) -> int | None:
    """First token count T at which batch · KV bytes(T) ≥ weights bytes; None if it never does."""
    w = _weights_bytes(spec, weights_dtype, 1) if weights_bytes is None else weights_bytes
    return first_tokens(lambda t: batch * int(memory.kv_bytes(spec, t, 1, kv_dtype)) >= w)


def held_bytes(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", weights_dtype="bf16", tp: int = 1):
    """Bytes one rank must hold to decode ``batch`` sequences of T tokens: its weights + B · (KV + state).

    held = weights / tp + B · :func:`per_sequence_bytes` (T). Every expert of a mixture counts (all are
    held), unlike the bytes one decode step reads; "does it fit" compares this with the device memory.
    """
    return _weights_bytes(spec, weights_dtype, tp) + batch * per_sequence_bytes(spec, tokens, kv_dtype, tp)
