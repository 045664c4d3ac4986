"""mlx-lm 0.32's cache rules, one function each: how its caches grow and which cache each layer gets (pure).

Contract
- ``feeds`` are the token counts of successive model calls. :func:`generate_step_feeds` is what
  ``mlx_lm.generate_step`` does with a P-token prompt: P - 1 tokens in calls of at most S
  (``prefill_step_size``), the last prompt token alone, then D single tokens.
- Growth (``mlx_lm/models/cache.py``): :func:`kv_cache_slots` (KVCache, also QuantizedKVCache),
  :func:`rotating_cache_slots` (RotatingKVCache), :func:`chunked_cache_slots` (ChunkedKVCache as llama4
  drives it); each returns the token slots the cache's arrays have after the feeds.
- Layout: :func:`mlx_lm_caches` is the :class:`EngineCache` each layer of a spec gets from
  ``make_prompt_cache`` (each model file's ``make_cache``): the windows mlx-lm applies and those it
  ignores, MLA's latent (deepseek_v3, kimi_k2) or DeepSeek-V2's (and MiniCPM3's) expanded per-head K/V,
  ArraysCache for recurrent layers, CacheList for a layer with both (falcon_h1), for DSA's latent + indexer
  keys (deepseek_v32, glm_moe_dsa) and for LongCat-Flash's two MLA blocks. Where mlx-lm builds a family
  otherwise than transformers: bailing_hybrid's linear layers keep one fp32 GLA state, minimax.py builds
  every MiniMax-Text-01 layer as softmax attention, mimo_v2_flash reads swa_* heads and sliding_window_size.
- Dtypes: :func:`state_in_fp32` (Mamba-2 / Gated DeltaNet ssm state), :func:`quantized_vector_bytes`
  (kv_bits packing, and where a QuantizedKVCache cannot hold 5 or 6 bits: InputError, one line).
- Checked against mlx-lm 0.32.2's measured ``nbytes`` in tests/test_engines_mlx_lm.py; docs/engines.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .config import LayerSpec, ModelSpec
from .units import (
    DEFAULT_STEP,
    GROUP_SIZES,
    MLX_LM_PREFILL_STEP,
    InputError,
    positive_int,
)
from .validate import MAX_TOKENS, as_int


# the most multi-token calls a feed list may hold (each is simulated; single-token runs are closed-form)
MAX_PREFILL_CALLS = 100_000


class Feeds(Sequence):
    """Token counts of successive model calls kept as runs ``((size, count), ...)``: O(runs) memory, so
    10^12 decode steps are one run, never a tuple of 10^12 ones. Compares equal to the same tuple."""

    __slots__ = ("runs",)

    def __init__(self, runs=()):
        merged: list[tuple[int, int]] = []
        for size, count in runs:
            if count:
                if merged and merged[-1][0] == size:
                    merged[-1] = (size, merged[-1][1] + count)
                else:
                    merged.append((size, count))
        self.runs = tuple(merged)

    def __len__(self) -> int:
        return sum(count for _, count in self.runs)

    @property
    def tokens(self) -> int:
        """Σ feeds without iterating them."""
        return sum(size * count for size, count in self.runs)

    def __iter__(self):
        for size, count in self.runs:
            for _ in range(count):
                yield size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        n = len(self)
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError("feeds index out of range")
        for size, count in self.runs:
            if i < count:
                return size
            i -= count

    def __eq__(self, other):
        if isinstance(other, (Feeds, tuple, list)):
            return self.runs == as_feeds(other, check=False).runs
        return NotImplemented

    def __hash__(self):
        return hash(self.runs)

    def __repr__(self):
        return f"Feeds({self.runs!r})"


def as_feeds(feeds, check: bool = True) -> Feeds:
    """``feeds`` (a Feeds or any iterable of call sizes) as a Feeds; each size a positive integer."""
    if isinstance(feeds, Feeds):
        return feeds
    return Feeds((positive_int("feeds", size) if check else size, 1) for size in feeds)


def feeds_tokens(feeds) -> int:
    """Σ feeds: the tokens fed (O(runs) for a Feeds)."""
    return feeds.tokens if isinstance(feeds, Feeds) else sum(feeds)


def generate_step_feeds(prompt_tokens: int, prefill_step: int = MLX_LM_PREFILL_STEP,
                        decode_steps: int = 0) -> Feeds:
    """Tokens per model call in ``generate_step``: P - 1 in calls of ≤ S, then 1 (last prompt token), then D × 1.

    Returned as runs (:class:`Feeds`); at most MAX_PREFILL_CALLS calls of more than one token.
    """
    p = as_int("prompt_tokens", prompt_tokens, 1, MAX_TOKENS)
    s = as_int("prefill_step", prefill_step, 1, MAX_TOKENS)
    d = as_int("decode_steps", decode_steps, 0, MAX_TOKENS)
    full, rest = divmod(p - 1, s)
    if s > 1 and full > MAX_PREFILL_CALLS:
        raise InputError(f"prompt_tokens {p} in steps of prefill_step {s} makes {full} prefill calls; accepted: "
                         f"at most {MAX_PREFILL_CALLS} (raise prefill_step)")
    return Feeds(((s, full), (rest, 1 if rest else 0), (1, 1 + d)))


# ---------------------------------------------------------------- growth rules (cache.py)
# Each rule walks the runs of the feeds: a run of single tokens (decode) is closed-form or jumps to the
# next reallocation; multi-token calls are simulated one by one. The *_stepwise functions are the
# readable reference (one iteration per call), tested equal.


def kv_cache_slots(feeds, step: int = DEFAULT_STEP) -> int:
    """KVCache token slots: when offset + S overflows, cap = (offset if offset % step else cap) + step·⌈S/step⌉."""
    cap = offset = 0
    for s, n in as_feeds(feeds).runs:
        if s == 1:  # single tokens: cap >= offset always, so each growth adds exactly one step
            if offset + n > cap:
                cap += step * -(-(offset + n - cap) // step)
            offset += n
            continue
        for _ in range(n):
            if offset + s > cap:  # an offset off the step grid cuts the buffer there before growing
                cap = (offset if offset % step else cap) + step * -(-s // step)
            offset += s
    return cap


def kv_cache_slots_stepwise(feeds, step: int = DEFAULT_STEP) -> int:
    """Reference for :func:`kv_cache_slots`: one iteration per model call."""
    cap = offset = 0
    for s in feeds:
        if offset + s > cap:
            cap = (offset if offset % step else cap) + step * -(-s // step)
        offset += s
    return cap


def _ring_advance(idx: int, k: int, max_size: int, keep: int) -> int:
    """The ring's write index after k single-token writes: at max_size it wraps to keep, then moves one on."""
    if idx + k <= max_size:
        return idx + k
    k -= max_size - idx  # now at max_size; each next write: keep + 1, keep + 2, ..., max_size, ...
    return keep + 1 + (k - 1) % (max_size - keep)


