"""Hybrid and recurrent families added for issue 17 (pure Python): LFM2's short convolutions, Bamba,
Zamba / Zamba2 hybrid layers, OLMo-Hybrid and Qwen3.5 Gated DeltaNet, Kimi-Linear / Bailing-Hybrid KDA
beside MLA, MiniMax lightning attention, and the encoder-style models transformers lists as causal LMs
(BERT-style with ``is_decoder``, the decoders of BART-style encoder-decoders: full MHA self-attention).

Contract
- :data:`FAMILIES` maps each model type here to its parser ``cfg -> list[LayerSpec]`` (config flattened
  by :func:`kvsim.calc.hf_config.text_config`); :data:`ALIASES` the family's own key names to add as the
  standard ones; :data:`REFUSED` the causal-LM model types kvsim refuses, each with a one-line reason.
- New recurrent state families (each a ``LayerSpec.recurrent_family``; kvsim's ``state_shapes`` keep the
  conv window as (K − 1, width), as for Mamba):
  * ``short_conv`` (LFM2 ``conv`` layers): one conv state of width ``hidden_size`` and kernel
    K = ``conv_L_cache``; no recurrent state.
  * ``kda`` (Kimi Delta Attention): one conv over the concatenated q, k, v, width 3·H·d, and the
    delta-rule state (H, d, d) in fp32.
  * ``lightning`` (MiniMax): the state (H, d, d), no conv, kept in the model dtype.
  * ``rwkv``: 2 token-shift vectors (model dtype) and the wkv numerator, denominator and max (fp32), each
    hidden_size wide, carried by generate in ``model_kwargs['state']`` (no Cache object).
  * ``cca`` (ZAYA's compressed convolutional attention, beside its K/V in one layer): a conv state of
    (cca_time0 − 1) + (cca_time1 − 1) columns over q and k, (H + n_kv)·d wide (these are the columns
    kept, not K − 1), and a delayed-V state of n_kv·d / 2, both in the model dtype.
- What transformers 5.24 keeps for them (:func:`transformers_state_bytes`, used by
  :mod:`kvsim.calc.engines_transformers`; :data:`TRANSFORMERS_STATE_RULES`): conv K·width·b for
  ``short_conv`` and ``kda`` (K columns, like Mamba); KDA's state in fp32; the lightning state H·d·d·b in
  the model dtype, held in ``MiniMaxCache.linear_cache`` outside the cache layers.
- Hybrid layers that hold K/V and a Mamba state together (Zamba's and Zamba2's shared-attention blocks)
  are full-attention LayerSpecs that also carry the Mamba state, as Falcon-H1's; attention runs on
  2·hidden_size, so its head size is ``attention_head_dim`` = 2·hidden_size / heads unless the config carries
  ``head_dim`` or ``attention_head_dim`` (transformers then keeps that size).
- Key names are the ones the model's transformers module reads after its config class has run: Bailing-Hybrid's
  KDA layers read ``linear_*`` (falling back to the keys BailingHybridConfig derives them from), not the
  ``head_dim`` its to_dict writes as qk_rope_head_dim.
- :func:`decoder_keys` gives a seq2seq decoder config (``decoder_layers``, ``decoder_attention_heads``,
  ``d_model``) the standard key names; their cross-attention is not run by ``*ForCausalLM`` without
  encoder states, so only the self-attention K/V is cached: T·heads·2·(hidden / heads)·b per layer.
- Errors are :class:`~kvsim.calc.config.ConfigError` naming the field and what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .config import ConfigError, LayerSpec, config_int
from .layer_fields import (
    attention_layer,
    kv_heads,
    layer_types_or,
    mamba2_layer_state,
    mamba_layer,
    sliding_window,
)
from .validate import show

# state families defined here -> (conv columns transformers keeps beyond kvsim's K − 1, the state names it keeps
# in the model dtype; every other non-conv state is fp32 in transformers' torch path)
TRANSFORMERS_STATE_RULES = {
    "short_conv": (1, ()), "kda": (1, ()),
    "lightning": (0, ("ssm",)),  # MiniMaxCache.linear_cache, model dtype
    "cca": (0, ("v",)),  # ZAYA's delayed-V state, model dtype
    "rwkv": (0, ("shift",)),  # RwkvModel: token-shift states in the model dtype, wkv num/den/max fp32
}
LIGHTNING_CACHE = "MiniMaxCache.linear_cache"  # where transformers keeps MiniMax's lightning state
RWKV_STATE = "model_kwargs['state']"  # where generate carries RWKV's state (no Cache object)

_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}  # remap_legacy_layer_types


def _types(cfg, n, default_fn, accepted, *names):
    """The first present per-layer type list among ``names`` (legacy names remapped), else ``default_fn``."""
    key = next((k for k in names if cfg.get(k) is not None), None)
    types = layer_types_or({"layer_types": cfg[key]} if key else {}, n, default_fn)
    out = []
    for i, t in enumerate(types):
        t = _LEGACY.get(t, t)
        if t not in accepted:
            raise ConfigError(f"{key or 'layer_types'}[{i}] is {t!r}; accepted: {', '.join(accepted)}")
        out.append(t)
    return out


def _indices(cfg, name, n):
    """A list of layer indices in [0, n) (``full_attn_idxs``, ``attn_layer_indices``), or None when absent."""
    value = cfg.get(name)
    if value is None:
        return None
    if (not isinstance(value, (list, tuple))
            or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in value)):
        raise ConfigError(f"{name} must be a list of layer indices in [0, {n}) (num_hidden_layers), got {show(value)}")
    return set(value)


# ---------------------------------------------------------------- LFM2: short convolutions


def short_conv_layer(width: int, kernel: int) -> LayerSpec:
    """LFM2 ``conv`` layer: conv state (K − 1, width) in kvsim; transformers keeps K·width·b."""
    return LayerSpec(kind="recurrent", recurrent_family="short_conv", state_shapes=(("conv", (kernel - 1, width)),))


def lfm2(cfg):
    """LFM2 / LFM2-MoE: layer_types ('conv' / 'full_attention'), else full_attn_idxs (absent: every layer
    full, Lfm2Config; LFM2-MoE requires layer_types); a conv layer keeps conv_L_cache columns of hidden_size."""
    n = config_int(cfg, "num_hidden_layers")
    if cfg.get("model_type") == "lfm2_moe" and cfg.get("layer_types") is None:
        raise ConfigError("lfm2_moe needs layer_types (a list of 'conv' / 'full_attention' per layer): "
                          "Lfm2MoeConfig has no default layer pattern")
    full = _indices(cfg, "full_attn_idxs", n)
    types = _types(cfg, n, lambda i: "full_attention" if full is None or i in full else "conv",
                   ("conv", "full_attention"), "layer_types")
    conv = short_conv_layer(config_int(cfg, "hidden_size"), config_int(cfg, "conv_L_cache", default=3))
    return [attention_layer(cfg) if t == "full_attention" else conv for t in types]


# ---------------------------------------------------------------- Mamba-2 / Mamba-1 hybrids


def bamba(cfg):
    """Bamba: attention on attn_layer_indices, Mamba-2 elsewhere (mamba_d_head "auto" = expand·hidden / heads)."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    attn = _indices(cfg, "attn_layer_indices", n) or set()
    d_inner = config_int(cfg, "mamba_expand", default=2) * hidden
    heads = config_int(cfg, "mamba_n_heads", default=128)
    d_head = d_inner // heads if cfg.get("mamba_d_head", "auto") == "auto" else config_int(cfg, "mamba_d_head")
    state = mamba2_layer_state(d_inner, heads, d_head, config_int(cfg, "mamba_d_state", default=256),
                               config_int(cfg, "mamba_n_groups", default=1), config_int(cfg, "mamba_d_conv", default=4))
    mamba = LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=state)
    return [attention_layer(cfg) if i in attn else mamba for i in range(n)]


