"""Checks a model runs on its inputs before it changes any cache: token ids, and every layer's cache.

Contract
- :func:`check_tokens`: token ids are a 2-D (B, L) integer array (MLX or numpy integers; floats are
  refused, never truncated) with every id in [0, vocab_size); returns an ``mx.array``.
- :func:`check_caches`: the caches a model is given belong to it, checked for EVERY layer before any
  layer writes, so a failed call changes nothing: one entry per layer; the cache class its layer kind
  takes (full: KVCache / QuantizedKVCache / PagedKVCache; sliding: RotatingKVCache or a windowed
  QuantizedKVCache with the layer's window; chunked: ChunkedKVCache with the layer's chunk; mla:
  LatentCache / QuantizedKVCache; recurrent: RecurrentStateCache with the layer's state shapes; none:
  None), and for a cache that already holds tokens the geometry its first update fixed (batch, KV heads,
  head dims, dtype). ``None`` for any layer is the no-cache path of that layer. A :class:`Rows` entry is
  checked row by row (batch 1 each). Errors: ValueError naming the layer and the field.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ..cache.base import dtype_name
from ..cache.chunked import ChunkedKVCache
from ..cache.latent import LatentCache
from ..cache.paged import PagedKVCache
from ..cache.quantized import QuantizedKVCache
from ..cache.recurrent import RecurrentStateCache
from ..cache.rotating import RotatingKVCache
from ..cache.standard import KVCache
from .layers import Rows

# cache classes each layer kind accepts
ACCEPTED = {"full": (KVCache, QuantizedKVCache, PagedKVCache), "sliding": (RotatingKVCache, QuantizedKVCache),
            "chunked": (ChunkedKVCache,), "mla": (LatentCache, QuantizedKVCache),
            "recurrent": (RecurrentStateCache,), "none": ()}
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
    low, high = mx.min(tokens).item(), mx.max(tokens).item()
    if low < 0 or high >= vocab_size:
        raise ValueError(f"token ids must be in [0, {vocab_size}) (vocab_size), got {low if low < 0 else high}")
    return tokens


def _stored(cache) -> dict | None:
    """Geometry fixed by a cache's first update ({B, H, k_dim, v_dim, dtype}), or None while empty."""
    geom = getattr(cache, "_geom", None)
    if geom:
        return geom
    keys = getattr(cache, "keys", None)
    if isinstance(keys, mx.array):
        B, H, _, k_dim = keys.shape
        return {"B": B, "H": H, "k_dim": k_dim, "v_dim": cache.values.shape[3], "dtype": keys.dtype}
    return None


def _expected(layer) -> dict:
    """What a layer writes: KV heads and head dims (MLA: one shared head, latent and RoPE-key widths)."""
    if layer.kind == "mla":
        return {"H": 1, "k_dim": layer.kv_lora_rank, "v_dim": layer.qk_rope_head_dim}
    return {"H": layer.num_key_value_heads, "k_dim": layer.head_dim, "v_dim": layer.v_head_dim}


def _check_one(i: int, layer, cache, batch: int, dtype) -> None:
    where = f"caches[{i}] ({layer.kind} layer)"
    if not isinstance(cache, ACCEPTED[layer.kind]):
        names = ", ".join(c.__name__ for c in ACCEPTED[layer.kind]) or "None"
        raise ValueError(f"{where} is a {type(cache).__name__}; accepted: {names}")
    if layer.kind == "recurrent":
        if cache.batch != batch:
            raise ValueError(f"{where}: batch must be {batch} (tokens.shape[0]), got {cache.batch}")
        if dict(cache.shapes) != {n: tuple(s) for n, s in layer.state_shapes}:
            raise ValueError(f"{where}: state shapes must be {dict(layer.state_shapes)}, got {dict(cache.shapes)}")
        return
    window = layer.sliding_window if layer.kind == "sliding" else None
    if isinstance(cache, RotatingKVCache) and cache.window != window:
        raise ValueError(f"{where}: the ring's window must be sliding_window {window}, got {cache.window}")
    if isinstance(cache, QuantizedKVCache) and cache.max_size != window:
        raise ValueError(f"{where}: max_size must be {window}, got {cache.max_size}")
    if isinstance(cache, ChunkedKVCache) and cache.chunk_size != layer.attention_chunk_size:
        raise ValueError(f"{where}: chunk_size must be attention_chunk_size {layer.attention_chunk_size}, "
                         f"got {cache.chunk_size}")
    stored = _stored(cache)
    if stored is None:
        return
    want = {"B": batch, **_expected(layer), "dtype": dtype}
    labels = {"B": "batch", "H": "KV heads", "k_dim": "key width", "v_dim": "value width", "dtype": "dtype"}
    for key, label in labels.items():
        if want[key] is not None and stored[key] != want[key]:
            have, need = stored[key], want[key]
            if key == "dtype":
                have, need = dtype_name(have), dtype_name(need)
            raise ValueError(f"{where}: {label} must be {need} for this model, got {have} (another model's cache?)")


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
                _check_one(i, layer, row, 1, dtype)
        else:
            _check_one(i, layer, cache, batch, dtype)
