"""Every interactive view: each control at its minimum, maximum and default redraws the figure."""

import ipywidgets as widgets
import numpy as np
import pytest

from kvsim.widgets import VIEWS


def _extremes(control):
    if isinstance(control, (widgets.SelectionSlider, widgets.Dropdown, widgets.ToggleButtons)):
        options = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return options[0], options[-1]
    return control.min, control.max


def _same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.allclose(x, y, equal_nan=True) for x, y in zip(a, b))


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_every_control_min_max_default_changes_the_figure(name):
    view = VIEWS[name]()
    for key, control in view.controls.items():
        default = control.value
        lo, hi = _extremes(control)
        control.value = lo
        at_lo = view.lines()
        control.value = hi
        at_hi = view.lines()
        control.value = default
        assert at_lo and at_hi, f"{name}: nothing drawn"
        assert not _same(at_lo, at_hi), f"{name}: control {key} at min and max draws the same data"
        assert _same(view.lines(), view.lines())
    assert len(view.redraw_seconds) >= 1 + 2 * len(view.controls)  # min and max always differ


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_defaults_lie_inside_ranges(name):
    view = VIEWS[name]()
    for control in view.controls.values():
        if hasattr(control, "min"):
            assert control.min <= control.value <= control.max
