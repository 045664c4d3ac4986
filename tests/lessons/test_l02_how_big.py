"""Lesson 02 (how big is it): KV curves, the memory split, the seed figure and their views; each view's
title carries the data function's numbers."""

import matplotlib.pyplot as plt
import numpy as np

from kvsim.calc import capacity, memory
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.calc.units import format_bytes
from kvsim.calc.weights import weights_bytes
from kvsim.lessons.l02_how_big.data import (k_tokens_label, kv_size_numbers, memory_split, seed_figure_numbers,
                                            spaced_ticks, weights_label)
from kvsim.lessons.l02_how_big.plots import plot_kv_with_marks
from kvsim.lessons.l02_how_big.views import draw_capacity, draw_kv_vs_tokens, draw_seed_figure, seed_figure_view




def test_seed_figure_marks_the_crossovers(ax):
    draw_seed_figure(ax, "llama-3.1-8b", "bf16")
    spec = load_model("llama-3.1-8b")
    assert "122,533" in ax.get_title() and capacity.crossover_tokens(spec) == 122_533
    dots = {tuple(ln.get_xydata()[0]) for ln in ax.get_lines() if len(ln.get_xdata()) == 1}
    assert {x for x, _ in dots} >= {122_533, 30_634, 8192, 131_072}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8K", "32K", "128K"]
    assert spaced_ticks(10**6) == [8192, 131_072, 262_144, 524_288]


def test_plot_kv_with_marks_draws_weights_level(ax):
    t = np.arange(0, 101, 10)
    plot_kv_with_marks(ax, t, {"m": ("model", t * 2**20)}, 50 * 2**20, "w", {"50": (50, "model")}, {}, [8, 32],
                       unit="MiB")
    levels = [ln for ln in ax.get_lines() if np.allclose(ln.get_ydata(), 50)]
    assert levels  # the weights line at 50 MiB


def test_memory_split_adds_up_to_the_device():
    total, parts, n = memory_split("llama-3-8b", "A100 40GB", 8192, 0.9)
    acc, spec = get_accelerator("A100 40GB"), load_model("llama-3-8b")
    assert total == acc.memory_bytes and sum(parts.values()) == total
    assert parts["weights (bf16)"] == weights_bytes(spec, "bf16")
    assert n == capacity.max_concurrent_sequences(spec, 8192, acc.memory_bytes, 0.9) and n > 0
    assert parts[f"KV of {n} sequences"] == n * memory.kv_bytes(spec, 8192)


def test_capacity_title_is_the_data_number(ax):
    draw_capacity(ax, "llama-3-8b", "A100 40GB", 8192, 0.9)
    _, _, n = memory_split("llama-3-8b", "A100 40GB", 8192, 0.9)
    assert ax.get_title() == f"llama-3-8b on A100 40GB: {n} sequences of 8,192 tokens"


def test_kv_size_numbers_and_title(ax):
    d = kv_size_numbers("llama-3.1-8b", 131_072, 2, "fp8")
    spec = load_model("llama-3.1-8b")
    assert d["at_bytes"] == memory.kv_bytes(spec, 131_072, 2, "fp8") == 2 * 2**33  # 128K in fp8 = 8 GiB each
    assert d["per_token_bytes"] == 65_536 and d["weights_bytes"] == weights_bytes(spec, "bf16")
    assert len(d["curves"]) == 2  # GQA model: its MHA twin is drawn too
    draw_kv_vs_tokens(ax, "llama-3.1-8b", 131_072, 2, "fp8")
    assert ax.get_title() == f"{d['name']}: {format_bytes(d['per_token_bytes'])} per token, fp8"


def test_seed_figure_title_is_the_data_crossover(ax):
    d = seed_figure_numbers("llama-3.1-8b", "bf16")
    assert d["crossover_tokens"]["model"] == 122_533 and d["marks"] == {8192: 2**30, 131_072: 2**34}
    assert d["ticks"] == spaced_ticks(d["end"])
    draw_seed_figure(ax, "llama-3.1-8b", "bf16")
    assert ax.get_title() == f"{d['name']}, bf16 KV: the cache equals the weights at 122,533 tokens"


