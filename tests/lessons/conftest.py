"""Fixtures shared by the lessons' tests."""

import matplotlib.pyplot as plt
import pytest


@pytest.fixture
def ax():
    """A fresh Axes on its own figure, closed after the test."""
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)
