"""kvsim against Kwon et al. (2023): Figure 2's memory split and Figure 13a/b's running requests.

Runs (the lesson's, lesson 07): 1,000 chat-like requests (lognormal lengths with ShareGPT's means),
one arriving per iteration, on Table 1's 15,728 slots, under the paper's rules (buddy allocator, Pow2
over the output); and 20,000 Alpaca-like ("short") requests all at once, for Figure 13b's Pow2 and
Oracle counts. Both averaging windows are checked: the whole run (the paper's window) and the
iterations in which a request waited (the paper's server was full all along: Orca (Max) ran 7.00
requests on average, 7 reservations of 2048 being all that 15,728 slots hold).

Each tolerance is the gap measured on these runs (|kvsim − paper|, in points of KV memory or in
requests) plus 0.2, rounded up to half a point; the comment beside it says where the gap comes from.
"""

import pytest

from kvsim.serving import fragmentation as fr
from kvsim.serving.workload import make_workload

# Gaps shared by the three Orca rows: kvsim's lengths are a lognormal with ShareGPT's means, not the
# trace. A running request holds ~500 stored tokens on average in kvsim (Max: 22.3 % · 15,728 / 7)
# against ~460 in the paper (20.4 % · 15,728 / 7): long requests run longer, so a heavier tail
# weighs more. Token states and reservation come out higher; Max's internal fragmentation lower by
# as much (its reservation is fixed at 2048).
TOLERANCE = {
    "while waiting": {
        "max": {"token_states": 2.5, "reservation": 3.0, "internal_frag": 4.5,   # gaps 1.9, 2.3, 4.1
                # 0.05: 7 · 2048 of 15,728 slots held whenever a request waits; 8.85 % left, as published
                "external_frag_and_others": 0.5},
        "pow2": {"token_states": 5.0, "reservation": 4.5, "internal_frag": 0.5,  # gaps 4.6, 4.1, 0.2
                 # 8.8 points lower: kvsim's buddy rounding holds 23.9 % and holes 8.9 %. How much a
                 # block rounds depends on where p + 2^⌈log2 o⌉ falls between two powers of two: the
                 # trace's lengths, which kvsim does not have
                 "external_frag_and_others": 9.0},
        "oracle": {"token_states": 1.0, "reservation": 2.5, "internal_frag": 0.0,  # gaps 0.7, 2.0, 0 by rule
                   "external_frag_and_others": 3.0},                               # gap 2.7
        "paged": {"token_states": 1.5},                                            # gap 0.9
    },
    "whole run": {
        # the same gaps; the start and the drain add idle memory (external & others)
        "max": {"token_states": 2.5, "reservation": 2.5, "internal_frag": 5.0,     # gaps 1.8, 2.2, 4.6
                "external_frag_and_others": 1.0},                                  # gap 0.7
        "pow2": {"token_states": 4.5, "reservation": 4.0, "internal_frag": 0.5,    # gaps 4.2, 3.7, 0.1
                 "external_frag_and_others": 8.5},                                 # gap 7.9
        "oracle": {"token_states": 0.5, "reservation": 1.5, "internal_frag": 0.0,  # gaps 0.2, 1.3, 0
                   "external_frag_and_others": 1.5},                               # gap 1.1
        # 5.3 points lower: the last of 1,000 requests drain with nobody waiting, their memory idle
        "paged": {"token_states": 5.5},
    },
}
RUNNING_TOLERANCE = {  # requests
    "sharegpt": {
        # exactly 7 (7 · 2048 slots) whenever a request waits; gaps 0.02, 1.4 (kvsim's requests hold
        # more slots each, so fewer fit), 0.2
        "while waiting": {"max": 0.0, "pow2": 0.5, "oracle": 2.0, "paged": 0.5},
        "whole run": {"max": 0.5, "pow2": 0.5, "oracle": 2.0, "paged": 2.5},  # 0.06, 0.15, 1.75, 2.0 (drain)
    },
    # 20,000 requests: gaps 0.26, 2.2 while waiting; 0.12, 0.9 over the whole run
    "alpaca": {"while waiting": {"pow2": 0.5, "oracle": 2.5}, "whole run": {"pow2": 0.5, "oracle": 1.5}},
}


@pytest.fixture(scope="module")
def sharegpt():
    w = make_workload(1000, "chat", rate=1.0, max_len=fr.KWON_MAX_LEN, seed=0)
    return fr.compare_policies(w, fr.KWON_CAPACITY_TOKENS)


@pytest.fixture(scope="module")
def alpaca():
    w = make_workload(20000, "short", max_len=fr.KWON_MAX_LEN, seed=0)
    return fr.compare_policies(w, fr.KWON_CAPACITY_TOKENS, policies=("pow2", "oracle"))


@pytest.mark.parametrize("window", fr.WINDOWS)
def test_figure2_split_is_within_the_earned_tolerance(sharegpt, window):
    for policy, tolerance in TOLERANCE[window].items():
        split, paper = fr.figure2_split(sharegpt[policy], window), fr.KWON_FIGURE2[policy]
        for part, points in tolerance.items():
            assert abs(split[part] - paper[part]) <= points, (policy, part, split[part], paper[part])


@pytest.mark.parametrize("window", fr.WINDOWS)
def test_figure13_running_requests_are_within_the_earned_tolerance(sharegpt, alpaca, window):
    for dataset, results in (("sharegpt", sharegpt), ("alpaca", alpaca)):
        for row in fr.running_rows(results, fr.KWON_FIGURE13[dataset]):
            tolerance = RUNNING_TOLERANCE[dataset][window][row["policy"]]
            assert abs(row[f"kvsim, {window}"] - row["Kwon et al."]) <= tolerance, (dataset, row)


def test_windows_differ_by_the_start_and_the_drain_only(sharegpt):
    # the whole run adds iterations with nobody waiting: memory there is idle or held by fewer requests
    for r in sharegpt.values():
        s = r.summary
        assert 0 < s["saturated_iterations"] < s["iterations"]
        assert s["share"]["idle"] > 0 == s["share_saturated"]["idle"]
        assert s["mean_running"] <= s["mean_running_saturated"]
    assert sharegpt["max"].summary["mean_running_saturated"] == 7.0  # 7 · 2048 ≤ 15,728 < 8 · 2048


def test_buddy_rounding_is_most_of_pow2_and_oracle_others(sharegpt):
    # §6.1: the buddy allocator rounds every chunk up to a power of two, booked as "others"
    for policy in ("pow2", "oracle"):
        s = sharegpt[policy].summary
        assert 0.5 * s["share_saturated"]["external_frag"] < s["buddy_rounding_share_saturated"] \
            < s["share_saturated"]["external_frag"]
    assert sharegpt["max"].summary["buddy_rounding_share"] == 0  # 2048 is a power of two
