"""Lesson 02 (how big is it): KV curves, the memory split, the seed figure and their views.

The lesson pictures: each plot draws its data, and each view's numbers come from kvsim.
"""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.calc import capacity
from kvsim.calc.registry import load_model
from kvsim.lessons.l02_how_big.plots import plot_kv_with_marks
from kvsim.lessons.l02_how_big.views import draw_seed_figure, spaced_ticks


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


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
