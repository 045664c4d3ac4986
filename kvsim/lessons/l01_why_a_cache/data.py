"""What each decode step does to each token position, with and without a KV cache (lesson 01's grid).

Contract (pure numpy)
- Positions are 0-based: prompt tokens 0..P-1, answer token k (k = 1..A) at position P + k - 1.
  Step 1 is the prefill and produces answer token 1; step k produces answer token k.
- :func:`step_grid` returns an (A, P + A) int array, row k-1 = step k, with one code per position:
  ``FUTURE`` not in the sequence yet; ``RECOMPUTED`` fed again although an earlier step computed it
  (no cache); ``READ`` its key and value read from the cache; ``NEW`` computed for the first time;
  ``PRODUCED`` the token this step outputs (fed only at the next step).
- Row sums of RECOMPUTED + NEW equal the positions :func:`kvsim.calc.tokens_fed.tokens_fed` counts.
"""

from __future__ import annotations

import numpy as np

from ...calc.units import positive_int

FUTURE, RECOMPUTED, READ, NEW, PRODUCED = range(5)
CODE_NAMES = {FUTURE: "not in the sequence yet", RECOMPUTED: "recomputed (fed again)",
              READ: "K, V read from the cache", NEW: "computed for the first time", PRODUCED: "token produced"}


def step_grid(prompt_tokens: int, answer_tokens: int, cached: bool) -> np.ndarray:
    """(A, P + A) codes: row k-1 is decode step k, column t is position t."""
    p, a = positive_int("prompt_tokens", prompt_tokens), positive_int("answer_tokens", answer_tokens)
    grid = np.full((a, p + a), FUTURE, dtype=np.int64)
    for k in range(1, a + 1):
        last = p + k - 2  # the newest position fed at step k (the prompt's last token at step 1)
        row = grid[k - 1]
        if k == 1:
            row[:p] = NEW
        else:
            row[:last] = READ if cached else RECOMPUTED
            row[last] = NEW
        row[last + 1] = PRODUCED
    return grid


def fed_per_step(grid: np.ndarray) -> np.ndarray:
    """Positions fed at each step: NEW + RECOMPUTED cells per row."""
    return ((grid == NEW) | (grid == RECOMPUTED)).sum(axis=1)
