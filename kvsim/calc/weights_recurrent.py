"""Parameter counts of the recurrent and hybrid families (pure Python): Mamba, Mamba-2, Gated DeltaNet,
RG-LRU, and the models that mix them with attention (Jamba, Qwen3-Next, RecurrentGemma, Granite 4.0-H,
Nemotron-H, Falcon-H1).

Contract: one function per family, ``(cfg, spec) -> ParamCount``, as :mod:`kvsim.calc.weights` describes;
every weight tensor the family's Hugging Face implementation creates for the language model.
"""

from __future__ import annotations

from .config import ConfigError
from .weights_common import (
    attention_params,
    field_flag,
    field_int,
    param_total,
    swiglu_params,
)


def _gated_deltanet(cfg, h):
    """in_proj_qkvz h·(2·n_k·d_k + 2·n_v·d_v), in_proj_ba h·2n_v, conv (2·n_k·d_k + n_v·d_v)·K,
    dt_bias and A_log n_v each, gated norm d_v, out_proj n_v·d_v·h."""
    nk, nv = field_int(cfg, "linear_num_key_heads"), field_int(cfg, "linear_num_value_heads")
    dk, dv, kern = (
        field_int(cfg, "linear_key_head_dim"),
        field_int(cfg, "linear_value_head_dim"),
        field_int(cfg, "linear_conv_kernel_dim"),
    )
    key, value = nk * dk, nv * dv
    return h * (2 * key + 2 * value) + h * 2 * nv + (2 * key + value) * kern + 2 * nv + dv + value * h


def qwen3_next(cfg, spec):
    """Every 4th layer gated attention (q doubled for the gate, q/k norms), others Gated DeltaNet;
    every layer MoE: router h·E, routed experts, one shared expert and its sigmoid gate h."""
    h = field_int(cfg, "hidden_size")
    kinds = [layer.kind for layer in spec.layers]
    n, n_full = len(kinds), kinds.count("full")
    e, k = field_int(cfg, "num_experts"), field_int(cfg, "num_experts_per_tok")
    expert = swiglu_params(h, field_int(cfg, "moe_intermediate_size"))
    shared = n_full * attention_params(cfg, h, qk_norm=True, q_gate=field_flag(cfg, "attn_output_gate", True)) + (
        n - n_full
    ) * _gated_deltanet(cfg, h)
    shared += n * (2 * h + h * e + swiglu_params(h, field_int(cfg, "shared_expert_intermediate_size")) + h)
    return param_total(spec, h, shared, n * e * expert, n * k * expert)


def _mamba_mixer(d_inner, h, d_state, d_conv, dt_rank, bias, conv_bias, bcdt_norms=False):
    """in_proj h·2d_in, conv d_in·K (+d_in), x_proj d_in·(r+2N), dt_proj r·d_in + d_in,
    A_log d_in·N, D d_in, out_proj d_in·h (Jamba adds dt/B/C RMSNorms: r + 2N)."""
    n = h * 2 * d_inner + 2 * d_inner * bias + h * bias
    n += d_inner * d_conv + d_inner * conv_bias
    n += d_inner * (dt_rank + 2 * d_state) + dt_rank * d_inner + d_inner
    n += d_inner * d_state + d_inner + d_inner * h
    return n + (dt_rank + 2 * d_state) * bcdt_norms


