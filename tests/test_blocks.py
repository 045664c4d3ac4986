"""Block allocator: sharing, copy-on-write, eviction, preemption, and stateful invariants."""

import copy

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvsim.serving.block_pool import OutOfBlocks, RequestTooLarge
from kvsim.serving.blocks import BlockAllocator
from kvsim.serving.prefix_cache import block_hash


def snapshot(a: BlockAllocator) -> dict:
    """Everything an operation could change (the admission counter only advances on success)."""
    return {k: copy.deepcopy(v) for k, v in vars(a).items() if k != "_counter"}


def test_prefix_blocks_are_shared_and_counted():
    a = BlockAllocator(10, block_size=4)
    prompt = list(range(10))  # 2 full blocks + 2 tokens
    assert a.add_sequence("a", prompt) == 0
    a.mark_computed("a", 10)
    assert a.add_sequence("b", prompt) == 8  # both full blocks reused
    ta, tb = a.block_table("a"), a.block_table("b")
    assert ta[:2] == tb[:2] and ta[2] != tb[2]
    assert [a.ref_count[b] for b in ta] == [2, 2, 1]
    assert a.num_used_blocks == 4
    a.check_invariants()


def test_hits_stop_one_token_short_and_need_computed_blocks():
    a = BlockAllocator(10, block_size=4)
    a.add_sequence("a", list(range(8)))
    assert a.add_sequence("b", list(range(8))) == 0  # "a" not computed yet: nothing published
    a.mark_computed("a", 8)
    # the whole prompt is cached, but the caller must still run one token: last block recomputed
    assert a.add_sequence("c", list(range(8))) == 4
    assert a.add_sequence("d", list(range(5)) + [99, 98, 97, 96]) == 4  # diverges in block 1


def test_block_hash_depends_on_the_whole_prefix():
    h0 = block_hash(b"", [1, 2, 3, 4])
    assert block_hash(h0, [5, 6, 7, 8]) != block_hash(block_hash(b"", [0, 2, 3, 4]), [5, 6, 7, 8])


def test_fork_then_copy_on_write_leaves_the_parent_alone():
    a = BlockAllocator(8, block_size=4)
    a.add_sequence("p", num_tokens=6)
    a.fork("p", "c")
    assert a.ref_count[a.block_table("p")[1]] == 2
    copies = a.append("c", 1)  # writes into the shared partial block -> private copy first
    src, dst = copies[0]
    assert a.block_table("p")[1] == src and a.block_table("c")[1] == dst
    assert a.ref_count[src] == 1 and a.ref_count[dst] == 1
    assert a.append("p", 1) == []  # the parent's block is private again: no copy
    assert a.stats["cow_copies"] == 1
    a.check_invariants()


def test_free_list_first_then_lru_eviction_of_cached_blocks():
    a = BlockAllocator(4, block_size=2)
    a.add_sequence("x", [1, 2, 3, 4, 5])
    a.mark_computed("x", 5)
    a.free("x")  # 2 full published blocks -> cached, the partial one -> free
    assert (a.num_cached_blocks, a.num_free_blocks) == (2, 4)
    a.add_sequence("y", num_tokens=4)  # takes the 2 never-cached free blocks first
    assert a.num_cached_blocks == 2 and a.stats["evictions"] == 0
    a.add_sequence("z", num_tokens=1)  # must evict: the tail block was freed first = oldest
    assert a.stats["evictions"] == 1 and a.num_cached_blocks == 1
    a.free("y")
    assert a.add_sequence("w", [1, 2, 9]) == 2  # the head block survived
    a.check_invariants()


def test_failed_allocations_change_nothing():
    a = BlockAllocator(4, block_size=4)
    a.add_sequence("a", num_tokens=8)
    a.add_sequence("b", num_tokens=4)
    before = snapshot(a)
    with pytest.raises(OutOfBlocks, match="need 2 free blocks, 1 available"):
        a.add_sequence("c", num_tokens=5)
    with pytest.raises(OutOfBlocks):
        a.append("a", 8)
    with pytest.raises(RequestTooLarge, match="3 more blocks; the pool has 4"):
        a.append("a", 12)
    with pytest.raises(RequestTooLarge, match="needs 5 blocks; the pool has 4"):
        a.add_sequence("c", num_tokens=17)
    with pytest.raises(ValueError, match="already exists"):
        a.add_sequence("a", num_tokens=1)
    assert snapshot(a) == before


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="num_blocks must be an integer >= 1"):
        BlockAllocator(0)
    with pytest.raises(ValueError, match="block_size"):
        BlockAllocator(4, block_size=0)
    a = BlockAllocator(4)
    with pytest.raises(KeyError, match="unknown"):
        a.append("nope", 1)
    with pytest.raises(ValueError, match="mode must be"):
        a.add_sequence("s", num_tokens=1) or a.preempt("s", mode="drop")


