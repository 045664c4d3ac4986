"""Save and load caches as safetensors: arrays plus string metadata, never pickle.

Contract
- ``save_caches(path, caches, metadata)`` writes a list of caches (one per layer, None allowed for
  layers without a cache) to one ``.safetensors`` file with :func:`mx.save_safetensors`:
  arrays ``"<layer>.<i>"`` (the cache's ``state``, nested tuples flattened as ``"<layer>.<i>.<j>"``)
  and string metadata ``"kvsim.layers"``, ``"<layer>.class"`` (class name or ``"None"``),
  ``"<layer>.meta_state"`` (a JSON list of the cache's meta_state strings) and ``"user.<key>"``.
- ``load_caches(path) -> (caches, metadata)`` rebuilds each cache with ``cls.from_state(state,
  meta_state)``; the class is looked up by name in :data:`CACHE_CLASSES`, an explicit table, so
  only kvsim cache classes can ever be constructed. Loaded caches have the same offset, held tokens,
  capacity and nbytes as the saved ones (``state`` holds only the filled rows; ``from_state``
  re-allocates the slack).
- ``save_cache`` / ``load_cache``: the same for a single cache.
- Errors: ValueError with the file and the bad field; writing goes to ``path`` directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .base import BaseCache
from .chunked import ChunkedKVCache
from .latent import LatentCache
from .paged import PagedKVCache
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache

FORMAT = "kvsim-cache-1"
# class name as written in a file -> the class that rebuilds it; nothing else can be loaded
CACHE_CLASSES = {cls.__name__: cls for cls in (KVCache, RotatingKVCache, ChunkedKVCache, QuantizedKVCache,
                                               LatentCache, RecurrentStateCache, PagedKVCache)}


def _path(path) -> str:
    p = str(path)
    if not p.endswith(".safetensors"):
        raise ValueError(f"path must end with .safetensors, got {p!r}")
    return p


def save_caches(path, caches, metadata: dict | None = None) -> None:
    """Write ``caches`` (list of kvsim caches or None) and string ``metadata`` to ``path``."""
    path = _path(path)
    arrays: dict[str, mx.array] = {}
    meta = {"kvsim.format": FORMAT, "kvsim.layers": str(len(caches))}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"metadata must map str to str, got {key!r}: {type(value).__name__}")
        meta[f"user.{key}"] = value
    for i, cache in enumerate(caches):
        if cache is None:
            meta[f"{i}.class"] = "None"
            continue
        if not isinstance(cache, BaseCache):
            raise ValueError(f"caches[{i}] must be a kvsim cache or None, got {type(cache).__name__}")
        meta[f"{i}.class"] = type(cache).__name__
        meta[f"{i}.meta_state"] = json.dumps([str(m) for m in cache.meta_state])
        state = list(cache.state)
        meta[f"{i}.n_state"] = str(len(state))
        arrays.update((f"{i}.{k.lstrip('.')}", a) for k, a in tree_flatten(state))
    mx.save_safetensors(path, arrays, metadata=meta)


def _layer_state(arrays: dict, i: int) -> list:
    """The state list of layer i (nested tuples come back as lists)."""
    prefix = f"{i}."
    items = [(k[len(prefix):], v) for k, v in arrays.items() if k.startswith(prefix)]
    if not items:
        return []
    items.sort(key=lambda kv: [int(p) for p in kv[0].split(".")])
    return tree_unflatten(items)


def load_caches(path) -> tuple[list, dict]:
    """Read a file written by :func:`save_caches`; returns (caches, user metadata)."""
    path = _path(path)
    if not Path(path).exists():
        raise ValueError(f"cache file {path!r} does not exist")
    arrays, meta = mx.load(path, return_metadata=True)
    if meta.get("kvsim.format") != FORMAT:
        raise ValueError(f"{path} is not a kvsim cache file (kvsim.format is {meta.get('kvsim.format')!r})")
    caches = []
    for i in range(int(meta["kvsim.layers"])):
        name = meta.get(f"{i}.class")
        if name == "None":
            caches.append(None)
            continue
        if name not in CACHE_CLASSES:
            raise ValueError(f"{path}: layer {i} class {name!r} is not a kvsim cache "
                             f"({', '.join(sorted(CACHE_CLASSES))})")
        state = _layer_state(arrays, i)
        if len(state) != int(meta[f"{i}.n_state"]):
            raise ValueError(f"{path}: layer {i} has {len(state)} state arrays, expected {meta[f'{i}.n_state']}")
        caches.append(CACHE_CLASSES[name].from_state(state, json.loads(meta[f"{i}.meta_state"])))
    user = {k[len("user."):]: v for k, v in meta.items() if k.startswith("user.")}
    return caches, user


def save_cache(path, cache, metadata: dict | None = None) -> None:
    """Write one cache (see :func:`save_caches`)."""
    if not isinstance(cache, BaseCache):
        raise ValueError(f"cache must be a kvsim cache, got {type(cache).__name__}")
    save_caches(path, [cache], metadata)


def load_cache(path, cls: type | None = None):
    """Read a file holding exactly one cache; ValueError if it is not a ``cls`` (when given)."""
    caches, _ = load_caches(path)
    if len(caches) != 1 or caches[0] is None:
        raise ValueError(f"{path} holds {len(caches)} layers; use load_caches for a list")
    if cls is not None and not isinstance(caches[0], cls):
        raise ValueError(f"{path} holds a {type(caches[0]).__name__}, not a {cls.__name__}")
    return caches[0]
