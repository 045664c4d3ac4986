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
    "kimi_k2": {**BASE, **MLA, "model_type": "kimi_k2", "n_routed_experts": 2, "num_experts_per_tok": 1,
                "moe_intermediate_size": 32, "first_k_dense_replace": 2, "n_shared_experts": 1,
                "rope_interleave": False},
    # ------------------------------------------------------------ issue 17: checkpoints' own key names
    "gpt2": {**GPT, "model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256},
    "gptj": {**GPT, "model_type": "gptj", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256,
             "rotary_dim": 8},
    "codegen": {**GPT, "model_type": "codegen", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256,
                "n_ctx": 256, "rotary_dim": 8},
    "gpt_bigcode": {**GPT, "model_type": "gpt_bigcode", "n_layer": 2, "n_head": 4, "n_embd": 64,
                    "n_positions": 256, "multi_query": True},
    "gpt_bigcode_mha": {**GPT, "model_type": "gpt_bigcode", "n_layer": 2, "n_head": 4, "n_embd": 64,
                        "n_positions": 256, "multi_query": False},
    "bloom": {**GPT, "model_type": "bloom", "n_layer": 2, "n_head": 4, "hidden_size": 64},
    "gpt_neo": {**GPT, "model_type": "gpt_neo", "num_layers": 2, "num_heads": 4, "hidden_size": 64,
                "attention_types": [[["global", "local"], 1]], "window_size": W, "max_position_embeddings": 256},
    "gpt_neox": {**GPT, "model_type": "gpt_neox", "num_hidden_layers": 2, "num_attention_heads": 4,
                 "hidden_size": 64, "intermediate_size": 128, "rotary_pct": 0.25, "max_position_embeddings": 256},
    "opt": {**GPT, "model_type": "opt", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
            "ffn_dim": 128, "word_embed_proj_dim": 64, "max_position_embeddings": 256},
    "mpt": {**GPT, "model_type": "mpt", "n_layers": 2, "n_heads": 4, "d_model": 64, "max_seq_len": 256},
    "mpt_use_cache": {**GPT, "model_type": "mpt", "n_layers": 2, "n_heads": 4, "d_model": 64, "max_seq_len": 256,
                      "use_cache": True},
    "dbrx": {**GPT, "model_type": "dbrx", "n_layers": 2, "n_heads": 4, "d_model": 64, "max_seq_len": 256,
             "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
             "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 2, "moe_top_k": 1}},
    "falcon": {**GPT, "model_type": "falcon", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
               "multi_query": True, "new_decoder_architecture": False},
    "falcon_40b": {**GPT, "model_type": "falcon", "num_hidden_layers": 2, "num_attention_heads": 4,
                   "hidden_size": 64, "new_decoder_architecture": True, "num_kv_heads": 2},
    "falcon_rw": {**GPT, "model_type": "falcon", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
                  "multi_query": False, "alibi": True},
    "jetmoe": {**BASE, "model_type": "jetmoe", "kv_channels": 16, "num_key_value_heads": 2, "num_local_experts": 2,
               "num_experts_per_tok": 2, "head_dim": None, "num_attention_heads": None},
    # ------------------------------------------------------------ llama-like: standard names
    "starcoder2": {**BASE, "model_type": "starcoder2", "sliding_window": W, "head_dim": None},
    "phi": {**BASE, "model_type": "phi", "num_key_value_heads": 4, "head_dim": None, "partial_rotary_factor": 0.5},
    "stablelm": {**BASE, "model_type": "stablelm", "head_dim": None, "partial_rotary_factor": 0.25},
    "nemotron": {**BASE, "model_type": "nemotron", "partial_rotary_factor": 0.5},
    "gemma": {**BASE, "model_type": "gemma", "num_key_value_heads": 1},
    "glm": {**BASE, "model_type": "glm"},
    "glm4": {**BASE, "model_type": "glm4"},
    "glm4_moe": {**BASE, "model_type": "glm4_moe", "n_routed_experts": 2, "num_experts_per_tok": 1,
                 "moe_intermediate_size": 32, "first_k_dense_replace": 1, "num_nextn_predict_layers": 1},
    "granite": {**BASE, "model_type": "granite"},
    "granitemoe": {**BASE, "model_type": "granitemoe", "num_local_experts": 2, "num_experts_per_tok": 1,
                   "head_dim": None},
    "olmo": {**BASE, "model_type": "olmo", "head_dim": None},
    "olmoe": {**BASE, "model_type": "olmoe", "num_experts": 2, "num_experts_per_tok": 1, "head_dim": None},
    "olmo3": {**BASE, "model_type": "olmo3", "num_hidden_layers": 4, "sliding_window": W},
    "ministral": {**BASE, "model_type": "ministral", "num_hidden_layers": 3, "sliding_window": W,
                  "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
    "exaone4": {**BASE, "model_type": "exaone4", "num_hidden_layers": 3, "sliding_window": W,
                "sliding_window_pattern": 3},
    "smollm3": {**BASE, "model_type": "smollm3", "num_hidden_layers": 4, "no_rope_layer_interval": 2,
                "use_sliding_window": True, "sliding_window": W},
    "ernie4_5": {**BASE, "model_type": "ernie4_5"},
    "seed_oss": {**BASE, "model_type": "seed_oss"},
    "helium": {**BASE, "model_type": "helium"},
    "arcee": {**BASE, "model_type": "arcee"},
    "hunyuan_v1_dense": {**BASE, "model_type": "hunyuan_v1_dense"},
    "qwen2_moe": {**BASE, "model_type": "qwen2_moe", "num_hidden_layers": 3, "num_experts": 2,
                  "num_experts_per_tok": 1, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
                  "use_sliding_window": True, "sliding_window": W, "max_window_layers": 3},
    "qwen3_moe": {**BASE, "model_type": "qwen3_moe", "num_experts": 2, "num_experts_per_tok": 1,
                  "moe_intermediate_size": 32},
    "apertus": {**BASE, "model_type": "apertus"},
    "bitnet": {**BASE, "model_type": "bitnet"},
    "ernie4_5_moe": {**BASE, "model_type": "ernie4_5_moe", "moe_num_experts": 2, "moe_k": 1,
                     "moe_intermediate_size": 32, "moe_layer_start_index": 1},
    "granitemoeshared": {**BASE, "model_type": "granitemoeshared", "num_local_experts": 2, "num_experts_per_tok": 1,
                         "shared_intermediate_size": 32, "head_dim": None},
    "hunyuan_v1_moe": {**BASE, "model_type": "hunyuan_v1_moe", "num_experts": 2, "moe_topk": 1},
    "internlm3": {**BASE, "model_type": "internlm3"},
    "minimax_m2": {**BASE, "model_type": "minimax_m2", "num_local_experts": 2, "num_experts_per_tok": 1},
    "persimmon": {**BASE, "model_type": "persimmon", "num_key_value_heads": 4, "head_dim": None,
                  "partial_rotary_factor": 0.5},
    "gemma3n_text": {**BASE, "model_type": "gemma3n_text", "num_hidden_layers": 5, "sliding_window": W,
                     "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                     "full_attention"], "num_kv_shared_layers": 3, "vocab_size_per_layer_input": 64,
                     "hidden_size_per_layer_input": 8, "laurel_rank": 4, "altup_num_inputs": 2,
                     "activation_sparsity_pattern": [0.0] * 5, "intermediate_size": 128},
    "openai-gpt": {**GPT, "model_type": "openai-gpt", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256},
    "ctrl": {**GPT, "model_type": "ctrl", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256, "dff": 128},
    "xglm": {**GPT, "model_type": "xglm", "num_layers": 2, "attention_heads": 4, "d_model": 64, "ffn_dim": 128,
             "max_position_embeddings": 256},
    "biogpt": {**GPT, "model_type": "biogpt", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
               "intermediate_size": 128, "max_position_embeddings": 256},
    "flex_olmo": {**BASE, "model_type": "flex_olmo", "num_experts": 2, "num_experts_per_tok": 1, "head_dim": None},
    "granite_swa": {**BASE, "model_type": "granite_swa", "num_hidden_layers": 3, "sliding_window": W},
    "cwm": {**BASE, "model_type": "cwm", "num_hidden_layers": 3, "sliding_window": W},
    "vaultgemma": {**BASE, "model_type": "vaultgemma", "sliding_window": W},
    "afmoe": {**BASE, "model_type": "afmoe", "num_hidden_layers": 3, "sliding_window": W,
              "global_attn_every_n_layers": 3, "num_experts": 2, "num_experts_per_tok": 1,
              "moe_intermediate_size": 32, "num_dense_layers": 3},
    "minicpm3": {**BASE, **MLA, "model_type": "minicpm3"},
    "glm4_moe_lite": {**BASE, **MLA, "model_type": "glm4_moe_lite", "n_routed_experts": 2, "num_experts_per_tok": 1,
                      "moe_intermediate_size": 32, "first_k_dense_replace": 2},
    "dots1": {**BASE, "model_type": "dots1", "num_hidden_layers": 3, "sliding_window": W, "max_window_layers": 1,
              "n_routed_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
              "first_k_dense_replace": 3},
    # ------------------------------------------------------------ h22-fam-attn: attention decoders (issue 17)
    **{t: {**BASE, "model_type": t} for t in (
        "exaone", "ministral3", "apertus1p5_text", "aria_text", "diffllama", "hy_v3", "hyperclovax", "iquestcoder",
        "jais2", "nanochat", "solar_open", "laguna", "mellum")},
    "exaone_num_layers": {**{k: v for k, v in BASE.items() if k != "num_hidden_layers"}, "model_type": "exaone",
                          "num_layers": 2},
    "doge": {**BASE, "model_type": "doge", "sliding_window": W},
    "sarvam_moe": {**BASE, "model_type": "sarvam_moe", "n_routed_experts": 2, "num_experts_per_tok": 1,
                   "moe_intermediate_size": 32, "first_k_dense_replace": 1},
    "gpt_neox_japanese": {**GPT, "model_type": "gpt_neox_japanese", "num_hidden_layers": 2,
                          "num_attention_heads": 4, "hidden_size": 64, "max_position_embeddings": 256},
    "flint": {**BASE, "model_type": "flint", "num_hidden_layers": 6, "sliding_window": W},
    "granitemoe_swa": {**BASE, "model_type": "granitemoe_swa", "num_hidden_layers": 3, "sliding_window": W,
                       "num_local_experts": 2, "num_experts_per_tok": 1},
    "cohere2_moe": {**BASE, "model_type": "cohere2_moe", "num_hidden_layers": 5, "sliding_window": W,
                    "first_k_dense_replace": 2, "prefix_dense_sliding_window_pattern": 2, "sliding_window_pattern": 2,
                    "num_experts": 2, "num_experts_per_tok": 1},
    "exaone_moe": {**BASE, "model_type": "exaone_moe", "num_hidden_layers": 3, "sliding_window": W,
                   "sliding_window_pattern": 3, "num_experts": 2, "num_experts_per_tok": 1,
                   "moe_intermediate_size": 32, "first_k_dense_replace": 1},
    **{t: {**BASE, **MLA, "model_type": t, "n_routed_experts": 2, "num_experts_per_tok": 1,
           "moe_intermediate_size": 32, "first_k_dense_replace": 2, "n_group": 1, "topk_group": 1}
       for t in ("youtu", "sarvam_mla")},
    "axk1": {**BASE, **MLA, "model_type": "axk1", "q_lora_rank": 16, "n_routed_experts": 2, "num_experts_per_tok": 1,
             "moe_intermediate_size": 32, "n_group": 1, "topk_group": 1},
    # DeepSeek Sparse Attention: MLA + indexer keys (index_head_dim 8) on the layers that run the indexer
    "deepseek_v32": {**BASE, **MLA, "model_type": "deepseek_v32", "n_routed_experts": 2, "num_experts_per_tok": 1,
                     "moe_intermediate_size": 32, "first_k_dense_replace": 2, "n_group": 1, "topk_group": 1,
                     "index_head_dim": 8, "index_n_heads": 2, "index_topk": 4, "q_lora_rank": 16},
    # DeepSeek-V4 with the checkpoint's legacy keys: compress_ratios 0 / 4 / 128 per layer (the trailing 0 is the
    # MTP layer, not built), compress_rate_hca 8 so that T = 14 closes an HCA window; K = V on one head of 32
    "deepseek_v4": {**GPT, "model_type": "deepseek_v4", "hidden_size": 64, "moe_intermediate_size": 32,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8,
                    "q_lora_rank": 32, "num_hidden_layers": 3, "compress_ratios": [0, 4, 128, 0],
                    "compress_rate_hca": 8, "sliding_window": W, "n_routed_experts": 2, "num_experts_per_tok": 1,
                    "n_shared_experts": 1, "num_hash_layers": 1, "o_groups": 2, "o_lora_rank": 16, "hc_mult": 2,
                    "index_n_heads": 2, "index_head_dim": 16, "index_topk": 4, "max_position_embeddings": 256},
    "glm_moe_dsa": {**BASE, **MLA, "model_type": "glm_moe_dsa", "num_hidden_layers": 4, "n_routed_experts": 2,
                    "num_experts_per_tok": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 4,
                    "n_group": 1, "topk_group": 1, "index_head_dim": 8, "index_n_heads": 2, "index_topk": 4,
                    "q_lora_rank": 16, "index_topk_freq": 2, "index_skip_topk_offset": 1},
    "axk2": {**BASE, **MLA, "model_type": "axk2", "n_routed_experts": 2, "num_experts_per_tok": 1,
             "moe_intermediate_size": 32, "index_head_dim": 8, "index_n_heads": 2, "index_topk": 4,
             "q_lora_rank": 16},
    "hy_v4": {**BASE, **MLA, "model_type": "hy_v4", "num_hidden_layers": 3, "n_routed_experts": 2,
              "num_experts_per_tok": 1, "moe_intermediate_size": 32, "index_head_dim": 8, "index_n_heads": 2,
              "index_topk": 4, "q_lora_rank": 16},
    # per-layer heads and sizes, KV sharing, two MLA blocks per decoder layer
    "mimo_v2_flash": {**BASE, "model_type": "mimo_v2_flash", "num_hidden_layers": 3, "sliding_window_size": W - 1,
                      "v_head_dim": 8, "n_routed_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32},
    "gemma4_text": {**BASE, "model_type": "gemma4_text", "num_hidden_layers": 5, "sliding_window": W,
                    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                    "full_attention"], "num_kv_shared_layers": 2, "global_head_dim": 32,
                    "num_global_key_value_heads": 1, "attention_k_eq_v": True, "hidden_size_per_layer_input": 8,
                    "vocab_size_per_layer_input": 64},
    "gemma4_text_default": {**BASE, "model_type": "gemma4_text", "num_hidden_layers": 7, "sliding_window": W,
                            "global_head_dim": 32, "hidden_size_per_layer_input": 8,
                            "vocab_size_per_layer_input": 64},
    "gemma4_unified_text": {**BASE, "model_type": "gemma4_unified_text", "num_hidden_layers": 4, "sliding_window": W,
                            "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                                            "full_attention"], "num_kv_shared_layers": 2, "global_head_dim": 32,
                            "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 64},
    "longcat_flash": {**{k: v for k, v in BASE.items() if k != "num_hidden_layers"}, **MLA,
                      "model_type": "longcat_flash", "num_layers": 2, "n_routed_experts": 4, "moe_topk": 2,
                      "expert_ffn_hidden_size": 32, "ffn_hidden_size": 64, "q_lora_rank": 16, "zero_expert_num": 1},
    # multimodal wrappers whose causal LM is the text model: kvsim reads text_config
    "mllama": {"model_type": "mllama", "text_config": {**BASE, "num_hidden_layers": 3, "cross_attention_layers": [1]},
               "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                 "num_global_layers": 1, "attention_heads": 2, "image_size": 28, "patch_size": 14,
                                 "vision_output_dim": 64, "intermediate_layers_indices": [0]}},
    "emu3": {"model_type": "emu3", "text_config": dict(BASE)},
    "cohere_compass_text": {**BASE, "model_type": "cohere_compass_text", "sliding_window": W, "head_dim": 8,
                            "layer_types": ["sliding_attention", "full_attention"],
                            "rope_parameters": {t: ROPE_DEFAULT for t in ("sliding_attention", "full_attention")}},
    "dory": {**BASE, "model_type": "dory", "num_hidden_layers": 4, "n_input_layers": 1, "n_output_layers": 1,
             "n_recurrent_loops": 3, "sliding_window": W},
    "dory_last_loop": {**BASE, "model_type": "dory", "num_hidden_layers": 4, "n_input_layers": 1,
                       "n_output_layers": 1, "sliding_window": W, "recurrent_kv_cache_mode": "last_loop"},
    # ------------------------------------------------------------ end h22-fam-attn
}

# ------------------------------------------------------------ h22-fam-hybrid: hybrid / recurrent families
# (kvsim.calc.families_hybrid). 4-5 layers so every layer type appears; conv kernels of 3 show K, not 4.
HYBRID = {**BASE, "num_hidden_layers": 4}
HYBRID.pop("head_dim")
GDN = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 16,
       "linear_conv_kernel_dim": 3}
MLA_KDA = {"kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
           "num_key_value_heads": 4, "num_local_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32}
HYBRID_CONFIGS = {
    "lfm2": {**HYBRID, "model_type": "lfm2", "full_attn_idxs": [1], "conv_L_cache": 3},
    "lfm2_layer_types": {**HYBRID, "model_type": "lfm2", "conv_L_cache": 4,
                         "layer_types": ["conv", "conv", "full_attention", "conv"]},
    "lfm2_moe": {**HYBRID, "model_type": "lfm2_moe", "layer_types": ["conv", "full_attention", "conv", "conv"],
                 "conv_L_cache": 3, "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
                 "num_dense_layers": 1},
    "bamba": {**HYBRID, "model_type": "bamba", "attn_layer_indices": [1], "mamba_n_heads": 8, "mamba_d_head": "auto",
              "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_d_conv": 3, "mamba_expand": 2},
    "zamba": {**HYBRID, "model_type": "zamba", "num_hidden_layers": 5, "attn_layer_period": 2, "attn_layer_offset": 1,
              "n_mamba_heads": 2, "mamba_d_state": 8, "mamba_d_conv": 3, "mamba_expand": 2,
              "use_mamba_kernels": False},
    "zamba2": {**HYBRID, "model_type": "zamba2", "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
               "n_mamba_heads": 8, "mamba_d_state": 16, "mamba_ngroups": 2, "mamba_d_conv": 3, "mamba_expand": 2,
               "use_mamba_kernels": False, "num_mem_blocks": 2},
    "olmo_hybrid": {**HYBRID, "model_type": "olmo_hybrid", **GDN},
    "olmo_hybrid_defaults": {**HYBRID, "model_type": "olmo_hybrid", "num_hidden_layers": 2, "hidden_size": 64,
                             "num_attention_heads": 4, "linear_conv_kernel_dim": 3},
    "qwen3_5_text": {**HYBRID, "model_type": "qwen3_5_text", "head_dim": 16, **GDN},
    "qwen3_5_moe_text": {**HYBRID, "model_type": "qwen3_5_moe_text", "head_dim": 16, **GDN, "num_experts": 2,
                         "num_experts_per_tok": 1, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32},
    "kimi_linear": {**HYBRID, **MLA_KDA, "model_type": "kimi_linear", "linear_attn_config": {
        "full_attn_layers": [2], "kda_layers": [1, 3, 4], "head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 3}},
    "bailing_hybrid": {**HYBRID, **MLA_KDA, "model_type": "bailing_hybrid", "head_dim": 16, "n_group": 1,
                       "topk_group": 1, "layer_group_size": 2, "short_conv_kernel_size": 3, "first_k_dense_replace": 1},
    "minimax": {**HYBRID, "model_type": "minimax", "head_dim": 16, "num_local_experts": 2, "num_experts_per_tok": 1,
                "block_size": 4},
}
# Bailing-Hybrid as its config.json carries the KDA sizes (BailingHybridConfig.to_dict writes linear_*, and head_dim
# as qk_rope_head_dim): the KDA layers are sized by linear_num_heads / linear_head_dim / linear_conv_kernel_dim, each
# unlike num_attention_heads / head_dim / short_conv_kernel_size, so reading the latter fails the byte-exact test
HYBRID_CONFIGS["bailing_hybrid_linear_keys"] = {
    **HYBRID_CONFIGS["bailing_hybrid"], "head_dim": 8, "linear_head_dim": 16, "linear_num_heads": 2,
    "linear_conv_kernel_dim": 4}
# Zamba / Zamba2 with the attention head size a config.json may carry (attention_head_dim; head_dim, which both
# classes' attribute_map turn into attention_head_dim and which wins over it): 16, not the derived 2·hidden / heads
HYBRID_CONFIGS["zamba2_attention_head_dim"] = {**HYBRID_CONFIGS["zamba2"], "attention_head_dim": 16}
HYBRID_CONFIGS["zamba_head_dim"] = {**HYBRID_CONFIGS["zamba"], "attention_head_dim": 32, "head_dim": 16}
# encoder-style causal LMs: BERT-style run as decoders, and the decoder halves of encoder-decoders (the encoder
# given more layers and fewer heads than the decoder, so reading the encoder's keys would fail the test)
ENCODER_STYLE = {**GPT, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
                 "max_position_embeddings": 256, "is_decoder": True}
SEQ2SEQ = {**GPT, "d_model": 64, "decoder_layers": 2, "encoder_layers": 3, "decoder_attention_heads": 4,
           "encoder_attention_heads": 2, "decoder_ffn_dim": 128, "encoder_ffn_dim": 128, "max_position_embeddings": 256,
           "decoder_start_token_id": 2}
for _t in ("bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
           "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl"):
    HYBRID_CONFIGS[_t] = {**ENCODER_STYLE, "model_type": _t}
HYBRID_CONFIGS["bert_not_decoder"] = {**ENCODER_STYLE, "model_type": "bert", "is_decoder": False}
HYBRID_CONFIGS["xmod"] = {**ENCODER_STYLE, "model_type": "xmod", "default_language": "en_XX"}
for _t in ("bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp", "pegasus", "plbart"):
    HYBRID_CONFIGS[_t] = {**SEQ2SEQ, "model_type": _t}
HYBRID_CONFIGS["trocr"] = {**GPT, "model_type": "trocr", "d_model": 64, "decoder_layers": 2, "decoder_attention_heads": 4,
                           "decoder_ffn_dim": 128, "max_position_embeddings": 256}
HYBRID_CONFIGS["prophetnet"] = {**GPT, "model_type": "prophetnet", "hidden_size": 64, "num_decoder_layers": 2,
                                "num_encoder_layers": 3, "num_decoder_attention_heads": 4,
                                "num_encoder_attention_heads": 2, "decoder_ffn_dim": 128, "encoder_ffn_dim": 128}
HYBRID_CONFIGS["lfm3"] = {**HYBRID, "model_type": "lfm3", "num_hidden_layers": 5, "head_dim": 16, "sliding_window": W,
                          "conv_L_cache": 5}
HYBRID_CONFIGS["zaya"] = {**HYBRID, "model_type": "zaya", "head_dim": 16, "sliding_window": W, "num_experts": 2,
                          "moe_intermediate_size": 32, "router_hidden_size": 16, "cca_time0": 3, "cca_time1": 2,
                          "layer_types": ["hybrid", "hybrid_sliding", "hybrid", "hybrid_sliding"]}
HYBRID_CONFIGS["rwkv"] = {**GPT, "model_type": "rwkv", "hidden_size": 64, "num_hidden_layers": 3,
                          "attention_hidden_size": 64, "intermediate_size": 128, "context_length": 256}
# the multimodal Qwen3.5 configs: the text part nested in text_config (kvsim reads it; AutoModelForCausalLM builds
# the text model), a tiny vision tower beside it
TINY_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
for _outer, _inner in (("qwen3_5", "qwen3_5_text"), ("qwen3_5_moe", "qwen3_5_moe_text")):
    HYBRID_CONFIGS[_outer] = {"model_type": _outer, "text_config": HYBRID_CONFIGS[_inner], "vision_config": TINY_VISION,
                              "tie_word_embeddings": False}
CONFIGS.update(HYBRID_CONFIGS)
# ------------------------------------------------------------ end h22-fam-hybrid

# "head_dim" / "num_attention_heads": None above mean "no such key" (transformers' classes read a present None as None)
CONFIGS = {name: {k: v for k, v in cfg.items() if not (k in ("head_dim", "num_attention_heads") and v is None)}
           for name, cfg in CONFIGS.items()}

# transformers' class for a model type kvsim reads under another name
TRANSFORMERS_MODEL_TYPE = {"kimi_k2": "deepseek_v3"}  # Kimi K2's checkpoint runs DeepSeek-V3's code


def transformers_config(name: str) -> dict:
    """The dict transformers is given: the config itself, model_type mapped where transformers names it otherwise."""
    cfg = dict(CONFIGS[name])
    cfg["model_type"] = TRANSFORMERS_MODEL_TYPE.get(cfg["model_type"], cfg["model_type"])
    return cfg


# ------------------------------------------------------------ h23-families: the last decoder families read
SW_FULL = ["sliding_attention", "full_attention"]
NEW_CONFIGS = {
    "gpt-sw3": {**GPT, "model_type": "gpt-sw3", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 256},
    "kolibri1": {**BASE, "model_type": "kolibri1", "sliding_window": W, "layer_types": SW_FULL, "num_experts": 2,
                 "num_experts_per_tok": 1, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32},
    "beam": {**BASE, "model_type": "beam", "sliding_window": W, "layer_types": SW_FULL, "num_experts": 2,
             "num_experts_per_tok": 1, "moe_intermediate_size": 32, "mlp_layer_types": ["dense", "sparse"],
             "n_group": 1, "topk_group": 1},
    # ModernBERT decoder: layer 0 full, layer 1 sliding (global every 3rd); window local_attention // 2 = 8
    "modernbert-decoder": {**GPT, "model_type": "modernbert-decoder", "hidden_size": 64, "intermediate_size": 128,
                           "num_hidden_layers": 2, "num_attention_heads": 4, "local_attention": 2 * W,
                           "max_position_embeddings": 256},
}
CONFIGS.update(NEW_CONFIGS)
NEW_CONFIGS["lara_mini"] = {**HYBRID, **GDN, "model_type": "lara_mini", "num_hidden_layers": 3, "head_dim": 16,
                            "sliding_window": W, "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
                            "shared_expert_intermediate_size": 32,
                            "layer_types": ["linear_attention", "sliding_attention", "full_attention"]}
CONFIGS.update(NEW_CONFIGS)
# MiniMax-M3 with the checkpoint's sparse_attention_config: layer 0 full, layer 1 sparse (K/V + a 16-wide indexer key)
NEW_CONFIGS["minimax_m3_vl_text"] = {
    **BASE, "model_type": "minimax_m3_vl_text", "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
    "shared_intermediate_size": 32, "index_n_heads": 2, "index_block_size": 4, "index_topk_blocks": 2,
    "sparse_attention_config": {"sparse_attention_freq": [0, 1], "sparse_index_dim": 16}}
CONFIGS.update(NEW_CONFIGS)
# Whisper's causal LM is its decoder alone (decoder_layers, decoder_attention_heads, d_model)
NEW_CONFIGS["whisper"] = {**SEQ2SEQ, "model_type": "whisper", "max_target_positions": 256, "max_source_positions": 64,
                          "num_mel_bins": 8}
CONFIGS.update(NEW_CONFIGS)
# multimodal wrappers, text-only: the language model nested in text_config, the other towers tiny
NEW_CONFIGS["got_ocr2"] = {"model_type": "got_ocr2", "text_config": {**BASE, "model_type": "qwen2"},
                           "vision_config": {"hidden_size": 32, "output_channels": 16, "num_hidden_layers": 1,
                                             "num_attention_heads": 2, "image_size": 64, "patch_size": 16,
                                             "global_attn_indexes": [0], "mlp_dim": 64}}
NEW_CONFIGS["moss_transcribe_diarize"] = {
    "model_type": "moss_transcribe_diarize", "text_config": {**BASE, "model_type": "qwen3"}, "audio_token_id": 63,
    "audio_config": {"num_mel_bins": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
                     "hidden_size": 16, "max_source_positions": 16}}
NEW_CONFIGS["fuyu"] = {"model_type": "fuyu", "hidden_size": 64, "vocab_size": 64, "num_attention_heads": 4,
                       "num_hidden_layers": 2, "intermediate_size": 128, "patch_size": 4, "num_channels": 3,
                       "text_config": {**{k: v for k, v in BASE.items() if k not in ("num_key_value_heads", "head_dim")},
                                       "model_type": "persimmon"}}
CONFIGS.update(NEW_CONFIGS)
NEW_CONFIGS["phi4_multimodal"] = {
    **BASE, "model_type": "phi4_multimodal",
    "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                      "image_size": 32, "patch_size": 8, "crop_size": 32},
    "audio_config": {"hidden_size": 32, "intermediate_size": 64, "num_blocks": 1, "num_attention_heads": 2,
                     "nemo_conv_channels": 8, "input_size": 16}}
NEW_CONFIGS["moshi"] = {**BASE, "model_type": "moshi", "sliding_window": W, "num_codebooks": 2, "audio_vocab_size": 16,
                        "depth_decoder_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}}
NEW_CONFIGS["git"] = {**GPT, "model_type": "git", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "intermediate_size": 128, "max_position_embeddings": 256,
                      "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                        "num_attention_heads": 2, "image_size": 32, "patch_size": 8}}
CONFIGS.update(NEW_CONFIGS)
