"""Lesson 06 support: quantized bytes with metadata, measured cache bytes, attention error, the views.
"""

import matplotlib
import matplotlib.pyplot as plt
import mlx.core as mx
import numpy as np
import pytest

from kvsim.calc import memory, quant_bytes
from kvsim.calc.config import LayerSpec
from kvsim.calc.registry import load_model
from kvsim.lessons import VIEWS
from kvsim.lessons.l06_quantized import measure as quant_error
from kvsim.lessons.l06_quantized.data import quantized_bars
from kvsim.lessons.l06_quantized.measure import fake_quantize, key_error_map, per_head_errors, scheme_errors
from kvsim.lessons.l06_quantized.plots import (
    plot_bytes_bars,
    plot_error_vs_bits,
    plot_error_vs_bytes,
    plot_key_error_maps,
)
from kvsim.lessons.l06_quantized.views import draw_quantized_kv


matplotlib.use("Agg")


SMALL = dict(tokens=256, queries=4, num_attention_heads=4, num_key_value_heads=2)


@pytest.mark.parametrize("model,kv_dtype", [
    ("llama-3-8b", "q4"), ("llama-3-70b", "q2"), ("gemma-3-27b", "q8"), ("llama-3-8b", "fp8"),
    ("deepseek-v3", memory.parse_kv_dtype("q4", group_size=32)), ("qwen3-next-80b-a3b", "q6"),
])
def test_split_adds_up_to_the_calculator(model, kv_dtype):
    spec = load_model(model)
    split = quant_bytes.token_bytes_split(spec, kv_dtype)
    assert split["data"] + split["metadata"] == split["total"] == memory.bytes_per_token(spec, kv_dtype)
    assert (split["metadata"] > 0) == memory.parse_kv_dtype(kv_dtype).quantized


def test_llama3_8b_seed_ratios_before_metadata():
    rows = {(r["kv dtype"], r["group"]): r for r in quant_bytes.bytes_table(load_model("llama-3-8b"))}
    assert rows[("fp16", None)]["bytes/token"] == 131_072
    assert rows[("fp8", None)]["% of fp16 (all)"] == 50.0
    assert rows[("q2", 64)]["data only"] * 8 == 131_072
    # q4, g64, bf16 scales: per 128-element vector 64 B data + 2·2·2 B metadata = 72 B
    assert rows[("q4", 64)]["bytes/token"] == 32 * 8 * 2 * 72
    assert rows[("q4", 32)]["metadata"] == 2 * rows[("q4", 64)]["metadata"]


@pytest.mark.parametrize("model", ["llama-3-8b", "gemma-3-27b"])
@pytest.mark.parametrize("tokens,recent", [(0, 0), (1, 64), (100, 128), (5000, 128), (5000, 0)])
def test_sequence_split_sums_to_kv_bytes(model, tokens, recent):
    spec = load_model(model)
    dt = memory.parse_kv_dtype("q4", group_size=64, full_precision_tokens=recent)
    parts = quant_bytes.sequence_bytes_split(spec, tokens, dt)
    assert sum(parts.values()) == memory.kv_bytes(spec, tokens, kv_dtype=dt)
    assert parts["full-precision recent"] == (0 if recent == 0 else
                                             memory.kv_bytes(spec, min(tokens, recent), kv_dtype="bf16"))


@pytest.mark.parametrize("bits,group,recent", [(4, 64, 0), (2, 32, 100), (8, 128, 256)])
def test_real_cache_bytes_equal_the_formula(bits, group, recent):
    layer = LayerSpec(kind="full", num_key_value_heads=2, head_dim=128)
    counts = [0, 1, 99, 256, 257, 600]
    m = quant_error.measure_quantized_nbytes(layer, counts, bits, group, recent, chunk_tokens=200)
    dt = memory.parse_kv_dtype(f"q{bits}", group_size=group, scale_dtype="bf16", full_precision_tokens=recent)
    assert m.nbytes.tolist() == memory.layer_kv_bytes(layer, m.tokens, dt, view="allocated").tolist()
    assert m.used_bytes.tolist() == memory.layer_kv_bytes(layer, m.tokens, dt).tolist()


