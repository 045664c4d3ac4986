"""MLX caches with real arrays: the protocol (:mod:`.base`) and one module per layout.

Layouts: KVCache (standard), RotatingKVCache (sliding window), ChunkedKVCache (Llama 4 chunks),
QuantizedKVCache (``mx.quantize`` storage), LatentCache (MLA), RecurrentStateCache (fixed
state), PagedKVCache (fixed-size blocks of a shared PagedKVPool, whose storage and per-layer
offsets are :mod:`.paged_store`); CachePool owns per-sequence cache sets; make_caches picks one
cache per layer. TurboQuantKVCache (:mod:`.turboquant`): K/V rotated by a randomized Hadamard
transform before scalar quantization, rotated back on read.
Attention: the model calls ``cache.attend`` (rows: :func:`.dispatch.attend_batched`) and the cache
picks how to read its storage; partial attention and the log-sum-exp merge shared by split-K,
cascade (:mod:`.cascade`) and the paged block-table read: :mod:`.partials`.
Shapes: (B, n_kv_heads, T, head_dim). Save/load: :mod:`.io` (safetensors, no pickle); attention over what a
cache returns: :mod:`.sdpa`.
"""

from ..calc.extras import require_mlx

require_mlx(__name__)  # one ImportError line naming the mlx extra, before any module here imports mlx

from .base import BaseCache  # noqa: E402
from .cascade import cascade_attention, cascade_reference  # noqa: E402
from .chunked import ChunkedKVCache  # noqa: E402
from .dispatch import attend_batched  # noqa: E402
from .factory import make_caches  # noqa: E402
from .io import load_cache, load_caches, save_cache, save_caches  # noqa: E402
from .latent import LatentCache  # noqa: E402
from .paged import PagedKVCache, PagedKVPool  # noqa: E402
from .partials import attention_partial, merge_partials, split_k_attention  # noqa: E402
from .pool import CachePool  # noqa: E402
from .quantized import QuantizedKVCache  # noqa: E402
from .recurrent import RecurrentStateCache  # noqa: E402
from .rotating import RotatingKVCache  # noqa: E402
from .standard import KVCache  # noqa: E402
from .turboquant import RandomizedHadamard, TurboQuantKVCache  # noqa: E402

__all__ = ["BaseCache", "KVCache", "RotatingKVCache", "ChunkedKVCache", "QuantizedKVCache",
           "LatentCache", "RecurrentStateCache", "PagedKVCache", "PagedKVPool", "CachePool", "make_caches",
           "TurboQuantKVCache", "RandomizedHadamard", "save_cache", "load_cache", "save_caches", "load_caches",
           "attend_batched", "cascade_attention", "cascade_reference", "attention_partial", "merge_partials",
           "split_k_attention"]
