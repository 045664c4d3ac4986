"""Attention-decoder families of transformers 5.24 added for issue 17 (pure Python): llama-like configs
under their own model types, the ``layer_types`` their config classes derive, and the families whose
cache has a rule of its own (per-layer heads and sizes, KV sharing, indexer keys, two MLA blocks per layer).

Contract
- :data:`FAMILIES` maps each model type here to its parser ``cfg -> list[LayerSpec]`` (the config is
  already flattened by :func:`kvsim.calc.hf_config.text_config`); :data:`FAMILY_DEFAULTS` holds the
  transformers class defaults that decide the cache when a config omits them (windows, patterns);
  :data:`ALIASES` the family's own key names (standard key -> names, first present wins).
- A derived pattern equals the config class's ``__post_init__`` (named in each parser's docstring); an
  explicit ``layer_types`` always wins, as in transformers' ``get_layer_types_and_kwargs``.
- :data:`REFUSED` names the model types transformers lists as causal LMs that kvsim refuses, each with
  a one-line reason (:func:`kvsim.calc.hf_config.from_hf_config` raises it as a ConfigError).
- Errors are :class:`~kvsim.calc.config.ConfigError` naming the field and what is accepted.
"""

from __future__ import annotations

from dataclasses import replace

from .config import ConfigError, LayerSpec, config_int
from .families_decoder import FAMILY_DEFAULTS as DECODER_DEFAULTS
from .families_decoder import gemma3n, standard_decoder, window_every_layer
from .layer_fields import SEQUENCE, attention_layer, head_dim, kv_heads, layer_types_or, sliding_window, typed_layers


def derived(fn):
    """A parser whose default layer_types is sliding where ``fn(cfg, i, n)`` (the config class's rule)."""
    def parse(cfg):
        n, w = config_int(cfg, "num_hidden_layers"), sliding_window(cfg)
        return typed_layers(cfg, n, w, lambda i: "sliding_attention" if w and fn(cfg, i, n) else "full_attention")
    return parse


def _period(cfg, name, default):
    """A positive layer period (sliding_window_pattern ...); 0 or absent -> ``default``."""
    value = cfg.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _cohere2_moe(cfg, i, n):
    """Cohere2MoeConfig: the first first_k_dense_replace layers follow prefix_dense_sliding_window_pattern,
    then sliding_window_pattern restarts (full where (j + 1) % pattern == 0)."""
    k = _period(cfg, "first_k_dense_replace", 0)
    prefix = _period(cfg, "prefix_dense_sliding_window_pattern", 1) or 1
    rest = _period(cfg, "sliding_window_pattern", 4) or 1
    return (i + 1) % prefix != 0 if i < k else (i - k + 1) % rest != 0


def _exaone_moe(cfg, i, n):
    """ExaoneMoeConfig: sliding_window_pattern an int (full every p-th layer) or a string ("LLLG")."""
    pattern = cfg.get("sliding_window_pattern", 4)
    if isinstance(pattern, str) and pattern:
        return pattern[i % len(pattern)] == "L"
    p = _period(cfg, "sliding_window_pattern", 4)
    return bool(p) and (i + 1) % p != 0


def mla(cfg):
    """MLA on every layer (DeepSeek-V3's attention): the latent kv_lora_rank + the RoPE key qk_rope_head_dim."""
    n = config_int(cfg, "num_hidden_layers")
    r, rope = config_int(cfg, "kv_lora_rank"), config_int(cfg, "qk_rope_head_dim")
    return [LayerSpec(kind="mla", kv_lora_rank=r, qk_rope_head_dim=rope) for _ in range(n)]


def _glm_moe_dsa_indexers(cfg, n):
    """GlmMoeDsaConfig: index_topk_pattern ("FSSF...") or, without it, "full" where
    max(i − index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (defaults 2 and 1)."""
    pattern = cfg.get("index_topk_pattern")
    if isinstance(pattern, str):
        if len(pattern) != n or set(pattern) - {"F", "S"}:
            raise ConfigError(f"index_topk_pattern must be {n} letters F (full) or S (shared), got {pattern!r}")
        return ["full" if c == "F" else "shared" for c in pattern]
    if pattern is not None:
        return pattern
    freq = max(config_int(cfg, "index_topk_freq", default=1), 1)
    offset = cfg.get("index_skip_topk_offset", 2)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigError(f"index_skip_topk_offset must be an integer >= 0, got {offset!r}")
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]