def test_trim_frees_whole_blocks_and_unpublishes_a_rewritten_block():
    a = BlockAllocator(6, block_size=4)
    a.add_sequence("a", list(range(12)))
    a.mark_computed("a", 12)
    assert a.trim("a", 6) == 6 and a.num_tokens("a") == 6
    assert len(a.block_table("a")) == 2 and a.num_cached_blocks == 1  # block 2 cached, still valid
    last = a.block_table("a")[1]
    assert a.block_hashes[last] is None  # block 1 is partial now and will be overwritten
    a.check_invariants()


def test_release_before_frees_blocks_outside_a_window():
    a = BlockAllocator(6, block_size=4)
    a.add_sequence("s", num_tokens=14)
    assert a.release_before("s", 9) == 2  # positions 0..7 sit in blocks 0 and 1
    assert a.block_table("s")[:2] == [-1, -1] and a.first_live_token("s") == 8
    with pytest.raises(ValueError, match="were released"):
        a.slots("s", 7, 9)
    assert list(a.slots("s", 8, 10)) == [a.block_table("s")[2] * 4, a.block_table("s")[2] * 4 + 1]


def test_preempt_recompute_and_swap_round_trip():
    a = BlockAllocator(6, block_size=4, num_host_blocks=2)
    a.add_sequence("old", list(range(8)))
    a.mark_computed("old", 8)
    a.add_sequence("new", num_tokens=6)
    assert a.pick_victim() == "new" and a.pick_victim(exclude={"new"}) == "old"
    pairs = a.preempt("new", mode="swap")
    assert [h for _, h in pairs] == [0, 1] and a.num_used_blocks == 2
    back = a.resume("new")
    assert [h for h, _ in back] == [0, 1] and a.num_computed("new") == 0
    a.preempt("old")  # recompute: tokens kept, blocks cached
    assert a.resume("old") == [] and a.num_computed("old") == 4  # its own prefix block is a hit
    assert a.stats["preemptions"] == 2
    a.check_invariants()


# ---------------------------------------------------------------- stateful property test

BS, NUM_BLOCKS, HOST = 4, 10, 4
FAMILIES = [list(range(100, 124)), list(range(100, 108)) + list(range(300, 316)), list(range(500, 524))]


