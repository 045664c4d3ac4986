"""Per-family layer patterns: which kind of cache each decoder layer of a config keeps (pure Python).

Contract
- ``FAMILIES[model_type](cfg) -> list[LayerSpec]``, one per decoder layer, for a config already
  flattened by :func:`kvsim.calc.hf_config.text_config` (no nested ``text_config``).
- Fields an official config omits because transformers supplies them (Gemma 3's heads, head_dim,
  vocab) are in :data:`FAMILY_DEFAULTS`; families whose output head reuses the input embedding
  unless the config says otherwise are :data:`TIED_BY_DEFAULT`.
- An explicit ``head_dim`` always wins over ``hidden_size // num_attention_heads``.
- Hybrids: Jamba, Qwen3-Next, RecurrentGemma, Granite 4.0 (``layer_types`` mamba/attention),
  Nemotron-H (``hybrid_override_pattern``: M, *, -, E; MLP and MoE blocks keep no cache) alternate
  layers; Falcon-H1 runs attention and Mamba-2 side by side, so each of its layers is a full-attention
  LayerSpec that also carries the Mamba-2 state.
- List fields (``layer_types``, ``no_rope_layers``, ``block_types``) may be lists or tuples, so a
  spec's frozen ``config`` parses again to the same spec.
- Errors are :class:`~kvsim.calc.config.ConfigError` naming the field and what is accepted.
"""

from __future__ import annotations

from dataclasses import replace

from .config import ConfigError, LayerSpec, config_int
from .units import positive_int

_SEQUENCE = (list, tuple)


# ---------------------------------------------------------------- layer helpers


def _head_dim(cfg):
    """Explicit head_dim wins; otherwise hidden_size // num_attention_heads."""
    if cfg.get("head_dim") is not None:
        return config_int(cfg, "head_dim")
    hidden, heads = config_int(cfg, "hidden_size"), config_int(cfg, "num_attention_heads")
    if hidden % heads:
        raise ConfigError(
            f"head_dim is absent and hidden_size {hidden} is not divisible by "
            f"num_attention_heads {heads}; set head_dim")
    return hidden // heads


def _kv_heads(cfg):
    return config_int(cfg, "num_key_value_heads", default=None) or config_int(cfg, "num_attention_heads")


def _attn(cfg, kind="full", window=None, chunk=None, use_rope=True):
    return LayerSpec(kind=kind, num_key_value_heads=_kv_heads(cfg), head_dim=_head_dim(cfg),
                     sliding_window=window, attention_chunk_size=chunk, use_rope=use_rope)


def _mamba_layer(d_inner, d_state, d_conv):
    # mlx-lm layout: conv (K-1, d_inner), ssm (d_inner, d_state)
    return LayerSpec(kind="recurrent", recurrent_family="mamba", state_shapes=(
        ("conv", (d_conv - 1, d_inner)), ("ssm", (d_inner, d_state))))


def _window(cfg):
    """Sliding window if the config enables one, else None (Qwen's use_sliding_window flag)."""
    if cfg.get("use_sliding_window") is False:
        return None
    w = cfg.get("sliding_window")
    if w is None:
        return None
    positive_int("sliding_window", w, ConfigError)
    limit = cfg.get("max_position_embeddings")
    # a window as long as the whole context is no window (old Mixtral configs: 32768)
    return None if limit and w >= limit else w


def _layer_types_or(cfg, n, default_fn):
    """HF ``layer_types`` if present (validated), else ``default_fn(i)`` per layer."""
    types = cfg.get("layer_types")
    if types is None:
        return [default_fn(i) for i in range(n)]
    if not isinstance(types, _SEQUENCE) or len(types) != n:
        raise ConfigError(f"layer_types must be a list of {n} entries (num_hidden_layers)")
    return types


# ---------------------------------------------------------------- families


def _dense(cfg):
    """llama, mistral, mixtral, phi3: ``layer_types`` if given, else every layer full, or sliding if windowed."""
    n = config_int(cfg, "num_hidden_layers")
    w = _window(cfg)
    return _typed_layers(cfg, n, w, lambda i: "full_attention" if w is None else "sliding_attention")


def _qwen(cfg):
    """qwen2, qwen3 (transformers' Qwen2Config): a window only with ``use_sliding_window`` true, and then
    only on layers i >= ``max_window_layers`` (default 28); an explicit ``layer_types`` wins."""
    n = config_int(cfg, "num_hidden_layers")
    w = _window(cfg) if cfg.get("use_sliding_window") is True else None
    first = cfg.get("max_window_layers", 28)
    if not isinstance(first, int) or isinstance(first, bool) or first < 0:
        raise ConfigError(f"max_window_layers must be an integer >= 0, got {first!r}")
    return _typed_layers(cfg, n, w, lambda i: "sliding_attention" if w and i >= first else "full_attention")


