"""Serving simulator: determinism, conservation, closed-form jumps, and the policy ordering."""

import numpy as np
import pytest

from kvsim.calc import memory, weights
from kvsim.calc.registry import load_model
from kvsim.serving.closed_form import ceil_sum
from kvsim.serving.contiguous import FirstFitExtents
from kvsim.serving.ledger import SPLIT
from kvsim.serving.sim import POLICIES, capacity_tokens_for, simulate
from kvsim.serving.workload import LENGTHS, make_workload


def test_workload_is_seeded_and_respects_limits():
    a = make_workload(500, "chat", rate=0.1, seed=7)
    b = make_workload(500, "chat", rate=0.1, seed=7)
    c = make_workload(500, "chat", rate=0.1, seed=8)
    for f in ("arrival", "prompt_tokens", "output_tokens"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)
    assert (a.prompt_tokens >= 1).all() and (a.output_tokens >= 1).all()
    assert (a.prompt_tokens + a.output_tokens <= 2048).all()
    assert (np.diff(a.arrival) >= 0).all()
    for name in LENGTHS:
        w = make_workload(50, name, max_len=4096, seed=1)
        assert (w.prompt_tokens + w.output_tokens <= 4096).all()


def test_chat_lengths_are_long_tailed():
    w = make_workload(20000, "chat", seed=0)
    out = w.output_tokens
    assert 250 < out.mean() < 400  # near the ShareGPT-like mean of 338 (clipped)
    assert np.percentile(out, 99) > 5 * np.median(out)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_token_is_generated_once_and_memory_adds_up(policy):
    w = make_workload(300, "chat", rate=0.05, seed=2, max_len=1024)
    s = simulate(w, policy, capacity_tokens=5000).summary
    assert s["completed"] == 300
    assert s["output_tokens"] == int(w.output_tokens.sum())
    raw = s["slot_iterations"]
    assert sum(raw[k] for k in SPLIT) == 5000 * s["iterations"]  # every slot, every iteration
    assert min(raw[k] for k in SPLIT) >= 0
    if s["preemptions"] == 0:  # a request's tokens over its life: p, p+1, ..., p+o
        p, o = w.prompt_tokens, w.output_tokens
        assert raw["logical_tokens"] == int(((o + 1) * (2 * p + o) // 2).sum())
        assert s["recomputed_tokens"] == 0


@pytest.mark.parametrize("policy,sharing", [("max", False), ("pow2", False), ("oracle", False),
                                            ("paged", False), ("paged", True)])
def test_jumping_equals_stepping_one_iteration_at_a_time(policy, sharing):
    w = make_workload(60, "chat", rate=0.05, seed=3, max_len=1024, shared_prefix_tokens=128,
                      num_prefixes=6)
    kw = dict(capacity_tokens=2500, prefix_sharing=sharing)
    fast, slow = simulate(w, policy, **kw), simulate(w, policy, jump=False, **kw)
    assert fast.summary == slow.summary
    if policy == "paged":  # the closed forms were exercised under pressure
        assert fast.summary["preemptions"] > 0
        assert fast.summary["evictions"] > 0 or not sharing
    assert len(fast.timeline["t"]) < len(slow.timeline["t"])


def test_same_seed_same_result():
    w = make_workload(400, "chat", seed=5)
    a = simulate(w, "paged", capacity_tokens=6000).summary
    b = simulate(make_workload(400, "chat", seed=5), "paged", capacity_tokens=6000).summary
    assert a == b


def test_policy_ordering_matches_kwon_et_al():
    # saturated (all requests at t=0): share of KV memory holding real tokens
    w = make_workload(800, "chat", seed=0)
    runs = {p: simulate(w, p, capacity_tokens=12000).summary for p in POLICIES}
    share = {p: s["share_saturated"]["token_states"] for p, s in runs.items()}
    assert share["paged"] > share["oracle"] > share["pow2"] > share["max"]
    assert share["paged"] > 0.9 and share["max"] < 0.35
    assert runs["paged"]["tokens_per_iteration"] > 2 * runs["max"]["tokens_per_iteration"]


def test_prefix_sharing_stores_more_logical_tokens_than_slots():
    w = make_workload(400, "chat", seed=4, shared_prefix_tokens=512, num_prefixes=2)
    plain = simulate(w, "paged", capacity_tokens=8000).summary
    shared = simulate(w, "paged", capacity_tokens=8000, prefix_sharing=True).summary
    assert shared["prefix_hit_tokens"] > 0 and plain.get("prefix_hit_tokens", 0) == 0
    assert shared["logical_token_share"] > 1.1 * shared["share"]["token_states"]
    assert shared["mean_running"] > plain["mean_running"]
    assert shared["prefill_tokens"] < plain["prefill_tokens"]


def test_paged_preempts_under_pressure_and_recomputes():
    w = make_workload(300, "chat", seed=1)
    s = simulate(w, "paged", capacity_tokens=4000).summary
    assert s["preemptions"] > 0 and s["recomputed_tokens"] > 0
    assert s["output_tokens"] == int(w.output_tokens.sum())


def test_timeline_rows_cover_the_run():
    w = make_workload(200, "chat", rate=0.02, seed=6)
    r = simulate(w, "oracle", capacity_tokens=6000)
    tl = r.timeline
    assert tl["iterations"].sum() == r.summary["iterations"]
    assert (tl["idle"][tl["waiting"] > 0] == 0).all()
    total = sum(tl[k] for k in SPLIT)
    assert np.allclose(total, 6000)


def test_ceil_sum_and_first_fit_extents():
    n = np.arange(0, 100)
    brute = np.array([sum(-(-x // 16) for x in range(1, k + 1)) for k in n])
    assert np.array_equal(ceil_sum(n, 16), brute)
    e = FirstFitExtents(100)
    a, b, c = e.alloc(30), e.alloc(30), e.alloc(30)
    assert (a, b, c) == (0, 30, 60) and e.alloc(20) is None  # 10 free, not 20
    e.release(b, 30)
    assert e.alloc(40) is None  # 30 + 10 free but not contiguous: external fragmentation
    e.release(c, 30)
    assert e.free == [[30, 100]] and e.alloc(70) == 30


def test_bad_arguments():
    w = make_workload(10, "fixed")
    with pytest.raises(ValueError, match="policy 'lifo' is not one of"):
        simulate(w, "lifo")
    with pytest.raises(ValueError, match="capacity_tokens 1000 is smaller than one max reservation"):
        simulate(w, "max", capacity_tokens=1000)
    with pytest.raises(ValueError, match="longest request needs"):
        simulate(w, "paged", capacity_tokens=100)
    with pytest.raises(ValueError, match="prefix_sharing needs policy 'paged'"):
        simulate(w, "oracle", prefix_sharing=True)
    with pytest.raises(ValueError, match="max_running must be a positive integer"):
        simulate(w, "paged", max_running=0)
    with pytest.raises(ValueError, match="watermark must be in"):
        simulate(w, "paged", watermark=1.5)
    with pytest.raises(ValueError, match="lengths 'zipf' is not one of"):
        make_workload(10, "zipf")
    with pytest.raises(ValueError, match="rate must be > 0"):
        make_workload(10, rate=0)


def test_capacity_from_model_and_accelerator():
    spec = load_model("llama-3-8b")
    got = capacity_tokens_for("llama-3-8b", "H100 80GB", utilization=0.9)
    budget = int(80 * 2**30 * 0.9 - weights.weights_bytes(spec, "bf16"))
    assert got == budget // memory.bytes_per_token(spec, "bf16") == budget // 131072
