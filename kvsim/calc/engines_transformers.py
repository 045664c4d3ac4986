"""What transformers 5.24's own caches hold after ``generate`` feeds a prompt and decode steps (pure Python).

Contract
- :func:`transformers_bytes` sizes, per decoder layer, the cache transformers builds for ``spec``
  after a P-token prompt and D decode steps (``generate`` with ``max_new_tokens = D + 1``: one call
  of P tokens, then D calls of one token; the last generated token is never fed, so T = P + D):
  the default ``DynamicCache`` (``cache="dynamic"``) or ``StaticCache`` (``cache="static"``, with
  ``max_cache_len`` slots, default P + D as ``generate`` sizes it).
- Per layer (:class:`TransformersLayerBytes`): the class transformers builds, the K/V (or latent)
  bytes and the recurrent-state bytes its tensors hold (Σ numel × element_size), and the bytes of the
  storage those tensors pin (a sliding slice is a view over the last concatenation).
- The rules, each measured against transformers itself (tests/test_engines_transformers.py):
  * full attention and MLA: ``DynamicLayer`` keeps all T tokens (MLA: the latent and the RoPE key as
    two single-head tensors, DeepSeek-V2 as V3); static: ``max_cache_len`` slots. DSA (DeepSeek-V3.2,
    GLM-5): ``DynamicIndexedLayer`` adds ``indexer_keys`` (B, T, index_head_dim) on layers that run
    their indexer: T·(kv_lora_rank + qk_rope_head_dim + index_head_dim)·b.
  * sliding window W: ``DynamicSlidingWindowLayer`` keeps min(T, W − 1) tokens as a view over the
    last concatenation, which pins min(T − f, W − 1) + f tokens (f = the last call's tokens: the
    whole prompt after a prefill-only run); static: min(W, max_cache_len) slots.
  * chunked attention C (Llama 4): a sliding layer of window C, min(T, C − 1), whatever T mod C.
  * recurrent layers: conv state of K columns (Mamba-1, Mamba-2, Gated DeltaNet, LFM2's short conv, KDA; K − 1 for
    RecurrentGemma, whose state lives on its modules) in the model dtype, SSM / delta-rule / RG-LRU
    state in fp32 (also Mamba-1's, which kvsim and mlx-lm keep in the model dtype); MiniMax's lightning state
    (H, d, d) in the model dtype, in ``MiniMaxCache.linear_cache``.
  * layers that keep nothing (MLP / MoE blocks, KV-shared consumers): ``DummyLayer``, 0 B.
  * DeepSeek-V4 (``DeepseekV4CSACache`` / ``DeepseekV4HCACache``, :func:`compressed_layer_bytes`): the window's
    K = V as one tensor (values *is* keys), min(T, W − 1)·d·b, plus ⌊T/m⌋ compressed entries (d, + d_I of
    indexer key on CSA) and, as state, each compressor's buffer of the T mod m tokens not yet compressed
    (kv and gate, 2·width wide on CSA: 2·(T mod m)·(w_c + w_i)·b) and CSA's overlap state once a window has
    closed (m·(d + d_I) kv in the model dtype + the same gates in fp32); sliding_attention layers are a plain
    ``DynamicSlidingWindowLayer`` that writes K = V twice. No StaticCache (transformers' V4 refuses it).
  * family rules from the config: Jamba is never windowed (its ``layer_types`` are all full);
    Falcon's new decoder architecture expands K/V to every query head before caching;
    ``use_cache: false`` keeps no cache at all; openai-gpt's attention never writes the cache it is given.
- Bad input (unknown cache, max_cache_len below P + D, a quantized dtype): InputError.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .config import Kind, LayerSpec, ModelSpec
from .families import FAMILIES, WINDOW_EVERY_LAYER
from .families_attention import EMPTY_ATTENTION_MODEL_TYPES, INDEXED_MODEL_TYPES
from .families_hybrid import LIGHTNING_CACHE, RWKV_STATE, transformers_state_bytes
from .units import DTYPE_BYTES, FLOAT_DTYPES, InputError, dtype_key, positive_int

CACHES = ("dynamic", "static")
# families whose attention never writes the cache generate builds: it stays empty, each step re-feeds all tokens
UNCACHED_MODEL_TYPES = ("openai-gpt",)
# conv columns transformers keeps per recurrent family, as an offset from the kernel K (kvsim's
# state_shapes store K − 1 columns): K for the Mamba mixers and Gated DeltaNet, K − 1 for RG-LRU
_CONV_EXTRA_COLUMNS = {"mamba": 1, "mamba2": 1, "gated_deltanet": 1, "rg_lru": 0}


@dataclass(frozen=True)
class TransformersLayerBytes:
    """One layer of a transformers cache: class, K/V bytes, state bytes (views) and storage held."""

    index: int
    kind: str
    cache: str
    kv_bytes: int
    state_bytes: int
    storage_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.kv_bytes + self.state_bytes


def _model_dtype(dtype) -> str:
    key = dtype_key(dtype)
    if key not in FLOAT_DTYPES:
        raise InputError(f"transformers keeps K/V in the model dtype; dtype {dtype!r} is not one of "
                         f"{', '.join(FLOAT_DTYPES)}")
    return key


def transformers_layer(spec: ModelSpec, layer: LayerSpec, index: int) -> LayerSpec:
    """The layer as transformers builds it: Jamba unwindowed, Falcon-40B's K/V expanded to every head, and a
    ``layer_types`` sliding layer whose window kvsim dropped (W ≥ max_position_embeddings) windowed again."""
    types, window = spec.config.get("layer_types"), spec.config.get("sliding_window")
    windows = isinstance(window, int) and window > 0 and spec.config.get("use_sliding_window") is not False
    if layer.kind == "full" and windows:
        if isinstance(types, (list, tuple)):
            windowed = index < len(types) and types[index] == "sliding_attention"
        else:  # no layer_types: these families window every layer (get_layer_types_and_kwargs)
            windowed = FAMILIES.get(spec.model_type) in WINDOW_EVERY_LAYER
        if windowed:
            return replace(layer, kind="sliding", sliding_window=window)
    if layer.k_eq_v and not layer.compress_ratio:  # DeepSeek-V4's sliding_attention: update(kv, kv) stores two
        return replace(layer, k_eq_v=False)
    if spec.model_type == "jamba" and layer.kind == "sliding":
        return replace(layer, kind="full", sliding_window=None)
    if (spec.model_type == "falcon" and spec.config.get("new_decoder_architecture")
            and layer.kind in Kind.KV_HEADS):
        return replace(layer, num_key_value_heads=spec.num_attention_heads)
    return layer


def state_bytes(layer: LayerSpec, b: int) -> int:
    """Recurrent state transformers keeps: conv K (or K − 1) columns in the model dtype, the rest fp32
    (the families of :mod:`kvsim.calc.families_hybrid` by its :func:`transformers_state_bytes`)."""
    hybrid = transformers_state_bytes(layer, b, DTYPE_BYTES["fp32"])
    if hybrid is not None:
        return hybrid
    total = 0
    for name, shape in layer.state_shapes:
        if name == "conv":  # kvsim's (K − 1, width)
            total += (shape[0] + _CONV_EXTRA_COLUMNS[layer.recurrent_family]) * shape[1] * b
        else:
            n = 1
            for d in shape:
                n *= d
            total += n * DTYPE_BYTES["fp32"]
    return total


def _attention_tokens(layer: LayerSpec, t: int, last: int, cache: str, max_len: int) -> tuple[int, int]:
    """(tokens the view holds, tokens the storage holds) for one attention / MLA layer."""
    window = layer.window_tokens
    if cache == "static":
        slots = max_len if window is None else min(window, max_len)
        return slots, slots
    if window is None:
        return t, t
    return min(t, window - 1), min(t - last, window - 1) + last


FP32_BYTES = DTYPE_BYTES["fp32"]


def compressed_layer_bytes(layer: LayerSpec, t: int, last: int, view: int, held: int, b: int) -> tuple[int, int, int]:
    """(K/V view, state view, storage) of a DeepSeek-V4 CSA / HCA cache layer after T tokens, the last call of
    ``last`` tokens; ``view`` / ``held`` are the window's tokens (viewed, pinned).

    K/V: (view)·d·b (one K = V tensor) + E·(d + d_I)·b, E = ⌊T/m⌋. State: kv + gate buffers of r = T mod m
    tokens, 2·r·(w_c + w_i)·b with w_c = 2d on CSA (d on HCA), w_i = 2·d_I; a buffer slices the last
    concatenation of L = (T − last) mod m + last tokens, which its storage pins. CSA, once E ≥ 1: the overlap
    state m·(d + d_I)·(b + 4) (kv in the model dtype, gate + fp32 position_bias in fp32).
    """
    m, d, d_i = layer.compress_ratio, layer.head_dim, layer.index_head_dim
    entries = t // m * (d + d_i) * b
    width = (2 * d + 2 * d_i) if d_i else d  # compressor (+ indexer) projections per buffered token
    pinned = (t - last) % m + last
    overlap = m * (d + d_i) * (b + FP32_BYTES) if d_i and t >= m else 0
    state = 2 * (t % m) * width * b + overlap
    return view * d * b + entries, state, held * d * b + entries + 2 * pinned * width * b + overlap


def _indexed(spec: ModelSpec, index: int) -> bool:
    """An ``indexed_attention`` layer (DSA): its config's layer_types says so, or its family derives it."""
    types = spec.config.get("layer_types")
    if isinstance(types, (list, tuple)) and index < len(types):
        return types[index] == "indexed_attention"
    return spec.model_type in INDEXED_MODEL_TYPES


