"""Out-of-order ring slots are harmless: attention over a ring read in storage order equals
attention over the same window read in temporal ("linearized") order.

Contract
- Two real :class:`~kvsim.cache.RotatingKVCache` of the same window and sinks, one with
  ``ordered=True`` (returns the window oldest first, as seed 000's ring "linearizes" it) and one
  with ``ordered=False`` (returns the ring as stored, mlx-lm's way), are fed the same seeded keys
  and values one decode step at a time. RoPE is applied to each key at its own position BEFORE it
  is written, so a key carries its position wherever its slot is; each query attends through
  :func:`~kvsim.cache.sdpa.sdpa` with the mask the cache gives (``visibility_mask``).
- :func:`ring_order_check` returns, per step, the key positions each cache returned and the
  largest |difference| of the two attention outputs (float32; softmax is a sum over keys, so
  only floating-point summation order can differ).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ..cache import RotatingKVCache
from ..cache.sdpa import sdpa
from ..model.layers import rope


@dataclass(frozen=True)
class RingOrderCheck:
    """Per decode step: positions returned by each cache, and max |out_ordered − out_stored|."""

    ordered_positions: tuple
    stored_positions: tuple
    max_abs_difference: np.ndarray

    def reordered_steps(self) -> int:
        """Steps at which the stored order differed from the temporal order."""
        return sum(list(a) != list(b) for a, b in zip(self.ordered_positions, self.stored_positions))


def ring_order_check(steps: int = 24, window: int = 6, sinks: int = 0, heads: int = 2, head_dim: int = 16,
                     rope_theta: float = 10_000.0, seed: int = 0) -> RingOrderCheck:
    """Decode ``steps`` tokens into an ordered and a storage-order ring; compare attention at every step."""
    caches = (RotatingKVCache(window + sinks, keep=sinks), RotatingKVCache(window + sinks, keep=sinks, ordered=False))
    kq, kk, kv = mx.random.split(mx.random.key(seed), 3)
    q = mx.random.normal((1, heads, steps, head_dim), key=kq)
    k = mx.random.normal((1, heads, steps, head_dim), key=kk)
    v = mx.random.normal((1, heads, steps, head_dim), key=kv)
    positions: tuple[list, list] = ([], [])
    diffs = []
    for t in range(steps):
        q_t = rope(q[:, :, t:t + 1], head_dim, rope_theta, t)
        k_t = rope(k[:, :, t:t + 1], head_dim, rope_theta, t)   # RoPE before the write
        outs = []
        for cache, pos in zip(caches, positions):
            pos.append(np.array(cache.key_positions(1)).tolist())
            mask = cache.visibility_mask(1)
            keys, values = cache.update_and_fetch(k_t, v[:, :, t:t + 1])
            outs.append(sdpa(q_t, keys, values, mask))
        diffs.append(float(mx.abs(outs[0] - outs[1]).max()))
    return RingOrderCheck(tuple(positions[0]), tuple(positions[1]), np.array(diffs))
