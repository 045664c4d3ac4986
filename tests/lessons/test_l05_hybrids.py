"""Lesson 05 support: hybrid arithmetic, cache layouts, a real hybrid decode against the formula, the views.
"""

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, strategies as st

from kvsim.calc import hybrid, memory
from kvsim.calc.registry import load_model
from kvsim.calc.units import InputError
from kvsim.decode import generate
from kvsim.lessons.l05_hybrids.data import hybrid_crossover_tokens, short_context_curves
from kvsim.lessons.l05_hybrids.plots import plot_layer_bytes
from kvsim.lessons.l05_hybrids.views import draw_hybrid_cache, draw_state_vs_kv, hybrid_models, hybrid_view
from kvsim.measure.growth import decode_layer_bytes, kvsim_cache_classes
from kvsim.model import build_model, toy_spec


def test_jamba_4_gib_vs_mixtral_32_gib_at_256k():
    jamba, mixtral = load_model("jamba-v0.1"), load_model("mixtral-8x7b")
    assert hybrid.cache_split(jamba, 262_144)["kv"] == 4 * 2**30
    assert hybrid.cache_split(mixtral, 262_144)["kv"] == 32 * 2**30
    assert hybrid.all_attention(jamba).layers == mixtral.layers


def test_state_is_constant_and_kv_grows():
    qwen = load_model("qwen3-next-80b-a3b")
    split = hybrid.cache_split(qwen, np.array([0, 1, 1000]), batch=3)
    assert split["state"] == 3 * 36 * memory.state_bytes(qwen.layers[0])
    assert list(split["kv"]) == [3 * 12 * 2 * 2 * 256 * 2 * t for t in (0, 1, 1000)]
    assert list(split["total"]) == list(split["kv"] + split["state"])


def test_mixers_count_families():
    assert hybrid.mixers(load_model("recurrentgemma-2b")) == {"rg_lru": 18, "sliding": 8}
    assert hybrid.mixers(load_model("mamba2-2.7b")) == {"mamba2": 64}


def test_all_attention_of_a_pure_recurrent_model_is_an_error():
    with pytest.raises(ValueError, match="no attention layer"):
        hybrid.all_attention(load_model("falcon-mamba-7b"))


@given(target=st.integers(1, 10**9))
def test_tokens_to_reach_is_the_first_token_count(target):
    llama = load_model("llama-3-8b")
    t = hybrid.tokens_to_reach(llama, target)
    assert hybrid.cache_split(llama, t)["total"] >= target > hybrid.cache_split(llama, t - 1)["total"]


def test_tokens_to_reach_never_for_bounded_caches():
    rgemma = load_model("recurrentgemma-2b")
    assert hybrid.tokens_to_reach(rgemma, 10**9) is None
    assert hybrid.tokens_to_reach(load_model("mamba2-2.7b"), 1) == 0


def test_allocated_layer_bytes_shape_and_values():
    jamba = load_model("jamba-v0.1")
    got = hybrid.allocated_layer_bytes(jamba, [1, 33], step=32)
    assert got.shape == (32, 2)
    assert list(got[0]) == [memory.state_bytes(jamba.layers[0])] * 2
    assert list(got[4]) == [32 * 8 * 128 * 2 * 2, 64 * 8 * 128 * 2 * 2]


def test_cache_classes_follow_layer_kinds():
    assert kvsim_cache_classes(load_model("jamba-v0.1")) == {"RecurrentStateCache": 28, "KVCache": 4}
    assert kvsim_cache_classes(load_model("llama-4-scout")) == {"ChunkedKVCache": 36, "KVCache": 12}