def jamba(cfg, spec):
    """Mamba or attention mixer per layer; MoE every ``expert_layer_period`` layers, else SwiGLU."""
    h = field_int(cfg, "hidden_size")
    d_inner, d_state = field_int(cfg, "mamba_expand", default=2) * h, field_int(cfg, "mamba_d_state", default=16)
    dt_rank = field_int(cfg, "mamba_dt_rank", default=-(-h // 16))
    mixer = _mamba_mixer(
        d_inner,
        h,
        d_state,
        field_int(cfg, "mamba_d_conv", default=4),
        dt_rank,
        field_flag(cfg, "mamba_proj_bias"),
        field_flag(cfg, "mamba_conv_bias", True),
        True,
    )
    period, offset = (
        field_int(cfg, "expert_layer_period", default=2, low=1),
        field_int(cfg, "expert_layer_offset", default=1),
    )
    e, k = field_int(cfg, "num_experts"), field_int(cfg, "num_experts_per_tok")
    ffn = swiglu_params(h, field_int(cfg, "intermediate_size"))
    shared = moe_n = 0
    for i, layer in enumerate(spec.layers):
        shared += 2 * h + (attention_params(cfg, h) if layer.kind != "recurrent" else mixer)
        if i % period == offset and e > 1:
            moe_n += 1
            shared += h * e
        else:
            shared += ffn
    return param_total(spec, h, shared, moe_n * e * ffn, moe_n * k * ffn)


def mamba(cfg, spec):
    """Pure Mamba-1 (mamba, falcon_mamba, mamba_ssm): mixer + one norm per layer."""
    n, h = field_int(cfg, "num_hidden_layers", "n_layer"), field_int(cfg, "hidden_size", "d_model")
    d_inner = field_int(cfg, "intermediate_size", default=0) or field_int(cfg, "expand", default=2) * h
    d_state, d_conv = (
        field_int(cfg, "state_size", "d_state", default=16),
        field_int(cfg, "conv_kernel", "d_conv", default=4),
    )
    dt_rank = field_int(cfg, "time_step_rank", "dt_rank", default=-(-h // 16))
    mixer = _mamba_mixer(
        d_inner, h, d_state, d_conv, dt_rank, field_flag(cfg, "use_bias"), field_flag(cfg, "use_conv_bias", True)
    )
    return param_total(spec, h, n * (mixer + h))


def mamba2(cfg, spec):
    """Mamba-2: in_proj h·(2d_in + 2GN + H), conv (d_in+2GN)·K + bias, dt_bias/A_log/D per head,
    gated norm d_in, out_proj d_in·h, one norm per layer (plus an MLP if d_intermediate > 0)."""
    merged = {**cfg, **dict(cfg.get("ssm_cfg") or {})}  # ssm_cfg was checked a mapping by the spec parser
    n, h = field_int(merged, "num_hidden_layers", "n_layer"), field_int(merged, "hidden_size", "d_model")
    d_inner = field_int(merged, "expand", default=2) * h
    d_state, d_conv = (
        field_int(merged, "state_size", "d_state", default=128),
        field_int(merged, "conv_kernel", "d_conv", default=4),
    )
    groups, headdim = (
        field_int(merged, "n_groups", "ngroups", default=1),
        field_int(merged, "head_dim", "headdim", default=64, low=1),
    )
    heads, conv_dim = d_inner // headdim, d_inner + 2 * groups * d_state
    mixer = h * (2 * d_inner + 2 * groups * d_state + heads) + conv_dim * (d_conv + 1) + 3 * heads
    mixer += d_inner + d_inner * h
    mlp = field_int(merged, "d_intermediate", default=0)
    per_layer = mixer + h + (swiglu_params(h, mlp) + h if mlp else 0)
    return param_total(spec, h, n * per_layer)


def recurrent_gemma(cfg, spec):
    """Griffin: RG-LRU blocks (x, y, out projections with biases, conv, block-diagonal gates) or
    local MQA (o_proj biased); every layer a GeGLU MLP of width i/2 with biases and 2 norms."""
    h, heads = field_int(cfg, "hidden_size"), field_int(cfg, "num_attention_heads", low=1)
    w = field_int(cfg, "lru_width", default=0) or h
    block = w // heads
    lru = 2 * (h * w + w) + (w * h + h) + w * field_int(cfg, "conv1d_width", default=4) + w
    lru += 2 * (heads * block * block + w) + w  # input and recurrence gates, recurrent_param
    attn = attention_params(cfg, h, qkv_bias=field_flag(cfg, "attention_bias"), o_bias=True)
    mlp = swiglu_params(h, field_int(cfg, "intermediate_size") // 2, bias=True)
    total = sum((attn if layer.kind == "sliding" else lru) + mlp + 2 * h for layer in spec.layers)
    return param_total(spec, h, total)


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


def granitemoehybrid(cfg, spec):
    """Granite 4.0 hybrids: Mamba-2 or attention per layer, then MoE (router E·h, E experts of i) + a
    shared SwiGLU expert (or only that one when num_local_experts is 0), 2 norms per layer."""
    h = field_int(cfg, "hidden_size")
    e, k = field_int(cfg, "num_local_experts", default=0), field_int(cfg, "num_experts_per_tok", default=0)
    expert = swiglu_params(h, field_int(cfg, "intermediate_size"))
    groups, d_conv = field_int(cfg, "mamba_n_groups", default=1), field_int(cfg, "mamba_d_conv", default=4)
    shared = 0
    for layer in spec.layers:
        if layer.kind == "recurrent":
            d_inner, heads, d_state = _mixer_state(layer)
            shared += _mamba2_block(
                h,
                d_inner,
                heads,
                groups,
                d_state,
                d_conv,
                field_flag(cfg, "mamba_proj_bias"),
                field_flag(cfg, "mamba_conv_bias", True),
            )
        else:
            shared += attention_params(
                cfg, h, qkv_bias=field_flag(cfg, "attention_bias"), o_bias=field_flag(cfg, "attention_bias")
            )
        shared += h * e + swiglu_params(h, field_int(cfg, "shared_intermediate_size")) + 2 * h
    n = len(spec.layers)
    return param_total(spec, h, shared, n * e * expert, n * k * expert)


def nemotron_h(cfg, spec):
    """Nemotron-H blocks, one norm each: M a Mamba-2 mixer, * attention, - a ReLU² MLP (up h·i, down i·h).
    MoE blocks (E) have no formula here."""
    h = field_int(cfg, "hidden_size")
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type") or cfg.get("layer_types")
    if any(b in ("E", "moe") for b in pattern):
        raise ConfigError("no parameter formula for Nemotron-H MoE blocks (E in hybrid_override_pattern)")
    groups, d_conv = field_int(cfg, "n_groups", default=1), field_int(cfg, "conv_kernel", default=4)
    bias = field_flag(cfg, "mlp_bias")
    total = 0
    for layer in spec.layers:
        if layer.kind == "recurrent":
            d_inner, heads, d_state = _mixer_state(layer)
            total += _mamba2_block(
                h,
                d_inner,
                heads,
                groups,
                d_state,
                d_conv,
                field_flag(cfg, "use_bias"),
                field_flag(cfg, "use_conv_bias", True),
            )
        elif layer.kind == "full":
            total += attention_params(
                {**cfg, "head_dim": layer.head_dim},
                h,
                qkv_bias=field_flag(cfg, "attention_bias"),
                o_bias=field_flag(cfg, "attention_bias"),
            )
        else:
            i = field_int(cfg, "intermediate_size")
            total += 2 * h * i + (i + h) * bias
        total += h
    return param_total(spec, h, total)


def falcon_h1(cfg, spec):
    """Falcon-H1: every layer attention + a Mamba-2 mixer (norm only with mamba_rms_norm) + SwiGLU, 2 norms."""
    h, n = field_int(cfg, "hidden_size"), field_int(cfg, "num_hidden_layers")
    d_inner, heads, d_state = _mixer_state(spec.layers[0])
    mixer = _mamba2_block(
        h,
        d_inner,
        heads,
        field_int(cfg, "mamba_n_groups", default=1),
        d_state,
        field_int(cfg, "mamba_d_conv", default=4),
        field_flag(cfg, "mamba_proj_bias"),
        field_flag(cfg, "mamba_conv_bias", True),
        field_flag(cfg, "mamba_rms_norm"),
    )
    mixer += h * (
        field_flag(cfg, "projectors_bias") - field_flag(cfg, "mamba_proj_bias")
    )  # out_proj takes projectors_bias
    attn = attention_params(
        cfg, h, qkv_bias=field_flag(cfg, "attention_bias"), o_bias=field_flag(cfg, "attention_bias")
    )
    mlp = swiglu_params(h, field_int(cfg, "intermediate_size"), field_flag(cfg, "mlp_bias"))
    return param_total(spec, h, n * (attn + mixer + mlp + 2 * h))