def rotating_cache_slots(feeds, max_size: int, keep: int = 0, step: int = DEFAULT_STEP) -> int:
    """RotatingKVCache slots: a multi-token call keeps min(held, max_size - 1) + S; one token grows the ring
    by min(step, max_size - offset) while it is short, then overwrites it in place."""
    max_size = as_int("max_size", max_size, 1)
    keep = as_int("keep", keep, 0, max_size - 1)
    cap = idx = offset = 0
    for s, n in as_feeds(feeds).runs:
        while n:
            k = 1
            if s > 1:  # _update_concat: put in temporal order, trim to max_size - 1, append
                held = cap if (idx == cap or idx < offset) else idx
                cap = s if cap == 0 else min(held, max_size - 1) + s
                idx = cap
            elif cap and idx <= cap <= max_size and not (offset >= cap and cap < max_size):
                # in place, no growth until offset reaches cap (never, once the ring is full): jump
                k = n if cap == max_size else min(n, cap - offset)
                idx = _ring_advance(idx, k, max_size, keep)
            else:  # _update_in_place, one call as mlx-lm makes it
                if cap == 0 or (offset >= cap and cap < max_size):
                    cap, idx = cap + min(step, max_size - offset), offset
                if cap > max_size:
                    cap = idx = max_size
                if idx == max_size:
                    idx = keep
                idx += 1
            offset, n = offset + s * k, n - k
    return cap


