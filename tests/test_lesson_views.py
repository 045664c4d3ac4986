"""The lesson pictures: each plot draws its data, and each view's numbers come from kvsim."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import QuadMesh

from kvsim.calc import capacity
from kvsim.calc.draft_round import round_stages
from kvsim.calc.masks import attention_mask
from kvsim.calc.registry import load_model
from kvsim.calc.step_grid import step_grid
from kvsim.plots.cache_grid import plot_step_grids
from kvsim.plots.channel_quant import plot_key_error_maps
from kvsim.plots.draft_round import plot_round
from kvsim.plots.head_sharing import plot_head_sharing, plot_mla_fanout
from kvsim.plots.masks import plot_kind_shares, plot_masks, plot_ring_link
from kvsim.plots.seed_figure import plot_kv_with_marks
from kvsim.widgets import VIEWS
from kvsim.widgets.masks import draw_masks, ordinal
from kvsim.widgets.seed_figure import draw_seed_figure, spaced_ticks


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


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


def test_head_sharing_square_areas(ax):
    groups = np.repeat(np.arange(4), 4)
    plot_head_sharing(ax, groups, {"A": 4.0, "B": 2.0}, {"A": "A", "B": "B"}, highlight="B")
    widths = sorted({round(float(np.ptp(ln.get_xdata())), 6) for ln in ax.get_lines() if len(ln.get_xdata()) == 5})
    assert widths == [2.0, 4.0]


def test_mla_fanout_box_widths_follow_the_lengths(ax):
    plot_mla_fanout(ax, 512, 64, 128, 128)
    widths = [float(np.ptp(ln.get_xdata())) for ln in ax.get_lines() if len(ln.get_xdata()) == 5]
    assert max(widths) == pytest.approx(40) and min(widths) == pytest.approx(40 * 64 / 512)


def test_masks_and_ring_link(ax):
    plot_masks(ax, {"full": attention_mask(6), "w": attention_mask(6, "sliding", window=2)}, query=4)
    assert len(_meshes(ax)) == 2 and _meshes(ax)[1].get_array()[4].tolist().count(1.0) == 2
    ax.clear()
    row = attention_mask(9, "sliding", window=3, sinks=1)[8]
    plot_ring_link(ax, 8, row, np.array([0, 7, 8, 6]), sinks=1)
    assert len(ax.get_lines()) == 2 * int(row.sum())  # each held key joined to its slot and its place


def test_kind_shares_bars(ax):
    plot_kind_shares(ax, {"sliding": {"layers %": 80.0, "bytes %": 2.0}, "full": {"layers %": 20.0, "bytes %": 98.0}})
    widths = sorted(round(p.get_width(), 6) for c in ax.containers for p in c)
    assert widths == [2.0, 20.0, 80.0, 98.0]


def test_key_error_maps_share_a_colour_scale(ax):
    maps = {"|K|": np.ones((4, 8)), "e1": np.full((4, 8), 0.5), "e2": np.full((4, 8), 2.0)}
    plot_key_error_maps(ax, maps)
    ims = ax.get_images()
    assert len(ims) == 3 and ims[1].get_clim() == ims[2].get_clim() == (0, 2.0)


def test_round_picture(ax):
    plot_round(ax, round_stages(10, 3, 1))
    texts = [t.get_text() for t in ax.texts]
    assert "d2 ✗" in texts and "t1" in texts and texts.count("stale") == 2


def test_ordinals_and_mask_title(ax):
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
    draw_masks(ax, token=0)
    assert "token 0 (the 1st token" in ax.get_title()


@pytest.mark.parametrize("name", ["step_grid", "seed_figure", "head_sharing", "mla", "masks", "ring_link",
                                  "kind_share", "channel_quant", "draft_round", "tokens_fed_log"])
def test_lesson_views_are_registered(name):
    view = VIEWS[name]()
    assert view.png().startswith(b"\x89PNG")
