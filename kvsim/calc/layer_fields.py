"""The per-layer building blocks every family parser uses (pure Python): head sizes, KV heads, windows,
``layer_types``, attention and Mamba layers.

Contract: helpers shared by :mod:`kvsim.calc.families` (attention families) and
:mod:`kvsim.calc.families_recurrent` (recurrent and hybrid families); each validates the fields it
reads and raises :class:`~kvsim.calc.config.ConfigError` naming them.
"""

from __future__ import annotations

from .config import ConfigError, LayerSpec, config_int
from .validate import MAX_LAYERS, config_count, show

SEQUENCE = (list, tuple)  # a frozen config holds tuples where config.json had lists


def head_dim(cfg):
    """Explicit head_dim wins; otherwise hidden_size // num_attention_heads."""
    if cfg.get("head_dim") is not None:
        return config_int(cfg, "head_dim")
    hidden, heads = config_int(cfg, "hidden_size"), config_int(cfg, "num_attention_heads")
    if hidden % heads:
        raise ConfigError(
            f"head_dim is absent and hidden_size {hidden} is not divisible by "
            f"num_attention_heads {heads}; set head_dim")
    return hidden // heads


def kv_heads(cfg):
    """num_key_value_heads (default num_attention_heads); it must divide num_attention_heads (GQA groups)."""
    heads = config_int(cfg, "num_attention_heads", default=None)
    kv = config_int(cfg, "num_key_value_heads", default=None)
    if kv is None:
        if heads is None:
            raise ConfigError("config is missing num_attention_heads (a positive integer)")
        return heads
    if heads is not None and heads % kv:
        raise ConfigError(f"num_key_value_heads {kv} must divide num_attention_heads {heads} "
                          f"(accepted: a divisor of {heads})")
    return kv


def max_positions(cfg):
    """max_position_embeddings (or n_ctx) as an integer >= 1, or None when the config has none."""
    for name in ("max_position_embeddings", "n_ctx"):
        if cfg.get(name) is not None:
            return config_count(name, cfg[name], 1)
    return None


def attention_layer(cfg, kind="full", window=None, chunk=None, use_rope=True):
    return LayerSpec(kind=kind, num_key_value_heads=kv_heads(cfg), head_dim=head_dim(cfg),
                     sliding_window=window, attention_chunk_size=chunk, use_rope=use_rope)


def mamba_layer(d_inner, d_state, d_conv):
    # mlx-lm layout: conv (K-1, d_inner), ssm (d_inner, d_state)
    return LayerSpec(kind="recurrent", recurrent_family="mamba", state_shapes=(
        ("conv", (d_conv - 1, d_inner)), ("ssm", (d_inner, d_state))))


def sliding_window(cfg):
    """Sliding window if the config enables one, else None (Qwen's use_sliding_window flag)."""
    if cfg.get("use_sliding_window") is False:
        return None
    w = cfg.get("sliding_window")
    if w is None:
        return None
    w = config_count("sliding_window", w, 1)
    limit = max_positions(cfg)
    # a window as long as the whole context is no window (old Mixtral configs: 32768)
    return None if limit and w >= limit else w


def layer_types_or(cfg, n, default_fn):
    """HF ``layer_types`` if present (validated), else ``default_fn(i)`` per layer."""
    types = cfg.get("layer_types")
    if types is None:
        return [default_fn(i) for i in range(n)]
    if not isinstance(types, SEQUENCE) or len(types) != n:
        raise ConfigError(f"layer_types must be a list of {n} entries (num_hidden_layers)")
    for i, t in enumerate(types):
        if not isinstance(t, str):
            raise ConfigError(f"layer_types[{i}] must be a string, got {show(t)}")
    return types


def pattern_length(name: str, pattern) -> int:
    """Length of a per-layer pattern (string or list), at most MAX_LAYERS entries."""
    if len(pattern) > MAX_LAYERS:
        raise ConfigError(f"{name} has {len(pattern)} entries; accepted: at most {MAX_LAYERS} layers")
    return len(pattern)


def typed_layers(cfg, n, window, default_fn):
    """One layer per ``layer_types`` entry (or ``default_fn(i)``): full, or sliding with ``window``.

    A sliding entry without a window (none configured, disabled, or as long as the context) is a full
    layer, as transformers builds it (its sliding_window is then None).
    """
    out = []
    for i, t in enumerate(layer_types_or(cfg, n, default_fn)):
        if t not in ("full_attention", "sliding_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: sliding_attention, full_attention")
        sliding = t == "sliding_attention" and window
        out.append(attention_layer(cfg, "sliding", window=window) if sliding else attention_layer(cfg))
    return out


def mamba2_layer_state(d_inner, heads, head_dim, d_state, groups, d_conv):
    """Mamba-2 state: conv (K-1, d_inner + 2·G·N), ssm (heads, head_dim, N)."""
    if heads * head_dim != d_inner:
        raise ConfigError(f"Mamba-2 heads {heads} × head dim {head_dim} must equal the inner width {d_inner}")
    return (("conv", (d_conv - 1, d_inner + 2 * groups * d_state)), ("ssm", (heads, head_dim, d_state)))


def head_dim_or_auto(cfg, name, d_inner, heads):
    """A Mamba head dim that may be "auto" (transformers: inner width // heads)."""
    return d_inner // heads if cfg.get(name, "auto") == "auto" else config_int(cfg, name)
