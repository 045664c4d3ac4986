"""Building blocks shared by every layer of the MLX model: weights, RoPE, masks, the FFN.

Contract
- Weights come from :class:`KeyStream`, a chain of keys split from ``mx.random.key(seed)``:
  the same seed gives the same weights, independent of MLX's global random state.
- :func:`rope` applies rotary position embeddings to the first ``dims`` features of
  (B, H, L, D) at absolute positions ``offset + arange(L)``; ``offset`` is an int, or an
  int array (B,) when every row is a different sequence (batched decode).
- :func:`reference_mask` is the mask a cache-free forward pass uses: causal, limited to a
  sliding window of W tokens (key j visible to query i when i - W < j <= i) or to the
  query's chunk of C tokens (j // C == i // C). Caches build the same masks themselves.
- :class:`Rows` marks one layer's caches for a batch whose rows are separate sequences
  (one cache object per row, each at its own offset), as the CachePool hands them out.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

__all__ = ["KeyStream", "Rows", "rope", "reference_mask", "MLP", "rms_norm", "attend", "store_dtype"]


class KeyStream:
    """Deterministic weights: a chain of keys split from ``mx.random.key(seed)``, one per draw."""

    def __init__(self, seed: int = 0):
        self._key = mx.random.key(seed)

    def next_key(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub

    def normal(self, shape, std: float) -> mx.array:
        """Gaussian weights N(0, std²) in float32."""
        return mx.random.normal(tuple(shape), key=self.next_key()) * std

    def linear(self, out_features: int, in_features: int) -> mx.array:
        """A projection weight (out, in) with std 1/sqrt(in): unit-variance outputs."""
        return self.normal((out_features, in_features), 1.0 / math.sqrt(in_features))

    def uniform(self, shape, low: float, high: float) -> mx.array:
        return mx.random.uniform(low, high, tuple(shape), key=self.next_key())


class Rows:
    """One layer's caches for a batch of separate sequences: ``caches[r]`` serves row r."""

    def __init__(self, caches):
        self.caches = list(caches)
        if not self.caches:
            raise ValueError("Rows needs at least one cache (one per batch row)")

    def __len__(self):
        return len(self.caches)


def rope(x: mx.array, dims: int, base: float, offset) -> mx.array:
    """Rotate features [0, dims) of x (B, H, L, D) by angle pos·base^(-2i/dims), pos = offset + l."""
    if dims == 0:
        return x
    return mx.fast.rope(x, dims, traditional=False, base=base, scale=1.0, offset=offset)


def reference_mask(queries: int, keys: int, offset: int = 0, window: int | None = None,
                   chunk: int | None = None) -> mx.array:
    """Bool (queries, keys): query i sits at position offset + i, key j at position j.

    causal: j <= i; window W: j > i - W; chunk C: j // C == i // C.
    """
    q_pos = mx.arange(offset, offset + queries)[:, None]
    k_pos = mx.arange(keys)[None]
    mask = k_pos <= q_pos
    if window is not None:
        mask = mask & (k_pos > q_pos - window)
    if chunk is not None:
        mask = mask & ((k_pos // chunk) == (q_pos // chunk))
    return mask


def rms_norm(x: mx.array, weight: mx.array, eps: float = 1e-6) -> mx.array:
    """x / sqrt(mean(x²) + eps) · weight over the last axis."""
    return mx.fast.rms_norm(x, weight, eps)


def store_dtype(cache, compute_dtype):
    """The dtype a cache stores K/V in: its declared ``dtype`` if it has one, else the compute dtype."""
    return getattr(cache, "dtype", None) or compute_dtype


def attend(q: mx.array, keys, values, scale: float, mask, cache=None) -> mx.array:
    """softmax(scale·q kᵀ | mask) v over what a cache returned (dense or quantized)."""
    from ..attention import quantized_sdpa, sdpa

    if isinstance(keys, tuple):
        # QuantizedKVCache: (data, scales, biases) plus optional full-precision recent tokens
        return quantized_sdpa(q, keys, values, mask, scale, **cache.attention_kwargs())
    return sdpa(q, keys, values, mask, scale)


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) · up(x)); (B, L, hidden) -> (B, L, hidden)."""

    def __init__(self, hidden_size: int, intermediate_size: int, init: KeyStream):
        super().__init__()
        self.gate = init.linear(intermediate_size, hidden_size)
        self.up = init.linear(intermediate_size, hidden_size)
        self.down = init.linear(hidden_size, intermediate_size)

    def __call__(self, x: mx.array) -> mx.array:
        return (nn.silu(x @ self.gate.T) * (x @ self.up.T)) @ self.down.T
