"""Contiguous reservations (the paper's Orca baselines): how many token slots a request reserves, and where.

Contract (pure numpy)
- A request of prompt p and output o stores p + o − 1 tokens when it ends (the last token it
  generates is never fed back). :func:`reservation_tokens` follows Kwon et al. (2023, §6.1):
  ``max`` reserves max_len slots; ``pow2`` the prompt plus the output rounded up to a power of two
  ("output length 25 → 32 reserved"), p + 2^⌈log2 o⌉, at most max_len; ``oracle`` exactly what it
  will store, p + o − 1.
- Placement (``PLACEMENTS``): ``buddy`` (:class:`~kvsim.serving.buddy.BuddyAllocator`, the paper's
  choice: every reservation rounded up to a power of two) or ``first_fit`` (:class:`FirstFitExtents`:
  exactly the reservation, in the first free segment long enough). Both expose ``block_tokens(n)``
  (slots held for a reservation of n), ``alloc(n)`` (first slot, or None) and ``release(start)``.
  Holes between reservations are real in both (external fragmentation).
"""

from __future__ import annotations

import numpy as np

from .buddy import BuddyAllocator


def reservation_tokens(policy: str, prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                       max_len: int) -> np.ndarray:
    """Slots each request reserves: max_len (max), min(p + 2^⌈log2 o⌉, max_len) (pow2), p + o − 1 (oracle)."""
    if policy == "max":
        return np.full_like(prompt_tokens, max_len)
    if policy == "pow2":
        output_pow2 = 2 ** np.ceil(np.log2(output_tokens)).astype(np.int64)
        return np.minimum(prompt_tokens + output_pow2, max_len)
    return prompt_tokens + output_tokens - 1


class FirstFitExtents:
    """First-fit allocator over one address space of token slots: ``free`` = sorted [start, end)."""

    def __init__(self, size: int):
        self.free = [[0, size]]
        self.held = {}  # start of a reservation -> its slots

    @staticmethod
    def block_tokens(n: int) -> int:
        """Slots held for a reservation of n: exactly n."""
        return int(n)

    def alloc(self, n: int) -> int | None:
        """First slot of n contiguous slots taken from the first segment that fits, or None."""
        for segment in self.free:
            if segment[1] - segment[0] >= n:
                start = segment[0]
                segment[0] += n
                if segment[0] == segment[1]:
                    self.free.remove(segment)
                self.held[start] = n
                return start
        return None

    def release(self, start: int):
        """Give the reservation at ``start`` back, merged with the free segments it touches."""
        n = self.held.pop(start)
        i = next((i for i, s in enumerate(self.free) if s[0] > start), len(self.free))
        self.free.insert(i, [start, start + n])
        if i + 1 < len(self.free) and self.free[i][1] == self.free[i + 1][0]:  # merge right
            self.free[i][1] = self.free.pop(i + 1)[1]
        if i > 0 and self.free[i - 1][1] == self.free[i][0]:  # merge left
            self.free[i - 1][1] = self.free.pop(i)[1]


PLACEMENTS = {"buddy": BuddyAllocator, "first_fit": FirstFitExtents}
