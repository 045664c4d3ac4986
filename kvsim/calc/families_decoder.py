"""Decoder families read with the key names their own checkpoints write (pure Python): GPT-2 style
``n_layer`` / ``n_head`` / ``n_embd``, MPT / DBRX ``n_layers`` / ``d_model`` / ``attn_config``, Falcon's
``multi_query`` / ``num_kv_heads``, Gemma 3n's KV sharing (``num_kv_shared_layers``), and the llama-like
families whose ``layer_types`` transformers derives.

Contract
- :func:`standard_keys` returns the config with the standard names (``num_hidden_layers``,
  ``num_attention_heads``, ``hidden_size``, ``num_key_value_heads``, ``head_dim``,
  ``max_position_embeddings``) added from the family's own names where absent; present keys win.
- :data:`FAMILIES` maps each model type here to its parser ``cfg -> list[LayerSpec]``;
  :data:`FAMILY_DEFAULTS` holds the transformers class defaults that decide the cache when a config
  omits them (mpt's ``use_cache`` false, Falcon's and gpt_bigcode's ``multi_query`` true ...).
- A ``model_type`` kvsim does not know is read by :func:`standard_decoder` when the standard keys are
  there (every layer full attention); :func:`notes` (``kvsim.calc.families.spec_notes`` for a spec) gives
  that assumption as one line, and one line per
  feature that does not change the cache (MoE, ALiBi, partial rotary, NoPE, sinks, masked-only local
  layers, MTP layers not built, ``use_cache: false``, Falcon-40B's K/V expanded by transformers).
- Errors are :class:`~kvsim.calc.config.ConfigError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping

from .config import ConfigError, LayerSpec, config_int
from .layer_fields import attention_layer, layer_types_or, sliding_window, typed_layers

_GPT = {"num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",), "hidden_size": ("n_embd", "n_embed"),
        "max_position_embeddings": ("n_positions", "n_ctx")}
_MPT = {"num_hidden_layers": ("n_layers",), "num_attention_heads": ("n_heads",), "hidden_size": ("d_model",),
        "max_position_embeddings": ("max_seq_len",)}
# standard key -> the family's own key names, first present wins
ALIASES = {
    "gpt2": _GPT, "gpt-sw3": _GPT, "gptj": _GPT, "codegen": _GPT, "gpt_bigcode": _GPT, "bloom": _GPT,
    "openai-gpt": _GPT, "ctrl": _GPT,
    "xglm": {"num_hidden_layers": ("num_layers",), "num_attention_heads": ("attention_heads",),
             "hidden_size": ("d_model",)},
    "falcon": {"hidden_size": ("n_embed",)},  # FalconConfig reads no n_layer / n_head (old RW files)
    "gpt_neo": {"num_hidden_layers": ("num_layers",), "num_attention_heads": ("num_heads",)},
    "mpt": _MPT, "dbrx": _MPT,
    "jetmoe": {"head_dim": ("kv_channels",)},
}

FAMILY_DEFAULTS = {
    "mpt": {"use_cache": False},  # MptConfig.use_cache defaults to False: generate keeps no cache
    "falcon": {"multi_query": True, "new_decoder_architecture": False},
    "gpt_bigcode": {"multi_query": True},
    "ministral": {"sliding_window": 4096}, "olmo3": {"sliding_window": 4096}, "granite_swa": {"sliding_window": 128},
    "afmoe": {"sliding_window": 1024}, "vaultgemma": {"sliding_window": 4096}, "cwm": {"sliding_window": 8192},
    "exaone4": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "gemma3n_text": {  # Gemma3nTextConfig (google/gemma-3n-E4B)
        "sliding_window": 512, "num_kv_shared_layers": 15, "head_dim": 256, "num_key_value_heads": 2,
        "num_attention_heads": 8, "vocab_size": 262400},
}


def _kv_heads(cfg: Mapping, model_type: str):
    """KV heads where the family does not write num_key_value_heads; None = the standard key (or MHA)."""
    heads = config_int(cfg, "num_attention_heads")
    if model_type == "gpt_bigcode":
        return 1 if cfg.get("multi_query") else heads
    if model_type == "falcon":
        if cfg.get("new_decoder_architecture"):
            return config_int(cfg, "num_kv_heads", default=heads)
        return 1 if cfg.get("multi_query") else heads
    if model_type == "dbrx":
        attn = cfg.get("attn_config") or {}
        if not isinstance(attn, Mapping):
            raise ConfigError("attn_config must be an object (with kv_n_heads)")
        return config_int(attn, "kv_n_heads", default=1)
    return None


def standard_keys(cfg: Mapping, model_type: str) -> dict:
    """``cfg`` with the standard key names added from the family's own ones (present keys win)."""
    out = dict(cfg)
    for std, names in ALIASES.get(model_type, {}).items():
        if out.get(std) is None:
            for name in names:
                if out.get(name) is not None:
                    out[std] = out[name]
                    break
    widths = out.get("intermediate_size")
    if isinstance(widths, (list, tuple)) and widths and all(isinstance(x, int) for x in widths):
        out["intermediate_size"] = max(widths)  # per-layer FFN widths (Gemma 3n): the widest; no cache effect
    if model_type == "jetmoe" and out.get("num_attention_heads") is None:
        out["num_attention_heads"] = (config_int(out, "num_key_value_heads")
                                      * config_int(out, "num_experts_per_tok", default=2))
    if model_type in ("gpt_bigcode", "falcon", "dbrx") and out.get("num_hidden_layers") is not None:
        out["num_key_value_heads"] = _kv_heads(out, model_type)
    return out


def standard_decoder(cfg):
    """Every layer full attention (GPT-2, GPT-J, BLOOM, MPT, DBRX, Falcon, GPT-Neo's masked-only local layers,
    and any model_type kvsim does not know whose config has the standard keys)."""
    n = config_int(cfg, "num_hidden_layers")
    return [attention_layer(cfg) for _ in range(n)]


def window_every_layer(cfg):
    """layer_types if given, else every layer sliding when sliding_window is set (starcoder2, ministral)."""
    n, w = config_int(cfg, "num_hidden_layers"), sliding_window(cfg)
    return typed_layers(cfg, n, w, lambda i: "sliding_attention" if w else "full_attention")


def _pattern(fn):
    """A parser whose default layer_types is ``fn(cfg, i, w)`` (True = sliding), as the config class derives it."""
    def parse(cfg):
        n, w = config_int(cfg, "num_hidden_layers"), sliding_window(cfg)
        return typed_layers(cfg, n, w, lambda i: "sliding_attention" if w and fn(cfg, i) else "full_attention")
    return parse


def _exaone4_sliding(cfg, i):
    pattern = cfg.get("sliding_window_pattern", 4)
    if isinstance(pattern, str):  # "LLLG": L local, G global, repeating
        return pattern[i % len(pattern)] == "L"
    return bool(pattern) and (i + 1) % config_int(cfg, "sliding_window_pattern") != 0


def _smollm3_sliding(cfg, i):
    """SmolLM3: NoPE layers (no_rope_layers entry 0) slide only with use_sliding_window."""
    if cfg.get("use_sliding_window") is not True:
        return False
    nope = cfg.get("no_rope_layers")
    interval = config_int(cfg, "no_rope_layer_interval", default=4)
    has_rope = nope[i] if nope is not None else int((i + 1) % interval != 0)
    return not has_rope


def _qwen_moe(every_other: bool):
    """qwen2_moe (odd-indexed... layers i < max_window_layers with (i+1) odd) / qwen3_moe (every layer):
    windowed only with use_sliding_window."""
    def sliding(cfg, i):
        if cfg.get("use_sliding_window") is not True:
            return False
        if not every_other:
            return True
        return bool((i + 1) % 2) and i < cfg.get("max_window_layers", 28)
    return _pattern(sliding)


