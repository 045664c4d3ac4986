"""MLX caches with real arrays: the protocol (:mod:`.base`) and one module per layout.

Layouts: KVCache (standard), RotatingKVCache (sliding window), ChunkedKVCache (Llama 4 chunks),
QuantizedKVCache (``mx.quantize`` storage), LatentCache (MLA), RecurrentStateCache (fixed
state), PagedKVCache (fixed-size blocks of a shared PagedKVPool, whose storage and per-layer
offsets are :mod:`.paged_store`); CachePool owns per-sequence cache sets; make_caches picks one
cache per layer.
Attention: the model calls ``cache.attend`` (rows: :func:`.dispatch.attend_batched`) and the cache
picks how to read its storage; partial attention and the log-sum-exp merge shared by split-K,
cascade (:mod:`.cascade`) and the paged block-table read: :mod:`.partials`.
Shapes: (B, n_kv_heads, T, head_dim). Save/load: :mod:`.io` (safetensors, no pickle); attention over what a
cache returns: :mod:`.sdpa`.
"""

from .base import BaseCache
from .cascade import cascade_attention, cascade_reference
from .chunked import ChunkedKVCache
from .dispatch import attend_batched
from .factory import make_caches
from .io import load_cache, load_caches, save_cache, save_caches
from .latent import LatentCache
from .paged import PagedKVCache, PagedKVPool
from .partials import attention_partial, merge_partials, split_k_attention
from .pool import CachePool
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache

__all__ = ["BaseCache", "KVCache", "RotatingKVCache", "ChunkedKVCache", "QuantizedKVCache",
           "LatentCache", "RecurrentStateCache", "PagedKVCache", "PagedKVPool", "CachePool", "make_caches",
           "save_cache", "load_cache", "save_caches", "load_caches", "attend_batched", "cascade_attention",
           "cascade_reference", "attention_partial", "merge_partials", "split_k_attention"]
