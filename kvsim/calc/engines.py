"""What an engine's caches hold after a prompt and some decode steps: kvsim's, mlx-lm 0.32's or transformers 5.24's (pure).

Contract
- :func:`engine_bytes` sizes the caches of a sequence for ``engine`` "kvsim" (kvsim's caches: the
  allocated view of :mod:`kvsim.calc.memory` at T = every token fed) or "mlx-lm" (the classes mlx-lm
  0.32 builds, grown as its ``update_and_fetch`` grows them: :mod:`kvsim.calc.mlx_lm_rules`), after a
  P-token prompt prefilled in steps of S and D decode steps (generate_step's feeds).
- Per layer (:class:`LayerBytes`): the cache class, growing K/V (or latent) bytes and fixed recurrent
  state bytes; for mlx-lm their sum is what ``sum(c.nbytes for c in cache)`` reports.
- :func:`mlx_lm_bytes` / :func:`kvsim_bytes` take any ``feeds`` (e.g. a prompt fed as 10 + 290 tokens);
  mlx_lm_bytes takes mlx-lm's own settings (model dtype, kv_bits, kv_group_size, quantized_kv_start).
- Where mlx-lm refuses (kv_bits on a sliding-window model, 5 or 6 bits a fresh QuantizedKVCache cannot
  hold) or a setting has no mlx-lm meaning (batch, tp, fp8): :class:`~kvsim.calc.units.InputError`.
- "transformers": the caches ``generate`` leaves (:mod:`kvsim.calc.engines_transformers`), ``DynamicCache``
  or with ``cache="static"`` a ``StaticCache`` of ``max_cache_len`` slots; its EngineBytes also carries
  ``storage_bytes``, what the sliding views pin (``held_storage_bytes`` in the summary).
- "vllm": what vLLM 0.33 holds for one request (:func:`vllm_bytes` over :mod:`kvsim.calc.engines_vllm`, its prompt
  scheduled in vLLM's chunks, not mlx-lm's feeds); ``kvsim calc --engine all`` tabulates every engine here
  (:mod:`kvsim.calc.engines_all`).
- :func:`engine_summary` is the JSON block ``kvsim calc --engine`` prints; :func:`format_engine_summary` its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import engines_transformers, engines_vllm, memory
from .config import Kind, ModelSpec
from .mlx_lm_rules import (
    EngineCache,
    Feeds,
    as_feeds,
    chunked_cache_slots,
    feeds_tokens,
    generate_step_feeds,
    kv_cache_slots,
    mlx_lm_caches,
    quantized_vector_bytes,
    rotating_cache_slots,
)
from .units import (
    DEFAULT_STEP,
    DTYPE_BYTES,
    FLOAT_DTYPES,
    MLX_LM_PREFILL_STEP,
    MLX_LM_QUANTIZED_KV_START,
    MLX_QUANTIZE_BITS,
    InputError,
    dtype_key,
    format_bytes,
)

ENGINES = ("kvsim", "mlx-lm", "transformers", "vllm")  # transformers, vllm: kvsim.calc.engines_*
# columns of `kvsim calc --engine all` beyond one per engine: transformers' two cache classes side by side
# (StaticCache sized as generate sizes it, prompt + decode steps)
ENGINE_VARIANTS = {"transformers": (("transformers dynamic", {"cache": "dynamic"}),
                                    ("transformers static", {"cache": "static"}))}


@dataclass(frozen=True)
class LayerBytes:
    """One layer's cache in an engine: its class, growing K/V (or latent) bytes and fixed state bytes."""

    index: int
    kind: str
    cache: str
    kv_bytes: int
    state_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.kv_bytes + self.state_bytes


@dataclass(frozen=True)
class EngineBytes:
    """Every layer's cache bytes after ``feeds`` (the token counts of successive model calls)."""

    engine: str
    feeds: Feeds
    layers: tuple[LayerBytes, ...]
    quantized: bool = False
    storage_bytes: int | None = None  # transformers: the storage its tensors pin (None: = total_bytes)

    @property
    def tokens(self) -> int:
        return feeds_tokens(self.feeds)

    @property
    def kv_bytes(self) -> int:
        return sum(x.kv_bytes for x in self.layers)

    @property
    def state_bytes(self) -> int:
        return sum(x.state_bytes for x in self.layers)

    @property
    def total_bytes(self) -> int:
        return self.kv_bytes + self.state_bytes