def gemma3n(cfg):
    """Gemma 3n text: layer_types (default: full every 5th), and the last num_kv_shared_layers layers reuse
    the K/V of the last earlier layer of their type: they keep nothing (kind none; transformers' DummyLayer)."""
    n, w = config_int(cfg, "num_hidden_layers"), config_int(cfg, "sliding_window")
    shared = cfg.get("num_kv_shared_layers", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared < n:
        raise ConfigError(f"num_kv_shared_layers must be an integer in [0, {n}) (num_hidden_layers), got {shared!r}")
    layers = typed_layers(cfg, n, w, lambda i: "full_attention" if (i + 1) % 5 == 0 else "sliding_attention")
    return [LayerSpec(kind="none") if i >= n - shared else x for i, x in enumerate(layers)]

FAMILIES = {
    **dict.fromkeys(("gpt2", "gpt-sw3", "gptj", "codegen", "gpt_bigcode", "bloom", "falcon", "gpt_neo", "mpt", "dbrx",
                     "gpt_neox", "opt", "jetmoe", "openai-gpt", "ctrl", "xglm", "biogpt"), standard_decoder),
    **dict.fromkeys(("phi", "stablelm", "nemotron", "gemma", "glm", "glm4", "glm4_moe", "granite", "granitemoe",
                     "granitemoeshared", "olmo", "olmoe", "ernie4_5", "ernie4_5_moe", "seed_oss", "internlm3",
                     "helium", "arcee", "apertus", "hunyuan_v1_dense", "hunyuan_v1_moe", "persimmon", "minimax_m2",
                     "bitnet", "starcoder2", "ministral", "flex_olmo"), window_every_layer),
    # config classes that derive layer_types (sliding = True) when the config has none
    "granite_swa": _pattern(lambda cfg, i: i % 4 != 0),
    "cwm": _pattern(lambda cfg, i: i % 4 != 0),
    "vaultgemma": _pattern(lambda cfg, i: bool((i + 1) % 2)),
    "afmoe": _pattern(lambda cfg, i: bool((i + 1) % config_int(cfg, "global_attn_every_n_layers", default=4))),
    "olmo3": _pattern(lambda cfg, i: (i + 1) % 4 != 0),
    "exaone4": _pattern(_exaone4_sliding),
    "smollm3": _pattern(_smollm3_sliding),
    "dots1": _pattern(lambda cfg, i: i >= cfg.get("max_window_layers", 62)),
    "qwen2_moe": _qwen_moe(True), "qwen3_moe": _qwen_moe(False),
    "gemma3n_text": gemma3n,  # a gemma3n config is read through its text_config (model_type gemma3n_text)
}

_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
_PARTIAL_ROTARY_KEYS = ("rotary_pct", "partial_rotary_factor", "rotary_dim")


def notes(model_type: str, cfg: Mapping, known: bool = True) -> list[str]:
    """One line per assumption kvsim made and per feature that leaves the cache as it is."""
    out = []
    if not known:
        out.append(f"model_type {model_type!r} is not one kvsim knows: read as full attention on every layer from "
                   "num_hidden_layers, num_attention_heads, num_key_value_heads (absent: = heads) and head_dim "
                   "(absent: hidden_size / heads)")
    moe = cfg.get("ffn_config") or {}
    if any(cfg.get(k) for k in _MOE_KEYS) or (isinstance(moe, Mapping) and moe.get("moe_num_experts")):
        out.append("MoE: experts change the weights and the compute, not the KV cache")
    if cfg.get("alibi") or model_type == "bloom" or (isinstance(cfg.get("attn_config"), Mapping)
                                                       and cfg["attn_config"].get("alibi")):
        out.append("ALiBi: positions are a bias on the scores; nothing extra is cached")
    rope = {**{k: v for key in ("rope_scaling", "rope_parameters") if isinstance(cfg.get(key), Mapping)
               for k, v in cfg[key].items()}, **cfg}
    if any(rope.get(k) not in (None, 1, 1.0) for k in _PARTIAL_ROTARY_KEYS):
        out.append("partial rotary: K is cached after RoPE at its full head size")
    if model_type == "smollm3" or cfg.get("no_rope_layers") is not None:
        out.append("NoPE layers: K is cached without RoPE, same bytes")
    if model_type == "gpt_oss":
        out.append("attention sinks: one learned logit per head, not cached per token")
    if model_type == "gpt_neo":
        out.append("GPT-Neo's local layers (attention_types, window_size) are masked, not windowed: "
                   "they cache every token")
    if cfg.get("num_nextn_predict_layers"):
        out.append(f"{cfg['num_nextn_predict_layers']} MTP layer(s) (num_nextn_predict_layers) are not built "
                   "by transformers: no cache")
    if cfg.get("num_kv_shared_layers"):
        out.append(f"KV sharing: the last {cfg['num_kv_shared_layers']} layers (num_kv_shared_layers) read the K/V of "
                   "an earlier layer of their type and keep none (transformers' DummyLayer)")
    if model_type == "openai-gpt":
        out.append("openai-gpt's attention takes no cache in transformers: its layers stay empty and every step "
                   "re-feeds the sequence")
    if cfg.get("use_cache") is False:
        out.append("use_cache is false: transformers' generate keeps no cache and re-feeds the sequence")
    if model_type == "falcon" and cfg.get("new_decoder_architecture"):
        out.append("Falcon new decoder architecture: transformers expands K/V to every query head before caching")
    return out