def _typed_layers(cfg, n, window, default_fn):
    """One layer per ``layer_types`` entry (or ``default_fn(i)``): full, or sliding with ``window``.

    A sliding entry without a window (none configured, disabled, or as long as the context) is a full
    layer, as transformers builds it (its sliding_window is then None).
    """
    out = []
    for i, t in enumerate(_layer_types_or(cfg, n, default_fn)):
        if t not in ("full_attention", "sliding_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: sliding_attention, full_attention")
        out.append(_attn(cfg, "sliding", window=window) if t == "sliding_attention" and window else _attn(cfg))
    return out


def _sliding_global(cfg, pattern_default):
    """gemma2/gemma3/gpt_oss: layer_types, else sliding_window_pattern (every Nth global)."""
    n = config_int(cfg, "num_hidden_layers")
    w = config_int(cfg, "sliding_window")
    period = config_int(cfg, "sliding_window_pattern", default=pattern_default)
    types = _layer_types_or(
        cfg, n, lambda i: "full_attention" if (i + 1) % period == 0 else "sliding_attention")
    out = []
    for i, t in enumerate(types):
        if t == "sliding_attention":
            out.append(_attn(cfg, "sliding", window=w))
        elif t == "full_attention":
            out.append(_attn(cfg))
        else:
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: sliding_attention, full_attention")
    return out


def _llama4(cfg):
    """Chunked local attention with NoPE global layers (no_rope_layers entry 0 = NoPE)."""
    n = config_int(cfg, "num_hidden_layers")
    chunk = config_int(cfg, "attention_chunk_size", default=None)
    nope = cfg.get("no_rope_layers")
    if nope is None:  # HF's key is no_rope_layer_interval; Meta's args call it nope_layer_interval
        interval = config_int(cfg, "no_rope_layer_interval", "nope_layer_interval", default=4)
        nope = [0 if (i + 1) % interval == 0 else 1 for i in range(n)]
    if (not isinstance(nope, _SEQUENCE) or len(nope) != n
            or any(isinstance(v, bool) or v not in (0, 1) for v in nope)):
        raise ConfigError(f"no_rope_layers must be a list of {n} entries of 0 or 1 (num_hidden_layers)")
    out = []
    for uses_rope in nope:
        if uses_rope and chunk:
            out.append(_attn(cfg, "chunked", chunk=chunk))
        else:
            out.append(_attn(cfg, use_rope=bool(uses_rope)))
    return out


def _deepseek(cfg):
    n = config_int(cfg, "num_hidden_layers")
    r, rope = config_int(cfg, "kv_lora_rank"), config_int(cfg, "qk_rope_head_dim")
    return [LayerSpec(kind="mla", kv_lora_rank=r, qk_rope_head_dim=rope) for _ in range(n)]


