"""Lesson 00/01 helpers: positions-fed curves, a real decode with and without a cache, the CLI runner."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.calc.tokens_fed import CACHED, UNCACHED, fed_curves, fed_rows, tokens_fed
from kvsim.cli import run_cli
from kvsim.measure.cache_speedup import decode_with_and_without_cache
from kvsim.model import build_model, toy_spec
from kvsim.widgets.recompute import draw_decode_time, draw_tokens_fed
from kvsim.widgets.start import draw_slider_demo


def test_seed_table_1000_plus_1000():
    rows = fed_rows(1000, 1000)
    assert [r["sum over 1,000 steps"] for r in rows] == [1_499_500, 1_999]


def test_fed_curves_quadratic_and_linear():
    a, curves = fed_curves(100, 400, points=5)
    assert a.tolist() == [0, 100, 200, 300, 400]
    assert curves[CACHED].tolist() == [0, 100 + 99, 100 + 199, 100 + 299, 100 + 399]
    un = curves[UNCACHED]
    assert un[-1] == sum(100 + k - 1 for k in range(1, 401))
    # second differences of the uncached curve are constant (quadratic), of the cached curve zero (linear)
    assert len(set(np.diff(un, 2)[1:].tolist())) == 1 and np.diff(un, 2)[1] > 0
    assert np.all(np.diff(curves[CACHED], 2)[1:] == 0)


def test_draw_tokens_fed_plots_both_curves():
    fig, ax = plt.subplots()
    draw_tokens_fed(ax, 1000, 1000)
    ys = [line.get_ydata()[-1] for line in ax.get_lines()[:2]]
    assert ys == [1_499_500, 1_999]


@pytest.fixture(scope="module")
def comparison():
    model = build_model(toy_spec("gqa"), seed=0)
    return decode_with_and_without_cache(model, prompt_tokens=8, answer_tokens=12, seed=1, progress=False)


def test_real_decode_counts_match_formula_and_answers_agree(comparison):
    assert comparison.same_tokens()
    assert comparison.max_logit_difference() < 1e-4
    rows = {r["mode"]: r for r in comparison.rows()}
    assert rows[UNCACHED]["positions fed (counted)"] == tokens_fed(8, 12, False) == 12 * 8 + 66
    assert rows[CACHED]["positions fed (counted)"] == tokens_fed(8, 12, True) == 19
    assert comparison.uncached.caches is None and comparison.cached.caches is not None


def test_trace_rows_measured_bytes_equal_formula(comparison):
    rows = comparison.trace_rows(steps=(0, 1, 2, 50))
    assert [r["step"] for r in rows] == [0, 1, 2, 11]
    assert rows[0]["phase"] == "prefill" and rows[0]["positions fed"] == 8
    assert all(r["positions fed"] == 1 for r in rows[1:])
    for r in rows:
        assert r["used_bytes (measured)"] == r["kv_bytes (formula)"] > 0
    assert rows[1]["used_bytes (measured)"] - rows[0]["used_bytes (measured)"] == memory.bytes_per_token(
        comparison.spec, comparison.kv_dtype)


def test_cumulative_seconds_and_plot(comparison):
    a, seconds = comparison.cumulative_seconds()
    assert a[0] == 0 and a[-1] == 12
    for y in seconds.values():
        assert y[0] == 0 and np.all(np.diff(y) > 0)
    assert seconds[UNCACHED][-1] == pytest.approx(comparison.seconds()[UNCACHED])
    fig, ax = plt.subplots()
    draw_decode_time(ax, comparison)
    assert len(ax.get_lines()) == 2


def test_decode_rejects_bad_lengths():
    model = build_model(toy_spec("mqa"), seed=0)
    with pytest.raises(ValueError, match="answer_tokens"):
        decode_with_and_without_cache(model, 4, 0, progress=False)


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
