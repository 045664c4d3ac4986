"""Every interactive view: each control at its minimum, maximum and default redraws the figure."""

import inspect

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
    at_default = view.lines()
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
        assert _same(view.lines(), at_default), f"{name}: {key} back at its default draws another figure"
    assert len(view.redraw_seconds) >= 1 + 2 * len(view.controls)  # min and max always differ


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_controls_start_at_the_factory_defaults(name):
    # ipywidgets clamps a value outside a slider's range without a word: the control would then show
    # (and draw) something other than what the lesson asked for
    factory = VIEWS[name]
    asked = {k: p.default for k, p in inspect.signature(factory).parameters.items()}
    view = factory()
    assert view.values() == {k: asked[k] for k in view.controls}
