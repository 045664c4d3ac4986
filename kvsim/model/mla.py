"""Multi-head latent attention (DeepSeek-V2/V3): cache one latent per token, shared by all heads.

Contract
- Per token the layer caches ``latent`` (kv_lora_rank = r, RMS-normed) and ``k_pe``
  (qk_rope_head_dim, RoPE applied), in a LatentCache: ``update_and_fetch(latent (B,1,S,r),
  k_pe (B,1,S,rope))`` returns everything cached so far, (B,1,T,r) and (B,1,T,rope).
- ``kv_b`` (H·(nope+v), r) expands the latent into per-head keys (``W_uk``: nope rows per head)
  and values (``W_uv``: v_head_dim rows per head).
- Two numerically equal ways to attend (fp32 allclose), chosen by ``path``:
  * ``materialized``: k_h = [W_uk,h · latent ; k_pe], v_h = W_uv,h · latent for every head and
    cached token, then ordinary attention (what a cold prefill does);
  * ``absorbed``: W_uk is folded into the query, q̃_h = W_uk,hᵀ q_nope,h (length r), so the scores
    are q̃_h·latent + q_pe·k_pe and the output is W_uv,h (Σ p · latent): attention runs over the
    latent itself and the per-head K/V are never built (how DeepSeek decodes);
  * ``auto`` (default): decided per call by :func:`kvsim.calc.mla_paths.use_absorbed_mla` (the
    seed's ``use_absorbed_mla``): the cheaper of the two on the H200's roofline for this layer's
    widths, L query tokens and C cached tokens (decode and a short verify block after a long cache
    read the latent; a cold prefill at DeepSeek-V3 sizes materializes). ``machine`` (FLOP/s, bytes/s)
    replaces the H200 in that decision; ``last_path`` records the path the last call took.
- ``split_kv`` (default 1 = off; the seed's ``MLXCEL_MLA_SPLIT_KV``): the absorbed path cuts the
  latent range into that many chunks, attends per chunk and merges the partials by log-sum-exp
  (:func:`kvsim.cache.partials.merge_partials`, the split-K merge); dense latents only (a
  quantized latent is read unsplit).
- The absorbed path is written with explicit matmuls, not ``mx.fast.scaled_dot_product_attention``:
  the fused decode kernels cover head dims up to 128 (CUDA) or 256 (Metal), not a 512-wide latent
  head, so MLX would compose the same matmuls anyway (and an H200 measurement of the fused call
  with 576/512-wide heads took 14.5 ms at 128K keys). Written out, the H heads are folded into the
  rows of one matmul (the latent is read once per sequence, batch included) and the RoPE scores
  enter through ``mx.addmm`` (no separate pass over the scores). Measured on this CPU the two
  formulations tie; ``benchmarks/bench_roofline.py`` times both on any device (``mla_kernels``).
- A quantized latent cache (QuantizedKVCache with the latent in the keys slot) is read with
  ``mx.quantized_matmul`` on the absorbed path and dequantized on the materialized path.
- Score scale 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) (YaRN's mscale is left out).
- Widths come from the ``mla`` LayerSpec (kv_lora_rank, qk_rope_head_dim) and the ModelSpec's typed
  fields (qk_nope_head_dim, v_head_dim, q_lora_rank: 0 = no query compression, rope_theta).
"""

from __future__ import annotations

import operator
from dataclasses import astuple
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..cache.latent import LatentCache
from ..cache.partials import finish_partial, merge_partials, softmax_stats, split_points
from ..cache.quantized_parts import QuantizedKV
from ..cache.sdpa import as_mask, sdpa
from ..calc.config import LayerSpec, ModelSpec
from ..calc.mla_paths import MlaDims, use_absorbed_mla
from .layers import Rows, WeightInit, reference_mask, rms_norm, rope, transposed

__all__ = ["MLA", "MLA_PATHS"]

