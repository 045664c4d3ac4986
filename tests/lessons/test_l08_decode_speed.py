"""Lesson 08 (decode is memory-bound): caches filled without a prefill, measured step times, the bandwidth floor,
stored vs read, the techniques table, the H200 dataset and the roofline views; "fits" from the bytes held."""

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.cache import RecurrentStateCache
from kvsim.calc import memory, phases, roofline
from kvsim.calc.capacity import held_bytes
from kvsim.calc.config import LayerSpec
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model, model_names
from kvsim.calc.units import format_bytes
from kvsim.calc.weights import param_count, weights_bytes
from kvsim.lessons.exercises import EXERCISES
from kvsim.lessons.l08_decode_speed import data as h200
from kvsim.lessons.l08_decode_speed.data import (
    decode_speed_limit,
    cache_read_intensity,
    dsa_indexer_key_bytes,
    nsa_read_tokens,
    sparse_bytes,
    speed_floor,
    stored_vs_read,
    technique_table,
    weight_read_intensity,
)
from kvsim.lessons.l08_decode_speed.views import (
    SPEED_VIEW_KV_DTYPES,
    draw_batch_floors,
    draw_decode_speed_limit,
    draw_h200_variants,
    draw_roofline,
    draw_step_breakdown,
    draw_stored_vs_read,
    draw_time_and_floors,
)
from kvsim.measure.step_time import fill_caches, model_weights_read_bytes


@pytest.mark.parametrize("kind", ["gqa", "sliding", "mla", "jamba"])
def test_fill_then_step_holds_what_the_calculator_says(toys, kind):
    model = toys[kind]
    caches = model.make_caches()
    fill_caches(model, caches, 20)
    assert all(c.offset == 20 for c in caches)
    held = sum(c.used_bytes for c in caches if not isinstance(c, RecurrentStateCache))
    assert held == memory.kv_bytes(model.spec, 20, kv_dtype="fp32")
    import mlx.core as mx
    logits = model(mx.array([[1]]), caches)                # a decode step runs on the filled caches
    assert logits.shape == (1, 1, model.spec.vocab_size) and all(c.offset == 21 for c in caches)


def test_fill_rejects_negative_tokens(toys):
    with pytest.raises(ValueError, match="tokens"):
        fill_caches(toys["gqa"], toys["gqa"].make_caches(), -1)


def test_weights_read_skip_the_embedding_table_but_one_row(toys):
    m = toys["gqa"]
    hidden, vocab = m.spec.hidden_size, m.spec.vocab_size
    assert model_weights_read_bytes(m) == m.weight_bytes - (vocab - 1) * hidden * 4


def test_stored_vs_read_dense_reads_what_it_stores():
    t, stored, read = stored_vs_read("deepseek-v3", 131_072, points=5)
    dense = "dense / FlashAttention"
    assert np.array_equal(stored[dense], read[dense])
    assert np.array_equal(stored["NSA"], stored[dense]) and read["NSA"][-1] < read[dense][-1]
    assert stored["DSA"][-1] > stored[dense][-1] and read["DSA"][-1] < read[dense][-1]
    fig, ax = plt.subplots()
    draw_stored_vs_read(ax)
    lines = ax.get_lines()                                 # curves that coincide are drawn once
    assert len(lines) == 4 == len(ax.get_legend().texts)
    assert all(not np.array_equal(a.get_ydata(), b.get_ydata()) for i, a in enumerate(lines) for b in lines[i + 1:])
    assert lines[0].get_label() == f"stored: {dense}, NSA; read per step: {dense}"
    assert [ln.get_linestyle() for ln in lines] == ["-", "-", "--", "--"]
    plt.close(fig)


