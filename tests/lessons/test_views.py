"""The lesson views registered in kvsim.lessons.VIEWS: every name once, each a callable. That each resolves to
its own lesson's views.py, builds at its defaults, draws data and renders a PNG of the figure's size that is not
one flat colour: tests/test_widgets.py (one build per view for all of it)."""

import pytest

from kvsim.lessons import VIEWS


def test_views_has_every_name_once_and_resolves_each_to_a_callable():
    assert len(set(VIEWS)) == len(VIEWS) == 36
    assert all(callable(VIEWS[name]) for name in VIEWS)
    with pytest.raises(KeyError):
        VIEWS["no such view"]