@pytest.mark.parametrize("kind", ["jamba", "gated_deltanet", "rg_lru"])
def test_real_hybrid_decode_measures_the_formula(kind):
    model = build_model(toy_spec(kind), seed=0)
    run = decode_layer_bytes({kind: model}, prompt_tokens=9, new_tokens=12, kv_dtype="bf16", step=4)[kind]
    assert list(run.tokens) == list(range(9, 21))
    assert run.measured.shape == run.formula.shape == (model.spec.num_hidden_layers, 12)
    assert (run.measured == run.formula).all()
    for i, layer in enumerate(model.spec.layers):
        if layer.kind == "recurrent":
            assert len(set(run.measured[i])) == 1 and run.labels[i].startswith(layer.recurrent_family)
        elif layer.kind == "full":
            assert run.measured[i, -1] > run.measured[i, 0]
        else:  # RecurrentGemma's local attention: the 9-token prompt already fills W = 8
            assert len(set(run.measured[i])) == 1 and run.caches[i].capacity == layer.sliding_window


def test_decode_layer_bytes_agrees_with_generate_and_rejects_bad_input():
    model = build_model(toy_spec("jamba"), seed=0)
    run = decode_layer_bytes({"j": model}, 5, 4, kv_dtype="fp32", step=8)["j"]
    direct = generate(model, [1, 2, 3, 4, 5], 4, kv_dtype="fp32", step=8)
    assert run.measured.T.tolist() == [list(s.nbytes) for s in direct.trace]
    with pytest.raises(ValueError, match="dtype"):
        decode_layer_bytes({"j": model}, 5, 4, kv_dtype="q4")
    with pytest.raises(ValueError, match="prompt_tokens"):
        decode_layer_bytes({"j": model}, 0, 4)


def test_plot_layer_bytes_draws_measured_and_formula():
    fig, ax = plt.subplots()
    plot_layer_bytes(ax, [1, 2, 3], np.array([[4, 4, 4], [1, 2, 3]]) * 1024, np.array([[4, 4, 4], [1, 2, 3]]) * 1024,
                     ["state", "kv"])
    assert len(ax.get_lines()) == 4 and list(ax.get_lines()[2].get_ydata()) == [1, 2, 3]


def test_hybrid_picture_lines():
    fig, ax = plt.subplots()
    draw_hybrid_cache(ax, model="jamba-v0.1", tokens=262_144)
    kv, total, all_attn, state = (line.get_ydata() for line in ax.get_lines()[:4])
    assert kv[-1] == 4096 and all_attn[-1] == 32 * 1024  # MiB
    assert np.allclose(total - kv, state)
    # log-log: the 8.3 MiB state and the KV below it at short context stay visible; ticks read as context lengths
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log" and kv[0] < state[0] < total[0]
    ax.figure.canvas.draw()
    assert {"64K", "256K"} <= {t.get_text() for t in ax.get_xticklabels()}


def test_pure_recurrent_picture_is_a_flat_state():
    fig, ax = plt.subplots()
    draw_hybrid_cache(ax, model="falcon-mamba-7b", tokens=4096)
    y = ax.get_lines()[0].get_ydata()
    assert np.allclose(y, memory.fixed_state_bytes(load_model("falcon-mamba-7b")) / 2**20)


def test_state_vs_kv_compares_models_on_log_axes():
    fig, ax = plt.subplots()
    draw_state_vs_kv(ax, tokens=65_536, models=("mixtral-8x7b", "mamba2-2.7b"))
    mixtral, mamba = (line.get_ydata() for line in ax.get_lines())
    assert ax.get_yscale() == "log" and mixtral[-1] > mixtral[0] and mamba[0] == mamba[-1]
    # the legend sits under the Axes, clear of every line
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().y1 < ax.get_window_extent().y0


def test_hybrid_view_is_not_left_in_pyplot():
    before = set(plt.get_fignums())
    view = hybrid_view()
    assert set(plt.get_fignums()) == before and view.lines()
    assert "jamba-v0.1" in hybrid_models() and "llama-3-8b" not in hybrid_models()


