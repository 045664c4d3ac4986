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
- ``quant_mode`` picks how a quantized ``kv_dtype`` stores its codes (the seed's storage modes):
  ``"uniform"`` (default) -> QuantizedKVCache; ``"rotated"`` -> TurboQuantKVCache (a randomized
  Hadamard rotation of K and V before the same scalar quantization, :mod:`.turboquant`), seeded per
  layer (``seed + 2·i``) so no two layers share a rotation. The rotation needs power-of-two
  widths (head_dim and v_head_dim; an MLA layer's kv_lora_rank and qk_rope_head_dim): checked for
  every layer before anything is built. ``"rotated"`` with a full-precision ``kv_dtype`` raises.
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
from ..calc.units import DEFAULT_STEP, nonnegative_int
from .chunked import ChunkedKVCache
from .latent import LatentCache
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache
from .turboquant import MODES as STORAGE_MODES, TurboQuantKVCache

FULL_PRECISION = (None, "fp32", "bf16", "fp16")
QUANT_MODES = STORAGE_MODES[1:]   # ("uniform", "rotated"): how a quantized kv_dtype stores its codes


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
                ordered: bool = False, state_dtype: str | None = None, quant_mode: str = "uniform",
                seed: int = 0) -> list:
    """One cache per layer of ``spec`` (None for layers that cache nothing)."""
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"spec must be a kvsim.calc.config.ModelSpec, got {type(spec).__name__}")
    bits = _bits(kv_dtype, group_size)
    _check_combinations(spec, kv_dtype, bits, keep)
    _check_quant_mode(spec, kv_dtype, bits, quant_mode, seed)
    options = dict(batch=batch, bits=bits, group_size=group_size, step=step, dtype=dtype, inplace=inplace,
                   full_precision_tokens=full_precision_tokens, keep=keep, rewind_tokens=rewind_tokens,
                   ordered=ordered, state_dtype=state_dtype, quant_mode=quant_mode, seed=seed)
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


def _rotated_widths(layer) -> tuple[tuple[str, int], ...]:
    """The vector widths a rotated layer's Hadamard rotations act on, by config name."""
    if layer.kind == "mla":
        return (("kv_lora_rank", layer.kv_lora_rank), ("qk_rope_head_dim", layer.qk_rope_head_dim))
    return (("head_dim", layer.head_dim), ("v_head_dim", layer.v_head_dim))


def _check_quant_mode(spec: ModelSpec, kv_dtype, bits, quant_mode, seed) -> None:
    """Refuse an unknown mode, a rotation without quantization, and widths no Hadamard matrix has."""
    if quant_mode not in QUANT_MODES:
        raise ValueError(f"quant_mode must be one of {', '.join(QUANT_MODES)}, got {quant_mode!r}")
    if quant_mode == "uniform":
        return
    nonnegative_int("seed", seed)
    if bits is None:
        raise ValueError(f"quant_mode 'rotated' needs a quantized kv_dtype (q8, q6, q4, q3, q2), got {kv_dtype!r}")
    for i, layer in enumerate(spec.layers):
        if layer.caches_tokens:  # every K/V or latent layer gets a rotated cache (_layer_cache), chunked too
            for name, width in _rotated_widths(layer):
                if width & (width - 1):
                    raise ValueError(f"quant_mode 'rotated': layer {i}'s {name} must be a power of two "
                                     f"(a Sylvester Hadamard size), got {width}")


def _layer_cache(spec, i, layer, *, batch, bits, group_size, step, dtype, inplace, full_precision_tokens,
                 keep, rewind_tokens, ordered, state_dtype, quant_mode, seed):
    """The cache one layer's kind asks for (None for a layer that caches nothing)."""
    kind = layer.kind
    if kind == "none":
        return None
    if kind == "recurrent":
        return RecurrentStateCache.for_layer(layer, batch, dtype, state_dtype)
    if bits is not None:
        max_size = layer.sliding_window if kind == "sliding" else None
        if quant_mode == "rotated":
            return TurboQuantKVCache(bits, group_size, step=step, full_precision_tokens=full_precision_tokens,
                                     max_size=max_size, seed=seed + 2 * i)
        return QuantizedKVCache(bits, group_size, step=step, full_precision_tokens=full_precision_tokens,
                                max_size=max_size)
    if kind == "full":
        return KVCache(step=step, inplace=inplace)
    if kind == "sliding":
        return RotatingKVCache(layer.sliding_window, keep=keep, step=step, rewind_tokens=rewind_tokens,
                               ordered=ordered)
    if kind == "chunked":
        return ChunkedKVCache(layer.attention_chunk_size, step=step)
    return LatentCache(step=step, inplace=inplace, kv_lora_rank=layer.kv_lora_rank,  # mla
                       qk_rope_head_dim=layer.qk_rope_head_dim)
