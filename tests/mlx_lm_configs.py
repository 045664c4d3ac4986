"""Tiny Hugging Face configs that both kvsim's parser and mlx-lm 0.32's model classes accept.

Each keeps the per-layer geometry that decides cache bytes small but real in kind (GQA heads, MLA
widths, Mamba-2 heads, Gated DeltaNet heads); at most two layers unless the layout needs more
(llama4's every-4th global layer, gemma3_text's pattern). Mixture-of-experts blocks are avoided
(dense first layers, mlp_only_layers, no local experts): mlx's gather_mm runs only in float32 on CPU.

NEW_CONFIGS (issue 17's families) start from tests/transformers_configs.py instead and run in float32
(MoE included), the recurrent ones in bfloat16 too (BF16_TOO).
"""

from transformers_configs import CONFIGS as TRANSFORMERS_CONFIGS
from transformers_configs import W

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_hidden_layers": 2, "rms_norm_eps": 1e-5, "vocab_size": 64,
        "tie_word_embeddings": False, "rope_theta": 10000.0, "max_position_embeddings": 4096}

MAMBA2 = {"num_heads": 8, "head_dim": 16, "expand": 2, "state_size": 16, "n_groups": 1, "conv_kernel": 4,
          "layer_norm_epsilon": 1e-5, "use_bias": False, "use_conv_bias": True, "time_step_rank": 4,
          "time_step_limit": [0.0, 1e9]}

CONFIGS = {
    "llama": {**BASE, "model_type": "llama"},
    "llama_layer_types": {**BASE, "model_type": "llama", "num_hidden_layers": 4, "sliding_window": 16,
                          "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                                          "full_attention"]},
    "mistral": {**BASE, "model_type": "mistral", "sliding_window": 16},
    "phi3": {**BASE, "model_type": "phi3", "sliding_window": 16, "head_dim": None, "num_key_value_heads": 4},
    "gemma2": {**BASE, "model_type": "gemma2", "sliding_window": 16, "query_pre_attn_scalar": 16},
    "gemma3_text": {**BASE, "model_type": "gemma3_text", "sliding_window": 16, "sliding_window_pattern": 2,
                    "query_pre_attn_scalar": 16},
    "gpt_oss": {**BASE, "model_type": "gpt_oss", "sliding_window": 16, "num_local_experts": 1,
                "num_experts_per_tok": 1, "layer_types": ["sliding_attention", "full_attention"]},
    "llama4": {"model_type": "llama4", "text_config": {
        **BASE, "model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 16,
        "intermediate_size_mlp": 128, "num_local_experts": 1, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 8, "no_rope_layers": [1, 1, 1, 0], "attention_bias": False,
        "rope_scaling": None, "use_qk_norm": False}},
    "deepseek_v3": {**BASE, "model_type": "deepseek_v3", "kv_lora_rank": 32, "qk_rope_head_dim": 8,
                    "qk_nope_head_dim": 16, "v_head_dim": 16, "q_lora_rank": None, "n_routed_experts": 2,
                    "num_experts_per_tok": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 2,
                    "n_shared_experts": 1, "num_key_value_heads": 4},
    "mamba2": {**BASE, **MAMBA2, "model_type": "mamba2", "num_hidden_layers": 1, "tie_word_embeddings": True},
    "jamba": {**BASE, "model_type": "jamba", "attn_layer_period": 2, "attn_layer_offset": 1,
              "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 1, "num_experts_per_tok": 1,
              "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2},
    "qwen3_next": {**BASE, "model_type": "qwen3_next", "full_attention_interval": 2,
                   "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                   "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 2,
                   "num_experts_per_tok": 1, "decoder_sparse_step": 1, "shared_expert_intermediate_size": 64,
                   "mlp_only_layers": [0, 1], "moe_intermediate_size": 64, "partial_rotary_factor": 0.25},
}

MAMBA2_MIXER = {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_n_groups": 1,
                "mamba_d_conv": 4, "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False}

CONFIGS.update({
    "deepseek_v2": {**CONFIGS["deepseek_v3"], "model_type": "deepseek_v2",  # its attention needs yarn settings
                    "rope_scaling": {"type": "yarn", "factor": 1.0, "original_max_position_embeddings": 4096,
                                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}},
    "kimi_k2": {**CONFIGS["deepseek_v3"], "model_type": "kimi_k2"},
    "mamba": {**BASE, "model_type": "mamba", "num_hidden_layers": 1, "state_size": 16, "conv_kernel": 4,
              "use_bias": False, "use_conv_bias": True, "time_step_rank": 4, "tie_word_embeddings": True},
    "recurrent_gemma": {**BASE, "model_type": "recurrent_gemma", "num_hidden_layers": 3, "num_key_value_heads": 1,
                        "attention_window_size": 16, "conv1d_width": 4, "logits_soft_cap": 30.0,
                        "attention_bias": False, "block_types": ["recurrent", "recurrent", "attention"]},
    "cohere": {**BASE, "model_type": "cohere", "layer_norm_eps": 1e-5, "use_qk_norm": False, "head_dim": None},
    "cohere2": {**BASE, "model_type": "cohere2", "layer_norm_eps": 1e-5, "sliding_window": 16,
                "sliding_window_pattern": 2},
    "olmo2": {**BASE, "model_type": "olmo2"},
    "phimoe": {**BASE, "model_type": "phimoe", "num_local_experts": 2, "num_experts_per_tok": 1,
               "head_dim": None, "rope_scaling": None},
    "granitemoehybrid": {**BASE, **MAMBA2_MIXER, "model_type": "granitemoehybrid", "head_dim": None,
                         "layer_types": ["mamba", "attention"], "num_local_experts": 0,
                         "shared_intermediate_size": 64, "attention_bias": False, "embedding_multiplier": 1.0,
                         "attention_multiplier": 1.0, "logits_scaling": 1.0, "residual_multiplier": 1.0,
                         "position_embedding_type": "nope"},
    "nemotron_h": {**BASE, "model_type": "nemotron_h", "hybrid_override_pattern": "M-*-", "mamba_num_heads": 8,
                   "mamba_head_dim": 16, "ssm_state_size": 16, "conv_kernel": 4, "n_groups": 2,
                   "attention_bias": False, "mamba_proj_bias": False, "mlp_bias": False, "use_bias": False,
                   "use_conv_bias": True, "layer_norm_epsilon": 1e-5},
    "falcon_h1": {**BASE, **MAMBA2_MIXER, "model_type": "falcon_h1", "mamba_d_ssm": 128},
})

# ---------------------------------------------------------------- issue 17: the families kvsim learned since
# Each is the tiny config transformers is tested with (tests/transformers_configs.py, the checkpoints' own key
# names) plus what mlx-lm's ModelArgs requires and transformers fills in by default (NEUTRAL: no field that decides
# the cache), plus per family the fields mlx-lm reads without a default. Windows of 8 tokens (W) below a
# 40-token prompt, so every RotatingKVCache wraps.

NEUTRAL = {"rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False, "use_bias": False,
           "use_qkv_bias": False, "norm_topk_prob": True, "layer_norm_eps": 1e-5, "layer_norm_epsilon": 1e-5,
           "norm_eps": 1e-5, "rms_norm_eps": 1e-5, "rope_scaling": None, "tie_word_embeddings": False,
           "max_position_embeddings": 256}
MOE = {"n_shared_experts": 1, "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
       "scoring_func": "sigmoid", "moe_layer_freq": 1}
EXTRA = {
    "qwen3": {}, "stablelm": {"partial_rotary_factor": 0.25}, "nemotron": {"hidden_act": "relu2"},
    "gpt2": {"n_ctx": 256}, "gpt_bigcode": {"n_inner": 128}, "gpt_bigcode_mha": {"n_inner": 128},
    "gpt_neox": {"rotary_emb_base": 10000},
    "glm4": {"partial_rotary_factor": 0.5},
    "glm4_moe": {**MOE, "partial_rotary_factor": 0.5, "use_qk_norm": False, "head_dim": 16},
    "granite": {"logits_scaling": 1.0, "attention_multiplier": 1.0, "embedding_multiplier": 1.0,
                "residual_multiplier": 1.0},
    "granitemoe": {"logits_scaling": 1.0, "attention_multiplier": 1.0, "embedding_multiplier": 1.0,
                   "residual_multiplier": 1.0},
    "olmo3": {}, "exaone4": {"sliding_window_pattern": "LLG"}, "ernie4_5": {}, "helium": {},
    "qwen3_moe": {"decoder_sparse_step": 1, "mlp_only_layers": [0, 1]},
    "apertus": {"post_norm": False, "qk_norm": True}, "ernie4_5_moe": {},
    "minimax_m2": {"shared_intermediate_size": 0, "rotary_dim": 8},
    "afmoe": {"layer_types": ["sliding_attention", "sliding_attention", "full_attention"], "head_dim": 16},
    "minicpm3": {"dim_model_base": 64, "scale_depth": 1.0, "scale_emb": 1.0, "q_lora_rank": 16,
                 "rope_scaling": {"original_max_position_embeddings": 256}},
    "dots1": {**MOE},
    "exaone": {"num_layers": 2},
    "solar_open": {**MOE, "partial_rotary_factor": 1.0, "moe_intermediate_size": 32, "n_routed_experts": 2,
                   "num_experts_per_tok": 1, "first_k_dense_replace": 2},
    "mellum": {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32, "sliding_window": W,
               "layer_types": ["sliding_attention", "full_attention"],
               "rope_parameters": {t: {"rope_theta": 10000.0} for t in ("sliding_attention", "full_attention")}},
    "laguna": {"sliding_window": W, "layer_types": ["sliding_attention", "full_attention"]},
    "exaone_moe": {"num_shared_experts": 1, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                   "is_moe_layer": [False, True, False]},
    "gemma4_text": {},
    "lfm2": {"conv_bias": False, "block_dim": 64, "block_multiple_of": 16, "block_ffn_dim_multiplier": 1.0,
             "block_auto_adjust_ff_dim": False},
    "lfm2_layer_types": {"conv_bias": False, "block_dim": 64, "block_multiple_of": 16, "block_ffn_dim_multiplier": 1.0,
                         "block_auto_adjust_ff_dim": False},
    "lfm2_moe": {"use_expert_bias": False, "conv_bias": False},
    "olmo_hybrid": {"linear_allow_neg_eigval": False},
    "kimi_linear": {"head_dim": 16, "model_max_length": 256, "num_experts": 2},
    "bailing_hybrid": {"num_experts": 2, "num_shared_experts": 1, "group_norm_size": 1, "routed_scaling_factor": 1.0},
    "minimax": {"shared_intermediate_size": 0, "rotary_dim": 8},
}
# families whose tiny transformers config mlx-lm builds as it is
EXTRA.update({name: {} for name in (
    "gptj", "dbrx", "starcoder2", "phi", "gemma", "glm", "olmoe", "smollm3", "seed_oss", "hunyuan_v1_dense",
    "internlm3", "qwen2_moe", "glm4_moe_lite", "iquestcoder", "nanochat", "qwen3_5", "qwen3_5_moe", "mixtral",
    "qwen2")})
EXTRA.update({
    "falcon_mamba": {"use_conv_bias": True}, "llama4_text": {},
    "mimo_v2_flash": {**MOE, "hybrid_layer_pattern": [0, 1, 1], "moe_layer_freq": [0, 0, 0],
                      "add_swa_attention_sink_bias": False, "add_full_attention_sink_bias": False,
                      "layernorm_epsilon": 1e-5, "swa_rope_theta": 10000.0, "swa_num_attention_heads": 4,
                      "swa_num_key_value_heads": 2, "swa_head_dim": 16, "swa_v_head_dim": 8,
                      "partial_rotary_factor": 1.0},
    "longcat_flash": {"attention_method": "MLA", "zero_expert_type": "identity", "routed_scaling_factor": 1.0,
                      "mla_scale_q_lora": True, "mla_scale_kv_lora": True},
})

NEW_CONFIGS = {name: {**NEUTRAL, **TRANSFORMERS_CONFIGS[name], **extra} for name, extra in EXTRA.items()}
# gemma3n: mlx-lm reads the text model from text_config (gemma3n.py), as kvsim does
NEW_CONFIGS["gemma3n"] = {"model_type": "gemma3n", "text_config": {
    **NEUTRAL, **TRANSFORMERS_CONFIGS["gemma3n_text"], "rope_local_base_freq": 10000.0, "final_logit_softcapping": 30.0,
    "altup_coef_clip": 120.0, "altup_correct_scale": True, "altup_active_idx": 0}}
# bailing_hybrid with dense MLPs only: runs in bf16, where mlx-lm's fp32 linear-attention state shows
NEW_CONFIGS["bailing_hybrid_dense"] = {**NEW_CONFIGS["bailing_hybrid"], "first_k_dense_replace": 4}
# run in bf16 as well: the recurrent families, whose states keep their own dtypes (no MoE: gather_mm is fp32-only)
BF16_TOO = ("lfm2", "olmo_hybrid", "qwen3_5", "falcon_mamba", "bailing_hybrid_dense", "gemma4_text")
# DeepSeek Sparse Attention: the latent and the indexer keys in one CacheList per layer
EXTRA.update({"deepseek_v32": {}, "glm_moe_dsa": {**MOE, "rope_parameters": {"rope_theta": 10000.0}}})
NEW_CONFIGS.update({name: {**NEUTRAL, **TRANSFORMERS_CONFIGS[name], **EXTRA[name]}
                    for name in ("deepseek_v32", "glm_moe_dsa")})
# ministral3 slides where layer_types says; gemma3 and gemma4 nest the text model in text_config (the outer
# vocab_size replaces the text one in mlx-lm, so it is set small too)
NEW_CONFIGS["ministral3"] = {**NEUTRAL, **TRANSFORMERS_CONFIGS["ministral3"], "sliding_window": W,
                             "layer_types": ["sliding_attention", "full_attention"],
                             "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default",
                                                 "llama_4_scaling_beta": 0.0, "original_max_position_embeddings": 256}}
NEW_CONFIGS["gemma3"] = {"model_type": "gemma3", "vocab_size": 64,
                         "text_config": {**CONFIGS["gemma3_text"], "sliding_window": W}}
NEW_CONFIGS["gemma4"] = {"model_type": "gemma4", "vocab_size": 64, "text_config": NEW_CONFIGS["gemma4_text"]}

