"""Parameter counts from configs: exact against the reference's computed counts, within 2 %
of every published count, and hand-checked on tiny configs for each family's terms."""


import pytest

from kvsim.calc.config import ConfigError, ModelSpec
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.registry import load_model, model_info, model_names
from kvsim.calc.weights import ParamCount, param_count, weights_bytes

# ---------------------------------------------------------------- the reference's exact counts

REFERENCE_COUNTS = {  # model_configs.md "D" rows: embeddings + per-layer q,k,v,o, SwiGLU, norms + final norm
    "llama-3-8b": 8_030_261_248, "llama-3.1-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800, "llama-3.2-1b": 1_235_814_400, "mistral-7b-v0.1": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704, "qwen2.5-7b": 7_615_616_512, "qwen3-8b": 8_190_735_360,
    "phi-3-mini-4k": 3_821_079_552,
}


@pytest.mark.parametrize("name", sorted(REFERENCE_COUNTS))
def test_total_matches_the_reference_computed_count_exactly(name):
    assert param_count(load_model(name)).total == REFERENCE_COUNTS[name]


def test_gemma_2_9b_non_embedding_count_matches_the_report_exactly():
    p = param_count(load_model("gemma-2-9b"))
    assert "tie_word_embeddings" not in load_model("gemma-2-9b").config and p.embedding == 256000 * 3584
    assert p.total - p.embedding == 8_324_201_984  # tied by Gemma2Config default: no separate head


# ---------------------------------------------------------------- published counts, within 2 %

# Published counts that this per-family arithmetic cannot reach within 2 %, and why.
KNOWN_MISSES = {
    ("deepseek-v2-lite", "active"): "2.4B is rounded: the count without the input embedding is 2.451B (+2.1 %); "
                                    "DS2 Table 9's MHA twin (2.5B) fits the same convention",
    ("qwen3-next-80b-a3b", "active"): "'3B' (the A3B of the name) is below every convention: 3.87B with both "
                                      "embeddings, 3.56B without the input table, 3.25B without either",
    ("kimi-k2-instruct", "total"): "'1T' is rounded: 384 experts x 60 MoE layers alone hold 1,014.7B; all the "
                                   "weights (MLA, dense layer, shared experts, both embeddings) make 1.026T (+2.6 %)",
    ("granite-4.0-h-small", "active"): "'9B' is rounded up: 8.80B with the tied embedding (-2.2 %), 8.39B without",
}


def _published_cases():
    for name in model_names():
        for i, pub in enumerate(model_info(name)["published_params"]):
            for what in ("total", "active", "non_embedding"):
                if pub.get(what) is not None:
                    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[(name, what)])] \
                        if (name, what) in KNOWN_MISSES else []
                    yield pytest.param(name, i, what, id=f"{name}-{what}", marks=marks)


@pytest.mark.parametrize("name, i, what", list(_published_cases()))
def test_within_2_percent_of_published(name, i, what):
    pub = model_info(name)["published_params"][i]
    p = param_count(load_model(name))
    ours = {"total": p.total, "non_embedding": p.total - p.embedding,
            "active": p.active - (p.embedding if pub.get("active_excludes_input_embedding") else 0)}[what]
    assert abs(ours / pub[what] - 1) <= 0.02, f"{name} {what}: {ours:,} vs published {pub[what]:,}"


def test_published_entries_cover_the_brief():
    have = {n for n in model_names() if model_info(n)["published_params"]}
    assert {"llama-3-8b", "llama-3-70b", "llama-3.1-405b", "llama-3.2-1b", "mistral-7b-v0.1", "mixtral-8x7b",
            "deepseek-v2", "deepseek-v2-lite", "deepseek-v3", "qwen2.5-7b", "qwen3-8b", "gpt-oss-20b",
            "gpt-oss-120b", "llama-4-scout", "qwen3-next-80b-a3b", "jamba-v0.1", "phi-3-mini-4k"} <= have


# ---------------------------------------------------------------- invariants over the registry


@pytest.mark.parametrize("name", model_names())
def test_total_ge_active_ge_embedding(name):
    p = param_count(load_model(name))
    assert p.total >= p.active > p.embedding > 0
    moe = {"mixtral", "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4_text", "qwen3_next", "jamba", "kimi_k2",
           "phimoe", "granitemoehybrid"}
    assert (p.active < p.total) == (load_model(name).model_type in moe)


def test_untying_the_embeddings_adds_exactly_one_vocab_by_hidden_table():
    cfg = dict(load_model("llama-3.2-1b").config)
    tied = param_count(from_hf_config(cfg)).total
    untied = param_count(from_hf_config({**cfg, "tie_word_embeddings": False})).total
    assert untied - tied == 128256 * 2048


def test_weights_bytes_per_dtype():
    spec = load_model("llama-3-8b")
    assert weights_bytes(spec) == 2 * 8_030_261_248
    assert weights_bytes(spec, "fp32") == 4 * 8_030_261_248 and weights_bytes(spec, "fp8") == 8_030_261_248
    with pytest.raises(ValueError, match="int3"):
        weights_bytes(spec, "int3")


def test_missing_count_field_and_unknown_family_are_errors():
    cfg = dict(load_model("llama-3-8b").config)
    del cfg["intermediate_size"]
    with pytest.raises(ConfigError, match="intermediate_size"):
        param_count(from_hf_config(cfg))
    odd = ModelSpec(name="x", model_type="bert", layers=(), hidden_size=8, num_attention_heads=1, vocab_size=8)
    with pytest.raises(ConfigError, match="bert"):
        param_count(odd)


