"""Continuous batching (sequences join and leave between steps) and model-owned recurrent state,
both checked token for token against decoding each sequence alone on tiny random-weight models."""

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache.pool import CachePool
from kvsim.calc.memory import fixed_state_bytes
from kvsim.decode import generate
from kvsim.decode.continuous import CELLS, Request, continuous_generate
from kvsim.decode.generate import prefill
from kvsim.model import build_model, toy_spec
from kvsim.model.owned_state import (
    SequenceStateStore,
    sequence_state_layout,
    supports_batching,
)

GQA = build_model(toy_spec("gqa"), seed=3)
JAMBA = build_model(toy_spec("jamba"), seed=4)
SLIDING = build_model(toy_spec("sliding_global"), seed=5)
RG_LRU = build_model(toy_spec("rg_lru"), seed=6)
ATOL = 1e-4  # fp32; a batched matmul may sum in another order than a batch of one


def alone(model, req):
    return generate(model, list(req.prompt), req.max_new_tokens)


def check_isolated(model, reqs, gens):
    for req, gen in zip(reqs, gens):
        ref = alone(model, req)
        assert gen.tokens == ref.tokens
        assert mx.allclose(gen.logits, ref.logits, atol=ATOL).item()


def requests_strategy():
    one = st.builds(Request, st.lists(st.integers(1, 127), min_size=1, max_size=10).map(tuple),
                    st.integers(1, 6), st.integers(0, 6))
    return st.lists(one, min_size=1, max_size=5)


@settings(max_examples=12, deadline=None)
@given(reqs=requests_strategy(), max_batch=st.integers(1, 3), which=st.sampled_from(["gqa", "sliding", "jamba"]))
def test_tokens_equal_decoding_each_alone(reqs, max_batch, which):
    model = {"gqa": GQA, "sliding": SLIDING, "jamba": JAMBA}[which]
    gens, sched = continuous_generate(model, reqs, max_batch=max_batch)
    check_isolated(model, reqs, gens)
    # the schedule: each row waits (maybe), has one prefill, max_new_tokens - 1 decodes, then finishes
    for req, row in zip(reqs, sched.cells):
        assert set(row) <= set(CELLS)
        assert row.count("prefill") == 1 and row.count("decode") == req.max_new_tokens - 1
        first = row.index("prefill")
        assert all(c in ("", "waiting") for c in row[:first]) and row[:req.arrival_step] == ("",) * min(
            req.arrival_step, len(row))
        assert row[first + req.max_new_tokens:] == ("finished",) * (len(row) - first - req.max_new_tokens)
    for s in range(sched.steps):  # never more sequences in flight than slots
        assert sched.count("prefill")[s] + sched.count("decode")[s] <= max_batch
        assert sched.batch[s] == sched.count("decode")[s]


def test_sequences_join_and_leave_mid_flight():
    reqs = [Request((1, 2, 3), 4), Request((5, 6), 2), Request((7, 8, 9, 10), 3, 1), Request((11,), 2, 1)]
    gens, sched = continuous_generate(GQA, reqs, max_batch=2)
    check_isolated(GQA, reqs, gens)
    assert sched.cells[1] == ("prefill", "decode", "finished", "finished", "finished", "finished")
    assert sched.cells[2][:3] == ("", "waiting", "prefill")      # takes the slot request 1 left
    assert sched.cells[0][2] == "decode" and sched.batch == (0, 2, 1, 2, 1, 1)
    assert sched.cells[3] == ("", "waiting", "waiting", "waiting", "prefill", "decode")
    assert sched.codes()[1] == (2, 3, 4, 4, 4, 4)
    for req, gen in zip(reqs, gens):   # each trace counts the sequence's own steps and context
        assert [s.step for s in gen.trace] == list(range(req.max_new_tokens))
        assert [s.context_tokens for s in gen.trace] == [len(req.prompt) + i for i in range(req.max_new_tokens)]


