"""What each decode step does to each token position, with and without a KV cache (lesson 01's grid).

Contract (pure numpy)
- Positions are 0-based: prompt tokens 0..P-1, answer token k (k = 1..A) at position P + k - 1.
  Step 1 is the prefill and produces answer token 1; step k produces answer token k.
- :func:`step_grid` returns an (A, P + A) int array, row k-1 = step k, with one code per position:
  ``FUTURE`` not in the sequence yet; ``RECOMPUTED`` fed again although an earlier step computed it
  (no cache); ``READ`` its key and value read from the cache; ``NEW`` computed for the first time;
  ``PRODUCED`` the token this step outputs (fed only at the next step).
- Row sums of RECOMPUTED + NEW equal the positions :func:`kvsim.calc.tokens_fed.tokens_fed` counts.
- :func:`step_grid_panels`, :func:`fed_totals`, :func:`fed_curves_log`: the numbers lesson 01's views draw
  and print (both grids with positions fed so far and now; totals and their ratio; curves from step 1).
- :func:`fed_each_step`: positions fed AT each step k = 1..A (not summed): P + k − 1 without a cache, P then 1 with
  one; each sums to :func:`kvsim.calc.tokens_fed.tokens_fed`, so the area under the first line is the quadratic.
"""

from __future__ import annotations

import numpy as np

from ...calc.tokens_fed import CACHED, UNCACHED, fed_curves, tokens_fed
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


def step_grid_panels(step: int, prompt_tokens: int, answer_tokens: int) -> dict:
    """Both grids, positions fed through ``step`` and at ``step``: fed_so_far = sum(fed_per_step[:step])."""
    step = min(step, answer_tokens)
    grids = {"without a cache": step_grid(prompt_tokens, answer_tokens, cached=False),
             "with a cache": step_grid(prompt_tokens, answer_tokens, cached=True)}
    return {"step": step, "grids": grids,
            "fed_so_far": {label: int(fed_per_step(g)[:step].sum()) for label, g in grids.items()},
            "fed_now": {label: int(fed_per_step(g)[step - 1]) for label, g in grids.items()}}


def fed_totals(prompt_tokens: int, answer_tokens: int) -> tuple[int, int, float]:
    """(uncached, cached, ratio) positions fed over the whole answer: ratio = uncached / cached."""
    un, ca = (tokens_fed(prompt_tokens, answer_tokens, c) for c in (False, True))
    return un, ca, un / ca


def fed_log_ylim(prompt_tokens: int, uncached_total: int) -> tuple[float, int]:
    """The log plot's y range with headroom for the point labels: (P / 2, 4 · uncached total)."""
    return prompt_tokens / 2, 4 * uncached_total


def fed_curves_log(prompt_tokens: int, answer_tokens: int) -> tuple[np.ndarray, dict]:
    """Answer lengths from 1 (log axis) and positions fed at each: tokens_fed(P, a, cached) per a."""
    a, _ = fed_curves(prompt_tokens, answer_tokens)
    a = np.union1d([1], a[a >= 1])  # log axis: start at step 1, where both modes feed the whole prompt
    return a, {label: np.array([tokens_fed(prompt_tokens, int(x), cached) for x in a])
               for label, cached in ((UNCACHED, False), (CACHED, True))}


def fed_each_step(prompt_tokens: int, answer_tokens: int) -> tuple[np.ndarray, dict]:
    """Steps k = 1..A and positions fed at step k: P + k − 1 without a cache; P at step 1, then 1, with one."""
    p, a = positive_int("prompt_tokens", prompt_tokens), positive_int("answer_tokens", answer_tokens)
    k = np.arange(1, a + 1)
    return k, {UNCACHED: p + k - 1, CACHED: np.where(k == 1, p, 1)}
