"""Lesson 08's arithmetic and data: prefill and decode on the roofline (kvsim.calc.phases), the H200 dataset
(kvsim.calc.h200), numpy's matrix product, the roofline views and the lesson's exercises."""

import json
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc import h200, memory, phases, roofline
from kvsim.calc.exercises import EXERCISES
from kvsim.calc.registry import load_model
from kvsim.calc.units import InputError
from kvsim.calc.weights import param_count
from kvsim.measure.bandwidth import measure_host_matmul_throughput
from kvsim.widgets.roofline import (
    draw_batch_floors,
    draw_h200_variants,
    draw_roofline,
    draw_time_and_floors,
)

TINY = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16, "vocab_size": 10,
        "max_position_embeddings": 64, "tie_word_embeddings": False}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return load_model(path)


@pytest.fixture(scope="module")
def run():
    return h200.load_run()


# ---------------------------------------------------------------- phases


def test_weights_read_is_the_one_definition():
    llama = load_model("llama-3.1-8b")
    count = param_count(llama)
    assert phases.weights_read_bytes(llama) == (count.active - count.embedding + 4096) * 2 == 15_009_857_536
    assert phases.matmul_params(llama) == count.active - count.embedding
    gemma = load_model("gemma-3-4b")                       # tied: the table is the output head, read whole
    assert phases.weights_read_bytes(gemma, "fp32") == param_count(gemma).active * 4
    assert phases.matmul_params(gemma) == param_count(gemma).active
    with pytest.raises(InputError, match="weights dtype"):
        phases.weights_read_bytes(llama, "fp9")


def test_prefill_counts_every_causal_key(tiny):
    cost = phases.prefill_cost(tiny, 3)
    # 2 layers x 2 query heads x (4 + 4) x 2 FLOPs = 64 per key; queries 1, 2, 3 see 1 + 2 + 3 keys
    assert cost.flops == 2 * 3 * phases.matmul_params(tiny) + 64 * 6
    assert cost.read_bytes == phases.weights_read_bytes(tiny) + 3 * (2 * 2 * 1 * 4 * 2)   # the cache written once
    with pytest.raises(InputError, match="prompt_tokens"):
        phases.prefill_cost(tiny, 0)


def test_decode_batch_shares_the_weights_but_not_the_caches(tiny):
    one, four = phases.decode_cost(tiny, 5, 1), phases.decode_cost(tiny, 5, 4)
    w = phases.weights_read_bytes(tiny)
    assert one.read_bytes == w + memory.read_bytes_per_step(tiny, 5)
    assert four.read_bytes - w == 4 * (one.read_bytes - w)
    assert four.flops == pytest.approx(4 * one.flops)
    over = phases.decode_cost(tiny, np.array([0, 5]), 1)
    assert over.read_bytes.tolist() == [w, one.read_bytes] and over.intensity[1] == pytest.approx(one.intensity)


def test_llama_intensities_decode_and_prefill():
    llama = load_model("llama-3-8b")
    assert phases.decode_cost(llama, 0, 64).intensity == pytest.approx(64, rel=1e-3)    # weights: 2B FLOPs / 2 B
    assert phases.decode_cost(llama, 8192, 64).intensity == pytest.approx(14.76, abs=0.01)
    assert phases.prefill_cost(llama, 2048).intensity > 2000


def test_floors_say_which_binds():
    cost = phases.Cost(flops=100.0, read_bytes=10.0)
    memory_side = phases.floors(cost, bytes_per_s=1.0, flops_per_s=100.0, seconds=20.0)
    assert memory_side == {"bandwidth_floor_s": 10.0, "compute_floor_s": 1.0, "bound": "memory",
                           "over_bandwidth_floor": 2.0, "over_compute_floor": 20.0}
    assert phases.floors(cost, bytes_per_s=100.0, flops_per_s=1.0)["bound"] == "compute"
    with pytest.raises(InputError, match="bytes_per_s"):
        phases.floors(cost, 0, 1.0)


def test_ridge_batch_is_where_the_floors_meet():
    llama = load_model("llama-3-8b")
    bw, peak = 3.66e12, 7.5e14
    b = phases.ridge_batch(llama, 128, bw, peak)
    at = phases.decode_cost(llama, 128, 1)
    w = phases.weights_read_bytes(llama)
    assert b * at.flops / peak == pytest.approx((w + b * (at.read_bytes - w)) / bw)
    assert phases.ridge_batch(llama, 0, bw, peak) == pytest.approx(peak / bw, rel=1e-3)   # weights only: balance
    assert phases.ridge_batch(llama, 8192, bw, peak) is None                                # FLOP/B tends to 18