def rotating_cache_slots_stepwise(feeds, max_size: int, keep: int = 0, step: int = DEFAULT_STEP) -> int:
    """Reference for :func:`rotating_cache_slots`: one iteration per model call."""
    cap = idx = offset = 0
    for s in feeds:
        if s > 1:
            held = cap if (idx == cap or idx < offset) else idx
            cap = s if cap == 0 else min(held, max_size - 1) + s
            idx = cap
        else:
            if cap == 0 or (offset >= cap and cap < max_size):
                cap, idx = cap + min(step, max_size - offset), offset
            if cap > max_size:
                cap = idx = max_size
            if idx == max_size:
                idx = keep
            idx += 1
        offset += s
    return cap


def _chunked_call(cap: int, held: int, s: int, chunk_size: int, step: int) -> tuple[int, int]:
    """(cap, held) after one call of s tokens; held = offset - start (only that difference matters)."""
    if cap and held > chunk_size:  # maybe_trim_front
        held, cap = chunk_size, chunk_size
    if cap == 0 or held + s > cap:
        cap = (held if cap and held % step else cap) + step * -(-s // step)
    return cap, held + s


def chunked_cache_slots(feeds, chunk_size: int, step: int = DEFAULT_STEP) -> int:
    """ChunkedKVCache slots (llama4): before each call the front is cut to the last C tokens; the buffer then
    grows like a KVCache from there, so after a call it holds between C and C + step slots."""
    cap = held = 0
    for s, n in as_feeds(feeds).runs:
        while n:
            if s == 1 and cap and held <= chunk_size and held + 1 <= cap:  # calls that only append: jump
                k = min(n, chunk_size - held + 1, cap - held)
                held, n = held + k, n - k
                continue
            new = _chunked_call(cap, held, s, chunk_size, step)
            n -= 1
            if s == 1 and new == (cap, held) or (s == 1 and new == _chunked_call(*new, 1, chunk_size, step)):
                cap, held = new  # a fixed point: every further single-token call leaves the same state
                break
            cap, held = new
    return cap


def chunked_cache_slots_stepwise(feeds, chunk_size: int, step: int = DEFAULT_STEP) -> int:
    """Reference for :func:`chunked_cache_slots`: one iteration per model call."""
    cap = offset = start = 0
    for s in feeds:
        if cap and offset - start > chunk_size:
            start, cap = offset - chunk_size, chunk_size
        held = offset - start
        if cap == 0 or held + s > cap:
            cap = (held if cap and held % step else cap) + step * -(-s // step)
        offset += s
    return cap


# ---------------------------------------------------------------- which cache each layer gets


@dataclass(frozen=True)
class EngineCache:
    """One layer's cache in mlx-lm: its class and what sets its bytes.

    K/V classes hold ``heads`` × (``key_dim`` + ``value_dim``) elements per slot; ``ArraysCache`` holds
    ``state``: (elements, kept in fp32) per array; ``CacheList`` holds ``parts``.
    """

    cls: str
    heads: int = 0
    key_dim: int = 0
    value_dim: int = 0
    max_size: int | None = None
    keep: int = 0
    chunk_size: int | None = None
    state: tuple[tuple[int, bool], ...] = ()
    parts: tuple[EngineCache, ...] = ()


def state_in_fp32(recurrent_family: str, state_name: str) -> bool:
    """mlx-lm keeps the Mamba-2 and Gated DeltaNet recurrent state (every state but ``conv``) in fp32; conv
    states, Mamba-1 and RG-LRU states follow the model dtype (mamba2.py / ssm.py, gated_delta.py, mamba.py,
    recurrent_gemma.py)."""
    return state_name != "conv" and recurrent_family in ("mamba2", "gated_deltanet")


def _kv(layer: LayerSpec, cls: str = "KVCache", **extra) -> EngineCache:
    return EngineCache(cls, layer.num_key_value_heads, layer.head_dim, layer.v_head_dim, **extra)


def _arrays(layer: LayerSpec) -> EngineCache:
    return EngineCache("ArraysCache", state=tuple(
        (math.prod(shape), state_in_fp32(layer.recurrent_family, name)) for name, shape in layer.state_shapes))


def _plain(spec: ModelSpec, layer: LayerSpec) -> EngineCache | None:
    """No window: every attention layer a KVCache, MLA the latent (keys d_c, values d_h^R, one head),
    recurrent layers an ArraysCache, attention beside a state a CacheList(ArraysCache, KVCache)."""
    if layer.kind == "none":
        return None
    if layer.kind == "recurrent":
        return _arrays(layer)
    if layer.kind == "mla":
        return EngineCache("KVCache", 1, layer.kv_lora_rank, layer.qk_rope_head_dim)
    if layer.state_shapes:
        return EngineCache("CacheList", parts=(_arrays(layer), _kv(layer)))
    return _kv(layer)


def _window(spec: ModelSpec, name: str, default: int | None = None) -> int:
    return positive_int(name, spec.config.get(name, default))


def _layer_types_windows(spec):
    """llama, mistral (llama.py): a RotatingKVCache(sliding_window) only where layer_types says so."""
    types = spec.config.get("layer_types") or ()
    return [_kv(layer, "RotatingKVCache", max_size=_window(spec, "sliding_window"))
            if i < len(types) and types[i] == "sliding_attention" else _plain(spec, layer)
            for i, layer in enumerate(spec.layers)]


def _pattern_windows(pattern_default: int, window_default: int):
    """gemma3_text, cohere2: layer i is global when i % pattern == pattern - 1, else RotatingKVCache(window)."""
    def layout(spec):
        p = _window(spec, "sliding_window_pattern", pattern_default)
        w = _window(spec, "sliding_window", window_default)
        return [_plain(spec, layer) if i % p == p - 1 else _kv(layer, "RotatingKVCache", max_size=w)
                for i, layer in enumerate(spec.layers)]
    return layout


def _gpt_oss(spec):
    """gpt_oss.py: layer_types (default sliding, full, ...); sliding layers RotatingKVCache(sliding_window)."""
    types = spec.config.get("layer_types") or ("sliding_attention", "full_attention") * (len(spec.layers) // 2)
    w = _window(spec, "sliding_window", 128)
    return [_plain(spec, layer) if t == "full_attention" else _kv(layer, "RotatingKVCache", max_size=w)
            for t, layer in zip(types, spec.layers)]


def _llama4(spec):
    """llama4.py: ChunkedKVCache(attention_chunk_size) unless (i + 1) % 4 == 0 (whatever no_rope_layers says);
    a text-only ``llama4_text`` config loads llama4_text.py, which has no make_cache: no chunks."""
    if spec.config.get("outer_model_type", spec.model_type) != "llama4":
        return [_plain(spec, layer) for layer in spec.layers]
    c = _window(spec, "attention_chunk_size")
    return [_plain(spec, layer) if (i + 1) % 4 == 0 else _kv(layer, "ChunkedKVCache", chunk_size=c)
            for i, layer in enumerate(spec.layers)]


def _recurrent_gemma(spec):
    """recurrent_gemma.py: attention layers RotatingKVCache(attention_window_size), others ArraysCache."""
    return [_kv(layer, "RotatingKVCache", max_size=layer.sliding_window) if layer.kind == "sliding"
            else _plain(spec, layer) for layer in spec.layers]


def _deepseek_v2(spec):
    """deepseek_v2.py (and minicpm3.py) cache K = [k_nope, k_pe] and V per head: H × (d_nope + d_rope + d_v)
    per token."""
    return [EngineCache("KVCache", spec.num_attention_heads, spec.qk_nope_head_dim + layer.qk_rope_head_dim,
                        spec.v_head_dim) for layer in spec.layers]


def _kind_windows(spec):
    """olmo3, afmoe, laguna, mellum, exaone_moe, ministral3, gemma3n, gemma4 (their make_cache): a
    RotatingKVCache(window, keep 0) on every sliding layer (each reads layer_types as transformers does), a
    KVCache elsewhere; KV-shared layers get no cache."""
    return [_kv(layer, "RotatingKVCache", max_size=layer.sliding_window) if layer.kind == "sliding"
            else _plain(spec, layer) for layer in spec.layers]


def _exaone4(spec):
    """exaone4.py: layer i is local (RotatingKVCache(sliding_window)) where the string sliding_window_pattern
    ("LLLG") has "L" at i % len; layer_types is not read; no pattern: no windows."""
    pattern = spec.config.get("sliding_window_pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise InputError(f"mlx-lm 0.32's exaone4 reads sliding_window_pattern as a string such as 'LLLG' "
                         f"(L local, G global); got {pattern!r}, on which it raises TypeError")
    w = _window(spec, "sliding_window") if pattern and "L" in pattern else None
    return [_kv(layer, "RotatingKVCache", max_size=w) if pattern and pattern[i % len(pattern)] == "L"
            else _plain(spec, layer) for i, layer in enumerate(spec.layers)]


def _mimo_v2_flash(spec):
    """mimo_v2_flash.py: layer i slides where hybrid_layer_pattern[i] is 1, in a RotatingKVCache(sliding_window_size)
    of swa_num_key_value_heads heads, K of swa_head_dim, V of swa_v_head_dim (fields it requires); others a
    KVCache of the full layer's heads (transformers' window is sliding_window_size + 1: kvsim's spec)."""
    cfg = spec.config
    missing = [k for k in ("hybrid_layer_pattern", "sliding_window_size", "swa_num_key_value_heads", "swa_head_dim",
                           "swa_v_head_dim") if cfg.get(k) is None]
    if missing:
        raise InputError(f"mlx-lm 0.32's mimo_v2_flash requires {', '.join(missing)} in the config; "
                         "this one lacks them")
    pattern = cfg["hybrid_layer_pattern"]
    return [EngineCache("RotatingKVCache", cfg["swa_num_key_value_heads"], cfg["swa_head_dim"], cfg["swa_v_head_dim"],
                        max_size=_window(spec, "sliding_window_size")) if pattern[i] == 1 else _plain(spec, layer)
            for i, layer in enumerate(spec.layers)]


def _longcat_flash(spec):
    """longcat_flash.py: one CacheList(KVCache, KVCache) per decoder layer holds both of its MLA blocks' latents;
    kvsim's spec lists the two blocks as consecutive layers, so the first carries the CacheList, the second none."""
    return [EngineCache("CacheList", parts=(_plain(spec, layer), _plain(spec, spec.layers[i + 1]))) if i % 2 == 0
            else None for i, layer in enumerate(spec.layers)]


def _dsa(spec):
    """deepseek_v32.py (glm_moe_dsa.py subclasses it): every layer a CacheList(latent KVCache, indexer KVCache);
    the indexer caches its one-head keys of index_head_dim as keys and again as values (it stores k for both,
    then zeros of the keys' shape), on every layer, glm_moe_dsa's skipped-indexer layers included."""
    d_i = positive_int("index_head_dim", spec.config.get("index_head_dim"))
    return [EngineCache("CacheList", parts=(_plain(spec, layer), EngineCache("KVCache", 1, d_i, d_i)))
            for layer in spec.layers]


def _lightning_gla(spec):
    """bailing_hybrid.py: its linear layers run gated linear attention, not KDA: one ArraysCache array of
    (num_attention_heads, d, d) in fp32 (d = head_dim or hidden / heads; linear_* are not read), no conv state.
    A config whose architectures name BailingMoeV3ForCausalLM runs bailing_moe_v3.py instead
    (utils.MODEL_ARCHITECTURE_REMAPPING: KDA, three conv states and a delta-rule state): refused, not modelled."""
    if "BailingMoeV3ForCausalLM" in (spec.config.get("architectures") or ()):
        raise InputError("mlx-lm 0.32 builds a bailing_hybrid config with architectures BailingMoeV3ForCausalLM from "
                         "models/bailing_moe_v3.py (KDA), whose caches kvsim does not model yet; use --engine kvsim, "
                         "transformers or vllm")
    heads = spec.config["num_attention_heads"]
    d = spec.config.get("head_dim") or spec.config["hidden_size"] // heads
    return [EngineCache("ArraysCache", state=((heads * d * d, True),)) if layer.kind == "recurrent"
            else _plain(spec, layer) for layer in spec.layers]


def _softmax_everywhere(spec):
    """minimax.py is MiniMax-M2's model: it builds every layer of a MiniMax-Text-01 config as softmax
    attention (num_key_value_heads heads of head_dim or hidden / heads), lightning layers included."""
    heads = spec.config["num_attention_heads"]
    d = spec.config.get("head_dim") or spec.config["hidden_size"] // heads
    kv = spec.config.get("num_key_value_heads") or heads
    return [EngineCache("KVCache", kv, d, d) for _ in spec.layers]


MLX_LM_LAYOUTS = {
    "llama": _layer_types_windows, "mistral": _layer_types_windows,
    "gemma3": _pattern_windows(6, 512), "gemma3_text": _pattern_windows(6, 512), "cohere2": _pattern_windows(4, 4096),
    "gpt_oss": _gpt_oss, "llama4": _llama4, "llama4_text": _llama4, "recurrent_gemma": _recurrent_gemma,
    "deepseek_v2": _deepseek_v2, "minicpm3": _deepseek_v2, "exaone4": _exaone4, "bailing_hybrid": _lightning_gla,
    "minimax": _softmax_everywhere,
    "mimo_v2_flash": _mimo_v2_flash, "longcat_flash": _longcat_flash, "deepseek_v32": _dsa, "glm_moe_dsa": _dsa,
    **{t: _kind_windows for t in ("olmo3", "afmoe", "laguna", "mellum", "exaone_moe", "ministral3", "gemma3n",
                                  "gemma3n_text", "gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text")},
}


def mlx_lm_caches(spec: ModelSpec) -> tuple[EngineCache | None, ...]:
    """The cache mlx-lm 0.32's ``make_prompt_cache`` gives each layer (None: the layer keeps none).

    Families not in MLX_LM_LAYOUTS (phi3, gemma2, qwen2/3, mixtral, llama4_text, jamba, qwen3_next, ...)
    get no window: a KVCache per attention layer, whatever sliding_window their config sets.
    """
    if any(x.k_eq_v for x in spec.layers):  # DeepSeek-V4
        raise InputError(f"mlx-lm 0.32 has no {spec.model_type} model (its deepseek_v41 is another model type with "
                         "a LayerCache of its own); use --engine kvsim or transformers")
    if spec.model_type not in MLX_LM_LAYOUTS and any(x.index_head_dim for x in spec.layers):  # h22-fam-attn
        raise InputError(f"kvsim has no mlx-lm rule for {spec.model_type}'s DSA indexer keys (it models mlx-lm's "
                         "deepseek_v32 and glm_moe_dsa); use --engine kvsim or transformers")
    return tuple(MLX_LM_LAYOUTS.get(spec.model_type, lambda s: [_plain(s, x) for x in s.layers])(spec))


def quantized_vector_bytes(dim: int, bits: int, group_size: int, scale_bytes: int, fresh: bool = False) -> int:
    """One vector of a QuantizedKVCache: 4·(d·bits/32) packed bytes + a scale and a bias per group of g.

    ``fresh``: a QuantizedKVCache built empty allocates d // (32 // bits) uint32 words, which is not
    d·bits/32 for some 3, 5 and 6-bit widths, and ``update_and_fetch`` then fails (one caught here).
    ``KVCache.to_quantized`` (generate_step's kv_bits path) packs with mx.quantize and always fits.
    """
    if dim % group_size:
        ok = [g for g in GROUP_SIZES if dim % g == 0]
        raise InputError(f"mx.quantize needs group_size {group_size} to divide every cached width, and {dim} is "
                         f"not a multiple; accepted: {', '.join(map(str, ok)) or 'none (use a float dtype)'}")
    words = dim * bits // 32
    if fresh and dim // (32 // bits) != words:
        raise InputError(f"mlx-lm's QuantizedKVCache cannot hold {bits}-bit K/V of width {dim}: it allocates "
                         f"{dim} // {32 // bits} = {dim // (32 // bits)} uint32 words where mx.quantize writes {words}")
    return 4 * words + 2 * (dim // group_size) * scale_bytes