def _class_name(layer: LayerSpec, cache: str, indexed: bool = False, empty_attention: bool = False) -> str:
    """The cache-layer class transformers' DYNAMIC/STATIC_LAYER_TYPE_MAPPING picks for this layer."""
    static = cache == "static"
    if layer.kind == "none" and empty_attention:  # Mllama's text-only cross-attention layers: built, never written
        return ("Static" if static else "Dynamic") + "Layer"
    if layer.kind == "none":
        return "DummyLayer"
    if layer.kind == "recurrent" and layer.recurrent_family == "lightning":
        return LIGHTNING_CACHE  # MiniMax keeps it beside the cache layers
    if layer.kind == "recurrent" and layer.recurrent_family == "rwkv":
        return RWKV_STATE  # generate carries it in its model kwargs
    if layer.has_kv_heads and layer.index_head_dim:  # MiniMax-M3: K/V + idx_keys (B, 1, T, index_head_dim)
        return "MiniMaxM3VLSparse" + ("Static" if static else "") + "CacheLayer"
    if indexed:  # DSA: the MLA latent plus indexer_keys (B, T, index_head_dim) on layers that run the indexer
        return ("Static" if static else "Dynamic") + "IndexedLayer"
    if layer.kind == "recurrent":
        return "LinearAttentionLayer"  # RecurrentGemma's stays empty: its state lives on its modules
    sliding = layer.is_windowed
    if layer.state_shapes:
        return ("LinearAttentionAnd" + ("Static" if static else "")
                + ("SlidingWindow" if sliding else "Full") + "AttentionLayer")
    return ("Static" if static else "Dynamic") + ("SlidingWindowLayer" if sliding else "Layer")


