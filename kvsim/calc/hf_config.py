"""Read a Hugging Face ``config.json`` into a :class:`~kvsim.calc.config.ModelSpec` (pure Python).

Contract
- ``from_hf_config(dict)`` turns a config as users download it into a ModelSpec: one LayerSpec per
  decoder layer (the family's pattern, :mod:`kvsim.calc.families`), the model-wide sizes, and the
  typed fields the MLX model reads, each parsed and validated here once (defaults: ModelSpec's docstring).
- A ``model_type`` kvsim does not know is read as full attention on every layer when the config has the
  standard decoder keys (:func:`~kvsim.calc.families_decoder.notes` names the assumption); without
  them it is refused. Families whose checkpoints write other names (``n_layer``, ``d_model`` ...) get
  the standard ones added (:func:`~kvsim.calc.families_decoder.standard_keys`).
- Unknown keys are ignored; a nested ``text_config`` (Gemma 3, Llama 4) is used when present, and the
  outer ``model_type`` is kept as ``outer_model_type`` (engines pick their model class by it: mlx-lm's
  ``llama4`` chunks its attention, its text-only ``llama4_text`` does not).
- Fields an official config omits because transformers supplies them take those class defaults
  (:data:`~kvsim.calc.families.FAMILY_DEFAULTS`); a state-spaces ``mamba_ssm`` config without
  ``model_type`` is recognised by its ``ssm_cfg``.
- The spec keeps the config itself, frozen, in ``spec.config``; ``from_hf_config(dict(spec.config))``
  gives the same spec again.
- ``load_config(path)`` reads a file; malformed JSON, a missing or unreadable file, anything but a regular
  file, a file over 16 MiB or JSON nested deeper than 64 levels are ConfigErrors
  (:mod:`kvsim.calc.validate`, which every field reader here also uses).
- Errors are :class:`~kvsim.calc.config.ConfigError` with one line naming the field and what is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .config import ConfigError, ModelSpec, config_int
from .families import FAMILIES, FAMILY_DEFAULTS, SUPPORTED_MODEL_TYPES, TIED_BY_DEFAULT
from .families_attention import refusal  # h22-fam-attn
from .families_attention import standard_keys as attention_keys  # h22-fam-attn
from .families_decoder import standard_decoder, standard_keys
from .families_hybrid import REFUSED, decoder_keys  # h22-fam-hybrid
from .layer_fields import max_positions
from .validate import check_depth, check_json_depth, finite_number, read_config_text, show


def text_config(cfg: Mapping) -> Mapping:
    """The language-model part of a config: ``text_config`` merged over the top level."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("config must be a JSON object")
    inner = cfg.get("text_config")
    if isinstance(inner, Mapping):
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(inner)
        # the outer model_type (e.g. gemma3, llama4) names the family when the inner lacks one
        merged["model_type"] = inner.get("model_type") or cfg.get("model_type")
        merged["outer_model_type"] = cfg.get("model_type")
        if merged["outer_model_type"] is not None and not isinstance(merged["outer_model_type"], str):
            raise ConfigError(f"model_type must be a string, got {show(cfg['model_type'])}")
        return merged
    return cfg


# the model types read, space-separated: every one of them fits a one-line error message under 2000 characters
_SUPPORTED = " ".join(SUPPORTED_MODEL_TYPES)


def _model_type(cfg: Mapping):
    """``model_type``, or the family of a state-spaces ``mamba_ssm`` config (which has none)."""
    if cfg.get("model_type") is not None:
        if not isinstance(cfg["model_type"], str):
            raise ConfigError(f"model_type must be a string, one of {_SUPPORTED}; "
                              f"got {show(cfg['model_type'])}")
        return cfg["model_type"]
    ssm = cfg.get("ssm_cfg")
    if isinstance(ssm, Mapping) and "n_layer" in cfg:
        if cfg.get("attn_layer_idx"):
            raise ConfigError("attn_layer_idx is not empty: hybrid mamba_ssm configs are not supported")
        return "mamba2" if ssm.get("layer") == "Mamba2" else "mamba"
    return None


def _number(cfg: Mapping, name: str, default, high: float = float("inf")):
    """A float in (0, high], or ``default`` when absent or null."""
    value = cfg.get(name)
    if value is None:
        return default
    return finite_number(name, value, 0.0, high, error=ConfigError)


def _first_present(cfg: Mapping, names, kind: type, what: str, default):
    """The first present (non-null) value among ``names``; ConfigError naming the key unless it is a ``kind``."""
    for name in names:
        value = cfg.get(name)
        if value is not None:
            if not isinstance(value, kind):
                raise ConfigError(f"{name} must be {what}, got {show(value)}")
            return value
    return default


def _flag(cfg: Mapping, names, default: bool) -> bool:
    """The first present boolean among ``names`` (a JSON string "false" is rejected, not read as True)."""
    return _first_present(cfg, names, bool, "true or false", default)


def _time_step_rank(cfg: Mapping):
    """Mamba's Δ rank from mamba_dt_rank / time_step_rank / dt_rank; None for absent or "auto"."""
    for name in ("mamba_dt_rank", "time_step_rank", "dt_rank"):
        if cfg.get(name) is not None and cfg[name] != "auto":
            return config_int(cfg, name)
    return None


def _typed_fields(cfg: Mapping, model_type: str) -> dict:
    """The ModelSpec fields the MLX model reads, validated (defaults as in ModelSpec's docstring)."""
    q_lora = cfg.get("q_lora_rank")
    return {
        "rope_theta": _number(cfg, "rope_theta", 10000.0),
        "partial_rotary_factor": _number(cfg, "partial_rotary_factor", 1.0, high=1.0),
        "query_pre_attn_scalar": _number(cfg, "query_pre_attn_scalar", None),
        "rms_norm_eps": _number(cfg, "rms_norm_eps", None) or _number(cfg, "layer_norm_epsilon", 1e-6),
        "tie_word_embeddings": _flag(cfg, ("tie_word_embeddings", "tie_embeddings"),
                                     model_type in TIED_BY_DEFAULT),
        "intermediate_size": config_int(cfg, "intermediate_size", default=None),
        "moe_intermediate_size": config_int(cfg, "moe_intermediate_size", default=None),
        "qk_nope_head_dim": config_int(cfg, "qk_nope_head_dim", default=0),
        "v_head_dim": config_int(cfg, "v_head_dim", default=0),
        "q_lora_rank": 0 if q_lora is None or q_lora == 0 else config_int(cfg, "q_lora_rank"),
        "time_step_rank": _time_step_rank(cfg),
        "linear_num_key_heads": config_int(cfg, "linear_num_key_heads", default=0),
    }


_STANDARD_KEYS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size")


def _standard_decoder_keys(cfg: Mapping) -> bool:
    """An unknown model_type is read (as full attention everywhere) only when it has the standard keys."""
    return all(cfg.get(k) is not None for k in _STANDARD_KEYS)


def _optional_str(cfg: Mapping, *names):
    """The first present (non-null) string among ``names``; ConfigError for a non-string."""
    return _first_present(cfg, names, str, "a string", None)


def from_hf_config(cfg: Mapping, name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dict."""
    check_depth(cfg)
    cfg = text_config(cfg)
    model_type = _model_type(cfg)
    # ---- h22-fam-hybrid: causal-LM types whose cache kvsim does not size, refused with the reason
    if model_type in REFUSED:
        raise ConfigError(f"model_type {model_type!r} is not supported: {REFUSED[model_type]}")
    if refusal(cfg):  # h22-fam-attn: a causal LM whose cache kvsim does not describe, with the reason
        raise ConfigError(refusal(cfg))
    cfg = decoder_keys(cfg, model_type)  # seq2seq decoders: decoder_layers / decoder_attention_heads / d_model
    # ---- end h22-fam-hybrid
    if model_type not in FAMILIES and not (isinstance(model_type, str) and _standard_decoder_keys(cfg)):
        what = "config is missing model_type" if model_type is None else f"model_type {model_type!r} is not supported"
        raise ConfigError(f"{what}, and the config lacks the standard decoder keys ({', '.join(_STANDARD_KEYS)}); "
                          f"supported: {_SUPPORTED}")
    # absent fields take the transformers class defaults; present ones (even null) are kept
    cfg = standard_keys({**FAMILY_DEFAULTS.get(model_type, {}), **cfg, "model_type": model_type}, model_type)
    cfg = attention_keys(cfg, model_type)  # h22-fam-attn: key names of kvsim.calc.families_attention
    return ModelSpec(
        name=name or _optional_str(cfg, "_name_or_path") or model_type,
        model_type=model_type,
        layers=tuple(FAMILIES.get(model_type, standard_decoder)(cfg)),
        hidden_size=config_int(cfg, "hidden_size", "d_model"),
        num_attention_heads=config_int(cfg, "num_attention_heads", default=0) or 0,
        vocab_size=config_int(cfg, "vocab_size"),
        max_position_embeddings=max_positions(cfg),
        torch_dtype=_optional_str(cfg, "torch_dtype", "dtype"),
        **_typed_fields(cfg, model_type),
        config=cfg,
    )


def load_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a ``config.json`` file into a :class:`ModelSpec` (malformed JSON is a ConfigError)."""
    path = Path(path)
    text = read_config_text(path)  # a regular file of at most MAX_CONFIG_BYTES, UTF-8
    check_json_depth(text, f"config file {str(path)!r}")
    try:
        cfg = json.loads(text)
    except ValueError as e:  # JSONDecodeError, or an integer of more digits than Python converts
        raise ConfigError(f"config file {str(path)!r} is not valid JSON ({str(e).splitlines()[0]})") from None
    return from_hf_config(cfg, name=name or path.stem)
