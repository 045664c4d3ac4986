"""Closed-form sums over a run of pure-growth iterations, which the simulator jumps over by bisection.

Contract (pure numpy over int64 arrays, one entry per running request; exact integers)
- Pure growth: in each iteration every running request stores one more token. A request that has
  stored c tokens holds ⌈(c + j) / bs⌉ blocks after j more iterations (paged), so sums over
  j = 1..k follow from F(n) = Σ_{x=1..n} ⌈x / bs⌉ (:func:`ceil_sum`) and cost O(requests), not
  O(requests · k).
- The largest j whose growth still fits is found by :func:`kvsim.calc.search.last_true`, the one bisection.
"""

from __future__ import annotations

import numpy as np

from ..calc.search import last_true
from .block_pool import cdiv


def ceil_sum(n, b):
    """F(n) = Σ_{x=1..n} ⌈x / b⌉ = b·q(q+1)/2 + r(q+1), n = qb + r (vectorized)."""
    q, r = np.divmod(n, b)
    return b * q * (q + 1) // 2 + r * (q + 1)


def new_blocks(stored, held, block_size: int, steps: int) -> int:
    """Blocks the running requests take to store ``steps`` more tokens each: Σ ⌈(c + j) / bs⌉ − held."""
    return int((cdiv(stored + steps, block_size) - held).sum())


def new_block_iterations(stored, held_sum: int, block_size: int, steps: int) -> int:
    """Σ_{j=1..steps} new_blocks(j) = Σ_i (F(c_i + steps) − F(c_i)) − steps · Σ held."""
    return int((ceil_sum(stored + steps, block_size) - ceil_sum(stored, block_size)).sum()) \
        - steps * held_sum


def paged_slot_iterations(stored, final, block_size: int, steps: int) -> tuple[int, int]:
    """(held, usable) slot-iterations of ``steps`` growth iterations, paged, each sequence alone.

    held = Σ_j Σ_i ⌈(c_i + j) / bs⌉ · bs; usable = Σ_j Σ_i min(held_ij, f_i): slots the request
    fills before it ends (the rest of its last block is internal fragmentation).
    """
    bs = block_size
    held = bs * int((ceil_sum(stored + steps, bs) - ceil_sum(stored, bs)).sum())
    last = (cdiv(final, bs) - 1) * bs                    # first slot of the last block
    usable = bs * (ceil_sum(np.minimum(stored + steps, last), bs) - ceil_sum(np.minimum(stored, last), bs)) \
        + final * np.maximum(0, stored + steps - np.maximum(stored, last))
    return held, int(usable.sum())


def cached_block_iterations(stored, held, block_size: int, steps: int, cached_blocks: int,
                            free_blocks: int) -> int:
    """Σ_j cached blocks over ``steps`` iterations: new blocks come from the free list, then evict LRU.

    ``free_blocks`` counts cached ones (evictable). Until the never-published free blocks run out
    (iteration j0) every cached block stays; after, each new block evicts one:
    Σ = j0 · cached + (steps − j0) · free − Σ_{j=j0+1..steps} new_blocks(j).
    """
    if cached_blocks == 0:
        return 0
    held_sum = int(held.sum())
    unpublished = free_blocks - cached_blocks

    def before_eviction(j):
        return new_blocks(stored, held, block_size, j) <= unpublished

    j0 = last_true(before_eviction, 0, steps + 1)
    taken_after_j0 = new_block_iterations(stored, held_sum, block_size, steps) \
        - new_block_iterations(stored, held_sum, block_size, j0)
    return j0 * cached_blocks + (steps - j0) * free_blocks - taken_after_j0