def test_measure_rejects_bad_input():
    with pytest.raises(ValueError, match="kind"):
        quant_error.measure_quantized_nbytes(LayerSpec(kind="mla", kv_lora_rank=64, qk_rope_head_dim=32), [1])
    with pytest.raises(ValueError, match="ascending"):
        quant_error.measure_quantized_nbytes(LayerSpec(kind="full", num_key_value_heads=1, head_dim=64), [5, 2])
    with pytest.raises(ValueError, match="dtype"):
        quant_error.measure_quantized_nbytes(LayerSpec(kind="full", num_key_value_heads=1, head_dim=64), [1],
                                              dtype="int8")


def test_error_falls_with_bits_and_smaller_groups():
    qkv = quant_error.synthetic_qkv(**SMALL)
    rows = quant_error.error_sweep(qkv, bits=(2, 4, 8), group_sizes=(32, 128))
    by = quant_error.errors_by(rows)
    for g, (bits, err) in by.items():
        assert bits.tolist() == [2, 4, 8]
        assert np.all(np.diff(err) < 0), f"group {g}: error must fall as bits grow, got {err}"
    assert np.all(by[32][1] < by[128][1])
    assert 0.0005 < by[32][1][-1] < 0.05 and 0.1 < by[128][1][0] < 1.5


def test_everything_full_precision_is_exact_and_recent_tokens_help():
    qkv = quant_error.synthetic_qkv(**SMALL)
    assert quant_error.attention_error(qkv, 2, 64, full_precision_tokens=256).relative_error < 1e-5
    errs = [quant_error.attention_error(qkv, 3, 64, full_precision_tokens=r).relative_error for r in (0, 64, 128)]
    assert errs[0] > errs[1] > errs[2]


def test_error_result_reports_the_real_cache_bytes():
    qkv = quant_error.synthetic_qkv(**SMALL)
    res = quant_error.attention_error(qkv, 4, 64, full_precision_tokens=16)
    layer = LayerSpec(kind="full", num_key_value_heads=2, head_dim=128)
    dt = memory.parse_kv_dtype("q4", group_size=64, scale_dtype="fp32", full_precision_tokens=16)
    assert res.nbytes == memory.layer_kv_bytes(layer, 256, dt, view="allocated")
    assert res.used_bytes == memory.layer_kv_bytes(layer, 256, dt)


def test_recent_attention_share():
    qkv = quant_error.synthetic_qkv(**SMALL)
    shares = [quant_error.recent_attention_share(qkv, r) for r in (0, 16, 64, 256)]
    assert shares[0] == 0.0 and abs(shares[-1] - 1.0) < 1e-5
    assert shares[1] < shares[2] < shares[3]
    flat = quant_error.synthetic_qkv(**SMALL, recency=0.0)
    assert quant_error.recent_attention_share(flat, 16) < shares[1]  # recency makes recent tokens matter


def test_synthetic_qkv_is_seeded_and_checked():
    a, b = quant_error.synthetic_qkv(**SMALL, seed=3), quant_error.synthetic_qkv(**SMALL, seed=3)
    assert all(np.array_equal(np.array(x), np.array(y)) for x, y in zip(a, b))
    assert a.q.shape == (1, 4, 4, 128) and a.k.shape == a.v.shape == (1, 2, 256, 128)
    with pytest.raises(ValueError, match="queries"):
        quant_error.synthetic_qkv(tokens=4, queries=5)
    with pytest.raises(ValueError, match="num_attention_heads"):
        quant_error.synthetic_qkv(tokens=8, queries=1, num_attention_heads=3, num_key_value_heads=2)


def test_bars_of_the_view_match_the_calculator():
    bars = quantized_bars("llama-3-8b", 4, 64, 128, 1024)
    spec = load_model("llama-3-8b")
    (bf16,), quant = bars.values()
    assert sum(bars["bf16"].values()) == memory.kv_bytes(spec, 1024)
    dt = memory.parse_kv_dtype("q4", group_size=64, full_precision_tokens=128)
    assert sum(bars["q4 g64 R=128"].values()) == memory.kv_bytes(spec, 1024, kv_dtype=dt)


def test_draw_functions_on_fresh_axes():
    fig, ax = plt.subplots()
    draw_quantized_kv(ax, bits=2, group_size=32, recent_tokens=0, tokens=256)
    assert "relative attention error" in ax.get_title() and len(ax.patches) == 4  # bf16 + 3 parts
    plot_error_vs_bits(ax, {"g32": ([2, 4], [0.5, 0.1])}, dashed={"g32 R": ([2, 4], [0.2, 0.05])})
    assert len(ax.get_lines()) == 2 and ax.get_yscale() == "log"
    plot_error_vs_bytes(ax, {"g64": ([1000, 2000], [0.3, 0.1], ["q2", "q4"])})
    assert len(ax.texts) == 2
    plot_bytes_bars(ax, {"a": {"packed data": 10}, "b": {"bf16": 20}}, notes={"a": "x"})
    assert len(ax.patches) == 2
    plt.close(fig)


