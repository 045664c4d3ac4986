"""Layer patterns of the recurrent and hybrid families (pure Python): Mamba, Mamba-2, Jamba, Qwen3-Next,
RecurrentGemma, Granite 4.0-H, Nemotron-H, Falcon-H1.

Contract: one parser per family, ``cfg -> list[LayerSpec]``, as :mod:`kvsim.calc.families` describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .config import ConfigError, LayerSpec, config_int
from .layer_fields import (
    SEQUENCE,
    attention_layer,
    head_dim,
    head_dim_or_auto,
    kv_heads,
    layer_types_or,
    mamba2_layer_state,
    mamba_layer,
    pattern_length,
    sliding_window,
)
from .validate import show

_MIXER_NAMES = {"mamba": "linear_attention", "attention": "full_attention"}  # transformers' legacy names

_NEMOTRON_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe",
                    "mamba": "linear_attention", "attention": "full_attention"}


def jamba(cfg):
    n = config_int(cfg, "num_hidden_layers")
    period = config_int(cfg, "attn_layer_period")
    offset = cfg.get("attn_layer_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
        raise ConfigError(f"attn_layer_offset must be an integer in [0, {period}), got {offset!r}")
    d_inner = config_int(cfg, "mamba_expand", default=2) * config_int(cfg, "hidden_size")
    d_state = config_int(cfg, "mamba_d_state", default=16)
    d_conv = config_int(cfg, "mamba_d_conv", default=4)
    w = sliding_window(cfg)
    return [(attention_layer(cfg, "sliding", window=w) if w else attention_layer(cfg)) if i % period == offset
            else mamba_layer(d_inner, d_state, d_conv) for i in range(n)]


def mamba(cfg):
    n = config_int(cfg, "num_hidden_layers", "n_layer")
    hidden = config_int(cfg, "hidden_size", "d_model")
    # falcon_mamba carries a stray "expand": 16; intermediate_size is authoritative
    d_inner = (config_int(cfg, "intermediate_size", default=None)
               or config_int(cfg, "expand", default=2) * hidden)
    d_state = config_int(cfg, "state_size", "d_state", default=16)
    d_conv = config_int(cfg, "conv_kernel", "d_conv", default=4)
    return [mamba_layer(d_inner, d_state, d_conv) for _ in range(n)]


def mamba2(cfg):
    n = config_int(cfg, "num_hidden_layers", "n_layer")
    ssm_cfg = cfg.get("ssm_cfg") or {}
    if not isinstance(ssm_cfg, Mapping):
        raise ConfigError(f"ssm_cfg must be a JSON object, got {show(ssm_cfg)}")
    merged = {**cfg, **ssm_cfg}
    hidden = config_int(merged, "hidden_size", "d_model")
    d_inner = config_int(merged, "expand", default=2) * hidden
    d_state = config_int(merged, "state_size", "d_state", default=128)
    d_conv = config_int(merged, "conv_kernel", "d_conv", default=4)
    headdim = config_int(merged, "head_dim", "headdim", default=64)
    ngroups = config_int(merged, "n_groups", "ngroups", default=1)
    if d_inner % headdim:
        raise ConfigError(f"headdim {headdim} must divide the inner width {d_inner}")
    nheads = d_inner // headdim
    layer = LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=(
        ("conv", (d_conv - 1, d_inner + 2 * ngroups * d_state)),
        ("ssm", (nheads, headdim, d_state))))
    return [layer] * n


def qwen3_next(cfg):
    n = config_int(cfg, "num_hidden_layers")
    interval = config_int(cfg, "full_attention_interval", default=4)
    nk, nv = config_int(cfg, "linear_num_key_heads"), config_int(cfg, "linear_num_value_heads")
    dk, dv = config_int(cfg, "linear_key_head_dim"), config_int(cfg, "linear_value_head_dim")
    k = config_int(cfg, "linear_conv_kernel_dim", default=4)
    gdn = LayerSpec(kind="recurrent", recurrent_family="gated_deltanet", state_shapes=(
        ("conv", (k - 1, 2 * nk * dk + nv * dv)), ("ssm", (nv, dv, dk))))  # mlx-lm's layout
    types = layer_types_or(
        cfg, n, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention")
    out = []
    for i, t in enumerate(types):
        if t not in ("full_attention", "linear_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: linear_attention, full_attention")
        out.append(attention_layer(cfg) if t == "full_attention" else gdn)
    return out


def recurrent_gemma(cfg):
    n = config_int(cfg, "num_hidden_layers")
    w = config_int(cfg, "attention_window_size")
    width = config_int(cfg, "lru_width", default=None) or config_int(cfg, "hidden_size")
    k = config_int(cfg, "conv1d_width", default=4)
    pattern = cfg.get("block_types") or cfg.get("_block_types") or ["recurrent", "recurrent", "attention"]
    if not isinstance(pattern, SEQUENCE):
        raise ConfigError(f"block_types must be a list of 'recurrent'/'attention' entries, got {show(pattern)}")
    pattern_length("block_types", pattern)
    lru = LayerSpec(kind="recurrent", recurrent_family="rg_lru", state_shapes=(
        ("conv", (k - 1, width)), ("ssm", (width,))))
    out = []
    for i in range(n):
        t = pattern[i % len(pattern)]
        if t not in ("recurrent", "attention"):
            raise ConfigError(f"block_types entry {show(t)} is not recurrent or attention")
        out.append(attention_layer(cfg, "sliding", window=w) if t == "attention" else lru)
    return out


def granitemoehybrid(cfg):
    """Granite 4.0 hybrids: layer_types 'mamba' (Mamba-2) or 'attention' (also 'linear_attention' /
    'full_attention'); absent, every layer is Mamba-2 (GraniteMoeHybridConfig). Attention rotates only
    with position_embedding_type "rope" (the H models say "nope")."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    d_inner = config_int(cfg, "mamba_expand", default=2) * hidden
    heads = config_int(cfg, "mamba_n_heads", default=128)
    state = mamba2_layer_state(d_inner, heads, head_dim_or_auto(cfg, "mamba_d_head", d_inner, heads),
                          config_int(cfg, "mamba_d_state", default=256), config_int(cfg, "mamba_n_groups", default=1),
                          config_int(cfg, "mamba_d_conv", default=4))
    mamba = LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=state)
    out = []
    for i, t in enumerate(layer_types_or(cfg, n, lambda i: "mamba")):
        t = _MIXER_NAMES.get(t, t)  # layer_types_or checked every entry is a string
        if t not in ("linear_attention", "full_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: mamba, attention")
        out.append(mamba if t == "linear_attention" else
                   attention_layer(cfg, use_rope=cfg.get("position_embedding_type") == "rope"))
    return out


