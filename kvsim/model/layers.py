"""Building blocks shared by every layer of the MLX model: weights, RoPE, masks, the FFN.

Contract
- Weights come from :class:`WeightInit`, a numpy generator seeded once: the same seed gives the
  same weights, independent of MLX's and numpy's global random state. :class:`DeviceWeightInit`
  draws the same distributions with MLX on its default device, straight in the model's dtype
  (other numbers, also deterministic): seconds instead of minutes for an 8B model on a GPU.
- :func:`rope` applies rotary position embeddings to the first ``dims`` features of
  (B, H, L, D) at absolute positions ``offset + arange(L)``; ``offset`` is an int, or an
  int array (B,) when every row is a different sequence (batched decode).
- :func:`reference_mask` is the mask a cache-free forward pass uses: causal, limited to a
  sliding window of W tokens (key j visible to query i when i - W < j <= i) or to the
  query's chunk of C tokens (j // C == i // C). Caches build the same masks themselves.
- :class:`Rows` marks one layer's caches for a batch whose rows are separate sequences
  (one cache object per row, each at its own offset), as the CachePool hands them out.
- :func:`attend` runs MLX's fused attention (:func:`kvsim.cache.sdpa.sdpa`) with a given mask;
  :func:`attend_cached` hands the queries and new K/V to ``cache.attend``, and the cache decides
  how to read its storage (:meth:`kvsim.cache.base.BaseCache.attend`): a dense cache asks its own
  mask (None when every key it returns is visible: a decode step over a full cache, the current
  chunk, a ring holding exactly its window, so decode takes the fused kernel's no-mask path). :func:`kvsim.cache.sdpa.reference_sdpa` is the same function
  written out (what the lessons show); tests check the two agree.
"""

from __future__ import annotations

import math
import operator
from functools import partial

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..cache.dispatch import attend_any, attend_batched
from ..cache.sdpa import sdpa

__all__ = ["WeightInit", "DeviceWeightInit", "Rows", "rope", "reference_mask", "MLP", "rms_norm", "attend",
           "attend_cached", "transposed", "transpose_for_matmul", "forget_derived", "hands_over"]


class WeightInit:
    """Deterministic weights: successive draws from ``numpy.random.default_rng(seed)``.

    Draws are uniform with the requested standard deviation (U(-a, a), a = std·√3): the shape of
    the distribution does not matter for random-weight decoding, and uniform draws are several
    times faster than Gaussian ones on a CPU (a real-geometry layer can hold 10⁸ weights).
    """

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    def uniform(self, shape, low: float, high: float) -> mx.array:
        """float32 weights drawn uniformly from [low, high)."""
        u = self._rng.random(tuple(shape), dtype=np.float32)
        u *= np.float32(high - low)            # in place: the same float32 numbers as u * (high - low) + low,
        u += np.float32(low)                   # without two temporaries of the weight's size
        return mx.array(u)

    def normal(self, shape, std: float) -> mx.array:
        """Zero-mean weights with standard deviation ``std``."""
        a = std * math.sqrt(3.0)
        return self.uniform(shape, -a, a)

    def linear(self, out_features: int, in_features: int) -> mx.array:
        """A projection weight (out, in) with std 1/sqrt(in): unit-variance outputs."""
        return self.normal((out_features, in_features), 1.0 / math.sqrt(in_features))


class DeviceWeightInit(WeightInit):
    """:class:`WeightInit`'s distributions drawn by ``mx.random`` from a key chain seeded once."""

    def __init__(self, seed: int = 0, dtype=mx.float32):
        self._key, self.dtype = mx.random.key(seed), dtype

    def uniform(self, shape, low: float, high: float) -> mx.array:
        """``dtype`` weights drawn uniformly from [low, high) on MLX's default device."""
        self._key, key = mx.random.split(self._key)
        return mx.random.uniform(low, high, tuple(shape), dtype=self.dtype, key=key)


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


def attend(q: mx.array, keys: mx.array, values: mx.array, scale: float, mask) -> mx.array:
    """softmax(scale·q kᵀ | mask) v, fused: q (B, H, L, D), keys/values (B, n_kv_heads, T, ·), mask (L, T)."""
    return sdpa(q, keys, values, mask, scale)