def test_view_is_registered():
    assert "quantized_kv" in VIEWS


def test_tables_built_from_a_sweep():
    qkv = quant_error.synthetic_qkv(**SMALL)
    rows = quant_error.error_sweep(qkv, bits=(2, 8), group_sizes=(32, 64), full_precision_tokens=(0, 16))
    assert len(rows) == 8
    pivot = quant_error.error_pivot(rows, recent_tokens=16)
    assert [r["bits"] for r in pivot] == [2, 8] and set(pivot[0]) == {"bits", "g32 error %", "g64 error %"}
    points = quant_error.tradeoff_points(load_model("llama-3-8b"), rows)
    b, e, names = points["g64"]
    assert names == ["q2", "q8"] and b == [20_480, 69_632] and e[0] > e[1]
    spec = load_model("llama-3-8b")
    table = quant_error.recent_window_table(spec, qkv, bits=3, group_size=64, recent=(0, 64), long_tokens=1000)
    assert table[0]["error %"] > table[1]["error %"] and table[0]["attention on newest R %"] == 0
    dt = memory.parse_kv_dtype("q3", group_size=64, full_precision_tokens=64)
    assert table[1]["MiB at 1,000"] == round(memory.kv_bytes(spec, 1000, kv_dtype=dt) / 2**20, 1)


def test_fake_quantize_groups_along_the_chosen_axis():
    x = mx.random.normal((1, 2, 64, 32), key=mx.random.key(0))
    per_token = fake_quantize(x, 4, 32, "token")
    assert mx.allclose(per_token, mx.dequantize(*mx.quantize(x, group_size=32, bits=4), group_size=32, bits=4))
    x_outlier = x * mx.where(mx.arange(32) == 3, 20.0, 1.0)  # one large channel
    err_token = mx.abs(fake_quantize(x_outlier, 4, 32, "token") - x_outlier)
    err_channel = mx.abs(fake_quantize(x_outlier, 4, 32, "channel") - x_outlier)
    normal = np.arange(32) != 3
    assert np.array(err_channel)[..., normal].mean() < np.array(err_token)[..., normal].mean() / 3
    with pytest.raises(ValueError, match="multiple of group_size"):
        fake_quantize(x[:, :, :40], 4, 32, "channel")
    with pytest.raises(ValueError, match="axis"):
        fake_quantize(x, 4, 32, "head")


def test_per_channel_keys_beat_per_token_with_outlier_channels():
    qkv = quant_error.synthetic_qkv(tokens=256, queries=4)
    errs = {b: scheme_errors(qkv, b, 64) for b in (2, 4, 8)}
    assert all(e["keys per channel (KIVI)"] < e["keys per token"] for e in errs.values())
    assert errs[8]["keys per token"] < errs[4]["keys per token"] < errs[2]["keys per token"]
    maps = key_error_map(qkv, 2, 64, tokens=16)
    assert set(maps) == {"|K|", "error, per token", "error, per channel"} and maps["|K|"].shape == (16, 128)


def test_the_whole_sample_error_lies_within_the_per_head_errors():
    qkv = quant_error.synthetic_qkv(tokens=256, queries=4)
    heads = per_head_errors(qkv, 4, 64, 32)
    whole = quant_error.attention_error(qkv, 4, 64, 32).relative_error
    assert len(heads) == qkv.k.shape[1] and min(heads) <= whole <= max(heads)
    assert np.ptp(heads) > 0.01  # heads differ: a sample with other heads gives another number




def test_key_error_maps_share_a_colour_scale_shown_by_one_colour_bar():
    maps = {"|K|": np.ones((4, 8)), "e1": np.full((4, 8), 0.5), "e2": np.full((4, 8), 2.0)}
    fig, axes = plt.subplots(1, 4)                       # three maps, then the colour bar's Axes
    plot_key_error_maps(axes, maps)
    ims = [im for ax in axes[:3] for im in ax.get_images()]
    assert len(ims) == 3 and ims[1].get_clim() == ims[2].get_clim() == (0, 2.0)
    bar = axes[3]
    assert bar.get_ylim() == (0, 2.0) and bar.get_position().width < 0.2 * axes[0].get_position().width
    plot_key_error_maps(axes, {**maps, "e2": np.full((4, 8), 3.0)})           # a redraw reuses the images
    assert [im for ax in axes[:3] for im in ax.get_images()][1:] == ims[1:] and ims[1].get_clim() == (0, 3.0)
    assert len(fig.axes) == 4 and bar.get_ylim() == (0, 3.0)
    with pytest.raises(ValueError, match="one Axes per map"):
        plot_key_error_maps(axes[:2], maps)
    plt.close(fig)


