"""Shared test helpers for the dense cache layouts: seeded K/V, position-valued K/V, and the
hypothesis state machine that drives a cache and the naive reference in lockstep."""

import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule


def random_kv(S, B=1, H=2, D=4, Dv=3, dtype=mx.float32, seed=0):
    """Seeded K (B, H, S, D) and V (B, H, S, Dv)."""
    rng = np.random.default_rng(seed)
    k = mx.array(rng.standard_normal((B, H, S, D)).astype(np.float32)).astype(dtype)
    v = mx.array(rng.standard_normal((B, H, S, Dv)).astype(np.float32)).astype(dtype)
    return k, v


def position_kv(S, start=0):
    """K = V = the absolute position of each token, so a fetched slot names its token."""
    k = mx.broadcast_to(mx.arange(start, start + S, dtype=mx.float32)[None, None, :, None], (1, 1, S, 2))
    return k, k


class LockstepMachine(RuleBasedStateMachine):
    """Updates of 1..30 tokens, trims of 0..6 and save/load round trips on ``self.ls`` (a
    :class:`kvsim.cache.reference.Lockstep`); subclasses build it in an ``@initialize`` rule."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.saves = 0

    @precondition(lambda self: hasattr(self, "ls"))
    @rule(S=st.one_of(st.just(1), st.integers(1, 30)), seed=st.integers(0, 2**16))
    def update(self, S, seed):
        self.ls.update(S, seed)

    @precondition(lambda self: hasattr(self, "ls"))
    @rule(n=st.integers(0, 6))
    def trim(self, n):
        self.ls.trim(n)

    @precondition(lambda self: hasattr(self, "ls"))
    @rule()
    def save_load(self):
        self.saves += 1
        self.ls.save_load(Path(self.dir.name) / f"c{self.saves}.safetensors")

    def teardown(self):
        self.dir.cleanup()