def test_speed_floor_is_bytes_over_bandwidth():
    acc = get_accelerator("H100 80GB")
    t, w_s, step_s = speed_floor("llama-3.1-8b", "H100 80GB", batch=1, tokens=8192, points=3)
    from kvsim.calc.registry import load_model
    spec = load_model("llama-3.1-8b")
    count = param_count(spec)                              # read: all but the input table, plus one row
    w = (count.active - count.embedding + spec.hidden_size) * 2
    assert w / 1e9 == pytest.approx(15.01, abs=0.005)      # not the 16.06 GB of all active parameters
    assert w_s == pytest.approx(w / acc.memory_bandwidth_bytes_per_s)
    assert step_s[-1] == pytest.approx((w + 2**30) / acc.memory_bandwidth_bytes_per_s)   # 8K tokens = 1 GiB
    _, _, batched = speed_floor("llama-3.1-8b", "H100 80GB", batch=4, tokens=8192, points=3)
    assert batched[-1] - w_s == pytest.approx(4 * (step_s[-1] - w_s))


@pytest.mark.parametrize("model", model_names())
def test_speed_limit_draws_for_every_model_and_dtype(model):
    fig, ax = plt.subplots()
    for dtype in SPEED_VIEW_KV_DTYPES:
        draw_decode_speed_limit(ax, model=model, kv_dtype=dtype, tokens=4096)
        assert ax.get_lines()
    plt.close(fig)


def test_speed_limit_says_when_the_batch_does_not_fit():
    fig, ax = plt.subplots()
    draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, tokens=131_072)
    assert "does not fit" not in ax.get_title()
    draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=16, tokens=131_072)
    assert ax.get_title().endswith("does not fit)")        # 16 GB weights + 16 x 16 GiB of KV > 80 GiB
    plt.close(fig)


@pytest.fixture(scope="module")
def run():
    return h200.load_run()


def _point(context, batch, read, flops, ms):
    return {"context_tokens": context, "batch": batch, "read_bytes": read, "flops": flops, "step_ms": {"kvsim": ms}}


def test_point_rows_and_the_verdict():
    rows = phases.point_rows([_point(0, 1, 1e6, 1e6, 2.0), _point(8, 2, 2e6, 8e6, 5.0)], 1e9, 1e9)
    assert [r["bound by"] for r in rows] == ["memory", "compute"]
    assert rows[1]["× bandwidth floor"] == 2.5 and rows[1]["× compute floor"] == 0.6
    assert "on both sides of the ridge (1 compute-bound)" in phases.roofline_verdict(rows)
    assert phases.roofline_verdict(rows[:1]).startswith("1 points, all left of the ridge (memory-bound)")


def test_the_dataset_loads_with_its_provenance(run):
    assert run.device["name"] == "NVIDIA H200" and run.meta["dtype"] == "bf16"
    assert len(run.measured_variants()) == 5 and "GQA-8, 8-bit KV (q8)" not in run.measured_variants()
    assert sum(len(run.points(v)) for v in run.measured_variants()) + len(run.batch_sweep["points"]) == 47
    text = "\n".join(h200.provenance(run))
    balance = run.calibration["machine_balance_flop_per_byte"]
    assert balance == pytest.approx(run.flops_per_s / run.bytes_per_s)
    assert "MLX 0.32.4" in text and run.meta["kvsim_commit"] in text and f"{balance:.0f} FLOP/B" in text
    assert run.label("MLA (DeepSeek-V3)") == "MLA (DeepSeek-V3, 4 of 61 layers)"
    assert run.label("GQA-8 (Llama 3 8B)") == "GQA-8 (Llama 3 8B)"
    with pytest.raises(ValueError, match="variant"):
        run.points("GQA-3")


def test_the_dataset_floors_are_bytes_over_its_bandwidth(run):
    for v in run.measured_variants():
        for p, row in zip(run.points(v), h200.decode_point_rows(run, v)):
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


ROOT = Path(__file__).resolve().parents[2]


