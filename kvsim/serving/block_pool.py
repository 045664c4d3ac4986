"""The physical blocks under the block allocator: three states, reference counts, LRU eviction.

Contract (pure Python; the bottom layer of :class:`~kvsim.serving.blocks.BlockAllocator`)
- ``num_blocks`` blocks of ``block_size`` token slots. Every block is in exactly one state:
  *free* (ref 0, no hash, in the free list), *cached* (ref 0, holds a published prefix, in the LRU
  order) or *used* (ref = number of block tables that list it).
- Taking a block takes a free one first, else evicts the least recently used cached block (its
  hash is dropped). Dropping the last reference makes a block cached if it still has a hash,
  free otherwise; a cached block that gets a reference comes back into use.
- :meth:`BlockPool._require` raises :class:`OutOfBlocks` before any change when too few blocks
  can be taken; :class:`RequestTooLarge` says a request can never fit the whole pool.
"""

from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from ..calc.units import DEFAULT_BLOCK_SIZE, InputError


class OutOfBlocks(RuntimeError):
    """Not enough free (or evictable) blocks right now; the allocator is unchanged."""


class RequestTooLarge(ValueError):
    """A sequence needs more blocks than the whole pool has; it can never be admitted."""


def checked_count(name, value, minimum=1) -> int:
    """``value`` as an int if it is an integer >= minimum (bools are not); else a ValueError naming it."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def cdiv(a: int, b: int) -> int:
    """Ceiling division ⌈a / b⌉."""
    return -(-a // b)


class BlockPool:
    """Blocks in three states: free, cached (published, evictable) and used (see module docstring)."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE):
        self.num_blocks = checked_count("num_blocks", num_blocks)
        self.block_size = checked_count("block_size", block_size)
        self.ref_count = [0] * self.num_blocks
        self.block_hashes: list[bytes | None] = [None] * self.num_blocks
        self._free = deque(range(self.num_blocks))            # ref 0, never published
        self._cached: OrderedDict[int, None] = OrderedDict()  # ref 0, published; oldest first
        self._by_hash: dict[bytes, int] = {}
        self.stats = {"evictions": 0}

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation may take now: free + cached (evictable)."""
        return len(self._free) + len(self._cached)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def _require(self, n: int, reviving=()):
        """OutOfBlocks unless n blocks can be taken (``reviving``: cached blocks about to be reused)."""
        have = len(self._free) + len(self._cached)
        if reviving:  # cached blocks a caller is about to reuse cannot also be evicted for it
            have -= sum(1 for b in reviving if self.ref_count[b] == 0)
        if n > have:
            raise OutOfBlocks(f"need {n} free blocks, {have} available "
                              f"({len(self._free)} free, {len(self._cached)} cached)")

    def _pop(self) -> int:
        """Take one block (ref 1): a free one, else evict the least recently used cached one."""
        if self._free:
            b = self._free.popleft()
        else:
            b, _ = self._cached.popitem(last=False)
            self._unpublish(b)
            self.stats["evictions"] += 1
        self.ref_count[b] = 1
        return b

    def _ref(self, b: int):
        if self.ref_count[b] == 0:
            del self._cached[b]  # a cached block comes back into use
        self.ref_count[b] += 1

    def _unref(self, b: int):
        self.ref_count[b] -= 1
        if self.ref_count[b] == 0:
            if self.block_hashes[b] is not None:
                self._cached[b] = None  # most recently used end
            else:
                self._free.append(b)

    def _publish(self, b: int, block_hash: bytes):
        self.block_hashes[b] = block_hash
        self._by_hash[block_hash] = b

    def _unpublish(self, b: int):
        del self._by_hash[self.block_hashes[b]]
        self.block_hashes[b] = None

    def _check_block_states(self, refs: list[int]):
        """AssertionError unless ``refs`` (counted from the block tables) and the states agree."""
        assert refs == self.ref_count, "reference counts differ from block tables"
        free, cached = set(self._free), set(self._cached)
        assert len(free) == len(self._free) and not free & cached, "a block is free twice"
        used = {b for b in range(self.num_blocks) if refs[b] > 0}
        assert not used & (free | cached), "a used block is also free"
        assert len(used) + len(free) + len(cached) == self.num_blocks, "a block leaked"
        assert all(self.block_hashes[b] is None for b in free), "a free block has a hash"
        assert all(self.block_hashes[b] is not None for b in cached), "a cached block has no hash"
        assert all(self.block_hashes[b] == h for h, b in self._by_hash.items()), "hash map"
        assert sum(h is not None for h in self.block_hashes) == len(self._by_hash), "hash map"
