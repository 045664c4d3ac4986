"""Golden values for ``kvsim calc --engine vllm``, computed by vLLM 0.33.0's own planning code on a CPU.

Usage (vLLM's source unzipped, never pip-installed into kvsim's venv: the wheel pulls a CUDA torch):
    pip download --no-deps vllm==0.33.0 -d /tmp/vllm_whl && unzip /tmp/vllm_whl/*.whl -d /tmp/vllm_src
    pip install --no-deps --target /tmp/vllm_deps <the pure-Python imports vllm.v1.core needs>
    VLLM_SRC=/tmp/vllm_src VLLM_DEPS=/tmp/vllm_deps python tools/vllm_golden.py > tests/data/vllm_golden.json

What runs inside vLLM (public names only):
- page sizes: ``vllm/v1/kv_cache_interface.py`` ``FullAttentionSpec``, ``SlidingWindowSpec``,
  ``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``, ``MambaSpec`` ``.page_size_bytes``;
- Mamba state shapes and dtypes: ``vllm/model_executor/layers/mamba/mamba_utils.py``
  ``MambaStateShapeCalculator`` and ``MambaStateDtypeCalculator``;
- groups: ``vllm/v1/core/kv_cache_planning.py`` ``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``;
- maximum concurrency: ``vllm/v1/core/kv_cache_utils.py`` ``get_max_concurrency_for_kv_cache_config``;
- blocks held: ``vllm/v1/core/kv_cache_manager.py`` ``KVCacheManager.allocate_slots`` on a real ``Request``,
  one step per scheduler step (prompt chunks of max_num_batched_tokens, then 1-token decode steps), with the
  scheduler's bookkeeping (``Scheduler._update_after_schedule`` / ``update_from_output``: num_computed_tokens
  and num_in_flight_tokens, the previous step in flight under async scheduling) done here.
Derived here from vLLM's source because the function is private or needs a GPU model build (named beside
each value in the JSON): the hybrid block size and Mamba page padding (``vllm/platforms/interface.py``
``Platform._align_hybrid_block_size``), the per-layer attention type of each model file
(``vllm/model_executor/models/<family>.py``), align mode (``model_executor/models/config.py``
``MambaModelConfig.verify_and_update_config``), NemotronH's fp32 SSM state
(``NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype``), the FlashMLA 64-token block for fp8 MLA
(``v1/attention/backends/mla/flashmla.py``), the 128-token block alignment beside MLA in hybrids (the same
``_align_hybrid_block_size``) and Bailing V3's layer rule (``models/bailing_moe_v3.py`` ``_is_kda_layer``). For
LFM2, Kimi-Linear, Bailing-Hybrid, Kolibri-1 and Beam (HF_CONFIG_FAMILIES) the layer list and state arguments are
read from the config object vLLM loads (``transformers_utils/config.py``: vLLM's own KimiLinearConfig and
BeamConfig, else transformers' class), and the states come from ``short_conv_state_shape`` / ``kda_state_shape``
with ``short_conv_state_dtype`` / ``kda_state_dtype``. Layer specs are built from each ``data/models/*.json`` by hand
here, not through kvsim's parser; for issue 17's families (``families/<type>``) FAMILY_FILES names the model file
each layer list transcribes (it lands in the row's provenance), and a ``#variant`` sets keys a real checkpoint
writes (VARIANTS; the row keeps them as ``config_overrides``). The SSM state dtype a model's config class sets
(``model_executor/models/config.py``: NemotronH fp32, Qwen3.5's ``mamba_ssm_dtype``) is applied here too.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [os.environ.get("VLLM_SRC", "/tmp/vllm_src"), os.environ.get("VLLM_DEPS", "/tmp/vllm_deps")]

MODELS = {  # name: kv dtype
    "llama-3-8b": "bf16", "llama-3-8b@fp8": "fp8", "mistral-7b-v0.1": "bf16", "gemma-3-27b": "bf16",
    "gpt-oss-20b": "bf16", "llama-4-scout": "bf16", "deepseek-v3": "bf16", "deepseek-v3@fp8": "fp8",
    "jamba-v0.1": "bf16", "granite-4.0-h-small": "bf16", "nemotron-h-8b": "bf16", "qwen3-next-80b-a3b": "bf16",
    "mamba2-2.7b": "bf16", "falcon-mamba-7b": "bf16",
    # issue 17's families (data/models/families/*.json): attention-only, and Mamba-2 / Gated DeltaNet hybrids
    "families/gpt2": "bf16", "families/qwen3_moe": "bf16", "families/glm4": "bf16", "families/gemma": "bf16",
    "families/starcoder2": "bf16", "families/olmoe": "bf16", "families/zamba2": "bf16",
    "families/olmo_hybrid": "bf16", "families/qwen3_5": "bf16", "families/qwen3_5@fp8": "fp8",
    "families/gemma3n": "bf16", "falcon-h1-0.5b": "bf16", "families/qwen3_5#ssm-fp32": "bf16",
    # LFM2 short conv, KDA beside MLA, and two sliding + full MoE families (issue 17, after the rows above)
    "families/lfm2": "bf16", "families/lfm2#conv-layers": "bf16", "families/lfm2_moe": "bf16",
    "families/kimi_linear#checkpoint-keys": "bf16", "families/bailing_hybrid": "bf16", "families/kolibri1": "bf16",
    "families/beam": "bf16",
}
# name#variant: the family config with these keys set in its (text) config, as real checkpoints write them
VARIANTS = {"ssm-fp32": {"mamba_ssm_dtype": "float32"},  # Qwen3.5 checkpoints: the GDN state kept in fp32
            # LFM2 checkpoints: conv layers (LFM2-350M/1.2B's attention layers 2, 5, 8, 10, 12, 14; layer_types left
            # to Lfm2Config to derive) and conv_dim = hidden_size, the width vLLM's lfm2.py reads
            "conv-layers": {"full_attn_idxs": [2, 5, 8, 10, 12, 14], "layer_types": None, "conv_dim": 2560},
            # Kimi-Linear checkpoints: linear_attn_config (1-indexed lists, here this config's layer_types) and NoPE
            # MLA, the keys vLLM's KimiLinearConfig and kimi_k3/nvidia/model.py read
            "checkpoint-keys": {"linear_attn_config": {
                "full_attn_layers": [5, 9, 13, 17, 21, 25],
                "kda_layers": [1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 14, 15, 16, 18, 19, 20, 22, 23, 24, 26, 27],
                "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4}, "mla_use_nope": True},
            # Bailing-Hybrid with KDA sizes transformers reads (linear_*) unlike the ones vLLM reads: no golden row
            # (not in MODELS); tests/test_engines_vllm.py runs it live, so kvsim must follow vLLM's keys
            "linear-keys": {"linear_num_heads": 16, "linear_head_dim": 96, "linear_conv_kernel_dim": 3}}
# per family: the vLLM 0.33 model file whose attention and Mamba layers the layer list below transcribes
FAMILY_FILES = {
    "families/gpt2": "models/gpt2.py GPT2Attention (MHA, head_dim = hidden / n_head)",
    "families/qwen3_moe": "models/qwen3_moe.py Qwen3MoeAttention (head_dim = config.head_dim or hidden / heads)",
    "families/glm4": "models/glm4.py Glm4Attention (head_dim = config.head_dim or hidden / heads)",
    "families/gemma": "models/gemma.py GemmaAttention (head_dim = config.head_dim)",
    "families/starcoder2": "models/transformers/base.py (Starcoder2ForCausalLM runs on the Transformers backend; "
                           "sliding_window null: full)",
    "families/olmoe": "models/olmoe.py OlmoeAttention (head_dim = hidden / heads)",
    "families/zamba2": "models/zamba2.py Zamba2Model: every layer a Mamba-2 mixer, each 'hybrid' layer also an "
                       "Attention(num_attention_heads, attention_head_dim) with its own KV cache",
    "families/olmo_hybrid": "models/olmo_hybrid.py: layer_types, GDN (gated_delta_net_state_shape) or "
                            "OlmoHybridAttention (head_dim = hidden / heads)",
    "families/qwen3_5": "models/qwen3_5.py: text_config.layer_types, GDN or full attention (config.head_dim)",
    "families/gemma3n": "models/gemma3n.py Gemma3nAttention: layer_types (sliding_window or full); the last "
                        "num_kv_shared_layers set kv_sharing_target_layer_name, so v1/worker/gpu_model_runner.py "
                        "get_kv_cache_spec gives them no spec",
    "falcon-h1-0.5b": "models/falcon_h1.py: every layer attention (config.head_dim) beside a Mamba-2 mixer "
                      "(intermediate mamba_d_ssm)",
    "families/lfm2": "models/lfm2.py: Lfm2Config.layer_types, full_attention -> Lfm2Attention (head_dim = hidden / "
                     "heads), conv -> ShortConv (short_conv_state_shape of conv_dim, conv_L_cache); all full "
                     "attention: ModelConfig.is_hybrid false, no Mamba alignment",
    "families/lfm2_moe": "models/lfm2_moe.py: layer_types, full_attention -> attention (head_dim = hidden / heads), "
                         "conv -> ShortConv (short_conv_state_shape of hidden_size, conv_L_cache)",
    "families/kimi_linear": "models/kimi_k3/nvidia/model.py KimiLinearForCausalLM: KimiLinearConfig.is_kda_layer -> "
                            "KimiGatedDeltaNetAttention (kda_state_shape of linear_attn_config num_heads, head_dim, "
                            "short_conv_kernel_size; no prefill checkpoint), else MultiHeadLatentAttention "
                            "(MLAAttentionSpec kv_lora_rank + qk_rope_head_dim)",
    "families/bailing_hybrid": "models/bailing_moe_v3.py BailingMoeV3ForCausalLM (vLLM's implementation of this HF "
                               "model; its config class BailingMoeV3TextConfig is model_type bailing_hybrid): "
                               "_is_kda_layer -> BailingMoeV3KimiDeltaAttention (kda_state_shape of "
                               "num_attention_heads, head_dim as transformers' BailingHybridConfig sets it, "
                               "short_conv_kernel_size), else BailingMoeV3MLAAttention",
    "families/kolibri1": "models/transformers/base.py (Kolibri1ForCausalLM runs on the Transformers backend: "
                         "per_layer_sliding_window = sliding_window on sliding_attention layers)",
    "families/beam": "models/beam/nvidia/attention.py BeamAttention (head_dim = config.head_dim; "
                     "per_layer_sliding_window = sliding_window on sliding_attention layers)",
}
# the config class vLLM 0.33 loads for these families (transformers_utils/config.py: its own where _CONFIG_REGISTRY
# names one, else transformers'); their layer lists and states are read from its attributes
HF_CONFIG_FAMILIES = ("families/lfm2", "families/lfm2_moe", "families/kimi_linear", "families/bailing_hybrid",
                      "families/kolibri1", "families/beam")
TOKENS = (1024, 8192, 131072)
DECODE_STEPS = (0, 100)  # P = T - D
MAX_NUM_BATCHED_TOKENS = 8192  # engine/arg_utils.py get_batch_defaults: API server, H100/H200
KV_CACHE_MEMORY_BYTES = 40 * 2**30
# a larger budget where one 128K request needs more than 40 GiB (the row records it): gemma-7b's 16 KV heads of 256
KV_CACHE_MEMORY_OVERRIDES = {"families/gemma": 100 * 2**30}
BLOCK = 16  # config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE
FLASHMLA_BLOCK = 64  # v1/attention/backends/mla/flashmla.py (fp8 MLA on SM90)
GDN_CHECKPOINT_ALIGNMENT = 64  # v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT


def _cfg(name):
    cfg = json.loads((ROOT / "data" / "models" / f"{name}.json").read_text())
    return cfg.get("text_config", cfg)


def hf_config(name, cfg):
    """The config object vLLM builds from ``cfg``: vLLM's KimiLinearConfig / BeamConfig, else transformers' class."""
    if name == "families/kimi_linear":
        from vllm.transformers_utils.configs.kimi_linear import KimiLinearConfig
        return KimiLinearConfig(**cfg)
    if name == "families/beam":
        from vllm.transformers_utils.configs import BeamConfig
        return BeamConfig(**cfg)
    import transformers
    return transformers.AutoConfig.for_model(**cfg)


def attention_geometry(name, cfg):
    """(num_kv_heads, head_size) of the attention layers, as vLLM's model file computes them."""
    if name in ("families/lfm2", "families/lfm2_moe"):  # Lfm2Attention: head_dim = hidden / heads
        return cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    if name in ("families/kolibri1", "families/beam"):
        return cfg.num_key_value_heads, cfg.head_dim
    if name in ("families/kimi_linear", "families/bailing_hybrid"):  # MLA: the latent (see build)
        return 1, cfg.kv_lora_rank + cfg.qk_rope_head_dim
    if name == "families/gpt2":
        return cfg["n_head"], cfg["n_embd"] // cfg["n_head"]
    if name == "families/zamba2":
        return cfg["num_attention_heads"], cfg["attention_head_dim"]
    if name in ("families/olmoe", "families/olmo_hybrid"):
        return cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    d = (cfg.get("head_dim") or cfg.get("attention_head_dim")
         or cfg.get("hidden_size", 1) // cfg.get("num_attention_heads", 1))
    return cfg.get("num_key_value_heads"), d


def layer_types(name, cfg):
    """Per-layer (type, arg) as vLLM's model file builds them: full, sliding W, chunked C, mla, mamba1/2, gdn,
    full+mamba2 (an attention layer beside a Mamba-2 mixer)."""
    if name in HF_CONFIG_FAMILIES:
        n = cfg.num_hidden_layers
        if name in ("families/lfm2", "families/lfm2_moe"):
            return [("full", None) if t == "full_attention" else ("shortconv", None) for t in cfg.layer_types]
        if name == "families/kimi_linear":
            return [("kda", None) if cfg.is_kda_layer(i) else ("mla", None) for i in range(n)]
        if name == "families/bailing_hybrid":  # bailing_moe_v3.py _is_kda_layer (transcribed: private)
            g = cfg.layer_group_size
            return [("mla", None) if (i + 1) % g == 0 or i >= n // g * g else ("kda", None) for i in range(n)]
        return [("sliding", cfg.sliding_window) if t == "sliding_attention" else ("full", None)
                for t in cfg.layer_types]
    n = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    if name in ("families/gpt2", "families/qwen3_moe", "families/glm4", "families/gemma", "families/olmoe"):
        assert not cfg.get("use_sliding_window") and not cfg.get("sliding_window")
        return [("full", None)] * n
    if name == "families/starcoder2":
        assert cfg.get("sliding_window") is None and "layer_types" not in cfg
        return [("full", None)] * n
    if name == "families/zamba2":
        return [("full+mamba2", None) if t == "hybrid" else ("mamba2", None) for t in cfg["layers_block_type"]]
    if name == "families/gemma3n":  # KV-shared layers (None) hold no spec
        first_shared = n - cfg["num_kv_shared_layers"]
        return [(None, None) if i >= first_shared else ("sliding", cfg["sliding_window"])
                if t == "sliding_attention" else ("full", None) for i, t in enumerate(cfg["layer_types"])]
    if name.startswith("falcon-h1"):
        return [("full+mamba2", None)] * n
    if name in ("families/olmo_hybrid", "families/qwen3_5"):
        return [{"linear_attention": ("gdn", None), "full_attention": ("full", None)}[t] for t in cfg["layer_types"]]
    if name.startswith(("llama-3", "deepseek")):
        return [("mla" if "deepseek" in name else "full", None)] * n
    if name.startswith("mistral"):  # CacheConfig.sliding_window = HF sliding_window: every layer
        return [("sliding", cfg["sliding_window"])] * n
    if name.startswith("gemma-3"):  # gemma3.py: config.layer_types, full every sliding_window_pattern-th
        p = cfg.get("sliding_window_pattern", 6)
        return [("full", None) if (i + 1) % p == 0 else ("sliding", cfg["sliding_window"]) for i in range(n)]
    if name.startswith("gpt-oss"):
        return [("sliding", cfg["sliding_window"]) if t == "sliding_attention" else ("full", None)
                for t in cfg["layer_types"]]
    if name.startswith("llama-4"):  # llama4.py: chunked where no_rope_layers[i] (RoPE layers)
        return [("chunked", cfg["attention_chunk_size"]) if r else ("full", None) for r in cfg["no_rope_layers"]]
    if name.startswith("jamba"):
        return [("full", None) if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"] else ("mamba1", None)
                for i in range(n)]
    if name.startswith("granite"):
        return [("full", None) if t == "attention" else ("mamba2", None) for t in cfg["layer_types"]]
    if name.startswith("nemotron"):
        return [{"M": ("mamba2", None), "*": ("full", None)}.get(c, (None, None))
                for c in cfg["hybrid_override_pattern"]]
    if name.startswith("qwen3-next"):
        k = cfg["full_attention_interval"]
        return [("full", None) if (i + 1) % k == 0 else ("gdn", None) for i in range(n)]
    if name.startswith("mamba2"):
        return [("mamba2", None)] * n
    if name.startswith("falcon-mamba"):
        return [("mamba1", None)] * n
    raise KeyError(name)


def mamba_state(name, cfg, kind, torch, shape_calc, dtype_calc):
    """(shapes, dtypes, checkpoint alignment or None) from vLLM's own calculators."""
    mdt = torch.bfloat16
    if kind == "shortconv":  # lfm2.py reads conv_dim, lfm2_moe.py hidden_size; ShortConv exports no checkpoint
        width = cfg.conv_dim if name == "families/lfm2" else cfg.hidden_size
        return (shape_calc.short_conv_state_shape(1, width, cfg.conv_L_cache),
                dtype_calc.short_conv_state_dtype(mdt, "auto"), None)
    if kind == "kda":  # get_mamba_state_shape_from_config of each model; kda_state_dtype(model dtype, "auto")
        if name == "families/kimi_linear":
            lin = cfg.linear_attn_config
            shapes = shape_calc.kda_state_shape(1, lin["num_heads"], lin["head_dim"],
                                                conv_kernel_size=lin["short_conv_kernel_size"])
        else:
            shapes = shape_calc.kda_state_shape(1, cfg.num_attention_heads, cfg.head_dim,
                                                conv_kernel_size=cfg.short_conv_kernel_size)
        return shapes, dtype_calc.kda_state_dtype(mdt, "auto"), None
    ssm_dt = "float32" if name.startswith("nemotron") else "auto"
    if name == "families/qwen3_5":  # Qwen3_5ForConditionalGenerationConfig: text_config.mamba_ssm_dtype, where given
        ssm_dt = cfg.get("mamba_ssm_dtype") or "auto"
    if kind == "mamba1":
        d_inner = (cfg.get("intermediate_size") if name.startswith("falcon")
                   else cfg["mamba_expand"] * cfg["hidden_size"])
        shapes = shape_calc.mamba1_state_shape(1, d_inner, cfg.get("state_size") or cfg["mamba_d_state"],
                                               cfg.get("conv_kernel") or cfg["mamba_d_conv"])
        return shapes, dtype_calc.mamba1_state_dtype(mdt, "auto", ssm_dt), None
    if kind == "gdn":
        shapes = shape_calc.gated_delta_net_state_shape(
            1, cfg["linear_num_key_heads"], cfg["linear_num_value_heads"], cfg["linear_key_head_dim"],
            cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"])
        return shapes, dtype_calc.gated_delta_net_state_dtype(mdt, "auto", ssm_dt), GDN_CHECKPOINT_ALIGNMENT
    if name.startswith("granite"):
        h, p = cfg["mamba_n_heads"], cfg["mamba_d_head"]
        args = (cfg["mamba_expand"] * cfg["hidden_size"], cfg["mamba_n_groups"], h, p, cfg["mamba_d_state"],
                cfg["mamba_d_conv"])
    elif name.startswith("falcon-h1"):  # falcon_h1.py get_mamba_state_shape_from_config
        d = cfg.get("mamba_d_ssm") or int(cfg["mamba_expand"] * cfg["hidden_size"])
        h, p = cfg["mamba_n_heads"], cfg["mamba_d_head"]
        args = (d, cfg["mamba_n_groups"], h, p, cfg["mamba_d_state"], cfg["mamba_d_conv"])
    elif name == "families/zamba2":  # zamba2.py get_mamba_state_shape_from_config
        h, p = cfg["n_mamba_heads"], cfg["mamba_headdim"]
        args = (cfg["mamba_expand"] * cfg["hidden_size"], cfg["mamba_ngroups"], h, p, cfg["mamba_d_state"],
                cfg["mamba_d_conv"])
    elif name.startswith("nemotron"):
        h, p = cfg["mamba_num_heads"], cfg["mamba_head_dim"]
        args = (h * p, cfg["n_groups"], h, p, cfg["ssm_state_size"], cfg["conv_kernel"])
    else:  # mamba2-2.7b (mamba_ssm config: d_model, ssm_cfg defaults of Mamba2: headdim 64, d_state 128, ngroups 1)
        d = 2 * cfg["d_model"]
        args = (d, 1, d // 64, 64, 128, 4)
    return shape_calc.mamba2_state_shape(1, *args), dtype_calc.mamba2_state_dtype(mdt, "auto", ssm_dt), 1


def build(name, kv, T, D):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import (
        get_max_concurrency_for_kv_cache_config,
        get_request_block_hasher,
        init_none_hash,
    )
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        KVQuantMode,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )
    from vllm.v1.request import Request
    from vllm.sampling_params import SamplingParams

    base, _, variant = name.split("@")[0].partition("#")
    overrides = VARIANTS[variant] if variant else {}
    cfg = {**_cfg(base), **overrides}
    if base in HF_CONFIG_FAMILIES:
        cfg = hf_config(base, cfg)
    types = layer_types(base, cfg)
    attn_dtype = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    quant = KVQuantMode.FP8_PER_TENSOR if kv == "fp8" else KVQuantMode.NONE
    n_kv, d = attention_geometry(base, cfg)
    mla = any(t == "mla" for t, _ in types)
    has_attn = any(t in ("full", "sliding", "chunked", "mla", "full+mamba2") for t, _ in types)
    mamba_kinds = [t.split("+")[-1] for t, _ in types
                   if t and t.split("+")[-1] in ("mamba1", "mamba2", "gdn", "shortconv", "kda")]
    L = T
    prefix_caching = has_attn  # ModelConfig.is_prefix_caching_supported: off for attention-free models
    mode = ("align" if prefix_caching else "none") if mamba_kinds else None
    block = FLASHMLA_BLOCK if (mla and kv == "fp8") else BLOCK
    provenance = {"block_size": "config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE"
                  + ("; v1/attention/backends/mla/flashmla.py (fp8 MLA)" if block == FLASHMLA_BLOCK else "")}
    mamba_pad, mamba_block = None, None
    if mamba_kinds:
        shapes, dtypes, align = mamba_state(base, cfg, mamba_kinds[0], torch, MambaStateShapeCalculator,
                                            MambaStateDtypeCalculator)
        mamba_page = MambaSpec(shapes=shapes, dtypes=dtypes, block_size=-1).page_size_bytes
        if has_attn:  # platforms/interface.py Platform._align_hybrid_block_size (transcribed: private)
            attn_pt = (MLAAttentionSpec(block_size=1, num_kv_heads=1, head_size=d, dtype=attn_dtype,
                                        kv_quant_mode=quant, cache_dtype_str="fp8" if kv == "fp8" else "auto")
                       if mla else FullAttentionSpec(block_size=1, num_kv_heads=n_kv, head_size=d, dtype=attn_dtype,
                                                     kv_quant_mode=quant)).page_size_bytes
            a = max(16, block)
            if mla:  # model_config.use_mla: the manager block a multiple of 128 (TRTLLM/FlashInfer MLA decode)
                a = max(a, 128)
            if mode == "align":
                a = math.lcm(a, align or 1)
            new = a * -(-mamba_page // (a * attn_pt))
            new = 16 * -(-new // 16)
            block = max(block, new)
            mamba_pad = block * attn_pt if block * attn_pt != mamba_page else None
            provenance["hybrid_block_size"] = "platforms/interface.py Platform._align_hybrid_block_size (derived)"
        mamba_block = block if mode == "align" else L  # MambaModelConfig.verify_and_update_config
    layers = {}
    if base in FAMILY_FILES:
        provenance["layers"] = FAMILY_FILES[base]
    for i, (t, arg) in enumerate(types):
        key = f"model.layers.{i}"
        common = dict(block_size=block, num_kv_heads=n_kv, head_size=d, dtype=attn_dtype, kv_quant_mode=quant)
        if t == "full+mamba2":  # zamba2: the hybrid layer's attention, then its Mamba-2 mixer below
            layers[key + ".attn"] = FullAttentionSpec(**common)
            key, t = key + ".mamba", "mamba2"
        if t == "full":
            layers[key] = FullAttentionSpec(**common)
        elif t == "sliding":
            layers[key] = SlidingWindowSpec(**common, sliding_window=arg)
        elif t == "chunked":
            layers[key] = ChunkedLocalAttentionSpec(**common, attention_chunk_size=arg)
        elif t == "mla":
            layers[key] = MLAAttentionSpec(block_size=block, num_kv_heads=1,
                                           head_size=(cfg.kv_lora_rank + cfg.qk_rope_head_dim
                                                      if base in HF_CONFIG_FAMILIES
                                                      else cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]),
                                           dtype=attn_dtype, kv_quant_mode=quant,
                                           cache_dtype_str="fp8" if kv == "fp8" else "auto")
        elif t in ("mamba1", "mamba2", "gdn", "shortconv", "kda"):
            shapes, dtypes, align = mamba_state(base, cfg, t, torch, MambaStateShapeCalculator,
                                                MambaStateDtypeCalculator)
            ckpt = dict(num_prefill_checkpoint_blocks=1,
                        prefill_checkpoint_alignment=(mamba_block if t == "gdn" else 1)) \
                if (mode == "align" and align is not None) else {}
            layers[key] = MambaSpec(shapes=shapes, dtypes=dtypes, block_size=mamba_block,
                                    page_size_padded=mamba_pad, mamba_cache_mode=mode, **ckpt)

    sched = SchedulerConfig(max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS, max_model_len=L, is_encoder_decoder=False)
    cache = CacheConfig(block_size=block, enable_prefix_caching=prefix_caching)
    vc = VllmConfig(scheduler_config=sched, cache_config=cache, device_config=DeviceConfig(device="cpu"))
    # GPU defaults the CPU platform turns off: async scheduling, the hybrid KV cache manager
    vc.scheduler_config.async_scheduling = True
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False
    vc.cache_config.mamba_cache_mode = mode or "none"
    vc.cache_config.kv_cache_layout = "LBNHC"  # FLASH_ATTN's NHD
    vc.model_config = type("M", (), {"max_model_len": L})()  # the only ModelConfig field the specs read

    groups = get_kv_cache_groups(vc, dict(layers))
    budget = KV_CACHE_MEMORY_OVERRIDES.get(base, KV_CACHE_MEMORY_BYTES)
    kcc = get_kv_cache_config_from_groups(vc, groups, budget)
    concurrency = get_max_concurrency_for_kv_cache_config(vc, kcc)
    bs_sched = math.lcm(*(g.kv_cache_spec.block_size for g in groups)) if len(groups) > 1 else block
    if mamba_kinds and not has_attn:
        bs_sched = block if len(groups) > 1 else groups[0].kv_cache_spec.block_size
    mgr = KVCacheManager(kv_cache_config=kcc, max_model_len=L, scheduler_block_size=bs_sched,
                         hash_block_size=bs_sched, max_in_flight_tokens=vc.max_in_flight_tokens,
                         enable_caching=prefix_caching)
    P = T - D
    hash_fn = get_hash_fn_by_name("sha256")  # CacheConfig.prefix_caching_hash_algo default
    init_none_hash(hash_fn)
    req = Request("r0", list(range(P)), SamplingParams(max_tokens=D + 1), None,
                  block_hasher=get_request_block_hasher(bs_sched, hash_fn))
    m = MAX_NUM_BATCHED_TOKENS  # chunked prefill: the prompt in steps of at most m, then 1-token decode steps
    steps = [m] * (P // m) + ([P % m] if P % m else []) + [1] * D
    computed, pending = 0, None
    from vllm.v1.request import RequestStatus
    for k, n in enumerate(steps):
        if k == 0:
            blocks, hit = mgr.get_computed_blocks(req)[:2]
            out = mgr.allocate_slots(req, n, hit, blocks)
            req.status = RequestStatus.RUNNING
        else:
            out = mgr.allocate_slots(req, n)
        assert out is not None, "allocation failed"
        req.num_computed_tokens += n  # Scheduler._update_after_schedule
        req.num_in_flight_tokens += n
        computed += n
        done = [pending] if pending is not None else []
        pending = n
        if k == len(steps) - 1:
            break
        for m in done:  # update_from_output of the previous step (async: one step in flight)
            req.num_in_flight_tokens -= m
            if req.num_computed_tokens - n >= P:
                req.append_output_token_ids(computed)
    held = [sum(1 for b in blks if not b.is_null) for blks in
            (mgr.coordinator.single_type_managers[g].req_to_blocks["r0"] for g in range(len(groups)))]
    group_rows = []
    for g, h in zip(groups, held):
        spec = g.kv_cache_spec
        first = spec.kv_cache_specs[g.layer_names[0]] if hasattr(spec, "kv_cache_specs") else spec
        group_rows.append({"spec": type(first).__name__, "layers": len(g.layer_names),
                           "page_size_bytes": first.page_size_bytes, "block_size_tokens": first.block_size,
                           "blocks_held": h})
    bytes_per_block = kcc.kv_cache_tensors[0].size // kcc.num_blocks if kcc.kv_cache_tensors else 0
    return {
        "model": base, **({"config_overrides": overrides} if overrides else {}), "kv_dtype": kv, "tokens": T,
        "prompt_tokens": P, "decode_steps": D,
        "block_size_tokens": block, "kv_cache_groups": group_rows,
        "num_blocks": kcc.num_blocks, "block_id_bytes": bytes_per_block,
        "held_bytes": sum(held) * bytes_per_block,
        "max_concurrency": concurrency, "provenance": provenance,
        **({"kv_cache_memory_bytes": budget} if budget != KV_CACHE_MEMORY_BYTES else {}),
    }


def main():
    import vllm.v1.kv_cache_interface  # noqa: F401  (fails loudly without vLLM's source)

    rows = [build(name, kv, T, D) for name, kv in MODELS.items() for T in TOKENS for D in DECODE_STEPS]
    json.dump({
        "vllm_version": "0.33.0", "source": "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl (PyPI), run on CPU",
        "functions": ["vllm/v1/core/kv_cache_planning.py get_kv_cache_groups, get_kv_cache_config_from_groups",
                      "vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config",
                      "vllm/v1/core/kv_cache_manager.py KVCacheManager.allocate_slots",
                      "vllm/v1/kv_cache_interface.py *Spec.page_size_bytes",
                      "vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator, "
                      "MambaStateDtypeCalculator"],
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS, "kv_cache_memory_bytes": KV_CACHE_MEMORY_BYTES,
        "async_scheduling": True, "max_model_len": "= tokens", "rows": rows,
    }, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