def _cache_bytes(c: EngineCache, feeds, b: int, quant) -> tuple[int, int]:
    """(K/V bytes, state bytes) of one mlx-lm cache after ``feeds``; ``quant`` = (bits, g, fresh) for KVCaches."""
    if c.cls == "CacheList":
        parts = [_cache_bytes(p, feeds, b, None) for p in c.parts]  # CacheList has no to_quantized
        return sum(kv for kv, _ in parts), sum(st for _, st in parts)
    if c.cls == "ArraysCache":  # arrays exist once a call has written them
        return 0, (sum(n * (DTYPE_BYTES["fp32"] if fp32 else b) for n, fp32 in c.state) if feeds else 0)
    if c.cls == "RotatingKVCache":
        slots = rotating_cache_slots(feeds, c.max_size, c.keep)
    elif c.cls == "ChunkedKVCache":
        slots = chunked_cache_slots(feeds, c.chunk_size)
    else:
        slots = kv_cache_slots(feeds)
    if quant and c.cls == "KVCache":
        per_slot = c.heads * sum(quantized_vector_bytes(d, *quant[:2], b, quant[2]) for d in (c.key_dim, c.value_dim))
    else:
        per_slot = c.heads * (c.key_dim + c.value_dim) * b
    return slots * per_slot, 0


def _float_dtype(dtype) -> str:
    key = dtype_key(dtype)
    if key not in FLOAT_DTYPES:
        raise InputError(f"mlx-lm keeps K/V in the model dtype; dtype {dtype!r} is not one of "
                         f"{', '.join(FLOAT_DTYPES)}")
    return key


def mlx_lm_bytes(spec: ModelSpec, feeds, dtype="bf16", kv_bits: int | None = None, kv_group_size: int = 64,
                 quantized_kv_start: int = MLX_LM_QUANTIZED_KV_START, quantized_cache: bool = False) -> EngineBytes:
    """What mlx-lm 0.32's caches hold after ``feeds``: Σ_layers slots·bytes per slot + state arrays.

    ``dtype`` is the model's (K/V, conv states and quantization scales are kept in it). With ``kv_bits``,
    generate_step quantizes every KVCache (slack included) once the cache holds ``quantized_kv_start``
    tokens; a RotatingKVCache then raises NotImplementedError. ``quantized_cache``: the caller built
    QuantizedKVCache(kv_group_size, kv_bits) for those layers from the start.
    """
    feeds = as_feeds(feeds)  # runs: 10^12 decode steps take O(1) memory
    b = DTYPE_BYTES[_float_dtype(dtype)]
    caches = mlx_lm_caches(spec)
    quant = None
    if kv_bits is not None:
        if kv_bits not in MLX_QUANTIZE_BITS:
            raise InputError(f"kv_bits {kv_bits!r} is not one of {', '.join(map(str, MLX_QUANTIZE_BITS))}")
        if quantized_cache or sum(feeds) >= quantized_kv_start:
            if not quantized_cache and any(c is not None and c.cls == "RotatingKVCache" for c in caches):
                raise InputError(f"mlx-lm cannot quantize {spec.model_type}'s sliding-window layers: "
                                 "RotatingKVCache.to_quantized raises NotImplementedError")
            quant = (kv_bits, kv_group_size, quantized_cache)
    rows = []
    for i, (layer, c) in enumerate(zip(spec.layers, caches)):
        kv, state = (0, 0) if c is None else _cache_bytes(c, feeds, b, quant)
        name = "" if c is None else ("QuantizedKVCache" if quant and c.cls == "KVCache" else c.cls)
        rows.append(LayerBytes(i, layer.kind, name, kv, state))
    return EngineBytes("mlx-lm", feeds, tuple(rows), quant is not None)


