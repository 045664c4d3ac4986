"""make_caches: one cache per layer of a :class:`~kvsim.calc.config.ModelSpec`, chosen by layer kind.

Contract
- Layout follows the layer kind (the seeds' architecture table):
  full -> KVCache; sliding -> RotatingKVCache(sliding_window, keep); chunked ->
  ChunkedKVCache(attention_chunk_size) (Llama 4's NoPE global layers are ``full`` -> KVCache);
  mla -> LatentCache; recurrent -> RecurrentStateCache.for_layer(layer, batch, dtype, state_dtype); none -> None.
- Storage mode is independent of layout: ``kv_dtype`` None / fp32 / bf16 / fp16 keeps full
  precision (the elements have the dtype of the tensors the model writes); q8 q6 q4 q3 q2 swap
  in QuantizedKVCache(bits, group_size, full_precision_tokens) for full and MLA layers (latent in
  the keys slot, RoPE key in the values slot) and QuantizedKVCache(max_size=W) for sliding
  layers. Combinations kvsim has no layout for raise ValueError before anything is built:
  quantized + chunked, quantized + sliding with ``keep`` sinks, and fp8 (no fp8 storage in MLX).
- ``keep``, ``rewind_tokens``, ``ordered`` go to every RotatingKVCache; ``inplace`` to KVCache
  and LatentCache. Sliding layers default to ``ordered=False`` (as mlx-lm): a decode step over a
  wrapped ring reads the ring as stored, with no per-step copy of the window and no mask when
  the ring holds exactly the window, so attention takes the fused no-mask path. Attention does
  not depend on the order of its keys, so outputs are the same either way. ``dtype`` is the
  model's dtype, which recurrent state tensors follow unless their family's reference
  implementation keeps them in fp32 (:meth:`LayerSpec.state_dtypes`); ``state_dtype`` (a name)
  puts every state tensor in one dtype instead. ``batch`` is the state's batch size (KV caches
  take B from their first update).
- Drop-in: for a config mlx-lm also runs, the list works as the ``cache=`` of mlx-lm's model and
  as its ``generate_step(prompt_cache=...)`` (tests/test_mlx_lm_dropin.py).
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.config import ModelSpec
from ..calc.memory import parse_kv_dtype
from ..calc.units import DEFAULT_STEP
from .chunked import ChunkedKVCache
from .latent import LatentCache
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache

FULL_PRECISION = (None, "fp32", "bf16", "fp16")


def _bits(kv_dtype, group_size) -> int | None:
    """None for full precision, else the quantization bits; ValueError for unsupported names."""
    if kv_dtype is None:
        return None
    dt = parse_kv_dtype(kv_dtype, group_size=group_size)  # validates name and group_size
    if dt.quantized:
        return dt.bits
    if dt.name not in FULL_PRECISION:
        raise ValueError(f"kv_dtype {kv_dtype!r} has no MLX cache layout; accepted: "
                         "None, fp32, bf16, fp16, q8, q6, q4, q3, q2")
    return None


def make_caches(spec: ModelSpec, batch: int = 1, kv_dtype: str | None = None, step: int = DEFAULT_STEP,
                dtype=mx.float32, inplace: bool = True, group_size: int = 64,
                full_precision_tokens: int = 0, keep: int = 0, rewind_tokens: int = 0,
                ordered: bool = False, state_dtype: str | None = None) -> list:
    """One cache per layer of ``spec`` (None for layers that cache nothing)."""
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"spec must be a kvsim.calc.config.ModelSpec, got {type(spec).__name__}")
    bits = _bits(kv_dtype, group_size)
    _check_combinations(spec, kv_dtype, bits, keep)
    options = dict(batch=batch, bits=bits, group_size=group_size, step=step, dtype=dtype, inplace=inplace,
                   full_precision_tokens=full_precision_tokens, keep=keep, rewind_tokens=rewind_tokens,
                   ordered=ordered, state_dtype=state_dtype)
    return [_layer_cache(spec, i, layer, **options) for i, layer in enumerate(spec.layers)]


def _check_combinations(spec: ModelSpec, kv_dtype, bits, keep) -> None:
    """Refuse, before anything is built, what kvsim has no layout for."""
    for i, layer in enumerate(spec.layers):
        if layer.kind != "recurrent" and layer.state_shapes:
            raise ValueError(f"layer {i} of {spec.name} keeps K/V and a {layer.recurrent_family} state side by "
                             "side (Falcon-H1): kvsim has no MLX cache for such layers; the calculator sizes "
                             "them (kvsim.calc.memory, engine 'mlx-lm')")
    if bits is not None and "chunked" in spec.kinds:
        raise ValueError(f"kv_dtype {kv_dtype!r}: chunked layers have no quantized layout; "
                         "use kv_dtype=None for this model")
    if bits is not None and "sliding" in spec.kinds and keep:
        raise ValueError(f"kv_dtype {kv_dtype!r}: quantized sliding layers keep no sink tokens; use keep=0")


def _layer_cache(spec, i, layer, *, batch, bits, group_size, step, dtype, inplace, full_precision_tokens,
                 keep, rewind_tokens, ordered, state_dtype):
    """The cache one layer's kind asks for (None for a layer that caches nothing)."""
    kind = layer.kind
    if kind == "none":
        return None
    if kind == "recurrent":
        return RecurrentStateCache.for_layer(layer, batch, dtype, state_dtype)
    if bits is not None:
        return QuantizedKVCache(bits, group_size, step=step, full_precision_tokens=full_precision_tokens,
                                max_size=layer.sliding_window if kind == "sliding" else None)
    if kind == "full":
        return KVCache(step=step, inplace=inplace)
    if kind == "sliding":
        return RotatingKVCache(layer.sliding_window, keep=keep, step=step, rewind_tokens=rewind_tokens,
                               ordered=ordered)
    if kind == "chunked":
        return ChunkedKVCache(layer.attention_chunk_size, step=step)
    return LatentCache(step=step, inplace=inplace, kv_lora_rank=layer.kv_lora_rank,  # mla
                       qk_rope_head_dim=layer.qk_rope_head_dim)
