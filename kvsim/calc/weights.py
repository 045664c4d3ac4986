"""Parameter counts and weight bytes from a config, per model family (pure Python, no MLX).

Contract
- ``param_count(spec) -> ParamCount(total, active, embedding)`` counts every weight tensor the
  family's Hugging Face implementation creates for the language model, from ``spec.config`` (the
  layer pattern from ``spec.layers``, tying from ``spec.tie_word_embeddings``): embeddings, per layer
  attention (or its recurrent replacement), MLP or experts, norms, and the output head unless tied.
  Vision towers and multi-token-prediction heads are not counted.
- ``active`` = ``total`` minus the routed experts a token does not use (dense models: equal).
  It includes the input embedding table; ``embedding`` is that table's size, so publishers who
  count active parameters without it (OpenAI, DeepSeek) compare with ``active - embedding``.
- ``weights_bytes(spec, dtype) = total × bytes per element``.
- Attention families are counted here, recurrent and hybrid ones in :mod:`kvsim.calc.weights_recurrent`,
  both from the helpers of :mod:`kvsim.calc.weights_common`.

Notation: h = hidden_size, V = vocab_size, L = layers, H = heads, H_kv = KV heads, d = head_dim,
i = intermediate size, E = routed experts, k = experts per token.
"""

from __future__ import annotations

from . import weights_recurrent as recurrent
from .config import ConfigError, ModelSpec
from .units import DTYPE_BYTES, InputError
from .weights_common import (
    ParamCount,
    attention_params,
    embedding_rows,
    field_flag,
    field_int,
    param_total,
    swiglu_params,
)


