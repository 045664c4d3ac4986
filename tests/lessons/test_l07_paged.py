"""Lesson 07 support: block tables read from a real allocator, sharing savings, policy comparison, the views.
"""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc import weights
from kvsim.calc.config import LayerSpec
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.lessons import VIEWS
from kvsim.lessons.l07_paged.data import (
    ACCELERATORS,
    CONTEXTS,
    DECODE,
    MODELS,
    PREEMPTED,
    PREFILL,
    capacity_rows,
    capacity_table,
    plan_tp,
    preemption_story,
    sharing_savings,
    sharing_scenario,
    snapshot,
    to_markdown,
)
from kvsim.lessons.l07_paged.measure import paged_vs_dense, summarize
from kvsim.lessons.l07_paged.plots import (
    plot_block_tables,
    plot_policy_split,
    plot_split_over_time,
    sequence_colors,
)
from kvsim.lessons.l07_paged.views import draw_block_tables, draw_serving
from kvsim.serving import fragmentation, ledger, sim, workload
from kvsim.serving.block_pool import cdiv
from kvsim.serving.blocks import BlockAllocator


matplotlib.use("Agg")


def test_snapshot_copies_the_allocator_state():
    alloc = BlockAllocator(6, 4)
    alloc.add_sequence("x", list(range(10)))
    snap = snapshot(alloc, "one", names={"x": "X"})
    assert snap.tables == {"X": tuple(alloc.block_table("x"))} and snap.tokens == {"X": 10}
    assert [snap.fill("X", i) for i in range(3)] == [4, 4, 2]
    assert [snap.state(b) for b in range(6)].count("used") == 3
    alloc.append("x", 1)  # later changes do not reach the snapshot
    assert snap.tokens["X"] == 10


@pytest.mark.parametrize("block_size", range(2, 9))
def test_sharing_scenario_shares_prefix_and_copies_on_write(block_size):
    steps = sharing_scenario(block_size=block_size)
    assert len(steps) == 5
    a, b = steps[1].tables["A"], steps[1].tables["B"]
    shared = 8 // block_size  # full blocks of the 8-token system prompt
    assert a[:shared] == b[:shared] and (len(a) <= shared or a[shared] != b[shared])
    assert all(steps[1].ref_count[p] == 2 for p in a[:shared])
    fork = steps[2]
    assert fork.tables["A, sample 2"] == fork.tables["A"]
    cow = steps[3]
    (src, dst), = cow.copies  # exactly one block copied: the shared, partially filled last block of A
    assert src == fork.tables["A"][-1] and dst == cow.tables["A"][-1] and src in cow.tables["A, sample 2"]
    assert sum(cow.ref_count) == sum(len([p for p in t if p >= 0]) for t in cow.tables.values())
    end = steps[4]
    assert "B" not in end.tables
    assert all(end.state(p) in ("free", "cached") for p in set(b) - set(end.tables["A"]) - set(end.tables["A, sample 2"]))


def test_sharing_scenario_rejects_bad_input():
    with pytest.raises(ValueError, match="system_tokens"):
        sharing_scenario(system_tokens=0)


