"""Lesson 03 (MHA, GQA, MQA, MLA): the lesson's controls: each view wraps this lesson's data/measure functions
and its plots; it computes nothing.

Lesson 03 views: which K/V head each query head reads, and how an MLA latent becomes per-head K and V.

Contract
- :func:`draw_head_sharing` / :func:`head_sharing_view`: DeepSeek-V3's 128 query heads coloured by the
  K/V head they read, for the chosen ``num_key_value_heads`` (128 = MHA, 1 = MQA, else GQA), and
  bytes per token of MHA, that GQA, MQA and MLA as squares of proportional area.
- :func:`draw_mla_fanout` / :func:`mla_view`: the cached latent and RoPE key, and the per-head keys
  and values W^UK / W^UV rebuild from them, box widths proportional to vector lengths.
- :func:`draw_measured_bytes_linear`: formula vs measured bytes per token of real caches
  (:func:`kvsim.lessons.l03_attention_variants.measure.measure_variants`) on a linear axis, so 16× looks like 16×.

Lesson 03 views: MHA, GQA, MQA and MLA at one attention geometry (DeepSeek-V3's), computed and measured.

Contract
- :func:`draw_measured_bytes`: bytes per token from the formula beside the real caches of
  :func:`kvsim.lessons.l03_attention_variants.measure.measure_variants`.
- :func:`draw_variant_bytes` / :func:`variants_view`: bars of bytes per token for chosen KV heads,
  latent rank and RoPE key width, with each one's share of MHA.
"""

from __future__ import annotations

from ...calc import units
from ...calc.counterfactual import attention_variants, equivalent_gqa_groups, variant_rows
from ...ui.base import dropdown, int_slider, log_slider, make_view
from .data import (HEADS, HEAD_DIM, area_sides, design_name, head_sharing_bytes, head_sharing_title, kv_head_of,
                   mib_ticks, mla_elements, percent_of_mha)
from .measure import VariantRun
from .plots import plot_bytes_per_token, plot_head_sharing, plot_mla_fanout


def draw_head_sharing(ax, num_key_value_heads=8, kv_dtype="bf16"):
    """Query heads coloured by K/V head; squares of area ∝ bytes per token (61 layers).

    ``kv_dtype`` scales every design alike: it changes the labels, not the squares (so no slider).
    """
    per = head_sharing_bytes(num_key_value_heads, kv_dtype)
    pct = percent_of_mha(per)
    labels = {n: f"{n}\n{units.format_bytes(b)}\n{pct[n]:g} %" for n, b in per.items()}
    design = design_name(num_key_value_heads)
    return plot_head_sharing(ax, kv_head_of(HEADS, num_key_value_heads), area_sides(per, largest_side=36),
                             labels, highlight=design, title=head_sharing_title(num_key_value_heads))


def head_sharing_view(num_key_value_heads=8):
    """The K/V heads slider (1 = MQA ... 128 = MHA) over :func:`draw_head_sharing`."""
    return make_view(draw_head_sharing, {
        "num_key_value_heads": log_slider("num_key_value_heads", num_key_value_heads, 1, HEADS),
    }, figsize=(9, 4.4), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.92))


def draw_mla_fanout(ax, kv_lora_rank=512, qk_rope_head_dim=64):
    """MLA: what one token caches per layer, and the per-head vectors rebuilt from it."""
    mla, mha = mla_elements(kv_lora_rank, qk_rope_head_dim)
    return plot_mla_fanout(ax, kv_lora_rank, qk_rope_head_dim, HEAD_DIM, HEADS, title=(
        f"MLA caches {mla:,} elements per token and layer; "
        f"MHA would cache 2 × {HEADS} × {HEAD_DIM} = {mha:,}"))


def mla_view(kv_lora_rank=512, qk_rope_head_dim=64):
    """Sliders for the latent length and the RoPE key length over :func:`draw_mla_fanout`."""
    return make_view(draw_mla_fanout, {
        "kv_lora_rank": int_slider("kv_lora_rank", kv_lora_rank, 64, 1024, step=64),
        "qk_rope_head_dim": int_slider("qk_rope_head_dim", qk_rope_head_dim, 16, 128, step=16),
    }, figsize=(9, 4.4), margins=dict(left=0.01, right=0.99, bottom=0.02, top=0.92))


def draw_measured_bytes_linear(ax, runs: dict, kv_dtype="bf16"):
    """Formula and measured bytes per token (61 layers) of real MHA / GQA / MQA / MLA caches, on a linear axis."""
    draw_measured_bytes(ax, runs, kv_dtype, log=False)
    ax.set_yticks(*mib_ticks(ax.get_ylim()[1]))
    return ax


def draw_measured_bytes(ax, runs: dict[str, VariantRun], kv_dtype="bf16", log=True):
    """Bars: bytes per token over all layers from the formula and from the real caches (per layer × layers)."""
    rows = [r.row(kv_dtype) for r in runs.values()]
    n = next(iter(runs.values())).full_spec.num_hidden_layers
    formula = [r[f"formula, {n} layers"] for r in rows]
    notes = [f"{p:g} %" for p in percent_of_mha(dict(zip(runs, formula))).values()]
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
