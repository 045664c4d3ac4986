"""Model description: what each decoder layer caches, plus the model-wide sizes (pure Python).

Contract
- :class:`LayerSpec`: one decoder layer, with an attention ``kind`` and the dimensions that decide how
  much cache it keeps. Kinds: ``full``, ``sliding`` (window W), ``chunked`` (chunk C), ``mla``
  (latent + RoPE key), ``recurrent`` (fixed state tensors), ``none`` (no cache). An attention layer
  that runs a recurrent mixer beside its attention (Falcon-H1: attention and Mamba-2 in every layer)
  keeps its attention kind and also carries ``recurrent_family`` + ``state_shapes``: the calculator
  counts its K/V and its state (``state_elements`` is every layer's state, whatever its kind).
- :class:`ModelSpec`: the layers, the sizes weights need, and the typed fields the MLX model reads
  (RoPE base, norm epsilon, MLA and recurrent widths...), each with a documented default.
  Both are frozen; ``ModelSpec.config`` (the parsed ``config.json``) is frozen deeply: dicts become
  read-only mappings and lists tuples, so editing it raises TypeError instead of changing every later
  ``load_model`` of the same name.
- Parsing a Hugging Face ``config.json`` into a spec is :func:`kvsim.calc.hf_config.from_hf_config`
  (per-family layer patterns: :mod:`kvsim.calc.families`); :func:`config_int` is the field reader both use.
- Errors are :class:`ConfigError` with a one-line message naming the field and what is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .units import FLOAT_DTYPES, InputError, dtype_key, positive_int
from .validate import MAX_COUNT, MAX_LAYERS, ConfigError, config_count



class Kind:
    """The layer kinds and the groups of them code asks about: the one source for every tuple of kinds.

    ``layer.kind`` stays one of these plain strings (JSON, ``spec.kinds`` and messages print it as is);
    :class:`LayerSpec` answers the group questions as properties (``has_kv_heads``, ``caches_tokens``,
    ``is_windowed``).
    """

    FULL, SLIDING, CHUNKED, MLA, RECURRENT, NONE = "full", "sliding", "chunked", "mla", "recurrent", "none"
    ALL = (FULL, SLIDING, CHUNKED, MLA, RECURRENT, NONE)
    # attention over per-head K and V: n_kv heads of head_dim / v_head_dim (split by tp, paged, masked per pattern)
    KV_HEADS = (FULL, SLIDING, CHUNKED)
    # a per-token cache that grows with T: the K/V kinds and MLA's latent (all attention, MLA included)
    CACHED = KV_HEADS + (MLA,)
    # keeps at most a window (sliding) or the current chunk (chunked)
    WINDOWED = (SLIDING, CHUNKED)


RECURRENT_FAMILIES = ("mamba", "mamba2", "gated_deltanet", "rg_lru",
                      "short_conv", "kda", "lightning", "cca", "rwkv")  # the last five: kvsim.calc.families_hybrid
# State tensors the reference implementation of each family keeps in fp32 whatever the model dtype;
# every other state tensor (the conv window, Mamba-1's SSM state) follows the model dtype.
#   mamba2: mlx-lm ssm.py (dt is cast to fp32, so the SSD state is fp32);
#   gated_deltanet: mlx-lm gated_delta.py (state zeros in fp32) and transformers' Qwen3-Next;
#   rg_lru: transformers' RecurrentGemma (recurrent_states in torch.float32);
#   mamba: mlx-lm mamba.py / jamba.py and transformers' MambaCache keep it in the model dtype.
REFERENCE_FP32_STATES = {"mamba": (), "mamba2": ("ssm",), "gated_deltanet": ("ssm",), "rg_lru": ("ssm",),
                         # transformers: LFM2 keeps a conv only; KDA's state fp32; MiniMax's and ZAYA's in the
                         # model dtype
                         "short_conv": (), "kda": ("ssm",), "lightning": (), "cca": (), "rwkv": ("wkv",)}


# fields kvsim makes one object per unit of: bounded by MAX_LAYERS, every other count by MAX_COUNT
LAYER_COUNT_FIELDS = ("num_hidden_layers", "n_layer")


def config_int(cfg: Mapping, *names, default=...):
    """First present (non-null) key among ``names`` as a positive int (12.0 reads as 12); else ``default``.

    Accepted: an integer in [1, MAX_LAYERS] for a layer count, [1, MAX_COUNT] otherwise
    (:func:`kvsim.calc.validate.config_count`: bools and non-integral or huge floats are refused).
    """
    for name in names:
        value = cfg.get(name)
        if value is not None:
            return config_count(name, value, 1, MAX_LAYERS if name in LAYER_COUNT_FIELDS else MAX_COUNT)
    if default is ...:
        raise ConfigError(f"config is missing {names[0]} (a positive integer)")
    return default


def freeze(value):
    """A read-only deep copy of JSON-like data: mappings -> MappingProxyType, lists -> tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def _float_key(field_name: str, dtype) -> str:
    """'fp32' / 'bf16' / 'fp16' for any spelling of a float dtype; InputError naming the field otherwise."""
    key = dtype_key(dtype)
    if key not in FLOAT_DTYPES:
        raise InputError(f"{field_name} {dtype!r} is not one of {', '.join(FLOAT_DTYPES)}")
    return key


