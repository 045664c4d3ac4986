"""Lesson 03 helpers: the seed's MHA/GQA/MQA/MLA table, real decode of each variant, absorbed vs materialized MLA.
"""

from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc import memory
from kvsim.calc.counterfactual import attention_variants, decodable_variants, variant_rows
from kvsim.calc.units import InputError
from kvsim.lessons.l03_attention_variants.data import area_sides, kv_head_of
from kvsim.lessons.l03_attention_variants.measure import compare_mla_paths, measure_variants
from kvsim.lessons.l03_attention_variants.plots import plot_head_sharing, plot_mla_fanout
from kvsim.lessons.l03_attention_variants.views import draw_measured_bytes, draw_variant_bytes


def test_seed_table_at_deepseek_v3_sizes():
    rows = {r["variant"]: r for r in variant_rows()}
    assert list(rows) == ["MHA", "GQA-8", "MQA", "MLA"]
    assert [r["elements/layer"] for r in rows.values()] == [32_768, 2_048, 256, 576]
    assert [r["× 61 layers"] for r in rows.values()] == [1_998_848, 124_928, 15_616, 35_136]
    assert [r["="] for r in rows.values()] == ["3.81 MiB", "244 KiB", "30.5 KiB", "68.6 KiB"]
    assert [r["% of MHA"] for r in rows.values()] == [100.0, 6.25, 0.78, 1.76]


def test_rows_follow_dtype_and_geometry():
    rows = variant_rows(attention_variants(num_layers=2, num_attention_heads=4, head_dim=8, gqa_groups=2,
                                           kv_lora_rank=16, qk_rope_head_dim=8), kv_dtype="fp32")
    assert [r["bytes (fp32)"] for r in rows] == [2 * 2 * 4 * 8 * 4, 2 * 2 * 2 * 8 * 4, 2 * 2 * 8 * 4, 2 * 24 * 4]


def test_decodable_mla_carries_deepseek_fields_and_keeps_cache_geometry():
    v = decodable_variants(q_lora_rank=None)
    mla = v["MLA"]
    assert mla.qk_nope_head_dim == 128 and mla.v_head_dim == 128
    assert mla.q_lora_rank == 0  # None: no query compression
    assert mla.layers == attention_variants()["MLA"].layers
    assert decodable_variants(q_lora_rank=1536)["MLA"].q_lora_rank == 1536
    with pytest.raises(ValueError, match="q_lora_rank"):
        decodable_variants(q_lora_rank=-1)


def _small():
    """The four variants at a small geometry (so the test is fast), MLA with its up-projection fields."""
    v = attention_variants(num_layers=4, num_attention_heads=8, head_dim=16, gqa_groups=2, kv_lora_rank=32,
                           qk_rope_head_dim=16)
    v["MLA"] = replace(v["MLA"], qk_nope_head_dim=16, v_head_dim=16)
    return v


@pytest.fixture(scope="module")
def runs():
    return measure_variants(_small(), num_layers=2, prompt_tokens=5, answer_tokens=4, kv_dtype="bf16",
                            progress=False, keep_models=("MLA",))


def test_measured_bytes_equal_formula(runs):
    v = _small()
    assert list(runs) == list(v)
    for name, run in runs.items():
        assert run.tokens_cached == 5 + 4 - 1
        per_layer = memory.layer_token_bytes(run.spec.layers[0], "bf16")
        assert run.measured_token_bytes() == [per_layer, per_layer]
        row = run.row("bf16")
        assert row["measured × 4"] == row["formula, 4 layers"] == memory.bytes_per_token(v[name], "bf16")
        assert row["nbytes/layer"] == 256 * per_layer  # one 256-token step allocated
    assert runs["MLA"].measured_token_bytes()[0] == (32 + 16) * 2
    assert runs["MHA"].model is None and runs["MLA"].model is not None


