"""Lesson 00/01 helpers: positions-fed curves, a real decode with and without a cache, the CLI runner.


Lesson 00/01 helpers: positions-fed curves, a real decode with and without a cache, the CLI runner.
"""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from matplotlib.collections import QuadMesh

from kvsim.calc import memory
from kvsim.calc.tokens_fed import CACHED, UNCACHED, fed_curves, fed_rows, tokens_fed
from kvsim.calc.units import InputError
from kvsim.lessons.l01_why_a_cache.data import (
    FUTURE,
    NEW,
    PRODUCED,
    READ,
    RECOMPUTED,
    fed_per_step,
    step_grid,
)
from kvsim.lessons.l01_why_a_cache.measure import decode_with_and_without_cache
from kvsim.lessons.l01_why_a_cache.plots import plot_step_grids
from kvsim.lessons.l01_why_a_cache.views import draw_decode_time, draw_tokens_fed
from kvsim.model import build_model, toy_spec


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
    assert f"{comparison.slowdown():.0f}× slower without a cache (measured)" in ax.get_title()


def test_decode_rejects_bad_lengths():
    model = build_model(toy_spec("mqa"), seed=0)
    with pytest.raises(ValueError, match="answer_tokens"):
        decode_with_and_without_cache(model, 4, 0, progress=False)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12))
def test_step_grid_counts_equal_tokens_fed(p, a):
    for cached in (False, True):
        grid = step_grid(p, a, cached)
        assert fed_per_step(grid).sum() == tokens_fed(p, a, cached)
        assert [int(np.flatnonzero(row == PRODUCED)[0]) for row in grid] == [p + k - 1 for k in range(1, a + 1)]
    assert (step_grid(p, a, True) != RECOMPUTED).all() and (step_grid(p, a, False) != READ).all()


def test_step_grid_rows():
    assert step_grid(2, 3, cached=True).tolist() == [[NEW, NEW, PRODUCED, FUTURE, FUTURE],
                                                     [READ, READ, NEW, PRODUCED, FUTURE],
                                                     [READ, READ, READ, NEW, PRODUCED]]
    with pytest.raises(InputError, match="prompt_tokens"):
        step_grid(0, 3, True)




def _meshes(ax):
    return [c for c in ax.collections if isinstance(c, QuadMesh) and c.get_visible()]


def test_step_grids_one_mesh_per_grid(ax):
    grids = {"a": step_grid(2, 3, False), "b": step_grid(2, 3, True)}
    plot_step_grids(ax, grids, 2, {"a": 5, "b": 3})
    assert len(_meshes(ax)) == 2
    assert _meshes(ax)[0].get_array().shape == (3, 5, 4)  # RGBA per cell
    assert _meshes(ax)[0].get_array()[2, 0, 3] < 0.2  # step 3 is still to come: faded
    plot_step_grids(ax, {"a": step_grid(3, 3, False), "b": step_grid(3, 3, True)}, 1, {"a": 3, "b": 3})
    assert len(_meshes(ax)) == 2 and _meshes(ax)[0].get_array().shape == (3, 6, 4)  # a redraw replaces them


def test_step_grid_title_numbers_are_the_data_numbers():
    from kvsim.lessons.l01_why_a_cache.data import step_grid_panels
    from kvsim.lessons.l01_why_a_cache.views import draw_step_grid
    fig, ax = plt.subplots()
    draw_step_grid(ax, step=4, prompt_tokens=5)
    d = step_grid_panels(4, 5, 10)
    assert d["fed_now"] == {"without a cache": 8, "with a cache": 1}          # positions 0..7 vs position 7
    assert d["fed_so_far"] == {"without a cache": 5 + 6 + 7 + 8, "with a cache": 5 + 1 + 1 + 1}
    assert ax.get_title() == (f"prompt 5 tokens; step 4 feeds {d['fed_now']['without a cache']} "
                              f"positions without a cache, {d['fed_now']['with a cache']} with one")
    plt.close(fig)


def test_tokens_fed_titles_and_curves_are_the_data_numbers():
    from kvsim.lessons.l01_why_a_cache.data import fed_curves_log, fed_totals
    from kvsim.lessons.l01_why_a_cache.views import draw_tokens_fed_log
    un, ca, ratio = fed_totals(1000, 1000)
    assert (un, ca) == (1_499_500, 1_999) and ratio == un / ca
    for draw in (draw_tokens_fed, draw_tokens_fed_log):
        fig, ax = plt.subplots()
        draw(ax, 1000, 1000)
        assert ax.get_title() == f"prompt 1,000 tokens: {ratio:,.0f}× more positions without a cache"
        assert {t.get_text() for t in ax.texts} >= {f"{un:,}", f"{ca:,}"}
        plt.close(fig)
    a, curves = fed_curves_log(1000, 1000)
    assert a[0] == 1 and curves[CACHED][0] == curves[UNCACHED][0] == 1000
    fig, ax = plt.subplots()
    draw_tokens_fed_log(ax, 1000, 1000)
    assert [ln.get_ydata().tolist() for ln in ax.get_lines()[:2]] == [curves[UNCACHED].tolist(),
                                                                       curves[CACHED].tolist()]
    plt.close(fig)


