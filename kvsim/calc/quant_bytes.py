"""The bytes of a quantized KV cache, split into packed data, scales and biases, and exact recent tokens (pure).

Contract
- :func:`token_bytes_split`: the bytes one token adds to one sequence across a model's cache layers,
  split into packed data (d·bits/8 per vector) and metadata (one scale and one bias per group:
  2·(d/g)·b_scale); ``total`` equals :func:`kvsim.calc.memory.bytes_per_token`.
- :func:`sequence_bytes_split`: one sequence at T tokens, with the newest R tokens in full precision.
- :func:`bytes_table`: per KV dtype and group size, bytes per token with and without metadata.
- :func:`storage_mode_bytes`: one layer's K/V bytes for T tokens in each of the seed's storage modes
  (``STORAGE_MODES``): fp16 (no metadata), uniform (packed codes + one scale and one bias per group)
  and rotated (TurboQuant-style: uniform's bytes + the rotation's ±1 signs, ``SIGN_BYTES`` each, d_k + d_v
  per layer). :class:`kvsim.cache.TurboQuantKVCache` and ``QuantizedKVCache`` hold exactly these
  bytes when T fills their allocated slots (tests/test_turboquant.py).
"""

from __future__ import annotations

from .config import LayerSpec, ModelSpec
from .memory import kept_tokens, kv_bytes, layer_groups, parse_kv_dtype
from .units import GROUP_SIZES, InputError, nonnegative_int, positive_int

STORAGE_MODES = ("fp16", "uniform", "rotated")
SIGN_BYTES = 1  # each ±1 of a randomized Hadamard rotation is kept as one int8


def _layer_dims(layer: LayerSpec) -> list[tuple[int, str]]:
    """(dim, field) of every vector one token stores in one layer per KV head (MLA: per layer)."""
    if layer.has_kv_heads and layer.k_eq_v:  # DeepSeek-V4: one tensor is both K and V
        return [(layer.head_dim, "head_dim")] * layer.num_key_value_heads
    if layer.has_kv_heads:  # (+ MiniMax-M3's per-token indexer key)
        return [(layer.head_dim, "head_dim"), (layer.v_head_dim, "v_head_dim")] * layer.num_key_value_heads + (
            [(layer.index_head_dim, "index_head_dim")] if layer.index_head_dim else [])
    if layer.kind == "mla":
        return [(layer.kv_lora_rank, "kv_lora_rank"), (layer.qk_rope_head_dim, "qk_rope_head_dim")] + (
            [(layer.index_head_dim, "index_head_dim")] if layer.index_head_dim else [])
    return []


def token_bytes_split(spec: ModelSpec, kv_dtype="bf16") -> dict:
    """Bytes per token per sequence: data = Σ d·bits/8 (or d·b), metadata = Σ 2·(d/g)·b_scale.

    Returns {"data", "metadata", "total"}; total == memory.bytes_per_token(spec, kv_dtype).
    """
    dt = parse_kv_dtype(kv_dtype)
    data = meta = 0
    for layer, count in layer_groups(spec):
        for dim, field in _layer_dims(layer):
            d = dt.vector_bytes(dim, field, metadata=False)
            data += count * d
            meta += count * (dt.vector_bytes(dim, field) - d)
    return {"data": data, "metadata": meta, "total": data + meta}


def sequence_bytes_split(spec: ModelSpec, tokens: int, kv_dtype="bf16") -> dict:
    """One sequence's theoretical KV bytes at T tokens in three parts (sum = memory.kv_bytes).

    Per layer: kept = kept_tokens(T), R' = min(kept, R) newest tokens in ``scale_dtype``, the rest
    quantized: packed data (kept − R')·Σd·bits/8, scales + biases (kept − R')·Σ2·(d/g)·b_scale.
    """
    dt = parse_kv_dtype(kv_dtype)
    parts = {"packed data": 0, "scales + biases": 0, "full-precision recent": 0}
    for layer, count in layer_groups(spec):
        kept = int(kept_tokens(layer, tokens))
        recent = min(kept, dt.full_precision_tokens) if dt.quantized else 0
        for dim, field in _layer_dims(layer):
            d = dt.vector_bytes(dim, field, metadata=False)
            parts["packed data"] += count * (kept - recent) * d
            parts["scales + biases"] += count * (kept - recent) * (dt.vector_bytes(dim, field) - d)
            parts["full-precision recent"] += count * recent * dt.full_vector_bytes(dim, field)
        entries = int(layer.compressed_entries(tokens))  # DeepSeek-V4's compressed entries, all quantized
        for dim, field in ([(layer.head_dim, "head_dim")] + ([(layer.index_head_dim, "index_head_dim")]
                                                             if layer.index_head_dim else [])) if entries else []:
            d = dt.vector_bytes(dim, field, metadata=False)
            parts["packed data"] += count * entries * d
            parts["scales + biases"] += count * entries * (dt.vector_bytes(dim, field) - d)
    return parts


def bytes_table(spec: ModelSpec, kv_dtypes=("fp16", "fp8", "q8", "q6", "q4", "q3", "q2"),
                group_sizes=GROUP_SIZES, tokens: int = 8192, scale_dtype: str = "bf16") -> list[dict]:
    """One row per (kv dtype, group size): bytes/token with and without metadata, and vs fp16."""
    base = token_bytes_split(spec, "fp16")["total"]
    rows = []
    for name in kv_dtypes:
        quantized = name.startswith("q")
        for g in group_sizes if quantized else (None,):
            dt = parse_kv_dtype(name, group_size=g or 64, scale_dtype=scale_dtype)
            split = token_bytes_split(spec, dt)
            rows.append({"kv dtype": name, "group": g, "bytes/token": split["total"],
                         "data only": split["data"], "metadata": split["metadata"],
                         "% of fp16 (data)": round(100 * split["data"] / base, 1),
                         "% of fp16 (all)": round(100 * split["total"] / base, 1),
                         f"MiB at {tokens:,}": round(split["total"] * tokens / 2**20, 1)})
    return rows


def storage_mode_bytes(mode: str, tokens: int, kv_heads: int, k_dim: int, v_dim: int | None = None, bits: int = 4,
                       group_size: int = 64, scale_bytes: int = 2, fp_bytes: int = 2) -> dict:
    """{data, metadata, total} bytes of one layer's K/V for ``tokens`` tokens in one storage mode.

    fp16: data = T·H·(d_k + d_v)·fp_bytes, no metadata. uniform: data = T·H·(d_k + d_v)·bits/8,
    metadata = T·H·2·((d_k + d_v)/g)·scale_bytes. rotated: uniform's + (d_k + d_v)·SIGN_BYTES.
    """
    if mode not in STORAGE_MODES:
        raise InputError(f"mode {mode!r} is not one of {', '.join(STORAGE_MODES)}")
    T, H = nonnegative_int("tokens", tokens), positive_int("kv_heads", kv_heads)
    k_dim = positive_int("k_dim", k_dim)
    v_dim = k_dim if v_dim is None else positive_int("v_dim", v_dim)
    elements = T * H * (k_dim + v_dim)
    if mode == "fp16":
        return {"data": elements * fp_bytes, "metadata": 0, "total": elements * fp_bytes}
    data = elements * bits // 8
    meta = T * H * 2 * ((k_dim + v_dim) // group_size) * scale_bytes
    if mode == "rotated":
        meta += (k_dim + v_dim) * SIGN_BYTES
    return {"data": data, "metadata": meta, "total": data + meta}
