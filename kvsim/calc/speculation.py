"""Speculative decoding in expectation (Leviathan et al., 2023): tokens per target pass and speedup (pure).

Contract
- :func:`expected_tokens_per_pass`: with k drafted tokens each accepted i.i.d. with probability α,
  E[tokens per target pass] = (1 − α^(k+1)) / (1 − α) (k + 1 when α = 1).
- :func:`expected_speedup`: with a draft step costing c target steps and a verification pass costing
  one step (decode is memory-bound: k+1 tokens read the same bytes), speedup = E / (k·c + 1).
"""

from __future__ import annotations

import numpy as np

from .units import InputError


def expected_tokens_per_pass(acceptance: float, k):
    """Tokens one target pass yields with k drafts accepted i.i.d. with probability α: (1 − α^(k+1)) / (1 − α)."""
    if not 0 <= acceptance <= 1:
        raise InputError(f"acceptance must be in [0, 1], got {acceptance!r}")
    k = np.asarray(k, dtype=float)
    if acceptance == 1:
        return k + 1
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


def expected_speedup(acceptance: float, k, draft_cost: float):
    """Speedup over plain decoding: E[tokens per pass] / (k·c + 1), c = draft step time / target step time."""
    if draft_cost < 0:
        raise InputError(f"draft_cost must be >= 0, got {draft_cost!r}")
    return expected_tokens_per_pass(acceptance, k) / (np.asarray(k, dtype=float) * draft_cost + 1)