def _point(context, batch, read, flops, ms):
    return {"context_tokens": context, "batch": batch, "read_bytes": read, "flops": flops, "step_ms": {"kvsim": ms}}


def test_point_rows_and_the_verdict():
    rows = phases.point_rows([_point(0, 1, 1e6, 1e6, 2.0), _point(8, 2, 2e6, 8e6, 5.0)], 1e9, 1e9)
    assert [r["bound by"] for r in rows] == ["memory", "compute"]
    assert rows[1]["× bandwidth floor"] == 2.5 and rows[1]["× compute floor"] == 0.6
    assert "on both sides of the ridge (1 compute-bound)" in phases.verdict(rows)
    assert phases.verdict(rows[:1]).startswith("1 points, all left of the ridge (memory-bound)")


# ---------------------------------------------------------------- the H200 dataset


def test_the_dataset_loads_with_its_provenance(run):
    assert run.device["name"] == "NVIDIA H200" and run.meta["dtype"] == "bf16"
    assert len(run.measured_variants()) == 5 and "GQA-8, 8-bit KV (q8)" not in run.measured_variants()
    assert sum(len(run.points(v)) for v in run.measured_variants()) + len(run.batch_sweep["points"]) == 47
    text = "\n".join(h200.provenance(run))
    assert "MLX 0.32.4" in text and run.meta["kvsim_commit"] in text and "205 FLOP/B" in text
    assert run.label("MLA (DeepSeek-V3)") == "MLA (DeepSeek-V3, 4 of 61 layers)"
    assert run.label("GQA-8 (Llama 3 8B)") == "GQA-8 (Llama 3 8B)"
    with pytest.raises(ValueError, match="variant"):
        run.points("GQA-3")


def test_the_dataset_floors_are_bytes_over_its_bandwidth(run):
    for v in run.measured_variants():
        for p, row in zip(run.points(v), h200.variant_rows(run, v)):
            floor_ms = 1e3 * roofline.floor_seconds(p["read_bytes"], run.bytes_per_s)
            assert floor_ms == pytest.approx(p["floor_ms"]) and row["floor ms"] == round(floor_ms, 2)
    # the dataset counted the weights a step reads with kvsim's one definition
    assert run.variants["GQA-8 (Llama 3 8B)"]["geometry"]["weights_read_bytes"] == \
        phases.weights_read_bytes(load_model("llama-3-8b"))


def _write_run(folder, variants, drop=None):
    raw = {"meta": {"mlx": "0", "mlx_lm": "0", "python": "3", "kvsim_commit": "abc", "date": "d", "dtype": "bf16",
                    "repeats": 2},
           "device": {"name": "X", "backend": "cuda", "memory_total_bytes": 2**30},
           "calibration": {"copy_bytes_per_s": 1e9, "matmul_flops_per_s": 1e12, "machine_balance_flop_per_byte": 1e3},
           "variants": variants, "batch_sweep": {"variant": "v", "context_tokens": 8, "points": []}}
    raw.pop(drop, None)
    (folder / h200.RUN_FILE).write_text(json.dumps(raw))
    return folder


def test_comparison_is_a_geometric_mean(tmp_path):
    pts = [{"context_tokens": c, "batch": 1, "read_bytes": 1e6, "flops": 1e6,
            "step_ms": {"kvsim": k, "mlx-lm": m}} for c, k, m in ((1, 2.0, 2.0), (2, 4.0, 2.0))]
    run = h200.load_run(_write_run(tmp_path, {"v": {"geometry": {"source": "toy", "num_layers": 1}, "points": pts}}))
    (row,) = h200.comparison_rows(run)
    assert row["kvsim / mlx-lm (geo. mean)"] == round(math.sqrt(2), 3) and row["worst"] == 2.0
    assert row["kvsim / floor"] == "2.00-4.00" and row["contexts"] == "1-2"            # 1 MB at 1 GB/s = 1 ms


