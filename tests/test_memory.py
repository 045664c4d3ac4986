"""The calculator against every number in the seeds and the primary-source tables."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.calc import memory, units
from kvsim.calc.config import LayerSpec, ModelSpec
from kvsim.calc.counterfactual import (
    as_mha,
    attention_variants,
    equivalent_gqa_groups,
    full_attention,
)
from kvsim.calc.registry import load_model
from kvsim.calc.tokens_fed import tokens_fed

KiB, MiB, GiB = 2**10, 2**20, 2**30


def tiny(*layers, name="tiny"):
    return ModelSpec(name=name, model_type="llama", layers=tuple(layers), hidden_size=64,
                     num_attention_heads=4, vocab_size=32)


# ------------------------------------------------------------ seed 001: Llama 3


def test_llama3_8b_per_token_and_mha_counterfactual():
    spec = load_model("llama-3-8b")
    assert memory.bytes_per_token(spec, "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072 == 128 * KiB
    assert memory.bytes_per_token(as_mha(spec), "bf16") == 512 * KiB


def test_llama3_70b_per_token_and_mha_counterfactual():
    spec = load_model("llama-3-70b")
    assert memory.bytes_per_token(spec, "bf16") == 327_680 == 320 * KiB
    assert memory.bytes_per_token(as_mha(spec), "bf16") == int(2.5 * MiB)


def test_8k_request_is_1_gib_and_16x8k_equals_one_128k_request():
    spec = load_model("llama-3.1-8b")
    assert memory.kv_bytes(spec, 8192) == 1 * GiB
    assert memory.kv_bytes(spec, 8192, batch=16) == 16 * GiB
    assert memory.kv_bytes(spec, 131_072) == 16 * GiB
    assert units.format_bytes(memory.kv_bytes(spec, 131_072)) == "16 GiB"


# ------------------------------------------------------------ seed 001: DeepSeek-V3 geometry table


def test_deepseek_v3_attention_variant_table():
    variants = attention_variants()  # 61 layers, 128 heads, d_h 128, GQA 8, MLA 512 + 64
    per_layer = {k: v.layers[0].elements_per_token for k, v in variants.items()}
    assert per_layer == {"MHA": 32_768, "GQA-8": 2_048, "MQA": 256, "MLA": 576}
    total = {k: memory.elements_per_token(v) for k, v in variants.items()}
    assert total == {"MHA": 1_998_848, "GQA-8": 124_928, "MQA": 15_616, "MLA": 35_136}
    shown = {k: units.format_bytes(memory.bytes_per_token(v, "bf16")) for k, v in variants.items()}
    assert shown == {"MHA": "3.81 MiB", "GQA-8": "244 KiB", "MQA": "30.5 KiB", "MLA": "68.6 KiB"}
    pct = {k: round(100 * total[k] / total["MHA"], 2) for k in total}
    assert pct == {"MHA": 100.0, "GQA-8": 6.25, "MQA": 0.78, "MLA": 1.76}


def test_real_deepseek_v3_matches_the_variant_and_is_70272_bytes():
    spec = load_model("deepseek-v3")
    assert memory.bytes_per_token(spec, "bf16") == 70_272 == memory.bytes_per_token(attention_variants()["MLA"])


def test_mla_equals_gqa_with_2_25_groups():
    v2 = load_model("deepseek-v2")
    assert equivalent_gqa_groups(v2, head_dim=128) == 2.25
    assert v2.layers[0].elements_per_token == 2 * 2.25 * 128


def test_mistral_window_is_8x_smaller_at_32k():
    spec = load_model("mistral-7b-v0.1")
    assert memory.kv_bytes(full_attention(spec), 32_768) == 8 * memory.kv_bytes(spec, 32_768)


def test_fp8_halves_and_2bit_is_an_eighth_before_metadata():
    spec = load_model("llama-3-8b")
    assert 2 * memory.bytes_per_token(spec, "fp8") == memory.bytes_per_token(spec, "bf16")
    q2 = memory.parse_kv_dtype("q2")
    assert 8 * q2.vector_bytes(128, metadata=False) == memory.parse_kv_dtype("bf16").vector_bytes(128)


def test_tokens_fed_with_and_without_cache():
    assert tokens_fed(1000, 1000, cached=False) == 1_499_500
    assert tokens_fed(1000, 1000, cached=True) == 1_999
    assert tokens_fed(1000, 1000, False) == sum(999 + k for k in range(1, 1001))


# ------------------------------------------------------------ primary-source tables


def test_deepseek_v2_table_9_elements_per_token():
    # MLA models are the released V2-Lite (27 layers) and V2 (60 layers): 576 elements per layer
    assert round(memory.elements_per_token(load_model("deepseek-v2-lite")) / 1000, 1) == 15.6
    assert round(memory.elements_per_token(load_model("deepseek-v2")) / 1000, 1) == 34.6
    # MHA baselines: 2·l·n_h·d_h. Small: V2-Lite's 27 layers × 16 heads × 128. Large: 60 layers,
    # n_h·d_h = 7168 (56 heads of 128) - geometry inferred from the table, not stated in the paper.
    small = attention_variants(num_layers=27, num_attention_heads=16, head_dim=128)["MHA"]
    large = attention_variants(num_layers=60, num_attention_heads=56, head_dim=128)["MHA"]
    assert round(memory.elements_per_token(small) / 1000, 1) == 110.6
    assert round(memory.elements_per_token(large) / 1000, 1) == 860.2


def test_jamba_table_1_at_256k_tokens_16_bit():
    t = 256 * 1024
    llama2_7b = attention_variants(num_layers=32, num_attention_heads=32, head_dim=128)["MHA"]
    assert memory.kv_bytes(llama2_7b, t, kv_dtype="fp16") == 128 * GiB
    # the paper's Mistral figure ignores the sliding window; with it, the cache stops at 4096 tokens
    mistral = load_model("mistral-7b-v0.1")
    assert memory.kv_bytes(full_attention(mistral), t, kv_dtype="fp16") == 32 * GiB
    assert memory.kv_bytes(mistral, t, kv_dtype="fp16") == 512 * MiB
    assert memory.kv_bytes(load_model("mixtral-8x7b"), t, kv_dtype="fp16") == 32 * GiB
    jamba = load_model("jamba-v0.1")
    assert memory.kv_bytes(jamba, t, kv_dtype="fp16") == 4 * GiB
    assert memory.bytes_per_token(jamba) == 16_384


def test_vllm_paper_opt_13b_800_kib_per_token():
    opt13b = attention_variants(num_layers=40, num_attention_heads=40, head_dim=128)["MHA"]
    assert memory.bytes_per_token(opt13b, "fp16") == 2 * 5120 * 40 * 2 == 800 * KiB


# ------------------------------------------------------------ kinds and views


def test_sliding_keeps_min_t_w_and_chunked_keeps_current_chunk():
    t = np.arange(0, 13)
    s = LayerSpec("sliding", num_key_value_heads=1, head_dim=4, sliding_window=4)
    c = LayerSpec("chunked", num_key_value_heads=1, head_dim=4, attention_chunk_size=4)
    assert list(memory.kept_tokens(s, t)) == [0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4]
    assert list(memory.kept_tokens(c, t)) == [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]


def test_recurrent_state_is_independent_of_tokens():
    spec = load_model("mamba2-2.7b")
    assert memory.kv_bytes(spec, 10**6) == 0
    assert memory.fixed_state_bytes(spec, 1, "fp32") == 42_975_232 * 4
    assert memory.total_bytes(spec, 10, 3, state_dtype="fp32") == memory.total_bytes(spec, 10**6, 3, state_dtype="fp32")


@pytest.mark.parametrize("name,reference,all_bf16", [
    # state per sequence as mlx-lm 0.32 measures it on one real-geometry layer (ArraysCache nbytes, bf16
    # model): Qwen3-Next 2,146,304 B x 36 layers, Mamba-2 2.7B 2,653,696 B x 64 (tests/test_mlx_lm_dropin.py
    # checks the same dtypes on tiny models)
    ("qwen3-next-80b-a3b", 36 * (3 * 8192 * 2 + 32 * 128 * 128 * 4), 39_518_208),
    ("mamba2-2.7b", 64 * (3 * 5376 * 2 + 80 * 64 * 128 * 4), 85_950_464),
    ("recurrentgemma-2b", 18 * (3 * 2560 * 2 + 2560 * 4), 368_640),        # transformers: RG-LRU h in fp32
    ("jamba-v0.1", 8_716_288, 8_716_288),                                   # Mamba-1: model dtype throughout
])
def test_recurrent_state_dtype_follows_the_reference_implementation(name, reference, all_bf16):
    spec = load_model(name)
    assert memory.fixed_state_bytes(spec) == reference                     # state_dtype=None: the default
    assert memory.fixed_state_bytes(spec, state_dtype="bf16") == all_bf16  # an explicit dtype overrides all
    assert memory.fixed_state_bytes(spec, 2, model_dtype="fp32") == memory.fixed_state_bytes(spec, 2, "fp32")
    assert memory.layer_table(spec, 10)[0]["state_bytes"] == memory.state_bytes(spec.layers[0])


def test_explain_costs_each_state_tensor_in_its_dtype():
    from kvsim.calc.explain import explain

    text = explain(load_model("qwen3-next-80b-a3b"), 4096).text
    assert "conv 3×8192 × 2 B (bf16) + ssm 32×128×128 × 4 B (fp32)) = 77,266,944 B per sequence" in text
    assert "ssm 32×128×128 × 2 B (bf16)" in explain(load_model("qwen3-next-80b-a3b"), 4096, state_dtype="bf16").text


def test_quantized_bytes_include_scales_and_biases_exactly():
    layer = LayerSpec("full", num_key_value_heads=8, head_dim=128)
    q4 = memory.parse_kv_dtype("q4", group_size=64, scale_dtype="fp16")
    assert memory.layer_token_bytes(layer, q4) == 8 * 2 * (128 * 4 // 8 + 2 * 2 * 2)  # 1,152
    q8 = memory.parse_kv_dtype("q8", group_size=64, scale_dtype="fp16")
    assert memory.layer_token_bytes(layer, q8) // 16 == 136  # mlx-lm's 136 B vs 256 B per head per K
    q3 = memory.parse_kv_dtype("q3", group_size=32, scale_dtype="bf16")
    assert q3.vector_bytes(128) == 48 + 2 * 4 * 2


def test_full_precision_recent_tokens():
    layer = LayerSpec("full", num_key_value_heads=1, head_dim=64)
    dt = memory.parse_kv_dtype("q4", 64, "fp16", full_precision_tokens=128)
    fp, q = 2 * 64 * 2, 2 * (32 + 4)
    assert memory.layer_kv_bytes(layer, 100, dt) == 100 * fp
    assert memory.layer_kv_bytes(layer, 1000, dt) == 128 * fp + 872 * q


def test_allocated_view_step_growth_and_paged_blocks():
    spec = load_model("llama-3-8b")
    per = memory.bytes_per_token(spec)
    assert memory.allocated_bytes(spec, [1, 256, 257]).tolist() == [256 * per, 256 * per, 512 * per]
    assert memory.allocated_bytes(spec, [1, 16, 17], block_size=16).tolist() == [16 * per, 16 * per, 32 * per]
    # a window that does not start on a block boundary needs one extra block
    w = LayerSpec("sliding", num_key_value_heads=1, head_dim=4, sliding_window=32)
    b = memory.layer_token_bytes(w, "fp32")
    assert memory.layer_kv_bytes(w, 64, "fp32", view="allocated", block_size=16) == 32 * b
    assert memory.layer_kv_bytes(w, 65, "fp32", view="allocated", block_size=16) == 48 * b


def test_vllm_page_size_llama3_8b():
    # 16 tokens × 2 × 8 heads × 128 × 2 B = 65,536 B per layer per block
    layer = load_model("llama-3-8b").layers[0]
    assert memory.layer_kv_bytes(layer, 16, "bf16", view="allocated", block_size=16) == 65_536


def test_read_bytes_windows_read_at_most_w():
    spec = load_model("gpt-oss-20b")
    a, b = memory.read_bytes_per_step(spec, [1000, 2000])
    per_full = 12 * 2 * 8 * 64 * 2
    assert b - a == 1000 * per_full  # only the 12 full layers grow


def test_tensor_parallel_heads_and_mla_replication():
    spec = load_model("llama-3-70b")
    assert memory.bytes_per_token(spec, tp=8) == memory.bytes_per_token(spec) // 8
    assert memory.bytes_per_token(spec, tp=16) == memory.bytes_per_token(spec) // 8  # replicated
    v3 = load_model("deepseek-v3")
    assert memory.bytes_per_token(v3, tp=8) == memory.bytes_per_token(v3)


@pytest.mark.parametrize("tp", [3, 5, 6, 12, 20])
def test_tensor_parallel_refuses_an_uneven_split(tp):
    # 8 KV heads: tp 3 would count 2 heads on each of 3 ranks (6 of 8), capacity 1.33x too high
    with pytest.raises(ValueError) as e:
        memory.bytes_per_token(load_model("llama-3-8b"), tp=tp)
    assert str(e.value).startswith(f"tp={tp} neither divides num_key_value_heads=8 nor is a multiple of it")
    assert "\n" not in str(e.value)


def test_tensor_parallel_beyond_the_heads_replicates_one_head_per_rank():
    spec = load_model("llama-3-8b")
    per_head = 32 * 2 * 128 * 2  # 32 layers, K and V, head_dim 128, bf16
    assert memory.bytes_per_token(spec, tp=16) == memory.bytes_per_token(spec, tp=8) == per_head
    assert memory.tp_split(spec, 16) == [{"kind": "attention", "layers": 32, "num_key_value_heads": 8,
                                          "heads_per_rank": 1, "ranks_per_copy": 2}]
    assert memory.tp_split(spec, 4)[0]["heads_per_rank"] == 2 and memory.tp_split(spec, 4)[0]["ranks_per_copy"] == 1
    assert "each rank keeps 1 head, each head replicated on 2 ranks" in memory.tp_note(spec, 16)
    assert memory.tp_note(spec, 1) is None


def test_tensor_parallel_replicates_the_mla_latent_on_every_rank():
    v3 = load_model("deepseek-v3")
    assert memory.tp_split(v3, 8) == [{"kind": "mla", "layers": 61, "num_key_value_heads": None,
                                       "heads_per_rank": None, "ranks_per_copy": 8}]
    assert memory.bytes_per_token(v3, tp=8) == 61 * (512 + 64) * 2
    assert memory.bytes_per_token(v3, tp=3) == memory.bytes_per_token(v3)  # no heads: any tp is even
    assert "every one of the 8 ranks holds all of it" in memory.tp_note(v3, 8)


def test_vectorized_sweep_matches_scalar_calls():
    spec = load_model("gemma-3-27b")
    t = np.array([0, 1, 1023, 1024, 1025, 40_000])
    vec = memory.kv_bytes(spec, t)
    assert vec.tolist() == [memory.kv_bytes(spec, int(x)) for x in t]


@settings(max_examples=60, deadline=None)
@given(t=st.integers(0, 10**7), w=st.integers(1, 10**5), n=st.sampled_from([1, 16, 32]))
def test_views_order_theoretical_le_allocated(t, w, n):
    layer = LayerSpec("sliding", num_key_value_heads=2, head_dim=8, sliding_window=w)
    theo = memory.layer_kv_bytes(layer, t, "fp16")
    paged = memory.layer_kv_bytes(layer, t, "fp16", view="allocated", block_size=n)
    stepped = memory.layer_kv_bytes(layer, t, "fp16", view="allocated", step=n)
    per = memory.layer_token_bytes(layer, "fp16")
    assert theo <= paged <= theo + 2 * n * per
    assert theo <= stepped


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("call, field", [
    (lambda: memory.parse_kv_dtype("int7"), "kv dtype"),
    (lambda: memory.parse_kv_dtype("q4", group_size=48), "group_size"),
    (lambda: memory.parse_kv_dtype("q4", scale_dtype="fp8"), "scale_dtype"),
    (lambda: memory.kv_bytes(load_model("llama-3-8b"), -1), "tokens"),
    (lambda: memory.kv_bytes(load_model("llama-3-8b"), 8, batch=0), "batch"),
    (lambda: memory.kv_bytes(load_model("llama-3-8b"), 8, tp=0), "tp"),
    (lambda: memory.bytes_per_token(load_model("phi-3-mini-4k"), memory.parse_kv_dtype("q4", 64)), "head_dim"),
])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError, match=field) as e:
        call()
    assert "\n" not in str(e.value)
