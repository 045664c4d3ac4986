"""A naive reference cache for tests: keep every K/V by concatenation, apply the rule by slicing.

Contract
- ``ReferenceCache(rule)`` stores all T tokens ever seen (trim drops the last n, always exactly).
- ``update_and_fetch`` returns the keys/values of every position that at least one of the S new
  queries may see, found by evaluating the visibility rule on all (query, key) pairs: no rings,
  no slots, no arithmetic shortcuts. ``make_mask(N)`` is that same rule, restricted to those keys.
- Rules: ``full`` (k <= q); ``sliding`` with ``max_size``/``keep`` (the ``keep`` first tokens plus
  the ``max_size - keep`` most recent, the query included); ``chunked`` with ``chunk_size``
  (same chunk, k <= q).
- :func:`attention` is plain softmax(Q K^T / sqrt(d), masked) V, for comparing outputs.
Slow on purpose (O(T·S) per call); for tiny test shapes only.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np


def visible(rule: str, q: np.ndarray, k: np.ndarray, max_size=None, keep=0, chunk_size=None):
    """Boolean array: may the query at position q attend to the key at position k?"""
    causal = k <= q
    if rule == "full":
        return causal
    if rule == "sliding":
        recent = q - k < max_size - keep  # the query itself counts as one of the recent tokens
        return causal & ((k < keep) | recent)
    if rule == "chunked":
        return causal & (k // chunk_size == q // chunk_size)
    raise ValueError(f"rule must be full, sliding or chunked, got {rule!r}")


class ReferenceCache:
    """Everything concatenated; the attention rule applied by slicing at each call."""

    def __init__(self, rule: str = "full", **params):
        self.rule, self.params = rule, params
        self.keys = self.values = None  # (B, H, offset, D): every token ever seen
        self.offset = 0

    def _rule(self, n: int):
        """(visible-key positions, mask) for the next n queries."""
        q = np.arange(self.offset, self.offset + n)[:, None]
        k = np.arange(self.offset + n)[None, :]
        vis = visible(self.rule, q, k, **self.params)
        idx = np.nonzero(vis.any(axis=0))[0]
        return idx, vis[:, idx]

    def update_and_fetch(self, keys, values):
        idx, _ = self._rule(keys.shape[2])
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = mx.concatenate([self.keys, keys], axis=2)
            self.values = mx.concatenate([self.values, values], axis=2)
        self.offset += keys.shape[2]
        sel = mx.array(idx.astype(np.int32))
        return mx.take(self.keys, sel, axis=2), mx.take(self.values, sel, axis=2)

    def key_positions(self, n: int) -> np.ndarray:
        return self._rule(n)[0]

    def make_mask(self, n: int) -> mx.array:
        return mx.array(self._rule(n)[1])

    def trim(self, n: int) -> int:
        n = min(n, self.offset)
        self.offset -= n
        if self.keys is not None:
            self.keys = self.keys[..., : self.offset, :]
            self.values = self.values[..., : self.offset, :]
        return n


def attention(queries, keys, values, mask) -> mx.array:
    """softmax(Q K^T / sqrt(d) where mask else -inf) V; shapes (B, H, N, D), (B, H, L, D), (N, L)."""
    scores = (queries @ keys.swapaxes(-1, -2)) / math.sqrt(queries.shape[-1])  # (B, H, N, L)
    scores = mx.where(mask, scores, -mx.inf)
    return mx.softmax(scores, axis=-1) @ values  # (B, H, N, D_v)
