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

Decode lookahead and padded prefill in numbers (lesson 09, pure).
- :func:`lookahead_curve`: for k = 1..max_k, the rows one sliding layer keeps beyond its W-row ring to undo k
  speculative one-token appends (:func:`kvsim.calc.padded_prefill.lookahead_rows_per_layer`): spare slots k − 1,
  always; the overwrite log k while the lookahead is pending, 0 once committed; and the rows each design copies per
  decode step (the log saves the row a write overwrites: 1; spare slots: 0).
- :func:`padded_mask`: the (M, M) picture of a causal prefill of P real tokens padded to M: codes ``REAL`` (a real
  query sees a real key), ``PAD_ROW`` (a pad query's row: computed and thrown away), ``PAD_KEY`` (a pad key a query
  sees; only pad rows see pads) and ``HIDDEN`` (masked by causality).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from ...calc.padded_prefill import lookahead_rows_per_layer
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


def slider_round(offset: int, num_draft: int, accepted: int) -> RoundStages:
    """:func:`round_stages` for the view's sliders, where n may pass k: round_stages(P, k, min(n, k))."""
    return round_stages(offset, num_draft, min(accepted, num_draft))


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


def lookahead_curve(window: int, max_k: int = 8) -> dict:
    """k = 1..max_k; rows beyond the W-row ring per design, and rows copied per decode step."""
    k = np.arange(1, positive_int("max_k", max_k) + 1)
    rows = [lookahead_rows_per_layer(window, int(x)) for x in k]
    return {"k": k, "window": window,
            "spare_slots": np.array([r["spare_slots"]["peak"] - window for r in rows]),
            "overwrite_log_pending": np.array([r["overwrite_log"]["peak"] - window for r in rows]),
            "overwrite_log_idle": np.array([r["overwrite_log"]["idle"] - window for r in rows]),
            "copied_per_step": {"spare_slots": 0, "overwrite_log": 1}}


HIDDEN, REAL, PAD_ROW, PAD_KEY = range(4)


def padded_mask(prompt_tokens: int, padded_tokens: int) -> np.ndarray:
    """(M, M) codes of a causal prefill of P real tokens padded at the end to M (rows: queries, columns: keys)."""
    p, m = positive_int("prompt_tokens", prompt_tokens), positive_int("padded_tokens", padded_tokens)
    if m < p:
        raise InputError(f"padded_tokens must be >= prompt_tokens={p}, got {m}")
    q, kpos = np.arange(m)[:, None], np.arange(m)[None]
    codes = np.where(kpos <= q, REAL, HIDDEN)
    codes[(q >= p) & (kpos <= q) & (kpos < p)] = PAD_ROW
    codes[(kpos >= p) & (kpos <= q)] = PAD_KEY
    return codes
