"""Shared pytest setup for kvsim's tests.

- `kvsim` is importable from a plain source checkout (the repository root goes first on sys.path).
- matplotlib draws with the Agg backend (no display; widgets and plots are tested headless).
  Set through matplotlib.use, not MPLBACKEND, so kernels started by tests keep their inline backend.
- Every test starts from the same random state: numpy's legacy global seed, and MLX's seed when a test
  module has imported MLX (importing MLX here would slow down the pure-arithmetic tests).
- hypothesis: no per-example deadline (2 shared CPU cores make timings noisy) and derandomized, so a
  run is reproducible; failures found are still stored in .hypothesis/ and replayed first.
- `toys`: the toy model of every TOY_KINDS variant (seed 0), built once per session; tests that change
  one (e.g. its MLA path) put it back.
"""

import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

matplotlib.use("Agg")

try:
    from hypothesis import settings

    settings.register_profile("kvsim", deadline=None, derandomize=True, print_blob=True)
    settings.load_profile("kvsim")
except ImportError:  # hypothesis is a test extra; tests that need it import it themselves
    pass

SEED = 0


@pytest.fixture(autouse=True)
def _deterministic_seeds():
    np.random.seed(SEED)
    mx = sys.modules.get("mlx.core")
    if mx is not None:
        mx.random.seed(SEED)
    yield


@pytest.fixture
def rng():
    """A numpy Generator seeded with SEED."""
    return np.random.default_rng(SEED)


@pytest.fixture
def mx_key():
    """An explicit MLX PRNG key seeded with SEED (for mx.random.* calls that take `key=`)."""
    import mlx.core as mx

    return mx.random.key(SEED)


@pytest.fixture(autouse=True)
def _close_figures():
    """Close figures a test left open (only if it used pyplot at all)."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture(scope="session")
def toys():
    """{kind: build_model(toy_spec(kind), seed=0)} for every toy kind, shared by the whole session."""
    from kvsim.model import TOY_KINDS, build_model, toy_spec

    return {kind: build_model(toy_spec(kind), seed=0) for kind in TOY_KINDS}
