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

Notation: h = hidden_size, V = vocab_size, L = layers, H = heads, H_kv = KV heads, d = head_dim,
i = intermediate size, E = routed experts, k = experts per token.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ConfigError, ModelSpec
from .units import DTYPE_BYTES, InputError


@dataclass(frozen=True)
class ParamCount:
    """Parameters of the language model: all of them, those one token uses, the embedding table."""

    total: int
    active: int
    embedding: int = 0


def weights_bytes(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Bytes of all weights at one dtype: total parameters × bytes per element."""
    if dtype not in DTYPE_BYTES:
        raise InputError(f"weights dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return param_count(spec).total * DTYPE_BYTES[dtype]


# ---------------------------------------------------------------- building blocks


def _i(cfg, *names, default=...):
    """First present integer field among ``names``."""
    for name in names:
        if cfg.get(name) is not None:
            value = cfg[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
            return int(value)
    if default is ...:
        raise ConfigError(f"config is missing {names[0]}, needed for the parameter count")
    return default


def _flag(cfg, name, default=False):
    """A boolean field (a JSON string like "false" is rejected, not read as True)."""
    value = cfg.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value


def _vocab(cfg):
    """Embedding rows: vocab_size, rounded up to pad_vocab_size_multiple (mamba_ssm) if set."""
    v, pad = _i(cfg, "vocab_size"), _i(cfg, "pad_vocab_size_multiple", default=1) or 1
    return -(-v // pad) * pad


def _attention(cfg, h, qkv_bias=False, o_bias=False, qk_norm=False, q_gate=False):
    """q: h·H·d (×2 with an output gate), k, v: h·H_kv·d, o: H·d·h; optional biases and q/k norms."""
    heads = _i(cfg, "num_attention_heads")
    kv = _i(cfg, "num_key_value_heads", default=heads)
    d = _i(cfg, "head_dim", default=h // heads)
    q, k = heads * d, kv * d
    n = h * q * (2 if q_gate else 1) + 2 * h * k + q * h
    n += (q + 2 * k) * qkv_bias + h * o_bias + 2 * d * qk_norm
    return n


def _swiglu(h, i, bias=False):
    """gate and up h·i, down i·h (+ biases)."""
    return 3 * h * i + (2 * i + h) * bias


def _count(spec, h, layers, expert_total=0, expert_active=0):
    """total = input table V·h + output head V·h (0 when tied) + non-expert layer weights + final
    norm h + all routed experts; active keeps only the routed experts one token uses."""
    embed = _vocab(spec.config) * h
    shared = embed * (1 if spec.tie_word_embeddings else 2) + layers + h
    return ParamCount(shared + expert_total, shared + expert_active, embed)


# ---------------------------------------------------------------- families


def _dense(cfg, spec):
    """llama, mistral, qwen2 (qkv biases), qwen3 (q/k norms), phi3: attention + SwiGLU + 2 norms."""
    h, n, mt = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers"), spec.model_type
    bias = mt == "qwen2" or _flag(cfg, "attention_bias")
    attn = _attention(cfg, h, qkv_bias=bias, o_bias=_flag(cfg, "attention_bias"), qk_norm=mt == "qwen3")
    per_layer = attn + _swiglu(h, _i(cfg, "intermediate_size"), _flag(cfg, "mlp_bias")) + 2 * h
    return _count(spec, h, n * per_layer)


def _mixtral(cfg, spec):
    """Every layer: attention, router h·E, E SwiGLU experts of which k are active."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    e, k = _i(cfg, "num_local_experts"), _i(cfg, "num_experts_per_tok")
    expert = _swiglu(h, _i(cfg, "intermediate_size"))
    per_layer = _attention(cfg, h) + h * e + 2 * h  # router h·E
    return _count(spec, h, n * per_layer, n * e * expert, n * k * expert)


def _mla(cfg, h):
    """MLA: q (LoRA h·r_q + norm + r_q·H·(d_nope+d_rope), or h·H·(d_nope+d_rope)),
    kv_a h·(d_c+d_rope) + norm d_c, kv_b d_c·H·(d_nope+d_v), o H·d_v·h."""
    heads, rq, dc = _i(cfg, "num_attention_heads"), _i(cfg, "q_lora_rank", default=0), _i(cfg, "kv_lora_rank")
    nope, rope, dv = _i(cfg, "qk_nope_head_dim"), _i(cfg, "qk_rope_head_dim"), _i(cfg, "v_head_dim")
    q = h * rq + rq + rq * heads * (nope + rope) if rq else h * heads * (nope + rope)
    return q + h * (dc + rope) + dc + dc * heads * (nope + dv) + heads * dv * h


def _deepseek(cfg, spec):
    """First ``first_k_dense_replace`` layers dense; the rest shared + routed experts (+ router)."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    dense_n, freq = _i(cfg, "first_k_dense_replace", default=0), _i(cfg, "moe_layer_freq", default=1)
    moe_n = sum(1 for i in range(dense_n, n) if i % freq == 0)
    e, k, s = _i(cfg, "n_routed_experts"), _i(cfg, "num_experts_per_tok"), _i(cfg, "n_shared_experts", default=0)
    expert = _swiglu(h, _i(cfg, "moe_intermediate_size"))
    router = h * e + e * (spec.model_type == "deepseek_v3")  # V3 adds a per-expert score-correction bias
    shared = n * (_mla(cfg, h) + 2 * h) + (n - moe_n) * _swiglu(h, _i(cfg, "intermediate_size"))
    shared += moe_n * (router + s * expert)
    return _count(spec, h, shared, moe_n * e * expert, moe_n * k * expert)


def _gpt_oss(cfg, spec):
    """Attention with biases and per-head sinks; router with bias; experts with biases."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    e, k, i = _i(cfg, "num_local_experts"), _i(cfg, "num_experts_per_tok"), _i(cfg, "intermediate_size")
    sinks = _i(cfg, "num_attention_heads")
    per_layer = _attention(cfg, h, qkv_bias=True, o_bias=True) + sinks + h * e + e + 2 * h
    expert = _swiglu(h, i, bias=True)
    return _count(spec, h, n * per_layer, n * e * expert, n * k * expert)


def _llama4(cfg, spec):
    """MoE layers: router + shared expert + routed experts (i); other layers dense MLP (i_mlp)."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    step = _i(cfg, "interleave_moe_layer_step", default=1)
    moe_layers = cfg.get("moe_layers") or list(range(step - 1, n, step))
    moe_n = len(moe_layers)
    e, k = _i(cfg, "num_local_experts"), _i(cfg, "num_experts_per_tok")
    expert = _swiglu(h, _i(cfg, "intermediate_size"))
    shared = n * (_attention(cfg, h) + 2 * h) + moe_n * (h * e + expert)
    shared += (n - moe_n) * _swiglu(h, _i(cfg, "intermediate_size_mlp"))
    return _count(spec, h, shared, moe_n * e * expert, moe_n * k * expert)


def _gated_deltanet(cfg, h):
    """in_proj_qkvz h·(2·n_k·d_k + 2·n_v·d_v), in_proj_ba h·2n_v, conv (2·n_k·d_k + n_v·d_v)·K,
    dt_bias and A_log n_v each, gated norm d_v, out_proj n_v·d_v·h."""
    nk, nv = _i(cfg, "linear_num_key_heads"), _i(cfg, "linear_num_value_heads")
    dk, dv, kern = _i(cfg, "linear_key_head_dim"), _i(cfg, "linear_value_head_dim"), _i(cfg, "linear_conv_kernel_dim")
    key, value = nk * dk, nv * dv
    return h * (2 * key + 2 * value) + h * 2 * nv + (2 * key + value) * kern + 2 * nv + dv + value * h


def _qwen3_next(cfg, spec):
    """Every 4th layer gated attention (q doubled for the gate, q/k norms), others Gated DeltaNet;
    every layer MoE: router h·E, routed experts, one shared expert and its sigmoid gate h."""
    h = _i(cfg, "hidden_size")
    kinds = [layer.kind for layer in spec.layers]
    n, n_full = len(kinds), kinds.count("full")
    e, k = _i(cfg, "num_experts"), _i(cfg, "num_experts_per_tok")
    expert = _swiglu(h, _i(cfg, "moe_intermediate_size"))
    shared = n_full * _attention(cfg, h, qk_norm=True, q_gate=_flag(cfg, "attn_output_gate", True)) + (n - n_full) * _gated_deltanet(cfg, h)
    shared += n * (2 * h + h * e + _swiglu(h, _i(cfg, "shared_expert_intermediate_size")) + h)
    return _count(spec, h, shared, n * e * expert, n * k * expert)


def _mamba_mixer(d_inner, h, d_state, d_conv, dt_rank, bias, conv_bias, bcdt_norms=False):
    """in_proj h·2d_in, conv d_in·K (+d_in), x_proj d_in·(r+2N), dt_proj r·d_in + d_in,
    A_log d_in·N, D d_in, out_proj d_in·h (Jamba adds dt/B/C RMSNorms: r + 2N)."""
    n = h * 2 * d_inner + 2 * d_inner * bias + h * bias
    n += d_inner * d_conv + d_inner * conv_bias
    n += d_inner * (dt_rank + 2 * d_state) + dt_rank * d_inner + d_inner
    n += d_inner * d_state + d_inner + d_inner * h
    return n + (dt_rank + 2 * d_state) * bcdt_norms


def _jamba(cfg, spec):
    """Mamba or attention mixer per layer; MoE every ``expert_layer_period`` layers, else SwiGLU."""
    h = _i(cfg, "hidden_size")
    d_inner, d_state = _i(cfg, "mamba_expand", default=2) * h, _i(cfg, "mamba_d_state", default=16)
    dt_rank = _i(cfg, "mamba_dt_rank", default=-(-h // 16))
    mixer = _mamba_mixer(d_inner, h, d_state, _i(cfg, "mamba_d_conv", default=4), dt_rank,
                         _flag(cfg, "mamba_proj_bias"), _flag(cfg, "mamba_conv_bias", True), True)
    period, offset = _i(cfg, "expert_layer_period", default=2), _i(cfg, "expert_layer_offset", default=1)
    e, k = _i(cfg, "num_experts"), _i(cfg, "num_experts_per_tok")
    ffn = _swiglu(h, _i(cfg, "intermediate_size"))
    shared = moe_n = 0
    for i, layer in enumerate(spec.layers):
        shared += 2 * h + (_attention(cfg, h) if layer.kind != "recurrent" else mixer)
        if i % period == offset and e > 1:
            moe_n += 1
            shared += h * e
        else:
            shared += ffn
    return _count(spec, h, shared, moe_n * e * ffn, moe_n * k * ffn)


def _mamba(cfg, spec):
    """Pure Mamba-1 (mamba, falcon_mamba, mamba_ssm): mixer + one norm per layer."""
    n, h = _i(cfg, "num_hidden_layers", "n_layer"), _i(cfg, "hidden_size", "d_model")
    d_inner = _i(cfg, "intermediate_size", default=0) or _i(cfg, "expand", default=2) * h
    d_state, d_conv = _i(cfg, "state_size", "d_state", default=16), _i(cfg, "conv_kernel", "d_conv", default=4)
    dt_rank = _i(cfg, "time_step_rank", "dt_rank", default=-(-h // 16))
    mixer = _mamba_mixer(d_inner, h, d_state, d_conv, dt_rank, _flag(cfg, "use_bias"),
                         _flag(cfg, "use_conv_bias", True))
    return _count(spec, h, n * (mixer + h))


def _mamba2(cfg, spec):
    """Mamba-2: in_proj h·(2d_in + 2GN + H), conv (d_in+2GN)·K + bias, dt_bias/A_log/D per head,
    gated norm d_in, out_proj d_in·h, one norm per layer (plus an MLP if d_intermediate > 0)."""
    merged = {**cfg, **(cfg.get("ssm_cfg") or {})}
    n, h = _i(merged, "num_hidden_layers", "n_layer"), _i(merged, "hidden_size", "d_model")
    d_inner = _i(merged, "expand", default=2) * h
    d_state, d_conv = _i(merged, "state_size", "d_state", default=128), _i(merged, "conv_kernel", "d_conv", default=4)
    groups, headdim = _i(merged, "n_groups", "ngroups", default=1), _i(merged, "head_dim", "headdim", default=64)
    heads, conv_dim = d_inner // headdim, d_inner + 2 * groups * d_state
    mixer = h * (2 * d_inner + 2 * groups * d_state + heads) + conv_dim * (d_conv + 1) + 3 * heads
    mixer += d_inner + d_inner * h
    mlp = _i(merged, "d_intermediate", default=0)
    per_layer = mixer + h + (_swiglu(h, mlp) + h if mlp else 0)
    return _count(spec, h, n * per_layer)


def _recurrent_gemma(cfg, spec):
    """Griffin: RG-LRU blocks (x, y, out projections with biases, conv, block-diagonal gates) or
    local MQA (o_proj biased); every layer a GeGLU MLP of width i/2 with biases and 2 norms."""
    h, heads = _i(cfg, "hidden_size"), _i(cfg, "num_attention_heads")
    w = _i(cfg, "lru_width", default=0) or h
    block = w // heads
    lru = 2 * (h * w + w) + (w * h + h) + w * _i(cfg, "conv1d_width", default=4) + w
    lru += 2 * (heads * block * block + w) + w  # input and recurrence gates, recurrent_param
    attn = _attention(cfg, h, qkv_bias=_flag(cfg, "attention_bias"), o_bias=True)
    mlp = _swiglu(h, _i(cfg, "intermediate_size") // 2, bias=True)
    total = sum((attn if layer.kind == "sliding" else lru) + mlp + 2 * h for layer in spec.layers)
    return _count(spec, h, total)


def _gemma(cfg, spec):
    """Gemma 2/3 text: attention (+ q/k norms in Gemma 3), GeGLU MLP, 4 norms per layer; tied."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    attn = _attention(cfg, h, qk_norm=spec.model_type != "gemma2")
    per_layer = attn + _swiglu(h, _i(cfg, "intermediate_size")) + 4 * h
    return _count(spec, h, n * per_layer)


# ---------------------------------------------------------------- families added with engine sizing


def _kimi_k2(cfg, spec):
    """Kimi K2: DeepSeek-V3's layout (MLA, shared + routed experts, a score-correction bias per expert)."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    dense_n = _i(cfg, "first_k_dense_replace", default=0)
    e, k, s = _i(cfg, "n_routed_experts"), _i(cfg, "num_experts_per_tok"), _i(cfg, "n_shared_experts", default=0)
    expert = _swiglu(h, _i(cfg, "moe_intermediate_size"))
    shared = n * (_mla(cfg, h) + 2 * h) + dense_n * _swiglu(h, _i(cfg, "intermediate_size"))
    shared += (n - dense_n) * (h * e + e + s * expert)
    return _count(spec, h, shared, (n - dense_n) * e * expert, (n - dense_n) * k * expert)


def _cohere(cfg, spec):
    """Command R / R7B: attention (+ per-head q/k LayerNorm weights with use_qk_norm), SwiGLU, one
    LayerNorm weight per layer (attention and MLP run in parallel on it)."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    heads = _i(cfg, "num_attention_heads")
    kv, d = _i(cfg, "num_key_value_heads", default=heads), h // heads  # transformers: head_dim = h / H
    bias = _flag(cfg, "attention_bias")
    attn = _attention({**cfg, "head_dim": d}, h, qkv_bias=bias, o_bias=bias) + (heads + kv) * d * _flag(cfg, "use_qk_norm")
    return _count(spec, h, n * (attn + _swiglu(h, _i(cfg, "intermediate_size")) + h))


def _olmo2(cfg, spec):
    """OLMo 2: attention with q/k RMSNorms over the whole projection (H·d and H_kv·d), SwiGLU, 2 norms."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    heads = _i(cfg, "num_attention_heads")
    kv, d = _i(cfg, "num_key_value_heads", default=heads), _i(cfg, "head_dim", default=h // heads)
    attn = _attention(cfg, h, qkv_bias=_flag(cfg, "attention_bias"), o_bias=_flag(cfg, "attention_bias"))
    return _count(spec, h, n * (attn + (heads + kv) * d + _swiglu(h, _i(cfg, "intermediate_size")) + 2 * h))


def _phimoe(cfg, spec):
    """Phi-3.5-MoE: attention (biased with attention_bias), router h·E, E SwiGLU experts, two LayerNorms
    with biases; the final LayerNorm's bias h and the output head's bias V (lm_head_bias)."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    e, k = _i(cfg, "num_local_experts"), _i(cfg, "num_experts_per_tok")
    bias = _flag(cfg, "attention_bias")
    expert = _swiglu(h, _i(cfg, "intermediate_size"))
    shared = n * (_attention(cfg, h, qkv_bias=bias, o_bias=bias) + h * e + 4 * h) + h
    shared += _vocab(cfg) * _flag(cfg, "lm_head_bias")
    return _count(spec, h, shared, n * e * expert, n * k * expert)


def _mamba2_block(h, d_inner, heads, groups, d_state, d_conv, proj_bias, conv_bias, norm=True):
    """A Mamba-2 mixer: in_proj h·(2·d_in + 2·G·N + H), conv (d_in + 2GN)·K (+ bias), dt_bias, A_log
    and D per head, gated norm d_in, out_proj d_in·h (projection biases optional)."""
    conv = d_inner + 2 * groups * d_state
    n = h * (d_inner + conv + heads) + (d_inner + conv + heads) * proj_bias
    n += conv * d_conv + conv * conv_bias + 3 * heads + d_inner * norm
    return n + d_inner * h + h * proj_bias


def _mixer_state(layer):
    """(d_inner, heads, N) of a Mamba-2 LayerSpec, read back from its state shapes."""
    heads, head_dim, d_state = dict(layer.state_shapes)["ssm"]
    return heads * head_dim, heads, d_state


def _granitemoehybrid(cfg, spec):
    """Granite 4.0 hybrids: Mamba-2 or attention per layer, then MoE (router E·h, E experts of i) + a
    shared SwiGLU expert (or only that one when num_local_experts is 0), 2 norms per layer."""
    h = _i(cfg, "hidden_size")
    e, k = _i(cfg, "num_local_experts", default=0), _i(cfg, "num_experts_per_tok", default=0)
    expert = _swiglu(h, _i(cfg, "intermediate_size"))
    groups, d_conv = _i(cfg, "mamba_n_groups", default=1), _i(cfg, "mamba_d_conv", default=4)
    shared = 0
    for layer in spec.layers:
        if layer.kind == "recurrent":
            d_inner, heads, d_state = _mixer_state(layer)
            shared += _mamba2_block(h, d_inner, heads, groups, d_state, d_conv, _flag(cfg, "mamba_proj_bias"),
                                    _flag(cfg, "mamba_conv_bias", True))
        else:
            shared += _attention(cfg, h, qkv_bias=_flag(cfg, "attention_bias"), o_bias=_flag(cfg, "attention_bias"))
        shared += h * e + _swiglu(h, _i(cfg, "shared_intermediate_size")) + 2 * h
    n = len(spec.layers)
    return _count(spec, h, shared, n * e * expert, n * k * expert)


def _nemotron_h(cfg, spec):
    """Nemotron-H blocks, one norm each: M a Mamba-2 mixer, * attention, - a ReLU² MLP (up h·i, down i·h).
    MoE blocks (E) have no formula here."""
    h = _i(cfg, "hidden_size")
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type") or cfg.get("layer_types")
    if any(b in ("E", "moe") for b in pattern):
        raise ConfigError("no parameter formula for Nemotron-H MoE blocks (E in hybrid_override_pattern)")
    groups, d_conv = _i(cfg, "n_groups", default=1), _i(cfg, "conv_kernel", default=4)
    bias = _flag(cfg, "mlp_bias")
    total = 0
    for layer in spec.layers:
        if layer.kind == "recurrent":
            d_inner, heads, d_state = _mixer_state(layer)
            total += _mamba2_block(h, d_inner, heads, groups, d_state, d_conv, _flag(cfg, "use_bias"),
                                   _flag(cfg, "use_conv_bias", True))
        elif layer.kind == "full":
            total += _attention({**cfg, "head_dim": layer.head_dim}, h, qkv_bias=_flag(cfg, "attention_bias"),
                                o_bias=_flag(cfg, "attention_bias"))
        else:
            i = _i(cfg, "intermediate_size")
            total += 2 * h * i + (i + h) * bias
        total += h
    return _count(spec, h, total)


def _falcon_h1(cfg, spec):
    """Falcon-H1: every layer attention + a Mamba-2 mixer (norm only with mamba_rms_norm) + SwiGLU, 2 norms."""
    h, n = _i(cfg, "hidden_size"), _i(cfg, "num_hidden_layers")
    d_inner, heads, d_state = _mixer_state(spec.layers[0])
    mixer = _mamba2_block(h, d_inner, heads, _i(cfg, "mamba_n_groups", default=1), d_state,
                          _i(cfg, "mamba_d_conv", default=4), _flag(cfg, "mamba_proj_bias"),
                          _flag(cfg, "mamba_conv_bias", True), _flag(cfg, "mamba_rms_norm"))
    mixer += h * (_flag(cfg, "projectors_bias") - _flag(cfg, "mamba_proj_bias"))  # out_proj takes projectors_bias
    attn = _attention(cfg, h, qkv_bias=_flag(cfg, "attention_bias"), o_bias=_flag(cfg, "attention_bias"))
    mlp = _swiglu(h, _i(cfg, "intermediate_size"), _flag(cfg, "mlp_bias"))
    return _count(spec, h, n * (attn + mixer + mlp + 2 * h))


FAMILIES = {
    "llama": _dense, "mistral": _dense, "qwen2": _dense, "qwen3": _dense, "phi3": _dense,
    "mixtral": _mixtral, "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss,
    "llama4": _llama4, "llama4_text": _llama4, "qwen3_next": _qwen3_next, "jamba": _jamba,
    "mamba": _mamba, "falcon_mamba": _mamba, "mamba2": _mamba2, "recurrent_gemma": _recurrent_gemma,
    "gemma2": _gemma, "gemma3": _gemma, "gemma3_text": _gemma,
    "kimi_k2": _kimi_k2, "cohere": _cohere, "cohere2": _cohere, "olmo2": _olmo2, "phimoe": _phimoe,
    "granitemoehybrid": _granitemoehybrid, "nemotron_h": _nemotron_h, "falcon_h1": _falcon_h1,
}


def param_count(spec: ModelSpec) -> ParamCount:
    """Total, active and embedding parameters of ``spec`` from its config (per-family formulas above)."""
    family = FAMILIES.get(spec.model_type)
    if family is None:
        raise ConfigError(f"no parameter formula for model_type {spec.model_type!r}; "
                          f"known: {', '.join(sorted(FAMILIES))}")
    return family(spec.config, spec)
