"""Buddy allocator (the paper's Orca baselines): power-of-two blocks, no overlap, coalescing, failed calls."""

import copy
from itertools import pairwise

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvsim.serving.buddy import BuddyAllocator, block_tokens


def test_block_tokens_rounds_up_to_a_power_of_two():
    assert [block_tokens(n) for n in (1, 2, 3, 4, 5, 25, 32, 33, 1000, 2048, 2049)] == \
        [1, 2, 4, 4, 8, 32, 32, 64, 1024, 2048, 4096]


def test_pool_starts_as_its_binary_expansion():
    # Table 1's 15,728 slots = 8192 + 4096 + 2048 + 1024 + 256 + 64 + 32 + 16, each block aligned
    buddy = BuddyAllocator(15_728)
    assert buddy.free_blocks() == [(0, 8192), (8192, 4096), (12288, 2048), (14336, 1024), (15360, 256),
                                   (15616, 64), (15680, 32), (15712, 16)]
    assert buddy.free_tokens == 15_728 and buddy.largest_free_block() == 8192


def test_seven_max_length_chunks_fit_table_1_and_the_rest_is_unusable():
    # Orca (Max): 2048 slots each; 7 fit, and 15,728 − 7·2048 = 1,392 slots can never hold an eighth
    buddy = BuddyAllocator(15_728)
    starts = [buddy.alloc(2048) for _ in range(7)]
    assert sorted(starts) == [0, 2048, 4096, 6144, 8192, 10240, 12288]
    assert buddy.alloc(2048) is None and buddy.free_tokens == 1_392


def test_split_and_coalesce_by_hand():
    buddy = BuddyAllocator(64)
    a = buddy.alloc(25)            # 25 -> a block of 32: 64 splits into 32 + 32
    b = buddy.alloc(5)             # 5 -> 8: the free 32 splits into 8 + 8 + 16
    assert (a, b) == (0, 32) and buddy.free_blocks() == [(40, 8), (48, 16)]
    assert buddy.alloc(17) is None  # 24 slots free, but no free block of 32: external fragmentation
    buddy.release(b)               # 32..40 merges with 40..48, then with 48..64
    assert buddy.free_blocks() == [(32, 32)]
    buddy.release(a)
    assert buddy.free_blocks() == [(0, 64)]


def test_bad_input_raises_and_changes_nothing():
    buddy = BuddyAllocator(100)
    buddy.alloc(10)
    before = copy.deepcopy(buddy.__dict__)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="slots to allocate must be a positive integer"):
            buddy.alloc(bad)
    with pytest.raises(ValueError, match="no held block starts at slot 5"):
        buddy.release(5)
    assert buddy.__dict__ == before
    with pytest.raises(ValueError, match="size_tokens must be a positive integer"):
        BuddyAllocator(0)


class BuddyMachine(RuleBasedStateMachine):
    """Random allocations and releases against the invariants of a buddy allocator."""

    @initialize(size=st.integers(1, 3000))
    def start(self, size):
        self.buddy, self.owned = BuddyAllocator(size), {}   # owned: start -> slots asked for

    @rule(n=st.integers(1, 1200))
    def alloc(self, n):
        before = copy.deepcopy(self.buddy.__dict__)
        start = self.buddy.alloc(n)
        if start is None:  # fails exactly when no free block is large enough, and changes nothing
            assert self.buddy.largest_free_block() < block_tokens(n)
            assert self.buddy.__dict__ == before
        else:
            assert start % block_tokens(n) == 0 and start not in self.owned
            self.owned[start] = n

    @precondition(lambda self: self.owned)
    @rule(data=st.data())
    def release(self, data):
        start = data.draw(st.sampled_from(sorted(self.owned)))
        del self.owned[start]
        self.buddy.release(start)

    @invariant()
    def blocks_tile_the_pool_without_overlap(self):
        held = [(s, 1 << k) for s, k in self.buddy.held.items()]
        assert sorted(self.owned) == sorted(self.buddy.held)
        assert all(1 << self.buddy.held[s] == block_tokens(n) for s, n in self.owned.items())
        blocks = sorted(held + self.buddy.free_blocks())
        assert all(s % size == 0 for s, size in blocks)                   # aligned to their size
        assert all(a + n == b for (a, n), (b, _) in pairwise(blocks))  # no gap, no overlap
        assert blocks[0][0] == 0 and sum(n for _, n in blocks) == self.buddy.size_tokens  # never more

    @invariant()
    def free_buddies_are_always_merged(self):
        free = set(self.buddy.free_blocks())
        assert not any((s ^ n, n) in free for s, n in free)

    @invariant()
    def releasing_everything_restores_the_pool(self):
        fresh = BuddyAllocator(self.buddy.size_tokens).free_blocks()
        if not self.owned:
            assert self.buddy.free_blocks() == fresh


TestBuddyMachine = BuddyMachine.TestCase