def nemotron_h(cfg):
    """Nemotron-H: hybrid_override_pattern (M Mamba-2, * attention without RoPE, - MLP, E MoE; the last two
    keep no cache), or the same as a layers_block_type / layer_types list. The pattern sets the depth."""
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type") or cfg.get("layer_types")
    if not isinstance(pattern, (str, *SEQUENCE)) or not pattern:
        raise ConfigError("hybrid_override_pattern must be a string of M, *, - and E (or layers_block_type a list)")
    pattern_length("hybrid_override_pattern", pattern)
    heads, mamba_head_dim = config_int(cfg, "mamba_num_heads"), config_int(cfg, "mamba_head_dim")
    state = mamba2_layer_state(heads * mamba_head_dim, heads, mamba_head_dim, config_int(cfg, "ssm_state_size"),
                          config_int(cfg, "n_groups", default=1), config_int(cfg, "conv_kernel", default=4))
    # attention head dim: head_dim, else attention_head_dim, else hidden_size // num_attention_heads
    d_attn = config_int(cfg, "head_dim", "attention_head_dim", default=None) or head_dim(cfg)
    attention = LayerSpec(kind="full", num_key_value_heads=kv_heads(cfg), head_dim=d_attn, use_rope=False)
    out = []
    for i, block in enumerate(pattern):
        t = _NEMOTRON_BLOCKS.get(block, block) if isinstance(block, str) else None
        if t not in ("linear_attention", "full_attention", "mlp", "moe"):
            raise ConfigError(f"hybrid_override_pattern[{i}] is {show(block)}; accepted: M, *, -, E")
        out.append({"linear_attention": LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=state),
                    "full_attention": attention}.get(t, LayerSpec(kind="none")))
    return out


def falcon_h1(cfg):
    """Falcon-H1: attention and a Mamba-2 mixer side by side in every layer: a full-attention LayerSpec
    that also carries the Mamba-2 state (inner width mamba_d_ssm, else mamba_expand · hidden_size)."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    d_inner = (config_int(cfg, "mamba_d_ssm", default=None)
               or config_int(cfg, "mamba_expand", default=2) * hidden)
    heads = config_int(cfg, "mamba_n_heads", default=128)
    state = mamba2_layer_state(d_inner, heads, head_dim_or_auto(cfg, "mamba_d_head", d_inner, heads),
                          config_int(cfg, "mamba_d_state", default=256), config_int(cfg, "mamba_n_groups", default=1),
                          config_int(cfg, "mamba_d_conv", default=4))
    return [replace(attention_layer(cfg), recurrent_family="mamba2", state_shapes=state)] * n
