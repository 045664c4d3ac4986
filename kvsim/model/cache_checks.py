"""Checks a model runs on its inputs before it changes any cache: token ids, and every layer's cache.

Contract
- :func:`check_tokens`: token ids are a 2-D (B, L) integer array (MLX or numpy integers; floats are
  refused, never truncated) with every id in [0, vocab_size); returns an ``mx.array``.
- :func:`check_caches`: the caches a model is given belong to it, checked for EVERY layer before any
  layer writes, so a failed call changes nothing: one entry per layer, each fitting its layer
  (:func:`kvsim.cache.checks.check_layer_cache`: class, window, and batch, KV heads, widths, dtype).
  ``None`` for any layer is the no-cache path of that layer. A :class:`Rows` entry is checked row by
  row (batch 1 each). Errors: ValueError naming the layer and the field.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ..cache.base import dtype_name
from ..cache.checks import check_layer_cache
from .layers import Rows

_HOST_RANGE_MAX = 256  # ids checked on the host up to this many (B·L); more: reduced on the device first
_INTEGER_DTYPES = (mx.int8, mx.int16, mx.int32, mx.int64, mx.uint8, mx.uint16, mx.uint32, mx.uint64)


def check_tokens(tokens, vocab_size: int) -> mx.array:
    """(B, L) integer token ids in [0, vocab_size) as an mx.array; ValueError otherwise."""
    if isinstance(tokens, np.ndarray):
        if tokens.dtype.kind not in "iu":
            raise ValueError(f"tokens must be integer token ids, got a numpy array of {tokens.dtype}")
        tokens = mx.array(tokens)
    if not isinstance(tokens, mx.array):
        raise ValueError(f"tokens must be a (B, L) mx.array of token ids, got {type(tokens).__name__}")
    if tokens.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"tokens must be integer token ids, got dtype {dtype_name(tokens.dtype)} "
                         "(floats are not truncated)")
    if tokens.ndim != 2 or tokens.size == 0:
        raise ValueError(f"tokens must be (B, L) token ids with B, L >= 1, got shape {tuple(tokens.shape)}")
    low, high = _token_range(tokens)
    if low < 0 or high >= vocab_size:
        raise ValueError(f"token ids must be in [0, {vocab_size}) (vocab_size), got {low if low < 0 else high}")
    return tokens


def _token_range(tokens: mx.array) -> tuple[int, int]:
    """(min, max) of the ids. A decode step's few ids are read on the host (``tolist``: no kernel, and
    no wait at all for ids already evaluated, e.g. built from a list); a prompt's are reduced on the
    device and read in one host sync, not two (on a GPU each ``.item()`` is a launch and a wait)."""
    if tokens.size <= _HOST_RANGE_MAX:
        rows = tokens.tolist()                                   # (B, L) nested lists
        return min(min(r) for r in rows), max(max(r) for r in rows)
    low, high = mx.stack([mx.min(tokens), mx.max(tokens)]).tolist()
    return low, high


def check_caches(spec, caches, batch: int, dtype) -> None:
    """ValueError naming the first layer whose cache this model cannot use; checks all before any write."""
    if len(caches) != len(spec.layers):
        raise ValueError(f"caches must hold one entry per layer ({len(spec.layers)}), got {len(caches)}")
    for i, (layer, cache) in enumerate(zip(spec.layers, caches)):
        if cache is None:
            continue
        if isinstance(cache, Rows):
            if len(cache) != batch:
                raise ValueError(f"caches[{i}]: Rows holds {len(cache)} caches but the batch has {batch} rows")
            for row in cache.caches:
                check_layer_cache(i, layer, row, 1, dtype)
        else:
            check_layer_cache(i, layer, cache, batch, dtype)