@dataclass(frozen=True)
class LayerSpec:
    """What one decoder layer caches.

    Attention kinds (full/sliding/chunked) cache K of ``head_dim`` and V of ``v_head_dim``
    for each of ``num_key_value_heads`` heads. ``mla`` caches ``kv_lora_rank +
    qk_rope_head_dim`` elements shared by all heads, plus ``index_head_dim`` elements of single-head
    indexer key on a DeepSeek Sparse Attention layer that runs its indexer (DeepSeek-V3.2, GLM-5); a full layer
    with ``index_head_dim`` caches that indexer key per token beside its K/V (MiniMax-M3's sparse layers). ``recurrent`` keeps ``state_shapes``
    per sequence (no batch axis), whatever the number of tokens, each tensor in the dtype
    :meth:`state_dtypes` gives (fp32 where the family's reference implementation keeps it so);
    an attention layer with ``state_shapes`` keeps both (a parallel recurrent mixer, as in Falcon-H1).

    DeepSeek-V4 (:func:`kvsim.calc.families_attention.deepseek_v4`): ``k_eq_v`` caches one tensor that is both K and V
    (n_kv·d_k per token); ``compress_ratio`` m > 0 adds ⌊T/m⌋ compressed entries of ``head_dim`` elements
    (+ ``index_head_dim`` of compressed indexer key) beside the sliding window, growing with T.
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
    index_head_dim: int = 0
    k_eq_v: bool = False
    compress_ratio: int = 0

    def __post_init__(self):
        if self.kind not in Kind.ALL:
            raise ConfigError(f"layer kind {self.kind!r} is not one of {', '.join(Kind.ALL)}")
        if self.has_kv_heads:
            positive_int("num_key_value_heads", self.num_key_value_heads, ConfigError)
            positive_int("head_dim", self.head_dim, ConfigError)
            if self.v_head_dim == 0:
                object.__setattr__(self, "v_head_dim", self.head_dim)
        if self.kind == "sliding":
            positive_int("sliding_window", self.sliding_window, ConfigError)
        if self.kind == "chunked":
            positive_int("attention_chunk_size", self.attention_chunk_size, ConfigError)
        if self.kind == "mla":
            positive_int("kv_lora_rank", self.kv_lora_rank, ConfigError)
            positive_int("qk_rope_head_dim", self.qk_rope_head_dim, ConfigError)
        if self.compress_ratio:
            positive_int("compress_ratio", self.compress_ratio, ConfigError)
            if self.kind != "sliding" or not self.k_eq_v:
                raise ConfigError("compress_ratio (DeepSeek-V4 compressed entries) applies to sliding K=V layers")
        if self.index_head_dim:
            if self.kind not in ("mla", "full") and not self.compress_ratio:
                raise ConfigError(f"index_head_dim (indexer keys) applies to mla, full or compressed layers, "
                                  f"not {self.kind}")
            positive_int("index_head_dim", self.index_head_dim, ConfigError)
        if self.kind == "recurrent" or self.state_shapes:
            if self.kind in (Kind.MLA, Kind.NONE):
                raise ConfigError(f"a {self.kind} layer keeps no recurrent state; state_shapes must be empty")
            if self.recurrent_family not in RECURRENT_FAMILIES:
                raise ConfigError(
                    f"recurrent_family {self.recurrent_family!r} is not one of "
                    f"{', '.join(RECURRENT_FAMILIES)}")
            if not self.state_shapes:
                raise ConfigError("state_shapes must list at least one state tensor")

    @property
    def has_kv_heads(self) -> bool:
        """Full, sliding or chunked attention: K and V per KV head (:attr:`Kind.KV_HEADS`)."""
        return self.kind in Kind.KV_HEADS

    @property
    def caches_tokens(self) -> bool:
        """An attention layer, MLA included: its cache grows with the tokens (:attr:`Kind.CACHED`)."""
        return self.kind in Kind.CACHED

    @property
    def is_windowed(self) -> bool:
        """Sliding or chunked: keeps at most :attr:`window_tokens` (:attr:`Kind.WINDOWED`)."""
        return self.kind in Kind.WINDOWED

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
        """Cached elements per token for one sequence: 2·n_kv·d_h (n_kv·d_h when K = V), or d_c + d_h^R
        (+ d_I indexer keys) for MLA; a compressed layer's entries are :meth:`compressed_entries` apart."""
        if self.has_kv_heads:  # + MiniMax-M3's indexer key on its sparse full layers (not V4's: per entry)
            indexer = 0 if self.compress_ratio else self.index_head_dim
            return self.num_key_value_heads * (self.head_dim + (0 if self.k_eq_v else self.v_head_dim)) + indexer
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim + self.index_head_dim
        return 0

    @property
    def compressed_dim(self) -> int:
        """Elements of one compressed entry (DeepSeek-V4): head_dim + index_head_dim; 0 on other layers."""
        return self.head_dim + self.index_head_dim if self.compress_ratio else 0

    def compressed_entries(self, tokens):
        """Compressed entries after T tokens: ⌊T/m⌋ (0 when the layer does not compress)."""
        return tokens // self.compress_ratio if self.compress_ratio else tokens * 0

    @property
    def state_elements(self) -> int:
        """Elements of fixed recurrent state per sequence (0 for attention layers)."""
        return sum(math.prod(shape) for _, shape in self.state_shapes)

    def state_dtypes(self, model_dtype="bf16", state_dtype=None) -> tuple[tuple[str, str], ...]:
        """(name, dtype) per state tensor, dtypes as 'fp32' / 'bf16' / 'fp16'.

        ``state_dtype`` given: every tensor in it (an override). None: as the family's reference
        implementation keeps them (:data:`REFERENCE_FP32_STATES` in fp32, the rest in ``model_dtype``).
        """
        model, forced = _float_key("model_dtype", model_dtype), state_dtype is not None
        forced_key = _float_key("state_dtype", state_dtype) if forced else None
        fp32 = REFERENCE_FP32_STATES.get(self.recurrent_family, ())
        return tuple((name, forced_key if forced else "fp32" if name in fp32 else model)
                     for name, _ in self.state_shapes)