def test_absorbed_and_materialized_mla_agree(runs):
    model = runs["MLA"].model
    before = model.mla_path
    out = compare_mla_paths(model, prompt_tokens=6, answer_tokens=3, seed=2)
    assert out["same tokens"] and len(out["tokens"]) == 3
    assert out["max |logit difference|"] < 1e-4 < out["max |logit|"]
    assert model.mla_path == before


def test_draw_functions(runs):
    fig, ax = plt.subplots()
    draw_measured_bytes(ax, runs)
    heights = [p.get_height() for c in ax.containers for p in c]
    assert len(heights) == 8 and heights[:4] == heights[4:]
    draw_variant_bytes(ax, num_key_value_heads=128)
    gqa = [p.get_height() for p in ax.containers[0]]
    assert gqa[0] == gqa[1]  # GQA with as many K/V heads as query heads is MHA
    assert "2.25 groups" in ax.get_title()


def test_kv_head_of_groups_consecutive_query_heads():
    assert kv_head_of(8, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert kv_head_of(4, 4).tolist() == [0, 1, 2, 3] and kv_head_of(4, 1).tolist() == [0] * 4
    with pytest.raises(InputError, match="multiple"):
        kv_head_of(6, 4)


def test_area_sides_make_areas_proportional():
    sides = area_sides({"a": 16, "b": 1, "c": 4}, largest_side=8)
    assert sides["a"] == 8 and sides["a"] ** 2 / sides["b"] ** 2 == pytest.approx(16)
    assert sides["c"] ** 2 / sides["b"] ** 2 == pytest.approx(4)




def test_head_sharing_square_areas(ax):
    groups = np.repeat(np.arange(4), 4)
    plot_head_sharing(ax, groups, {"A": 4.0, "B": 2.0}, {"A": "A", "B": "B"}, highlight="B")
    widths = sorted({round(float(np.ptp(ln.get_xdata())), 6) for ln in ax.get_lines() if len(ln.get_xdata()) == 5})
    assert widths == [2.0, 4.0]


def test_mla_fanout_box_widths_follow_the_lengths(ax):
    plot_mla_fanout(ax, 512, 64, 128, 128)
    widths = [float(np.ptp(ln.get_xdata())) for ln in ax.get_lines() if len(ln.get_xdata()) == 5]
    assert max(widths) == pytest.approx(40) and min(widths) == pytest.approx(40 * 64 / 512)


def test_head_sharing_and_mla_labels_are_the_data_numbers(ax):
    from kvsim.calc.units import format_bytes
    from kvsim.lessons.l03_attention_variants.data import head_sharing_bytes, mla_elements, percent_of_mha
    from kvsim.lessons.l03_attention_variants.views import draw_head_sharing, draw_mla_fanout
    per = head_sharing_bytes(8, "bf16")
    pct = percent_of_mha(per)
    assert list(per) == ["MHA", "GQA-8", "MQA", "MLA"]
    assert pct["MHA"] == 100 and pct["GQA-8"] == 6.25 and pct["MQA"] == round(100 / 128, 2)
    draw_head_sharing(ax, 8)
    texts = {t.get_text() for t in ax.texts}
    for n, b in per.items():
        assert f"{n}\n{format_bytes(b)}\n{pct[n]:g} %" in texts
    ax.clear()
    assert mla_elements(512, 64) == (576, 32_768)
    draw_mla_fanout(ax, 512, 64)
    assert ax.get_title() == ("MLA caches 576 elements per token and layer; "
                              "MHA would cache 2 × 128 × 128 = 32,768")


def test_measured_bytes_notes_are_percent_of_mha(runs, ax):
    from kvsim.lessons.l03_attention_variants.data import percent_of_mha
    draw_measured_bytes(ax, runs)
    formula = {name: r.row("bf16")["formula, 4 layers"] for name, r in runs.items()}
    texts = [t.get_text() for t in ax.texts]
    for p in percent_of_mha(formula).values():
        assert f"{p:g} %" in texts


def test_mla_path_curves_cross_where_calc_decides_and_place_the_seed_calls():
    from kvsim.calc.mla_paths import use_absorbed_mla
    from kvsim.lessons.l03_attention_variants.data import mla_path_curves
    from kvsim.lessons.l03_attention_variants.plots import plot_mla_path_costs
    c = mla_path_curves()
    x = c["crossover"][32_768]
    assert use_absorbed_mla(c["dims"], x - 1, 32_768) and not use_absorbed_mla(c["dims"], x, 32_768)
    big = c["curves"][32_768]
    assert np.all(big["absorbed"]["bytes"] < big["materialized"]["bytes"])     # absorbed always reads less
    i = int(np.searchsorted(c["L"], 1024))
    assert big["absorbed"]["flops"][i] > big["materialized"]["flops"][i]       # ...but computes more for long calls
    paths = {r["label"]: r["path"] for r in c["points"]}
    assert list(paths.values()) == ["materialized", "materialized", "absorbed", "absorbed"]
    fig, (a, b) = plt.subplots(1, 2)
    plot_mla_path_costs(a, b, c)
    assert len(a.lines) == len(b.lines) == 2 * 2 + 2 + 4                        # 2 C × 2 paths, crossovers, points
    plt.close(fig)


def test_predicted_latent_nbytes_is_what_a_real_latent_cache_holds():
    import mlx.core as mx
    from kvsim.cache import make_caches
    from kvsim.calc.registry import load_model
    from kvsim.lessons.exercises import EXERCISES, verdict_for
    cache = make_caches(load_model("deepseek-v3"))[0]
    latent = mx.zeros((1, 1, 300, 512), dtype=mx.bfloat16)
    cache.update_and_fetch(latent, mx.zeros((1, 1, 300, 64), dtype=mx.bfloat16))
    assert cache.nbytes == EXERCISES["03.4"].solve().value == 589_824
    assert verdict_for("03.4", cache.nbytes).ok


def test_head_sharing_title_is_the_data_title_worked_by_hand():
    from kvsim.lessons.l03_attention_variants.data import head_sharing_title
    from kvsim.lessons.l03_attention_variants.views import head_sharing_view
    # 128 query heads // 8 K/V heads = 16 per K/V head; 128 // 128 = 1 (singular); 128 // 1 = 128 (MQA)
    assert head_sharing_title(8) == "GQA-8: 16 query heads per K/V head; the cache stores 8 K/V heads per layer"
    assert head_sharing_title(128) == "MHA: 1 query head per K/V head; the cache stores 128 K/V heads per layer"
    assert head_sharing_title(1) == "MQA: 128 query heads per K/V head; the cache stores 1 K/V head per layer"
    view = head_sharing_view(8)
    assert view.ax.get_title() == "GQA-8: 16 query heads per K/V head; the cache stores 8 K/V heads per layer"
    view.controls["num_key_value_heads"].value = 128
    assert view.ax.get_title() == "MHA: 1 query head per K/V head; the cache stores 128 K/V heads per layer"
    plt.close(view.figure)


def test_mib_ticks_are_whole_mebibytes_worked_by_hand(runs, ax):
    from kvsim.lessons.l03_attention_variants.data import mib_ticks
    from kvsim.lessons.l03_attention_variants.views import draw_measured_bytes_linear
    # 3.5 MiB = 3,670,016 B: whole MiB 0, 1, 2, 3 at 0, 1,048,576, 2,097,152, 3,145,728 B
    assert mib_ticks(3_670_016) == ([0, 1_048_576, 2_097_152, 3_145_728], ["0 MiB", "1 MiB", "2 MiB", "3 MiB"])
    assert mib_ticks(1_048_575) == ([0], ["0 MiB"])  # one byte short of 1 MiB
    draw_measured_bytes_linear(ax, runs)
    top = ax.get_ylim()[1]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [f"{i} MiB" for i in range(len(labels))] and labels == mib_ticks(top)[1]
