"""Prefix caching over the block pool: chained block hashes, lookup of published prompt blocks.

Contract (pure Python + numpy; the layer above :mod:`kvsim.serving.block_pool`)
- A FULL block whose tokens are known and computed is published under
  ``h_i = blake2b(h_{i-1} || tokens of block i)`` (16 bytes), so a block's identity includes its
  whole prefix. Publishing is per block; a duplicate computed meanwhile by another sequence stays
  private (one block per hash).
- A new sequence reuses every leading block whose hash is published; hits stop one token short of
  the prompt (at most (n − 1) // bs blocks), so the caller still runs a token.
- :class:`SeqState` is one sequence's record (block table and token bookkeeping) that every layer
  of the allocator reads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..calc.units import DEFAULT_BLOCK_SIZE
from .block_pool import BlockPool, cdiv


def block_hash(parent: bytes, tokens) -> bytes:
    """h_i = blake2b(h_{i-1} || int64 tokens): a block's identity includes its whole prefix."""
    data = np.asarray(tokens, dtype=np.int64).tobytes()
    return hashlib.blake2b(parent + data, digest_size=16).digest()


@dataclass
class SeqState:
    """One sequence: its block table and what the allocator knows of its tokens."""

    table: list = field(default_factory=list)      # physical ids, -1 = released (window)
    num_tokens: int = 0
    token_ids: list = field(default_factory=list)  # known tokens (a prefix of the sequence)
    hashes: list = field(default_factory=list)     # chained hashes of leading full known blocks
    num_computed: int = 0                          # tokens whose KV is written
    published: int = 0                             # leading blocks already considered for publishing
    order: int = 0                                 # admission counter (preemption picks the latest)
    released: int = 0                              # leading blocks released (table[:released] = -1)
    host: list = field(default_factory=list)       # swapped out: host slot per live block


class PrefixCache(BlockPool):
    """Blocks published by content hash so that a later sequence with the same prefix reuses them."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 enable_prefix_caching: bool = True):
        super().__init__(num_blocks, block_size)
        self.enable_prefix_caching = bool(enable_prefix_caching)

    def _hashes(self, seq: SeqState, upto_blocks: int) -> list:
        """Chained hashes of the first ``upto_blocks`` full known blocks (extends seq.hashes)."""
        bs = self.block_size
        n = min(upto_blocks, len(seq.token_ids) // bs, seq.num_tokens // bs)
        while len(seq.hashes) < n:
            i = len(seq.hashes)
            parent = seq.hashes[-1] if i else b""
            seq.hashes.append(block_hash(parent, seq.token_ids[i * bs:(i + 1) * bs]))
        return seq.hashes[:n]

    def _lookup(self, seq: SeqState) -> list[int]:
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
        hits = self._lookup(SeqState(num_tokens=int(num_tokens), token_ids=list(token_ids or [])))
        return cdiv(int(num_tokens), self.block_size) - len(hits) + \
            sum(1 for b in hits if self.ref_count[b] == 0)

    def _publish_computed(self, seq: SeqState):
        """Publish the full blocks of ``seq`` whose KV is computed and which were not considered yet."""
        if not self.enable_prefix_caching:
            return
        hashes = self._hashes(seq, seq.num_computed // self.block_size)
        for i in range(seq.published, len(hashes)):
            b = seq.table[i]
            # a duplicate computed meanwhile by another sequence stays private
            if b >= 0 and self.block_hashes[b] is None and hashes[i] not in self._by_hash:
                self._publish(b, hashes[i])
        seq.published = max(seq.published, len(hashes))
