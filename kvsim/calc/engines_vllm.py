"""What vLLM 0.33 plans and holds for one request on one GPU (pure Python: no torch, no vLLM import).

Contract
- :func:`vllm_plan` follows vLLM 0.33.0's own planning for a model kvsim reads, one request of P prompt
  tokens and D decode steps (T = P + D cached tokens), on one tensor-parallel rank:
  1. **Layer specs** (``vllm/v1/kv_cache_interface.py``): full → ``FullAttentionSpec``, sliding →
     ``SlidingWindowSpec``, chunked → ``ChunkedLocalAttentionSpec``, MLA → ``MLAAttentionSpec``
     (kv_lora_rank + qk_rope_head_dim elements, no V, one latent replicated on every TP rank),
     Mamba-1 / Mamba-2 / Gated DeltaNet → ``MambaSpec`` (conv K − 1 columns + the temporal state, both
     in the model dtype; the SSM state fp32 for NemotronH and in Qwen3.5's mamba_ssm_dtype,
     :func:`ssm_state_dtype`); LFM2's short conv → ``MambaSpec`` of one conv state (K − 1, conv width) in
     the model dtype; KDA (Kimi-Linear, Bailing-Hybrid) → conv (K − 1, 3·H·d) in the model dtype and the
     recurrent state (H, d, d) in fp32 (``kda_state_dtype``). :func:`vllm_model_keys` reads the keys those
     model files read (LFM2 conv_dim; Kimi-Linear linear_attn_config and mla_use_nope; Bailing V3's layer
     rule and head_dim) and refuses a config they could not run. A page is one block of one layer:
     attention bs·n_kv·(d_k + d_v)·b, MLA bs·576·b, Mamba Σ numel·b of one request's state.
  2. **Block size**: 16 (``CacheConfig.DEFAULT_BLOCK_SIZE``), 64 for fp8 MLA (FlashMLA on SM90). Hybrids
     (attention + Mamba): block = a·⌈mamba_page / (a·attn_page_1_token)⌉, a = lcm(16, prefill checkpoint
     alignment) in align mode (GDN 64, Mamba-2 1, Mamba-1, short conv and KDA none), at least 128 beside
     MLA, and the Mamba page padded to
     block·attn_page_1_token (``Platform._align_hybrid_block_size``, ``platforms/interface.py``).
  3. **Groups** (``v1/core/kv_cache_planning.py`` ``get_kv_cache_groups``): one group when every layer has
     the same spec or one type; else buckets by spec, group_size = the smallest bucket unless the
     largest is < 1.5× it (then the largest), each bucket split into ⌈n/group_size⌉ groups
     (``layers[i::k]``), padding slots = groups·group_size − layers. One pool: a block id spans the
     largest group's pages (``_get_kv_cache_bytes_per_block``).
  4. **Blocks held** (``v1/core/single_type_kv_cache_manager.py``): the prompt is scheduled in chunks of
     ``max_num_batched_tokens``, then one token per decode step; before each step's allocation
     ``remove_skipped_blocks`` frees whole blocks below the processed tokens' skip point (window:
     processed − W + 1; chunk: ⌊processed/C⌋·C; full/MLA: none). Under async scheduling (default) the
     previous step is still in flight, so processed = computed − its tokens. Mamba: 1 block (mode
     "none"), in align mode the manager's checkpoint rule (:func:`mamba_blocks_held`).
  5. **Maximum concurrency** (``v1/core/kv_cache_utils.py`` ``get_max_concurrency_for_kv_cache_config``):
     ⌊budget / bytes per block id⌋ ÷ Σ_groups per-request reservation pages, with L = max_model_len and
     in-flight tokens = 2 × max_num_batched_tokens (``VllmConfig.max_in_flight_tokens``): full/MLA ⌈L/bs⌉,
     window ⌈min(W − 1 + in-flight, L)/bs⌉ + 1, chunk ⌈min(C + in-flight, L)/bs⌉, Mamba 2 + checkpoint
     blocks (align) or 1 (none). A reservation bound, not what a request holds.
- Tensor parallelism: :func:`kvsim.calc.memory.heads_per_rank` is the one rule (split when tp divides n_kv, one head
  replicated when n_kv divides tp, refused otherwise); query heads must divide by tp; Mamba states are
  sharded (Mamba-2 groups padded to tp when tp does not divide them).
- fp8 (``--kv-dtype fp8``): 1 B elements, one per-tensor K scale and V scale per attention layer, kept
  outside the page. Grouped qN modes have no vLLM counterpart: :class:`~kvsim.calc.units.InputError`.
- :func:`layer_rows` gives the held bytes per decoder layer (:func:`kvsim.calc.engines.vllm_bytes` makes
  them an EngineBytes; this module imports no other engine module); :func:`plan_fields` is the plan's part
  of the JSON block ``kvsim calc --engine vllm`` prints (:func:`kvsim.calc.engines_all.vllm_summary`).
- Checked against vLLM 0.33.0's own classes and managers run on a CPU: ``tools/vllm_golden.py`` writes
  ``tests/data/vllm_golden.json``; ``tests/test_engines_vllm.py`` asserts equality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import Kind, LayerSpec, ModelSpec
from .families_hybrid import VLLM_NOT_GENERATIVE
from .memory import heads_per_rank
from .units import DEFAULT_BLOCK_SIZE, DTYPE_BYTES, FLOAT_DTYPES, InputError, dtype_key, format_bytes, positive_int

VLLM_VERSION = "0.33.0"
# config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (FLASH_ATTN, TRITON_ATTN, FLASH_ATTN_MLA): kvsim's paged default
VLLM_BLOCK_SIZE = DEFAULT_BLOCK_SIZE
FLASHMLA_BLOCK_SIZE = 64  # v1/attention/backends/mla/flashmla.py: fp8 MLA on SM90
# engine/arg_utils.py get_batch_defaults: the API server on a >= 70 GB non-A100 GPU (H100, H200)
VLLM_MAX_NUM_BATCHED_TOKENS = 8192
ASYNC_CONCURRENT_BATCHES = 2  # config/vllm.py VllmConfig.max_concurrent_batches, async scheduling, PP = 1
# model_executor/layers/mamba/*: get_prefill_checkpoint_alignment (GDN with FlashInfer prefill on SM90: 64; LFM2's
# ShortConv, Kimi-Linear's KimiGatedDeltaNetAttention and Bailing V3's KDA declare none)
PREFILL_CHECKPOINT_ALIGNMENT = {"mamba": None, "mamba2": 1, "gated_deltanet": 64, "short_conv": None, "kda": None}
# mamba_utils.py MambaStateDtypeCalculator.kda_state_dtype: the KDA recurrent state is fp32 under "auto" (Kimi-Linear
# and Bailing V3 pass no --mamba-ssm-cache-dtype); the conv state keeps the model dtype
KDA_STATE_DTYPE = "fp32"
# model_executor/models/config.py: the SSM state dtype a model's config sets when --mamba-ssm-cache-dtype is "auto":
# NemotronHForCausalLMConfig (its config's mamba_ssm_cache_dtype, else DEFAULT_MAMBA_SSM_CACHE_DTYPE float32) and
# Qwen3_5ForConditionalGenerationConfig (text_config.mamba_ssm_dtype where given: Qwen3.5 checkpoints write float32)
SSM_DTYPE_KEYS = {"nemotron_h": ("mamba_ssm_cache_dtype", "fp32"),
                  **{t: ("mamba_ssm_dtype", None) for t in ("qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                                              "qwen3_5_moe_text")}}
SPEC_CLASSES = {"full": "FullAttentionSpec", "sliding": "SlidingWindowSpec", "chunked": "ChunkedLocalAttentionSpec",
                "mla": "MLAAttentionSpec", "mamba": "MambaSpec"}


# ---------------------------------------------------------------- tensor parallelism


def _divide(name: str, value: int, tp: int) -> int:
    if value % tp:
        raise InputError(f"tp {tp} must divide {name} {value} (vLLM shards it across ranks)")
    return value // tp


# ---------------------------------------------------------------- per-layer specs


@dataclass(frozen=True)
class VllmLayer:
    """One vLLM KV-cache layer spec: its class, per-rank geometry and element bytes."""

    index: int  # the decoder layer it belongs to
    spec: str  # full, sliding, chunked, mla, mamba
    num_kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    dtype_bytes: int = 0
    window: int | None = None
    chunk: int | None = None
    state: tuple[tuple[str, tuple[int, ...], int], ...] = ()  # (name, shape, bytes per element)
    family: str | None = None

    @property
    def page_bytes_per_token(self) -> int:
        """Attention: n_kv·(d_k + d_v)·b per token (0 for Mamba)."""
        return self.num_kv_heads * (self.head_size + self.head_size_v) * self.dtype_bytes

    @property
    def state_bytes(self) -> int:
        """Mamba: Σ numel·b of one request's state (``MambaSpec.page_size_bytes`` before padding)."""
        return sum(math.prod(shape) * b for _, shape, b in self.state)

    def key(self):
        """What makes two layers the same spec (they share a bucket)."""
        return (self.spec, self.num_kv_heads, self.head_size, self.head_size_v, self.dtype_bytes, self.window,
                self.chunk, self.state, self.family if self.spec == "mamba" else None)


