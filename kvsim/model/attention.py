"""Softmax attention layers with a per-head K/V cache: MHA, GQA, MQA, sliding window, chunked.

Contract
- One class, :class:`Attention`, built from a :class:`~kvsim.calc.config.LayerSpec` of kind
  ``full``, ``sliding`` or ``chunked``. The variant follows from the geometry:
  MHA when ``num_key_value_heads == num_attention_heads``, MQA when it is 1, GQA in between
  (``group_size = num_attention_heads // num_key_value_heads`` query heads share one KV head).
- Shapes: x (B, L, hidden) -> q (B, H, L, D), k (B, n_kv_heads, L, D), v (B, n_kv_heads, L, D_v).
- RoPE is applied at ``cache.offset`` BEFORE ``cache.update_and_fetch``, so positions are baked
  into the cached keys; ``use_rope=False`` (Llama 4's global layers) skips it (NoPE).
  ``partial_rotary_factor`` rotates only the first fraction of each head (Qwen3-Next, Griffin);
  base ``rope_theta``. Scale head_dim^-1/2, or ``query_pre_attn_scalar``^-1/2 where set (Gemma).
  All three are typed fields of the :class:`~kvsim.calc.config.ModelSpec` the layer belongs to.
- ``step(x, cache, kv_dtype)``: the decode fast path (L = 1, a KVCache for a full layer or a
  RotatingKVCache for a sliding one, ``fast_cache``): the same result as ``__call__`` with fewer host
  calls and ops; ``__call__`` stays the readable reference (tests/test_step_build_fast_paths.py).
- ``kv_dtype`` (an mx dtype or None = the compute dtype) is what K/V are stored as; attention
  math stays in the compute dtype.
- ``cache=None`` is the no-cache baseline: the layer sees the whole sequence and builds its own
  causal / window / chunk mask (:func:`~kvsim.model.layers.reference_mask`).
- ``cache`` may be a :class:`~kvsim.model.layers.Rows`: row r is a separate sequence with its own
  cache; projections run batched, attention runs per row (row isolation) through
  :func:`~kvsim.model.layers.attend_cached`, which hands Rows to :func:`kvsim.cache.dispatch.attend_batched`.
- The layer never reads a cache's storage itself: it calls ``cache.attend`` and the cache picks dense
  SDPA, quantized or paged block-table attention (:meth:`kvsim.cache.base.BaseCache.attend`).
"""

from __future__ import annotations

import operator

import mlx.core as mx
import mlx.nn as nn

from ..cache.rotating import RotatingKVCache
from ..cache.standard import KVCache
from ..calc.config import LayerSpec, ModelSpec
from .layers import Rows, WeightInit, attend, attend_cached, reference_mask, rope, transposed

__all__ = ["Attention"]

_WEIGHTS = operator.itemgetter("wq", "wk", "wv", "wo")   # what the decode fast path reads (transposed once)


