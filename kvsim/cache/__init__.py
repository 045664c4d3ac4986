"""MLX caches with real arrays: the protocol (:mod:`.base`) and one module per layout.

Exports (final state): KVCache, RotatingKVCache, ChunkedKVCache, QuantizedKVCache,
LatentCache, RecurrentStateCache, CachePool, make_caches.
"""

from .base import BaseCache
