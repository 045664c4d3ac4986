"""CachePool as seed 000 describes it: ids, a mixed Llama + Jamba pool against the calculator,
placeholders for model-owned state, the not-Sync demonstration and real threads under a lock."""

import threading

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache.pool import (
    CachePool,
    PoolFullError,
    StatePlaceholder,
    interleave_allocations,
)
from kvsim.calc.memory import allocated_bytes, fixed_state_bytes
from kvsim.calc.pool_bytes import pool_allocated_bytes
from kvsim.decode.generate import prefill
from kvsim.model import build_model, toy_spec
from kvsim.serving.admission import PoolFullError as ServingPoolFullError

STEP = 8
LLAMA = build_model(toy_spec("gqa"), seed=1)
JAMBA = build_model(toy_spec("jamba"), seed=2)


def observable(pool):
    return (len(pool), pool.active_ids(), pool.next_id, pool.memory_usage_bytes())


def expected_bytes(spec, tokens):
    """The calculator's allocated view for one fp32 sequence of ``tokens`` tokens, state included."""
    return int(allocated_bytes(spec, tokens, 1, "fp32", step=STEP)) + fixed_state_bytes(spec, 1, model_dtype="fp32")


def test_mixed_llama_jamba_pool_matches_nbytes_and_calculator():
    pool = CachePool(LLAMA.spec, 4, step=STEP)
    plan = [(LLAMA, 5), (JAMBA, 11), (LLAMA, 17), (JAMBA, 3)]
    ids = []
    for model, n in plan:
        sid = pool.allocate(n, spec=model.spec)
        prefill(model, list(range(1, n + 1)), pool.caches(sid))   # a real forward pass writes the caches
        ids.append(sid)
    assert ids == [0, 1, 2, 3]
    nbytes = sum(c.nbytes for sid in ids for c in pool.caches(sid) if c is not None)
    calc = sum(expected_bytes(m.spec, n) for m, n in plan)
    assert pool.memory_usage_bytes() == nbytes == calc
    view = pool_allocated_bytes([(m.spec, n) for m, n in plan], "fp32", STEP, "fp32")
    assert view["pool"] == view["total"] == calc and view["model"] == 0 and view["state"] > 0
    assert [pool.info(s).model for s in ids] == ["toy-gqa", "toy-jamba", "toy-gqa", "toy-jamba"]
    assert [pool.info(s).offset for s in ids] == [n for _, n in plan]
    # full: the only error is PoolFullError, and nothing changes
    before = observable(pool)
    with pytest.raises(PoolFullError, match="max_sequences=4"):
        pool.allocate(1, spec=JAMBA.spec)
    assert observable(pool) == before
    pool.release(ids[1])
    assert pool.memory_usage_bytes() == calc - expected_bytes(JAMBA.spec, 11)
    assert pool.allocate(2) == 4                                   # never reused


def test_bad_spec_leaves_pool_unchanged_and_pool_full_error_is_the_servings():
    assert PoolFullError is ServingPoolFullError                   # the admission queue catches this one
    pool = CachePool(LLAMA.spec, 2, kv_dtype="q4", step=STEP)
    pool.allocate(3)
    before = observable(pool)
    with pytest.raises(ValueError, match="chunked"):               # q4 has no chunked layout: refused
        pool.allocate(3, spec=toy_spec("chunked"))
    with pytest.raises(ValueError, match="spec"):
        pool.allocate(3, spec={"model_type": "llama"})
    assert observable(pool) == before


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.one_of(st.tuples(st.just("alloc"), st.sampled_from(["gqa", "jamba"])),
                              st.tuples(st.just("release"), st.integers(0, 5))), max_size=14))
def test_ids_strictly_increase_and_failures_change_nothing(ops):
    pool = CachePool(LLAMA.spec, 3, step=STEP)
    handed = []
    for op, arg in ops:
        before = observable(pool)
        if op == "alloc":
            if len(pool) == 3:
                with pytest.raises(PoolFullError):
                    pool.allocate(1, spec=toy_spec(arg))
                assert observable(pool) == before
            else:
                handed.append(pool.allocate(1, spec=toy_spec(arg)))
        else:
            active = pool.active_ids()
            if not active:
                with pytest.raises(KeyError):
                    pool.release(arg)
                assert observable(pool) == before
            else:
                pool.release(active[arg % len(active)])
    assert handed == list(range(len(handed)))