def transformers_rows(spec: ModelSpec, prompt_tokens: int, decode_steps: int = 0, dtype="bf16",
                      cache: str = "dynamic", max_cache_len: int | None = None) -> tuple[TransformersLayerBytes, ...]:
    """Per layer: Σ tokens kept · n_kv·(d_k + d_v)·b (MLA: (r + d_R)·b) + recurrent state, as transformers holds it."""
    p = positive_int("prompt_tokens", prompt_tokens)
    d = decode_steps if decode_steps == 0 else positive_int("decode_steps", decode_steps)
    if cache not in CACHES:
        raise InputError(f"cache {cache!r} is not one of {', '.join(CACHES)}")
    b = DTYPE_BYTES[_model_dtype(dtype)]
    t, last = p + d, 1 if d else p
    max_len = t if max_cache_len is None else positive_int("max_cache_len", max_cache_len)
    if max_len < t:
        raise InputError(f"max_cache_len must be at least prompt + decode steps = {t}, got {max_len}")
    if cache == "dynamic" and max_cache_len is not None:
        raise InputError("max_cache_len applies to cache 'static' (a DynamicCache grows)")
    if cache == "static" and any(x.compress_ratio for x in spec.layers):
        raise InputError("transformers' DeepSeek-V4 keeps its compressor state on its own dynamic cache layers and "
                         "does not support a StaticCache; use cache 'dynamic'")
    if spec.config.get("use_cache") is False:  # generate keeps no cache and re-feeds the sequence
        return tuple(TransformersLayerBytes(i, x.kind, "", 0, 0, 0) for i, x in enumerate(spec.layers))
    rows = []
    for i, declared in enumerate(spec.layers):
        layer = transformers_layer(spec, declared, i)
        per_token = layer.elements_per_token * b
        empty = not layer.caches_tokens or spec.model_type in UNCACHED_MODEL_TYPES
        view, held = (0, 0) if empty else _attention_tokens(layer, t, last, cache, max_len)
        if layer.compress_ratio:  # DeepSeek-V4's CSA / HCA layers
            kv, state, storage = compressed_layer_bytes(layer, t, last, view, held, b)
            name = "DeepseekV4CSACache" if layer.index_head_dim else "DeepseekV4HCACache"
            rows.append(TransformersLayerBytes(i, declared.kind, name, kv, state, storage))
            continue
        state = state_bytes(layer, b)
        # RecurrentGemma's conv1d_state is a K − 1 view over K columns
        extra = (b * layer.state_shapes[0][1][1]
                 if layer.recurrent_family == "rg_lru" and layer.kind == "recurrent" and cache == "dynamic" else 0)
        rows.append(TransformersLayerBytes(i, declared.kind, _class_name(layer, cache, _indexed(spec, i),
                                                                       spec.model_type in EMPTY_ATTENTION_MODEL_TYPES),
                                           view * per_token, state, held * per_token + state + extra))
    return tuple(rows)