def test_hybrid_crossover_is_where_the_all_attention_twin_catches_up():
    jamba = load_model("jamba-v0.1")
    t = hybrid_crossover_tokens(jamba)
    curves = short_context_curves(jamba, [t - 1, t])
    assert curves["hybrid"][0] > curves["all-attention"][0] and curves["hybrid"][1] <= curves["all-attention"][1]
    per_token_saved = memory.bytes_per_token(hybrid.all_attention(jamba)) - memory.bytes_per_token(jamba)
    assert t == math.ceil(memory.fixed_state_bytes(jamba) / per_token_saved)
    with pytest.raises(InputError, match="no recurrent layer"):
        hybrid_crossover_tokens(load_model("llama-3-8b"))


def test_short_context_layer_crossover_matches_the_model_crossover():
    from kvsim.lessons.l05_hybrids.data import layer_crossover
    for name in ("jamba-v0.1", "qwen3-next-80b-a3b"):
        spec = load_model(name)
        c = layer_crossover(spec)
        assert c["tokens"] == hybrid_crossover_tokens(spec) == math.ceil(c["state_bytes"] / c["kv_token_bytes"])
    with pytest.raises(InputError, match="recurrent and an attention layer"):
        layer_crossover(load_model("mamba2-2.7b"))


def test_hybrid_cache_numbers_and_the_view_title():
    from kvsim.lessons.l05_hybrids.data import hybrid_cache_numbers
    jamba = load_model("jamba-v0.1")
    d = hybrid_cache_numbers("jamba-v0.1", 262_144, 2, "bf16")
    assert d["mixers"] == {"mamba": 28, "full": 4} and d["attention_layers"] == 4 and d["recurrent_layers"] == 28
    assert d["end_bytes"] == int(hybrid.cache_split(jamba, 262_144, 2)["total"])
    assert d["end_bytes"] == memory.kv_bytes(jamba, 262_144, 2) + memory.fixed_state_bytes(jamba, 2)
    assert d["all_attention"][-1] == memory.kv_bytes(hybrid.all_attention(jamba), 262_144, 2)
    fig, ax = plt.subplots()
    draw_hybrid_cache(ax, "jamba-v0.1", 262_144, 2)
    assert ax.get_title() == "jamba-v0.1: 28 mamba, 4 full; batch 2, bf16"
    plt.close(fig)


def test_exercise_05_4_prediction_is_what_the_real_caches_hold():
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l05_hybrids.measure import prompt_caches_nbytes

    jamba = load_model("jamba-v0.1")
    m = prompt_caches_nbytes("jamba-v0.1", 1000)
    assert (m["kv_bytes"], m["state_bytes"]) == (memory.allocated_bytes(jamba, 1000), memory.fixed_state_bytes(jamba))
    assert m["nbytes"] == EXERCISES["05.4"].solve().value


def test_view_labels_are_data_labels_worked_by_hand():
    from kvsim.lessons.l05_hybrids.data import CACHE_UNIT, mixers_text, state_shapes_text
    from kvsim.lessons.l05_hybrids.views import hybrid_view, short_context_view, state_update_view
    assert mixers_text({"mamba": 28, "full": 4}) == "28 mamba, 4 full"
    assert state_shapes_text((("conv", (3, 8192)), ("ssm", (8192, 16)))) == "conv 3×8192 + ssm 8192×16"
    assert state_shapes_text((("ssm", (2560,)),)) == "ssm 2560"
    view = state_update_view("jamba-v0.1")  # Jamba's Mamba layer: d_conv 4 - 1 = 3 rows of 2 × 4096 channels
    assert view.ax.get_title() == ("jamba-v0.1: a mamba layer keeps conv 3×8192 + ssm 8192×16 elements, "
                                   "updated in place")
    plt.close(view.figure)
    view = hybrid_view("jamba-v0.1", 262_144, 1)
    assert view.ax.get_title() == "jamba-v0.1: 28 mamba, 4 full; batch 1, bf16"
    assert view.ax.get_ylabel() == "cache per sequence (MiB, log)" and CACHE_UNIT == "MiB"
    plt.close(view.figure)
    view = short_context_view()
    assert view.ax.get_ylabel() == "cache per sequence (MiB, log)"
    plt.close(view.figure)
