"""Which K/V head each query head reads (MHA, GQA, MQA), and bytes per token as area squares.

Contract (pure)
- :func:`kv_head_of`: query head i reads K/V head ⌊i / (n_h / n_kv)⌋ (consecutive query heads share,
  as Hugging Face's ``repeat_kv`` and kvsim's grouped attention arrange them).
- :func:`area_sides`: the side of a square whose AREA is proportional to each value, the largest
  side given; so 16× more bytes look 16× bigger, not 2× (log bars) or a sliver (linear bars).
- :func:`head_sharing_bytes`, :func:`percent_of_mha`, :func:`mla_elements`, :func:`design_name`: the numbers
  and names lesson 03's views label (bytes per token per design, share of MHA, MLA vs MHA elements).
- :func:`mla_path_curves`: FLOPs and bytes of one MLA call, absorbed and materialized
  (:func:`kvsim.calc.mla_paths.mla_call_costs`), against query tokens per call L, for each cached
  length C, with the crossover calc's decision finds (:func:`kvsim.calc.mla_paths.crossover_query_tokens`)
  and the seed's four named calls (:func:`kvsim.calc.mla_paths.mla_point_rows`), at DeepSeek-V3's widths.
"""

from __future__ import annotations

import math

import numpy as np

from ...calc import memory
from ...calc.counterfactual import attention_variants
from ...calc.mla_paths import MlaDims, crossover_query_tokens, mla_call_costs, mla_point_rows
from ...calc.registry import load_model
from ...calc.units import UNIT_BYTES, InputError, positive_int


def kv_head_of(num_attention_heads: int, num_key_value_heads: int) -> np.ndarray:
    """(n_h,) index of the K/V head each query head reads: i // (n_h / n_kv)."""
    n_h, n_kv = positive_int("num_attention_heads", num_attention_heads), positive_int("num_key_value_heads",
                                                                                      num_key_value_heads)
    if n_h % n_kv:
        raise InputError(f"num_attention_heads ({n_h}) must be a multiple of num_key_value_heads ({n_kv})")
    return np.arange(n_h) // (n_h // n_kv)


def area_sides(values: dict, largest_side: float = 1.0) -> dict:
    """{name: side} with side² ∝ value; the largest value gets ``largest_side``."""
    top = max(values.values())
    if top <= 0:
        raise InputError("area_sides needs at least one positive value")
    return {k: largest_side * math.sqrt(max(v, 0) / top) for k, v in values.items()}


HEADS, HEAD_DIM = 128, 128  # DeepSeek-V3's query heads and head length


def design_name(num_key_value_heads: int, num_attention_heads: int = HEADS) -> str:
    """MHA when n_kv = n_h, MQA when n_kv = 1, else GQA-n_kv."""
    return ("MHA" if num_key_value_heads == num_attention_heads else "MQA" if num_key_value_heads == 1
            else f"GQA-{num_key_value_heads}")


def head_sharing_title(num_key_value_heads: int, num_attention_heads: int = HEADS) -> str:
    """The head-sharing title: n_h // n_kv query heads per K/V head, n_kv K/V heads cached per layer."""
    group = num_attention_heads // num_key_value_heads
    return (f"{design_name(num_key_value_heads, num_attention_heads)}: {group} query head{'s' if group > 1 else ''} "
            f"per K/V head; the cache stores {num_key_value_heads} K/V head{'s' if num_key_value_heads > 1 else ''} "
            "per layer")


def mib_ticks(top_bytes: float) -> tuple[list[int], list[str]]:
    """Whole-MiB ticks from 0 up to ``top_bytes``: positions i · 2**20 and labels 'i MiB', i = 0..⌊top / 2**20⌋."""
    mib = UNIT_BYTES["MiB"]
    whole = range(int(top_bytes // mib) + 1)
    return [i * mib for i in whole], [f"{i} MiB" for i in whole]


def head_sharing_bytes(num_key_value_heads: int, kv_dtype="bf16") -> dict:
    """Bytes per token (61 layers) of MHA, the chosen GQA, MQA and MLA: memory.bytes_per_token per design."""
    variants = attention_variants(gqa_groups=num_key_value_heads)
    names = {"MHA": "MHA", f"GQA-{num_key_value_heads}": design_name(num_key_value_heads), "MQA": "MQA",
             "MLA": "MLA"}
    per = {}
    for key, name in names.items():
        per.setdefault(name, memory.bytes_per_token(variants[key], kv_dtype))
    return per


def percent_of_mha(bytes_by_name: dict) -> dict:
    """Each design's share of MHA in percent, 2 decimals: round(100 · bytes / bytes[MHA], 2)."""
    mha = bytes_by_name["MHA"]
    return {name: round(100 * b / mha, 2) for name, b in bytes_by_name.items()}


def mla_elements(kv_lora_rank: int, qk_rope_head_dim: int, heads: int = HEADS,
                 head_dim: int = HEAD_DIM) -> tuple[int, int]:
    """Elements cached per token and layer, (MLA, MHA): (kv_lora_rank + qk_rope_head_dim, 2 · n_h · d_h)."""
    return kv_lora_rank + qk_rope_head_dim, 2 * heads * head_dim


def mla_path_curves(query_tokens=None, cached_tokens=(0, 32_768), model: str = "deepseek-v3",
                    dtype_bytes: int = 2) -> dict:
    """Costs of one MLA call against L, per cached length C, plus crossovers and the seed's named calls.

    Returns {"L": (n,) query tokens, "curves": {C: {path: {"flops": (n,), "bytes": (n,)}}},
    "crossover": {C: fewest L from which materializing is cheaper on the measured H200 (or None)},
    "points": :func:`kvsim.calc.mla_paths.mla_point_rows`, "dims": the MlaDims}.
    """
    dims = MlaDims.from_spec(load_model(model))
    L = np.unique(np.geomspace(1, 8192, 60).round().astype(int)) if query_tokens is None else np.asarray(query_tokens)
    curves = {}
    for C in cached_tokens:
        costs = [mla_call_costs(dims, int(n), int(C), dtype_bytes) for n in L]
        curves[C] = {path: {k: np.array([c[path][k] for c in costs], dtype=float) for k in ("flops", "bytes")}
                     for path in ("absorbed", "materialized")}
    return {"L": L, "curves": curves, "dims": dims,
            "crossover": {C: crossover_query_tokens(dims, int(C), dtype_bytes) for C in cached_tokens},
            "points": mla_point_rows(dims, dtype_bytes=dtype_bytes)}