def weights_dtype_bytes(dtype: str) -> int:
    """Bytes per weight element of ``dtype`` (DTYPE_BYTES), or an InputError naming the accepted ones."""
    if dtype not in DTYPE_BYTES:
        raise InputError(f"weights dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def weights_bytes(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Bytes of all weights at one dtype: total parameters × bytes per element."""
    return param_count(spec).total * weights_dtype_bytes(dtype)


# ---------------------------------------------------------------- families


def _dense(cfg, spec):
    """llama, mistral, qwen2 (qkv biases), qwen3 (q/k norms), phi3: attention + SwiGLU + 2 norms."""
    h, n, mt = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers"), spec.model_type
    bias = mt == "qwen2" or field_flag(cfg, "attention_bias")
    attn = attention_params(cfg, h, qkv_bias=bias, o_bias=field_flag(cfg, "attention_bias"), qk_norm=mt == "qwen3")
    per_layer = attn + swiglu_params(h, field_int(cfg, "intermediate_size"), field_flag(cfg, "mlp_bias")) + 2 * h
    return param_total(spec, h, n * per_layer)


def _mixtral(cfg, spec):
    """Every layer: attention, router h·E, E SwiGLU experts of which k are active."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    e, k = field_int(cfg, "num_local_experts"), field_int(cfg, "num_experts_per_tok")
    expert = swiglu_params(h, field_int(cfg, "intermediate_size"))
    per_layer = attention_params(cfg, h) + h * e + 2 * h  # router h·E
    return param_total(spec, h, n * per_layer, n * e * expert, n * k * expert)


def _mla(cfg, h):
    """MLA: q (LoRA h·r_q + norm + r_q·H·(d_nope+d_rope), or h·H·(d_nope+d_rope)),
    kv_a h·(d_c+d_rope) + norm d_c, kv_b d_c·H·(d_nope+d_v), o H·d_v·h."""
    heads, rq, dc = (
        field_int(cfg, "num_attention_heads", low=1),
        field_int(cfg, "q_lora_rank", default=0),
        field_int(cfg, "kv_lora_rank"),
    )
    nope, rope, dv = (
        field_int(cfg, "qk_nope_head_dim"),
        field_int(cfg, "qk_rope_head_dim"),
        field_int(cfg, "v_head_dim"),
    )
    q = h * rq + rq + rq * heads * (nope + rope) if rq else h * heads * (nope + rope)
    return q + h * (dc + rope) + dc + dc * heads * (nope + dv) + heads * dv * h


def _deepseek(cfg, spec):
    """First ``first_k_dense_replace`` layers dense; the rest shared + routed experts (+ router)."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    dense_n, freq = field_int(cfg, "first_k_dense_replace", default=0), field_int(cfg, "moe_layer_freq", default=1, low=1)
    moe_n = sum(1 for i in range(dense_n, n) if i % freq == 0)
    e, k, s = (
        field_int(cfg, "n_routed_experts"),
        field_int(cfg, "num_experts_per_tok"),
        field_int(cfg, "n_shared_experts", default=0),
    )
    expert = swiglu_params(h, field_int(cfg, "moe_intermediate_size"))
    router = h * e + e * (spec.model_type == "deepseek_v3")  # V3 adds a per-expert score-correction bias
    shared = n * (_mla(cfg, h) + 2 * h) + (n - moe_n) * swiglu_params(h, field_int(cfg, "intermediate_size"))
    shared += moe_n * (router + s * expert)
    return param_total(spec, h, shared, moe_n * e * expert, moe_n * k * expert)


def _gpt_oss(cfg, spec):
    """Attention with biases and per-head sinks; router with bias; experts with biases."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    e, k, i = (
        field_int(cfg, "num_local_experts"),
        field_int(cfg, "num_experts_per_tok"),
        field_int(cfg, "intermediate_size"),
    )
    sinks = field_int(cfg, "num_attention_heads", low=1)
    per_layer = attention_params(cfg, h, qkv_bias=True, o_bias=True) + sinks + h * e + e + 2 * h
    expert = swiglu_params(h, i, bias=True)
    return param_total(spec, h, n * per_layer, n * e * expert, n * k * expert)


def _llama4(cfg, spec):
    """MoE layers: router + shared expert + routed experts (i); other layers dense MLP (i_mlp)."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    step = field_int(cfg, "interleave_moe_layer_step", default=1, low=1)
    moe_layers = cfg.get("moe_layers") or list(range(step - 1, n, step))
    if not isinstance(moe_layers, (list, tuple)):
        raise ConfigError(f"moe_layers must be a list of layer indices, got {moe_layers!r:.60}")
    moe_n = len(moe_layers)
    e, k = field_int(cfg, "num_local_experts"), field_int(cfg, "num_experts_per_tok")
    expert = swiglu_params(h, field_int(cfg, "intermediate_size"))
    shared = n * (attention_params(cfg, h) + 2 * h) + moe_n * (h * e + expert)
    shared += (n - moe_n) * swiglu_params(h, field_int(cfg, "intermediate_size_mlp"))
    return param_total(spec, h, shared, moe_n * e * expert, moe_n * k * expert)


def _gemma(cfg, spec):
    """Gemma 2/3 text: attention (+ q/k norms in Gemma 3), GeGLU MLP, 4 norms per layer; tied."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    attn = attention_params(cfg, h, qk_norm=spec.model_type != "gemma2")
    per_layer = attn + swiglu_params(h, field_int(cfg, "intermediate_size")) + 4 * h
    return param_total(spec, h, n * per_layer)


# ---------------------------------------------------------------- families added with engine sizing


def _kimi_k2(cfg, spec):
    """Kimi K2: DeepSeek-V3's layout (MLA, shared + routed experts, a score-correction bias per expert)."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    dense_n = field_int(cfg, "first_k_dense_replace", default=0)
    e, k, s = (
        field_int(cfg, "n_routed_experts"),
        field_int(cfg, "num_experts_per_tok"),
        field_int(cfg, "n_shared_experts", default=0),
    )
    expert = swiglu_params(h, field_int(cfg, "moe_intermediate_size"))
    shared = n * (_mla(cfg, h) + 2 * h) + dense_n * swiglu_params(h, field_int(cfg, "intermediate_size"))
    shared += (n - dense_n) * (h * e + e + s * expert)
    return param_total(spec, h, shared, (n - dense_n) * e * expert, (n - dense_n) * k * expert)


def _cohere(cfg, spec):
    """Command R / R7B: attention (+ per-head q/k LayerNorm weights with use_qk_norm), SwiGLU, one
    LayerNorm weight per layer (attention and MLP run in parallel on it)."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    heads = field_int(cfg, "num_attention_heads", low=1)
    kv, d = field_int(cfg, "num_key_value_heads", default=heads), h // heads  # transformers: head_dim = h / H
    bias = field_flag(cfg, "attention_bias")
    attn = attention_params({**cfg, "head_dim": d}, h, qkv_bias=bias, o_bias=bias) + (heads + kv) * d * field_flag(
        cfg, "use_qk_norm"
    )
    return param_total(spec, h, n * (attn + swiglu_params(h, field_int(cfg, "intermediate_size")) + h))


def _olmo2(cfg, spec):
    """OLMo 2: attention with q/k RMSNorms over the whole projection (H·d and H_kv·d), SwiGLU, 2 norms."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    heads = field_int(cfg, "num_attention_heads", low=1)
    kv, d = field_int(cfg, "num_key_value_heads", default=heads), field_int(cfg, "head_dim", default=h // heads)
    attn = attention_params(
        cfg, h, qkv_bias=field_flag(cfg, "attention_bias"), o_bias=field_flag(cfg, "attention_bias")
    )
    return param_total(
        spec, h, n * (attn + (heads + kv) * d + swiglu_params(h, field_int(cfg, "intermediate_size")) + 2 * h)
    )


def _phimoe(cfg, spec):
    """Phi-3.5-MoE: attention (biased with attention_bias), router h·E, E SwiGLU experts, two LayerNorms
    with biases; the final LayerNorm's bias h and the output head's bias V (lm_head_bias)."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    e, k = field_int(cfg, "num_local_experts"), field_int(cfg, "num_experts_per_tok")
    bias = field_flag(cfg, "attention_bias")
    expert = swiglu_params(h, field_int(cfg, "intermediate_size"))
    shared = n * (attention_params(cfg, h, qkv_bias=bias, o_bias=bias) + h * e + 4 * h) + h
    shared += embedding_rows(cfg) * field_flag(cfg, "lm_head_bias")
    return param_total(spec, h, shared, n * e * expert, n * k * expert)


FAMILIES = {
    "llama": _dense,
    "mistral": _dense,
    "qwen2": _dense,
    "qwen3": _dense,
    "phi3": _dense,
    "mixtral": _mixtral,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gpt_oss": _gpt_oss,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "gemma2": _gemma,
    "gemma3": _gemma,
    "gemma3_text": _gemma,
    "kimi_k2": _kimi_k2,
    "cohere": _cohere,
    "cohere2": _cohere,
    "olmo2": _olmo2,
    "phimoe": _phimoe,
    # recurrent and hybrid families (kvsim.calc.weights_recurrent)
    "qwen3_next": recurrent.qwen3_next,
    "jamba": recurrent.jamba,
    "mamba": recurrent.mamba,
    "falcon_mamba": recurrent.mamba,
    "mamba2": recurrent.mamba2,
    "recurrent_gemma": recurrent.recurrent_gemma,
    "granitemoehybrid": recurrent.granitemoehybrid,
    "nemotron_h": recurrent.nemotron_h,
    "falcon_h1": recurrent.falcon_h1,
}


def param_count(spec: ModelSpec) -> ParamCount:
    """Total, active and embedding parameters of ``spec`` from its config (per-family formulas above)."""
    family = FAMILIES.get(spec.model_type)
    if family is None:
        raise ConfigError(
            f"no parameter formula for model_type {spec.model_type!r}; known: {', '.join(sorted(FAMILIES))}"
        )
    return family(spec.config, spec)
