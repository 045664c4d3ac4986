"""The machine's limits, measured: how fast it copies memory and how fast it multiplies matrices.

Contract
- :func:`measure_copy_bandwidth` copies a float32 numpy array of ``nbytes`` into another
  ``repeats`` times (host memory, whatever MLX device is in use). Each copy reads ``nbytes`` and
  writes ``nbytes``, so it moves ``2·nbytes`` (STREAM's convention); ``bytes_per_s = 2·nbytes /
  fastest copy``.
- :func:`measure_device_bandwidth` does the same with MLX on its default device (the GPU's own
  memory on Metal or CUDA): ``y = x + 0`` over an array of ``nbytes``, which reads and writes
  ``nbytes`` each; one ``mx.eval`` per copy (it returns when the device is done).
- :func:`measure_matmul_throughput`: an n×n by n×n product on MLX's default device, 2·n³ FLOPs
  per product (one multiply and one add per term), ``rate = 2·n³ / fastest product``.
  :func:`measure_host_matmul_throughput`: the same float32 product with numpy on the CPU (numpy's
  BLAS: OpenBLAS or Accelerate), what the CPU's cores do with a tuned library.
- The fastest run counts, not the mean: the limit is what the hardware can do, other work on the
  machine only slows it. Wall-clock numbers depend on the machine and on its load; nothing here is
  hard-coded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..calc.units import InputError, positive_int

__all__ = ["Throughput", "measure_copy_bandwidth", "measure_device_bandwidth", "measure_matmul_throughput",
           "measure_host_matmul_throughput"]

MiB = 2**20


@dataclass(frozen=True)
class Throughput:
    """``work`` units (bytes moved, or FLOPs) done once per timed run; ``seconds`` of every run."""

    what: str
    work: int
    seconds: tuple[float, ...]

    @property
    def best_seconds(self) -> float:
        return min(self.seconds)

    @property
    def rate(self) -> float:
        """work / fastest run (bytes/s, or FLOP/s)."""
        return self.work / self.best_seconds


def _check_size(nbytes, repeats) -> int:
    if positive_int("nbytes", nbytes) < 4096:
        raise InputError(f"nbytes must be an integer >= 4096, got {nbytes!r}")
    return positive_int("repeats", repeats)


def _check_matmul(n, repeats) -> int:
    if positive_int("n", n) < 16:
        raise InputError(f"n must be an integer >= 16, got {n!r}")
    return positive_int("repeats", repeats)


def _timed_runs(run, repeats: int, warmups: int = 1) -> tuple[float, ...]:
    """Seconds of each of ``repeats`` calls of ``run()`` (host work: returns when done), after ``warmups``."""
    for _ in range(warmups):
        run()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return tuple(seconds)


def measure_copy_bandwidth(nbytes: int = 256 * MiB, repeats: int = 5, seed: int = 0) -> Throughput:
    """Copy bandwidth in bytes/s: 2·nbytes (read + write) / fastest of ``repeats`` numpy copies."""
    repeats = _check_size(nbytes, repeats)
    n = nbytes // 4                                        # float32 elements
    src = np.full(n, seed + 0.5, dtype=np.float32)        # any values: a copy moves the same bytes (written
    dst = np.empty_like(src)                               # here, so every page is real; no random draw to wait for)
    seconds = _timed_runs(lambda: np.copyto(dst, src), repeats)  # the warm-up touches every page
    return Throughput("copy bytes (read + write)", 2 * n * 4, seconds)


def _timed_evals(make, repeats: int) -> tuple[float, ...]:
    """Seconds of ``mx.eval(make())`` for each of ``repeats`` runs, after one untimed warm-up."""
    import mlx.core as mx

    mx.eval(make())                                         # compile / allocate before timing
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = make()
        mx.eval(out)
        seconds.append(time.perf_counter() - start)
        del out
    return tuple(seconds)


def measure_device_bandwidth(nbytes: int = 256 * MiB, repeats: int = 5, dtype: str = "fp32") -> Throughput:
    """Copy bandwidth of MLX's default device: 2·nbytes (read + write) / fastest ``x + 0``."""
    import mlx.core as mx

    from ..cache.base import mx_dtype

    repeats = _check_size(nbytes, repeats)
    dt = mx_dtype(dtype)
    n = nbytes // dt.size
    x = mx.full((n,), 0.5, dtype=dt)                      # any values: ``x + 0`` moves the same bytes
    mx.eval(x)
    seconds = _timed_evals(lambda: x + 0, repeats)
    return Throughput(f"device copy bytes (read + write), {dtype}", 2 * n * dt.size, seconds)


def measure_matmul_throughput(n: int = 2048, repeats: int = 5, dtype: str = "fp32") -> Throughput:
    """FLOP/s of MLX's default device: 2·n³ / fastest n×n @ n×n product in ``dtype``."""
    import mlx.core as mx

    from ..cache.base import mx_dtype

    repeats = _check_matmul(n, repeats)
    dt = mx_dtype(dtype)
    a, b = (mx.random.uniform(-1, 1, (n, n), key=mx.random.key(i)).astype(dt) for i in (1, 2))
    mx.eval(a, b)
    seconds = _timed_evals(lambda: a @ b, repeats)
    return Throughput(f"matmul FLOPs, {dtype}", 2 * n**3, seconds)


def measure_host_matmul_throughput(n: int = 1024, repeats: int = 5, seed: int = 0) -> Throughput:
    """FLOP/s of numpy on the CPU: 2·n³ / fastest float32 n×n @ n×n product (after three warm-ups)."""
    repeats = _check_matmul(n, repeats)
    a, b = np.random.default_rng(seed).random((2, n, n), dtype=np.float32)
    seconds = _timed_runs(lambda: a @ b, repeats, warmups=3)  # warm-ups: BLAS threads start, pages touched
    return Throughput("host matmul FLOPs, fp32 (numpy)", 2 * n**3, seconds)
