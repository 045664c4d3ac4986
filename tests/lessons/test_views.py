"""The lesson views registered in kvsim.lessons.VIEWS: each resolves lazily to its own lesson, builds, draws
data (not an empty Axes) and renders a PNG of the figure's size that is not one flat colour."""

import io

import numpy as np
import pytest
from PIL import Image

from kvsim.lessons import VIEWS

NAMES = ["step_grid", "seed_figure", "head_sharing", "mla", "masks", "ring_link", "kind_share", "channel_quant",
         "draft_round", "tokens_fed_log", "copy_bytes", "cascade_bytes", "split_k", "admission", "engine_batch"]


@pytest.mark.parametrize("name", NAMES)
def test_lesson_views_are_registered(name):
    view = VIEWS[name]()
    assert VIEWS[name].__module__.startswith("kvsim.lessons.l") and VIEWS[name].__module__.endswith(".views")
    png = view.png()
    assert png.startswith(b"\x89PNG")
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    width, height = view.fig.canvas.get_width_height()
    assert image.shape == (height, width, 3)
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 2  # something besides the background was drawn
    assert view.lines() and any(np.size(d) for d in view.lines())  # the Axes carry data
    assert any(ax.get_title() or ax.texts for ax in view.fig.axes)


def test_views_has_every_name_once_and_resolves_each_to_a_callable():
    assert len(set(VIEWS)) == len(VIEWS) == 36
    assert all(callable(VIEWS[name]) for name in VIEWS)
    with pytest.raises(KeyError):
        VIEWS["no such view"]