def _jamba(cfg):
    n = config_int(cfg, "num_hidden_layers")
    period = config_int(cfg, "attn_layer_period")
    offset = cfg.get("attn_layer_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
        raise ConfigError(f"attn_layer_offset must be an integer in [0, {period}), got {offset!r}")
    d_inner = config_int(cfg, "mamba_expand", default=2) * config_int(cfg, "hidden_size")
    d_state = config_int(cfg, "mamba_d_state", default=16)
    d_conv = config_int(cfg, "mamba_d_conv", default=4)
    w = _window(cfg)
    return [(_attn(cfg, "sliding", window=w) if w else _attn(cfg)) if i % period == offset
            else _mamba_layer(d_inner, d_state, d_conv) for i in range(n)]


def _mamba(cfg):
    n = config_int(cfg, "num_hidden_layers", "n_layer")
    hidden = config_int(cfg, "hidden_size", "d_model")
    # falcon_mamba carries a stray "expand": 16; intermediate_size is authoritative
    d_inner = (config_int(cfg, "intermediate_size", default=None)
               or config_int(cfg, "expand", default=2) * hidden)
    d_state = config_int(cfg, "state_size", "d_state", default=16)
    d_conv = config_int(cfg, "conv_kernel", "d_conv", default=4)
    return [_mamba_layer(d_inner, d_state, d_conv) for _ in range(n)]


def _mamba2(cfg):
    n = config_int(cfg, "num_hidden_layers", "n_layer")
    merged = {**cfg, **(cfg.get("ssm_cfg") or {})}
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


def _qwen3_next(cfg):
    n = config_int(cfg, "num_hidden_layers")
    interval = config_int(cfg, "full_attention_interval", default=4)
    nk, nv = config_int(cfg, "linear_num_key_heads"), config_int(cfg, "linear_num_value_heads")
    dk, dv = config_int(cfg, "linear_key_head_dim"), config_int(cfg, "linear_value_head_dim")
    k = config_int(cfg, "linear_conv_kernel_dim", default=4)
    gdn = LayerSpec(kind="recurrent", recurrent_family="gated_deltanet", state_shapes=(
        ("conv", (k - 1, 2 * nk * dk + nv * dv)), ("ssm", (nv, dv, dk))))  # mlx-lm's layout
    types = _layer_types_or(
        cfg, n, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention")
    out = []
    for i, t in enumerate(types):
        if t not in ("full_attention", "linear_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: linear_attention, full_attention")
        out.append(_attn(cfg) if t == "full_attention" else gdn)
    return out


def _recurrent_gemma(cfg):
    n = config_int(cfg, "num_hidden_layers")
    w = config_int(cfg, "attention_window_size")
    width = config_int(cfg, "lru_width", default=None) or config_int(cfg, "hidden_size")
    k = config_int(cfg, "conv1d_width", default=4)
    pattern = cfg.get("block_types") or cfg.get("_block_types") or ["recurrent", "recurrent", "attention"]
    if not isinstance(pattern, _SEQUENCE):
        raise ConfigError(f"block_types must be a list of 'recurrent'/'attention' entries, got {pattern!r}")
    lru = LayerSpec(kind="recurrent", recurrent_family="rg_lru", state_shapes=(
        ("conv", (k - 1, width)), ("ssm", (width,))))
    out = []
    for i in range(n):
        t = pattern[i % len(pattern)]
        if t not in ("recurrent", "attention"):
            raise ConfigError(f"block_types entry {t!r} is not recurrent or attention")
        out.append(_attn(cfg, "sliding", window=w) if t == "attention" else lru)
    return out


# ---------------------------------------------------------------- families added with engine sizing


def _cohere2(cfg):
    """Command R7B: layer_types, else every sliding_window_pattern-th layer (default 4) global; global
    layers have no RoPE (transformers' Cohere2Attention rotates sliding layers only)."""
    return [replace(layer, use_rope=False) if layer.kind == "full" else layer for layer in _sliding_global(cfg, 4)]


def _mamba2_state(d_inner, heads, head_dim, d_state, groups, d_conv):
    """Mamba-2 state: conv (K-1, d_inner + 2·G·N), ssm (heads, head_dim, N)."""
    if heads * head_dim != d_inner:
        raise ConfigError(f"Mamba-2 heads {heads} × head dim {head_dim} must equal the inner width {d_inner}")
    return (("conv", (d_conv - 1, d_inner + 2 * groups * d_state)), ("ssm", (heads, head_dim, d_state)))


def _head_dim_or_auto(cfg, name, d_inner, heads):
    """A Mamba head dim that may be "auto" (transformers: inner width // heads)."""
    return d_inner // heads if cfg.get(name, "auto") == "auto" else config_int(cfg, name)


_MIXER_NAMES = {"mamba": "linear_attention", "attention": "full_attention"}  # transformers' legacy names


def _granitemoehybrid(cfg):
    """Granite 4.0 hybrids: layer_types 'mamba' (Mamba-2) or 'attention' (also 'linear_attention' /
    'full_attention'); absent, every layer is Mamba-2 (GraniteMoeHybridConfig). Attention rotates only
    with position_embedding_type "rope" (the H models say "nope")."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    d_inner = config_int(cfg, "mamba_expand", default=2) * hidden
    heads = config_int(cfg, "mamba_n_heads", default=128)
    state = _mamba2_state(d_inner, heads, _head_dim_or_auto(cfg, "mamba_d_head", d_inner, heads),
                          config_int(cfg, "mamba_d_state", default=256), config_int(cfg, "mamba_n_groups", default=1),
                          config_int(cfg, "mamba_d_conv", default=4))
    mamba = LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=state)
    out = []
    for i, t in enumerate(_layer_types_or(cfg, n, lambda i: "mamba")):
        t = _MIXER_NAMES.get(t, t)
        if t not in ("linear_attention", "full_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: mamba, attention")
        out.append(mamba if t == "linear_attention" else
                   _attn(cfg, use_rope=cfg.get("position_embedding_type") == "rope"))
    return out


_NEMOTRON_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe",
                    "mamba": "linear_attention", "attention": "full_attention"}


def _nemotron_h(cfg):
    """Nemotron-H: hybrid_override_pattern (M Mamba-2, * attention without RoPE, - MLP, E MoE; the last two
    keep no cache), or the same as a layers_block_type / layer_types list. The pattern sets the depth."""
    pattern = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type") or cfg.get("layer_types")
    if not isinstance(pattern, (str, *_SEQUENCE)) or not pattern:
        raise ConfigError("hybrid_override_pattern must be a string of M, *, - and E (or layers_block_type a list)")
    heads, head_dim = config_int(cfg, "mamba_num_heads"), config_int(cfg, "mamba_head_dim")
    state = _mamba2_state(heads * head_dim, heads, head_dim, config_int(cfg, "ssm_state_size"),
                          config_int(cfg, "n_groups", default=1), config_int(cfg, "conv_kernel", default=4))
    d_attn = config_int(cfg, "head_dim", "attention_head_dim", default=None) or _head_dim(cfg)
    attention = LayerSpec(kind="full", num_key_value_heads=_kv_heads(cfg), head_dim=d_attn, use_rope=False)
    out = []
    for i, block in enumerate(pattern):
        t = _NEMOTRON_BLOCKS.get(block, block)
        if t not in ("linear_attention", "full_attention", "mlp", "moe"):
            raise ConfigError(f"hybrid_override_pattern[{i}] is {block!r}; accepted: M, *, -, E")
        out.append({"linear_attention": LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=state),
                    "full_attention": attention}.get(t, LayerSpec(kind="none")))
    return out


def _falcon_h1(cfg):
    """Falcon-H1: attention and a Mamba-2 mixer side by side in every layer: a full-attention LayerSpec
    that also carries the Mamba-2 state (inner width mamba_d_ssm, else mamba_expand · hidden_size)."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    d_inner = (config_int(cfg, "mamba_d_ssm", default=None)
               or config_int(cfg, "mamba_expand", default=2) * hidden)
    heads = config_int(cfg, "mamba_n_heads", default=128)
    state = _mamba2_state(d_inner, heads, _head_dim_or_auto(cfg, "mamba_d_head", d_inner, heads),
                          config_int(cfg, "mamba_d_state", default=256), config_int(cfg, "mamba_n_groups", default=1),
                          config_int(cfg, "mamba_d_conv", default=4))
    return [replace(_attn(cfg), recurrent_family="mamba2", state_shapes=state)] * n


FAMILIES = {
    "llama": _dense, "mistral": _dense, "mixtral": _dense, "qwen2": _qwen,
    "qwen3": _qwen, "phi3": _dense,
    "gemma2": lambda c: _sliding_global(c, 2),
    "gemma3": lambda c: _sliding_global(c, 6),
    "gemma3_text": lambda c: _sliding_global(c, 6),
    "gpt_oss": lambda c: _sliding_global(c, 2),
    "llama4": _llama4, "llama4_text": _llama4,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "jamba": _jamba, "qwen3_next": _qwen3_next,
    "mamba": _mamba, "falcon_mamba": _mamba, "mamba2": _mamba2,
    "recurrent_gemma": _recurrent_gemma,
    "kimi_k2": _deepseek, "cohere": _dense, "cohere2": _cohere2, "olmo2": _dense, "phimoe": _dense,
    "granitemoehybrid": _granitemoehybrid, "nemotron_h": _nemotron_h, "falcon_h1": _falcon_h1,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(FAMILIES))

# Fields the official config.json omits because transformers' config class supplies them.
# Gemma3TextConfig defaults (transformers configuration_gemma3.py): gemma-3-4b-it's text_config
# lists only hidden_size, intermediate_size, num_hidden_layers, rope_scaling and sliding_window.
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "max_position_embeddings": 131072, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
}
FAMILY_DEFAULTS = {"gemma3": _GEMMA3_TEXT_DEFAULTS, "gemma3_text": _GEMMA3_TEXT_DEFAULTS}

# tie_word_embeddings when the config leaves it out: True in these families (Gemma's and Mamba's
# transformers classes, mamba_ssm's MambaConfig), False in all others
TIED_BY_DEFAULT = ("gemma2", "gemma3", "gemma3_text", "mamba", "falcon_mamba", "mamba2", "recurrent_gemma",
                   "cohere", "cohere2")