@dataclass(frozen=True)
class ModelSpec:
    """A model as kvsim sees it: its layers, the sizes weights need, and what the MLX model reads.

    Typed fields (config.json names; the default is what a config that omits the key gets):

    - ``rope_theta`` = 10000.0: RoPE base.
    - ``partial_rotary_factor`` = 1.0: fraction of each head's features RoPE rotates (Qwen3-Next, Griffin).
    - ``query_pre_attn_scalar`` = None: attention scale is its -1/2 power (Gemma); None = head_dim^-1/2.
    - ``rms_norm_eps`` = 1e-6: RMSNorm epsilon (``layer_norm_epsilon`` in Mamba configs).
    - ``tie_word_embeddings``: the output head reuses the input table; default True for Gemma, Mamba
      and RecurrentGemma (their transformers classes), False otherwise (``tie_embeddings`` in mamba_ssm).
    - ``intermediate_size`` = None, ``moe_intermediate_size`` = None: dense FFN width, one expert's width.
    - ``qk_nope_head_dim`` = 0, ``v_head_dim`` = 0, ``q_lora_rank`` = 0: MLA's per-head query/key width
      without RoPE, value width, and query compression rank (0 or null: the query is not compressed).
      ``v_head_dim`` is MLA's; attention layers carry theirs in :attr:`LayerSpec.v_head_dim`.
    - ``time_step_rank`` = None: Mamba's Δ projection rank (``mamba_dt_rank`` in Jamba, ``dt_rank`` in
      mamba_ssm); None ("auto") = ⌈hidden_size / 16⌉.
    - ``linear_num_key_heads`` = 0: Gated DeltaNet key heads (0 = as many as value heads).

    ``config`` is the parsed config.json itself (family defaults merged in), frozen deeply; a plain
    dict given to the constructor or to ``dataclasses.replace`` is frozen on the way in.
    """

    name: str
    model_type: str
    layers: tuple[LayerSpec, ...]
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int | None = None
    torch_dtype: str | None = None
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    query_pre_attn_scalar: float | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    time_step_rank: int | None = None
    linear_num_key_heads: int = 0
    config: Mapping = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "config", freeze(self.config))

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
