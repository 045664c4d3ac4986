"""Lesson 09 (speculative decoding and rewind): pure numbers for this lesson's pictures (calc and serving only;
no MLX, no drawing).

Speculative decoding in expectation (Leviathan et al., 2023): tokens per target pass and speedup (pure).

Contract
- :func:`expected_tokens_per_pass`: with k drafted tokens each accepted i.i.d. with probability α,
  E[tokens per target pass] = (1 − α^(k+1)) / (1 − α) (k + 1 when α = 1).
- :func:`expected_speedup`: with a draft step costing c target steps and a verification pass costing
  one step (decode is memory-bound: k+1 tokens read the same bytes), speedup = E / (k·c + 1).

One round of speculative decoding in numbers, and a prompt-lookup drafter (lesson 09).

Contract (pure)
- :func:`round_stages`: the target's cache holds P tokens (the context minus its last token). The
  draft proposes k tokens; the target is fed [last, d_1..d_k] in one pass (offset P + k + 1) and keeps
  the n drafts that match its own greedy picks plus its own token at position n; the cache is trimmed
  by k − n to P + n + 1 and n + 1 tokens were emitted (as :func:`kvsim.decode.speculative_generate`).
- :func:`prompt_lookup_draft`: a drafter without a model (seed 000's prompt lookup): find the latest
  earlier occurrence of the context's last ``ngram`` tokens and propose the k tokens that followed it
  (fewer at the end of the context, none when the n-gram never occurred before).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from ...calc.units import InputError, nonnegative_int, positive_int


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


@dataclass(frozen=True)
class RoundStages:
    """A round's cache offsets: before, after the verify pass, after the trim; tokens emitted."""

    offset_before: int
    num_draft: int
    accepted: int
    offset_after_verify: int
    trimmed: int
    offset_after: int
    emitted: int


def round_stages(offset: int, num_draft: int, accepted: int) -> RoundStages:
    """Offsets of one round: P → P + k + 1 (verify) → P + n + 1 (trim k − n); n + 1 tokens emitted."""
    p, k = nonnegative_int("offset", offset), positive_int("num_draft", num_draft)
    n = nonnegative_int("accepted", accepted)
    if n > k:
        raise InputError(f"accepted must be in [0, num_draft={k}], got {n}")
    return RoundStages(p, k, n, p + k + 1, k - n, p + n + 1, n + 1)


def prompt_lookup_draft(tokens: Sequence[Hashable], num_draft: int, ngram: int = 2) -> list:
    """Propose up to k tokens: those that followed the latest earlier occurrence of the last n-gram."""
    k, n = positive_int("num_draft", num_draft), positive_int("ngram", ngram)
    seq = list(tokens)
    if len(seq) <= n:
        return []
    tail = seq[-n:]
    for start in range(len(seq) - n - 1, -1, -1):  # latest earlier match first
        if seq[start:start + n] == tail:
            return seq[start + n:start + n + k]
    return []


def speedup_curve(acceptance: float, draft_cost: float, max_draft: int) -> dict:
    """k = 1..max_draft, :func:`expected_speedup` and :func:`expected_tokens_per_pass` at each k, and the
    best k (the first k of the largest speedup) with its speedup."""
    k = np.arange(1, max_draft + 1)
    speed = expected_speedup(acceptance, k, draft_cost)
    return {"k": k, "speedup": speed, "tokens_per_pass": expected_tokens_per_pass(acceptance, k),
            "best_k": int(k[np.argmax(speed)]), "best_speedup": float(speed.max())}