@pytest.mark.parametrize("n,p,u,bs", [(100, 500, 60, 16), (10, 8, 3, 4), (3, 15, 1, 16), (5, 32, 10, 16)])
def test_sharing_savings_match_the_block_count(n, p, u, bs):
    held = sharing_savings(n, p, u, bs)
    assert held["without sharing"] == n * cdiv(p + u, bs)
    full = min(p // bs, (p + u - 1) // bs)
    assert held["with sharing"] == full + n * (cdiv(p + u, bs) - full)


def test_kwon_setup_capacity():
    # Table 1: OPT-13B on an A100 40GB keeps 12 GB for the KV cache and "15.7K" slots of 800 KiB:
    # 12 GiB / 819,200 B = 15,728 (decimal 12e9 B would give 14,648, not 15.7K)
    assert fragmentation.OPT13B_TOKEN_BYTES == 800 * 2**10
    assert fragmentation.kwon_setup_capacity_tokens() == fragmentation.KWON_CAPACITY_TOKENS == 15_728
    assert fragmentation.kwon_setup_capacity_tokens(12 * 10**9) == 14_648
    with pytest.raises(ValueError, match="kv_bytes must be a positive integer"):
        fragmentation.kwon_setup_capacity_tokens(kv_bytes=0)


def test_max_others_pins_the_slot_count():
    # Figure 2's 8.9 % "external fragmentation & others" of Orca (Max) is what 15,728 slots leave
    # beside 7 reservations of 2048: 1 − 7·2048/15,728 = 8.85 %
    others = 100 * (1 - 7 * fragmentation.KWON_MAX_LEN / fragmentation.KWON_CAPACITY_TOKENS)
    assert round(others, 1) == fragmentation.KWON_FIGURE2["max"]["external_frag_and_others"]


def test_policies_order_like_kwon_figure2():
    w = workload.make_workload(300, "chat", rate=1.0, seed=0)
    res = fragmentation.compare_policies(w, fragmentation.KWON_CAPACITY_TOKENS)
    rows = fragmentation.figure2_rows(res)
    assert [(r["policy"], r["source"]) for r in rows[:3]] == \
        [("max", "Kwon et al."), ("max", "kvsim, whole run"), ("max", "kvsim, while waiting")]
    kvsim = {(r["policy"], r["source"]): r for r in rows}
    for window in fragmentation.WINDOWS:
        share = [kvsim[p, f"kvsim, {window}"]["token states %"] for p in ("max", "pow2", "oracle", "paged")]
        assert share == sorted(share)
        assert kvsim["oracle", f"kvsim, {window}"]["internal frag %"] == 0
    assert kvsim["paged", "kvsim, while waiting"]["token states %"] > 95  # the run's drain is idle
    assert kvsim["paged", "kvsim, whole run"]["token states %"] < 90      # memory: 300 requests are few
    for r in rows:
        parts = [r[c] for c in fragmentation.PART_COLUMNS.values()]
        if None not in parts:  # the paper's rows (rounded) and kvsim's add up to 100 %
            assert abs(sum(parts) - 100) < 0.3
        if r["source"] == "Kwon et al.":
            assert r["token states %"] == fragmentation.KWON_FIGURE2[r["policy"]]["token_states"]
            assert r["mean running"] == fragmentation.KWON_FIGURE13["sharegpt"][r["policy"]]
    splits = fragmentation.policy_splits(res, "while waiting")
    assert list(splits) == [fragmentation.POLICY_LABELS[p] for p in sim.POLICIES]
    with pytest.raises(ValueError, match="window 'busy' is not one of whole run, while waiting"):
        fragmentation.policy_splits(res, "busy")


def test_split_over_time_conserves_slot_iterations():
    w = workload.make_workload(80, "chat", rate=0.05, seed=1)
    res = sim.simulate(w, "paged", capacity_tokens=6000)
    t, shares = fragmentation.split_over_time(res, bins=37)
    total = sum(shares.values())
    assert len(t) == 37 and np.allclose(total, 1.0)
    width = res.summary["iterations"] / 37
    for part in ledger.SPLIT:
        assert np.isclose(shares[part].sum() * width * 6000, res.summary["slot_iterations"][part])


def test_draw_functions_on_fresh_axes():
    fig, ax = plt.subplots()
    steps = sharing_scenario()
    plot_block_tables(ax, steps[3], colors=sequence_colors(steps))
    assert len(ax.get_lines()) == sum(len(t) for t in steps[3].tables.values())
    draw_block_tables(ax, step=0, block_size=4)
    assert "step 0" in ax.get_title()
    plot_policy_split(ax, {"a": {"token_states": 0.5, "internal_frag": 0.5}}, reference={"a": 40.0})
    assert len(ax.get_lines()) == 1
    plot_split_over_time(ax, [0, 1, 2], {"token_states": [0.1, 0.5, 0.2], "idle": [0.9, 0.5, 0.8]})
    assert len(ax.get_lines()) == 2
    draw_serving(ax, policy="oracle", block_size=16, rate=0.1)
    assert "oracle" in ax.get_title()
    plt.close(fig)


def test_views_are_registered():
    assert {"block_tables", "serving"} <= set(VIEWS)


@pytest.mark.parametrize("layer", [
    LayerSpec(kind="full", num_key_value_heads=2, head_dim=16),
    LayerSpec(kind="sliding", num_key_value_heads=2, head_dim=16, sliding_window=9),
    LayerSpec(kind="chunked", num_key_value_heads=1, head_dim=16, attention_chunk_size=6),
], ids=lambda layer: layer.kind)
def test_paged_attention_equals_dense_every_step(layer):
    rows = paged_vs_dense(layer, prompt_tokens=13, decode_steps=20, block_size=4, seed=1)
    s = summarize(rows)
    assert s["steps"] == 21 and s["tokens"] == 33
    assert s["max |paged - dense|"] < 1e-6
    assert [r["tokens"] for r in rows] == list(range(13, 34))
    if layer.kind == "full":
        assert s["blocks at end"] == cdiv(33, 4) and s["paged nbytes at end"] == 9 * 4 * 2 * 32 * 4
    else:  # window layers give blocks back: at most ⌈W / bs⌉ + 1 stay after a decode step
        assert s["blocks at end"] <= cdiv(layer.window_tokens, 4) + 1 < cdiv(33, 4)


def test_paged_vs_dense_rejects_bad_input():
    with pytest.raises(ValueError, match="kind"):
        paged_vs_dense(LayerSpec(kind="mla", kv_lora_rank=32, qk_rope_head_dim=16))
    with pytest.raises(ValueError, match="prompt_tokens"):
        paged_vs_dense(LayerSpec(kind="full", num_key_value_heads=1, head_dim=8), prompt_tokens=0)


@pytest.fixture(scope="module")
def table():
    return capacity_table()


def test_every_model_accelerator_and_context_has_a_row(table):
    assert len(table) == len(MODELS) * len(ACCELERATORS) * len(CONTEXTS)
    assert {r["model"] for r in table} == set(MODELS)
    assert {r["context_tokens"] for r in table} == set(CONTEXTS)


def test_dense_column_is_budget_over_reserved_bytes():
    spec = load_model("llama-3-8b")
    row = capacity_rows("llama-3-8b", "H100 80GB", contexts=(8192,))[0]
    budget = int(80 * 2**30 * 0.9 - weights.weights_bytes(spec, "bf16"))
    assert row["tp"] == 1
    assert row["dense"] == budget // (8192 * 131072)  # 2·32 layers·8 heads·128·2 B per token
    assert row["quantized"] == budget // (8192 * 131072 * 136 // 256)  # q8: 136 B per 128-vector


def test_mla_latent_is_replicated_across_ranks():
    row = capacity_rows("deepseek-v3", "H200 141GB", contexts=(4096,))[0]
    spec = load_model("deepseek-v3")
    w = weights.weights_bytes(spec, "fp8")
    assert row["tp"] == 8 and row["weights_dtype"] == "fp8"
    budget = int(get_accelerator("H200 141GB").memory_bytes * 0.9 - w / 8)
    assert row["dense"] == budget // (4096 * 70272)  # every rank stores the whole latent


def test_tensor_parallel_plan_for_llama_3_70b():
    w = weights.weights_bytes(load_model("llama-3-70b"), "bf16")
    gpus = ("A100 40GB", "A100 80GB", "H100 80GB", "H200 141GB")
    plans = {a: plan_tp(w, get_accelerator(a), 0.9) for a in gpus}
    assert plans == {"A100 40GB": 8, "A100 80GB": 4, "H100 80GB": 4, "H200 141GB": 2}
    assert plan_tp(w, get_accelerator("M3 Ultra 512GB"), 0.75) == 1


def test_columns_are_ordered_as_paging_and_quantization_predict(table):
    for r in table:
        assert r["paged"] >= r["dense"], r  # 16-token blocks never reserve more than 256-token steps
        assert r["paged_chat"] >= r["paged"], r  # real requests are shorter than the maximum
        assert r["quantized"] >= r["paged"], r
    long = [r for r in table if r["context_tokens"] == 131072 and r["dense"] > 0]
    assert all(r["paged_chat"] > 20 * r["dense"] for r in long if r["model"] != "gemma-3-27b")


def test_rows_explain_zero_budgets_and_long_contexts(table):
    mac = next(r for r in table if r["model"] == "deepseek-v3" and r["accelerator"] == "M4 Pro 48GB")
    assert mac["dense"] == 0 and "leave no KV budget" in mac["note"]
    llama = next(r for r in table if r["model"] == "llama-3-8b" and r["context_tokens"] == 32768)
    assert "beyond the model's 8,192 positions" in llama["note"]


def test_markdown_rendering():
    rows = capacity_rows("gemma-3-27b", "M4 Max 128GB", contexts=(4096, 131072))
    md = to_markdown(rows).splitlines()
    assert md[0].startswith("| model | accelerator | tp |")
    assert md[1].startswith("|---|---|---:|")
    assert len(md) == 4 and "131,072" in md[3]
    assert to_markdown([]) == "(no rows)"


def test_preemption_events_can_outnumber_requests():
    s = preemption_story(((0, 6, 10),) * 4, num_blocks=11, block_size=4)
    assert s.events == sum(s.preempted) == 5 > 4 and max(s.preempted) >= 2
    assert (s.states == PREEMPTED).sum() == s.events
    assert s.blocks_used.max() <= 11


@pytest.mark.parametrize("blocks", [7, 9, 11, 16, 40])
def test_every_request_produces_exactly_its_tokens(blocks):
    # the first prefill and every readmission produce one token, every decode step one; a preemption none
    s = preemption_story(((0, 6, 10), (0, 6, 10), (1, 6, 10), (3, 6, 10)), num_blocks=blocks, block_size=4,
                         max_steps=400)
    assert s.states.shape[1] < 400
    assert (((s.states == DECODE) | (s.states == PREFILL)).sum(axis=1) == 10).all()
    assert ((s.states == PREFILL).sum(axis=1) == 1 + np.array(s.preempted)).all()


def test_plenty_of_blocks_means_no_preemption():
    s = preemption_story(((0, 6, 10),) * 4, num_blocks=40, block_size=4)
    assert s.events == 0 and s.states.shape[1] == 10


def test_tp_bytes_series_split_gqa_heads_and_copy_the_mla_latent():
    from kvsim.calc import memory
    from kvsim.lessons.l07_paged.data import TPS, tp_bytes_series
    from kvsim.lessons.l07_paged.views import draw_tp_bytes
    s = tp_bytes_series(("llama-3-70b", "deepseek-v3"), "bf16")
    gqa, mla = s["llama-3-70b (8 KV heads)"], s["deepseek-v3 (MLA latent)"]
    assert gqa[0] == memory.bytes_per_token(load_model("llama-3-70b")) == 327_680 and gqa[TPS.index(8)] == 327_680 // 8
    assert gqa[TPS.index(16)] == gqa[TPS.index(8)]  # one KV head per GPU at most: replicated beyond 8
    assert len(set(mla)) == 1  # the latent is copied on every GPU
    fig, ax = plt.subplots()
    draw_tp_bytes(ax, "llama-3-70b", "deepseek-v3")
    assert ax.get_title() == "KV per token on EACH GPU (bf16): split heads, or a copy"
    plt.close(fig)


def test_serving_title_and_curves_are_the_data_numbers():
    from kvsim.lessons.l07_paged.data import VIEW_REQUESTS, serving_numbers
    d = serving_numbers("paged", 16, 0.1)
    s = d["summary"]
    assert s["num_requests"] == VIEW_REQUESTS and d["policy_label"] == "blocks of 16"
    assert d["token_states_percent"] == 100 * s["share"]["token_states"]
    fig, ax = plt.subplots()
    draw_serving(ax, policy="paged", block_size=16, rate=0.1)
    assert ax.get_title() == (
        f"paged (blocks of 16), 0.1 requests/iteration: {d['token_states_percent']:.1f} % of KV memory "
        f"holds tokens\n{s['num_requests']} requests in {s['iterations']:,} iterations, "
        f"{s['mean_running']:.1f} running on average, {s['preemptions']} preemptions")
    plt.close(fig)


def test_serving_view_default_rate_shows_the_policy_effect():
    """At the view's default (saturated) rate the policies differ; at a low rate every policy holds the same."""
    import inspect

    from kvsim.lessons.l07_paged.data import serving_numbers
    from kvsim.lessons.l07_paged.views import SATURATED_RATE, serving_view
    assert inspect.signature(serving_view).parameters["rate"].default == SATURATED_RATE
    share = {p: serving_numbers(p, 16, SATURATED_RATE)["token_states_percent"] for p in ("max", "oracle", "paged")}
    assert share["paged"] > 1.5 * share["oracle"] > 1.5 * share["max"]
    idle = {p: serving_numbers(p, 16, 0.01)["token_states_percent"] for p in ("max", "paged")}
    assert idle["max"] == idle["paged"]


def test_exercise_07_4_prediction_is_what_the_real_paged_cache_holds():
    from kvsim.calc import memory
    from kvsim.calc.registry import load_model
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l07_paged.measure import paged_vs_dense

    layer = load_model("llama-3-8b").layers[0]
    last = paged_vs_dense(layer, prompt_tokens=100, decode_steps=50, block_size=16)[-1]
    assert last["paged nbytes"] == EXERCISES["07.4"].solve().value == 10 * 16 * memory.layer_token_bytes(layer, "float32")
    assert last["paged blocks held"] == 10 and last["dense nbytes"] > last["paged nbytes"]


def test_block_table_and_story_numbers_worked_by_hand():
    from kvsim.lessons.l07_paged.data import last_step, scenario_step, sharing_scenario, story_requests
    from kvsim.lessons.l07_paged.views import block_table_view, preemption_view
    steps = sharing_scenario(block_size=4)
    assert len(steps) == 5 and last_step(steps) == 4  # five snapshots, numbered 0..4
    assert scenario_step(steps, 2) is steps[2] and scenario_step(steps, 9) is steps[4]  # past the end: the last
    assert story_requests(10) == ((0, 6, 10), (0, 6, 10), (0, 6, 10), (0, 6, 10))
    assert story_requests(4, requests=2) == ((0, 6, 4), (0, 6, 4))
    view = block_table_view(step=3)
    assert view.controls["step"].max == 4
    assert view.ax.get_title() == f"step 3: {steps[3].label} (block size 4)"
    plt.close(view.figure)
    # 4 requests of 6 + 10 tokens on 11 blocks of 4: 5 preemption events (test_preemption_events_can_outnumber...)
    view = preemption_view(num_blocks=11, output_tokens=10)
    assert view.ax.get_title() == "4 requests, 5 preemption events (the allocator's count) on 11 blocks of 4"
    view.controls["num_blocks"].value = 20  # 4 × ⌈16 / 4⌉ = 16 blocks cover every request: none preempted
    assert view.ax.get_title() == "4 requests, 0 preemption events (the allocator's count) on 20 blocks of 4"
    plt.close(view.figure)
