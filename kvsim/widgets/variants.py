"""Lesson 03 views: MHA, GQA, MQA and MLA at one attention geometry (DeepSeek-V3's), computed and measured.

Contract
- :func:`draw_measured_bytes`: bytes per token from the formula beside the real caches of
  :func:`kvsim.measure.variant_decode.measure_variants`.
- :func:`draw_variant_bytes` / :func:`variants_view`: bars of bytes per token for chosen KV heads,
  latent rank and RoPE key width, with each one's share of MHA.
"""

from __future__ import annotations

from ..calc.counterfactual import (
    attention_variants,
    equivalent_gqa_groups,
    variant_rows,
)
from ..measure.variant_decode import VariantRun
from ..plots.variants import plot_bytes_per_token
from ..ui.base import dropdown, int_slider, log_slider, make_view


def draw_measured_bytes(ax, runs: dict[str, VariantRun], kv_dtype="bf16", log=True):
    """Bars: bytes per token over all layers from the formula and from the real caches (per layer × layers)."""
    rows = [r.row(kv_dtype) for r in runs.values()]
    n = next(iter(runs.values())).full_spec.num_hidden_layers
    formula = [r[f"formula, {n} layers"] for r in rows]
    mha = formula[list(runs).index("MHA")]
    notes = [f"{round(100 * f / mha, 2):g} %" for f in formula]
    measured = [r[f"measured × {n}"] for r in rows]
    axis = "" if log else ", linear axis"
    plot_bytes_per_token(ax, [r["variant"] for r in rows],
                         {f"formula, {n} layers": formula, f"measured per layer × {n}": measured}, notes=notes,
                         log=log, title=f"KV cache per token at DeepSeek-V3's attention sizes ({kv_dtype}){axis}")
    return ax


def draw_variant_bytes(ax, num_key_value_heads=8, kv_lora_rank=512, qk_rope_head_dim=64, kv_dtype="bf16"):
    """Bytes per token (61 layers, 128 heads of 128) for MHA, GQA, MQA and MLA, with shares of MHA."""
    variants = attention_variants(gqa_groups=num_key_value_heads, kv_lora_rank=kv_lora_rank,
                                  qk_rope_head_dim=qk_rope_head_dim)
    rows = variant_rows(variants, kv_dtype)
    values = [r[f"bytes ({kv_dtype})"] for r in rows]
    notes = [f"{r['% of MHA']:g} %" for r in rows]
    groups = equivalent_gqa_groups(variants["MLA"], head_dim=128)
    plot_bytes_per_token(ax, [r["variant"] for r in rows], {f"{kv_dtype}, 61 layers": values}, notes=notes,
                         title=f"61 layers, 128 query heads of 128: MLA caches as much as GQA with {groups:g} groups")
    return ax


def variants_view(num_key_value_heads=8, kv_lora_rank=512, qk_rope_head_dim=64, kv_dtype="bf16"):
    """Sliders for GQA's KV heads, MLA's latent rank and RoPE key width, and the KV dtype."""
    return make_view(draw_variant_bytes, {
        "num_key_value_heads": log_slider("GQA num_key_value_heads", num_key_value_heads, 1, 128),
        "kv_lora_rank": int_slider("kv_lora_rank", kv_lora_rank, 64, 1024, step=64),
        "qk_rope_head_dim": int_slider("qk_rope_head_dim", qk_rope_head_dim, 16, 128, step=16),
        "kv_dtype": dropdown("KV dtype", ("bf16", "fp8", "fp32"), kv_dtype),
    }, figsize=(7.5, 4.2))
