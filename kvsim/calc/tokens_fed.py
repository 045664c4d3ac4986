"""Token positions fed to the model to produce an answer, with and without a KV cache (pure).

Contract
- :func:`tokens_fed` is the formula: cached P + A - 1 (prefill, then one token per
  step), uncached Σ_{k=1..A} (P + k - 1) (the whole sequence again at every step).
- :func:`fed_curves` evaluates it for answer lengths 0..A (lesson 01's two curves); :func:`fed_rows`
  is the seed's table.
"""

from __future__ import annotations

import numpy as np

from .units import InputError

UNCACHED, CACHED = "without a cache", "with a cache"


def tokens_fed(prompt_tokens: int, answer_tokens: int, cached: bool) -> int:
    """Token positions fed to the model to produce an answer.

    Cached: P + (A - 1) (prefill, then one token per step). Uncached: Σ_{k=1..A} (P + k - 1).
    """
    p, a = int(prompt_tokens), int(answer_tokens)
    if p < 1 or a < 0:
        raise InputError("prompt_tokens must be >= 1 and answer_tokens >= 0")
    if a == 0:
        return 0
    if cached:
        return p + a - 1
    return a * p + a * (a - 1) // 2

def fed_curves(prompt_tokens: int, answer_tokens: int, points: int = 201):
    """Answer lengths 0..A and the token positions fed for each, without and with a cache."""
    a = np.unique(np.linspace(0, answer_tokens, points).round().astype(np.int64))
    return a, {UNCACHED: np.array([tokens_fed(prompt_tokens, int(x), False) for x in a]),
               CACHED: np.array([tokens_fed(prompt_tokens, int(x), True) for x in a])}


def fed_rows(prompt_tokens: int = 1000, answer_tokens: int = 1000) -> list[dict]:
    """The seed's table: positions fed at step k and their sum over A steps, per mode."""
    p, a = prompt_tokens, answer_tokens
    return [
        {"mode": UNCACHED, "fed at step k": f"the whole sequence, {p:,} + (k - 1)",
         f"sum over {a:,} steps": tokens_fed(p, a, cached=False)},
        {"mode": CACHED, "fed at step k": f"{p:,} at step 1 (prefill), then 1",
         f"sum over {a:,} steps": tokens_fed(p, a, cached=True)},
    ]