def test_the_dataset_is_the_benchmark_results_merged():
    """data/h200/roofline_cuda.json is what benchmarks/refresh_h200_dataset.py makes of the results files."""
    results, folder = ROOT / "benchmarks" / "results", ROOT / "data" / "h200"
    run3 = "repeats/roofline_cuda_run3_53938c4.json"
    merged = h200.dataset_from_results(json.loads((results / "roofline_cuda.json").read_text()),
                                       json.loads((folder / run3).read_text()), run3)
    assert json.loads((folder / h200.RUN_FILE).read_text()) == merged
    assert json.loads((folder / h200.BREAKDOWN_FILE).read_text()) == \
        json.loads((results / "step_breakdown_cuda.json").read_text())
    run = h200.load_run()
    one = run.batch_sweep_one_tensor
    assert one["source"]["kvsim_commit"] == "53938c4" and [p["batch"] for p in one["points"]] == \
        [p["batch"] for p in run.batch_sweep["points"]] == [1, 2, 4, 8, 16, 32, 64]
    assert all("kvsim-compiled" in p["step_ms"] for v in run.measured_variants() for p in run.points(v))
    with pytest.raises(ValueError, match="one_tensor_run: missing batch_sweep"):
        h200.dataset_from_results(merged, {k: v for k, v in merged.items() if k != "batch_sweep"}, run3)


@pytest.mark.parametrize("name", [h200.BREAKDOWN_FILE, "repeats/step_breakdown_cuda_repeat.json"])
def test_the_step_breakdown_sums_to_the_measured_step(name):
    b = h200.load_breakdown(name=name)
    llama, bw = load_model("llama-3-8b"), b["copy_bytes_per_s"]
    assert b["geometry"]["weights_read_bytes"] == phases.weights_read_bytes(llama)
    for p in b["points"]:
        s = h200.step_segments(p)
        parts = s["segments"]
        assert list(parts) == list(h200.SEGMENTS) and all(v >= 0 for v in parts.values())
        assert sum(parts.values()) == pytest.approx(p["ms"]["step_eager"], rel=1e-12)
        # the floors are bytes over the bandwidth measured in the same process
        assert parts["weights' floor"] == pytest.approx(1e3 * phases.weights_read_bytes(llama) / bw)
        held = p["context_tokens"] + 2 + 2 * b["meta"]["repeats"]          # the tokens the timed steps read
        assert parts["cache's floor"] == pytest.approx(1e3 * memory.read_bytes_per_step(llama, held) / bw)
        assert parts["launch and host overhead"] == max(0.0, p["ms"]["step_eager"] - p["ms"]["step_compiled"])
        for k, v in s["clipped"].items():                                   # noise below zero: drawn as 0
            assert v < 0 and parts[k] == 0.0
    rows = h200.breakdown_rows(b)
    assert [r["context"] for r in rows] == [1024, 8192, 32768, 131072]


def test_a_negative_part_is_clipped_and_the_rest_absorbs_it():
    p = h200.load_breakdown()["points"][0]
    slower = json.loads(json.dumps(p))
    slower["ms"]["step_compiled"] = slower["ms"]["step_eager"] + 0.5          # compiled slower: no overhead saved
    s = h200.step_segments(slower)
    assert s["segments"]["launch and host overhead"] == 0.0 and s["clipped"]["launch and host overhead"] == -0.5
    assert sum(s["segments"].values()) == pytest.approx(slower["ms"]["step_eager"])
    broken = json.loads(json.dumps(p))
    broken["ms"]["step_eager"] = 1.0                                          # below its own floors
    with pytest.raises(ValueError, match="shorter than its floors"):
        h200.step_segments(broken)


def test_the_breakdown_bars_are_the_segments():
    b = h200.load_breakdown()
    fig, ax = plt.subplots()
    draw_step_breakdown(ax, b)
    bars = [r for r in ax.patches]
    n = len(b["points"])
    assert len(bars) == n * len(h200.SEGMENTS)
    tops = [max(r.get_y() + r.get_height() for r in bars[i::n]) for i in range(n)]
    assert tops == pytest.approx([p["ms"]["step_eager"] for p in b["points"]])
    assert [t.get_text() for t in ax.get_legend().texts][:5] == list(h200.SEGMENTS)[::-1]
    plt.close(fig)


