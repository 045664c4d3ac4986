"""MLX caches with real arrays: the protocol (:mod:`.base`) and one module per layout.

Layouts: KVCache (standard), RotatingKVCache (sliding window), ChunkedKVCache (Llama 4 chunks),
QuantizedKVCache (``mx.quantize`` storage), LatentCache (MLA), RecurrentStateCache (fixed
state), PagedKVCache (fixed-size blocks of a shared PagedKVPool, whose storage and per-layer
offsets are :mod:`.paged_store`); CachePool owns per-sequence cache sets; make_caches picks one
cache per layer. TurboQuantKVCache (:mod:`.turboquant`): K/V rotated by a randomized Hadamard
transform before scalar quantization, rotated back on read.
Shapes: (B, n_kv_heads, T, head_dim). Save/load: :mod:`.io` (safetensors, no pickle); attention over what a
cache returns: :mod:`.sdpa`.
"""

from .base import BaseCache
from .chunked import ChunkedKVCache
from .factory import make_caches
from .io import load_cache, load_caches, save_cache, save_caches
from .latent import LatentCache
from .paged import PagedKVCache, PagedKVPool
from .pool import CachePool
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache
from .turboquant import RandomizedHadamard, TurboQuantKVCache

__all__ = ["BaseCache", "KVCache", "RotatingKVCache", "ChunkedKVCache", "QuantizedKVCache",
           "LatentCache", "RecurrentStateCache", "PagedKVCache", "PagedKVPool", "CachePool", "make_caches", "TurboQuantKVCache", "RandomizedHadamard",
           "save_cache", "load_cache", "save_caches", "load_caches"]
