"""Model description: a per-layer specification derived from a Hugging Face ``config.json``.

Contract
- ``from_hf_config(dict)`` turns a config as users download it into a :class:`ModelSpec`:
  one :class:`LayerSpec` per decoder layer, each with an attention ``kind`` and the
  dimensions that decide how much cache that layer keeps.
- Unknown keys are ignored; a nested ``text_config`` (Gemma 3, Llama 4) is used when present.
- Fields an official config omits because transformers supplies them (Gemma 3's heads,
  head_dim, vocab) take those class defaults (:data:`FAMILY_DEFAULTS`); a state-spaces
  ``mamba_ssm`` config without ``model_type`` is recognised by its ``ssm_cfg``.
- An explicit ``head_dim`` always wins over ``hidden_size // num_attention_heads``.
- Errors are :class:`ConfigError` with a one-line message naming the field and what is accepted.
- Pure Python: no numpy, no MLX.

Kinds: ``full``, ``sliding`` (window W), ``chunked`` (chunk C), ``mla`` (latent + RoPE key),
``recurrent`` (fixed state tensors), ``none`` (no cache).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("full", "sliding", "chunked", "mla", "recurrent", "none")
RECURRENT_FAMILIES = ("mamba", "mamba2", "gated_deltanet", "rg_lru")


class ConfigError(ValueError):
    """A config field is missing or invalid; the message names it and the accepted values."""


@dataclass(frozen=True)
class LayerSpec:
    """What one decoder layer caches.

    Attention kinds (full/sliding/chunked) cache K of ``head_dim`` and V of ``v_head_dim``
    for each of ``num_key_value_heads`` heads. ``mla`` caches ``kv_lora_rank +
    qk_rope_head_dim`` elements shared by all heads. ``recurrent`` keeps ``state_shapes``
    per sequence (no batch axis), whatever the number of tokens.
    """

    kind: str
    num_key_value_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    recurrent_family: str | None = None
    state_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    use_rope: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"layer kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind in ("full", "sliding", "chunked"):
            _positive("num_key_value_heads", self.num_key_value_heads)
            _positive("head_dim", self.head_dim)
            if self.v_head_dim == 0:
                object.__setattr__(self, "v_head_dim", self.head_dim)
        if self.kind == "sliding":
            _positive("sliding_window", self.sliding_window)
        if self.kind == "chunked":
            _positive("attention_chunk_size", self.attention_chunk_size)
        if self.kind == "mla":
            _positive("kv_lora_rank", self.kv_lora_rank)
            _positive("qk_rope_head_dim", self.qk_rope_head_dim)
        if self.kind == "recurrent":
            if self.recurrent_family not in RECURRENT_FAMILIES:
                raise ConfigError(
                    f"recurrent_family {self.recurrent_family!r} is not one of "
                    f"{', '.join(RECURRENT_FAMILIES)}")
            if not self.state_shapes:
                raise ConfigError("state_shapes must list at least one state tensor")

    @property
    def window_tokens(self) -> int | None:
        """Most tokens this layer keeps: the window, the chunk, or None (unbounded)."""
        if self.kind == "sliding":
            return self.sliding_window
        if self.kind == "chunked":
            return self.attention_chunk_size
        return None

    @property
    def elements_per_token(self) -> int:
        """Cached elements per token for one sequence: 2·n_kv·d_h, or d_c + d_h^R for MLA."""
        if self.kind in ("full", "sliding", "chunked"):
            return self.num_key_value_heads * (self.head_dim + self.v_head_dim)
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 0

    @property
    def state_elements(self) -> int:
        """Elements of fixed recurrent state per sequence (0 for attention layers)."""
        return sum(math.prod(shape) for _, shape in self.state_shapes)


@dataclass(frozen=True)
class ModelSpec:
    """A model as the KV-cache calculator sees it: its layers plus the sizes weights need."""

    name: str
    model_type: str
    layers: tuple[LayerSpec, ...]
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None
    config: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layers)

    def count(self, kind: str) -> int:
        """Number of layers of one kind."""
        return sum(1 for layer in self.layers if layer.kind == kind)

    @property
    def kinds(self) -> dict[str, int]:
        """Layer counts per kind, only kinds present."""
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.kind] = out.get(layer.kind, 0) + 1
        return out


# ---------------------------------------------------------------- field helpers


def _positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _get(cfg: dict, *names, default=..., kind=int):
    """First present key among ``names``; validated as a positive int unless kind is None."""
    for name in names:
        if name in cfg and cfg[name] is not None:
            value = cfg[name]
            if kind is int:
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                _positive(name, value)
            return value
    if default is ...:
        raise ConfigError(f"config is missing {names[0]} (a positive integer)")
    return default


def _head_dim(cfg):
    """Explicit head_dim wins; otherwise hidden_size // num_attention_heads."""
    if cfg.get("head_dim") is not None:
        return _get(cfg, "head_dim")
    hidden, heads = _get(cfg, "hidden_size"), _get(cfg, "num_attention_heads")
    if hidden % heads:
        raise ConfigError(
            f"head_dim is absent and hidden_size {hidden} is not divisible by "
            f"num_attention_heads {heads}; set head_dim")
    return hidden // heads