MLA_PATHS = ("auto", "absorbed", "materialized")
# what the decode fast path reads (transposed once), with and without query compression
_WEIGHTS_LORA = operator.itemgetter("wq_a", "wq_b", "wkv_a", "wo")
_WEIGHTS = operator.itemgetter("wq", "wkv_a", "wo")


class MLA(nn.Module):
    """DeepSeek attention: low-rank query, latent K/V, decoupled RoPE key."""

    def __init__(self, layer: LayerSpec, spec: ModelSpec, init: WeightInit):
        super().__init__()
        if spec.qk_nope_head_dim <= 0 or spec.v_head_dim <= 0:
            raise ValueError(f"MLA needs the spec's qk_nope_head_dim and v_head_dim >= 1, got "
                             f"{spec.qk_nope_head_dim!r} and {spec.v_head_dim!r}")
        hidden_size, self.n_heads = spec.hidden_size, spec.num_attention_heads
        self.kv_lora_rank, self.rope_dim = layer.kv_lora_rank, layer.qk_rope_head_dim
        self.nope_dim, self.v_head_dim = spec.qk_nope_head_dim, spec.v_head_dim
        self.q_lora_rank = spec.q_lora_rank                    # V2-Lite: 0 = no query compression
        self.rope_base, self.eps = spec.rope_theta, spec.rms_norm_eps
        self.scale = (self.nope_dim + self.rope_dim) ** -0.5
        self.path = "auto"
        self.split_kv = 1            # > 1: the absorbed path splits the latent range (MLXCEL_MLA_SPLIT_KV)
        self.last_path = None        # the path the last call took
        self.machine = None          # (FLOP/s, bytes/s) "auto" decides for; None = the measured H200
        self.dims = MlaDims(self.n_heads, self.kv_lora_rank, self.rope_dim, self.nope_dim, self.v_head_dim)
        # the same widths as a plain tuple (the path memo's key), kept out of the module's parameter tree
        self.__dict__["dims_key"] = astuple(self.dims)
        self.fast_cache = LatentCache                          # the cache whose decode step :meth:`step` serves
        H, qk = self.n_heads, self.nope_dim + self.rope_dim
        if self.q_lora_rank:
            self.wq_a = init.linear(self.q_lora_rank, hidden_size)
            self.q_norm = mx.ones((self.q_lora_rank,))
            self.wq_b = init.linear(H * qk, self.q_lora_rank)
        else:
            self.wq = init.linear(H * qk, hidden_size)
        self.wkv_a = init.linear(self.kv_lora_rank + self.rope_dim, hidden_size)
        self.kv_norm = mx.ones((self.kv_lora_rank,))
        self.wkv_b = init.linear(H * (self.nope_dim + self.v_head_dim), self.kv_lora_rank)
        self.wo = init.linear(hidden_size, H * self.v_head_dim)

    def _w_uk_uv(self):
        """W_uk (H, nope, r) and W_uv (H, v, r) from kv_b, made once per kv_b array (kept beside the
        module, not in its parameters; a new kv_b, e.g. after ``update`` or ``set_dtype``, is split again).

        W_uv is a view of kv_b. W_uk holds the same numbers stored as (H, r, nope) rows (one copy, half
        of kv_b's bytes, made once): a decode query's q_nope (B,H,1,nope) @ W_uk is then a matrix-vector
        product over a transposed operand, which MLX's CUDA backend runs as its GEMV kernel (it takes
        that kernel only for M = 1 with the right operand transposed; the row-major view of kv_b went to
        a batched cuBLAS GEMM instead), the layout mlx-lm's deepseek_v3 keeps its ``embed_q`` in."""
        kv_b, memo = self["wkv_b"], self.__dict__.get("_uk_uv")
        if memo is None or memo[0] is not kv_b:
            w_uk, w_uv = self.split_kv_b(kv_b)
            w_uk = mx.contiguous(w_uk.swapaxes(-1, -2)).swapaxes(-1, -2)   # (H, nope, r), column-major rows
            memo = (kv_b, w_uk, w_uv)
            self.__dict__["_uk_uv"] = memo                     # a plain attribute: never a parameter
        return memo[1], memo[2]

    def split_kv_b(self, kv_b: mx.array):
        """kv_b (H·(nope+v), r) -> W_uk (H, nope, r), W_uv (H, v, r): the reference slicing."""
        w = kv_b.reshape(self.n_heads, self.nope_dim + self.v_head_dim, self.kv_lora_rank)
        return w[:, :self.nope_dim], w[:, self.nope_dim:]

    def _project(self, x):
        """x (B, L, hidden) -> q_nope (B,H,L,nope), q_pe (B,H,L,rope), latent (B,1,L,r), k_pe (B,1,L,rope)."""
        B, L, _ = x.shape
        if self.q_lora_rank:
            q = rms_norm(x @ self.wq_a.T, self.q_norm, self.eps) @ self.wq_b.T
        else:
            q = x @ self.wq.T
        q = q.reshape(B, L, self.n_heads, -1).transpose(0, 2, 1, 3)
        kv = x @ self.wkv_a.T
        latent = rms_norm(kv[..., :self.kv_lora_rank], self.kv_norm, self.eps)[:, None]
        k_pe = kv[..., self.kv_lora_rank:][:, None]
        return q[..., :self.nope_dim], q[..., self.nope_dim:], latent, k_pe

    def __call__(self, x: mx.array, cache=None, kv_dtype=None) -> mx.array:
        B, L, _ = x.shape
        q_nope, q_pe, latent, k_pe = self._project(x)
        if not isinstance(cache, Rows):                      # one cache (or none) for all rows
            out = self._attend(q_nope, q_pe, latent, k_pe, cache, kv_dtype)
        else:                                                  # row r is its own sequence
            if len(cache.caches) != B:
                raise ValueError(f"Rows holds {len(cache.caches)} caches but the batch has {B} rows")
            outs = [self._attend(q_nope[r:r + 1], q_pe[r:r + 1], latent[r:r + 1], k_pe[r:r + 1], c, kv_dtype)
                    for r, c in enumerate(cache.caches)]
            out = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=0)
        return out.transpose(0, 2, 1, 3).reshape(B, L, -1) @ self.wo.T

    def step(self, x: mx.array, cache, kv_dtype=None) -> mx.array:
        """:meth:`__call__` for a decode step (x (B, 1, hidden), one LatentCache, ``fast_cache``): the same
        numbers with fewer host calls and ops. With L = 1 one reshape splits the heads and one splits the
        latent from k_pe; the path is chosen once per step for all layers (:meth:`choose_path`, remembered);
        the absorbed path over one dense latent runs :meth:`_absorbed_fused` with W_uk/W_uv sliced once
        (:meth:`_w_uk_uv`); anything else continues in :meth:`attend_roped`, the reference."""
        B, H, nope, r = x.shape[0], self.n_heads, self.nope_dim, self.kv_lora_rank
        if self.q_lora_rank:
            wq_a_t, wq_b_t, wkv_a_t, wo_t = transposed(self, _WEIGHTS_LORA)
            q = mx.fast.rms_norm(x @ wq_a_t, self["q_norm"], self.eps) @ wq_b_t
        else:
            wq_t, wkv_a_t, wo_t = transposed(self, _WEIGHTS)
            q = x @ wq_t
        q = q.reshape(B, H, 1, nope + self.rope_dim)                    # (B,1,H·qk) is (B,H,1,qk) in memory
        kv = (x @ wkv_a_t).reshape(B, 1, 1, r + self.rope_dim)           # (B,1,1,r+rope): one shared head
        offset, rot = cache.offset, dict(traditional=False, base=self.rope_base, scale=1.0)
        q_nope, q_pe = q[..., :nope], mx.fast.rope(q[..., nope:], self.rope_dim, offset=offset, **rot)
        latent = mx.fast.rms_norm(kv[..., :r], self["kv_norm"], self.eps)
        k_pe = mx.fast.rope(kv[..., r:], self.rope_dim, offset=offset, **rot)
        out = self.attend_roped_step(q_nope, q_pe, latent, k_pe, cache, kv_dtype)   # (B,H,1,v)
        return out.reshape(B, 1, -1) @ wo_t                              # L = 1: one reshape merges the heads

    def attend_roped_step(self, q_nope, q_pe, latent, k_pe, cache, kv_dtype=None):
        """:meth:`attend_roped` over a LatentCache, the decode fast path: for one query token on the
        absorbed path without split, the cache's one-token ``update_step`` and :meth:`_absorbed_fused`
        with W_uk/W_uv sliced once; anything else is :meth:`attend_roped` itself. (B,H,L,·) -> (B,H,L,v)."""
        L, offset = q_nope.shape[2], cache.offset
        path = self.path if self.path != "auto" else self.choose_path(L, offset, latent.dtype.size)
        if path != "absorbed" or self.split_kv > 1 or L != 1:
            return self.attend_roped(q_nope, q_pe, latent, k_pe, cache, kv_dtype)
        if self.last_path != path:
            self.last_path = path
        if kv_dtype is not None:
            latent, k_pe = latent.astype(kv_dtype), k_pe.astype(kv_dtype)
        latents, k_pes, mask = cache.update_step(latent, k_pe)         # (B,1,T,r), (B,1,T,rope), None
        w_uk, w_uv = self._w_uk_uv()                                    # _absorbed_fused, one call less:
        out_lat = self._absorbed_latent(q_nope @ w_uk, q_pe * self.scale, latents, k_pes, mask)
        return out_lat @ w_uv.swapaxes(-1, -2)                          # (B,H,1,r) @ (H,r,v) -> (B,H,1,v)

    def absorbs_step(self, cache, query_tokens: int, dtype_bytes: int) -> bool:
        """Would :meth:`attend_roped_step` take its absorbed one-token path for this cache? (L = 1, the
        cache exactly ``fast_cache``, no split, the absorbed path chosen): then the query's W_uk product,
        the RoPE query's scale and the output's W_uv product are fixed-shape work a compiled step may do
        itself around :meth:`attend_absorbed_step`."""
        if query_tokens != 1 or type(cache) is not self.fast_cache or self.split_kv > 1:
            return False
        if self.path != "auto":
            return self.path == "absorbed"
        machine = self.machine
        if machine is None or type(machine) is tuple:         # choose_path's memo, called directly (host time)
            return _use_absorbed_memo(self.dims_key, 1, cache.offset, dtype_bytes, machine)
        return self.choose_path(1, cache.offset, dtype_bytes) == "absorbed"

    def attend_absorbed_step(self, q_lat, q_pe_scaled, latent, k_pe, cache, kv_dtype=None):
        """The part of :meth:`attend_roped_step`'s absorbed path whose shapes grow with the cache, for a
        caller that already has q_lat = q_nope·W_uk (B,H,1,r) and q_pe·scale (B,H,1,rope): store the
        token, attend over the latent; returns Σ p·latent (B,H,1,r), before W_uv (:meth:`absorbs_step`)."""
        self.last_path = "absorbed"
        if kv_dtype is not None:
            latent, k_pe = latent.astype(kv_dtype), k_pe.astype(kv_dtype)
        latents, k_pes, mask = cache.update_step(latent, k_pe)         # (B,1,T,r), (B,1,T,rope), None
        return self._absorbed_latent(q_lat, q_pe_scaled, latents, k_pes, mask)

    def _attend(self, q_nope, q_pe, latent, k_pe, cache, kv_dtype):
        offset = 0 if cache is None else cache.offset
        q_pe = rope(q_pe, self.rope_dim, self.rope_base, offset)
        k_pe = rope(k_pe, self.rope_dim, self.rope_base, offset)
        return self.attend_roped(q_nope, q_pe, latent, k_pe, cache, kv_dtype)

    def attend_roped(self, q_nope, q_pe, latent, k_pe, cache, kv_dtype=None):
        """Attention once RoPE is applied: store (latent, k_pe) in ``cache``, then the absorbed or
        materialized path; (B,H,L,·) queries -> (B,H,L,v)."""
        L, offset = q_nope.shape[2], 0 if cache is None else cache.offset   # tokens cached before this call
        if cache is None:
            mask, parts = reference_mask(L, L), [(latent, k_pe, None)]
        else:
            mask = cache.make_mask(L, window_size=None, return_array=False)   # before the update: (L, T)
            dtype = kv_dtype or latent.dtype
            parts = _parts(cache.update_and_fetch(latent.astype(dtype), k_pe.astype(dtype)))
        path = self.path if self.path != "auto" else self.choose_path(L, offset, latent.dtype.size)
        self.last_path = path
        if path == "absorbed":
            if self.split_kv > 1 and len(parts) == 1 and parts[0][2] is None:
                return self.absorbed_split(q_nope, q_pe, parts[0][0], parts[0][1], mask, self.split_kv)
            return self.absorbed(q_nope, q_pe, parts, mask)
        latents = mx.concatenate([_dense(lat, qz) for lat, _, qz in parts], axis=2)
        k_pes = mx.concatenate([_dense(kpe, qz) for _, kpe, qz in parts], axis=2)
        return self.materialized(q_nope, q_pe, latents, k_pes, mask)

    def choose_path(self, query_tokens: int, cached_tokens: int, dtype_bytes: int = 2) -> str:
        """'absorbed' or 'materialized' for a call of L query tokens after C cached ones (calc's cost model)."""
        machine = self.machine
        if machine is None or type(machine) is tuple:         # hashable: every layer of a step shares one answer
            absorbed = _use_absorbed_memo(self.dims_key, query_tokens, cached_tokens, dtype_bytes, machine)
        else:
            absorbed = use_absorbed_mla(self.dims, query_tokens, cached_tokens, dtype_bytes, machine)
        return "absorbed" if absorbed else "materialized"

    def absorbed_split(self, q_nope, q_pe, latent, k_pe, mask, splits):
        """The absorbed attention over the latent cut into ``splits`` chunks of keys, one partial
        (out over the latent, log-sum-exp) per chunk, merged by :func:`kvsim.cache.partials.merge_partials`.

        Per chunk [a, b): s = q̃·latent[a:b]ᵀ + q_pe·k_pe[a:b]ᵀ, out_lat = softmax(s) latent[a:b];
        the merged out_lat then goes through W_uv, as in :meth:`absorbed_explicit`.
        """
        B, H, L, _ = q_nope.shape
        w_uk, w_uv = self._w_uk_uv()
        q_lat = ((q_nope * self.scale) @ w_uk).astype(mx.float32)       # (B,H,L,r)
        q_rot = (q_pe * self.scale).astype(mx.float32)
        T = latent.shape[2]
        mask = as_mask(mask, L, T)
        cuts = split_points(T, min(splits, T))
        parts = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            lat = latent[:, :, a:b].astype(mx.float32)                    # (B,1,n,r): read once for all heads
            s = q_lat @ lat.swapaxes(-1, -2) + q_rot @ k_pe[:, :, a:b].astype(mx.float32).swapaxes(-1, -2)
            m, p, l, empty = softmax_stats(s, None if mask is None else mask[..., a:b])
            parts.append(finish_partial(p @ lat, m, l, empty))            # ((B,H,L,r), (B,H,L))
        out_lat = merge_partials(parts)[0].astype(q_nope.dtype)
        return out_lat @ w_uv.swapaxes(-1, -2)                            # (B,H,L,r) @ (H,r,v) -> (B,H,L,v)

    def materialized(self, q_nope, q_pe, latents, k_pes, mask):
        """Expand per-head K (B,H,T,nope+rope) and V (B,H,T,v) from the latent, then attend."""
        w_uk, w_uv = self._w_uk_uv()
        latents = latents.astype(q_nope.dtype)
        k_nope = latents @ w_uk.swapaxes(-1, -2)              # (B,1,T,r) @ (H,r,nope) -> (B,H,T,nope)
        values = latents @ w_uv.swapaxes(-1, -2)              # (B,H,T,v)
        B, H, T, _ = k_nope.shape
        k_pe = mx.broadcast_to(k_pes.astype(q_pe.dtype), (B, H, T, self.rope_dim))
        keys = mx.concatenate([k_nope, k_pe], axis=-1)
        queries = mx.concatenate([q_nope, q_pe], axis=-1)
        return sdpa(queries, keys, values, mask, self.scale)

    def absorbed(self, q_nope, q_pe, parts, mask):
        """Attend over the latent (W_uk folded into the query): the fused kernel for one dense piece,
        else the explicit matmuls of :meth:`absorbed_explicit` (quantized or several pieces)."""
        if len(parts) == 1 and parts[0][2] is None:
            w_uk, w_uv = self._w_uk_uv()
            return self._absorbed_fused(q_nope, q_pe, parts[0][0], parts[0][1], mask, w_uk, w_uv)
        return self.absorbed_explicit(q_nope, q_pe, parts, mask)

    def absorbed_explicit(self, q_nope, q_pe, parts, mask):
        """Attend over the latent: scores = q̃·latentᵀ + q_pe·k_peᵀ, out = W_uv (p · latent).

        ``parts`` are the cached (latent, k_pe, quantization) pieces, oldest first; quantized pieces
        are read with ``mx.quantized_matmul`` and never dequantized. The H heads share one latent,
        so they are folded into the rows of one matrix, (B, 1, H·L, ·): each matmul then reads the
        latent once per sequence (a batched per-head product relies on MLX to fold the broadcast
        batch, which it does only when the batch has a single axis, B = 1).
        """
        B, H, L, _ = q_nope.shape
        w_uk, w_uv = self._w_uk_uv()
        q_lat = (q_nope * self.scale) @ w_uk                  # (B,H,L,nope) @ (H,nope,r): scale on the queries
        q_lat, q_pe = (x.reshape(B, 1, H * L, x.shape[-1]) for x in (q_lat, q_pe * self.scale))
        scores = [_scores(q_lat, q_pe, lat, kpe, qz) for lat, kpe, qz in parts]
        scores = scores[0] if len(scores) == 1 else mx.concatenate(scores, axis=-1)
        scores = scores.reshape(B, H, L, -1)                  # (B,H,L,T)
        mask = as_mask(mask, L, scores.shape[-1])
        if mask is not None:                                   # None: one query sees every key
            scores = mx.where(mask, scores, mx.finfo(scores.dtype).min)
        probs = mx.softmax(scores, axis=-1, precise=True).reshape(B, 1, H * L, -1)
        if len(parts) == 1:                                   # Σ p·latent: one "value head" for all
            out_lat = _matmul(probs, parts[0][0], parts[0][2], False)
        else:
            ends = np.cumsum([0] + [_tokens(lat) for lat, _, _ in parts])
            out_lat = sum(_matmul(probs[..., a:b], lat, qz, False)
                          for (lat, _, qz), a, b in zip(parts, ends[:-1], ends[1:]))
        return out_lat.reshape(B, H, L, -1) @ w_uv.swapaxes(-1, -2)   # (B,H,L,r) @ (H,r,v) -> (B,H,L,v)

    def _absorbed_fused(self, q_nope, q_pe, latent, k_pe, mask, w_uk, w_uv):
        """The same absorbed attention through ``mx.fast.scaled_dot_product_attention``, as mlx-lm's
        deepseek_v3 decodes: the latent is one K/V head of width r shared by all H query heads, and
        the RoPE scores q_pe·k_peᵀ (with -inf where the mask hides a key) go in as an additive mask.
        Measured on an H200 (benchmarks/results/roofline_cuda.md, "MLA absorbed decode attention"):
        1-6 % faster than the explicit matmuls above at 1K-128K; the same on a CPU."""
        out_lat = self._absorbed_latent(q_nope @ w_uk, q_pe * self.scale, latent, k_pe, mask)   # (B,H,L,r)
        return out_lat @ w_uv.swapaxes(-1, -2)               # (B,H,L,r) @ (H,r,v) -> (B,H,L,v)

    def _absorbed_latent(self, q_lat, q_pe_scaled, latent, k_pe, mask):
        """softmax(scale·q_lat·latentᵀ + scale·q_pe·k_peᵀ) · latent, (B,H,L,r): the SDPA call of
        :meth:`_absorbed_fused` with the RoPE scores (already scaled through the query) as its mask."""
        pe = q_pe_scaled @ k_pe.astype(q_pe_scaled.dtype).swapaxes(-1, -2)   # (B,H,L,T)
        if mask is not None:                                   # None (a decode step): nothing hidden
            mask = as_mask(mask, q_lat.shape[2], pe.shape[-1])
        if mask is not None:
            pe = mx.where(mask, pe, mx.finfo(pe.dtype).min)
        lat = latent.astype(q_lat.dtype)
        return mx.fast.scaled_dot_product_attention(q_lat, lat, lat, scale=self.scale, mask=pe)