def test_quantized_kv_notes_are_the_data_numbers():
    from kvsim.calc.units import format_bytes
    from kvsim.lessons.l06_quantized.data import bar_totals, quantized_bars
    bars = quantized_bars("llama-3-8b", 2, 32, 0, 256)
    totals, pct = bar_totals(bars)
    assert totals["bf16"] == 256 * 131_072 and pct == 100 * totals["q2 g32 R=0"] / totals["bf16"]
    fig, ax = plt.subplots()
    draw_quantized_kv(ax, bits=2, group_size=32, recent_tokens=0, tokens=256)
    texts = [t.get_text() for t in ax.texts]
    assert format_bytes(totals["bf16"]) in texts
    assert f"{format_bytes(totals['q2 g32 R=0'])}  = {pct:.1f} % of bf16" in texts
    plt.close(fig)


def test_predicted_rotated_nbytes_is_what_a_real_turboquant_cache_holds():
    import mlx.core as mx
    from kvsim.cache import make_caches
    from kvsim.calc.registry import load_model
    from kvsim.lessons.exercises import EXERCISES, verdict_for
    cache = make_caches(load_model("llama-3-8b"), kv_dtype="q4", group_size=64, quant_mode="rotated")[0]
    k = mx.random.normal((1, 8, 300, 128), key=mx.random.key(0)).astype(mx.bfloat16)
    cache.update_and_fetch(k, k)
    assert cache.nbytes == EXERCISES["06.3"].solve().value == 590_080
    assert verdict_for("06.3", cache.nbytes).ok


def test_bar_notes_and_percent_worked_by_hand():
    from kvsim.lessons.l06_quantized.data import bar_notes, percent, quantized_bars
    from kvsim.lessons.l06_quantized.views import quantized_kv_view
    # Llama 3 8B, 256 tokens: bf16 = 256 × 131,072 B = 32 MiB; q2 g32 = 2 bits + (bf16 scale + bias) / 32 elements
    # = 0.375 B per element, 18.75 % of bf16's 2 B: 6 MiB
    assert bar_notes(quantized_bars("llama-3-8b", 2, 32, 0, 256)) == {"bf16": "32 MiB",
                                                                      "q2 g32 R=0": "6 MiB  = 18.8 % of bf16"}
    assert bar_notes({"a": {"x": 1024, "y": 1024}, "b": {"x": 512}}) == {"a": "2 KiB", "b": "512 B  = 25.0 % of bf16"}
    assert percent(0.25) == 25.0 and percent(0.0) == 0.0
    view = quantized_kv_view(bits=2, group_size=32, recent_tokens=0, tokens=256)
    assert {"32 MiB", "6 MiB  = 18.8 % of bf16"} <= {t.get_text() for t in view.ax.texts}
    plt.close(view.figure)
@pytest.mark.parametrize("bits, group_size, head, tokens", [(2, 64, 0, 64), (4, 128, 1, 16), (3, 32, 3, 40)])
def test_key_error_map_equals_the_maps_of_the_whole_quantized_keys(bits, group_size, head, tokens):
    # key_error_map quantizes only the head and the leading groups it shows: the same K̂ as the whole array
    qkv = quant_error.synthetic_qkv(tokens=256, queries=4)
    maps = key_error_map(qkv, bits, group_size, head, tokens)
    k = qkv.k
    assert np.array_equal(maps["|K|"], np.abs(np.array(k[0, head, :tokens])))
    for axis in ("token", "channel"):
        whole = np.array(mx.abs(fake_quantize(k, bits, group_size, axis) - k)[0, head, :tokens])
        assert np.array_equal(maps[f"error, per {axis}"], whole)


def test_scheme_errors_take_the_exact_attention_they_are_given():
    qkv = quant_error.synthetic_qkv(tokens=256, queries=4)
    assert scheme_errors(qkv, 2, 64, quant_error.exact_attention(qkv)) == scheme_errors(qkv, 2, 64)