def _zamba_attention(cfg, head_dim: int) -> LayerSpec:
    return LayerSpec(kind="full", num_key_value_heads=kv_heads(cfg), head_dim=head_dim)


def _zamba_head_dim(cfg, hidden: int, heads: int) -> int:
    """The K/V head size ZambaAttention / Zamba2Attention read, config.attention_head_dim: a config.json's head_dim
    (attribute_map: set last), else its attention_head_dim, else 2·hidden / heads (attention on 2·hidden_size)."""
    return config_int(cfg, "head_dim", "attention_head_dim", default=None) or 2 * hidden // heads


def zamba(cfg):
    """Zamba: layers_block_type (Mamba-1 'mamba' / 'hybrid'), else [mamba, mamba, hybrid] then hybrid where
    i % attn_layer_period == attn_layer_offset (ZambaConfig). A hybrid layer keeps K/V of d = head_dim, else
    attention_head_dim, else 2·hidden / heads (ZambaConfig's attribute_map sets attention_head_dim from head_dim,
    after the field) and its Mamba-1 state (d_inner = mamba_expand·hidden)."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    period = config_int(cfg, "attn_layer_period", default=6)
    offset = cfg.get("attn_layer_offset", 4)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigError(f"attn_layer_offset must be an integer >= 0, got {show(offset)}")
    default = (["linear_attention", "linear_attention", "hybrid"]
               + ["hybrid" if i % period == offset else "linear_attention" for i in range(n - 3)])
    types = _types(cfg, n, lambda i: default[i], ("linear_attention", "hybrid"), "layers_block_type", "layer_types")
    mamba = mamba_layer(config_int(cfg, "mamba_expand", default=2) * hidden,
                        config_int(cfg, "mamba_d_state", default=16), config_int(cfg, "mamba_d_conv", default=4))
    heads = config_int(cfg, "num_attention_heads")
    d_attn = _zamba_head_dim(cfg, hidden, heads)
    hybrid = replace(_zamba_attention(cfg, d_attn), recurrent_family="mamba", state_shapes=mamba.state_shapes)
    return [hybrid if t == "hybrid" else mamba for t in types]


# Zamba2Config's default layers_block_type (54 layers)
_ZAMBA2_DEFAULT = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4
                   + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2)


def zamba2(cfg):
    """Zamba2: layers_block_type (Mamba-2 'mamba' / 'hybrid'; absent: Zamba2Config's 54-layer default).
    Hybrid layers keep K/V of d = head_dim, else attention_head_dim, else 2·hidden / heads (Zamba2Config derives
    attention_head_dim before a config.json's own key overwrites it) and the Mamba-2 state (n_mamba_heads heads
    of mamba_expand·hidden / n_mamba_heads, mamba_ngroups groups)."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    if cfg.get("layers_block_type") is None and cfg.get("layer_types") is None and n != len(_ZAMBA2_DEFAULT):
        raise ConfigError(f"layers_block_type is absent and num_hidden_layers is {n}: Zamba2's default pattern has "
                          f"{len(_ZAMBA2_DEFAULT)} layers; give layers_block_type")
    types = _types(cfg, n, lambda i: _ZAMBA2_DEFAULT[i], ("linear_attention", "hybrid"),
                   "layers_block_type", "layer_types")
    d_inner = config_int(cfg, "mamba_expand", default=2) * hidden
    heads = config_int(cfg, "n_mamba_heads", default=8)
    state = mamba2_layer_state(d_inner, heads, d_inner // heads, config_int(cfg, "mamba_d_state", default=64),
                               config_int(cfg, "mamba_ngroups", default=1), config_int(cfg, "mamba_d_conv", default=4))
    mamba = LayerSpec(kind="recurrent", recurrent_family="mamba2", state_shapes=state)
    hybrid = replace(_zamba_attention(cfg, _zamba_head_dim(cfg, hidden, config_int(cfg, "num_attention_heads"))),
                     recurrent_family="mamba2", state_shapes=state)
    return [hybrid if t == "hybrid" else mamba for t in types]


# ---------------------------------------------------------------- Gated DeltaNet hybrids


def gated_deltanet_layer(nk: int, nv: int, dk: int, dv: int, kernel: int) -> LayerSpec:
    """Gated DeltaNet: conv (K − 1, 2·nk·dk + nv·dv), delta-rule state (nv, dv, dk) (fp32 in transformers)."""
    return LayerSpec(kind="recurrent", recurrent_family="gated_deltanet", state_shapes=(
        ("conv", (kernel - 1, 2 * nk * dk + nv * dv)), ("ssm", (nv, dv, dk))))


def olmo_hybrid(cfg):
    """OLMo-Hybrid: layer_types (default full where i % 4 == 3, the last layer full when none is); linear
    heads default to num_attention_heads, linear_key_head_dim to ⌊0.75·hidden / key heads⌋, value dim 2·key dim."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    default = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n)]
    if "full_attention" not in default:
        default[-1] = "full_attention"
    types = _types(cfg, n, lambda i: default[i], ("linear_attention", "full_attention"), "layer_types")
    heads = config_int(cfg, "num_attention_heads")
    nk = config_int(cfg, "linear_num_key_heads", default=heads)
    nv = config_int(cfg, "linear_num_value_heads", default=heads)
    dk = config_int(cfg, "linear_key_head_dim", default=None) or int(0.75 * hidden / nk)
    dv = config_int(cfg, "linear_value_head_dim", default=2 * dk)
    gdn = gated_deltanet_layer(nk, nv, dk, dv, config_int(cfg, "linear_conv_kernel_dim", default=4))
    return [attention_layer(cfg) if t == "full_attention" else gdn for t in types]


def qwen3_5(cfg):
    """Qwen3.5 (dense and MoE; text_config): layer_types, else full every full_attention_interval-th layer
    (default 4); Gated DeltaNet elsewhere, as Qwen3-Next (Qwen3_5TextConfig defaults for absent sizes)."""
    n = config_int(cfg, "num_hidden_layers")
    interval = config_int(cfg, "full_attention_interval", default=4)
    types = _types(cfg, n, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention",
                   ("linear_attention", "full_attention"), "layer_types")
    gdn = gated_deltanet_layer(config_int(cfg, "linear_num_key_heads", default=16),
                               config_int(cfg, "linear_num_value_heads", default=32),
                               config_int(cfg, "linear_key_head_dim", default=128),
                               config_int(cfg, "linear_value_head_dim", default=128),
                               config_int(cfg, "linear_conv_kernel_dim", default=4))
    return [attention_layer(cfg) if t == "full_attention" else gdn for t in types]


def lara_mini(cfg):
    """Lara-Mini (LaraMiniConfig): layer_types, else the released period-5 pattern linear, sliding, linear, full,
    sliding; Gated DeltaNet on linear layers (defaults 8 key / 16 value heads of 128, kernel 4), sliding_window
    (default 512) on sliding ones."""
    n = config_int(cfg, "num_hidden_layers")
    pattern = ("linear_attention", "sliding_attention", "linear_attention", "full_attention", "sliding_attention")
    types = _types(cfg, n, lambda i: pattern[i % 5], ("linear_attention", "sliding_attention", "full_attention"),
                   "layer_types")
    gdn = gated_deltanet_layer(config_int(cfg, "linear_num_key_heads", default=8),
                               config_int(cfg, "linear_num_value_heads", default=16),
                               config_int(cfg, "linear_key_head_dim", default=128),
                               config_int(cfg, "linear_value_head_dim", default=128),
                               config_int(cfg, "linear_conv_kernel_dim", default=4))
    w = sliding_window(cfg)
    return [gdn if t == "linear_attention" else
            attention_layer(cfg, "sliding", window=w) if t == "sliding_attention" and w else attention_layer(cfg)
            for t in types]


# ---------------------------------------------------------------- KDA beside MLA


def kda_layer(heads: int, head_dim: int, kernel: int) -> LayerSpec:
    """Kimi Delta Attention: conv (K − 1, 3·H·d) over q, k, v concatenated; state (H, d, d), fp32."""
    return LayerSpec(kind="recurrent", recurrent_family="kda", state_shapes=(
        ("conv", (kernel - 1, 3 * heads * head_dim)), ("ssm", (heads, head_dim, head_dim))))


def _mla(cfg) -> LayerSpec:
    return LayerSpec(kind="mla", kv_lora_rank=config_int(cfg, "kv_lora_rank"),
                     qk_rope_head_dim=config_int(cfg, "qk_rope_head_dim"))


def kimi_linear(cfg):
    """Kimi-Linear: layer_types, else linear_attn_config.full_attn_layers / .kda_layers (1-indexed), else full
    where i > 0 and i % 4 == 0. Full layers MLA (the latent); KDA layers of linear_attn_config.num_heads heads
    of .head_dim, kernel .short_conv_kernel_size (top-level linear_num_heads / linear_head_dim /
    linear_conv_kernel_dim; defaults 32, 128, 4)."""
    n = config_int(cfg, "num_hidden_layers")
    lin = cfg.get("linear_attn_config") or {}
    if not isinstance(lin, Mapping):
        raise ConfigError(f"linear_attn_config must be a JSON object, got {show(lin)}")
    if cfg.get("layer_types") is None and lin.get("full_attn_layers") is not None and lin.get("kda_layers") is not None:
        full = _indices({"full_attn_layers": [i - 1 if isinstance(i, int) and not isinstance(i, bool) else i
                                              for i in lin["full_attn_layers"]]}, "full_attn_layers", n)
        kda = _indices({"kda_layers": [i - 1 if isinstance(i, int) and not isinstance(i, bool) else i
                                       for i in lin["kda_layers"]]}, "kda_layers", n)
        if full | kda != set(range(n)):
            raise ConfigError(f"linear_attn_config.full_attn_layers and .kda_layers must cover layers 1..{n} "
                              "(1-indexed)")
        default = ["full_attention" if i in full else "linear_attention" for i in range(n)]
    else:
        default = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]
    types = _types(cfg, n, lambda i: default[i], ("linear_attention", "full_attention"), "layer_types")
    heads = config_int(lin, "num_heads", default=None) or config_int(cfg, "linear_num_heads", default=32)
    d = config_int(lin, "head_dim", default=None) or config_int(cfg, "linear_head_dim", default=128)
    k = (config_int(lin, "short_conv_kernel_size", default=None)
         or config_int(cfg, "linear_conv_kernel_dim", default=4))
    kda = kda_layer(heads, d, k)
    return [_mla(cfg) if t == "full_attention" else kda for t in types]


def bailing_hybrid(cfg):
    """Bailing-Hybrid (Ling): layer_types, else full (MLA: kv_lora_rank + qk_rope_head_dim) every
    layer_group_size-th layer (default 6); KDA layers of H = linear_num_heads heads of d = linear_head_dim, kernel
    K = linear_conv_kernel_dim: conv (K − 1, 3·H·d), state (H, d, d) fp32. As transformers' BailingHybridConfig:
    linear_* absent -> num_attention_heads, head_dim (default 128), short_conv_kernel_size (default 4); its
    to_dict writes linear_* and head_dim = qk_rope_head_dim, so a saved config's head_dim is not the KDA one.
    The num_mtp_layers MTP layers are not built: no cache."""
    n = config_int(cfg, "num_hidden_layers")
    group = config_int(cfg, "layer_group_size", default=6)
    types = _types(cfg, n, lambda i: "full_attention" if (i + 1) % group == 0 else "linear_attention",
                   ("linear_attention", "full_attention"), "layer_types")
    # BailingHybridDeltaAttention reads config.linear_num_heads / linear_head_dim / linear_conv_kernel_dim, which
    # __post_init__ sets from the other three keys before a config.json's own linear_* overwrite them
    kda = kda_layer(config_int(cfg, "linear_num_heads", "num_attention_heads"),
                    config_int(cfg, "linear_head_dim", "head_dim", default=128),
                    config_int(cfg, "linear_conv_kernel_dim", "short_conv_kernel_size", default=4))
    return [_mla(cfg) if t == "full_attention" else kda for t in types]


def lfm3(cfg):
    """LFM3: layer_types ('conv' / 'sliding_attention' / 'full_attention'), else full where i % 4 == 2,
    sliding where i % 4 == 0 and i > 0, conv elsewhere (Lfm3Config); conv_L_cache (default 7) columns of
    hidden_size, sliding_window (default 256)."""
    n = config_int(cfg, "num_hidden_layers")
    types = _types(cfg, n, lambda i: ("full_attention" if i % 4 == 2 else
                                      "sliding_attention" if i % 4 == 0 and i > 0 else "conv"),
                   ("conv", "sliding_attention", "full_attention"), "layer_types")
    conv = short_conv_layer(config_int(cfg, "hidden_size"), config_int(cfg, "conv_L_cache", default=7))
    w = sliding_window(cfg)
    return [conv if t == "conv" else
            attention_layer(cfg, "sliding", window=w) if t == "sliding_attention" and w else attention_layer(cfg)
            for t in types]


# ---------------------------------------------------------------- ZAYA: K/V beside a conv and a delayed-V state


def zaya(cfg):
    """ZAYA: every layer CCA attention, layer_types 'hybrid' (full) or 'hybrid_sliding' (sliding_window);
    each keeps its K/V and the cca state: conv ((t0 − 1) + (t1 − 1), (H + n_kv)·d), delayed V (n_kv·d / 2,)."""
    n = config_int(cfg, "num_hidden_layers")
    types = _types(cfg, n, lambda i: "hybrid", ("hybrid", "hybrid_sliding"), "layer_types")
    heads, kv, w = config_int(cfg, "num_attention_heads"), kv_heads(cfg), sliding_window(cfg)
    d = config_int(cfg, "head_dim", default=None) or config_int(cfg, "hidden_size") // heads
    columns = config_int(cfg, "cca_time0", default=2) - 1 + config_int(cfg, "cca_time1", default=2) - 1
    if columns < 1:
        raise ConfigError("cca_time0 + cca_time1 must be at least 3 (the conv keeps (t0 − 1) + (t1 − 1) columns)")
    state = (("conv", (columns, (heads + kv) * d)), ("v", (kv * d // 2,)))
    out = []
    for t in types:
        layer = (LayerSpec(kind="sliding", num_key_value_heads=kv, head_dim=d, sliding_window=w)
                 if t == "hybrid_sliding" and w else LayerSpec(kind="full", num_key_value_heads=kv, head_dim=d))
        out.append(replace(layer, recurrent_family="cca", state_shapes=state))
    return out


# ---------------------------------------------------------------- RWKV


def rwkv(cfg):
    """RWKV (v4): every layer keeps 5 vectors of hidden_size: 2 token-shift states (model dtype) and the wkv
    numerator, denominator and running max (fp32): 2·hidden·b + 3·hidden·4 bytes, whatever T is."""
    n, hidden = config_int(cfg, "num_hidden_layers"), config_int(cfg, "hidden_size")
    attention = config_int(cfg, "attention_hidden_size", default=None)
    if attention is not None and attention != hidden:
        raise ConfigError(f"attention_hidden_size {attention} must equal hidden_size {hidden}: transformers' RWKV "
                          "state is hidden_size wide")
    layer = LayerSpec(kind="recurrent", recurrent_family="rwkv", state_shapes=(("shift", (2, hidden)),
                                                                              ("wkv", (3, hidden))))
    return [layer] * n


# ---------------------------------------------------------------- MiniMax lightning attention


def minimax(cfg):
    """MiniMax-Text-01: layer_types, else full attention on even layers (i + 1 odd), lightning attention on
    odd ones: state (num_attention_heads, d, d) in the model dtype, d = head_dim or hidden / heads.
    sliding_window is never applied (layer_types has no sliding layers)."""
    n = config_int(cfg, "num_hidden_layers")
    types = _types(cfg, n, lambda i: "full_attention" if (i + 1) % 2 else "linear_attention",
                   ("linear_attention", "full_attention"), "layer_types")
    heads = config_int(cfg, "num_attention_heads")
    d = config_int(cfg, "head_dim", default=None) or config_int(cfg, "hidden_size") // heads
    full = LayerSpec(kind="full", num_key_value_heads=kv_heads(cfg), head_dim=d)
    lightning = LayerSpec(kind="recurrent", recurrent_family="lightning", state_shapes=(("ssm", (heads, d, d)),))
    return [full if t == "full_attention" else lightning for t in types]


def transformers_state_bytes(layer: LayerSpec, b: int, fp32_bytes: int) -> int | None:
    """Bytes transformers 5.24 keeps for a state family defined here (None: not one of them):
    conv (K − 1 + extra)·width·b, the family's model-dtype states numel·b, the others numel·4."""
    rule = TRANSFORMERS_STATE_RULES.get(layer.recurrent_family)
    if rule is None:
        return None
    extra, model_dtype = rule
    total = 0
    for name, shape in layer.state_shapes:
        if name == "conv":
            total += (shape[0] + extra) * shape[1] * b
        else:
            numel = 1
            for s in shape:
                numel *= s
            total += numel * (b if name in model_dtype else fp32_bytes)
    return total


# ---------------------------------------------------------------- encoder-style causal LMs


# BERT-style models run as decoders (is_decoder) and the decoder halves of encoder-decoders (*ForCausalLM):
# transformers 5.24 caches their self-attention in a DynamicCache of full layers, every head (MHA).
BERT_STYLE = ("bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
              "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta",
              "xlm-roberta-xl", "xmod")
SEQ2SEQ_DECODERS = ("bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp",
                    "pegasus", "plbart", "trocr", "prophetnet", "whisper")
# decoder keys first: an encoder-decoder config's num_hidden_layers / num_attention_heads name the encoder's
_DECODER_KEYS = {"num_hidden_layers": ("decoder_layers", "num_decoder_layers"),
                 "num_attention_heads": ("decoder_attention_heads", "num_decoder_attention_heads"),
                 "hidden_size": ("d_model",)}


def decoder_keys(cfg: Mapping, model_type: str) -> dict:
    """``cfg`` with the decoder's layer count, heads and width as the standard keys (seq2seq decoders only;
    their decoder_* keys win over the encoder's num_hidden_layers), no GQA key (MHA)."""
    out = dict(cfg)
    if model_type in SEQ2SEQ_DECODERS:
        for std, names in _DECODER_KEYS.items():
            for name in names:
                if out.get(name) is not None:
                    out[std] = out[name]
                    break
        out.pop("num_key_value_heads", None)
    return out


def self_attention_decoder(cfg):
    """Every layer full attention over all heads: hidden_size / num_attention_heads per head (MHA)."""
    n = config_int(cfg, "num_hidden_layers")
    heads = config_int(cfg, "num_attention_heads")
    hidden = config_int(cfg, "hidden_size")
    if hidden % heads:
        raise ConfigError(f"hidden_size {hidden} must be divisible by num_attention_heads {heads}")
    return [LayerSpec(kind="full", num_key_value_heads=heads, head_dim=hidden // heads) for _ in range(n)]


# model types read here that vLLM's model registry (vllm/model_executor/models/registry.py,
# _TEXT_GENERATION_MODELS) does not run as generative models: BERT-style models are embedding / classification
# models there (no KV cache), encoder-decoder decoders and Zamba (v1) are not registered
VLLM_NOT_GENERATIVE = BERT_STYLE + SEQ2SEQ_DECODERS + ("zamba", "rwkv",
                                                       # h23-families: not in vLLM 0.33's registry at all
                                                       "git", "moshi", "modernbert-decoder", "lara_mini")

# causal-LM model types kvsim refuses, each with the reason (transformers 5.24, torch path)
REFUSED = {
    "xlstm": "xLSTM keeps an xLSTMCache of per-block matrix memories without cache layers; kvsim does not size it",
    "xlnet": "XLNet keeps 'mems' (a tuple of hidden states, mem_len tokens), not a K/V cache",
    "reformer": "Reformer's ReformerDynamicCache holds LSH buckets and hidden states, not K/V per token",
    "xlm": "XLM's generate appends a mask token to every call, so its cache holds one token more than fed",
    "cpmant": "CPM-Ant prepends prompt_length prompt tokens per segment before caching",
    **dict.fromkeys(("inkling", "inkling_text", "inkling2", "inkling2_text", "inkling2_loop", "inkling2_loop_text"),
                    "Inkling's layers keep sliding K/V beside four fp32 conv states; kvsim does not model them yet"),
    "hrm_text": "HRM runs its H and L modules in cycles, each pass with its own cache layer (more cache layers than "
                "decoder layers); kvsim does not model the cycles yet",
    **dict.fromkeys(("qwen4_exp", "qwen4_exp_text"), "Qwen4-Exp mixes linear attention with QSA layers "
                    "(block-compressed indexer keys); kvsim does not model them yet"),
    **dict.fromkeys(("musicgen", "musicgen_melody"), "MusicGen's causal LM is built from its decoder config "
                    "(musicgen_decoder, nested under decoder) and generate feeds num_codebooks delayed streams per "
                    "sequence; kvsim does not model that feed yet"),
    **dict.fromkeys(("dots3_note", "dots3_note_text"), "dots.3-note mixes sliding-window MLA layers (their own swa_* "
                    "ranks) with DSA indexed MLA layers; kvsim has no sliding MLA layer yet"),
    "blt": "BLT caches a local encoder, a global transformer over patches and a local decoder over bytes; "
           "kvsim does not model it",
}


FAMILIES = {
    **dict.fromkeys(BERT_STYLE + SEQ2SEQ_DECODERS, self_attention_decoder),
    "lfm2": lfm2, "lfm2_moe": lfm2, "bamba": bamba, "zamba": zamba, "zamba2": zamba2,
    "olmo_hybrid": olmo_hybrid,
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"), qwen3_5),
    "kimi_linear": kimi_linear, "bailing_hybrid": bailing_hybrid, "minimax": minimax,
    "lfm3": lfm3, "zaya": zaya, "lara_mini": lara_mini, "rwkv": rwkv,
}
