"""Contiguous reservations (Orca-style policies): how many token slots a request reserves, and where.

Contract (pure numpy)
- :func:`reservation_tokens`: ``max`` reserves max_len slots, ``pow2`` the next power of two ≥ the
  final length (at most max_len), ``oracle`` exactly the final length.
- :class:`FirstFitExtents`: one address space of token slots; a reservation takes the first free
  segment long enough, a release merges with its free neighbours, so holes between reservations
  are real (external fragmentation).
"""

from __future__ import annotations

import numpy as np


def reservation_tokens(policy: str, final_tokens: np.ndarray, max_len: int) -> np.ndarray:
    """Slots each request reserves: max_len (max), min(2^⌈log2 f⌉, max_len) (pow2) or f (oracle)."""
    if policy == "max":
        return np.full_like(final_tokens, max_len)
    if policy == "pow2":
        return np.minimum(2 ** np.ceil(np.log2(final_tokens)).astype(np.int64), max_len)
    return final_tokens.copy()


class FirstFitExtents:
    """First-fit allocator over one address space of token slots: ``free`` = sorted [start, end)."""

    def __init__(self, size: int):
        self.free = [[0, size]]

    def alloc(self, n: int) -> int | None:
        """First slot of n contiguous slots taken from the first segment that fits, or None."""
        for segment in self.free:
            if segment[1] - segment[0] >= n:
                start = segment[0]
                segment[0] += n
                if segment[0] == segment[1]:
                    self.free.remove(segment)
                return start
        return None

    def release(self, start: int, n: int):
        """Give [start, start + n) back, merged with the free segments it touches."""
        i = next((i for i, s in enumerate(self.free) if s[0] > start), len(self.free))
        self.free.insert(i, [start, start + n])
        if i + 1 < len(self.free) and self.free[i][1] == self.free[i + 1][0]:  # merge right
            self.free[i][1] = self.free.pop(i + 1)[1]
        if i > 0 and self.free[i - 1][1] == self.free[i][0]:  # merge left
            self.free[i - 1][1] = self.free.pop(i)[1]