def test_batch_sweep_rows_use_each_runs_own_bandwidth(run):
    rows = h200.batch_sweep_rows(run)
    one_bw = run.batch_sweep_one_tensor["source"]["copy_bytes_per_s"]
    for row, p, q in zip(rows, run.batch_sweep["points"], run.batch_sweep_one_tensor["points"]):
        assert row["kvsim / floor"] == round(p["step_ms"]["kvsim"] / (1e3 * p["read_bytes"] / run.bytes_per_s), 2)
        assert row["one tensor: kvsim / floor"] == round(q["step_ms"]["kvsim"] / (1e3 * q["read_bytes"] / one_bw), 2)


def test_quantized_kernel_rows_name_what_ran_and_what_has_no_kernel(run):
    rows = h200.quantized_kernel_rows(run)
    assert rows[0]["attention of one layer"] == "dense, bf16" and rows[0]["32K × bf16"] == rows[0]["128K × bf16"] == 1.0
    by_way = {r["attention of one layer"]: r for r in rows}
    k = run.quantized_kernels[1]
    assert by_way["dequantize q4 g64"]["128K ms"] == round(k["step_ms"]["dequantize q4 g64"], 3)
    assert [w for w, r in by_way.items() if r["32K ms"] == "no kernel"] == list(run.quantized_kernels[0]["errors"])


def test_the_quantized_probe_says_what_ran():
    rows = h200.quantized_probe_rows(h200.load_fused_check())
    fresh = [r for r in rows if "freshly" in r["product"]]
    sliced = [r for r in rows if "freshly" not in r["product"]]
    assert fresh and all(r["ran"] == "8 of 8" for r in fresh)
    assert sliced and all(r["ran"].startswith("no: ") for r in sliced)


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
    cross = phases.ridge_batch(load_model("llama-3-8b"), 128, run.bytes_per_s, run.flops_per_s)
    assert len(ax.get_lines()[0].get_xdata()) == 0 and f"compute-bound from B = {cross:,.0f}" in ax.get_title()
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
    assert EXERCISES["08.3"].solve().value == math.ceil(run.flops_per_s / run.bytes_per_s)   # a whole batch


def test_the_variant_view_highlights_one_in_the_lines_and_the_legend(run):
    fig, ax = plt.subplots()
    draw_h200_variants(ax, "GQA-8 (Llama 3 8B)")
    draw_h200_variants(ax, "MLA (DeepSeek-V3)")                     # a redraw on the same Axes
    widths = {t.get_text(): h.get_linewidth() for t, h in zip(ax.get_legend().texts, ax.get_legend().legend_handles)}
    assert widths["kvsim: MLA (DeepSeek-V3, 4 of 61 layers)"] > widths["kvsim: GQA-8 (Llama 3 8B)"]
    twin = [ln for ln in ax.get_lines() if ln.get_marker() == "x"][0]
    assert list(twin.get_ydata()) == [p["step_ms"]["mlx-lm"] for p in run.points("MLA (DeepSeek-V3)")]
    plt.close(fig)


@pytest.fixture(scope="module")
def table():
    return {row["technique"]: row for row in technique_table()}


def test_seed_numbers(table):
    assert table["MQA, GQA"]["stored %"] == 25.0 and "4x" in table["MQA, GQA"]["example"]
    assert table["MLA"]["stored %"] == 1.76
    assert table["KV quantization (fp8)"]["stored %"] == 50.0
    assert table["KV quantization (2-bit)"]["stored %"] == 12.5            # an eighth, before metadata
    assert table["  same, with metadata"]["stored %"] > 12.5
    assert table["sliding window"]["stored %"] == 12.5 and "8x" in table["sliding window"]["example"]
    jamba = table["hybrid (Mamba + attention)"]
    assert "4.01 GiB" in jamba["example"] and "32 GiB" in jamba["example"]
    assert "K/V of 4 layers + 28 fixed states" == jamba["what stays in the cache"]