def test_a_broken_dataset_names_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="missing calibration"):
        h200.load_run(_write_run(tmp_path, {}, drop="calibration"))
    bad = {"v": {"geometry": {}, "points": [{"context_tokens": 1, "batch": 1}]}}
    with pytest.raises(ValueError, match="lacks read_bytes, flops, step_ms"):
        h200.load_run(_write_run(tmp_path, bad))


def test_the_quantized_probe_says_what_ran():
    rows = h200.quantized_probe_rows(h200.load_fused_check())
    fresh = [r for r in rows if "freshly" in r["product"]]
    sliced = [r for r in rows if "freshly" not in r["product"]]
    assert fresh and all(r["ran"] == "8 of 8" for r in fresh)
    assert sliced and all(r["ran"].startswith("no: ") for r in sliced)


# ---------------------------------------------------------------- measurement, views, exercises


def test_host_matmul_counts_two_n_cubed():
    t = measure_host_matmul_throughput(32, repeats=2)
    assert t.work == 2 * 32**3 and len(t.seconds) == 2 and t.rate == t.work / min(t.seconds)
    with pytest.raises(InputError, match="n must"):
        measure_host_matmul_throughput(8)


def test_roofline_marks_the_phases_and_the_ridge(run):
    fig, ax = plt.subplots()
    draw_roofline(ax, batch=64, tokens=8192, prompt_tokens=2048)
    llama = load_model("llama-3-8b")
    marks = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert marks == pytest.approx([phases.decode_cost(llama, 8192, 1).intensity,
                                   phases.decode_cost(llama, 8192, 64).intensity, phases.prefill_cost(llama, 2048).intensity])
    ridge = [ln for ln in ax.get_lines() if ln.get_marker() == "o"][0]
    assert ridge.get_xdata()[0] == pytest.approx(run.flops_per_s / run.bytes_per_s)
    assert "memory-bound" in ax.get_title() and "prefill compute-bound" in ax.get_title()
    plt.close(fig)


def test_batch_floors_show_the_sweep_only_where_it_was_measured(run):
    fig, ax = plt.subplots()
    draw_batch_floors(ax, tokens=8192)
    measured = ax.get_lines()[0]
    assert list(measured.get_xdata()) == [p["batch"] for p in run.batch_sweep["points"]]
    assert "memory-bound at any B" in ax.get_title()
    draw_batch_floors(ax, tokens=128)
    assert len(ax.get_lines()[0].get_xdata()) == 0 and "compute-bound from B = 265" in ax.get_title()
    plt.close(fig)


def test_time_and_floors_are_bytes_and_flops_over_the_rates():
    pts = [_point(t, 1, 1e6 * (1 + t), 2e6 * (1 + t), 5.0) for t in (0, 1, 2)]
    fig, ax = plt.subplots()
    draw_time_and_floors(ax, pts, bytes_per_s=1e9, flops_per_s=1e9)
    _, bandwidth, compute = ax.get_lines()[:3]
    assert bandwidth.get_ydata().tolist() == [1.0, 2.0, 3.0] and compute.get_ydata().tolist() == [2.0, 4.0, 6.0]
    plt.close(fig)


def test_the_lessons_exercise_numbers():
    assert EXERCISES["08.1"].solve().value == 15_009_857_536
    assert EXERCISES["08.2"].solve().value == pytest.approx(1e3 * (15_009_857_536 + 16 * 2**30) / 3.35e12)
    run = h200.load_run()
    assert EXERCISES["08.3"].solve().value == pytest.approx(run.flops_per_s / run.bytes_per_s, rel=1e-3)


def test_the_variant_view_highlights_one_in_the_lines_and_the_legend(run):
    fig, ax = plt.subplots()
    draw_h200_variants(ax, "GQA-8 (Llama 3 8B)")
    draw_h200_variants(ax, "MLA (DeepSeek-V3)")                     # a redraw on the same Axes
    widths = {t.get_text(): h.get_linewidth() for t, h in zip(ax.get_legend().texts, ax.get_legend().legend_handles)}
    assert widths["kvsim: MLA (DeepSeek-V3, 4 of 61 layers)"] > widths["kvsim: GQA-8 (Llama 3 8B)"]
    twin = [ln for ln in ax.get_lines() if ln.get_marker() == "x"][0]
    assert list(twin.get_ydata()) == [p["step_ms"]["mlx-lm"] for p in run.points("MLA (DeepSeek-V3)")]
    plt.close(fig)