@lru_cache(maxsize=256)
def _use_absorbed_memo(dims_key, query_tokens, cached_tokens, dtype_bytes, machine) -> bool:
    """use_absorbed_mla, remembered (a pure function of hashable arguments; a bad one raises, never stored).
    ``dims_key`` is the MlaDims fields as a plain tuple (hashing a tuple of ints costs no Python call)."""
    return use_absorbed_mla(MlaDims(*dims_key), query_tokens, cached_tokens, dtype_bytes, machine)


def _scores(q_lat, q_pe, lat, kpe, qz):
    """q_lat·latentᵀ + q_pe·k_peᵀ for one cached piece, (B,1,H·L,T); dense: one addmm (no extra pass)."""
    if qz is not None:
        return _matmul(q_lat, lat, qz, True) + _matmul(q_pe, kpe, qz, True)
    lat, kpe = lat.astype(q_lat.dtype), kpe.astype(q_pe.dtype)
    return mx.addmm(q_pe @ kpe.swapaxes(-1, -2), q_lat, lat.swapaxes(-1, -2))


def _parts(fetched) -> list:
    """What a cache returned as [(latent, k_pe, (group_size, bits) or None)], oldest first."""
    if isinstance(fetched, QuantizedKV):
        qz = (fetched.group_size, fetched.bits)
        parts = [] if fetched.keys is None else [(tuple(fetched.keys), tuple(fetched.values), qz)]
        if fetched.recent_keys is not None:
            parts.append((fetched.recent_keys, fetched.recent_values, None))
        return parts
    latents, k_pes = fetched
    return [(latents, k_pes, None)]


def _tokens(part) -> int:
    return (part[0] if isinstance(part, tuple) else part).shape[2]


def _dense(part, qz):
    """A cached piece as a dense array (dequantized if it is stored quantized)."""
    if qz is None:
        return part
    return mx.dequantize(*part, group_size=qz[0], bits=qz[1])


def _matmul(x, part, qz, transpose: bool):
    """x @ partᵀ (transpose) or x @ part, for a dense or a quantized cached piece (B,1,T,·)."""
    if qz is not None:
        return mx.quantized_matmul(x, *part, transpose=transpose, group_size=qz[0], bits=qz[1])
    part = part.astype(x.dtype)
    return x @ (part.swapaxes(-1, -2) if transpose else part)
