"""Lesson 03: MHA, GQA, MQA and MLA at one attention geometry (DeepSeek-V3's), computed and measured.

Contract
- :func:`variant_rows`: the seed's table from :func:`kvsim.variants.attention_variants` and
  :mod:`kvsim.memory` (elements per layer, over all layers, bytes, share of MHA).
- :func:`decodable_variants`: the same four specs, the MLA one carrying DeepSeek-V3's MLA fields
  (``qk_nope_head_dim``, ``v_head_dim``, ``q_lora_rank``) so :func:`kvsim.model.build_model` can
  run it. ``q_lora_rank`` only shapes the query projection, never what is cached.
- :func:`measure_variants` builds each variant with fewer layers, a small residual width and
  vocabulary but the real per-layer attention geometry, greedy-decodes a prompt with K/V stored
  in bf16, and reads each layer's cache (``offset``, ``used_bytes``, ``nbytes``) after the run:
  the measured bytes per token per layer, to set beside :func:`kvsim.memory.layer_token_bytes`.
- :func:`compare_mla_paths`: the same MLA model decoding with the absorbed and the materialized
  path (:attr:`kvsim.model.Model.mla_path`): same tokens, allclose logits.
- :func:`draw_variant_bytes` / :func:`variants_view`: bars of bytes per token for chosen KV heads,
  latent rank and RoPE key width, with each one's share of MHA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx

from .. import memory
from ..config import ModelSpec
from ..decode import Generation, generate
from ..plots.variants import plot_bytes_per_token
from ..registry import load_model
from ..variants import attention_variants, equivalent_gqa_groups
from .base import dropdown, int_slider, log_slider, make_view

MLA_FIELDS = ("qk_nope_head_dim", "v_head_dim", "q_lora_rank")
_FORMULAS = {"MHA": "2·n_h·d_h", "GQA": "2·n_g·d_h", "MQA": "2·d_h", "MLA": "d_c + d_h^R"}


def _formula(name: str) -> str:
    return _FORMULAS[name.split("-")[0]]


def variant_rows(variants: dict[str, ModelSpec] | None = None, kv_dtype="bf16") -> list[dict]:
    """Per variant: cached elements per token in one layer and in all layers, bytes, and % of MHA."""
    variants = variants or attention_variants()
    mha = memory.bytes_per_token(variants["MHA"], kv_dtype)
    rows = []
    for name, spec in variants.items():
        per_layer = spec.layers[0].elements_per_token
        b = memory.bytes_per_token(spec, kv_dtype)
        rows.append({"variant": name, "per layer": _formula(name), "elements/layer": per_layer,
                     f"× {spec.num_hidden_layers} layers": memory.elements_per_token(spec),
                     f"bytes ({kv_dtype})": b, "=": memory.format_bytes(b), "% of MHA": round(100 * b / mha, 2)})
    return rows


def decodable_variants(source: str = "deepseek-v3", q_lora_rank: int | None = None) -> dict[str, ModelSpec]:
    """attention_variants() with the MLA spec given ``source``'s MLA config (q_lora_rank may be overridden)."""
    cfg = {k: load_model(source).config.get(k) for k in MLA_FIELDS}
    cfg["q_lora_rank"] = q_lora_rank
    variants = attention_variants()
    variants["MLA"] = replace(variants["MLA"], config=cfg)
    return variants


@dataclass
class VariantRun:
    """One variant decoded at reduced depth: the full spec, the model's reduced spec, the run."""

    name: str
    full_spec: ModelSpec
    spec: ModelSpec
    generation: Generation
    model: object = None             # the MLX model, when asked to keep it

    @property
    def tokens_cached(self) -> int:
        return self.generation.caches[0].offset

    def measured_token_bytes(self) -> list[int]:
        """Per layer: used_bytes / tokens cached, read from the real caches (exact division checked)."""
        out = []
        for c in self.generation.caches:
            q, r = divmod(c.used_bytes, c.offset)
            if r:
                raise ValueError(f"{self.name}: used_bytes {c.used_bytes} is not a multiple of {c.offset} tokens")
            out.append(q)
        return out

    def row(self, kv_dtype="bf16") -> dict:
        """Layer 0's cache after the run (tokens held, allocated and used bytes), per token beside the formula."""
        per_layer = self.measured_token_bytes()
        n_full = self.full_spec.num_hidden_layers
        return {"variant": self.name, "tokens": self.tokens_cached,
                "nbytes/layer": self.generation.caches[0].nbytes,
                "used_bytes/layer": self.generation.caches[0].used_bytes,
                "measured B/token/layer": per_layer[0],
                "formula": memory.layer_token_bytes(self.spec.layers[0], kv_dtype),
                f"measured × {n_full}": per_layer[0] * n_full,
                f"formula, {n_full} layers": memory.bytes_per_token(self.full_spec, kv_dtype)}


