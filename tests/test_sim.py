"""Serving simulator: determinism, conservation, closed-form jumps, and the policy ordering."""

import numpy as np
import pytest

from kvsim.calc import memory, weights
from kvsim.calc.registry import load_model
from kvsim.serving.closed_form import ceil_sum
from kvsim.serving.contiguous import FirstFitExtents, reservation_tokens
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


def test_lengths_may_be_a_dict_of_specs():
    # Regression: the docstring accepts a dict of length specs, but `lengths not in LENGTHS` raised
    # TypeError (a dict is unhashable) before the dict was ever used.
    w = make_workload(5, {"prompt": ("fixed", 100), "output": ("uniform", 10, 20)}, seed=1)
    assert w.prompt_tokens.tolist() == [100] * 5
    assert ((w.output_tokens >= 10) & (w.output_tokens <= 20)).all()


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
    if s["preemptions"] == 0:  # a request's stored tokens over its o iterations: p, p+1, ..., p+o−1
        p, o = w.prompt_tokens, w.output_tokens
        assert raw["logical_tokens"] == int((o * (2 * p + o - 1) // 2).sum())
        assert s["recomputed_tokens"] == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_a_request_runs_o_iterations_and_stores_p_plus_o_minus_1(policy):
    # Regression: a request stored p + o tokens after o + 1 iterations. A real engine's prefill stores
    # p tokens and yields output token 1; each later iteration stores the token before and yields the
    # next, so the o-th (last) token is never stored: o iterations, p + o − 1 tokens at the end.
    p, o = 10, 5
    w = make_workload(1, {"prompt": ("fixed", p), "output": ("fixed", o)}, max_len=64)
    r = simulate(w, policy, capacity_tokens=256)
    assert r.summary["iterations"] == o and r.summary["output_tokens"] == o
    assert r.summary["slot_iterations"]["logical_tokens"] == sum(range(p, p + o))  # 10 + 11 + ... + 14
    assert r.summary["slot_iterations"]["token_states"] == sum(range(p, p + o))


def test_preempted_requests_recompute_what_they_stored_plus_their_last_token():
    # Requests A and B (p = 8, o = 24) in 4 blocks of 8 slots. After 9 iterations each stores 16
    # tokens in 2 blocks and has generated 9; the next token needs a third block, none is free, so B
    # (admitted last) is preempted. It later recomputes its prompt and the 9 tokens it generated
    # (17 tokens, 3 blocks), which fit only when A has finished (24 iterations, 31 tokens, 4 blocks),
    # and runs its other 15 iterations: 39 in all, 48 tokens generated.
    w = make_workload(2, {"prompt": ("fixed", 8), "output": ("fixed", 24)}, max_len=64)
    slow = simulate(w, "paged", capacity_tokens=32, block_size=8, watermark=0.0, jump=False).summary
    fast = simulate(w, "paged", capacity_tokens=32, block_size=8, watermark=0.0).summary
    assert slow == fast
    assert (slow["preemptions"], slow["recomputed_tokens"], slow["prefill_tokens"]) == (1, 17, 8 + 8 + 17)
    assert (slow["iterations"], slow["output_tokens"], slow["completed"]) == (39, 48, 2)


@pytest.mark.parametrize("policy,sharing,placement", [
    ("max", False, "buddy"), ("pow2", False, "buddy"), ("oracle", False, "buddy"), ("oracle", False, "first_fit"),
    ("paged", False, "buddy"), ("paged", True, "buddy")])
def test_jumping_equals_stepping_one_iteration_at_a_time(policy, sharing, placement):
    w = make_workload(60, "chat", rate=0.05, seed=3, max_len=1024, shared_prefix_tokens=128,
                      num_prefixes=6)
    kw = dict(capacity_tokens=2500, prefix_sharing=sharing, placement=placement)
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
    e.release(b)
    assert e.alloc(40) is None  # 30 + 10 free but not contiguous: external fragmentation
    e.release(c)
    assert e.free == [[30, 100]] and e.alloc(70) == 30 and e.block_tokens(70) == 70


def test_reservations_follow_the_paper():
    # Kwon et al. §6.1: Max reserves 2048; Pow2 rounds the OUTPUT only ("output length 25 -> 32
    # reserved"); Oracle reserves exactly what the request stores, p + o − 1.
    p, o = np.array([100, 100, 1500, 7]), np.array([25, 32, 600, 1])
    assert reservation_tokens("max", p, o, 2048).tolist() == [2048] * 4
    assert reservation_tokens("pow2", p, o, 2048).tolist() == [132, 132, 2048, 8]  # 1500 + 1024 capped
    assert reservation_tokens("oracle", p, o, 2048).tolist() == [124, 131, 2099, 7]


def test_buddy_rounding_is_booked_as_external_fragmentation():
    # one request of p = 100, o = 25: Pow2 reserves 132 slots, the buddy allocator holds 256
    w = make_workload(1, {"prompt": ("fixed", 100), "output": ("fixed", 25)}, max_len=2048)
    buddy = simulate(w, "pow2", capacity_tokens=4096).summary["slot_iterations"]
    first_fit = simulate(w, "pow2", capacity_tokens=4096, placement="first_fit").summary["slot_iterations"]
    assert buddy["buddy_rounding"] == 25 * (256 - 132) and first_fit["buddy_rounding"] == 0
    assert buddy["external_frag"] == buddy["buddy_rounding"]  # nobody waits: the rest is idle
    assert buddy["internal_frag"] == first_fit["internal_frag"] == 25 * (132 - 124)
    assert buddy["idle"] == 25 * (4096 - 256) and first_fit["idle"] == 25 * (4096 - 132)


def test_bad_arguments():
    w = make_workload(10, "fixed")
    with pytest.raises(ValueError, match="policy 'lifo' is not one of"):
        simulate(w, "lifo")
    with pytest.raises(ValueError, match="capacity_tokens 1000 is smaller than one max reservation"):
        simulate(w, "max", capacity_tokens=1000)
    # "fixed": oracle reserves 128 + 128 − 1 = 255 slots: first fit places them in 255 slots, a buddy
    # allocator needs a block of 256
    assert simulate(w, "oracle", capacity_tokens=255, placement="first_fit").summary["completed"] == 10
    message = r"capacity_tokens 255 is smaller than one oracle reservation \(255 tokens, 256 placed by buddy\)"
    with pytest.raises(ValueError, match=message):
        simulate(w, "oracle", capacity_tokens=255)
    with pytest.raises(ValueError, match="placement 'best_fit' is not one of buddy, first_fit"):
        simulate(w, "oracle", placement="best_fit")
    with pytest.raises(ValueError, match="longest request needs"):
        simulate(w, "paged", capacity_tokens=100)
    with pytest.raises(ValueError, match="prefix_sharing needs policy 'paged'"):
        simulate(w, "oracle", prefix_sharing=True)
    with pytest.raises(ValueError, match=r"max_running must be an integer in \[1, 65536\]"):
        simulate(w, "paged", max_running=0)
    with pytest.raises(ValueError, match=r"watermark must be a number in \[0, 1\)"):
        simulate(w, "paged", watermark=1.5)
    with pytest.raises(ValueError, match="lengths 'zipf' is not one of"):
        make_workload(10, "zipf")
    with pytest.raises(ValueError, match="lengths dict must have the keys 'prompt' and 'output'"):
        make_workload(10, {"prompt": ("fixed", 10)})
    with pytest.raises(ValueError, match="rate must be a finite number > 0"):
        make_workload(10, rate=0)


def test_capacity_from_model_and_accelerator():
    spec = load_model("llama-3-8b")
    got = capacity_tokens_for("llama-3-8b", "H100 80GB", utilization=0.9)
    budget = int(80 * 2**30 * 0.9 - weights.weights_bytes(spec, "bf16"))
    assert got == budget // memory.bytes_per_token(spec, "bf16") == budget // 131072
