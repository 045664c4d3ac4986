"""Counterfactual model specs: the same geometry with another way of storing K and V.

Contract: pure functions that return new :class:`~kvsim.calc.config.ModelSpec` objects; they never
modify their input. Used for "what if this model were MHA" lines and for the MHA / GQA / MQA /
MLA comparison at one fixed attention geometry (the seed's DeepSeek-V3 table):
- :func:`variant_rows`: that table (elements per layer, over all layers, bytes, share of MHA);
- :func:`decodable_variants`: the same four specs, the MLA one carrying DeepSeek-V3's MLA fields
  (the typed ``qk_nope_head_dim`` and ``v_head_dim``, and ``q_lora_rank`` as asked) so
  :func:`kvsim.model.build_model` can run it. ``q_lora_rank`` only shapes the query projection,
  never what is cached.
"""

from __future__ import annotations

from dataclasses import replace

from . import memory, units
from .config import LayerSpec, ModelSpec
from .registry import load_model
from .units import InputError

_FORMULAS = {"MHA": "2·n_h·d_h", "GQA": "2·n_g·d_h", "MQA": "2·d_h", "MLA": "d_c + d_h^R"}


def with_kv_heads(spec: ModelSpec, num_key_value_heads: int, name: str | None = None) -> ModelSpec:
    """Every attention layer of ``spec`` with ``num_key_value_heads`` KV heads (MHA: = query heads)."""
    layers = tuple(replace(layer, num_key_value_heads=num_key_value_heads)
                   if layer.has_kv_heads else layer for layer in spec.layers)
    return replace(spec, name=name or f"{spec.name} ({num_key_value_heads} KV heads)", layers=layers)


def full_attention(spec: ModelSpec) -> ModelSpec:
    """Every sliding or chunked layer made full (what calculators that ignore windows assume)."""
    layers = tuple(replace(layer, kind="full", sliding_window=None, attention_chunk_size=None)
                   if layer.is_windowed else layer for layer in spec.layers)
    return replace(spec, name=f"{spec.name} without windows", layers=layers)


def as_mha(spec: ModelSpec) -> ModelSpec:
    """The MHA counterfactual: as many KV heads as query heads."""
    return with_kv_heads(spec, spec.num_attention_heads, name=f"{spec.name} if MHA")


def attention_variants(num_layers: int = 61, num_attention_heads: int = 128, head_dim: int = 128,
                       gqa_groups: int = 8, kv_lora_rank: int = 512,
                       qk_rope_head_dim: int = 64) -> dict[str, ModelSpec]:
    """MHA, GQA, MQA and MLA specs at one geometry (defaults: DeepSeek-V3's attention sizes).

    Per layer per token: MHA 2·n_h·d_h, GQA 2·n_g·d_h, MQA 2·d_h, MLA d_c + d_h^R elements.
    """
    def make(name, layer):
        return ModelSpec(name=name, model_type="variant", layers=(layer,) * num_layers,
                         hidden_size=num_attention_heads * head_dim,
                         num_attention_heads=num_attention_heads, vocab_size=1)

    def attn(kv):
        return LayerSpec("full", num_key_value_heads=kv, head_dim=head_dim)

    return {
        "MHA": make("MHA", attn(num_attention_heads)),
        f"GQA-{gqa_groups}": make(f"GQA-{gqa_groups}", attn(gqa_groups)),
        "MQA": make("MQA", attn(1)),
        "MLA": make("MLA", LayerSpec("mla", kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim)),
    }


def equivalent_gqa_groups(spec: ModelSpec, head_dim: int) -> float:
    """GQA group count with the same cache as an MLA layer: (d_c + d_h^R) / (2·d_h); DeepSeek-V2: 2.25."""
    mla = [layer for layer in spec.layers if layer.kind == "mla"]
    if not mla:
        raise InputError(f"{spec.name} has no MLA layer")
    return mla[0].elements_per_token / (2 * head_dim)


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
                     f"bytes ({kv_dtype})": b, "=": units.format_bytes(b), "% of MHA": round(100 * b / mha, 2)})
    return rows


def decodable_variants(source: str = "deepseek-v3", q_lora_rank: int | None = None) -> dict[str, ModelSpec]:
    """attention_variants() with the MLA spec given ``source``'s MLA widths and ``q_lora_rank`` (None: none)."""
    src = load_model(source)
    variants = attention_variants()
    variants["MLA"] = replace(variants["MLA"], qk_nope_head_dim=src.qk_nope_head_dim,
                              v_head_dim=src.v_head_dim,
                              q_lora_rank=units.nonnegative_int("q_lora_rank", q_lora_rank or 0))
    return variants
