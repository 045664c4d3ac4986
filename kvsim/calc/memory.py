"""The KV-cache memory calculator: pure arithmetic over a :class:`~kvsim.calc.config.ModelSpec`.

Contract
- No MLX. Every function is vectorized over ``tokens`` (an int or a numpy array of token counts)
  and returns an int for an int and an int64 array for an array.
- Three views of the same cache, each a function:
  * theoretical (:func:`kv_bytes`): the bytes of the tokens a layer keeps,
    ``M_token = 2 · n_layers · n_kv · d_h · b`` summed per layer, times kept tokens and batch;
  * allocated (:func:`allocated_bytes`): what an allocator really reserves, either growth in steps
    of ``step`` tokens (as kvsim's and mlx-lm's MLX caches grow) or paged blocks of ``block_size``;
  * read (:func:`read_bytes_per_step`): what one decode step reads from the cache.
- Kept tokens per layer kind: full and MLA keep all T; sliding keeps min(T, W); chunked keeps the
  tokens of the current chunk (at most C); recurrent keeps a fixed state, independent of T.
- Recurrent state dtype: ``state_dtype=None`` (the default) keeps each state tensor as the family's
  reference implementation does (SSM / delta-rule / RG-LRU state in fp32, the conv window in
  ``model_dtype``, bf16 unless given); a dtype name overrides every tensor.
- Quantized KV (``q8 q6 q4 q3 q2``) stores per vector of ``d`` elements ``d·bits/8`` bytes of packed
  data plus one scale and one bias per group of ``group_size`` in ``scale_dtype`` (as ``mx.quantize``
  does); the most recent ``full_precision_tokens`` may stay in ``scale_dtype``.
- Tensor parallelism: tp must divide ``n_kv`` (each rank holds ``n_kv / tp`` heads) or be a multiple of it
  (each rank holds 1 head, replicated on ``tp / n_kv`` ranks, as vLLM does); any other tp is an
  :class:`InputError` naming both numbers. The MLA latent is replicated on every rank; recurrent state is
  not sharded here. :func:`tp_split` / :func:`tp_note` say which happened.
- Limits (:mod:`kvsim.calc.validate`): tokens, ``step``, ``block_size`` and ``full_precision_tokens`` are
  integers in [0 or 1, MAX_TOKENS = 2^53]; a size past MAX_BYTES = 2^63 - 1 bytes is refused with an
  InputError (checked in Python ints before any int64 arithmetic, so nothing ever wraps negative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .config import LayerSpec, ModelSpec
from .units import (
    DEFAULT_STEP,
    DTYPE_BYTES,
    FLOAT_DTYPES,
    GROUP_SIZES,
    KV_DTYPES,
    QUANT_BITS,
    InputError,
    dtype_key,
    positive_int,
)
from .validate import MAX_TOKENS, as_int, check_bytes

VIEWS = ("theoretical", "allocated", "read")


@dataclass(frozen=True)
class KVDtype:
    """How cached elements are stored: a float dtype, or grouped integer quantization."""

    name: str
    bits: int
    group_size: int | None = None
    scale_dtype: str | None = None
    full_precision_tokens: int = 0

    @property
    def quantized(self) -> bool:
        return self.name in QUANT_BITS

    def vector_bytes(self, dim: int, field: str = "head_dim", metadata: bool = True) -> int:
        """Bytes of one stored vector of ``dim`` elements: d·b, or d·bits/8 + 2·(d/g)·b_scale.

        ``metadata=False`` leaves out the scales and biases (the seed's "before metadata" view).
        """
        if not self.quantized:
            return dim * DTYPE_BYTES[self.name]
        if dim % self.group_size:
            ok = [g for g in GROUP_SIZES if dim % g == 0]
            raise InputError(f"group_size {self.group_size} does not divide {field} {dim}; "
                             f"accepted: {', '.join(map(str, ok)) or 'none (use a float dtype)'}")
        if dim * self.bits % 32:
            raise InputError(f"{field} {dim} × {self.bits} bits is not a multiple of 32 "
                             f"(mx.quantize packs into uint32)")
        meta = 2 * (dim // self.group_size) * DTYPE_BYTES[self.scale_dtype] if metadata else 0
        return dim * self.bits // 8 + meta

    def full_vector_bytes(self, dim: int, field: str = "head_dim") -> int:
        """Bytes of one vector kept in full precision (``scale_dtype``) when quantized."""
        return dim * DTYPE_BYTES[self.scale_dtype or self.name]


def parse_kv_dtype(name, group_size: int = 64, scale_dtype: str = "bf16",
                   full_precision_tokens: int = 0) -> KVDtype:
    """Parse ``fp32 bf16 fp16 fp8 q8 q6 q4 q3 q2`` (or pass a KVDtype through)."""
    if isinstance(name, KVDtype):
        return name
    key = dtype_key(name)
    if key in DTYPE_BYTES:
        return KVDtype(key, DTYPE_BYTES[key] * 8)
    if key not in QUANT_BITS:
        raise InputError(f"kv dtype {name!r} is unknown; accepted: {', '.join(KV_DTYPES)}")
    if group_size not in GROUP_SIZES:
        raise InputError(f"group_size {group_size!r} is not one of {', '.join(map(str, GROUP_SIZES))}")
    scale = dtype_key(scale_dtype)
    if scale not in FLOAT_DTYPES:
        raise InputError(f"scale_dtype {scale_dtype!r} is not one of {', '.join(FLOAT_DTYPES)}")
    fp_tokens = as_int("full_precision_tokens", full_precision_tokens, 0, MAX_TOKENS)
    return KVDtype(key, QUANT_BITS[key], group_size, scale, fp_tokens)


# ---------------------------------------------------------------- per layer


def _tokens(tokens):
    """``tokens`` as an int64 array after checking every entry is an integer in [0, MAX_TOKENS]
    (integral floats are accepted; a Python int past int64 is refused, not converted)."""
    if isinstance(tokens, int) and not isinstance(tokens, bool):  # the common scalar case
        return np.asarray(as_int("tokens", tokens, 0, MAX_TOKENS), dtype=np.int64)
    try:
        arr = np.asarray(tokens)
    except OverflowError:
        arr = np.asarray(tokens, dtype=object)
    accepted = f"integers in [0, {MAX_TOKENS}]"
    if arr.dtype == object or arr.dtype.kind == "b":
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in arr.flat):
            raise InputError(f"tokens must be {accepted}, got {np.array2string(arr, threshold=5)}")
    elif arr.dtype.kind not in "iuf" or (
            arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.floor(arr)))):
        raise InputError(f"tokens must be {accepted}, got {np.array2string(arr, threshold=5)}")
    if arr.size and (arr.min() < 0 or arr.max() > MAX_TOKENS):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise InputError(f"tokens must be {accepted}, got {bad}")
    return arr.astype(np.int64)


def _out(value, like):
    return int(value) if np.ndim(like) == 0 else np.asarray(value, dtype=np.int64)


def heads_per_rank(layer: LayerSpec, tp: int = 1) -> int:
    """KV heads one tensor-parallel rank holds: n_kv / tp when tp divides n_kv, 1 (a replica) when n_kv divides tp.

    Any other tp would leave heads unevenly split, which serving engines refuse: :class:`InputError`.
    """
    positive_int("tp", tp)
    n_kv = layer.num_key_value_heads
    if n_kv % tp == 0:
        return n_kv // tp
    if tp % n_kv == 0:
        return 1
    raise InputError(f"tp={tp} neither divides num_key_value_heads={n_kv} nor is a multiple of it: "
                     f"choose a divisor of {n_kv} or a multiple of it")


def ranks_per_copy(layer: LayerSpec, tp: int = 1) -> int:
    """Ranks holding the same KV head (or the MLA latent): tp / n_kv when tp > n_kv; tp for MLA; else 1."""
    positive_int("tp", tp)
    if layer.kind == "mla":
        return tp
    if layer.has_kv_heads:
        heads_per_rank(layer, tp)  # tp must divide n_kv or be a multiple of it
        return max(1, tp // layer.num_key_value_heads)
    return 1


def tp_split(spec: ModelSpec, tp: int = 1) -> list[dict]:
    """How ``tp`` ranks share each distinct KV layout (validating tp): one row per (kind, n_kv) with its layers,
    ``heads_per_rank`` and ``ranks_per_copy`` (> 1: replicated). MLA rows have no heads: the latent is on every rank.
    """
    positive_int("tp", tp)
    rows: dict[tuple, dict] = {}
    for layer, count in layer_groups(spec):
        if not layer.caches_tokens:
            continue
        mla = layer.kind == "mla"
        key = ("mla", 0) if mla else ("attention", layer.num_key_value_heads)
        row = rows.setdefault(key, {"kind": key[0], "layers": 0,
                                    "num_key_value_heads": None if mla else layer.num_key_value_heads,
                                    "heads_per_rank": None if mla else heads_per_rank(layer, tp),
                                    "ranks_per_copy": ranks_per_copy(layer, tp)})
        row["layers"] += count
    return list(rows.values())


def tp_note(spec: ModelSpec, tp: int = 1) -> str | None:
    """One sentence saying how tensor parallelism splits or replicates the KV (None when tp = 1 or nothing to say)."""
    if tp == 1:
        return None
    parts = []
    for row in tp_split(spec, tp):
        n_kv = row["num_key_value_heads"]
        heads = f"{n_kv} KV head{'s' if n_kv != 1 else ''}"
        if row["kind"] == "mla":
            parts.append(f"the MLA latent has no heads to split: every one of the {tp} ranks holds all of it")
        elif row["ranks_per_copy"] > 1:
            parts.append(f"{heads} on {tp} ranks: each rank keeps 1 head, each head replicated on "
                         f"{row['ranks_per_copy']} ranks")
        else:
            parts.append(f"{heads} split over {tp} ranks: {row['heads_per_rank']} per rank")
    if any(layer.kind == "recurrent" for layer in spec.layers):
        parts.append("recurrent state is not split (each rank counts all of it)")
    return "; ".join(parts) or None


def layer_token_bytes(layer: LayerSpec, kv_dtype="bf16", tp: int = 1, full_precision: bool = False) -> int:
    """Bytes one token adds to one sequence in one layer: n_kv·(bytes(d_k)+bytes(d_v)) (n_kv·bytes(d_k) when
    K = V) or MLA latent + RoPE key (+ DSA indexer key: bytes(d_c) + bytes(d_R) + bytes(d_I))."""
    dt = parse_kv_dtype(kv_dtype)
    vec = dt.full_vector_bytes if full_precision else dt.vector_bytes
    if layer.has_kv_heads:
        v = 0 if layer.k_eq_v else vec(layer.v_head_dim, "v_head_dim")
        # MiniMax-M3's sparse layers: one indexer key per token, replicated on every rank (V4's is per entry)
        indexer = vec(layer.index_head_dim, "index_head_dim") if layer.index_head_dim and not layer.compress_ratio else 0
        return heads_per_rank(layer, tp) * (vec(layer.head_dim) + v) + indexer
    if layer.kind == "mla":
        indexer = vec(layer.index_head_dim, "index_head_dim") if layer.index_head_dim else 0
        return vec(layer.kv_lora_rank, "kv_lora_rank") + vec(layer.qk_rope_head_dim, "qk_rope_head_dim") + indexer
    return 0


def compressed_entry_bytes(layer: LayerSpec, kv_dtype="bf16") -> int:
    """Bytes of one compressed entry of a DeepSeek-V4 layer: bytes(head_dim) + bytes(index_head_dim) (0 elsewhere).
    The single KV head's entries are replicated on every tensor-parallel rank, as MLA's latent is."""
    if not layer.compress_ratio:
        return 0
    dt = parse_kv_dtype(kv_dtype)
    return dt.vector_bytes(layer.head_dim) + (dt.vector_bytes(layer.index_head_dim, "index_head_dim")
                                              if layer.index_head_dim else 0)


def kept_tokens(layer: LayerSpec, tokens):
    """Tokens a layer keeps after ``tokens`` tokens: T, min(T, W), or the current chunk's T - C·⌊(T-1)/C⌋."""
    t = _tokens(tokens)
    if layer.kind == "sliding":
        kept = np.minimum(t, layer.sliding_window)
    elif layer.kind == "chunked":
        c = layer.attention_chunk_size
        kept = np.where(t > 0, t - ((t - 1) // c) * c, 0)
    elif layer.caches_tokens:  # full and MLA keep every token
        kept = t
    else:
        kept = np.zeros_like(t)
    return _out(kept, tokens)


def allocated_slots(tokens, step: int = DEFAULT_STEP, limit=None):
    """Token slots a step-growing buffer holds: min(⌈T/step⌉·step, limit)."""
    step = as_int("step", step, 1, MAX_TOKENS)
    t = _tokens(tokens)
    slots = -(-t // step) * step
    if limit is not None:
        slots = np.minimum(slots, limit)
    return _out(slots, tokens)


def _span_blocks(tokens, kept, block_size):
    """Blocks covering positions [T-kept, T): ⌈T/N⌉ - ⌊(T-kept)/N⌋ (one extra when a window is misaligned)."""
    block_size = as_int("block_size", block_size, 1, MAX_TOKENS)
    return np.where(kept > 0, -(-tokens // block_size) - (tokens - kept) // block_size, 0)


def _split_fp(dt: KVDtype, kept):
    """(full-precision tokens, quantized tokens) of ``kept``: the newest R stay full precision."""
    fp = np.minimum(kept, dt.full_precision_tokens) if dt.quantized else np.zeros_like(kept)
    return fp, kept - fp


def layer_kv_bytes(layer: LayerSpec, tokens, kv_dtype="bf16", batch: int = 1, view: str = "theoretical",
                   step: int = DEFAULT_STEP, block_size: int | None = None, tp: int = 1):
    """K/V (or latent) bytes of one layer for ``batch`` sequences of ``tokens`` tokens, in one view.

    theoretical/read: kept·token_bytes·B. allocated: step growth (slots = min(⌈T/S⌉·S, W or C)), or
    paged when ``block_size`` is set (per-sequence blocks spanning the kept range). A DeepSeek-V4 compressed
    layer adds its E = ⌊T/m⌋ entries: E·entry_bytes·B, grown in steps of S or paged in blocks as a full layer's.
    """
    if view not in VIEWS:
        raise InputError(f"view {view!r} is not one of {', '.join(VIEWS)}")
    batch = as_int("batch", batch, 1)
    dt = parse_kv_dtype(kv_dtype)
    if not layer.caches_tokens:
        return _out(np.zeros_like(_tokens(tokens)), tokens)
    t = _tokens(tokens)
    q_bytes = layer_token_bytes(layer, dt, tp)
    f_bytes = layer_token_bytes(layer, dt, tp, full_precision=True) if dt.quantized else 0
    _check_bound(layer, t, max(q_bytes, f_bytes), batch, 1, step, block_size)
    kept = _tokens(kept_tokens(layer, t))
    fp, quant = _split_fp(dt, kept)
    if view in ("theoretical", "read"):
        total = fp * f_bytes + quant * q_bytes
    elif block_size is not None:
        # the newest R tokens (quantized caches only) sit in their own full-precision blocks
        total = (_span_blocks(t, fp, block_size) * block_size * f_bytes
                 + _span_blocks(t - fp, quant, block_size) * block_size * q_bytes)
    else:
        limit = layer.window_tokens
        if dt.quantized:
            r = dt.full_precision_tokens
            q_limit = None if limit is None else max(limit - r, 0)
            q_slots = allocated_slots(np.maximum(t - r, 0), step, q_limit)
            f_slots = np.minimum(allocated_slots(t, step, limit), r)
            total = q_slots * q_bytes + f_slots * f_bytes
        else:
            total = allocated_slots(t, step, limit) * q_bytes
    if layer.compress_ratio:
        total = total + _compressed_bytes(layer, t, dt, view, step, block_size)
    return _out(np.asarray(total, dtype=np.int64) * batch, tokens)


def _compressed_bytes(layer: LayerSpec, t, dt: KVDtype, view: str, step: int, block_size: int | None):
    """One sequence's compressed entries in one view: E·e (theoretical, read), ⌈E/S⌉·S·e, or ⌈E/N⌉·N·e paged."""
    entries, e = t // layer.compress_ratio, compressed_entry_bytes(layer, dt)
    check_bytes("the compressed KV entries", (int(entries.max()) if entries.size else 0) * e)
    if view in ("theoretical", "read"):
        return entries * e
    if block_size is not None:
        return -(-entries // block_size) * block_size * e
    return allocated_slots(entries, step) * e


def _check_bound(layer: LayerSpec, t, token_bytes: int, batch: int, count: int, step=DEFAULT_STEP,
                 block_size=None) -> None:
    """InputError unless every int64 intermediate of ``count`` such layers stays <= MAX_BYTES.

    Python ints: slots never exceed kept + step (growth) or kept + 2·block_size (paged blocks).
    """
    t_max = int(t.max()) if t.size else 0
    kept = t_max if layer.window_tokens is None else min(t_max, layer.window_tokens)
    slack = max(as_int("step", step, 1, MAX_TOKENS), 2 * as_int("block_size", block_size or 1, 1, MAX_TOKENS))
    check_bytes("the KV cache", (kept + slack) * token_bytes * batch * count)


def state_bytes(layer: LayerSpec, state_dtype=None, model_dtype="bf16") -> int:
    """Fixed recurrent state of one layer for one sequence: Σ_tensors prod(shape) · b(tensor).

    ``state_dtype`` None: each tensor in the dtype the family's reference implementation keeps it in
    (:meth:`LayerSpec.state_dtypes`: SSM / delta-rule / RG-LRU state fp32, conv window ``model_dtype``);
    a dtype name overrides every tensor.
    """
    dtypes = dict(layer.state_dtypes(model_dtype, state_dtype))
    return sum(math.prod(shape) * DTYPE_BYTES[dtypes[name]] for name, shape in layer.state_shapes)


# ---------------------------------------------------------------- whole model


@lru_cache(maxsize=256)
def layer_groups(spec: ModelSpec) -> tuple[tuple[LayerSpec, int], ...]:
    """Identical layers grouped with their counts, in first-seen order (makes sweeps fast)."""
    counts: dict[LayerSpec, int] = {}
    for layer in spec.layers:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(counts.items())


def model_kv_bytes(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", view="theoretical",
                   step: int = DEFAULT_STEP, block_size: int | None = None, tp: int = 1):
    """Σ over layers of :func:`layer_kv_bytes` (attention K/V and MLA latents; no recurrent state)."""
    t = _tokens(tokens)
    batch, step = as_int("batch", batch, 1), as_int("step", step, 1, MAX_TOKENS)
    if block_size is not None:
        block_size = as_int("block_size", block_size, 1, MAX_TOKENS)
    dt = parse_kv_dtype(kv_dtype)
    bound = 0
    for layer, count in layer_groups(spec):  # the whole model within MAX_BYTES before any int64 sum
        if layer.caches_tokens:
            token_bytes = max(layer_token_bytes(layer, dt, tp), layer_token_bytes(layer, dt, tp, True))
            kept = int(t.max(initial=0)) if layer.window_tokens is None else layer.window_tokens
            bound += (kept + max(step, 2 * (block_size or 1))) * token_bytes * batch * count
            if layer.compress_ratio:  # DeepSeek-V4: ⌊T/m⌋ compressed entries beside the window
                bound += ((int(t.max(initial=0)) // layer.compress_ratio + max(step, 2 * (block_size or 1)))
                          * compressed_entry_bytes(layer, dt) * batch * count)
    check_bytes(f"the KV cache of {spec.name}", bound)
    total = np.zeros_like(t)
    for layer, count in layer_groups(spec):
        total = total + count * np.asarray(
            layer_kv_bytes(layer, t, kv_dtype, batch, view, step, block_size, tp), dtype=np.int64)
    return _out(total, tokens)


def kv_bytes(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", tp: int = 1):
    """Theoretical KV bytes: Σ_layers kept(T)·token_bytes·B (M_total = M_token·T·B for uniform models)."""
    return model_kv_bytes(spec, tokens, batch, kv_dtype, "theoretical", tp=tp)


def allocated_bytes(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", step: int = DEFAULT_STEP,
                    block_size: int | None = None, tp: int = 1):
    """Allocated KV bytes: step growth (default 256 tokens) or paged blocks when ``block_size`` is set."""
    return model_kv_bytes(spec, tokens, batch, kv_dtype, "allocated", step, block_size, tp)


def bytes_per_token(spec: ModelSpec, kv_dtype="bf16", tp: int = 1) -> int:
    """What one sequence's cache grows by per token while no window is full: Σ token_bytes over cache layers."""
    return sum(count * layer_token_bytes(layer, kv_dtype, tp) for layer, count in layer_groups(spec))


def elements_per_token(spec: ModelSpec) -> int:
    """Cached elements per token per sequence, dtype-free (DeepSeek-V2's Table 1 unit): Σ 2·n_kv·d_h or d_c + d_h^R."""
    return sum(count * layer.elements_per_token for layer, count in layer_groups(spec))


def fixed_state_bytes(spec: ModelSpec, batch: int = 1, state_dtype=None, model_dtype="bf16") -> int:
    """Recurrent state for ``batch`` sequences: B · Σ_layers state_bytes, independent of T
    (``state_dtype`` None: per tensor as the reference implementation keeps it)."""
    batch = as_int("batch", batch, 1)
    return check_bytes("the recurrent state", batch * sum(
        count * state_bytes(layer, state_dtype, model_dtype) for layer, count in layer_groups(spec)))


def total_bytes(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", tp: int = 1,
                state_dtype=None):
    """Theoretical KV bytes plus fixed recurrent state."""
    return _out(np.asarray(kv_bytes(spec, tokens, batch, kv_dtype, tp))
                + fixed_state_bytes(spec, batch, state_dtype), tokens)


def read_bytes_per_step(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", tp: int = 1,
                        state_dtype=None, model_dtype="bf16"):
    """Cache bytes one decode step reads at context T: windows read ≤ W, MLA the latent,
    quantized caches their compressed bytes, recurrent layers their state."""
    return _out(np.asarray(model_kv_bytes(spec, tokens, batch, kv_dtype, "read", tp=tp))
                + fixed_state_bytes(spec, batch, state_dtype, model_dtype), tokens)


def layer_table(spec: ModelSpec, tokens: int, batch: int = 1, kv_dtype="bf16", tp: int = 1,
                state_dtype=None) -> list[dict]:
    """One dict per layer: index, kind, kept tokens, theoretical kv_bytes and state_bytes."""
    rows = []
    for i, layer in enumerate(spec.layers):
        rows.append({
            "index": i, "kind": layer.kind, "window_tokens": layer.window_tokens,
            "kept_tokens": int(kept_tokens(layer, tokens)),
            "kv_bytes": int(layer_kv_bytes(layer, tokens, kv_dtype, batch, tp=tp)),
            "state_bytes": batch * state_bytes(layer, state_dtype),
        })
    return rows