def _hy_v4_indexers(cfg, n):
    """HYV4Config: "full" at layer 0 and where (i − 1) % 4 == 0, "shared" elsewhere."""
    return ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(n)]


def dsa(indexers=None):
    """DeepSeek Sparse Attention: MLA whose indexer keys (index_head_dim, one head) are cached on every layer
    that runs its indexer: all layers (DeepSeek-V3.2, A.X-K2), or those ``indexer_types`` (else the family's
    rule ``indexers(cfg, n)``) marks "full"; a "shared" layer reuses the last full layer's top-k and keeps
    no indexer keys (GLM-5, Hy4). Per token: kv_lora_rank + qk_rope_head_dim (+ index_head_dim)."""
    def parse(cfg):
        n = config_int(cfg, "num_hidden_layers")
        r, rope, d_i = (config_int(cfg, "kv_lora_rank"), config_int(cfg, "qk_rope_head_dim"),
                        config_int(cfg, "index_head_dim", default=128))
        types = cfg.get("indexer_types")
        if types is None:
            types = indexers(cfg, n) if indexers else ["full"] * n
        if not isinstance(types, SEQUENCE) or len(types) != n or set(types) - {"full", "shared"}:
            raise ConfigError(f"indexer_types must be a list of {n} entries 'full' or 'shared' (num_hidden_layers)")
        return [LayerSpec(kind="mla", kv_lora_rank=r, qk_rope_head_dim=rope,
                          index_head_dim=d_i if t == "full" else 0) for t in types]
    return parse


def mimo_v2_flash(cfg):
    """MiMo-V2-Flash (MiMoV2FlashConfig, modeling_mimo_v2_flash.py): layer_types, else full at layer 0 and every
    6th; the window is sliding_window_size + 1 when given (transformers' SGLang convention), else sliding_window;
    sliding layers hold 2 × num_key_value_heads; K of head_dim, V of v_head_dim on every layer."""
    n = config_int(cfg, "num_hidden_layers")
    size = config_int(cfg, "sliding_window_size", default=None)
    w = size + 1 if size is not None else config_int(cfg, "sliding_window", default=129)
    types = layer_types_or(cfg, n, lambda i: "full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention")
    kv, d_k, d_v = kv_heads(cfg), head_dim(cfg), config_int(cfg, "v_head_dim", default=head_dim(cfg))
    out = []
    for i, t in enumerate(types):
        if t not in ("full_attention", "sliding_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: sliding_attention, full_attention")
        sliding = t == "sliding_attention"
        out.append(LayerSpec(kind="sliding" if sliding else "full", num_key_value_heads=2 * kv if sliding else kv,
                             head_dim=d_k, v_head_dim=d_v, sliding_window=w if sliding else None))
    return out


def _kv_shared(cfg, n):
    """num_kv_shared_layers as an integer in [0, n): the last ones reuse an earlier layer's K/V."""
    shared = cfg.get("num_kv_shared_layers", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared < n:
        raise ConfigError(f"num_kv_shared_layers must be an integer in [0, {n}) (num_hidden_layers), got {shared!r}")
    return shared


def _gemma4_global(cfg):
    """(KV heads, head_dim) of Gemma 4's full layers: global_head_dim (default 512) and, when
    attention_k_eq_v is not false, num_global_key_value_heads (default: num_key_value_heads)."""
    d = config_int(cfg, "global_head_dim", default=512)
    kv = kv_heads(cfg)
    if cfg.get("attention_k_eq_v", True) is not False:
        kv = config_int(cfg, "num_global_key_value_heads", default=kv)
    return kv, d


def gemma4(cfg):
    """Gemma 4 text (Gemma4TextConfig): layer_types, else full every 6th layer, and the last layer always full;
    full layers use global_head_dim and num_global_key_value_heads (or a per_layer_config's head_dim /
    num_key_value_heads); the window halves (+1) under use_bidirectional_attention "all"; the last
    num_kv_shared_layers layers reuse an earlier layer's K/V and keep nothing (DummyLayer). With
    attention_k_eq_v, V is K, yet transformers still caches two tensors: same bytes."""
    n = config_int(cfg, "num_hidden_layers")
    w = config_int(cfg, "sliding_window", default=512)
    if cfg.get("use_bidirectional_attention") == "all":
        w = w // 2 + 1
    types = list(layer_types_or(cfg, n, lambda i: "full_attention" if (i + 1) % 6 == 0 else "sliding_attention"))
    types[-1] = "full_attention"  # Gemma4TextConfig forces it
    shared = _kv_shared(cfg, n)
    per_layer = cfg.get("per_layer_config")
    g_kv, g_d = _gemma4_global(cfg)
    out = []
    for i, t in enumerate(types):
        if t not in ("full_attention", "sliding_attention"):
            raise ConfigError(f"layer_types[{i}] is {t!r}; accepted: sliding_attention, full_attention")
        if i >= n - shared:
            out.append(LayerSpec(kind="none"))
        elif t == "sliding_attention":
            out.append(attention_layer(cfg, "sliding", window=w))
        elif per_layer is not None:  # a config written by to_dict: the overrides per full layer
            over = per_layer.get(str(i), per_layer.get(i, {})) if hasattr(per_layer, "get") else {}
            out.append(LayerSpec(kind="full", num_key_value_heads=config_int(over, "num_key_value_heads",
                                                                             default=kv_heads(cfg)),
                                 head_dim=config_int(over, "head_dim", default=head_dim(cfg))))
        else:
            out.append(LayerSpec(kind="full", num_key_value_heads=g_kv, head_dim=g_d))
    return out


# DeepseekV4Config: a legacy compress_ratios entry -> the layer type (configuration_deepseek_v4.py)
DEEPSEEK_V4_RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention",
                           128: "heavily_compressed_attention"}