class Attention(nn.Module):
    """Multi-head attention over a K/V cache of ``num_key_value_heads`` heads."""

    def __init__(self, layer: LayerSpec, spec: ModelSpec, init: WeightInit):
        super().__init__()
        hidden_size, num_attention_heads = spec.hidden_size, spec.num_attention_heads
        if not layer.has_kv_heads:
            raise ValueError(f"Attention needs a full, sliding or chunked layer, got {layer.kind!r}")
        if num_attention_heads % layer.num_key_value_heads:
            raise ValueError(f"num_attention_heads {num_attention_heads} must be a multiple of "
                             f"num_key_value_heads {layer.num_key_value_heads}")
        self.n_heads = num_attention_heads
        self.n_kv_heads = layer.num_key_value_heads
        self.head_dim, self.v_head_dim = layer.head_dim, layer.v_head_dim
        self.window = layer.sliding_window if layer.kind == "sliding" else None
        self.chunk = layer.attention_chunk_size if layer.kind == "chunked" else None
        rotary = int(layer.head_dim * spec.partial_rotary_factor) // 2 * 2
        self.rope_dims = rotary if layer.use_rope else 0
        self.rope_base = spec.rope_theta
        # Gemma scales by query_pre_attn_scalar^-1/2; everyone else by head_dim^-1/2
        self.scale = float(spec.query_pre_attn_scalar or layer.head_dim) ** -0.5
        self.wq = init.linear(self.n_heads * self.head_dim, hidden_size)
        self.wk = init.linear(self.n_kv_heads * self.head_dim, hidden_size)
        self.wv = init.linear(self.n_kv_heads * self.v_head_dim, hidden_size)
        self.wo = init.linear(hidden_size, self.n_heads * self.v_head_dim)
        # the cache class whose decode step :meth:`step` serves (None: always the reference path)
        self.fast_cache = {"full": KVCache, "sliding": RotatingKVCache}.get(layer.kind)

    @property
    def variant(self) -> str:
        """'MHA', 'GQA' or 'MQA', from n_kv_heads vs n_heads."""
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    def _split_heads(self, x: mx.array, heads: int, dim: int) -> mx.array:
        B, L, _ = x.shape
        return x.reshape(B, L, heads, dim).transpose(0, 2, 1, 3)   # (B, heads, L, dim)

    def __call__(self, x: mx.array, cache=None, kv_dtype=None) -> mx.array:
        B, L, _ = x.shape
        q = self._split_heads(x @ self.wq.T, self.n_heads, self.head_dim)
        k = self._split_heads(x @ self.wk.T, self.n_kv_heads, self.head_dim)
        v = self._split_heads(x @ self.wv.T, self.n_kv_heads, self.v_head_dim)
        if isinstance(cache, Rows):
            out = self._attend_rows(q, k, v, cache, kv_dtype)
        else:
            out = self._attend_one(q, k, v, cache, kv_dtype)
        return out.transpose(0, 2, 1, 3).reshape(B, L, -1) @ self.wo.T

    def step(self, x: mx.array, cache, kv_dtype=None) -> mx.array:
        """:meth:`__call__` for a decode step (x (B, 1, hidden), one cache of the kind ``fast_cache``): the
        same numbers with fewer host calls and ops. With L = 1, (B, 1, H·D) already lies in memory as
        (B, H, 1, D), so one reshape splits the heads (no transpose), and one merges them back; the cache
        stores and attends through :meth:`~kvsim.cache.base.BaseCache.attend_step`."""
        B, dims = x.shape[0], self.rope_dims
        wq_t, wk_t, wv_t, wo_t = transposed(self, _WEIGHTS)
        q = (x @ wq_t).reshape(B, self.n_heads, 1, self.head_dim)
        k = (x @ wk_t).reshape(B, self.n_kv_heads, 1, self.head_dim)
        v = (x @ wv_t).reshape(B, self.n_kv_heads, 1, self.v_head_dim)
        if dims:
            offset = cache.offset
            q = mx.fast.rope(q, dims, traditional=False, base=self.rope_base, scale=1.0, offset=offset)
            k = mx.fast.rope(k, dims, traditional=False, base=self.rope_base, scale=1.0, offset=offset)
        if kv_dtype is not None:
            k, v = k.astype(kv_dtype), v.astype(kv_dtype)
        out = cache.attend_step(q, k, v, self.scale)                     # (B, H, 1, D_v)
        return out.reshape(B, 1, -1) @ wo_t

    def _attend_one(self, q, k, v, cache, kv_dtype):
        """All B rows share one cache (or none): (B, H, L, D) -> (B, H, L, D_v)."""
        L = q.shape[2]
        offset = 0 if cache is None else cache.offset
        q = rope(q, self.rope_dims, self.rope_base, offset)
        k = rope(k, self.rope_dims, self.rope_base, offset)
        if cache is None:
            mask = reference_mask(L, L, 0, self.window, self.chunk)
            return attend(q, k, v, self.scale, mask)
        return attend_cached(q, k, v, cache, self.scale, kv_dtype)

    def _attend_rows(self, q, k, v, rows: Rows, kv_dtype):
        """Row r is its own sequence: RoPE at its own offset, its own cache and mask."""
        if len(rows) != q.shape[0]:
            raise ValueError(f"Rows holds {len(rows)} caches but the batch has {q.shape[0]} rows")
        offsets = mx.array([c.offset for c in rows.caches])
        q = rope(q, self.rope_dims, self.rope_base, offsets)   # per-row positions
        k = rope(k, self.rope_dims, self.rope_base, offsets)
        return attend_cached(q, k, v, rows, self.scale, kv_dtype)
