"""LatentCache: what an MLA layer (DeepSeek-V2/V3) caches, one latent shared by all heads.

Contract
- Per token: the compressed latent c_KV (``kv_lora_rank`` elements, after its RMSNorm) and the
  RoPE part of the key k_pe (``qk_rope_head_dim`` elements). Both are shared by every attention
  head, so the head axis is 1: ``update_and_fetch(latent (B, 1, S, r), k_pe (B, 1, S, rope))
  -> (latent_all (B, 1, T, r), k_pe_all (B, 1, T, rope))``, T = offset after the update.
- Storage, growth, trim, masks and persistence are :class:`~kvsim.cache.standard.KVCache`'s
  (the latent sits in the keys slot, k_pe in the values slot, as in mlx-lm's deepseek_v3), so
  ``nbytes = B · capacity · (r + rope) · itemsize`` with capacity = allocated_slots(T_peak, step),
  the calculator's allocated MLA view. Per token: (r + rope) · b bytes, no factor of heads.
- Optional ``kv_lora_rank`` / ``qk_rope_head_dim`` pin the widths up front (a mismatch raises
  ValueError naming the field); otherwise the first update fixes them.
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.units import DEFAULT_STEP, positive_int
from .standard import KVCache


class LatentCache(KVCache):
    """MLA cache: latent (kv_lora_rank) + RoPE key (qk_rope_head_dim) per token, one shared head."""

    def __init__(self, step: int = DEFAULT_STEP, inplace: bool = True,
                 kv_lora_rank: int | None = None, qk_rope_head_dim: int | None = None):
        super().__init__(step=step, inplace=inplace)
        # None: the widths are taken from the first update
        self.kv_lora_rank = None if kv_lora_rank is None else positive_int("kv_lora_rank", kv_lora_rank)
        self.qk_rope_head_dim = None if qk_rope_head_dim is None else positive_int("qk_rope_head_dim", qk_rope_head_dim)

    @classmethod
    def for_layer(cls, layer, step: int = DEFAULT_STEP, inplace: bool = True) -> "LatentCache":
        """The cache an ``mla`` :class:`~kvsim.calc.config.LayerSpec` needs, widths pinned."""
        return cls(step, inplace, layer.kv_lora_rank, layer.qk_rope_head_dim)

    def update_and_fetch(self, latent: mx.array, k_pe: mx.array):
        """Store S tokens' latents and RoPE keys; return all of them (B, 1, T, ·), oldest first."""
        for name, a, width_name, width in (("latent", latent, "kv_lora_rank", self.kv_lora_rank),
                                           ("k_pe", k_pe, "qk_rope_head_dim", self.qk_rope_head_dim)):
            if isinstance(a, mx.array) and a.ndim == 4:
                if a.shape[1] != 1:
                    raise ValueError(f"{name}.shape[1] must be 1 (one latent shared by all heads), "
                                     f"got {a.shape[1]}")
                if width is not None and a.shape[3] != width:
                    raise ValueError(f"{name}.shape[3] must be {width_name} = {width}, got {a.shape[3]}")
        return super().update_and_fetch(latent, k_pe)

    @property
    def meta_state(self) -> tuple:
        """KVCache's metadata plus the pinned widths ('' when not pinned)."""
        widths = (self.kv_lora_rank, self.qk_rope_head_dim)
        return (*super().meta_state, *("" if w is None else str(w) for w in widths))

    @classmethod
    def from_state(cls, state, meta_state):
        *base, r, rope = meta_state
        cache = super().from_state(state, base)
        cache.kv_lora_rank = None if r == "" else int(r)
        cache.qk_rope_head_dim = None if rope == "" else int(rope)
        return cache

    @property
    def latent(self) -> mx.array | None:
        """The filled latents (B, 1, offset, kv_lora_rank), or None before the first update."""
        return None if self.keys is None else self.keys[..., :self.offset, :]

    @property
    def k_pe(self) -> mx.array | None:
        """The filled RoPE keys (B, 1, offset, qk_rope_head_dim), or None before the first update."""
        return None if self.values is None else self.values[..., :self.offset, :]
