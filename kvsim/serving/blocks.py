"""Paged KV block allocator: free list, reference counts, block tables, prefix sharing.

Contract
- Pure Python + numpy, no MLX: the MLX ``PagedKVCache`` and the serving simulator share it.
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
  :class:`OutOfBlocks` = not enough blocks now; :class:`RequestTooLarge` = can never fit.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from ..calc.units import DEFAULT_BLOCK_SIZE


class OutOfBlocks(RuntimeError):
    """Not enough free (or evictable) blocks right now; the allocator is unchanged."""


class RequestTooLarge(ValueError):
    """A sequence needs more blocks than the whole pool has; it can never be admitted."""


def _positive(name, value, minimum=1):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def cdiv(a: int, b: int) -> int:
    """Ceiling division ⌈a / b⌉."""
    return -(-a // b)


def block_hash(parent: bytes, tokens) -> bytes:
    """h_i = blake2b(h_{i-1} || int64 tokens): a block's identity includes its whole prefix."""
    data = np.asarray(tokens, dtype=np.int64).tobytes()
    return hashlib.blake2b(parent + data, digest_size=16).digest()


@dataclass
class _Seq:
    table: list = field(default_factory=list)    # physical ids, -1 = released (window)
    num_tokens: int = 0
    token_ids: list = field(default_factory=list)  # known tokens (a prefix of the sequence)
    hashes: list = field(default_factory=list)   # chained hashes of leading full known blocks
    num_computed: int = 0                        # tokens whose KV is written
    published: int = 0                           # leading blocks already considered for publishing
    order: int = 0                               # admission counter (preemption picks the latest)
    released: int = 0                            # leading blocks released (table[:released] = -1)
    host: list = field(default_factory=list)     # swapped out: host slot per live block