def _kv_heads(cfg):
    return _get(cfg, "num_key_value_heads", default=None) or _get(cfg, "num_attention_heads")


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
    _positive("sliding_window", w)
    limit = cfg.get("max_position_embeddings")
    # a window as long as the whole context is no window (old Mixtral configs: 32768)
    return None if limit and w >= limit else w


def _layer_types_or(cfg, n, default_fn):
    """HF ``layer_types`` if present (validated), else ``default_fn(i)`` per layer."""
    types = cfg.get("layer_types")
    if types is None:
        return [default_fn(i) for i in range(n)]
    if not isinstance(types, list) or len(types) != n:
        raise ConfigError(f"layer_types must be a list of {n} entries (num_hidden_layers)")
    return types


# ---------------------------------------------------------------- families


def _dense(cfg):
    """llama, mistral, mixtral, qwen2, qwen3, phi3: every layer full, or sliding if windowed."""
    n = _get(cfg, "num_hidden_layers")
    w = _window(cfg)
    if w is None:
        return [_attn(cfg) for _ in range(n)]
    return [_attn(cfg, "sliding", window=w) for _ in range(n)]


def _sliding_global(cfg, pattern_default):
    """gemma2/gemma3/gpt_oss: layer_types, else sliding_window_pattern (every Nth global)."""
    n = _get(cfg, "num_hidden_layers")
    w = _get(cfg, "sliding_window")
    period = _get(cfg, "sliding_window_pattern", default=pattern_default)
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
    n = _get(cfg, "num_hidden_layers")
    chunk = _get(cfg, "attention_chunk_size", default=None)
    nope = cfg.get("no_rope_layers")
    if nope is None:  # HF's key is no_rope_layer_interval; Meta's args call it nope_layer_interval
        interval = _get(cfg, "no_rope_layer_interval", "nope_layer_interval", default=4)
        nope = [0 if (i + 1) % interval == 0 else 1 for i in range(n)]
    if (not isinstance(nope, list) or len(nope) != n
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
    n = _get(cfg, "num_hidden_layers")
    r, rope = _get(cfg, "kv_lora_rank"), _get(cfg, "qk_rope_head_dim")
    return [LayerSpec(kind="mla", kv_lora_rank=r, qk_rope_head_dim=rope) for _ in range(n)]


def _jamba(cfg):
    n = _get(cfg, "num_hidden_layers")
    period = _get(cfg, "attn_layer_period")
    offset = cfg.get("attn_layer_offset", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
        raise ConfigError(f"attn_layer_offset must be an integer in [0, {period}), got {offset!r}")
    d_inner = _get(cfg, "mamba_expand", default=2) * _get(cfg, "hidden_size")
    d_state, d_conv = _get(cfg, "mamba_d_state", default=16), _get(cfg, "mamba_d_conv", default=4)
    w = _window(cfg)
    return [(_attn(cfg, "sliding", window=w) if w else _attn(cfg)) if i % period == offset
            else _mamba_layer(d_inner, d_state, d_conv) for i in range(n)]


def _mamba(cfg):
    n = _get(cfg, "num_hidden_layers", "n_layer")
    hidden = _get(cfg, "hidden_size", "d_model")
    # falcon_mamba carries a stray "expand": 16; intermediate_size is authoritative
    d_inner = _get(cfg, "intermediate_size", default=None) or _get(cfg, "expand", default=2) * hidden
    d_state = _get(cfg, "state_size", "d_state", default=16)
    d_conv = _get(cfg, "conv_kernel", "d_conv", default=4)
    return [_mamba_layer(d_inner, d_state, d_conv) for _ in range(n)]


def _mamba2(cfg):
    n = _get(cfg, "num_hidden_layers", "n_layer")
    ssm = cfg.get("ssm_cfg") or {}
    merged = {**cfg, **ssm}
    hidden = _get(merged, "hidden_size", "d_model")
    d_inner = _get(merged, "expand", default=2) * hidden
    d_state = _get(merged, "state_size", "d_state", default=128)
    d_conv = _get(merged, "conv_kernel", "d_conv", default=4)
    headdim = _get(merged, "head_dim", "headdim", default=64)
    ngroups = _get(merged, "n_groups", "ngroups", default=1)
    if d_inner % headdim:
        raise ConfigError(f"headdim {headdim} must divide the inner width {d_inner}")
    nheads = d_inner // headdim
    layer = LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=(
        ("conv", (d_conv - 1, d_inner + 2 * ngroups * d_state)),
        ("ssm", (nheads, headdim, d_state))))
    return [layer] * n


def _qwen3_next(cfg):
    n = _get(cfg, "num_hidden_layers")
    interval = _get(cfg, "full_attention_interval", default=4)
    nk, nv = _get(cfg, "linear_num_key_heads"), _get(cfg, "linear_num_value_heads")
    dk, dv = _get(cfg, "linear_key_head_dim"), _get(cfg, "linear_value_head_dim")
    k = _get(cfg, "linear_conv_kernel_dim", default=4)
    gdn = LayerSpec(kind="recurrent", recurrent_family="gated_deltanet", state_shapes=(
        ("conv", (k - 1, 2 * nk * dk + nv * dv)), ("ssm", (nv, dk, dv))))
    types = _layer_types_or(
        cfg, n, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention")
    out = []
    for i, t in enumerate(types):
        if t not in ("full_attention", "linear_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: linear_attention, full_attention")
        out.append(_attn(cfg) if t == "full_attention" else gdn)
    return out


def _recurrent_gemma(cfg):
    n = _get(cfg, "num_hidden_layers")
    w = _get(cfg, "attention_window_size")
    width = _get(cfg, "lru_width", default=None) or _get(cfg, "hidden_size")
    k = _get(cfg, "conv1d_width", default=4)
    pattern = cfg.get("block_types") or cfg.get("_block_types") or ["recurrent", "recurrent", "attention"]
    if not isinstance(pattern, list):
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


FAMILIES = {
    "llama": _dense, "mistral": _dense, "mixtral": _dense, "qwen2": _dense,
    "qwen3": _dense, "phi3": _dense,
    "gemma2": lambda c: _sliding_global(c, 2),
    "gemma3": lambda c: _sliding_global(c, 6),
    "gemma3_text": lambda c: _sliding_global(c, 6),
    "gpt_oss": lambda c: _sliding_global(c, 2),
    "llama4": _llama4, "llama4_text": _llama4,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "jamba": _jamba, "qwen3_next": _qwen3_next,
    "mamba": _mamba, "falcon_mamba": _mamba, "mamba2": _mamba2,
    "recurrent_gemma": _recurrent_gemma,
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


def _model_type(cfg: dict):
    """``model_type``, or the family of a state-spaces ``mamba_ssm`` config (which has none)."""
    if cfg.get("model_type") is not None:
        return cfg["model_type"]
    ssm = cfg.get("ssm_cfg")
    if isinstance(ssm, dict) and "n_layer" in cfg:
        if cfg.get("attn_layer_idx"):
            raise ConfigError("attn_layer_idx is not empty: hybrid mamba_ssm configs are not supported")
        return "mamba2" if ssm.get("layer") == "Mamba2" else "mamba"
    return None


def text_config(cfg: dict) -> dict:
    """The language-model part of a config: ``text_config`` merged over the top level."""
    if not isinstance(cfg, dict):
        raise ConfigError("config must be a JSON object")
    inner = cfg.get("text_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(inner)
        # the outer model_type (e.g. gemma3, llama4) names the family when the inner lacks one
        merged["model_type"] = inner.get("model_type") or cfg.get("model_type")
        return merged
    return cfg


def from_hf_config(cfg: dict, name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dict."""
    cfg = text_config(cfg)
    model_type = _model_type(cfg)
    if model_type not in FAMILIES:
        what = "config is missing model_type" if model_type is None else f"model_type {model_type!r} is not supported"
        raise ConfigError(f"{what}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    # absent fields take the transformers class defaults; present ones (even null) are kept
    cfg = {**FAMILY_DEFAULTS.get(model_type, {}), **cfg, "model_type": model_type}
    layers = tuple(FAMILIES[model_type](cfg))
    hidden = _get(cfg, "hidden_size", "d_model")
    return ModelSpec(
        name=name or cfg.get("_name_or_path") or model_type,
        model_type=model_type,
        layers=layers,
        hidden_size=hidden,
        num_attention_heads=_get(cfg, "num_attention_heads", default=0) or 0,
        vocab_size=_get(cfg, "vocab_size"),
        max_position_embeddings=cfg.get("max_position_embeddings") or cfg.get("n_ctx"),
        torch_dtype=cfg.get("torch_dtype") or cfg.get("dtype"),
        config=cfg,
    )


def load_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a ``config.json`` file into a :class:`ModelSpec` (malformed JSON is a ConfigError)."""
    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {str(path)!r} cannot be read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {str(path)!r} is not valid JSON ({e})") from None
    return from_hf_config(cfg, name=name or path.stem)
