"""Paged KV block allocator: free list, reference counts, block tables, prefix sharing, preemption.

Contract
- Pure Python + numpy, no MLX: the MLX ``PagedKVCache`` and the serving simulator share it.
- Built in layers, one file each: :mod:`~kvsim.serving.block_pool` (blocks free / cached / used,
  reference counts, LRU eviction), :mod:`~kvsim.serving.prefix_cache` (chained block hashes,
  published prompt blocks), :mod:`~kvsim.serving.block_tables` (running sequences, growth,
  copy-on-write, fork, trim, window release) and this module (preemption, invariants).
- A pool of ``num_blocks`` blocks of ``block_size`` token slots. Each sequence has a block table
  (logical block i -> physical block id, -1 once released); token t lives in flat slot
  ``table[t // block_size] · block_size + t % block_size``.
- Every block is in exactly one state: *free* (ref 0, no hash), *cached* (ref 0, holds a published
  prefix, evictable in LRU order) or *used* (ref = number of block tables that list it).
- Prefix sharing: a FULL block whose tokens are known and computed is published under
  ``h_i = blake2b(h_{i-1} || tokens of block i)``; a new sequence reuses every leading block whose
  hash is published (hits stop one token short of the prompt, so the caller still runs a token).
- Copy-on-write: before a sequence writes into a block that another table lists, it gets a private
  copy; methods return the ``(src, dst)`` block pairs the storage must copy.
- Pressure: allocation takes free blocks first, then evicts the least recently used cached block.
  ``preempt`` frees a whole sequence (recompute) or moves it to host slots (swap); ``resume`` undoes it.
- Every mutating method checks first and changes second: if it raises, nothing changed.
  :class:`~kvsim.serving.block_pool.OutOfBlocks` = not enough blocks now;
  :class:`~kvsim.serving.block_pool.RequestTooLarge` = can never fit.
"""

from __future__ import annotations

from collections import deque

from ..calc.units import DEFAULT_BLOCK_SIZE, InputError
from .block_pool import OutOfBlocks, cdiv, checked_count
from .block_tables import BlockTables
from .prefix_cache import SeqState

PREEMPTION_MODES = ("recompute", "swap")


class BlockAllocator(BlockTables):
    """Blocks of ``block_size`` token slots shared by many sequences (see module docstring)."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 enable_prefix_caching: bool = True, num_host_blocks: int = 0):
        super().__init__(num_blocks, block_size, enable_prefix_caching)
        self.num_host_blocks = checked_count("num_host_blocks", num_host_blocks, 0)
        self._preempted: dict = {}                     # recompute: tokens kept, blocks freed
        self._swapped: dict = {}                       # swap: KV kept in host slots
        self._host_free = deque(range(self.num_host_blocks))
        self.stats.update(preemptions=0, swaps=0)

    def preemption_mode(self, seq_id) -> str | None:
        """'recompute' or 'swap' for a preempted sequence, None for any other id."""
        return "recompute" if seq_id in self._preempted else "swap" if seq_id in self._swapped else None

    def free(self, seq_id):
        """Drop a sequence (running, preempted or swapped); its blocks lose one reference each."""
        if seq_id in self._preempted:
            del self._preempted[seq_id]
        elif seq_id in self._swapped:
            self._host_free.extend(self._swapped.pop(seq_id).host)
        else:
            super().free(seq_id)

    # ------------------------------------------------------------ preemption
    def pick_victim(self, exclude=()):
        """The most recently admitted running sequence not in ``exclude`` (vLLM's LIFO), or None."""
        candidates = [(s.order, sid) for sid, s in self._seqs.items() if sid not in exclude]
        return max(candidates, key=lambda x: x[0])[1] if candidates else None

    def preempt(self, seq_id, mode: str = "recompute") -> list[tuple[int, int]]:
        """Free a running sequence's blocks; return (gpu block, host slot) pairs to copy for swap.

        recompute: tokens are kept, KV is dropped (resume recomputes it); swap: every live block
        is copied to a host slot first (the caller copies before any block is reused).
        """
        if mode not in PREEMPTION_MODES:
            raise InputError(f"mode must be 'recompute' or 'swap', got {mode!r}")
        seq = self._get(seq_id)
        live = [b for b in seq.table if b >= 0]
        if mode == "swap" and len(live) > len(self._host_free):
            raise OutOfBlocks(f"swap needs {len(live)} host blocks, {len(self._host_free)} free")
        pairs = []
        if mode == "swap":
            seq.host = [self._host_free.popleft() for _ in live]
            pairs = list(zip(live, seq.host))
        self.free(seq_id)
        if mode == "swap":
            self._swapped[seq_id] = seq
            self.stats["swaps"] += 1
        else:
            self._preempted[seq_id] = seq
        self.stats["preemptions"] += 1
        return pairs

    def resume(self, seq_id) -> list[tuple[int, int]]:
        """Re-admit a preempted sequence; return (host slot, gpu block) pairs to copy back (swap).

        Recompute: ``num_computed(seq_id)`` tells how many tokens prefix hits already cover.
        """
        if seq_id in self._preempted:
            old = self._preempted[seq_id]
            self._admit(seq_id, SeqState(num_tokens=old.num_tokens, token_ids=old.token_ids))  # raises first
            del self._preempted[seq_id]
            return []
        if seq_id not in self._swapped:
            raise KeyError(f"seq_id {seq_id!r} is not preempted")
        return self._swap_in(seq_id)

    def _swap_in(self, seq_id) -> list[tuple[int, int]]:
        seq = self._swapped[seq_id]
        self._require(len(seq.host))
        gpu = [self._pop() for _ in seq.host]
        taken = iter(gpu)
        seq.table = [next(taken) if b >= 0 else -1 for b in seq.table]
        pairs = list(zip(seq.host, gpu))
        self._host_free.extend(seq.host)
        seq.host, seq.published = [], 0  # restored blocks are private until published again
        seq.order = next(self._counter)
        del self._swapped[seq_id]
        self._seqs[seq_id] = seq
        self.mark_computed(seq_id, seq.num_computed)
        return pairs

    # ------------------------------------------------------------ checks
    def check_invariants(self):
        """AssertionError if any accounting invariant fails (used by the property tests)."""
        refs = [0] * self.num_blocks
        for seq in self._seqs.values():
            assert len(seq.table) == cdiv(seq.num_tokens, self.block_size), "table length"
            assert all(b < 0 for b in seq.table[:seq.released]), "released prefix"
            assert all(b >= 0 for b in seq.table[seq.released:]), "a hole after the released prefix"
            for b in seq.table:
                if b >= 0:
                    refs[b] += 1
        self._check_block_states(refs)
        host = list(self._host_free) + [s for q in self._swapped.values() for s in q.host]
        assert sorted(host) == list(range(self.num_host_blocks)), "host slots leaked"