def test_read_only_techniques_keep_what_is_stored(table):
    for name in ("NSA", "FlashAttention, Flash-Decoding"):
        assert table[name]["stored %"] == 100.0
    assert table["NSA"]["read/step %"] < 10
    assert table["DSA"]["stored %"] > 100 and table["DSA"]["read/step %"] < 15    # stores more, reads less
    assert table["PagedAttention"]["read/step %"] == 100.0 and table["PagedAttention"]["stored %"] == 25.0
    for row in table.values():
        assert row["term changed"] != "none" or row["stored %"] >= 25.0


def test_nsa_reproduces_the_papers_table_4():
    assert nsa_read_tokens(np.array([8192, 16384, 32768, 65536])).tolist() == [2048, 2560, 3584, 5632]
    assert nsa_read_tokens(1000) == 1000                   # never more than the tokens there are


def test_sparse_bytes_dense_is_the_calculator_and_dsa_adds_indexer_keys():
    spec = load_model("deepseek-v3")
    t = np.array([0, 100, 4096, 131_072])
    dense, dsa = sparse_bytes(spec, t, "dense"), sparse_bytes(spec, t, "dsa")
    assert np.array_equal(dense["stored"], memory.kv_bytes(spec, t))
    assert np.array_equal(dense["read"], memory.read_bytes_per_step(spec, t))
    assert dsa_indexer_key_bytes() == 132
    assert np.array_equal(dsa["stored"] - dense["stored"], t * 132 * 61)
    assert dsa["read"][1] == dsa["stored"][1]              # below top-k every token is read
    assert dsa["read"][-1] == 61 * (131_072 * 132 + 2048 * 1152)
    assert sparse_bytes(spec, 4096, "nsa") == {"stored": dense["stored"][2], "read": 61 * (256 + 1024 + 512) * 1152}


def test_sparse_bytes_leave_windows_alone():
    mistral = load_model("mistral-7b-v0.1")
    for method in ("dense", "nsa", "dsa"):
        assert sparse_bytes(mistral, 65_536, method) == {"stored": memory.kv_bytes(mistral, 65_536),
                                                         "read": memory.kv_bytes(mistral, 65_536)}
    with pytest.raises(ValueError, match="method"):
        sparse_bytes(mistral, 10, "sparse")


def test_flops_per_byte_read():
    llama, dsv3 = load_model("llama-3-8b"), load_model("deepseek-v3")
    mha = LayerSpec("full", num_key_value_heads=32, head_dim=128)
    assert cache_read_intensity(mha, 32, "bf16") == 1.0                 # 2·g/b with g = 1
    assert cache_read_intensity(llama.layers[0], 32, "bf16") == 4.0     # 4 query heads per KV head
    assert cache_read_intensity(llama.layers[0], 32, "fp32") == 2.0
    assert cache_read_intensity(dsv3.layers[0], 128) == pytest.approx(2 * 128 * (1024 + 64) / 1152)
    with pytest.raises(ValueError, match="kind"):
        cache_read_intensity(load_model("jamba-v0.1").layers[0], 32)
    assert weight_read_intensity(1, "bf16") == 1.0 and weight_read_intensity(8, "fp32") == 4.0
    with pytest.raises(ValueError, match="batch"):
        weight_read_intensity(0)


@pytest.mark.parametrize("model", ["deepseek-v3", "mixtral-8x7b"])
def test_a_mixture_of_experts_does_not_fit_an_80_gb_card(model):
    # a step reads a few experts but the card holds them all: DeepSeek-V3 ~1,250 GiB, Mixtral 8x7B ~87 GiB of weights
    d = decode_speed_limit(model, "H100 80GB", batch=1, tokens=1024)
    spec = load_model(model)
    assert weights_bytes(spec, "bf16") > get_accelerator("H100 80GB").memory_bytes
    assert d["held_bytes"] == held_bytes(spec, 1024, 1, "bf16") > d["memory_bytes"] and not d["fits"]
    # the bytes one step reads would have said it fits
    assert d["step_s"][-1] * get_accelerator("H100 80GB").memory_bandwidth_bytes_per_s < d["memory_bytes"]
    fig, ax = plt.subplots()
    draw_decode_speed_limit(ax, model=model, accelerator="H100 80GB", batch=1, tokens=1024)
    assert ax.get_title().endswith(f"(holds {format_bytes(d['held_bytes'])}: does not fit)")
    plt.close(fig)