def test_model_owned_pool_holds_only_kv():
    from kvsim.model.owned_state import SequenceStateStore
    pool, store = CachePool(LLAMA.spec, 3, step=STEP, state_owner="model"), SequenceStateStore(JAMBA.spec)
    plan = [(JAMBA, 9), (LLAMA, 4), (JAMBA, 13)]
    for model, n in plan:
        sid = pool.allocate(n, spec=model.spec)
        caches = pool.caches(sid)
        if model is JAMBA:
            store.prepare_sequence_state(sid)
            caches = store.caches_for(sid, caches)
        prefill(model, list(range(1, n + 1)), caches)
    view = pool_allocated_bytes([(m.spec, n) for m, n in plan], "fp32", STEP, "fp32", state_owner="model")
    assert pool.memory_usage_bytes() == view["pool"] == view["kv"]
    assert store.memory_usage_bytes() == view["model"] == view["state"] > 0
    with pytest.raises(ValueError, match="state_owner"):
        pool_allocated_bytes([], state_owner="gpu")
    with pytest.raises(ValueError, match="ModelSpec"):
        pool_allocated_bytes([("llama", 3)])


def test_model_owned_state_gets_a_placeholder():
    pool = CachePool(JAMBA.spec, 2, step=STEP, state_owner="model")
    sid = pool.allocate(4)
    caches = pool.caches(sid)
    kinds = [layer.kind for layer in JAMBA.spec.layers]
    assert [isinstance(c, StatePlaceholder) for c in caches] == [k == "recurrent" for k in kinds]
    assert pool.memory_usage_bytes() == 0                          # nothing written yet, no state held
    other = CachePool(JAMBA.spec, 1, step=STEP)
    cache_owned = other.allocate(4)
    assert other.memory_usage_bytes() == fixed_state_bytes(JAMBA.spec, 1, model_dtype="fp32") > 0
    with pytest.raises(ValueError, match="state_owner"):
        CachePool(JAMBA.spec, 2, state_owner="engine")
    assert cache_owned == 0 and pool.info(sid).offset == 0
    with pytest.raises(TypeError, match="caches_for"):          # running on the placeholder is a bug
        caches[0]["ssm"]


def test_interleaving_without_a_lock_loses_an_update_and_with_it_none():
    racy = interleave_allocations(CachePool(LLAMA.spec, 4), "ABABAB", locked=False)
    assert racy.ids == {"A": 0, "B": 0} and racy.active == (0,) and racy.lost_updates == 1
    safe = interleave_allocations(CachePool(LLAMA.spec, 4), "ABABAB", locked=True)
    assert safe.ids == {"A": 0, "B": 1} and safe.active == (0, 1) and safe.lost_updates == 0
    assert "waits for lock" in [s.action for s in safe.steps]
    # a schedule in which A finishes before B starts is safe even without a lock
    serial = interleave_allocations(CachePool(LLAMA.spec, 4), "AAAABBBB", locked=False)
    assert serial.lost_updates == 0
    with pytest.raises(ValueError, match="schedule"):
        interleave_allocations(CachePool(LLAMA.spec, 4), "AC")


@settings(max_examples=30, deadline=None)
@given(schedule=st.text(alphabet="AB", max_size=10))
def test_locked_interleaving_never_loses_an_update(schedule):
    res = interleave_allocations(CachePool(LLAMA.spec, 4), schedule, locked=True)
    assert res.lost_updates == 0 and sorted(res.ids.values()) == [0, 1] and res.active == (0, 1)


def test_real_threads_with_a_lock():
    pool, lock = CachePool(LLAMA.spec, 6, step=STEP), threading.Lock()
    got: dict[int, list[int]] = {}
    full_errors = []

    def worker(name):
        mine = []
        for i in range(25):
            with lock:
                try:
                    mine.append(pool.allocate(i % 4))
                except PoolFullError:
                    full_errors.append(name)
            if len(mine) >= 2 and i % 3 == 0:
                with lock:
                    pool.release(mine[-2])
        got[name] = mine

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for ids in got.values() for i in ids]
    assert len(every) == len(set(every)) == pool.next_id           # no id handed out twice, none skipped
    assert all(ids == sorted(ids) for ids in got.values())         # each caller sees them increase
    assert len(pool) <= 6 and len(every) + len(full_errors) == 100
    assert pool.memory_usage_bytes() == sum(pool.sequence_bytes(s) for s in pool.active_ids())
