"""Fixtures shared by the lessons' tests."""

import matplotlib.pyplot as plt
import pytest


@pytest.fixture
def ax():
    """A fresh Axes on its own figure, closed after the test."""
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


# `make test-mpl-oldest` runs the view tests again on the oldest matplotlib kvsim supports. There, a lesson test that
# draws nothing (pure data, MLX measurements) would only repeat the unit stage: KVSIM_DRAWING_TESTS_ONLY=1 keeps the
# tests that draw, those that take the `ax` fixture or whose code names a plot, a view, a figure or matplotlib.
DRAWING_WORDS = ("ax", "plot", "draw", "view", "fig", "png", "matplotlib", "plt")


def _draws(item) -> bool:
    import inspect
    import re

    if "ax" in getattr(item, "fixturenames", ()):
        return True
    source = inspect.getsource(item.function)
    return any(re.search(rf"\b{w}\w*", source) for w in DRAWING_WORDS)


def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("KVSIM_DRAWING_TESTS_ONLY") != "1":
        return
    keep = [i for i in items if "tests/lessons/" not in str(i.fspath).replace(os.sep, "/") or _draws(i)]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep
