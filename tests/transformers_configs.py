"""Tiny config.json dicts that both kvsim's parser and transformers 5.24's config classes accept.

One per model type kvsim reads, with the key names the family's checkpoints write (``n_layer`` /
``n_head`` / ``n_embd`` for gpt2, ``attn_config`` for mpt and dbrx, ``multi_query`` for falcon-7b ...)
and tiny sizes that keep what decides the cache: layer types, windows (8) and chunks (8), KV heads,
head sizes, MLA ranks, Mamba / Gated DeltaNet state sizes. kvsim reads each dict as a config.json;
transformers builds it with ``AutoConfig.for_model(model_type, **dict)`` (random weights, no download).
"""

W = 8  # sliding window / attention chunk of the tiny configs: a 12-token prompt + 5 steps overflows it

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_hidden_layers": 2, "rms_norm_eps": 1e-5, "vocab_size": 64,
        "tie_word_embeddings": False, "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2}
# GPT-style configs: MHA, no head_dim / num_key_value_heads keys
GPT = {"vocab_size": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

MAMBA2_MIXER = {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_n_groups": 1,
                "mamba_d_conv": 4, "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False}
MLA = {"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "q_lora_rank": None,
       "num_key_value_heads": 4, "head_dim": 8}
ROPE_DEFAULT = {"rope_type": "default", "rope_theta": 10000.0}

CONFIGS = {
    # ------------------------------------------------------------ families kvsim read before issue 17
    "llama": {**BASE, "model_type": "llama"},
    "llama_layer_types": {**BASE, "model_type": "llama", "num_hidden_layers": 3, "sliding_window": W,
                          "layer_types": ["full_attention", "sliding_attention", "full_attention"]},
    "mistral": {**BASE, "model_type": "mistral", "sliding_window": W},
    "mixtral": {**BASE, "model_type": "mixtral", "sliding_window": W, "num_local_experts": 2,
                "num_experts_per_tok": 1},
    "qwen2": {**BASE, "model_type": "qwen2", "num_hidden_layers": 3, "use_sliding_window": True,
              "sliding_window": W, "max_window_layers": 1},
    "qwen3": {**BASE, "model_type": "qwen3"},
    "phi3": {**BASE, "model_type": "phi3", "sliding_window": W, "head_dim": None},
    "gemma2": {**BASE, "model_type": "gemma2", "sliding_window": W, "query_pre_attn_scalar": 16},
    "gemma3_text": {**BASE, "model_type": "gemma3_text", "num_hidden_layers": 3, "sliding_window": W,
                    "sliding_window_pattern": 3, "query_pre_attn_scalar": 16},
    "gpt_oss": {**BASE, "model_type": "gpt_oss", "sliding_window": W, "num_local_experts": 1,
                "num_experts_per_tok": 1, "layer_types": ["sliding_attention", "full_attention"]},
    "llama4_text": {**BASE, "model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": W,
                    "intermediate_size_mlp": 128, "num_local_experts": 1, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 8, "no_rope_layers": [1, 1, 1, 0], "use_qk_norm": False},
    "deepseek_v2": {**BASE, **MLA, "model_type": "deepseek_v2", "n_routed_experts": 2, "num_experts_per_tok": 1,
                    "moe_intermediate_size": 32, "first_k_dense_replace": 2, "n_shared_experts": 1},
    "deepseek_v3": {**BASE, **MLA, "model_type": "deepseek_v3", "n_routed_experts": 2, "num_experts_per_tok": 1,
                    "moe_intermediate_size": 32, "first_k_dense_replace": 2, "n_shared_experts": 1,
                    "rope_interleave": False},
    "jamba": {**BASE, "model_type": "jamba", "attn_layer_period": 2, "attn_layer_offset": 1, "sliding_window": W,
              "expert_layer_period": 2, "expert_layer_offset": 1, "num_experts": 1, "num_experts_per_tok": 1,
              "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2, "use_mamba_kernels": False},
    "qwen3_next": {**BASE, "model_type": "qwen3_next", "full_attention_interval": 2,
                   "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                   "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 2,
                   "num_experts_per_tok": 1, "decoder_sparse_step": 1, "shared_expert_intermediate_size": 64,
                   "mlp_only_layers": [0, 1], "moe_intermediate_size": 64, "partial_rotary_factor": 0.25},
    "mamba": {**BASE, "model_type": "mamba", "num_hidden_layers": 1, "state_size": 16, "conv_kernel": 4,
              "expand": 2, "use_bias": False, "use_conv_bias": True, "time_step_rank": 4},
    "falcon_mamba": {**BASE, "model_type": "falcon_mamba", "num_hidden_layers": 1, "state_size": 16,
                     "conv_kernel": 4, "expand": 2, "intermediate_size": 128, "time_step_rank": 4},
    "mamba2": {**BASE, "model_type": "mamba2", "num_hidden_layers": 1, "num_heads": 8, "head_dim": 16,
               "expand": 2, "state_size": 16, "n_groups": 1, "conv_kernel": 4, "time_step_rank": 4},
    "recurrent_gemma": {**BASE, "model_type": "recurrent_gemma", "num_hidden_layers": 3, "num_key_value_heads": 1,
                        "attention_window_size": W, "conv1d_width": 4, "head_dim": None,
                        "block_types": ["recurrent", "recurrent", "attention"]},
    "cohere": {**BASE, "model_type": "cohere", "layer_norm_eps": 1e-5, "use_qk_norm": False, "head_dim": None},
    "cohere2": {**BASE, "model_type": "cohere2", "layer_norm_eps": 1e-5, "sliding_window": W,
                "sliding_window_pattern": 2, "head_dim": None},
    "olmo2": {**BASE, "model_type": "olmo2"},
    "phimoe": {**BASE, "model_type": "phimoe", "num_local_experts": 2, "num_experts_per_tok": 1,
               "head_dim": None, "sliding_window": W},
    "granitemoehybrid": {**BASE, **MAMBA2_MIXER, "model_type": "granitemoehybrid", "head_dim": None,
                         "layer_types": ["mamba", "attention"], "num_local_experts": 0,
                         "shared_intermediate_size": 64, "position_embedding_type": "nope"},
    "nemotron_h": {**BASE, "model_type": "nemotron_h", "hybrid_override_pattern": "M-*-", "mamba_num_heads": 8,
                   "mamba_head_dim": 16, "ssm_state_size": 16, "conv_kernel": 4, "n_groups": 2},
    "falcon_h1": {**BASE, **MAMBA2_MIXER, "model_type": "falcon_h1", "mamba_d_ssm": 128},
}

# "head_dim": None above means "no head_dim key" (transformers' classes read a present None as None)
CONFIGS = {name: {k: v for k, v in cfg.items() if not (k == "head_dim" and v is None)} for name, cfg in CONFIGS.items()}

# transformers' class for a model type kvsim reads under another name
TRANSFORMERS_MODEL_TYPE = {"kimi_k2": "deepseek_v3"}


def transformers_config(name: str) -> dict:
    """The dict transformers is given: the config itself, model_type mapped where transformers names it otherwise."""
    cfg = dict(CONFIGS[name])
    cfg["model_type"] = TRANSFORMERS_MODEL_TYPE.get(cfg["model_type"], cfg["model_type"])
    return cfg