# ---------------------------------------------------------------- tiny configs, counted by hand

TINY = {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "intermediate_size": 16, "vocab_size": 10, "tie_word_embeddings": False}
# q 8·8 = 64, k 8·4 = 32, v 32, o 64, SwiGLU 3·8·16 = 384, 2 norms 16, final norm 8, embed + head 2·80
DENSE = 64 + 32 + 32 + 64 + 384 + 16 + 8 + 160


@pytest.mark.parametrize("model_type, extra, expected", [
    ("llama", {}, DENSE),
    ("llama", {"tie_word_embeddings": True}, DENSE - 80),
    ("qwen2", {}, DENSE + 8 + 4 + 4),  # q, k, v biases
    ("qwen3", {"head_dim": 4}, DENSE + 4 + 4),  # q_norm, k_norm of head_dim
    ("gemma2", {"head_dim": 4, "sliding_window": 4, "tie_word_embeddings": True}, DENSE - 80 + 16),  # 4 norms
    ("gemma3_text", {"head_dim": 4, "sliding_window": 4, "tie_word_embeddings": True}, DENSE - 80 + 16 + 8),
])
def test_dense_terms_by_hand(model_type, extra, expected):
    spec = from_hf_config({**TINY, "model_type": model_type, **extra})
    assert param_count(spec) == ParamCount(expected, expected, 80)


def test_mixtral_experts_and_router_by_hand():
    spec = from_hf_config({**TINY, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2})
    shared = 64 + 32 + 32 + 64 + 8 * 4 + 16 + 8 + 160  # attention, router h·E, norms, embeddings
    assert param_count(spec) == ParamCount(shared + 4 * 384, shared + 2 * 384, 80)


def test_deepseek_mla_dense_first_layer_and_experts_by_hand():
    cfg = {**TINY, "model_type": "deepseek_v3", "num_hidden_layers": 2, "q_lora_rank": 4, "kv_lora_rank": 6,
           "qk_rope_head_dim": 2, "qk_nope_head_dim": 3, "v_head_dim": 5, "first_k_dense_replace": 1,
           "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 3}
    # q: 8·4 + 4 + 4·2·(3+2) = 76; kv_a 8·(6+2) + 6 = 70; kv_b 6·2·(3+5) = 96; o 2·5·8 = 80 -> 322
    mla = 76 + 70 + 96 + 80
    expert = 3 * 8 * 3
    shared = 2 * (mla + 16) + 384 + (8 * 4 + 4) + expert + 8 + 160  # V3 router has a per-expert bias
    assert param_count(from_hf_config(cfg)) == ParamCount(shared + 4 * expert, shared + 2 * expert, 80)
    cfg.update(q_lora_rank=None)  # V2-Lite style: a plain q projection 8·2·(3+2) = 80 instead of 76
    assert param_count(from_hf_config(cfg)).total == shared + 4 * expert + 4 * 2


def test_gpt_oss_biases_sinks_and_router_by_hand():
    cfg = {**TINY, "model_type": "gpt_oss", "num_hidden_layers": 2, "head_dim": 4, "sliding_window": 4,
           "num_local_experts": 4, "num_experts_per_tok": 1}
    attn = 64 + 32 + 32 + 64 + (8 + 4 + 4) + 8 + 2  # weights, qkv biases, o bias, 2 sinks
    expert = 384 + 2 * 16 + 8  # gate_up bias 2i, down bias h
    shared = 2 * (attn + 8 * 4 + 4 + 16) + 8 + 160
    assert param_count(from_hf_config(cfg)) == ParamCount(shared + 8 * expert, shared + 2 * expert, 80)


def test_mamba_and_mamba2_mixers_by_hand():
    m1 = {"model_type": "mamba", "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
          "state_size": 2, "conv_kernel": 3, "time_step_rank": 1, "vocab_size": 10}
    # in_proj 4·16 = 64, conv 8·3 + 8 = 32, x_proj 8·(1+4) = 40, dt_proj 1·8 + 8 = 16, A 16, D 8,
    # out 8·4 = 32, norm 4, final norm 4, tied embedding 40
    assert param_count(from_hf_config(m1)).total == 64 + 32 + 40 + 16 + 16 + 8 + 32 + 4 + 4 + 40
    m2 = {"d_model": 4, "n_layer": 1, "vocab_size": 10, "pad_vocab_size_multiple": 4, "tie_embeddings": True,
          "ssm_cfg": {"layer": "Mamba2", "d_state": 2, "d_conv": 3, "headdim": 4, "ngroups": 1}}
    # d_in 8, 2 heads, conv dim 8 + 4 = 12: in_proj 4·(16 + 4 + 2) = 88, conv 12·3 + 12 = 48,
    # dt_bias/A_log/D 6, gated norm 8, out 32, norm 4, final 4, embedding 12 rows (padded) · 4 = 48
    assert param_count(from_hf_config(m2)).total == 88 + 48 + 6 + 8 + 32 + 4 + 4 + 48


def test_boolean_fields_must_be_json_booleans():
    cfg = {**dict(load_model("jamba-v0.1").config), "mamba_proj_bias": "false"}
    with pytest.raises(ConfigError, match="mamba_proj_bias"):
        param_count(from_hf_config(cfg))