def test_seed_figure_labels_are_the_data_labels_worked_by_hand():
    # 8,192 // 1,024 = 8; 131,072 // 1,024 = 128
    assert (k_tokens_label(8192), k_tokens_label(131_072)) == ("8K", "128K")
    # 3 GiB = 3,221,225,472 B = 3.22 GB
    assert weights_label(3 * 2**30) == "bf16 weights: 3.00 GiB (3.2 GB)"
    # Llama 3.1 8B: 8,030,261,248 parameters x 2 B = 16,060,522,496 B = 14.9575 GiB = 16.06 GB
    view = seed_figure_view()
    texts = [t.get_text() for t in view.ax.texts]
    assert texts[0] == "bf16 weights: 14.96 GiB (16.1 GB)"
    assert texts[-2:] == ["1 GiB at 8K", "16 GiB at 128K"]  # 131,072 B/token x 8,192 = 2**30; x 131,072 = 2**34
    view.controls["model"].value = "llama-3-70b"  # 70,553,706,496 parameters x 2 B = 131.42 GiB = 141.1 GB
    assert view.ax.texts[0].get_text() == "bf16 weights: 131.42 GiB (141.1 GB)"
    plt.close(view.figure)


def test_engines_all_numbers_are_the_engine_tables():
    from kvsim.calc.engines_all import engine_table
    from kvsim.lessons.l02_how_big.data import ENGINE_MODELS, engines_all_numbers

    tables = engines_all_numbers(prompt_tokens=8192)
    assert tuple(tables) == ENGINE_MODELS
    for name, t in tables.items():
        assert t == engine_table(load_model(name), 8192, 0)
        for c in t["engines"]:
            assert sum(c["bytes_by_kind"].values()) == c["total_bytes"]
    cols = {c["engine"]: c for c in tables["llama-3-8b"]["engines"]}
    assert {c["total_bytes"] for c in cols.values()} == {memory.kv_bytes(load_model("llama-3-8b"), 8192)} == {2**30}
    # kvsim's column is kvsim's own calculator (every state in its reference dtype)
    qwen = load_model("qwen3-next-80b-a3b")
    kvsim_col = tables["qwen3-next-80b-a3b"]["engines"][0]
    assert kvsim_col["engine"] == "kvsim" and kvsim_col["bytes_by_kind"]["recurrent"] == memory.fixed_state_bytes(qwen)
    # vLLM holds the whole prompt chunk in Gemma 3's sliding layers right after prefill
    gemma = {c["engine"]: c["bytes_by_kind"]["sliding"] for c in tables["gemma-3-27b"]["engines"]}
    assert gemma["vllm"] > 7 * gemma["kvsim"]


def test_draw_engines_all_bars_carry_the_bytes():
    import matplotlib.pyplot as plt

    from kvsim.lessons.l02_how_big.data import engines_all_numbers
    from kvsim.lessons.l02_how_big.views import draw_engines_all

    fig, axes = plt.subplots(5, 1)
    try:
        draw_engines_all(axes)
        t = engines_all_numbers()["jamba-v0.1"]
        ax = axes[3]
        widths = [p.get_width() for p in ax.patches]
        expected = [c["bytes_by_kind"][k] / 2**20 for c in t["engines"] for k in t["kinds"]]
        assert np.allclose(widths, expected)
        top_down = sorted(zip(ax.get_yticks(), [lbl.get_text() for lbl in ax.get_yticklabels()]), reverse=True)
        assert [label for _, label in top_down] == [c["engine"] for c in t["engines"]]  # kvsim on top
        assert {txt.get_text().strip() for txt in ax.texts} == {format_bytes(c["total_bytes"]) for c in t["engines"]}
    finally:
        plt.close(fig)


def test_exercise_02_4_prediction_is_what_the_real_caches_hold():
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l02_how_big.measure import prompt_caches_nbytes

    m = prompt_caches_nbytes("llama-3.2-1b", 1000)
    assert m["nbytes"] == EXERCISES["02.4"].solve().value == memory.allocated_bytes(load_model("llama-3.2-1b"), 1000)
    assert m["used_bytes"] == 1000 * memory.bytes_per_token(load_model("llama-3.2-1b")) < m["nbytes"]
