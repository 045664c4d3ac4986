"""The machine's memory bandwidth, measured: how fast numpy copies a large array.

Contract
- :func:`measure_copy_bandwidth` copies a float32 numpy array of ``nbytes`` into another
  ``repeats`` times. Each copy reads ``nbytes`` and writes ``nbytes``, so it moves ``2·nbytes``
  (STREAM's convention); ``bytes_per_s = 2·nbytes / fastest copy``. The fastest copy counts, not
  the mean: the limit is what the memory system can do, other work on the machine only slows it.
- Wall-clock numbers depend on the machine and on its load; nothing here is hard-coded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..calc.units import InputError, positive_int

__all__ = ["Throughput", "measure_copy_bandwidth"]

MiB = 2**20


@dataclass(frozen=True)
class Throughput:
    """``work`` units (here: bytes moved) done once per timed run; ``seconds`` of every run."""

    what: str
    work: int
    seconds: tuple[float, ...]

    @property
    def best_seconds(self) -> float:
        return min(self.seconds)

    @property
    def rate(self) -> float:
        """work / fastest run (bytes/s)."""
        return self.work / self.best_seconds


def measure_copy_bandwidth(nbytes: int = 256 * MiB, repeats: int = 5, seed: int = 0) -> Throughput:
    """Copy bandwidth in bytes/s: 2·nbytes (read + write) / fastest of ``repeats`` numpy copies."""
    if positive_int("nbytes", nbytes) < 4096:
        raise InputError(f"nbytes must be an integer >= 4096, got {nbytes!r}")
    repeats = positive_int("repeats", repeats)
    n = nbytes // 4                                        # float32 elements
    src = np.random.default_rng(seed).random(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)                                    # touch every page before timing
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        seconds.append(time.perf_counter() - start)
    return Throughput("copy bytes (read + write)", 2 * n * 4, tuple(seconds))
