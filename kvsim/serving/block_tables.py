"""Block tables: running sequences, their growth, copy-on-write, forks, trims and window releases.

Contract (pure Python + numpy; the layer above :mod:`kvsim.serving.prefix_cache`)
- Each running sequence has a block table (logical block i -> physical block id, -1 once
  released); token t lives in flat slot ``table[t // block_size] · block_size + t % block_size``.
- Admission reuses published prefix blocks and takes ⌈n / bs⌉ − hits new ones; growth takes
  ⌈(n + k) / bs⌉ − len(table) more.
- Copy-on-write: before a sequence writes into a block that another table lists, it gets a private
  copy; methods return the ``(src, dst)`` block pairs the storage must copy. Writing into a
  published block unpublishes it (its content changes).
- Every mutating method checks first and changes second: if it raises, nothing changed.
- Preempted sequences are not running: :meth:`BlockTables.preemption_mode` (None here) is how the
  layer above (:class:`~kvsim.serving.blocks.BlockAllocator`) tells them apart from unknown ids.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..calc.units import DEFAULT_BLOCK_SIZE, InputError
from .block_pool import RequestTooLarge, cdiv, checked_count
from .prefix_cache import PrefixCache, SeqState


class BlockTables(PrefixCache):
    """Running sequences and their block tables over a prefix-caching block pool."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 enable_prefix_caching: bool = True):
        super().__init__(num_blocks, block_size, enable_prefix_caching)
        self._seqs: dict = {}                          # running sequences
        self._counter = itertools.count()              # admission order
        self.stats.update(cow_copies=0, hit_tokens=0)

    # ------------------------------------------------------------ inspection
    def preemption_mode(self, seq_id) -> str | None:
        """'recompute' or 'swap' for a preempted sequence, None for any other id."""
        return None

    def sequences(self) -> list:
        return list(self._seqs)

    def _get(self, seq_id) -> SeqState:
        if seq_id not in self._seqs:
            state = "preempted" if self.preemption_mode(seq_id) else "unknown"
            raise KeyError(f"seq_id {seq_id!r} is {state}; running: {len(self._seqs)} sequences")
        return self._seqs[seq_id]

    def _check_new(self, seq_id):
        if seq_id in self._seqs or self.preemption_mode(seq_id):
            raise InputError(f"seq_id {seq_id!r} already exists")

    def block_table(self, seq_id) -> list[int]:
        return list(self._get(seq_id).table)

    def num_tokens(self, seq_id) -> int:
        return self._get(seq_id).num_tokens

    def num_computed(self, seq_id) -> int:
        return self._get(seq_id).num_computed

    def slots(self, seq_id, start: int, stop: int) -> np.ndarray:
        """Flat slot ids of positions [start, stop): table[t // bs] · bs + t % bs."""
        seq = self._get(seq_id)
        if not 0 <= start <= stop <= seq.num_tokens:
            raise InputError(f"positions [{start}, {stop}) must lie in [0, {seq.num_tokens}]")
        pos = np.arange(start, stop)
        blocks = np.asarray(seq.table, dtype=np.int64)[pos // self.block_size]
        if (blocks < 0).any():
            raise InputError(f"positions before {self.first_live_token(seq_id)} were released")
        return blocks * self.block_size + pos % self.block_size

    def first_live_token(self, seq_id) -> int:
        """First position still held (window layers release older blocks)."""
        seq = self._get(seq_id)
        return min(seq.released * self.block_size, seq.num_tokens)

    # ------------------------------------------------------------ admission
    def add_sequence(self, seq_id, token_ids=None, num_tokens: int | None = None) -> int:
        """Allocate a new sequence of n tokens, reusing cached prefix blocks; return the hit tokens.

        New blocks = ⌈n / bs⌉ − hits. Tokens before the returned count already have their KV.
        ``token_ids`` are the leading known tokens (all of them by default); only they hash.
        """
        self._check_new(seq_id)
        tokens = [] if token_ids is None else [int(t) for t in token_ids]
        n = len(tokens) if num_tokens is None else checked_count("num_tokens", num_tokens, 0)
        if n < len(tokens):  # token_ids may be just the known leading tokens
            raise InputError(f"num_tokens {n} must be >= len(token_ids) {len(tokens)}")
        seq = SeqState(num_tokens=n, token_ids=tokens)
        self._admit(seq_id, seq)
        return seq.num_computed

    def _admit(self, seq_id, seq: SeqState):
        need = cdiv(seq.num_tokens, self.block_size)
        if need > self.num_blocks:
            raise RequestTooLarge(f"a sequence of {seq.num_tokens} tokens needs {need} blocks; "
                                  f"the pool has {self.num_blocks} in all")
        hits = self._lookup(seq)
        self._require(need - len(hits), reviving=hits)
        for b in hits:
            self._ref(b)
        seq.table = hits + [self._pop() for _ in range(need - len(hits))]
        seq.num_computed, seq.published = len(hits) * self.block_size, len(hits)
        seq.order = next(self._counter)
        self.stats["hit_tokens"] += seq.num_computed
        self._seqs[seq_id] = seq

    def mark_computed(self, seq_id, num_tokens: int):
        """Record that KV of the first ``num_tokens`` tokens is written; publish their full blocks."""
        seq = self._get(seq_id)
        seq.num_computed = max(seq.num_computed, min(int(num_tokens), seq.num_tokens))
        self._publish_computed(seq)

    # ------------------------------------------------------------ writes
    def append(self, seq_id, num_tokens: int | None = None, token_ids=None) -> list[tuple[int, int]]:
        """Make room for k more tokens; return copy-on-write pairs (src, dst) the storage must copy.

        New blocks = ⌈(n + k) / bs⌉ − len(table), plus one copy if the partially filled last block
        is shared (ref > 1). Unknown tokens (no ``token_ids``) end the hashable prefix.
        """
        seq = self._get(seq_id)
        k = len(token_ids) if num_tokens is None else num_tokens
        if type(k) is not int or k < 0:
            k = checked_count("num_tokens", k, 0)
        if token_ids is not None and k != len(token_ids):
            raise InputError(f"num_tokens {k} must equal len(token_ids) {len(token_ids)}")
        return self._write(seq_id, seq, seq.num_tokens, seq.num_tokens + k, token_ids, False)

    def prepare_write(self, seq_id, start: int, stop: int, token_ids=None,
                      rewrite: bool = False) -> list[tuple[int, int]]:
        """Make positions [start, stop) writable by this sequence alone; return CoW pairs (src, dst).

        Grows the table to cover ``stop``, copies every touched block another table also lists and
        unpublishes touched private blocks (their content changes). ``rewrite=True`` says positions
        from ``start`` get new tokens (a per-layer rewind): the known tokens end at ``start``.
        """
        seq = self._get(seq_id)
        first = self.first_live_token(seq_id)
        if not first <= start <= seq.num_tokens or stop < start:
            raise InputError(f"write [{start}, {stop}) must start in [{first}, {seq.num_tokens}] "
                             f"and not end before it")
        return self._write(seq_id, seq, start, stop, token_ids, rewrite)

    def _write(self, seq_id, seq: SeqState, start, stop, token_ids, rewrite):
        bs, table = self.block_size, seq.table
        end = stop if stop > seq.num_tokens else seq.num_tokens
        new = -(-end // bs) - len(table)
        touched = range(start // bs, min(-(-stop // bs), len(table)))  # existing blocks written
        shared = [i for i in touched if self.ref_count[table[i]] > 1]
        if len(table) - seq.released + new > self.num_blocks:
            raise RequestTooLarge(f"sequence {seq_id!r} would need {new} more blocks; "
                                  f"the pool has {self.num_blocks} in all")
        self._require(new + len(shared))
        copies = [self._copy_on_write(table, i) for i in shared]
        for i in touched:  # a published block is full: writing into it changes what its hash names
            if self.block_hashes[table[i]] is not None:
                self._unpublish(table[i])
        if rewrite:
            self._forget_from(seq, start)
        for _ in range(new):
            table.append(self._pop())
        if token_ids is not None and len(seq.token_ids) == start:
            seq.token_ids.extend(int(t) for t in token_ids)
        seq.num_tokens = end
        return copies

    def _copy_on_write(self, table: list, i: int) -> tuple[int, int]:
        """Give entry i of a table a private block; return (src, dst) for the storage to copy."""
        src, dst = table[i], self._pop()
        self._unref(src)
        table[i] = dst
        self.stats["cow_copies"] += 1
        return src, dst

    def _forget_from(self, seq: SeqState, position: int):
        """Tokens from ``position`` on are no longer known, hashed, published or computed."""
        bs = self.block_size
        del seq.token_ids[position:]
        del seq.hashes[position // bs:]
        seq.published = min(seq.published, position // bs)
        seq.num_computed = min(seq.num_computed, position)

    # ------------------------------------------------------------ sharing and giving back
    def fork(self, parent_id, child_id):
        """Child shares every block of the parent (parallel sampling); ref counts +1, no copy."""
        parent = self._get(parent_id)
        self._check_new(child_id)
        for b in parent.table:
            if b >= 0:
                self._ref(b)
        self._seqs[child_id] = SeqState(list(parent.table), parent.num_tokens, list(parent.token_ids),
                                        list(parent.hashes), parent.num_computed, parent.published,
                                        next(self._counter), released=parent.released)

    def free(self, seq_id):
        """Drop a running sequence; its blocks lose one reference each."""
        seq = self._get(seq_id)
        # tail first: cached tail blocks become older in LRU, so they are evicted before the head
        for b in reversed(seq.table):
            if b >= 0:
                self._unref(b)
        del self._seqs[seq_id]

    def trim(self, seq_id, n: int) -> int:
        """Rewind min(n, held tokens) tokens, freeing blocks past the new end; return the count."""
        seq = self._get(seq_id)
        n = min(checked_count("n", n, 0), seq.num_tokens - self.first_live_token(seq_id))
        end = seq.num_tokens - n
        keep = cdiv(end, self.block_size)
        for b in reversed(seq.table[keep:]):
            if b >= 0:
                self._unref(b)
        del seq.table[keep:]
        last = seq.table[-1] if seq.table else -1
        # a full published block becomes partial and will be rewritten: unpublish if private
        if end % self.block_size and last >= 0 and self.ref_count[last] == 1 \
                and self.block_hashes[last] is not None:
            self._unpublish(last)
        seq.num_tokens = end
        self._forget_from(seq, end)
        return n

    def release_before(self, seq_id, position: int) -> int:
        """Release blocks holding only positions < position (sliding/chunked layers); return count."""
        seq = self._get(seq_id)
        upto = min(int(position), seq.num_tokens) // self.block_size
        released = 0
        for i in range(seq.released, upto):
            self._unref(seq.table[i])
            seq.table[i] = -1
            released += 1
        seq.released = max(seq.released, upto)
        return released
