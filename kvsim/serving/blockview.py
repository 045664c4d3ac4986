"""Block tables read from a real :class:`~kvsim.serving.blocks.BlockAllocator`, step by step.

Contract
- :func:`snapshot` copies what an allocator holds right now: each sequence's block table
  (logical block i -> physical block id), its token count, every block's reference count and
  whether a free block still holds a published prefix (``cached``). Nothing is computed here
  that the allocator did not decide.
- :func:`sharing_scenario` drives one real allocator through prefix sharing and copy-on-write:
  request A (system prompt + question) is prefilled and its full blocks published; request B with
  the same system prompt reuses those blocks; A forks a second sample (parallel sampling) that
  shares every block; both samples write a token, so the shared partial last block is copied
  first (CoW); B finishes. Returns one :class:`BlockSnapshot` per step.
- :func:`sharing_savings`: blocks that N requests with one common system prompt hold with and
  without prefix sharing, measured on real allocators.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..calc.units import DEFAULT_BLOCK_SIZE, InputError
from .block_pool import cdiv
from .blocks import BlockAllocator


@dataclass(frozen=True)
class BlockSnapshot:
    """One moment of an allocator: tables, token counts, reference counts, cached blocks."""

    label: str
    block_size: int
    tables: dict          # sequence name -> tuple of physical ids (-1 = released)
    tokens: dict          # sequence name -> tokens held
    ref_count: tuple      # per physical block
    cached: frozenset     # ref 0 but still holding a published prefix (reusable, evictable)
    copies: tuple = ()    # (src, dst) copy-on-write pairs this step made

    @property
    def num_blocks(self) -> int:
        return len(self.ref_count)

    def fill(self, seq: str, i: int) -> int:
        """Tokens in logical block i of ``seq``: bs for full blocks, the remainder for the last."""
        return max(0, min(self.block_size, self.tokens[seq] - i * self.block_size))

    def state(self, b: int) -> str:
        """'shared' (ref > 1), 'used' (ref 1), 'cached' or 'free'."""
        r = self.ref_count[b]
        return "shared" if r > 1 else "used" if r == 1 else "cached" if b in self.cached else "free"

    def owners(self, b: int) -> list[str]:
        return [s for s, table in self.tables.items() if b in table]


def snapshot(alloc: BlockAllocator, label: str, names: dict | None = None, copies=()) -> BlockSnapshot:
    """Copy of ``alloc``'s state; ``names`` maps sequence ids to display names (default str(id))."""
    names = names or {}
    seqs = alloc.sequences()
    cached = frozenset(b for b in range(alloc.num_blocks)
                       if alloc.ref_count[b] == 0 and alloc.block_hashes[b] is not None)
    return BlockSnapshot(label, alloc.block_size,
                         {names.get(s, str(s)): tuple(alloc.block_table(s)) for s in seqs},
                         {names.get(s, str(s)): alloc.num_tokens(s) for s in seqs},
                         tuple(alloc.ref_count), cached, tuple(copies))


def sharing_scenario(block_size: int = 4, num_blocks: int = 12, system_tokens: int = 8,
                     question_tokens: tuple = (3, 5)) -> list[BlockSnapshot]:
    """Prefix sharing, fork and copy-on-write on a real allocator (see module docstring)."""
    if system_tokens < 1 or min(question_tokens) < 1:
        raise InputError("system_tokens and question_tokens must be >= 1")
    alloc = BlockAllocator(num_blocks, block_size, enable_prefix_caching=True)
    system = list(range(1000, 1000 + system_tokens))
    qa = list(range(2000, 2000 + question_tokens[0]))
    qb = list(range(3000, 3000 + question_tokens[1]))
    names = {"A": "A", "A2": "A, sample 2", "B": "B"}
    steps = []

    def snap(label, copies=()):
        steps.append(snapshot(alloc, label, names, copies))

    alloc.add_sequence("A", system + qa)
    alloc.mark_computed("A", len(system + qa))
    snap(f"A: system prompt ({system_tokens}) + question ({question_tokens[0]}) prefilled")
    hit = alloc.add_sequence("B", system + qb)
    alloc.mark_computed("B", len(system + qb))
    snap(f"B: same system prompt, {hit} tokens found in A's published blocks")
    alloc.fork("A", "A2")
    snap("A forks a second sample: every block shared (refs +1, no copy)")
    copies = alloc.append("A", token_ids=[4000])
    copies += alloc.append("A2", token_ids=[5000])
    snap("both samples write a token: the shared last block is copied first", copies)
    alloc.free("B")
    snap("B finishes: its own blocks are freed, full published ones stay cached")
    return steps


def sharing_savings(num_requests: int, system_tokens: int, question_tokens: int,
                    block_size: int = DEFAULT_BLOCK_SIZE) -> dict:
    """Blocks held by N requests sharing one system prompt, on real allocators with and without sharing.

    Without: N·⌈(P+U)/bs⌉. With: ⌊P/bs⌋ shared full blocks + N·(⌈(P+U)/bs⌉ − ⌊P/bs⌋) (hits stop at
    the last full block of the system prompt, and one token short of a prompt).
    """
    per_request = cdiv(system_tokens + question_tokens, block_size)
    held = {}
    for sharing in (False, True):
        alloc = BlockAllocator(num_requests * per_request, block_size, enable_prefix_caching=sharing)
        for r in range(num_requests):
            tokens = list(range(system_tokens)) + [10**6 + r * 10**4 + i for i in range(question_tokens)]
            alloc.add_sequence(r, tokens)
            alloc.mark_computed(r, len(tokens))
        held["with sharing" if sharing else "without sharing"] = alloc.num_used_blocks
    held["saved %"] = round(100 * (1 - held["with sharing"] / held["without sharing"]), 1)
    return held
