"""Lesson 00's numbers: one model's KV bytes of one sequence against tokens; a partly filled tail (pure: calc only).

Contract
- :func:`slider_demo_curve`: the x grid (0..max_tokens), the KV bytes of one sequence along it, the
  bytes at the slider's ``tokens`` and the bytes one token adds, all by :mod:`kvsim.calc.memory`.
- :func:`partial_tail`: for T tokens, the slots a step-grown buffer holds (:func:`kvsim.calc.memory.allocated_slots`)
  and how many are empty, and the blocks a paged cache holds, the tokens in its last block and that block's empty
  slots: what ``kvsim calc`` rounds up to.
"""

from __future__ import annotations

import numpy as np

from ...calc import memory
from ...calc.registry import load_model
from ...calc.units import DEFAULT_BLOCK_SIZE, DEFAULT_STEP, positive_int


def slider_demo_curve(model: str, tokens: int, kv_dtype: str = "bf16", max_tokens: int = 131_072,
                      points: int = 129) -> dict:
    """{"tokens", "kv_bytes"} along 0..max_tokens, "at_bytes" = kv_bytes(T = tokens), "per_token_bytes"."""
    spec = load_model(model)
    t = np.linspace(0, max_tokens, points).astype(np.int64)
    return {"tokens": t, "kv_bytes": memory.kv_bytes(spec, t, 1, kv_dtype),
            "at_bytes": memory.kv_bytes(spec, tokens, 1, kv_dtype),
            "per_token_bytes": memory.bytes_per_token(spec, kv_dtype)}


def partial_tail(tokens: int, step: int = DEFAULT_STEP, block_size: int = DEFAULT_BLOCK_SIZE) -> dict:
    """Step slots ⌈T/step⌉·step and their empty ones; blocks ⌈T/N⌉, tokens in the last, its empty slots."""
    t = positive_int("tokens", tokens)
    n = positive_int("block_size", block_size)
    slots = int(memory.allocated_slots(t, step))
    blocks = -(-t // n)
    last = t - (blocks - 1) * n
    return {"tokens": t, "step_slots": slots, "empty_step_slots": slots - t, "blocks": blocks,
            "tokens_in_last_block": last, "empty_in_last_block": n - last}
