"""Does a cache fit a layer? The per-layer check that loading a file and running a model share.

Contract
- :data:`ACCEPTED`: the cache classes each layer kind takes (full: KVCache / QuantizedKVCache /
  PagedKVCache; sliding: RotatingKVCache, a QuantizedKVCache with max_size = the window or a paged
  sliding store of the window; chunked: ChunkedKVCache with the layer's chunk or a paged chunked store; mla: LatentCache / QuantizedKVCache; recurrent:
  RecurrentStateCache with the layer's state shapes; none: no cache).
- :func:`check_layer_cache`: ValueError naming the layer and the field when a cache does not fit its
  layer: its class (kvsim's caches; a duck-typed one such as mlx-lm's is checked by geometry only), window / chunk, and, once it holds tokens, the geometry its first update fixed (KV
  heads, key and value widths; batch and dtype when the caller gives them). Nothing is modified.
"""

from __future__ import annotations

import mlx.core as mx

from .base import BaseCache, dtype_name
from .chunked import ChunkedKVCache
from .latent import LatentCache
from .paged import PagedKVCache
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache

# cache classes each layer kind accepts
ACCEPTED = {"full": (KVCache, QuantizedKVCache, PagedKVCache),
            "sliding": (RotatingKVCache, QuantizedKVCache, PagedKVCache),
            "chunked": (ChunkedKVCache, PagedKVCache), "mla": (LatentCache, QuantizedKVCache),
            "recurrent": (RecurrentStateCache,), "none": ()}

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


_EXPECTED: dict = {}  # id(layer) -> (layer, (H, k_dim, v_dim)); the layer is kept, so its id is not reused


def _expected_tuple(layer) -> tuple:
    """_expected(layer) as (H, k_dim, v_dim), computed once per LayerSpec object (hashing a frozen
    dataclass hashes every field, slower than the check itself, hence the identity key)."""
    hit = _EXPECTED.get(id(layer))
    if hit is not None and hit[0] is layer:
        return hit[1]
    if len(_EXPECTED) >= 4096:
        _EXPECTED.clear()
    e = _expected(layer)
    _EXPECTED[id(layer)] = (layer, (e["H"], e["k_dim"], e["v_dim"]))
    return _EXPECTED[id(layer)][1]


def _fits_quickly(layer, cache, batch, dtype) -> bool:
    """True only when :func:`check_layer_cache` would pass: the decode hot path for kvsim's three dense
    classes, exactly typed, in their own kind of layer. False means "not sure": the full check decides."""
    t, kind = type(cache), layer.kind
    if t is KVCache:
        ok = kind == "full"
    elif t is LatentCache:
        ok = kind == "mla"
    elif t is RotatingKVCache:
        ok = kind == "sliding" and cache.window == layer.sliding_window
    else:
        return False
    g = cache._geom
    if not ok or g is None:
        return ok and cache.keys is None                    # an empty cache fixes no geometry yet
    H, k_dim, v_dim = _expected_tuple(layer)
    return (g["H"] == H and g["k_dim"] == k_dim and g["v_dim"] == v_dim
            and (batch is None or g["B"] == batch) and (dtype is None or g["dtype"] == dtype))


def check_layer_cache(i: int, layer, cache, batch: int | None = None, dtype=None) -> None:
    """ValueError unless ``cache`` fits layer ``i`` (``batch`` / ``dtype`` None: not checked)."""
    if _fits_quickly(layer, cache, batch, dtype):           # the same verdict, a few comparisons
        return
    where = f"caches[{i}] ({layer.kind} layer)"
    # kvsim's own classes are checked by class; a duck-typed cache (mlx-lm's) by its geometry only
    if isinstance(cache, BaseCache) and not isinstance(cache, ACCEPTED[layer.kind]):
        names = ", ".join(c.__name__ for c in ACCEPTED[layer.kind]) or "None"
        raise ValueError(f"{where} is a {type(cache).__name__}; accepted: {names}")
    if layer.kind == "recurrent" and isinstance(cache, RecurrentStateCache):
        if batch is not None and cache.batch != batch:
            raise ValueError(f"{where}: batch must be {batch} (tokens.shape[0]), got {cache.batch}")
        if dict(cache.shapes) != {n: tuple(s) for n, s in layer.state_shapes}:
            raise ValueError(f"{where}: state shapes must be {dict(layer.state_shapes)}, got {dict(cache.shapes)}")
        return
    window = layer.sliding_window if layer.kind == "sliding" else None
    if isinstance(cache, RotatingKVCache) and cache.window != window:
        raise ValueError(f"{where}: the ring's window must be sliding_window {window}, got {cache.window}")
    if isinstance(cache, QuantizedKVCache) and cache.max_size != window:
        raise ValueError(f"{where}: max_size must be {window}, got {cache.max_size}")
    if isinstance(cache, PagedKVCache) and (cache.pool.kind, cache.pool.window) != (layer.kind, layer.window_tokens):
        raise ValueError(f"{where}: the paged pool must be a {layer.kind} store of window {layer.window_tokens}, "
                         f"got a {cache.pool.kind} store of window {cache.pool.window}")
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