def test_a_family_that_cannot_batch_runs_one_slot_at_a_time():
    assert supports_batching(JAMBA.spec) and supports_batching(GQA.spec) and not supports_batching(RG_LRU.spec)
    reqs = [Request((1, 2), 3), Request((3, 4, 5), 2), Request((6,), 2, 1)]
    gens, sched = continuous_generate(RG_LRU, reqs, max_batch=4)
    check_isolated(RG_LRU, reqs, gens)
    assert sched.slots == 1 and max(sched.batch) == 1
    assert all(p + d <= 1 for p, d in zip(sched.count("prefill"), sched.count("decode")))
    _, batched = continuous_generate(JAMBA, reqs, max_batch=4)
    assert batched.slots == 4 and max(batched.batch) == 2 and batched.steps < sched.steps


def test_bad_requests():
    with pytest.raises(ValueError, match="max_new_tokens"):
        continuous_generate(GQA, [((1,), 0)])
    with pytest.raises(ValueError, match="arrival_step"):
        continuous_generate(GQA, [((1,), 2, -1)])
    with pytest.raises(ValueError, match="max_batch"):
        continuous_generate(GQA, [((1,), 2)], max_batch=0)
    with pytest.raises(ValueError, match="prompt"):
        continuous_generate(GQA, [((999,), 2)])


# ------------------------------------------------------------ model-owned state
def test_layout_is_the_calculators_state():
    layout = sequence_state_layout(JAMBA.spec)
    assert {(t.layer, t.name) for t in layout} == {(i, n) for i, l in enumerate(JAMBA.spec.layers)
                                                  if l.kind == "recurrent" for n, _ in l.state_shapes}
    assert sum(t.nbytes for t in layout) == fixed_state_bytes(JAMBA.spec, 1, model_dtype="fp32")


def test_model_owned_equals_cache_owned_tokens_and_bytes():
    prompt = [4, 8, 15, 16, 23, 42]
    ref = generate(JAMBA, prompt, 6)                                 # state in the cache list
    owned_pool = CachePool(JAMBA.spec, 2, state_owner="model")
    store = SequenceStateStore(JAMBA.spec)
    sid = owned_pool.allocate(len(prompt))
    store.prepare_sequence_state(sid)
    gen = generate(JAMBA, prompt, 6, caches=store.caches_for(sid, owned_pool.caches(sid)))
    assert gen.tokens == ref.tokens and mx.allclose(gen.logits, ref.logits, atol=ATOL).item()
    assert owned_pool.info(sid).offset == len(prompt) + 5            # the placeholder kept the offset
    # the same bytes, split between the pool (K/V) and the model (state)
    cache_pool = CachePool(JAMBA.spec, 2)
    other = cache_pool.allocate(len(prompt))
    prefill(JAMBA, prompt + ref.tokens[:5], cache_pool.caches(other))
    assert owned_pool.memory_usage_bytes() + store.memory_usage_bytes() == cache_pool.memory_usage_bytes()
    assert store.memory_usage_bytes() == fixed_state_bytes(JAMBA.spec, 1, model_dtype="fp32")
    store.release_sequence_state(sid)
    assert store.memory_usage_bytes() == 0 and sid not in store
    for call in (lambda: store.release_sequence_state(sid), lambda: store.caches_for(sid, owned_pool.caches(sid))):
        with pytest.raises(ValueError, match="no model-owned state"):
            call()


def test_model_owned_state_through_continuous_batching():
    reqs = [Request((1, 2, 3), 4), Request((9, 8), 3), Request((5, 5, 5, 5), 4, 1), Request((7,), 3, 2)]
    store = SequenceStateStore(JAMBA.spec)
    owned, sched_owned = continuous_generate(JAMBA, reqs, max_batch=2, state_store=store)
    cached, sched_cached = continuous_generate(JAMBA, reqs, max_batch=2)
    assert [g.tokens for g in owned] == [g.tokens for g in cached] and sched_owned == sched_cached
    check_isolated(JAMBA, reqs, owned)
    assert store.memory_usage_bytes() == 0                          # every sequence's state released