class BlockAllocator:
    """Blocks of ``block_size`` token slots shared by many sequences (see module docstring)."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 enable_prefix_caching: bool = True, num_host_blocks: int = 0):
        self.num_blocks = _positive("num_blocks", num_blocks)
        self.block_size = _positive("block_size", block_size)
        self.num_host_blocks = _positive("num_host_blocks", num_host_blocks, 0)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.ref_count = [0] * self.num_blocks
        self.block_hashes: list[bytes | None] = [None] * self.num_blocks
        self._free = deque(range(self.num_blocks))     # ref 0, never published
        self._cached: OrderedDict[int, None] = OrderedDict()  # ref 0, published; oldest first
        self._by_hash: dict[bytes, int] = {}
        self._seqs: dict = {}                          # running sequences
        self._preempted: dict = {}                     # recompute: tokens kept, blocks freed
        self._swapped: dict = {}                       # swap: KV kept in host slots
        self._host_free = deque(range(self.num_host_blocks))
        self._counter = itertools.count()
        self.stats = {"evictions": 0, "cow_copies": 0, "preemptions": 0, "swaps": 0,
                      "hit_tokens": 0}

    # ------------------------------------------------------------ inspection
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

    def sequences(self) -> list:
        return list(self._seqs)

    def _get(self, seq_id) -> _Seq:
        if seq_id not in self._seqs:
            state = "preempted" if seq_id in self._preempted or seq_id in self._swapped else "unknown"
            raise KeyError(f"seq_id {seq_id!r} is {state}; running: {len(self._seqs)} sequences")
        return self._seqs[seq_id]

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
            raise ValueError(f"positions [{start}, {stop}) must lie in [0, {seq.num_tokens}]")
        pos = np.arange(start, stop)
        blocks = np.asarray(seq.table, dtype=np.int64)[pos // self.block_size]
        if (blocks < 0).any():
            raise ValueError(f"positions before {self.first_live_token(seq_id)} were released")
        return blocks * self.block_size + pos % self.block_size

    def first_live_token(self, seq_id) -> int:
        """First position still held (window layers release older blocks)."""
        seq = self._get(seq_id)
        return min(seq.released * self.block_size, seq.num_tokens)

    # ------------------------------------------------------------ block states
    def _require(self, n: int, reviving=()):
        have = len(self._free) + len(self._cached)
        if reviving:  # cached blocks a caller is about to reuse cannot also be evicted for it
            have -= sum(1 for b in reviving if self.ref_count[b] == 0)
        if n > have:
            raise OutOfBlocks(f"need {n} free blocks, {have} available "
                              f"({len(self._free)} free, {len(self._cached)} cached)")

    def _pop(self) -> int:
        if self._free:
            b = self._free.popleft()
        else:  # evict the least recently used cached prefix block
            b, _ = self._cached.popitem(last=False)
            del self._by_hash[self.block_hashes[b]]
            self.block_hashes[b] = None
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

    def _unpublish(self, b: int):
        del self._by_hash[self.block_hashes[b]]
        self.block_hashes[b] = None

    # ------------------------------------------------------------ hashing
    def _hashes(self, seq: _Seq, upto_blocks: int) -> list:
        """Chained hashes of the first ``upto_blocks`` full known blocks (extends seq.hashes)."""
        bs = self.block_size
        n = min(upto_blocks, len(seq.token_ids) // bs, seq.num_tokens // bs)
        while len(seq.hashes) < n:
            i = len(seq.hashes)
            parent = seq.hashes[-1] if i else b""
            seq.hashes.append(block_hash(parent, seq.token_ids[i * bs:(i + 1) * bs]))
        return seq.hashes[:n]

    def _lookup(self, seq: _Seq) -> list[int]:
        """Published blocks matching the leading full blocks, at most (n - 1) // bs of them."""
        if not self.enable_prefix_caching or not seq.token_ids:
            return []
        hits = []
        for h in self._hashes(seq, (seq.num_tokens - 1) // self.block_size):
            b = self._by_hash.get(h)
            if b is None:
                break
            hits.append(b)
        return hits

    def blocks_needed(self, token_ids, num_tokens: int) -> int:
        """Free blocks admitting this sequence would take: new blocks + cached hits (changes nothing)."""
        hits = self._lookup(_Seq(num_tokens=int(num_tokens), token_ids=list(token_ids or [])))
        return cdiv(int(num_tokens), self.block_size) - len(hits) + \
            sum(1 for b in hits if self.ref_count[b] == 0)

    def mark_computed(self, seq_id, num_tokens: int):
        """Record that KV of the first ``num_tokens`` tokens is written; publish their full blocks."""
        seq = self._get(seq_id)
        seq.num_computed = max(seq.num_computed, min(int(num_tokens), seq.num_tokens))
        if not self.enable_prefix_caching:
            return
        hashes = self._hashes(seq, seq.num_computed // self.block_size)
        for i in range(seq.published, len(hashes)):
            b = seq.table[i]
            # a duplicate computed meanwhile by another sequence stays private
            if b >= 0 and self.block_hashes[b] is None and hashes[i] not in self._by_hash:
                self.block_hashes[b] = hashes[i]
                self._by_hash[hashes[i]] = b
        seq.published = max(seq.published, len(hashes))

    # ------------------------------------------------------------ sequences
    def add_sequence(self, seq_id, token_ids=None, num_tokens: int | None = None) -> int:
        """Allocate a new sequence of n tokens, reusing cached prefix blocks; return the hit tokens.

        New blocks = ⌈n / bs⌉ − hits. Tokens before the returned count already have their KV.
        ``token_ids`` are the leading known tokens (all of them by default); only they hash.
        """
        if seq_id in self._seqs or seq_id in self._preempted or seq_id in self._swapped:
            raise ValueError(f"seq_id {seq_id!r} already exists")
        tokens = [] if token_ids is None else [int(t) for t in token_ids]
        n = len(tokens) if num_tokens is None else _positive("num_tokens", num_tokens, 0)
        if n < len(tokens):  # token_ids may be just the known leading tokens
            raise ValueError(f"num_tokens {n} must be >= len(token_ids) {len(tokens)}")
        seq = _Seq(num_tokens=n, token_ids=tokens)
        self._admit(seq_id, seq)
        return seq.num_computed

    def _admit(self, seq_id, seq: _Seq):
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

    def append(self, seq_id, num_tokens: int | None = None, token_ids=None) -> list[tuple[int, int]]:
        """Make room for k more tokens; return copy-on-write pairs (src, dst) the storage must copy.

        New blocks = ⌈(n + k) / bs⌉ − len(table), plus one copy if the partially filled last block
        is shared (ref > 1). Unknown tokens (no ``token_ids``) end the hashable prefix.
        """
        seq = self._get(seq_id)
        k = len(token_ids) if num_tokens is None else num_tokens
        if type(k) is not int or k < 0:
            k = _positive("num_tokens", k, 0)
        if token_ids is not None and k != len(token_ids):
            raise ValueError(f"num_tokens {k} must equal len(token_ids) {len(token_ids)}")
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
            raise ValueError(f"write [{start}, {stop}) must start in [{first}, {seq.num_tokens}] "
                             f"and not end before it")
        return self._write(seq_id, seq, start, stop, token_ids, rewrite)

    def _write(self, seq_id, seq: _Seq, start, stop, token_ids, rewrite):
        bs, table, refs, hashes = self.block_size, seq.table, self.ref_count, self.block_hashes
        n1 = stop if stop > seq.num_tokens else seq.num_tokens
        new = -(-n1 // bs) - len(table)
        touched = range(start // bs, min(-(-stop // bs), len(table)))  # existing blocks written
        shared = [i for i in touched if refs[table[i]] > 1]
        if len(table) - seq.released + new > self.num_blocks:
            raise RequestTooLarge(f"sequence {seq_id!r} would need {new} more blocks; "
                                  f"the pool has {self.num_blocks} in all")
        self._require(new + len(shared))
        copies = []
        for i in shared:
            src, dst = table[i], self._pop()
            self._unref(src)
            table[i] = dst
            copies.append((src, dst))
            self.stats["cow_copies"] += 1
        for i in touched:  # a published block is full: writing into it changes what its hash names
            if hashes[table[i]] is not None:
                self._unpublish(table[i])
        if rewrite:
            del seq.token_ids[start:]
            del seq.hashes[start // bs:]
            seq.published = min(seq.published, start // bs)
            seq.num_computed = min(seq.num_computed, start)
        for _ in range(new):
            table.append(self._pop())
        if token_ids is not None and len(seq.token_ids) == start:
            seq.token_ids.extend(int(t) for t in token_ids)
        seq.num_tokens = n1
        return copies

    def fork(self, parent_id, child_id):
        """Child shares every block of the parent (parallel sampling); ref counts +1, no copy."""
        parent = self._get(parent_id)
        if child_id in self._seqs or child_id in self._preempted or child_id in self._swapped:
            raise ValueError(f"seq_id {child_id!r} already exists")
        for b in parent.table:
            if b >= 0:
                self._ref(b)
        self._seqs[child_id] = _Seq(list(parent.table), parent.num_tokens, list(parent.token_ids),
                                    list(parent.hashes), parent.num_computed, parent.published,
                                    next(self._counter), released=parent.released)

    def free(self, seq_id):
        """Drop a sequence (running, preempted or swapped); its blocks lose one reference each."""
        if seq_id in self._preempted:
            del self._preempted[seq_id]
            return
        if seq_id in self._swapped:
            self._host_free.extend(self._swapped.pop(seq_id).host)
            return
        seq = self._get(seq_id)
        # tail first: cached tail blocks become older in LRU, so they are evicted before the head
        for b in reversed(seq.table):
            if b >= 0:
                self._unref(b)
        del self._seqs[seq_id]

    def trim(self, seq_id, n: int) -> int:
        """Rewind min(n, held tokens) tokens, freeing blocks past the new end; return the count."""
        seq = self._get(seq_id)
        n = min(_positive("n", n, 0), seq.num_tokens - self.first_live_token(seq_id))
        m = seq.num_tokens - n
        keep = cdiv(m, self.block_size)
        for b in reversed(seq.table[keep:]):
            if b >= 0:
                self._unref(b)
        del seq.table[keep:]
        last = seq.table[-1] if seq.table else -1
        # a full published block becomes partial and will be rewritten: unpublish if private
        if m % self.block_size and last >= 0 and self.ref_count[last] == 1 \
                and self.block_hashes[last] is not None:
            self._unpublish(last)
        seq.num_tokens = m
        del seq.token_ids[m:]
        del seq.hashes[m // self.block_size:]
        seq.num_computed = min(seq.num_computed, m)
        seq.published = min(seq.published, m // self.block_size)
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

    # ------------------------------------------------------------ preemption
    def pick_victim(self, exclude=()):
        """The most recently admitted running sequence not in ``exclude`` (vLLM's LIFO), or None."""
        cands = [(s.order, sid) for sid, s in self._seqs.items() if sid not in exclude]
        return max(cands, key=lambda x: x[0])[1] if cands else None

    def preempt(self, seq_id, mode: str = "recompute") -> list[tuple[int, int]]:
        """Free a running sequence's blocks; return (gpu block, host slot) pairs to copy for swap.

        recompute: tokens are kept, KV is dropped (resume recomputes it); swap: every live block
        is copied to a host slot first (the caller copies before any block is reused).
        """
        if mode not in ("recompute", "swap"):
            raise ValueError(f"mode must be 'recompute' or 'swap', got {mode!r}")
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

    def preemption_mode(self, seq_id) -> str | None:
        """'recompute' or 'swap' for a preempted sequence, None for any other id."""
        return "recompute" if seq_id in self._preempted else "swap" if seq_id in self._swapped else None

    def resume(self, seq_id) -> list[tuple[int, int]]:
        """Re-admit a preempted sequence; return (host slot, gpu block) pairs to copy back (swap).

        Recompute: ``num_computed(seq_id)`` tells how many tokens prefix hits already cover.
        """
        if seq_id in self._preempted:
            old = self._preempted[seq_id]
            seq = _Seq(num_tokens=old.num_tokens, token_ids=old.token_ids)
            self._admit(seq_id, seq)  # raises before any change
            del self._preempted[seq_id]
            return []
        if seq_id not in self._swapped:
            raise KeyError(f"seq_id {seq_id!r} is not preempted")
        seq = self._swapped[seq_id]
        self._require(len(seq.host))
        gpu = [self._pop() for _ in seq.host]
        it = iter(gpu)
        seq.table = [next(it) if b >= 0 else -1 for b in seq.table]
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
        host = list(self._host_free) + [s for q in self._swapped.values() for s in q.host]
        assert sorted(host) == list(range(self.num_host_blocks)), "host slots leaked"
