"""The admission queue in front of the pool: wait (bounded FIFO) vs busy (503 at once)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache.pool import CachePool
from kvsim.calc.units import InputError
from kvsim.model import toy_spec
from kvsim.serving.admission import (
    HTTP_BUSY,
    AdmissionQueue,
    PoolFullError,
    SlotPool,
    admission_sweep,
    simulate_admission,
    sweep_table,
)
from kvsim.serving.workload import Workload, make_workload


def workload(arrival, output):
    n = len(arrival)
    return Workload(np.array(arrival), np.ones(n, dtype=np.int64), np.array(output), np.full(n, -1))


def plain_reference(arrival, output, slots, policy, max_queue):
    """Iteration by iteration with lists only: (ttft or None per request, queue length per iteration)."""
    running, queue, ttft, qlen, t, i = [], [], [None] * len(arrival), [], 0, 0
    while True:
        running = [end for end in running if end > t]
        if i == len(arrival) and not queue and not running:
            break
        while queue and len(running) < slots:
            r = queue.pop(0)
            ttft[r] = t - arrival[r] + 1
            running.append(t + output[r])
        while i < len(arrival) and arrival[i] == t:
            if not queue and len(running) < slots:
                ttft[i] = 1
                running.append(t + output[i])
            elif policy == "wait" and len(queue) < max_queue:
                queue.append(i)
            i += 1
        qlen.append(len(queue))
        t += 1
    return ttft, qlen


def test_small_case_by_hand():
    # 1 slot; requests arrive at 0, 0, 1 and each holds the slot 3 iterations
    w = workload([0, 0, 1], [3, 3, 3])
    wait = simulate_admission(w, 1, "wait", max_queue=1)
    assert wait.ttft_iterations.tolist()[:2] == [1, 4] and wait.rejected.tolist() == [False, False, True]
    assert wait.queue_length.tolist() == [1, 1, 1, 0, 0, 0]
    busy = simulate_admission(w, 1, "busy")
    assert busy.rejected.tolist() == [False, True, True] and busy.max_queue_length == 0
    assert busy.rejected_count == 2 and busy.mean_ttft == 1.0


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.integers(0, 3), min_size=1, max_size=25), data=st.data(),
       slots=st.integers(1, 4), max_queue=st.integers(1, 5), policy=st.sampled_from(["wait", "busy"]))
def test_equals_plain_reference(gaps, data, slots, max_queue, policy):
    arrival = np.cumsum(gaps).tolist()
    output = data.draw(st.lists(st.integers(1, 6), min_size=len(arrival), max_size=len(arrival)))
    res = simulate_admission(workload(arrival, output), slots, policy, max_queue)
    ttft, qlen = plain_reference(arrival, output, slots, policy, max_queue)
    assert res.rejected.tolist() == [t is None for t in ttft]
    assert [None if np.isnan(x) else int(x) for x in res.ttft_iterations] == ttft
    assert res.queue_length.tolist() == qlen
    assert res.running.max() <= slots and res.queue_length.max(initial=0) <= (max_queue if policy == "wait" else 0)


def test_driven_by_a_real_cache_pool_decides_the_same():
    w = make_workload(40, "short", rate=0.5, seed=3)
    slots = simulate_admission(w, 3, "wait", max_queue=4)
    real = simulate_admission(w, 3, "wait", max_queue=4, pool=CachePool(toy_spec("gqa"), 3))
    assert np.array_equal(slots.rejected, real.rejected)
    assert np.allclose(slots.ttft_iterations, real.ttft_iterations, equal_nan=True)
    assert np.array_equal(slots.queue_length, real.queue_length)


def test_the_pool_only_raises_pool_full_and_the_queue_decides():
    pool = SlotPool(1)
    pool.allocate()
    with pytest.raises(PoolFullError):
        pool.allocate()
    wait, busy = AdmissionQueue(SlotPool(1), "wait", 1), AdmissionQueue(SlotPool(1), "busy")
    assert [d.outcome for d in (wait.arrive(0), wait.arrive(1), wait.arrive(2))] == ["admitted", "queued", "rejected"]
    out = [busy.arrive(0), busy.arrive(1)]
    assert [d.outcome for d in out] == ["admitted", "rejected"] and out[1].status == HTTP_BUSY
    wait.pool.release(0)
    assert [(d.request, d.seq_id) for d in wait.admit_waiting()] == [(1, 1)]
    for bad, match in ((dict(policy="lifo"), "policy"), (dict(max_queue=0), "max_queue")):
        with pytest.raises(InputError, match=match):
            AdmissionQueue(SlotPool(1), **bad)


def test_sweep_over_rates():
    rates = [0.05, 0.2, 0.8]
    out = admission_sweep(rates, max_sequences=4, max_queue=8, num_requests=120)
    assert set(out) == {"wait", "busy"} and [r.rate for r in out["wait"]] == rates
    busy, wait = [r.rejected_count for r in out["busy"]], [r.rejected_count for r in out["wait"]]
    assert busy[-1] > busy[0] and wait[-1] > wait[0]                 # more load, more 503s
    assert wait[0] == 0 < busy[0]        # a light burst: the queue absorbs it, busy turns requests away
    # (under overload both turn away about the same share: the slots serve the same number either way)
    assert all(r.mean_ttft == 1.0 for r in out["busy"])              # busy never makes anyone wait
    assert out["wait"][-1].mean_ttft > out["wait"][0].mean_ttft      # waiting costs time to first token


def test_sweep_table_rows():
    sweep = admission_sweep([0.05, 0.5], max_sequences=2, max_queue=4, num_requests=60)
    rows = sweep_table(sweep)
    assert [(r["policy"], r["rate"]) for r in rows] == [("wait", 0.05), ("wait", 0.5), ("busy", 0.05), ("busy", 0.5)]
    for row, res in zip(rows, sweep["wait"] + sweep["busy"]):
        assert row["rejected"] == res.rejected_count and row["rejected share"] == res.rejected_count / 60
        assert row["p95 TTFT"] >= row["mean TTFT"] >= 1 and row["max queue"] == res.max_queue_length