DEEPSEEK_V4_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}  # default_compress_rates


def _deepseek_v4_types(cfg, n):
    """layer_types, else the checkpoint's compress_ratios (0 / 4 / 128 per layer, MTP layers past n dropped),
    else the class default: 2 HCA layers, then CSA at odd i − 2 and HCA at even (DeepseekV4Config.__post_init__)."""
    types, ratios = cfg.get("layer_types"), cfg.get("compress_ratios")
    if types is None and ratios is not None:
        if (not isinstance(ratios, SEQUENCE) or len(ratios) < n
                or any(isinstance(r, bool) or r not in DEEPSEEK_V4_RATIO_TYPES for r in ratios)):
            raise ConfigError(f"compress_ratios must list at least {n} entries (num_hidden_layers), each 0, 4 or 128")
        types = [DEEPSEEK_V4_RATIO_TYPES[r] for r in ratios]
    if types is None:
        types = (["heavily_compressed_attention"] * min(n, 2)
                 + ["compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(n - 2)])
    if not isinstance(types, SEQUENCE) or len(types) < n or set(types[:n]) - set(DEEPSEEK_V4_RATES) - {
            "sliding_attention"}:
        raise ConfigError(f"layer_types must list {n} entries (num_hidden_layers) among sliding_attention, "
                          "compressed_sparse_attention, heavily_compressed_attention")
    return list(types[:n])


def _deepseek_v4_rates(cfg):
    """Entries per compressed token: compress_rates, with the legacy compress_rate_csa / compress_rate_hca folded in."""
    rates = cfg.get("compress_rates") or {}
    if not hasattr(rates, "get"):
        raise ConfigError(f"compress_rates must map compressed_sparse_attention / heavily_compressed_attention to a "
                          f"positive integer, got {rates!r}")
    out = {t: config_int(rates, t, default=m) for t, m in DEEPSEEK_V4_RATES.items()}
    for t, legacy in (("compressed_sparse_attention", "compress_rate_csa"),
                      ("heavily_compressed_attention", "compress_rate_hca")):
        out[t] = config_int(cfg, legacy, default=out[t])
    return out


def deepseek_v4(cfg):
    """DeepSeek-V4 (DeepseekV4Config, modeling_deepseek_v4.py): every layer caches one K = V tensor of head_dim
    (shared-KV MQA: kv_proj has one head) over a sliding_window; by layer type (layer_types, or the checkpoint's
    compress_ratios 0 / 4 / 128) a layer also keeps ⌊T/m⌋ compressed entries: CSA (m = 4) of head_dim + the
    indexer's index_head_dim, HCA (m = 128) of head_dim; sliding_attention layers keep the window only."""
    n = config_int(cfg, "num_hidden_layers")
    d, w = config_int(cfg, "head_dim", default=512), config_int(cfg, "sliding_window", default=128)
    d_i, rates = config_int(cfg, "index_head_dim", default=128), _deepseek_v4_rates(cfg)
    out = []
    for t in _deepseek_v4_types(cfg, n):
        m = rates.get(t, 0)
        out.append(LayerSpec(kind="sliding", num_key_value_heads=1, head_dim=d, sliding_window=w, k_eq_v=True,
                             compress_ratio=m, index_head_dim=d_i if t == "compressed_sparse_attention" else 0))
    return out


def minimax_m3(cfg):
    """MiniMax-M3 text (MiniMaxM3VLTextConfig): full attention on every layer; layer_types, else the checkpoint's
    sparse_attention_config.sparse_attention_freq (1 = "minimax_m3_sparse"), else all full. A sparse layer also
    caches its lightning indexer's key, one head of index_head_dim (sparse_index_dim in sparse_attention_config
    wins, as the config class folds it in; default 128), per token beside its K/V."""
    n = config_int(cfg, "num_hidden_layers")
    sparse = cfg.get("sparse_attention_config") or {}
    if not hasattr(sparse, "get"):
        raise ConfigError(f"sparse_attention_config must be an object, got {sparse!r}")
    types, freq = cfg.get("layer_types"), sparse.get("sparse_attention_freq")
    if types is None and freq is not None:
        if not isinstance(freq, SEQUENCE) or len(freq) < n:
            raise ConfigError(f"sparse_attention_config.sparse_attention_freq must list {n} entries (num_hidden_layers)")
        types = ["minimax_m3_sparse" if f else "full_attention" for f in freq]
    types = ["full_attention"] * n if types is None else types
    if not isinstance(types, SEQUENCE) or len(types) < n or set(types[:n]) - {"full_attention", "minimax_m3_sparse"}:
        raise ConfigError(f"layer_types must list {n} entries (num_hidden_layers), each full_attention or "
                          "minimax_m3_sparse")
    d_i = config_int(sparse, "sparse_index_dim", default=None) or config_int(cfg, "index_head_dim", default=128)
    full = attention_layer(cfg)
    return [replace(full, index_head_dim=d_i) if t == "minimax_m3_sparse" else full for t in types[:n]]


def modernbert_decoder(cfg):
    """ModernBERT decoder (ModernBertDecoderConfig): layer_types, else sliding where i % global_attn_every_n_layers
    (default 3) != 0; the window is always local_attention // 2 (default 128 // 2 = 64: the config class
    overwrites sliding_window with it)."""
    n = config_int(cfg, "num_hidden_layers")
    local = config_int(cfg, "local_attention", default=128)
    w = local // 2 or None
    every = config_int(cfg, "global_attn_every_n_layers", default=3)
    return typed_layers({**cfg, "sliding_window": w}, n, w,
                        lambda i: "sliding_attention" if w and i % every != 0 else "full_attention")


def longcat_flash(cfg):
    """LongCat-Flash: two MLA blocks per decoder layer, each its own cache layer (num_hidden_layers =
    2 × num_layers, as LongcatFlashConfig derives it)."""
    return mla(cfg)


def mllama(cfg):
    """Llama 3.2 Vision's language model: self-attention layers full; the cross_attention_layers (default
    3, 8, ..., 38) attend to the image and cache its K/V only when an image is given, so text-only they keep
    nothing (kind none; transformers still builds an empty DynamicLayer there)."""
    n = config_int(cfg, "num_hidden_layers")
    cross = cfg.get("cross_attention_layers", [3, 8, 13, 18, 23, 28, 33, 38])
    if not isinstance(cross, SEQUENCE) or any(isinstance(i, bool) or not isinstance(i, int) for i in cross):
        raise ConfigError(f"cross_attention_layers must be a list of layer indices, got {cross!r}")
    return [LayerSpec(kind="none") if i in cross else attention_layer(cfg) for i in range(n)]


def dory(cfg):
    """Dory (DoryConfig, modeling_dory.py): n_input_layers, then n_recurrent_layers run n_recurrent_loops times,
    then n_output_layers; layer_types default full where (i + 1) % 4 == 0, else sliding; a released
    config.json lists (attention, "mlp") pairs, halved as DoryConfig does. With recurrent_kv_cache_mode
    "per_loop" (default) every loop after the first writes its own copy of the recurrent layers' cache,
    appended after the model's layers: num_hidden_layers + n_recurrent_layers·(n_recurrent_loops − 1) cache
    layers; "last_loop" keeps one per layer."""
    n, types = config_int(cfg, "num_hidden_layers"), cfg.get("layer_types")
    n_in, n_out = config_int(cfg, "n_input_layers", default=8), config_int(cfg, "n_output_layers", default=8)
    n_rec = config_int(cfg, "n_recurrent_layers", default=None)
    if isinstance(types, SEQUENCE) and "mlp" in types:  # released layout: one (attention, mlp) pair per layer
        types, n, n_in, n_out = list(types)[::2], n // 2, n_in // 2, n_out // 2
        n_rec = None if n_rec is None else n_rec // 2
    n_rec = n - n_in - n_out if n_rec is None else n_rec
    if n_rec < 0 or n_in + n_rec > n:
        raise ConfigError(f"n_input_layers {n_in} + n_recurrent_layers {n_rec} (+ n_output_layers {n_out}) must fit "
                          f"in num_hidden_layers {n}")
    flat = {**cfg, "layer_types": types, "num_hidden_layers": n}
    layers = typed_layers(flat, n, sliding_window(cfg),
                          lambda i: "full_attention" if (i + 1) % 4 == 0 else "sliding_attention")
    mode = cfg.get("recurrent_kv_cache_mode", "per_loop")
    if mode not in ("per_loop", "last_loop"):
        raise ConfigError(f"recurrent_kv_cache_mode must be per_loop or last_loop, got {mode!r}")
    loops = config_int(cfg, "n_recurrent_loops", default=2)
    if mode == "per_loop":
        layers += layers[n_in:n_in + n_rec] * (loops - 1)
    return layers


# model types whose cross-attention layers transformers builds as an (empty) DynamicLayer, not a DummyLayer
EMPTY_ATTENTION_MODEL_TYPES = ("mllama", "mllama_text_model")


# model types whose every layer transformers builds as an indexed_attention cache layer (DynamicIndexedLayer)
INDEXED_MODEL_TYPES = ("deepseek_v32", "glm_moe_dsa", "axk2", "hy_v4")


# ---------------------------------------------------------------- h22-fam-attn: llama-like families
_LLAMA_LIKE = ("exaone", "ministral3", "apertus1p5_text", "aria_text", "diffllama", "doge", "hy_v3", "hyperclovax",
               "iquestcoder", "jais2", "nanochat", "solar_open", "youtu", "sarvam_moe")

FAMILIES = {
    **dict.fromkeys(_LLAMA_LIKE, window_every_layer),
    **dict.fromkeys(("youtu", "sarvam_mla", "axk1"), mla),  # DeepSeek-V3 MLA: transformers caches the latent
    "deepseek_v32": dsa(), "axk2": dsa(), "glm_moe_dsa": dsa(_glm_moe_dsa_indexers), "hy_v4": dsa(_hy_v4_indexers),
    "deepseek_v4": deepseek_v4,
    "mimo_v2_flash": mimo_v2_flash, "gemma4_text": gemma4, "gemma4_unified_text": gemma4, "longcat_flash": longcat_flash,
    # multimodal wrappers: a config.json nests the language model in text_config (read through it); these
    # entries read a flattened one
    "gemma4": gemma4, "gemma4_unified": gemma4, "gemma3n": gemma3n,
    "mllama": mllama, "mllama_text_model": mllama, "dory": dory,
    "emu3": window_every_layer, "emu3_text_model": window_every_layer,
    "gpt_neox_japanese": standard_decoder,
    # config classes that derive layer_types in __post_init__ (True = sliding)
    "laguna": derived(lambda cfg, i, n: False),  # LagunaConfig: every layer full_attention
    "kolibri1": derived(lambda cfg, i, n: (i + 1) % 5 != 0),  # Kolibri1Config: full every 5th (NoPE there)
    "beam": derived(lambda cfg, i, n: (i + 1) % 6 != 0 and i != n - 1),  # BeamConfig: full every 6th and last
    "modernbert-decoder": modernbert_decoder, "minimax_m3_vl_text": minimax_m3,
    "mellum": derived(lambda cfg, i, n: False),  # MellumConfig: every layer full_attention
    "cohere_compass_text": derived(lambda cfg, i, n: False),  # CohereCompassTextConfig: every layer full
    "flint": derived(lambda cfg, i, n: not (i < 2 or i % 4 == 1 or i == n - 1)),  # FlintConfig
    "granitemoe_swa": derived(lambda cfg, i, n: i % 4 != 0),  # GraniteMoeSWAConfig
    "cohere2_moe": derived(_cohere2_moe),
    "exaone_moe": derived(_exaone_moe),
}

ALIASES = {
    "exaone": {"num_hidden_layers": ("num_layers",)},
}

FAMILY_DEFAULTS = {
    "gemma3n": DECODER_DEFAULTS["gemma3n_text"],
    "flint": {"sliding_window": 513}, "granitemoe_swa": {"sliding_window": 128},
    "cohere2_moe": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "exaone_moe": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "kolibri1": {"sliding_window": 513}, "beam": {"sliding_window": 512},
    "dory": {"sliding_window": 1024}, "laguna": {"sliding_window": 512}, "mellum": {"sliding_window": 1024}, "cohere_compass_text": {"sliding_window": 4096},
    "mimo_v2_flash": {"sliding_window": 129, "v_head_dim": 128, "head_dim": 192},
    "deepseek_v4": {"sliding_window": 128, "head_dim": 512, "num_key_value_heads": 1, "num_attention_heads": 64,
                    "vocab_size": 129280, "index_head_dim": 128},
    "gemma4_unified_text": {"sliding_window": 1024, "head_dim": 256, "num_key_value_heads": 4,
                            "num_attention_heads": 8, "vocab_size": 262144},
    "gemma4_text": {"sliding_window": 512, "head_dim": 256, "num_key_value_heads": 4, "num_attention_heads": 8,
                    "vocab_size": 262144},
}



def standard_keys(cfg, model_type: str) -> dict:
    """``cfg`` with the standard key names added from this module's :data:`ALIASES` (present keys win)."""
    out = dict(cfg)
    if model_type == "longcat_flash" and out.get("num_layers") is not None:  # 2 MLA cache layers per decoder layer
        out["num_hidden_layers"] = 2 * config_int(out, "num_layers")
    for std, names in ALIASES.get(model_type, {}).items():
        if out.get(std) is None:
            out[std] = next((out[n] for n in names if out.get(n) is not None), None)
    return out


# model types transformers lists as causal LMs whose cache kvsim refuses to describe, each with its reason
REFUSED = {
    **{t: f"model_type {t!r} is a drafter that keeps no K/V of its own: every layer reads the target model's "
          "K/V (shared_kv_states; use_cache is ignored), so size the target model's config instead"
       for t in ("gemma4_assistant", "gemma4_unified_assistant")},
}


# the cache rule each of these model types adds that its layer kinds alone do not say (kvsim explain)
TYPE_NOTES = {
    "mimo_v2_flash": "MiMo-V2-Flash: sliding layers hold 2 × num_key_value_heads; K is head_dim wide, V v_head_dim",
    "git": "GIT: with an image, its projected patch tokens are prepended to the text and cached too; "
        "text-only (as sized here), the text tokens",
    "minimax_m3_vl_text": "MiniMax-M3: sparse layers (minimax_m3_sparse) also cache one index_head_dim indexer key per "
        "token; attention reads only the blocks the indexer picks, yet keeps every token",
    "dory": "Dory: with recurrent_kv_cache_mode per_loop, each loop of the recurrent layers after the first "
        "keeps its own copy of their cache (appended after the model's layers)",
    "deepseek_v4": "DeepSeek-V4: one K = V tensor per layer (shared-KV MQA, one head); CSA layers add ⌊T/4⌋ "
        "compressed entries of head_dim + index_head_dim, HCA layers ⌊T/128⌋ of head_dim "
        "(compress_rates); sliding_attention layers keep the window only. M_token counts the window's "
        "K = V; past the window a token adds (d + d_I)·b / m per CSA layer and d·b / m per HCA layer "
        "through the compressed entries. transformers also keeps each "
        "compressor's buffer (the T mod m tokens not yet compressed) and CSA's overlap state; MoE, hash "
        "routing, attention sinks and mHC do not change the cache",
    "longcat_flash": "LongCat-Flash: two MLA blocks per decoder layer, each its own cache layer (2 × num_layers)",
}


def notes(model_type: str, cfg) -> list[str]:
    """One line per cache rule of these families that the layer kinds alone do not say."""
    out = []
    if model_type in EMPTY_ATTENTION_MODEL_TYPES:
        out.append("cross-attention layers (cross_attention_layers) cache the image's K/V only when an image is "
                   "given: text-only they keep nothing")
    if model_type in TYPE_NOTES:
        out.append(TYPE_NOTES[model_type])
    if model_type in INDEXED_MODEL_TYPES:
        out.append("DSA: layers that run their indexer also cache index_head_dim elements of indexer key per token")
    if cfg.get("attention_k_eq_v"):
        out.append("attention_k_eq_v: V is K on full layers, yet transformers caches both tensors: same bytes")
    return out


def refusal(cfg) -> str | None:
    """The one-line reason kvsim refuses this config's model type (or its outer multimodal type), else None."""
    for t in (cfg.get("outer_model_type"), cfg.get("model_type")):
        if isinstance(t, str) and t in REFUSED:
            return REFUSED[t]
    return None