def _model_dtype(spec: ModelSpec, kv: str) -> str:
    if kv in FLOAT_DTYPES:
        return kv
    cfg = dtype_key(spec.torch_dtype) if spec.torch_dtype else "bf16"
    return cfg if cfg in FLOAT_DTYPES else "bf16"


def _mamba_state(layer: LayerSpec, tp: int, model_b: int, ssm_b: int, model_keys: dict):
    """vLLM's state tensors of one Mamba-type layer on one rank (``MambaStateShapeCalculator``); ``model_keys``
    the widths vLLM's model file reads where kvsim's parser reads others (:func:`vllm_model_keys`)."""
    fam = layer.recurrent_family
    if fam in ("lightning", "cca"):  # kvsim.calc.families_hybrid's state families
        raise InputError(f"kvsim does not model vLLM {VLLM_VERSION}'s {fam} state (MiniMax lightning attention, ZAYA "
                         "CCA); --engine vllm accepts Mamba-1, Mamba-2, Gated DeltaNet, KDA and LFM2 short-conv hybrids")
    shapes = dict(layer.state_shapes)
    k1, conv_dim = shapes["conv"]  # kvsim keeps (K − 1, conv_dim), as vLLM does
    if fam == "short_conv":  # short_conv_state_shape: conv (K − 1, width/tp) in the model dtype, nothing else
        width = model_keys.get("conv_width", conv_dim)
        return (("conv", (k1, _divide("the short conv width", width, tp)), model_b),)
    if fam == "kda":  # kda_state_shape: conv (K − 1, (H·d + 2·H·d)/tp), recurrent (H/tp, d, d) in fp32
        h, d, _ = shapes["ssm"]
        h, d = model_keys.get("kda_heads", h), model_keys.get("kda_head_dim", d)
        k1 = model_keys.get("kda_kernel", k1 + 1) - 1
        return (("conv", (k1, _divide("the KDA conv width", 3 * h * d, tp)), model_b),
                ("ssm", (_divide("KDA heads", h, tp), d, d), DTYPE_BYTES[KDA_STATE_DTYPE]))
    if fam == "mamba":  # mamba1_state_shape: conv (d_inner/tp, K − 1), temporal (d_inner/tp, N)
        d_inner, n = shapes["ssm"]
        d = _divide("the Mamba inner width", d_inner, tp)
        return (("conv", (d, k1), model_b), ("ssm", (d, n), ssm_b))
    if fam == "mamba2":  # mamba2_state_shape with extra_groups_for_head_shards
        h, p, n = shapes["ssm"]
        d_inner = h * p
        g = (conv_dim - d_inner) // (2 * n)
        g += 0 if g % tp == 0 else tp - g
        conv = _divide("the Mamba-2 conv width", d_inner + 2 * g * n, tp)
        return (("conv", (conv, k1), model_b), ("ssm", (_divide("mamba heads", h, tp), p, n), ssm_b))
    if fam == "gated_deltanet":  # gated_delta_net_state_shape
        hv, dv, dk = shapes["ssm"]
        return (("conv", (_divide("the Gated DeltaNet conv width", conv_dim, tp), k1), model_b),
                ("ssm", (_divide("linear_num_value_heads", hv, tp), dv, dk), ssm_b))
    raise InputError(f"vLLM {VLLM_VERSION} has no model with {fam} layers (RecurrentGemma is not supported)")