_KVSIM_CLASSES = {"full": "KVCache", "sliding": "RotatingKVCache", "chunked": "ChunkedKVCache",
                  "mla": "LatentCache", "recurrent": "RecurrentStateCache", "none": ""}


def kvsim_bytes(spec: ModelSpec, feeds, kv_dtype="bf16", state_dtype="bf16", batch: int = 1, tp: int = 1,
                step: int = DEFAULT_STEP) -> EngineBytes:
    """kvsim's caches after ``feeds``: the allocated view at T = Σ feeds (:func:`memory.layer_kv_bytes`)
    plus B · state_bytes per layer; kvsim's caches grow by whole steps wherever the offset is."""
    feeds = as_feeds(feeds)
    dt = memory.parse_kv_dtype(kv_dtype)
    t = feeds.tokens
    rows = []
    for i, layer in enumerate(spec.layers):
        kv = memory.layer_kv_bytes(layer, t, dt, batch, "allocated", step, tp=tp)
        quantized = dt.quantized and layer.caches_tokens and layer.kind != Kind.CHUNKED
        cls = "QuantizedKVCache" if quantized else _KVSIM_CLASSES[layer.kind]
        if layer.k_eq_v:  # DeepSeek-V4: the formula's one K = V tensor (+ its compressed entries)
            cls += "(K=V)" + (" + compressed entries" if layer.compress_ratio else "")
        rows.append(LayerBytes(i, layer.kind, cls, kv, batch * memory.state_bytes(layer, state_dtype)))
    return EngineBytes("kvsim", feeds, tuple(rows), dt.quantized)


def engine_bytes(spec: ModelSpec, engine: str = "kvsim", *, prompt_tokens: int, prefill_step: int = MLX_LM_PREFILL_STEP,
                 decode_steps: int = 0, kv_dtype="bf16", state_dtype="bf16", batch: int = 1, tp: int = 1,
                 quantized_kv_start: int = MLX_LM_QUANTIZED_KV_START, cache: str = "dynamic",
                 max_cache_len: int | None = None) -> EngineBytes:
    """One engine's caches after a P-token prompt fed in steps of S and D decode steps (generate_step's feeds).

    kvsim: :func:`kvsim_bytes`. mlx-lm: :func:`mlx_lm_bytes` with ``kv_dtype`` read as mlx-lm's settings
    (a float dtype is the model dtype; qN is kv_bits N with ``scale_dtype`` as the model dtype).
    transformers: :func:`~kvsim.calc.engines_transformers.transformers_rows` (``kv_dtype`` the model dtype,
    ``cache`` "dynamic" or "static" with ``max_cache_len``; generate's feeds are P, then D single tokens).
    """
    if engine == "transformers":
        return _transformers(spec, prompt_tokens, decode_steps, kv_dtype, batch, tp, cache, max_cache_len)
    feeds = generate_step_feeds(prompt_tokens, prefill_step, decode_steps)
    if engine == "kvsim":
        return kvsim_bytes(spec, feeds, kv_dtype, state_dtype, batch, tp)
    if engine == "vllm":  # one request, scheduled by vLLM 0.33 (its prompt chunks, not mlx-lm's feeds)
        if batch != 1:
            raise InputError(f"batch must be 1 for engine vllm (one request), got {batch}")
        return vllm_bytes(spec, prompt_tokens, decode_steps, memory.parse_kv_dtype(kv_dtype).name, tp)
    if engine != "mlx-lm":
        raise InputError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    dt = memory.parse_kv_dtype(kv_dtype)
    for name, value, ok in (("batch", batch, 1), ("tp", tp, 1), ("full_precision_tokens", dt.full_precision_tokens, 0)):
        if value != ok:
            raise InputError(f"{name} must be {ok} for engine mlx-lm (generate_step runs one sequence on one device, "
                             f"with no full-precision window), got {value}")
    if dt.quantized:
        return mlx_lm_bytes(spec, feeds, dt.scale_dtype, dt.bits, dt.group_size, quantized_kv_start)
    return mlx_lm_bytes(spec, feeds, _float_dtype(dt.name))