def attend_cached(q: mx.array, k: mx.array, v: mx.array, cache, scale: float, kv_dtype=None) -> mx.array:
    """Store k, v (B, n_kv_heads, L, ·) in ``cache`` as ``kv_dtype`` and let the cache attend: ``cache.attend``.

    The cache picks the read path by how it stores its state (dense SDPA with its own mask: None for
    a decode step, the fused kernel's fast path; ``mx.quantized_matmul`` for a QuantizedKVCache; the
    block table for a PagedKVCache), so this code is the same for every layout. ``kv_dtype`` None
    stores the compute dtype. ``cache`` may be a :class:`Rows`: row r goes to its own cache
    (:func:`kvsim.cache.dispatch.attend_batched`).
    """
    dtype = kv_dtype or k.dtype
    k, v = k.astype(dtype), v.astype(dtype)
    if isinstance(cache, Rows):                      # row r: its own sequence, cache and read path
        return attend_batched(q, k, v, cache.caches, scale)
    return attend_any(cache, q, k, v, scale)         # mlx-lm's caches have no attend


def transposed(module: nn.Module, weights: operator.itemgetter) -> tuple:
    """``(w.T for w in weights(module))``, made once per set of weight arrays and kept beside the module (a
    plain attribute, never a parameter), so a decode step's fast path builds no transpose op per projection
    (MLX's transpose is a view: the same numbers, no copy). ``weights`` is an ``operator.itemgetter`` of two
    or more weight names (one C call reads them all). When any of them is a new array, all are transposed
    again; :func:`forget_derived` drops what is kept (``Model.update``, hence ``set_dtype`` and
    ``load_weights``, calls it)."""
    ws, memo = weights(module), module.__dict__.get("_transposed")
    if memo is None or not all(map(operator.is_, ws, memo[0])):
        memo = module.__dict__["_transposed"] = (ws, tuple(map(transpose_for_matmul, ws)))
    return memo[1]


def hands_over(built: int, every: int) -> bool:
    """With ``built`` blocks of a decode step built, hand them to the device now (``mx.async_eval``)? Every
    ``every`` blocks (0: never); callers ask only while blocks remain (the last go with the step's evaluation)."""
    return every > 0 and built > 0 and built % every == 0


CONTIGUOUS_MAX_BYTES = 32 * 2**20   # on a CPU, weights up to this size are kept as a contiguous copy of w.T


def transpose_for_matmul(w: mx.array) -> mx.array:
    """``w.T`` for ``x @ w.T``: a view, or on a CPU (weights up to ``CONTIGUOUS_MAX_BYTES``) a contiguous copy.

    MLX's Linux CPU wheel multiplies through the reference BLAS, whose product with an untransposed right
    operand runs 1.3-1.6x faster than with a transposed one (benchmarks/results/lesson_cells.md) and sums
    every output over the inner dimension in the same order, so the bits are the same
    (tests/test_step_build_fast_paths.py). A GPU reads the view (no second copy of the weights; MLX's CUDA
    GEMV wants the transposed operand), and so does a CPU for larger weights (a model sized to the memory).
    """
    if w.nbytes <= CONTIGUOUS_MAX_BYTES and mx.default_device() == mx.cpu:
        return mx.contiguous(w.T)
    return w.T


DERIVED = ("_transposed", "_uk_uv")   # what the fast paths keep beside a module's weights


def forget_derived(model: nn.Module) -> None:
    """Drop every array the decode fast paths derived from weights (:func:`transposed`, MLA's W_uk/W_uv)."""
    for _, module in model.named_modules():
        for key in DERIVED:
            module.__dict__.pop(key, None)


@partial(mx.compile, shapeless=True)
def swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) · up, compiled into one elementwise kernel (one launch instead of three on a GPU)."""
    return nn.silu(gate) * up


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) · up(x)); (B, L, hidden) -> (B, L, hidden)."""

    def __init__(self, hidden_size: int, intermediate_size: int, init: WeightInit):
        super().__init__()
        self.gate = init.linear(intermediate_size, hidden_size)
        self.up = init.linear(intermediate_size, hidden_size)
        self.down = init.linear(hidden_size, intermediate_size)

    def __call__(self, x: mx.array) -> mx.array:
        return swiglu(x @ self.gate.T, x @ self.up.T) @ self.down.T