class AllocatorMachine(RuleBasedStateMachine):
    """A fake KV store next to the allocator: every slot holds the token written there.

    A sequence reads back exactly its own tokens after every step, only ever writes into blocks
    it alone references (copy-on-write), and failed calls leave the allocator untouched.
    """

    def __init__(self):
        super().__init__()
        self.a = BlockAllocator(NUM_BLOCKS, BS, enable_prefix_caching=True, num_host_blocks=HOST)
        self.data = [[None] * BS for _ in range(NUM_BLOCKS)]
        self.host = [[None] * BS for _ in range(HOST)]
        self.expect, self.parked, self.next_id, self.prefix_of = {}, {}, 0, {}

    def write(self, sid, start, tokens):
        for t in range(start, len(tokens)):
            slot = int(self.a.slots(sid, t, t + 1)[0])
            b = slot // BS
            assert self.a.ref_count[b] == 1, "writing into a block another sequence reads"
            self.data[b][slot % BS] = tokens[t]

    def attempt(self, fn, *args):
        before = snapshot(self.a)
        try:
            return True, fn(*args)
        except (OutOfBlocks, RequestTooLarge):
            assert snapshot(self.a) == before, "a failed call changed the allocator"
            return False, None

    @rule(family=st.integers(0, 2), n=st.integers(1, 22))
    def add(self, family, n):
        sid, self.next_id = self.next_id, self.next_id + 1
        tokens = FAMILIES[family][:n]
        ok, hit = self.attempt(self.a.add_sequence, sid, tokens)
        if ok:
            assert [self.data[s // BS][s % BS] for s in self.a.slots(sid, 0, hit)] == tokens[:hit]
            self.write(sid, hit, tokens)
            self.a.mark_computed(sid, n)
            self.expect[sid] = tokens

    @precondition(lambda self: self.expect)
    @rule(data=st.data(), k=st.integers(1, 9))
    def append(self, data, k):
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        tokens = self.expect[sid] + [1000 + sid * 50 + i for i in range(k)]
        ok, copies = self.attempt(self.a.append, sid, None, tokens[len(self.expect[sid]):])
        if ok:
            for src, dst in copies:
                self.data[dst] = list(self.data[src])
            self.write(sid, max(len(self.expect[sid]), self.a.first_live_token(sid)), tokens)
            self.a.mark_computed(sid, len(tokens))
            self.expect[sid] = tokens

    @precondition(lambda self: self.expect)
    @rule(data=st.data(), back=st.integers(1, 8), extra=st.integers(0, 5))
    def rewrite(self, data, back, extra):
        """Rewind-and-overwrite (speculative decoding): positions [start, stop) get new tokens."""
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        old = self.expect[sid]
        start = max(self.a.first_live_token(sid), len(old) - back)
        stop = len(old) + extra  # the whole tail is rewritten: no stale positions stay behind
        ok, copies = self.attempt(self.a.prepare_write, sid, start, stop, None, True)
        if ok:
            for src, dst in copies:
                self.data[dst] = list(self.data[src])
            new = old[:start] + [2000 + sid * 50 + i for i in range(start, stop)]
            for t in range(start, stop):
                slot = int(self.a.slots(sid, t, t + 1)[0])
                assert self.a.ref_count[slot // BS] == 1, "rewriting a block another sequence reads"
                self.data[slot // BS][slot % BS] = new[t]
            self.expect[sid] = new

    @precondition(lambda self: self.expect)
    @rule(data=st.data())
    def fork(self, data):
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        child, self.next_id = self.next_id, self.next_id + 1
        self.a.fork(sid, child)
        self.expect[child] = list(self.expect[sid])

    @precondition(lambda self: self.expect)
    @rule(data=st.data())
    def free(self, data):
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        self.a.free(sid)
        del self.expect[sid]

    @precondition(lambda self: self.expect)
    @rule(data=st.data(), n=st.integers(0, 10))
    def trim(self, data, n):
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        done = self.a.trim(sid, n)
        self.expect[sid] = self.expect[sid][:len(self.expect[sid]) - done]

    @precondition(lambda self: self.expect)
    @rule(data=st.data(), back=st.integers(0, 12))
    def release(self, data, back):
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        self.a.release_before(sid, max(0, len(self.expect[sid]) - back))

    @precondition(lambda self: self.expect)
    @rule(data=st.data(), mode=st.sampled_from(["recompute", "swap"]))
    def preempt(self, data, mode):
        sid = data.draw(st.sampled_from(sorted(self.expect)))
        ok, pairs = self.attempt(self.a.preempt, sid, mode)
        if ok:
            for gpu, h in pairs:  # copy out before any freed block is reused
                self.host[h] = list(self.data[gpu])
            self.parked[sid] = self.expect.pop(sid)

    @precondition(lambda self: self.parked)
    @rule(data=st.data())
    def resume(self, data):
        sid = data.draw(st.sampled_from(sorted(self.parked)))
        mode = self.a.preemption_mode(sid)
        ok, pairs = self.attempt(self.a.resume, sid)
        if ok:
            for h, gpu in pairs:
                self.data[gpu] = list(self.host[h])
            tokens = self.parked.pop(sid)
            if mode == "recompute":  # hits are already there, write the rest
                self.write(sid, self.a.num_computed(sid), tokens)
                self.a.mark_computed(sid, len(tokens))
            self.expect[sid] = tokens

    @invariant()
    def accounting_holds(self):
        self.a.check_invariants()
        assert self.a.num_used_blocks + self.a.num_free_blocks == NUM_BLOCKS

    @invariant()
    def every_sequence_reads_its_own_tokens(self):
        for sid, tokens in self.expect.items():
            start = self.a.first_live_token(sid)
            got = [self.data[s // BS][s % BS] for s in self.a.slots(sid, start, len(tokens))]
            assert got == tokens[start:], f"sequence {sid} reads foreign or stale data"

    @invariant()
    def published_blocks_hold_their_prefix(self):
        # a hash names a whole prefix: the block listed under it holds that prefix's last tokens
        for sid, tokens in self.expect.items():
            parent = b""
            for i, b in enumerate(self.a.block_table(sid)[:len(tokens) // BS]):
                parent = block_hash(parent, tokens[i * BS:(i + 1) * BS])
                if b >= 0 and self.a.block_hashes[b] is not None:
                    assert self.a.block_hashes[b] == parent, "block published under a wrong hash"
                    self.prefix_of[parent] = tokens[:(i + 1) * BS]
        for b, h in enumerate(self.a.block_hashes):
            if h is not None and h in self.prefix_of:
                assert self.data[b] == self.prefix_of[h][-BS:], "cached block lost its tokens"


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