def _prompt(vocab: int, tokens: int, seed: int) -> list[int]:
    return mx.random.randint(0, vocab, (tokens,), key=mx.random.key(seed)).tolist()


def build_variant(spec: ModelSpec, num_layers: int = 2, hidden_size: int = 128, vocab_size: int = 128,
                  intermediate_size: int = 256, seed: int = 0):
    """kvsim.model.build_model with the real per-layer attention geometry and small everything else."""
    from ..model import build_model
    return build_model(spec, num_layers=num_layers, hidden_size=hidden_size, vocab_size=vocab_size,
                       intermediate_size=intermediate_size, seed=seed)


def measure_variants(variants: dict[str, ModelSpec] | None = None, num_layers: int = 2, prompt_tokens: int = 16,
                     answer_tokens: int = 8, kv_dtype: str = "bf16", seed: int = 0, progress: bool = True,
                     keep_models: tuple[str, ...] = ()) -> dict[str, VariantRun]:
    """Decode every variant for real (float32 math, K/V stored in ``kv_dtype``) and keep its caches.

    ``keep_models`` names the variants whose MLX model stays in the run (the others are freed).
    """
    from tqdm.auto import tqdm

    variants = variants or decodable_variants()
    runs = {}
    for name, spec in tqdm(variants.items(), desc="decode", unit="variant", disable=not progress):
        model = build_variant(spec, num_layers=num_layers, seed=seed)
        g = generate(model, _prompt(model.spec.vocab_size, prompt_tokens, seed), answer_tokens, kv_dtype=kv_dtype)
        runs[name] = VariantRun(name, spec, model.spec, g, model if name in keep_models else None)
    return runs


def compare_mla_paths(model, prompt_tokens: int = 8, answer_tokens: int = 4, seed: int = 0) -> dict:
    """Greedy decode with the absorbed and the materialized MLA path: tokens equal? largest logit gap?"""
    prompt = _prompt(model.spec.vocab_size, prompt_tokens, seed)
    before = model.mla_path
    out = {}
    try:
        for path in ("absorbed", "materialized"):
            model.mla_path = path
            out[path] = generate(model, prompt, answer_tokens)
    finally:
        model.mla_path = before
    a, m = out["absorbed"], out["materialized"]
    return {"same tokens": a.tokens == m.tokens, "tokens": a.tokens,
            "max |logit difference|": float(mx.max(mx.abs(a.logits - m.logits)).item()),
            "max |logit|": float(mx.max(mx.abs(m.logits)).item())}


def draw_measured_bytes(ax, runs: dict[str, VariantRun], kv_dtype="bf16"):
    """Bars: bytes per token over all layers from the formula and from the real caches (per layer × layers)."""
    rows = [r.row(kv_dtype) for r in runs.values()]
    n = next(iter(runs.values())).full_spec.num_hidden_layers
    formula = [r[f"formula, {n} layers"] for r in rows]
    mha = formula[list(runs).index("MHA")]
    notes = [f"{round(100 * f / mha, 2):g} %" for f in formula]
    plot_bytes_per_token(ax, [r["variant"] for r in rows],
                         {f"formula, {n} layers": formula, f"measured per layer × {n}": [r[f"measured × {n}"] for r in rows]},
                         notes=notes, title=f"KV cache per token at DeepSeek-V3's attention sizes ({kv_dtype})")
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
