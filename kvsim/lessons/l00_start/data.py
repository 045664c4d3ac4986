"""Lesson 00's numbers: one model's KV bytes of one sequence against tokens (pure: calc only).

Contract
- :func:`slider_demo_curve`: the x grid (0..max_tokens), the KV bytes of one sequence along it, the
  bytes at the slider's ``tokens`` and the bytes one token adds, all by :mod:`kvsim.calc.memory`.
"""

from __future__ import annotations

import numpy as np

from ...calc import memory
from ...calc.registry import load_model


def slider_demo_curve(model: str, tokens: int, kv_dtype: str = "bf16", max_tokens: int = 131_072,
                      points: int = 129) -> dict:
    """{"tokens", "kv_bytes"} along 0..max_tokens, "at_bytes" = kv_bytes(T = tokens), "per_token_bytes"."""
    spec = load_model(model)
    t = np.linspace(0, max_tokens, points).astype(np.int64)
    return {"tokens": t, "kv_bytes": memory.kv_bytes(spec, t, 1, kv_dtype),
            "at_bytes": memory.kv_bytes(spec, tokens, 1, kv_dtype),
            "per_token_bytes": memory.bytes_per_token(spec, kv_dtype)}