def ssm_state_dtype(spec: ModelSpec, model_dtype: str) -> str:
    """The dtype vLLM keeps Mamba / GDN temporal states in: the model's, unless the model's config class sets
    one (:data:`SSM_DTYPE_KEYS`: NemotronH fp32 by default, Qwen3.5 its mamba_ssm_dtype)."""
    key, default = SSM_DTYPE_KEYS.get(spec.model_type, (None, None))
    value = spec.config.get(key) if key else None
    if value is None:
        return default or model_dtype
    name = dtype_key(value)
    if name not in FLOAT_DTYPES:
        raise InputError(f"{key} must be one of float32, bfloat16, float16; got {value!r}")
    return name


def vllm_model_keys(spec: ModelSpec) -> dict:
    """What vLLM 0.33's model file reads for the state of LFM2 / Kimi-Linear / Bailing-Hybrid where kvsim's parser
    reads other keys: ``conv_width`` (LFM2: conv_dim), ``kda_heads`` / ``kda_head_dim`` / ``kda_kernel`` (Bailing:
    num_attention_heads, the config class's head_dim = qk_rope_head_dim, short_conv_kernel_size, where transformers
    reads linear_num_heads / linear_head_dim / linear_conv_kernel_dim); a config vLLM cannot run is refused with
    the key it lacks."""
    cfg, n = spec.config, len(spec.layers)
    recurrent = {i for i, x in enumerate(spec.layers) if x.state_shapes}
    if spec.model_type == "lfm2" and recurrent:
        if cfg.get("conv_dim") is None:  # Lfm2ForCausalLM.get_mamba_state_shape_from_config: hf_config.conv_dim
            raise InputError(f"vLLM {VLLM_VERSION}'s models/lfm2.py sizes LFM2's conv state by conv_dim, which this "
                             "config lacks (LFM2 checkpoints write conv_dim = hidden_size)")
        return {"conv_width": positive_int("conv_dim", cfg["conv_dim"])}
    if spec.model_type == "kimi_linear":
        lin = cfg.get("linear_attn_config") or {}
        if not all(isinstance(lin.get(k), (list, tuple)) for k in ("kda_layers", "full_attn_layers")):
            raise InputError(f"vLLM {VLLM_VERSION} builds Kimi-Linear's KDA layers from linear_attn_config.kda_layers "
                             "and .full_attn_layers, lists of 1-indexed layers (transformers_utils/configs/"
                             "kimi_linear.py), which this config does not give (Kimi-Linear checkpoints write them)")
        if cfg.get("mla_use_nope") is not True:
            raise InputError(f"vLLM {VLLM_VERSION}'s models/kimi_k3/nvidia/model.py runs Kimi-Linear's MLA layers only "
                             "with mla_use_nope true (it asserts it; Kimi-Linear checkpoints write it)")
        if {i - 1 if isinstance(i, int) and not isinstance(i, bool) else None for i in lin["kda_layers"]} != recurrent:
            raise InputError("linear_attn_config.kda_layers (1-indexed: the layers vLLM makes KDA) must be the "
                             "layers layer_types makes linear_attention")
    if spec.model_type == "bailing_hybrid":
        g = positive_int("layer_group_size", cfg.get("layer_group_size", 6))
        # bailing_moe_v3.py _is_kda_layer: MLA every g-th layer and on every layer after the last whole group
        if {i for i in range(n) if (i + 1) % g and i < n // g * g} != recurrent:
            raise InputError(f"vLLM {VLLM_VERSION}'s models/bailing_moe_v3.py makes every layer_group_size-th layer "
                             "(and those after the last whole group) MLA, the rest KDA; layer_types must say the same")
        # _get_kda_state_shape_for_config: kda_state_shape(tp, config.num_attention_heads, config.head_dim,
        # config.short_conv_kernel_size) on the config object vLLM loads, transformers' BailingHybridConfig (no
        # vLLM class for bailing_hybrid), whose __post_init__ sets head_dim = qk_rope_head_dim whatever the file says
        return {"kda_heads": positive_int("num_attention_heads", cfg.get("num_attention_heads")),
                "kda_head_dim": positive_int("qk_rope_head_dim", cfg.get("qk_rope_head_dim", 64)),
                "kda_kernel": positive_int("short_conv_kernel_size", cfg.get("short_conv_kernel_size", 4))}
    return {}


def layer_specs(spec: ModelSpec, kv_dtype="bf16", tp: int = 1) -> tuple[VllmLayer, ...]:
    """The per-layer KV-cache specs vLLM builds on one rank (an attention layer with a parallel Mamba
    mixer, as in Falcon-H1, gives two specs)."""
    kv = dtype_key(kv_dtype)
    if kv not in DTYPE_BYTES:
        raise InputError(f"kv dtype {kv_dtype!r} has no vLLM {VLLM_VERSION} counterpart for kvsim; accepted: "
                         f"{', '.join(DTYPE_BYTES)} (vLLM's int8 exists only as int8_per_token_head)")
    if spec.model_type in VLLM_NOT_GENERATIVE:
        raise InputError(f"vLLM {VLLM_VERSION} does not run model_type {spec.model_type!r} as a generative model "
                         "(not in its _TEXT_GENERATION_MODELS registry): no KV cache to plan")
    tp = positive_int("tp", tp)
    if spec.num_attention_heads % tp:
        raise InputError(f"tp {tp} must divide num_attention_heads {spec.num_attention_heads}")
    if any(x.k_eq_v for x in spec.layers):  # DeepSeek-V4
        raise InputError(f"kvsim does not model vLLM {VLLM_VERSION}'s DeepSeek-V4 caches (vllm/models/deepseek_v4: "
                         "MLAAttentionSpec pages for the window and the compressed entries, SlidingWindowMLASpec for "
                         "the compressor state); use --engine kvsim or transformers")
    if any(x.index_head_dim for x in spec.layers):  # h22-fam-attn
        raise InputError(f"vLLM {VLLM_VERSION} keeps {spec.model_type}'s indexer keys (index_head_dim: DSA, MiniMax-M3) in a cache "
                         "of their own that kvsim does not model; use --engine kvsim or transformers")
    b = DTYPE_BYTES[kv]
    model_b = DTYPE_BYTES[_model_dtype(spec, kv)]
    ssm_b = DTYPE_BYTES[ssm_state_dtype(spec, _model_dtype(spec, kv))]
    model_keys = vllm_model_keys(spec)
    out = []
    for i, layer in enumerate(spec.layers):
        if layer.has_kv_heads:
            out.append(VllmLayer(i, layer.kind, heads_per_rank(layer, tp), layer.head_dim,
                                 layer.v_head_dim, b, layer.sliding_window if layer.kind == "sliding" else None,
                                 layer.attention_chunk_size if layer.kind == "chunked" else None))
        elif layer.kind == "mla":
            out.append(VllmLayer(i, "mla", 1, layer.kv_lora_rank + layer.qk_rope_head_dim, 0, b))
        if layer.state_shapes:
            out.append(VllmLayer(i, "mamba", state=_mamba_state(layer, tp, model_b, ssm_b, model_keys),
                                 family=layer.recurrent_family))
    return tuple(out)


# ---------------------------------------------------------------- block size and pages


def hybrid_block_size(attn_page_per_token: int, mamba_page: int, alignment: int = VLLM_BLOCK_SIZE,
                      block_size: int = VLLM_BLOCK_SIZE) -> int:
    """Attention block of an attention + Mamba hybrid: a·⌈mamba_page / (a·attn_page_per_token)⌉, only raised."""
    a = max(alignment, block_size)
    return max(block_size, a * -(-mamba_page // (a * attn_page_per_token)))


@dataclass(frozen=True)
class BlockPlan:
    """Block size, Mamba mode and the page of every layer."""

    block_size_tokens: int
    mamba_cache_mode: str  # "align", "none", or "" without Mamba layers
    mamba_block_size_tokens: int | None
    prefix_caching: bool
    pages: tuple[int, ...]  # per VllmLayer, after padding
    mamba_padding_bytes: int  # per Mamba layer page


def block_plan(layers, kv_dtype="bf16", max_model_len: int = 0, prefix_caching: bool | None = None) -> BlockPlan:
    """Block size (16; 64 for fp8 MLA; raised for hybrids), Mamba cache mode and every layer's page."""
    attn = [x for x in layers if x.spec != "mamba"]
    mamba = [x for x in layers if x.spec == "mamba"]
    fp8_mla = dtype_key(kv_dtype) == "fp8" and any(x.spec == "mla" for x in attn)
    bs = FLASHMLA_BLOCK_SIZE if fp8_mla else VLLM_BLOCK_SIZE
    if prefix_caching is None:  # ModelConfig.is_prefix_caching_supported: off for attention-free models
        prefix_caching = bool(attn)
    mode, mamba_bs, pad = "", None, 0
    if mamba:
        mode = "align" if prefix_caching else "none"  # MambaModelConfig.verify_and_update_config
        mamba_page = max(x.state_bytes for x in mamba)
        if attn:
            a = VLLM_BLOCK_SIZE
            if any(x.spec == "mla" for x in attn):
                a = max(a, 128)
            if mode == "align":
                aligns = [PREFILL_CHECKPOINT_ALIGNMENT[x.family] for x in mamba]
                a = math.lcm(a, 1 if None in aligns else math.lcm(*aligns))
            bs = hybrid_block_size(attn[0].page_bytes_per_token, mamba_page, a, bs)
            pad = bs * attn[0].page_bytes_per_token - mamba_page
        mamba_bs = bs if mode == "align" else max_model_len
    pages = tuple(x.state_bytes + pad if x.spec == "mamba" else bs * x.page_bytes_per_token for x in layers)
    return BlockPlan(bs, mode, mamba_bs, prefix_caching, pages, pad)


# ---------------------------------------------------------------- groups


@dataclass(frozen=True)
class Group:
    """One KV-cache group: the layers sharing a block table."""

    spec: str
    window: int | None
    chunk: int | None
    layers: tuple[int, ...]  # positions in the layer-spec list
    page_size_bytes: int  # one layer's page (0 for a one-type group with mixed pages: see pages)
    block_size_tokens: int


def kv_cache_groups(layers, plan: BlockPlan) -> tuple[tuple[Group, ...], int, int]:
    """(groups, group_size, padding slots) as ``get_kv_cache_groups`` forms them."""
    if not layers:
        return (), 0, 0
    n = len(layers)

    def group(members, bs=plan.block_size_tokens):
        x = layers[members[0]]
        pages = {plan.pages[i] for i in members}
        return Group(x.spec, x.window, x.chunk, tuple(members), pages.pop() if len(pages) == 1 else 0,
                     plan.mamba_block_size_tokens if x.spec == "mamba" else bs)

    first = layers[0]
    one_type = all(x.spec == first.spec and x.window == first.window and x.chunk == first.chunk for x in layers)
    same = len({x.key() for x in layers}) == 1
    mamba_same = first.spec != "mamba" or len({plan.pages[i] for i in range(n)}) == 1
    if same or (one_type and mamba_same):  # is_kv_cache_spec_uniform / UniformTypeKVCacheSpecs
        return (group(list(range(n))),), n, 0
    page = max(plan.pages)  # unify_kv_cache_spec_page_size: smaller attention pages get larger blocks
    scale = {i: page // plan.pages[i] if page % plan.pages[i] == 0 else 1 for i in range(n)}
    buckets: dict = {}
    for i, x in enumerate(layers):
        buckets.setdefault((x.key(), scale[i]), []).append(i)
    counts = [len(v) for v in buckets.values()]
    size = min(counts)
    if max(counts) < 1.5 * size:
        size = max(counts)
    groups = []
    for (_, s), members in buckets.items():
        k = -(-len(members) // size)
        groups += [group(members[j::k], plan.block_size_tokens * s) for j in range(k)]
    groups = [Group(g.spec, g.window, g.chunk, g.layers, page, g.block_size_tokens) for g in groups]
    return tuple(groups), size, len(groups) * size - n


def bytes_per_block_id(groups, plan: BlockPlan) -> int:
    """Bytes one block id spans in the shared pool: the largest group's Σ pages (``_get_kv_cache_bytes_per_block``)."""
    # after unify_kv_cache_spec_page_size every layer of a group has the group's page (a larger block)
    return max((sum(g.page_size_bytes or plan.pages[i] for i in g.layers) for g in groups), default=0)


# ---------------------------------------------------------------- blocks held by one request


def schedule(prompt_tokens: int, decode_steps: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """Tokens of each scheduler step for one request: the prompt in chunks of max_num_batched_tokens
    (chunked prefill), then one token per decode step."""
    p, m = positive_int("prompt_tokens", prompt_tokens), positive_int("max_num_batched_tokens", max_num_batched_tokens)
    return (m,) * (p // m) + ((p % m,) if p % m else ()) + (1,) * decode_steps


def skipped_tokens(group: Group, processed: int) -> int:
    """Tokens below the attention window of the next token (``get_num_skipped_tokens``)."""
    if group.spec == "sliding":
        return max(0, processed - group.window + 1)
    if group.spec == "chunked":
        return processed // group.chunk * group.chunk
    return 0


def attention_blocks_held(group: Group, steps, async_scheduling: bool = True) -> int:
    """Blocks an attention group holds at the last step: each step frees the whole blocks below the
    processed tokens' skip point (``remove_skipped_blocks``), then grows the table to ⌈(computed + n)/bs⌉."""
    bs, table, freed, computed = group.block_size_tokens, 0, 0, 0
    for k, n in enumerate(steps):
        in_flight = steps[k - 1] if async_scheduling and k else 0
        freed = max(freed, min(skipped_tokens(group, max(0, computed - in_flight)) // bs, table))
        table = max(table, -(-(computed + n) // bs))
        computed += n
    return table - freed


def checkpoint_position(tokens: int, hash_block: int) -> int:
    """Where a prefill's reusable Mamba state lands: ⌊(tokens − 1)/hb⌋·hb
    (``kv_cache_interface.py`` ``get_mamba_prefill_checkpoint_position``)."""
    return max((tokens - 1) // hash_block * hash_block, 0)


def needs_checkpoint(start: int, end: int, prompt_tokens: int, bs: int, alignment: int | None) -> bool:
    """Whether a prefill chunk [start, end) exports an internal Mamba checkpoint block
    (``MambaManager._needs_internal_checkpoint``, ``is_mamba_prefill_checkpoint_valid``; hash block = bs)."""
    if alignment is None or end < prompt_tokens:
        return False
    cp = checkpoint_position(end, bs)
    return (start % bs == 0 and -(-end // bs) - 2 > (start - 1) // bs and start + bs <= cp
            and start < cp < end and (cp - start) % alignment == 0)


def mamba_blocks_held(bs: int, steps, prompt_tokens: int, alignment: int | None = None,
                      async_scheduling: bool = True) -> int:
    """Mamba state blocks one request holds at its last step in align mode (``MambaManager``): each step
    frees the blocks below ⌊(processed − 1)/bs⌋ and the previous state block once it lies below
    ⌈processed/bs⌉ − 1, then, when the table must grow to ⌈(computed + n)/bs⌉ entries, pads it with null
    blocks and adds one state block at the end (two with a prefill checkpoint, at index ⌈end/bs⌉ − 2)."""
    table: list[bool] = []  # True = a real block
    last, computed = None, 0
    for k, n in enumerate(steps):
        processed = max(0, computed - (steps[k - 1] if async_scheduling and k else 0))
        if processed - 1 > 0:
            for j in range(min((processed - 1) // bs, len(table))):
                table[j] = False
        if last is not None and last < -(-processed // bs) - 1:
            table[last] = False
        end = computed + n
        required = -(-end // bs)
        ckpt = needs_checkpoint(computed, end, prompt_tokens, bs, alignment)
        if required > len(table) or ckpt:
            if table:
                last = len(table) - 1
            null_end = required - 1 - int(ckpt)
            table += [False] * max(0, null_end - len(table))
            table += [True] * max(0, required - len(table))
        computed = end
    return sum(table)


def blocks_held(group: Group, steps, mode: str, layers=(), prompt_tokens: int = 0,
                async_scheduling: bool = True) -> int:
    """Blocks one group holds for the request at its last scheduled step (Mamba mode "none": 1)."""
    if group.spec != "mamba":
        return attention_blocks_held(group, steps, async_scheduling)
    if mode != "align":
        return 1
    aligns = [PREFILL_CHECKPOINT_ALIGNMENT[layers[i].family] for i in group.layers]
    alignment = None if None in aligns else (group.block_size_tokens if 64 in aligns else 1)
    return mamba_blocks_held(group.block_size_tokens, steps, prompt_tokens, alignment, async_scheduling)


# ---------------------------------------------------------------- reservation and concurrency


def max_in_flight_tokens(max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS, async_scheduling: bool = True):
    """Tokens scheduled but not settled: max_concurrent_batches × max_num_batched_tokens."""
    return (ASYNC_CONCURRENT_BATCHES if async_scheduling else 1) * max_num_batched_tokens


def reservation_pages(group: Group, layers, mode: str, max_model_len: int, in_flight: int) -> int:
    """Pages one L-token request reserves in a group (``max_admission_blocks_per_request`` /
    ``max_memory_usage_bytes`` ÷ page)."""
    bs, L = group.block_size_tokens, max_model_len
    if group.spec == "sliding":
        return -(-min(group.window - 1 + in_flight, L) // bs) + 1
    if group.spec == "chunked":
        return -(-min(group.chunk + in_flight, L) // bs)
    if group.spec == "mamba":
        if mode != "align":
            return 1
        fam = {layers[i].family for i in group.layers}
        return 2 + (0 if any(PREFILL_CHECKPOINT_ALIGNMENT[f] is None for f in fam) else 1)
    return -(-L // bs)


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class VllmPlan:
    """What vLLM 0.33 plans and holds for one request (one TP rank)."""

    layers: tuple[VllmLayer, ...]
    blocks: BlockPlan
    groups: tuple[Group, ...]
    group_size: int
    padding_slots: int
    steps: tuple[int, ...]
    held_blocks: tuple[int, ...]  # per group
    reserved_pages: tuple[int, ...]  # per group, per L-token request
    max_model_len: int
    max_num_batched_tokens: int
    in_flight_tokens: int
    kv_cache_memory_bytes: int | None

    @property
    def block_id_bytes(self) -> int:
        return bytes_per_block_id(self.groups, self.blocks)

    @property
    def held_bytes(self) -> int:
        """Σ_groups blocks held × bytes per block id (padding slots included)."""
        return sum(self.held_blocks) * self.block_id_bytes

    @property
    def num_blocks(self) -> int | None:
        if self.kv_cache_memory_bytes is None or not self.groups:
            return None
        return self.kv_cache_memory_bytes // self.block_id_bytes

    @property
    def max_concurrency(self) -> float | None:
        """vLLM's logged "Maximum concurrency for L tokens per request": blocks ÷ Σ reserved pages."""
        blocks = self.num_blocks
        return None if blocks is None else blocks / sum(self.reserved_pages)

    def layer_held_bytes(self) -> list[tuple[int, str, int]]:
        """(decoder layer, spec, bytes held) per layer spec."""
        held = {}
        for g, n in zip(self.groups, self.held_blocks):
            for i in g.layers:
                held[i] = n * (g.page_size_bytes or self.blocks.pages[i])  # the unified page, if any
        return [(x.index, x.spec, held.get(j, 0)) for j, x in enumerate(self.layers)]


def vllm_plan(spec: ModelSpec, prompt_tokens: int, decode_steps: int = 0, kv_dtype="bf16", tp: int = 1,
              max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS, max_model_len: int | None = None,
              kv_cache_memory_bytes: int | None = None, async_scheduling: bool = True,
              prefix_caching: bool | None = None) -> VllmPlan:
    """vLLM 0.33's plan for one request of P + D tokens; ``max_model_len`` defaults to P + D."""
    steps = schedule(prompt_tokens, decode_steps, max_num_batched_tokens)
    t = sum(steps)
    L = t if max_model_len is None else positive_int("max_model_len", max_model_len)
    if t > L:
        raise InputError(f"prompt + decode steps ({t:,}) must be at most max_model_len ({L:,})")
    if kv_cache_memory_bytes is not None:
        positive_int("kv_cache_memory_bytes", kv_cache_memory_bytes)
    layers = layer_specs(spec, kv_dtype, tp)
    plan = block_plan(layers, kv_dtype, L, prefix_caching)
    groups, size, padding = kv_cache_groups(layers, plan)
    in_flight = max_in_flight_tokens(max_num_batched_tokens, async_scheduling)
    held = tuple(blocks_held(g, steps, plan.mamba_cache_mode, layers, prompt_tokens, async_scheduling)
                 for g in groups)
    reserved = tuple(reservation_pages(g, layers, plan.mamba_cache_mode, L, in_flight) for g in groups)
    return VllmPlan(layers, plan, groups, size, padding, steps, held, reserved, L, max_num_batched_tokens,
                    in_flight, kv_cache_memory_bytes)


def layer_rows(spec: ModelSpec, plan: VllmPlan) -> list[tuple[int, str, str, int, int]]:
    """(layer, kind, spec classes, K/V bytes held, state bytes held) per decoder layer of ``spec``
    (:func:`kvsim.calc.engines.vllm_bytes` makes them an EngineBytes)."""
    rows = {i: [layer.kind, [], 0, 0] for i, layer in enumerate(spec.layers)}
    for index, kind, held in plan.layer_held_bytes():
        rows[index][1].append(SPEC_CLASSES[kind])
        rows[index][3 if kind == "mamba" else 2] += held
    return [(i, r[0], "+".join(r[1]), r[2], r[3]) for i, r in rows.items()]


def plan_fields(plan: VllmPlan) -> dict:
    """The plan's part of the JSON block ``kvsim calc --engine vllm`` prints."""
    pages = sorted(set(plan.blocks.pages))
    return {
        "vllm_version": VLLM_VERSION,
        "block_size_tokens": plan.blocks.block_size_tokens,
        "mamba_cache_mode": plan.blocks.mamba_cache_mode or None,
        "prefix_caching": plan.blocks.prefix_caching,
        "page_size_bytes": pages[0] if len(pages) == 1 else pages,
        "mamba_page_padding_bytes": plan.blocks.mamba_padding_bytes,
        "kv_cache_groups": [{"spec": SPEC_CLASSES[g.spec], "window": g.window, "chunk": g.chunk,
                             "block_size_tokens": g.block_size_tokens,
                             "layers": [plan.layers[i].index for i in g.layers],
                             "blocks_held": n, "reserved_pages": r}
                            for g, n, r in zip(plan.groups, plan.held_blocks, plan.reserved_pages)],
        "group_size": plan.group_size, "padding_slots": plan.padding_slots,
        "block_id_bytes": plan.block_id_bytes,
        "blocks_held": sum(plan.held_blocks), "held_bytes": plan.held_bytes,
        "max_model_len": plan.max_model_len, "max_num_batched_tokens": plan.max_num_batched_tokens,
        "in_flight_tokens": plan.in_flight_tokens,
        "kv_cache_memory_bytes": plan.kv_cache_memory_bytes, "num_blocks": plan.num_blocks,
        "max_concurrency": plan.max_concurrency,
    }


def format_vllm_summary(e: dict) -> str:
    """The lines ``kvsim calc --engine vllm`` prints, from :func:`vllm_summary`'s block."""
    lines = [f"  engine vllm {e['vllm_version']}: {e['prompt_tokens']:,}-token prompt + {e['decode_steps']:,} decode "
             f"steps ({e['model_calls']:,} scheduler steps of at most {e['max_num_batched_tokens']:,} tokens)",
             f"  block {e['block_size_tokens']} tokens, page {e['page_size_bytes']} B, "
             f"{len(e['kv_cache_groups'])} KV-cache groups of {e['group_size']} layers "
             f"({e['padding_slots']} padding slots), a block id spans {e['block_id_bytes']:,} B"]
    if e["mamba_cache_mode"]:
        lines.append(f"  Mamba cache mode {e['mamba_cache_mode']} (prefix caching "
                     f"{'on' if e['prefix_caching'] else 'off'}), Mamba page padded by "
                     f"{e['mamba_page_padding_bytes']:,} B")
    for g in e["kv_cache_groups"]:
        extra = f" W={g['window']}" if g["window"] else f" C={g['chunk']}" if g["chunk"] else ""
        lines.append(f"    {g['spec']}{extra}: {len(g['layers'])} layers, {g['blocks_held']} blocks held, "
                     f"{g['reserved_pages']} reserved per {e['max_model_len']:,}-token request")
    lines.append(f"  held by vllm: {e['held_bytes']:,} B ({format_bytes(e['held_bytes'])}) in {e['blocks_held']} "
                 f"block ids; layers' own pages {e['allocated_total_bytes']:,} B")
    if e["max_concurrency"] is not None:
        lines.append(f"  KV cache {e['kv_cache_memory_bytes']:,} B = {e['num_blocks']:,} blocks; maximum concurrency "
                     f"for {e['max_model_len']:,} tokens per request: {e['max_concurrency']:.2f}x "
                     f"(reservation bounds, in-flight {e['in_flight_tokens']:,} tokens)")
    return "\n".join(lines)
