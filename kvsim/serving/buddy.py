"""Buddy allocator over token slots: how the paper's Orca baselines place each request's contiguous chunk.

Contract (pure Python; deterministic)
- The pool is ``size_tokens`` slots, cut at start into the largest aligned power-of-two blocks
  (15,728 = 8192 + 4096 + 2048 + 1024 + 256 + 64 + 32 + 16). A block of order k holds 2^k slots and
  starts at a multiple of 2^k; its *buddy* is the block of the same order at ``start XOR 2^k``.
- :meth:`BuddyAllocator.alloc` rounds a request of n slots up to 2^⌈log2 n⌉ (:func:`block_tokens`),
  takes the lowest-addressed free block of the smallest order that fits and halves it until it has
  that size (each upper half goes back as a free block). The rounding is memory the request holds
  but never asked for: Kwon et al. (2023, §6.1) book it under "external fragmentation & others".
- :meth:`BuddyAllocator.release` frees a block and merges it with its buddy while the buddy is free,
  so free memory never stays split into two free halves that could form one block.
- Free blocks never overlap and, with the held blocks, cover the pool exactly. A failed call (no
  block large enough: ``alloc`` returns None; bad input: InputError) leaves the allocator unchanged.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from ..calc.units import InputError


def block_tokens(n: int) -> int:
    """Slots a buddy allocator hands out for a request of n slots: 2^⌈log2 n⌉ (n ≥ 1)."""
    return 1 << (int(n) - 1).bit_length()


class BuddyAllocator:
    """Power-of-two blocks of token slots; ``free[k]`` = sorted starts of the free blocks of order k."""

    block_tokens = staticmethod(block_tokens)  # slots held for a request of n: 2^⌈log2 n⌉

    def __init__(self, size_tokens: int):
        if not isinstance(size_tokens, int) or isinstance(size_tokens, bool) or size_tokens < 1:
            raise InputError(f"size_tokens must be a positive integer, got {size_tokens!r}")
        self.size_tokens = size_tokens
        self.max_order = size_tokens.bit_length() - 1       # the largest block: 2^max_order ≤ size
        self.free = {k: [] for k in range(self.max_order + 1)}
        self.held = {}                                      # start of a held block -> its order
        start = 0
        while start < size_tokens:  # binary expansion of the size, largest block first: each is aligned
            order = (size_tokens - start).bit_length() - 1
            self.free[order].append(start)
            start += 1 << order

    @property
    def free_tokens(self) -> int:
        """Slots in free blocks."""
        return sum(len(starts) << k for k, starts in self.free.items())

    def free_blocks(self) -> list[tuple[int, int]]:
        """Every free block as (start, slots), sorted by start."""
        return sorted((s, 1 << k) for k, starts in self.free.items() for s in starts)

    def largest_free_block(self) -> int:
        """Slots of the largest free block (0 when none is free)."""
        return max((1 << k for k, starts in self.free.items() if starts), default=0)

    def alloc(self, n: int) -> int | None:
        """Start of a free block of block_tokens(n) slots, split off a larger one if needed; None if none."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"slots to allocate must be a positive integer, got {n!r}")
        order = (n - 1).bit_length()
        k = next((k for k in range(order, self.max_order + 1) if self.free[k]), None)
        if k is None:
            return None
        start = self.free[k].pop(0)
        while k > order:                      # keep the lower half, free the upper one (its buddy)
            k -= 1
            insort(self.free[k], start + (1 << k))
        self.held[start] = order
        return start

    def release(self, start: int):
        """Free the block at ``start`` and merge it with its buddy, then the merged block's, while free."""
        if start not in self.held:
            raise InputError(f"no held block starts at slot {start!r}")
        order = self.held.pop(start)
        while order < self.max_order:
            buddy, starts = start ^ (1 << order), self.free[order]
            i = bisect_left(starts, buddy)
            if i == len(starts) or starts[i] != buddy:
                break
            starts.pop(i)                     # merge: the pair becomes one free block of order + 1
            start, order = min(start, buddy), order + 1
        insort(self.free[order], start)
