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
- Attention families are parsed here; recurrent and hybrid ones in :mod:`kvsim.calc.families_recurrent`;
  both from the per-layer helpers of :mod:`kvsim.calc.layer_fields`.
"""

from __future__ import annotations

from dataclasses import replace

from . import families_attention as attention
from . import families_decoder as decoder
from . import families_hybrid as hybrid
from . import families_recurrent as recurrent
from .config import ConfigError, LayerSpec, config_int
from .layer_fields import (
    SEQUENCE,
    attention_layer,
    layer_types_or,
    sliding_window,
    typed_layers,
)

# ---------------------------------------------------------------- layer helpers


# ---------------------------------------------------------------- families


def _dense(cfg):
    """llama, mistral, mixtral, phi3: ``layer_types`` if given, else every layer full, or sliding if windowed."""
    n = config_int(cfg, "num_hidden_layers")
    w = sliding_window(cfg)
    return typed_layers(cfg, n, w, lambda i: "full_attention" if w is None else "sliding_attention")


def _qwen(cfg):
    """qwen2, qwen3 (transformers' Qwen2Config): a window only with ``use_sliding_window`` true, and then
    only on layers i >= ``max_window_layers`` (default 28); an explicit ``layer_types`` wins."""
    n = config_int(cfg, "num_hidden_layers")
    w = sliding_window(cfg) if cfg.get("use_sliding_window") is True else None
    first = cfg.get("max_window_layers", 28)
    if not isinstance(first, int) or isinstance(first, bool) or first < 0:
        raise ConfigError(f"max_window_layers must be an integer >= 0, got {first!r}")
    return typed_layers(cfg, n, w, lambda i: "sliding_attention" if w and i >= first else "full_attention")


def _sliding_global(cfg, pattern_default):
    """gemma2/gemma3/gpt_oss: layer_types, else sliding_window_pattern (every Nth global)."""
    n = config_int(cfg, "num_hidden_layers")
    w = config_int(cfg, "sliding_window")
    period = config_int(cfg, "sliding_window_pattern", default=pattern_default)
    types = layer_types_or(
        cfg, n, lambda i: "full_attention" if (i + 1) % period == 0 else "sliding_attention")
    out = []
    for i, t in enumerate(types):
        if t == "sliding_attention":
            out.append(attention_layer(cfg, "sliding", window=w))
        elif t == "full_attention":
            out.append(attention_layer(cfg))
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
    if (not isinstance(nope, SEQUENCE) or len(nope) != n
            or any(isinstance(v, bool) or v not in (0, 1) for v in nope)):
        raise ConfigError(f"no_rope_layers must be a list of {n} entries of 0 or 1 (num_hidden_layers)")
    out = []
    for uses_rope in nope:
        if uses_rope and chunk:
            out.append(attention_layer(cfg, "chunked", chunk=chunk))
        else:
            out.append(attention_layer(cfg, use_rope=bool(uses_rope)))
    return out


def _deepseek(cfg):
    n = config_int(cfg, "num_hidden_layers")
    r, rope = config_int(cfg, "kv_lora_rank"), config_int(cfg, "qk_rope_head_dim")
    return [LayerSpec(kind="mla", kv_lora_rank=r, qk_rope_head_dim=rope) for _ in range(n)]


# ---------------------------------------------------------------- families added with engine sizing


def _cohere2(cfg):
    """Command R7B: layer_types, else every sliding_window_pattern-th layer (default 4) global; global
    layers have no RoPE (transformers' Cohere2Attention rotates sliding layers only)."""
    return [replace(layer, use_rope=False) if layer.kind == "full" else layer for layer in _sliding_global(cfg, 4)]


FAMILIES = {
    "llama": _dense, "mistral": _dense, "mixtral": _dense, "qwen2": _qwen,
    "qwen3": _qwen, "phi3": _dense,
    "gemma2": lambda c: _sliding_global(c, 2),
    "gemma3": lambda c: _sliding_global(c, 6),
    "gemma3_text": lambda c: _sliding_global(c, 6),
    "gpt_oss": lambda c: _sliding_global(c, 2),
    "llama4": _llama4, "llama4_text": _llama4,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "jamba": recurrent.jamba, "qwen3_next": recurrent.qwen3_next,
    "mamba": recurrent.mamba, "falcon_mamba": recurrent.mamba, "mamba2": recurrent.mamba2,
    "recurrent_gemma": recurrent.recurrent_gemma,
    "kimi_k2": _deepseek, "cohere": _dense, "cohere2": _cohere2, "olmo2": _dense, "phimoe": _dense,
    "granitemoehybrid": recurrent.granitemoehybrid, "nemotron_h": recurrent.nemotron_h,
    "falcon_h1": recurrent.falcon_h1,
    "minicpm3": _deepseek, "glm4_moe_lite": _deepseek,  # MLA: transformers caches the latent, as for V3
    # multimodal wrappers whose config.json nests the language model in text_config (read through it: qwen2,
    # qwen3, persimmon); these entries read a flattened one
    "got_ocr2": _qwen, "moss_transcribe_diarize": _qwen, "fuyu": decoder.window_every_layer,
    "phi4_multimodal": _dense,  # Phi-4-multimodal's language model: phi3's keys, flat beside its vision / audio configs
    "moshi": decoder.window_every_layer,  # MoshiForCausalLM: the text decoder, sliding_window on every layer
    "git": hybrid.self_attention_decoder,  # GIT's text decoder: BERT-style MHA (text-only: the text tokens)
    **decoder.FAMILIES,  # families read with their checkpoints' own key names (kvsim.calc.families_decoder)
    **hybrid.FAMILIES,  # hybrid / recurrent families of issue 17 (kvsim.calc.families_hybrid)
    # ---- h22-fam-attn: attention-decoder families added for issue 17 (kvsim.calc.families_attention)
    **attention.FAMILIES,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(FAMILIES))


def spec_notes(spec) -> list[str]:
    """One line per assumption and per cache-neutral feature of a parsed spec (:func:`families_decoder.notes`)."""
    return (decoder.notes(spec.model_type, spec.config, known=spec.model_type in FAMILIES)
            + attention.notes(spec.model_type, spec.config))  # h22-fam-attn


# parsers that window every layer when the config has sliding_window and no layer_types, as transformers does
WINDOW_EVERY_LAYER = (_dense, decoder.window_every_layer)

# Fields the official config.json omits because transformers' config class supplies them.
# Gemma3TextConfig defaults (transformers configuration_gemma3.py): gemma-3-4b-it's text_config
# lists only hidden_size, intermediate_size, num_hidden_layers, rope_scaling and sliding_window.
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "max_position_embeddings": 131072, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
}
FAMILY_DEFAULTS = {"gemma3": _GEMMA3_TEXT_DEFAULTS, "gemma3_text": _GEMMA3_TEXT_DEFAULTS, **decoder.FAMILY_DEFAULTS,
                   **attention.FAMILY_DEFAULTS}  # h22-fam-attn

# tie_word_embeddings when the config leaves it out: True in these families (Gemma's and Mamba's
# transformers classes, mamba_ssm's MambaConfig), False in all others
TIED_BY_DEFAULT = ("gemma2", "gemma3", "gemma3_text", "mamba", "falcon_mamba", "mamba2", "recurrent_gemma",
                   "cohere", "cohere2")