def test_fed_log_ylim_worked_by_hand():
    from kvsim.lessons.l01_why_a_cache.data import fed_log_ylim
    from kvsim.lessons.l01_why_a_cache.views import tokens_fed_log_view
    # P = 1,000: from 1,000 / 2 = 500 to 4 × 1,499,500 = 5,998,000 positions
    assert fed_log_ylim(1000, 1_499_500) == (500, 5_998_000)
    view = tokens_fed_log_view(1000, 1000)
    assert view.ax.get_ylim() == (500, 5_998_000)
    plt.close(view.figure)


# --- the premise, the seams, the in-place write, the per-step plot (issue 20) ---------------------------------

def test_fed_each_step_sums_to_tokens_fed_and_is_linear_per_step():
    from kvsim.lessons.l01_why_a_cache.data import fed_each_step
    k, curves = fed_each_step(7, 11)
    assert list(k) == list(range(1, 12))
    assert curves[UNCACHED].sum() == tokens_fed(7, 11, cached=False)
    assert curves[CACHED].sum() == tokens_fed(7, 11, cached=True)
    assert list(np.diff(curves[UNCACHED])) == [1] * 10 and list(curves[CACHED][1:]) == [1] * 10
    with pytest.raises(ValueError, match="answer_tokens"):
        fed_each_step(7, 0)


def test_draw_fed_each_step_is_linear_and_labels_the_totals():
    from kvsim.lessons.l01_why_a_cache.views import draw_fed_each_step
    fig, ax = plt.subplots()
    draw_fed_each_step(ax, 1000, 1000)
    assert ax.get_yscale() == "linear"
    assert "1,499,500" in ax.get_title() and "1,999" in ax.get_title()
    y = ax.get_lines()[0].get_ydata()
    assert y[0] == 1000 and y[-1] == 1999
    plt.close(fig)


@pytest.fixture(scope="module")
def toy():
    return build_model(toy_spec("gqa"), seed=0)


def test_a_past_key_never_changes_without_a_cache(toy):
    import mlx.core as mx
    from kvsim.cache import make_caches
    from kvsim.lessons.l01_why_a_cache.measure import keys_without_cache
    seq = list(range(3, 43))
    k2, k4 = keys_without_cache(toy, seq[:33]), keys_without_cache(toy, seq[:35])
    assert mx.array_equal(k2[0, :, 3], k4[0, :, 3]).item()
    assert not mx.array_equal(k2[0, :, 3], k2[0, :, 4]).item()     # positions differ: not a trivial check
    caches = make_caches(toy.spec)                                   # the cached path stores the same keys
    toy(mx.array([seq[:33]]), caches)
    assert mx.allclose(caches[-1].keys[..., :33, :], k2, atol=1e-5).item()


def test_attention_seams_offsets_and_equal_output(toy):
    from kvsim.lessons.l01_why_a_cache.measure import attention_seams
    rows = {r[""]: r for r in attention_seams(toy, list(range(3, 20)))}
    assert rows["tokens fed to the layer"]["without a cache"] == 17 and rows["tokens fed to the layer"]["with a cache"] == 1
    assert rows["RoPE offset of the first token fed"]["with a cache"] == 16
    assert rows["keys attended by the newest query"]["with a cache"] == 17
    assert float(rows["newest token's output: max |difference|"]["with a cache"]) < 1e-5
    with pytest.raises(ValueError, match="tokens"):
        attention_seams(toy, [3])


def test_inplace_step_seconds_measures_both_modes():
    from kvsim.lessons.l01_why_a_cache.measure import inplace_step_seconds
    t = inplace_step_seconds(context_tokens=64, steps=3, num_key_value_heads=2, head_dim=8)
    assert set(t) == {True, False} and all(v > 0 for v in t.values())


def test_cached_run_bytes_is_the_allocated_view():
    from kvsim.lessons.l01_why_a_cache.measure import cached_run_bytes
    m = cached_run_bytes(10, 5)
    assert m["offset"] == 14 and m["used_bytes"] == 14 * 1024 and m["nbytes"] == 256 * 1024


def test_exercise_01_4_is_what_a_real_run_measures():
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l01_why_a_cache.measure import cached_run_bytes
    m = cached_run_bytes(100, 200)
    assert m["nbytes"] == EXERCISES["01.4"].solve().value and m["used_bytes"] == 299 * 1024
