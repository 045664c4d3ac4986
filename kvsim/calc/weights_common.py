"""Building blocks of the parameter counts (pure Python): config fields, attention, SwiGLU, totals.

Contract: helpers shared by :mod:`kvsim.calc.weights` (attention families) and
:mod:`kvsim.calc.weights_recurrent` (recurrent and hybrid families). Notation: h = hidden_size,
V = vocab_size, H = heads, H_kv = KV heads, d = head_dim, i = intermediate size.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ConfigError
from .validate import config_count


@dataclass(frozen=True)
class ParamCount:
    """Parameters of the language model: all of them, those one token uses, the embedding table."""

    total: int
    active: int
    embedding: int = 0


def field_int(cfg, *names, default=..., low: int = 0):
    """First present integer field among ``names``: an integer in [low, MAX_COUNT]
    (:func:`kvsim.calc.validate.config_count`; ``low`` = 1 for a divisor or a period)."""
    for name in names:
        if cfg.get(name) is not None:
            return config_count(name, cfg[name], low)
    if default is ...:
        raise ConfigError(f"config is missing {names[0]}, needed for the parameter count")
    return default


def field_flag(cfg, name, default=False):
    """A boolean field (a JSON string like "false" is rejected, not read as True)."""
    value = cfg.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value


def embedding_rows(cfg):
    """Embedding rows: vocab_size, rounded up to pad_vocab_size_multiple (mamba_ssm) if set."""
    v, pad = field_int(cfg, "vocab_size"), field_int(cfg, "pad_vocab_size_multiple", default=1) or 1
    return -(-v // pad) * pad


def attention_params(cfg, h, qkv_bias=False, o_bias=False, qk_norm=False, q_gate=False):
    """q: h·H·d (×2 with an output gate), k, v: h·H_kv·d, o: H·d·h; optional biases and q/k norms."""
    heads = field_int(cfg, "num_attention_heads", low=1)
    kv = field_int(cfg, "num_key_value_heads", default=heads)
    d = field_int(cfg, "head_dim", default=h // heads)
    q, k = heads * d, kv * d
    n = h * q * (2 if q_gate else 1) + 2 * h * k + q * h
    n += (q + 2 * k) * qkv_bias + h * o_bias + 2 * d * qk_norm
    return n


def swiglu_params(h, i, bias=False):
    """gate and up h·i, down i·h (+ biases)."""
    return 3 * h * i + (2 * i + h) * bias


def param_total(spec, h, layers, expert_total=0, expert_active=0):
    """total = input table V·h + output head V·h (0 when tied) + non-expert layer weights + final
    norm h + all routed experts; active keeps only the routed experts one token uses."""
    embed = embedding_rows(spec.config) * h
    shared = embed * (1 if spec.tie_word_embeddings else 2) + layers + h
    return ParamCount(shared + expert_total, shared + expert_active, embed)
