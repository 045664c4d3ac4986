"""CachePool: stateful property test against a plain model, plus the calculator's bytes."""

import time

import mlx.core as mx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvsim.cache import RecurrentStateCache
from kvsim.cache.pool import (
    CachePool,
    PoolFullError,
    SequenceInfo,
    UnknownSequenceError,
)
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.memory import allocated_bytes, fixed_state_bytes, parse_kv_dtype

# attention every 2nd layer (1 KV head of 32 dims), Mamba state on the others: a tiny Jamba
HYBRID = from_hf_config({
    "model_type": "jamba", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 2,
    "num_key_value_heads": 1, "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_expand": 2,
    "mamba_d_state": 4, "mamba_d_conv": 4, "vocab_size": 50}, name="tiny-jamba")
STEP = 4


def feed(caches, tokens: int):
    """What a forward pass over ``tokens`` tokens does to one sequence's caches (bf16)."""
    for layer, cache in zip(HYBRID.layers, caches):
        if isinstance(cache, RecurrentStateCache):
            for name in cache.names:
                cache[name] = cache[name] + 1
            cache.advance(tokens)
        else:
            kv = mx.ones((1, layer.num_key_value_heads, tokens, layer.head_dim), dtype=mx.bfloat16)
            cache.update_and_fetch(kv, kv)


class PoolMachine(RuleBasedStateMachine):
    """The pool against a dict {id: (prompt, peak tokens)} and a counter of ids handed out."""

    @initialize(max_sequences=st.integers(1, 3), kv_dtype=st.sampled_from([None, "q4", "q8"]))
    def create(self, max_sequences, kv_dtype):
        self.pool = CachePool(HYBRID, max_sequences, kv_dtype=kv_dtype, step=STEP, dtype=mx.bfloat16,
                              group_size=32)
        self.kv_dtype = parse_kv_dtype(kv_dtype or "bf16", group_size=32, scale_dtype="bf16")
        self.model, self.issued, self.last_time = {}, 0, 0.0

    def _observable(self):
        return (len(self.pool), self.pool.active_ids(), self.pool.next_id, self.pool.memory_usage_bytes())

    @rule(prompt=st.integers(0, 9))
    def allocate(self, prompt):
        if len(self.model) == self.pool.max_sequences:
            before = self._observable()
            with pytest.raises(PoolFullError, match="max_sequences"):
                self.pool.allocate(prompt)
            assert self._observable() == before
            return
        seq_id = self.pool.allocate(prompt)
        assert seq_id == self.issued  # strictly increasing from 0, never reused
        self.issued += 1
        self.model[seq_id] = (prompt, 0)
        info = self.pool.info(seq_id)
        assert info.prompt_tokens == prompt and info.offset == 0 and info.nbytes > 0  # recurrent state
        assert self.last_time <= info.allocated_at <= time.monotonic()
        self.last_time = info.allocated_at

    @rule(data=st.data(), tokens=st.integers(1, 6))
    @precondition(lambda self: self.model)
    def forward(self, data, tokens):
        seq_id = data.draw(st.sampled_from(sorted(self.model)))
        feed(self.pool.caches(seq_id), tokens)
        prompt, peak = self.model[seq_id]
        self.model[seq_id] = (prompt, peak + tokens)

    @rule(data=st.data())
    @precondition(lambda self: self.model)
    def release(self, data):
        seq_id = data.draw(st.sampled_from(sorted(self.model)))
        self.pool.release(seq_id)
        del self.model[seq_id]

    @rule(bad=st.one_of(st.integers(-3, 12), st.just("0")))
    def release_unknown(self, bad):
        if bad in self.model:
            return
        before = self._observable()
        with pytest.raises(UnknownSequenceError, match=repr(bad)):
            self.pool.release(bad)
        assert self._observable() == before

    @invariant()
    def matches_model_and_calculator(self):
        assert len(self.pool) == len(self.model) <= self.pool.max_sequences
        assert list(self.pool.active_ids()) == sorted(self.model)
        assert self.pool.next_id == self.issued
        total = 0
        for seq_id, (prompt, peak) in self.model.items():
            info = self.pool.info(seq_id)
            assert info.offset == peak and info.prompt_tokens == prompt
            expected = (allocated_bytes(HYBRID, peak, 1, self.kv_dtype, step=STEP)
                        + fixed_state_bytes(HYBRID, 1, state_dtype="bf16"))
            assert info.nbytes == expected == sum(c.nbytes for c in self.pool.caches(seq_id) if c is not None)
            total += expected
        assert self.pool.memory_usage_bytes() == total


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=30, stateful_step_count=25)


def test_errors_name_the_problem():
    pool = CachePool(HYBRID, 1, step=STEP)
    a = pool.allocate(3)
    with pytest.raises(PoolFullError, match="1 of max_sequences=1 active"):
        pool.allocate(1)
    pool.release(a)
    with pytest.raises(UnknownSequenceError, match="sequence id 0 is not active") as err:
        pool.release(a)
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    with pytest.raises(KeyError):
        pool.caches(a)
    assert pool.allocate(2) == 1  # released ids are not reused
    for kwargs, match in (({"max_sequences": 0}, "max_sequences"), ({"max_sequences": 2, "kv_dtype": "fp8"}, "fp8"),
                          ({"max_sequences": 2, "kv_dtype": "q5"}, "q5")):
        with pytest.raises(ValueError, match=match):
            CachePool(HYBRID, **kwargs)
    with pytest.raises(ValueError, match="prompt_tokens"):
        pool.allocate(-1)
    with pytest.raises(ValueError, match="spec"):
        CachePool({"model_type": "llama"}, 2)


def test_info_and_release_free_memory():
    pool = CachePool(HYBRID, 4, step=STEP, dtype=mx.bfloat16)
    ids = [pool.allocate(p) for p in (5, 7)]
    feed(pool.caches(ids[0]), 5)
    info = pool.info(ids[0])
    assert isinstance(info, SequenceInfo) and (info.seq_id, info.prompt_tokens, info.offset) == (0, 5, 5)
    before = pool.memory_usage_bytes()
    pool.release(ids[0])
    assert pool.memory_usage_bytes() == before - info.nbytes == pool.sequence_bytes(ids[1])
    assert 0 not in pool and 1 in pool and pool.free_slots == 3
