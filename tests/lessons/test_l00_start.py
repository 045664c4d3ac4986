"""Lesson 00 (start here): the slider demo's numbers, its view, and the CLI the lesson runs."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.calc.units import format_bytes
from kvsim.cli import run_cli
from kvsim.lessons.l00_start.data import slider_demo_curve
from kvsim.lessons.l00_start.views import draw_slider_demo


def test_run_cli_matches_the_calculator():
    out = run_cli("kvsim calc llama-3-8b --tokens 8192 --json")
    assert json.loads(out)["kv_bytes"] == memory.kv_bytes(load_model("llama-3-8b"), 8192) == 2**30
    assert "llama-3-8b" in run_cli("models").split()
    err = run_cli("calc llama-3-8b --tokens -1")
    assert err.startswith("kvsim: error:") and len(err.strip().splitlines()) == 1


def test_slider_demo_marks_the_chosen_tokens():
    fig, ax = plt.subplots()
    draw_slider_demo(ax, tokens=8192)
    x, y = ax.get_lines()[1].get_data()
    assert x[0] == 8192 and y[0] == pytest.approx(1.0)  # 8K tokens of Llama 3 8B = 1 GiB




def test_slider_demo_curve_is_the_formula():
    spec = load_model("llama-3-8b")
    d = slider_demo_curve("llama-3-8b", 8192, "bf16", max_tokens=131_072)
    assert d["tokens"][0] == 0 and d["tokens"][-1] == 131_072 and len(d["tokens"]) == 129
    assert np.array_equal(d["kv_bytes"], memory.kv_bytes(spec, d["tokens"], 1, "bf16"))
    assert d["at_bytes"] == 2**30 and d["per_token_bytes"] == 131_072  # 8K tokens = 1 GiB, 128 KiB a token
    assert slider_demo_curve("llama-3-8b", 8192, "fp8")["at_bytes"] == 2**29


def test_slider_demo_title_and_dot_label_are_the_data_numbers():
    fig, ax = plt.subplots()
    draw_slider_demo(ax, tokens=16_384, kv_dtype="fp8")
    d = slider_demo_curve("llama-3-8b", 16_384, "fp8")
    assert ax.get_title() == f"llama-3-8b: {format_bytes(d['per_token_bytes'])} per token" == "llama-3-8b: 64 KiB per token"
    labels = [t.get_text() for t in ax.texts] + [ln.get_label() for ln in ax.get_lines()]
    assert any(f"16,384 tokens: {format_bytes(d['at_bytes'])}" in label for label in labels), labels
    plt.close(fig)


def test_partial_tail_is_what_calc_rounds_up_to():
    from kvsim.lessons.l00_start.data import partial_tail
    d = partial_tail(8100, step=256, block_size=64)
    assert (d["step_slots"], d["empty_step_slots"]) == (8192, 92)
    assert (d["blocks"], d["tokens_in_last_block"], d["empty_in_last_block"]) == (127, 36, 28)
    spec = load_model("llama-3-8b")
    per = memory.bytes_per_token(spec)
    out = run_cli("kvsim calc llama-3-8b --tokens 8100 --block-size 64")
    assert f"{d['step_slots'] * per:,} B" in out and f"{d['blocks'] * 64 * per:,} B" in out
    assert partial_tail(8192, 256, 16)["empty_step_slots"] == 0
    with pytest.raises(ValueError, match="tokens"):
        partial_tail(0)


def test_exercise_00_1_is_what_a_real_cache_measures():
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l00_start.measure import kv_cache_after_prompt
    m = kv_cache_after_prompt(300, "llama-3-8b", "bf16")
    assert m["nbytes"] == EXERCISES["00.1"].solve().value == 512 * 4096 and m["used_bytes"] == 300 * 4096