def _transformers(spec, prompt_tokens, decode_steps, kv_dtype, batch, tp, cache, max_cache_len) -> EngineBytes:
    for name, value in (("batch", batch), ("tp", tp)):
        if value != 1:
            raise InputError(f"{name} must be 1 for engine transformers (generate runs one sequence on one "
                             f"device here), got {value}")
    dt = memory.parse_kv_dtype(kv_dtype)
    rows = engines_transformers.transformers_rows(spec, prompt_tokens, decode_steps, dt.name, cache, max_cache_len)
    feeds = (prompt_tokens,) + (1,) * decode_steps
    layers = tuple(LayerBytes(r.index, r.kind, r.cache, r.kv_bytes, r.state_bytes) for r in rows)
    return EngineBytes("transformers", feeds, layers, storage_bytes=sum(r.storage_bytes for r in rows))
def vllm_bytes(spec: ModelSpec, prompt_tokens: int, decode_steps: int = 0, kv_dtype="bf16", tp: int = 1,
               **options) -> EngineBytes:
    """What vLLM 0.33 holds per layer for one request (:func:`kvsim.calc.engines_vllm.vllm_plan`)."""
    plan = engines_vllm.vllm_plan(spec, prompt_tokens, decode_steps, kv_dtype, tp, **options)
    return EngineBytes("vllm", plan.steps, tuple(LayerBytes(*r) for r in engines_vllm.layer_rows(spec, plan)))


def cache_classes(eb: EngineBytes) -> dict[str, int]:
    """How many layers hold each cache class, in first-seen order ('' layers keep none)."""
    out: dict[str, int] = {}
    for row in eb.layers:
        if row.cache:
            out[row.cache] = out.get(row.cache, 0) + 1
    return out


def engine_summary(eb: EngineBytes, prompt_tokens: int, prefill_step: int, decode_steps: int) -> dict:
    """The JSON-able block ``kvsim calc --engine`` prints: allocated K/V, state and total bytes, per layer too."""
    return {
        "engine": eb.engine, "prompt_tokens": prompt_tokens, "prefill_step": prefill_step,
        "decode_steps": decode_steps, "model_calls": len(eb.feeds), "quantized": eb.quantized,
        "cache_classes": cache_classes(eb), "allocated_bytes": eb.kv_bytes,
        "allocated_state_bytes": eb.state_bytes, "allocated_total_bytes": eb.total_bytes,
        "engine_layers": [{"index": r.index, "kind": r.kind, "cache": r.cache, "allocated_bytes": r.kv_bytes,
                           "allocated_state_bytes": r.state_bytes} for r in eb.layers],
        **({} if eb.storage_bytes is None else {"held_storage_bytes": eb.storage_bytes}),
    }


def format_engine_summary(e: dict, asked_quantized: bool = False) -> str:
    """The lines ``kvsim calc --engine`` prints under the summary, from :func:`engine_summary`'s block."""
    steps = f" in steps of {e['prefill_step']:,}" if e["engine"] == "mlx-lm" else ""
    classes = ", ".join(f"{n} {name}" for name, n in e["cache_classes"].items())
    lines = [f"  engine {e['engine']}: {e['prompt_tokens']:,}-token prompt{steps} + {e['decode_steps']:,} decode "
             f"steps ({e['model_calls']:,} model calls)",
             f"  allocated by {e['engine']} ({classes}): {e['allocated_total_bytes']:,} B "
             f"({format_bytes(e['allocated_total_bytes'])})"]
    if e["allocated_state_bytes"]:
        lines.append(f"    K/V {e['allocated_bytes']:,} B + recurrent state {e['allocated_state_bytes']:,} B")
    if e.get("held_storage_bytes", e["allocated_total_bytes"]) != e["allocated_total_bytes"]:
        lines.append(f"    storage held behind the sliding views: {e['held_storage_bytes']:,} B "
                     f"({format_bytes(e['held_storage_bytes'])})")
    if asked_quantized and e["engine"] == "mlx-lm" and not e["quantized"]:
        lines.append("  (K/V stay unquantized: mlx-lm quantizes once the cache holds --quantized-kv-start tokens)")
    return "\n".join(lines)