def test_held_bytes_are_all_weights_plus_each_sequence():
    spec = load_model("llama-3.1-8b")
    assert held_bytes(spec, 131_072, 16) == weights_bytes(spec, "bf16") + 16 * 2**34
    assert held_bytes(spec, 131_072, 1, tp=2) == weights_bytes(spec, "bf16") // 2 + 2**33
    d = decode_speed_limit("llama-3.1-8b", "H100 80GB", batch=1, tokens=131_072)
    assert d["fits"] and d["held_bytes"] == held_bytes(spec, 131_072, 1)


def test_decode_speed_title_and_label_are_the_data_numbers():
    d = decode_speed_limit("llama-3.1-8b", "H100 80GB", batch=4, kv_dtype="fp8", tokens=32_768)
    assert d["per_sequence_tokens_per_s"] == pytest.approx(1 / d["step_s"][-1])
    assert d["all_tokens_per_s"] == pytest.approx(4 * d["per_sequence_tokens_per_s"])
    fig, ax = plt.subplots()
    draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=4, kv_dtype="fp8", tokens=32_768)
    assert ax.get_title() == "llama-3.1-8b on H100 80GB: memory-bandwidth floor"
    texts = [x.get_text() for x in ax.texts] + [ln.get_label() for ln in ax.get_lines()]
    want = f"{d['per_sequence_tokens_per_s']:,.0f} tok/s per sequence, {d['all_tokens_per_s']:,.0f} in all"
    assert any(want in x for x in texts), texts
    plt.close(fig)


def test_decode_speed_labels_worked_by_hand():
    from kvsim.lessons.l08_decode_speed.data import copy_floor_label, decode_speed_title, floor_labels
    from kvsim.lessons.l08_decode_speed.views import decode_speed_view
    assert floor_labels(3.35e12, 1e9) == ("bandwidth floor: bytes / 3,350.0 GB/s",
                                          "compute floor: FLOPs / 1.0 GFLOP/s")
    assert copy_floor_label(4.2e12) == "floor: bytes / 4.20 TB/s (measured copy)"
    assert decode_speed_title("m", "a", True, 0) == "m on a: memory-bandwidth floor"
    assert decode_speed_title("m", "a", False, 3 * 2**40) == "m on a: memory-bandwidth floor (holds 3 TiB: does not fit)"
    # Llama 3.1 8B on an H100 80GB (3.35e12 B/s), 16 sequences of 131,072 tokens:
    # held = 16,060,522,496 B of weights + 16 × 131,072 × 131,072 B of KV = 290,938,429,440 B = 270.96 GiB;
    # weights read = 15,009,857,536 B (all but 128,255 embedding rows) -> 4.48 ms;
    # step = (15,009,857,536 + 274,877,906,944) / 3.35e12 = 86.53 ms -> 11.6 tok/s per sequence, 185 in all
    view = decode_speed_view(batch=16, tokens=131_072)
    assert view.ax.get_title() == "llama-3.1-8b on H100 80GB: memory-bandwidth floor (holds 271 GiB: does not fit)"
    assert [t.get_text() for t in view.ax.texts] == ["weights only: 4.48 ms", "12 tok/s per sequence, 185 in all"]
    plt.close(view.figure)


def test_time_and_floor_labels_are_the_data_labels(ax):
    pts = [_point(t, 1, 1e6 * (1 + t), 2e6 * (1 + t), 5.0) for t in (0, 1, 2)]
    draw_time_and_floors(ax, pts, bytes_per_s=2.5e9, flops_per_s=1.25e12)
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "bandwidth floor: bytes / 2.5 GB/s" in labels and "compute floor: FLOPs / 1,250.0 GFLOP/s" in labels
