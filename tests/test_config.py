"""Per-layer specs from real config.json files, and one-line errors for bad input."""

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim.calc.config as config_module
import kvsim.calc.families as families_module
import kvsim.calc.families_recurrent as families_recurrent_module
import kvsim.calc.hf_config as hf_config_module
import kvsim.calc.layer_fields as layer_fields_module
from kvsim.calc.config import ConfigError, LayerSpec
from kvsim.calc.families import SUPPORTED_MODEL_TYPES
from kvsim.calc.hf_config import from_hf_config, load_config, text_config
from kvsim.calc.registry import data_dir, model_names

MODELS = data_dir() / "models"


def raw(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def spec_of(name: str):
    return load_config(MODELS / f"{name}.json")


def indices(spec, kind):
    return [i for i, layer in enumerate(spec.layers) if layer.kind == kind]


# ---------------------------------------------------------------- every data file


@pytest.mark.parametrize("path", sorted(MODELS.glob("*.json")), ids=lambda p: p.stem)
def test_every_data_file_loads(path):
    spec = load_config(path)
    assert spec.name == path.stem and spec.model_type in SUPPORTED_MODEL_TYPES
    assert spec.num_hidden_layers == len(spec.layers) > 0
    assert sum(spec.kinds.values()) == spec.num_hidden_layers
    # every layer keeps something, except the MLP / MoE blocks of Nemotron-H (kind "none")
    assert all(layer.elements_per_token > 0 or layer.state_elements > 0 or layer.kind == "none"
               for layer in spec.layers)


def test_data_files_are_exactly_the_registry():
    assert sorted(p.stem for p in MODELS.glob("*.json")) == model_names()


# a real config for every supported model_type; the gemma3/llama4 outer types are covered by
# dropping the inner model_type (then the outer one names the family)
REAL_CONFIG_FOR = {
    "llama": "llama-3-8b", "mistral": "mistral-7b-v0.1", "mixtral": "mixtral-8x7b", "qwen2": "qwen2.5-7b",
    "qwen3": "qwen3-8b", "phi3": "phi-3-mini-4k", "gemma2": "gemma-2-9b", "gemma3_text": "gemma-3-27b",
    "gemma3": "gemma-3-27b", "llama4_text": "llama-4-scout", "llama4": "llama-4-scout",
    "deepseek_v2": "deepseek-v2", "deepseek_v3": "deepseek-v3", "jamba": "jamba-v0.1", "gpt_oss": "gpt-oss-20b",
    "qwen3_next": "qwen3-next-80b-a3b", "mamba": None, "falcon_mamba": "falcon-mamba-7b", "mamba2": "mamba2-2.7b",
    "recurrent_gemma": "recurrentgemma-2b", "kimi_k2": "kimi-k2-instruct", "cohere": "command-r-v01",
    "cohere2": "command-r7b", "olmo2": "olmo-2-7b", "phimoe": "phi-3.5-moe", "granitemoehybrid": "granite-4.0-h-small",
    "nemotron_h": "nemotron-h-8b", "falcon_h1": "falcon-h1-0.5b",
}


def test_every_supported_model_type_has_a_real_config_test():
    # families read with their checkpoints' key names: data/models/families (tests/test_families_decoder.py)
    raw = [json.loads(p.read_text()) for p in (MODELS / "families").glob("*.json") if p.name != "SOURCES.json"]
    # a multimodal wrapper's file (mllama, emu3) also holds its text model's config (mllama_text_model ...)
    families = {c["model_type"] for c in raw} | {c["text_config"]["model_type"] for c in raw
                                                if isinstance(c.get("text_config"), dict)}
    assert set(REAL_CONFIG_FOR) | families == set(SUPPORTED_MODEL_TYPES)


# ---------------------------------------------------------------- dense families


@pytest.mark.parametrize("name, layers", [("llama-3-8b", 32), ("llama-3-70b", 80), ("llama-3.1-8b", 32),
                                          ("llama-3.1-405b", 126), ("mixtral-8x7b", 32)])
def test_llama_family_is_all_full_gqa_8_heads_of_128(name, layers):
    spec = spec_of(name)
    assert spec.kinds == {"full": layers}
    assert {(l.num_key_value_heads, l.head_dim, l.v_head_dim) for l in spec.layers} == {(8, 128, 128)}


def test_llama_3_2_1b_explicit_head_dim_64():
    spec = spec_of("llama-3.2-1b")
    assert spec.kinds == {"full": 16} and spec.layers[0].head_dim == 64 and spec.layers[0].elements_per_token == 1024


def test_mistral_every_layer_slides_4096():
    spec = spec_of("mistral-7b-v0.1")
    assert spec.kinds == {"sliding": 32} and {l.window_tokens for l in spec.layers} == {4096}


def test_qwen2_5_sliding_window_is_inactive_without_use_sliding_window():
    spec = spec_of("qwen2.5-7b")
    assert raw("qwen2.5-7b")["sliding_window"] == 131072
    assert spec.kinds == {"full": 28} and spec.layers[0].num_key_value_heads == 4 and spec.layers[0].head_dim == 128


def test_qwen3_8b_explicit_head_dim():
    spec = spec_of("qwen3-8b")
    assert spec.kinds == {"full": 36} and spec.layers[0].head_dim == 128 and spec.layers[0].num_key_value_heads == 8


def test_phi3_mha_head_dim_derived_and_config_window_2047():
    spec = spec_of("phi-3-mini-4k")
    layer = spec.layers[0]
    assert spec.kinds == {"sliding": 32} and layer.window_tokens == 2047
    assert (layer.num_key_value_heads, layer.head_dim) == (32, 96)  # 3072 / 32, MHA


# ---------------------------------------------------------------- hybrids and head_dim traps


def test_gemma_2_9b_alternates_and_head_dim_is_256_not_224():
    spec = spec_of("gemma-2-9b")
    assert 3584 // 16 == 224 and {l.head_dim for l in spec.layers} == {256}
    assert indices(spec, "sliding") == list(range(0, 42, 2)) and indices(spec, "full") == list(range(1, 42, 2))
    assert {l.window_tokens for l in spec.layers if l.kind == "sliding"} == {4096}


def test_gemma_3_27b_52_sliding_1024_and_10_global():
    spec = spec_of("gemma-3-27b")
    assert spec.model_type == "gemma3_text" and spec.kinds == {"sliding": 52, "full": 10}
    assert indices(spec, "full") == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert {l.window_tokens for l in spec.layers if l.kind == "sliding"} == {1024}
    assert {(l.num_key_value_heads, l.head_dim) for l in spec.layers} == {(16, 128)}  # not 5376 / 32 = 168


def test_gemma_3_4b_takes_omitted_fields_from_the_transformers_defaults():
    cfg = raw("gemma-3-4b")
    assert "num_attention_heads" not in cfg["text_config"] and "head_dim" not in cfg["text_config"]
    spec = from_hf_config(cfg)
    assert spec.kinds == {"sliding": 29, "full": 5} and indices(spec, "full") == [5, 11, 17, 23, 29]
    assert (spec.num_attention_heads, spec.vocab_size) == (8, 262208)
    assert {(l.num_key_value_heads, l.head_dim) for l in spec.layers} == {(4, 256)}  # not 2560 / 8 = 320
    assert spec.torch_dtype == "bfloat16"  # the outer field, merged under text_config


def test_outer_model_type_names_the_family_when_the_inner_one_is_missing():
    for name, outer in (("gemma-3-27b", "gemma3"), ("llama-4-scout", "llama4")):
        cfg = raw(name)
        del cfg["text_config"]["model_type"]
        spec = from_hf_config(cfg)
        assert spec.model_type == outer and spec.layers == spec_of(name).layers


def test_llama_4_scout_36_chunked_8192_and_12_full_nope():
    spec = spec_of("llama-4-scout")
    assert spec.kinds == {"chunked": 36, "full": 12}
    assert indices(spec, "full") == list(range(3, 48, 4))
    assert all(not l.use_rope for l in spec.layers if l.kind == "full")
    assert all(l.use_rope and l.window_tokens == 8192 for l in spec.layers if l.kind == "chunked")


def test_llama_4_without_no_rope_layers_uses_the_interval():
    cfg = raw("llama-4-scout")
    del cfg["text_config"]["no_rope_layers"]
    assert from_hf_config(cfg).layers == spec_of("llama-4-scout").layers
    cfg["text_config"]["no_rope_layer_interval"] = 2
    assert indices(from_hf_config(cfg), "full") == list(range(1, 48, 2))


@pytest.mark.parametrize("name, n", [("gpt-oss-20b", 24), ("gpt-oss-120b", 36)])
def test_gpt_oss_sliding_128_on_even_layers_and_head_dim_64_not_45(name, n):
    spec = spec_of(name)
    assert spec.kinds == {"sliding": n // 2, "full": n // 2}
    assert indices(spec, "sliding") == list(range(0, n, 2))
    assert {l.window_tokens for l in spec.layers if l.kind == "sliding"} == {128}
    assert 2880 // 64 == 45 and {(l.num_key_value_heads, l.head_dim) for l in spec.layers} == {(8, 64)}


def test_deepseek_mla_keeps_576_elements_per_layer():
    for name, n in (("deepseek-v2", 60), ("deepseek-v2-lite", 27), ("deepseek-v3", 61)):
        spec = spec_of(name)
        assert spec.kinds == {"mla": n}
        assert {(l.kv_lora_rank, l.qk_rope_head_dim, l.elements_per_token) for l in spec.layers} == {(512, 64, 576)}


def test_jamba_4_attention_layers_at_period_8_offset_4_and_28_mamba():
    spec = spec_of("jamba-v0.1")
    assert indices(spec, "full") == [4, 12, 20, 28] and spec.count("recurrent") == 28
    mamba = spec.layers[0]
    assert mamba.recurrent_family == "mamba" and dict(mamba.state_shapes) == {"conv": (3, 8192), "ssm": (8192, 16)}
    assert sum(l.state_elements for l in spec.layers) == 4_358_144
    assert spec.max_position_embeddings == 262144  # from the official key n_ctx


def test_qwen3_next_36_gated_deltanet_and_12_full_head_dim_256_not_128():
    spec = spec_of("qwen3-next-80b-a3b")
    assert spec.kinds == {"recurrent": 36, "full": 12} and indices(spec, "full") == list(range(3, 48, 4))
    full = spec.layers[3]
    assert 2048 // 16 == 128 and (full.num_key_value_heads, full.head_dim) == (2, 256)
    gdn = spec.layers[0]
    assert gdn.recurrent_family == "gated_deltanet"
    assert dict(gdn.state_shapes) == {"conv": (3, 8192), "ssm": (32, 128, 128)}
    assert sum(l.state_elements for l in spec.layers) == 19_759_104


def test_qwen3_next_layer_types_win_over_the_interval():
    cfg = raw("qwen3-next-80b-a3b")
    cfg["layer_types"] = ["full_attention"] * 2 + ["linear_attention"] * 46
    assert indices(from_hf_config(cfg), "full") == [0, 1]


def test_mamba2_2_7b_state_from_the_official_file_without_model_type():
    cfg = raw("mamba2-2.7b")
    assert "model_type" not in cfg
    spec = from_hf_config(cfg)
    assert spec.model_type == "mamba2" and spec.kinds == {"recurrent": 64}
    assert dict(spec.layers[0].state_shapes) == {"conv": (3, 5376), "ssm": (80, 64, 128)}
    assert sum(l.state_elements for l in spec.layers) == 42_975_232


def test_falcon_mamba_uses_intermediate_size_not_the_stray_expand_16():
    spec = spec_of("falcon-mamba-7b")
    assert raw("falcon-mamba-7b")["expand"] == 16
    assert dict(spec.layers[0].state_shapes) == {"conv": (3, 8192), "ssm": (8192, 16)}
    assert sum(l.state_elements for l in spec.layers) == 9_961_472


def test_mamba_model_type_hf_format_and_mamba_ssm_format():
    # shaped like state-spaces/mamba-2.8b-hf (model_type mamba) and its mamba_ssm original
    hf = {"model_type": "mamba", "hidden_size": 2560, "intermediate_size": 5120, "num_hidden_layers": 64,
          "state_size": 16, "conv_kernel": 4, "vocab_size": 50280}
    ssm = {"d_model": 2560, "n_layer": 64, "vocab_size": 50277, "ssm_cfg": {}, "pad_vocab_size_multiple": 8}
    a, b = from_hf_config(hf), from_hf_config(ssm)
    assert a.model_type == b.model_type == "mamba" and a.layers == b.layers
    assert dict(a.layers[0].state_shapes) == {"conv": (3, 5120), "ssm": (5120, 16)}


def test_recurrentgemma_8_local_attention_and_18_rg_lru():
    spec = spec_of("recurrentgemma-2b")
    assert indices(spec, "sliding") == list(range(2, 26, 3)) and spec.count("recurrent") == 18
    attn = spec.layers[2]
    assert (attn.num_key_value_heads, attn.head_dim, attn.window_tokens) == (1, 256, 2048)
    lru = spec.layers[0]
    assert lru.recurrent_family == "rg_lru" and dict(lru.state_shapes) == {"conv": (3, 2560), "ssm": (2560,)}


def test_kimi_k2_is_deepseek_v3s_mla_layout():
    spec = spec_of("kimi-k2-instruct")
    assert spec.kinds == {"mla": 61} and spec.num_attention_heads == 64
    assert {(x.kv_lora_rank, x.qk_rope_head_dim) for x in spec.layers} == {(512, 64)}
    assert spec.layers[0].elements_per_token == 576


@pytest.mark.parametrize("name, layers, kv_heads", [("command-r-v01", 40, 64), ("olmo-2-7b", 32, 32),
                                                     ("phi-3.5-moe", 32, 8)])
def test_command_r_olmo2_and_phi35_moe_are_all_full_attention_head_dim_128(name, layers, kv_heads):
    spec = spec_of(name)
    assert spec.kinds == {"full": layers}
    assert {(x.num_key_value_heads, x.head_dim, x.use_rope) for x in spec.layers} == {(kv_heads, 128, True)}


def test_phi35_moe_window_as_long_as_the_context_is_no_window():
    assert raw("phi-3.5-moe")["sliding_window"] == raw("phi-3.5-moe")["max_position_embeddings"]
    windowed = from_hf_config({**raw("phi-3.5-moe"), "sliding_window": 2048})
    assert windowed.kinds == {"sliding": 32}


def test_command_r7b_3_sliding_then_1_global_without_rope():
    spec = spec_of("command-r7b")
    assert indices(spec, "full") == list(range(3, 32, 4)) and spec.count("sliding") == 24
    assert {x.window_tokens for x in spec.layers if x.kind == "sliding"} == {4096}
    assert {x.use_rope for x in spec.layers if x.kind == "full"} == {False}
    assert {x.use_rope for x in spec.layers if x.kind == "sliding"} == {True}
    types = ["sliding_attention", "full_attention"] * 16  # layer_types wins over the pattern
    assert indices(from_hf_config({**raw("command-r7b"), "layer_types": types}), "full") == list(range(1, 32, 2))


def test_granite_4_h_small_36_mamba2_and_4_nope_attention():
    spec = spec_of("granite-4.0-h-small")
    assert indices(spec, "full") == [5, 15, 25, 35] and spec.count("recurrent") == 36
    attn, mamba = spec.layers[5], spec.layers[0]
    assert (attn.num_key_value_heads, attn.head_dim, attn.use_rope) == (8, 128, False)
    assert mamba.recurrent_family == "mamba2"
    assert dict(mamba.state_shapes) == {"conv": (3, 8192 + 2 * 128), "ssm": (128, 64, 128)}
    newer = ["linear_attention" if t == "mamba" else "full_attention" for t in raw("granite-4.0-h-small")["layer_types"]]
    assert from_hf_config({**raw("granite-4.0-h-small"), "layer_types": newer}).layers == spec.layers
    no_types = {k: v for k, v in raw("granite-4.0-h-small").items() if k != "layer_types"}
    assert from_hf_config(no_types).kinds == {"recurrent": 40}  # GraniteMoeHybridConfig's default


def test_nemotron_h_8b_pattern_24_mamba2_4_attention_24_mlp():
    spec = spec_of("nemotron-h-8b")
    pattern = raw("nemotron-h-8b")["hybrid_override_pattern"]
    assert spec.num_hidden_layers == len(pattern) == 52
    assert indices(spec, "full") == [i for i, c in enumerate(pattern) if c == "*"] == [7, 18, 29, 40]
    assert spec.count("recurrent") == 24 and spec.count("none") == 24
    attn, mamba = spec.layers[7], spec.layers[0]
    assert (attn.num_key_value_heads, attn.head_dim, attn.use_rope) == (8, 128, False)
    assert dict(mamba.state_shapes) == {"conv": (3, 8192 + 2 * 8 * 128), "ssm": (128, 64, 128)}
    as_list = [{"M": "mamba", "*": "attention", "-": "mlp"}[c] for c in pattern]
    assert from_hf_config({**raw("nemotron-h-8b"), "hybrid_override_pattern": None,
                           "layers_block_type": as_list}).layers == spec.layers


def test_falcon_h1_every_layer_keeps_kv_and_a_mamba2_state():
    spec = spec_of("falcon-h1-0.5b")
    assert spec.kinds == {"full": 36}
    layer = spec.layers[0]
    assert (layer.num_key_value_heads, layer.head_dim, layer.recurrent_family) == (2, 64, "mamba2")
    assert dict(layer.state_shapes) == {"conv": (3, 1536 + 2 * 128), "ssm": (24, 64, 128)}
    from kvsim.calc import memory
    assert memory.fixed_state_bytes(spec, 1, "fp32") == 36 * (3 * 1792 + 24 * 64 * 128) * 4
    assert memory.bytes_per_token(spec) == 36 * 2 * 2 * 64 * 2  # and K/V like any attention layer


def test_a_layer_state_needs_an_attention_or_recurrent_kind():
    with pytest.raises(ConfigError, match="keeps no recurrent state"):
        LayerSpec("mla", kv_lora_rank=4, qk_rope_head_dim=2, recurrent_family="mamba2", state_shapes=(("h", (4,)),))
    with pytest.raises(ConfigError, match="recurrent_family"):
        LayerSpec("full", num_key_value_heads=1, head_dim=8, state_shapes=(("h", (4,)),))


# ---------------------------------------------------------------- bad input


def _without(name, *path):
    def mutate(cfg):
        target = cfg
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return name, mutate


def _setting(name, value, *path):
    def mutate(cfg):
        target = cfg
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return name, mutate


BAD = [
    (*_without("llama-3-8b", "num_hidden_layers"), "num_hidden_layers"),
    (*_without("llama-3-8b", "vocab_size"), "vocab_size"),
    (*_without("deepseek-v3", "kv_lora_rank"), "kv_lora_rank"),
    (*_without("gpt-oss-20b", "sliding_window"), "sliding_window"),
    (*_without("qwen3-next-80b-a3b", "linear_num_value_heads"), "linear_num_value_heads"),
    (*_without("recurrentgemma-2b", "attention_window_size"), "attention_window_size"),
    (*_without("jamba-v0.1", "attn_layer_period"), "attn_layer_period"),
    (*_setting("llama-3-8b", -8, "num_key_value_heads"), "num_key_value_heads"),
    (*_setting("llama-3-8b", 0, "num_hidden_layers"), "num_hidden_layers"),
    (*_setting("llama-3-8b", "32", "num_attention_heads"), "num_attention_heads"),
    (*_setting("llama-3-8b", True, "num_key_value_heads"), "num_key_value_heads"),
    (*_setting("qwen3-8b", 127.5, "head_dim"), "head_dim"),
    (*_setting("mistral-7b-v0.1", -1, "sliding_window"), "sliding_window"),
    (*_setting("gemma-2-9b", "4096", "sliding_window"), "sliding_window"),
    (*_setting("llama-3-8b", 4095, "hidden_size"), "head_dim"),  # 4095 / 32 is not whole
    (*_setting("gpt-oss-20b", ["sliding_attention", "full_attention"] * 11, "layer_types"), "layer_types"),
    (*_setting("gpt-oss-20b", ["sliding_attention", "chunked_attention"] * 12, "layer_types"), "layer_types"),
    (*_setting("gpt-oss-20b", "sliding_attention", "layer_types"), "layer_types"),
    (*_setting("qwen3-next-80b-a3b", ["mamba"] * 48, "layer_types"), "layer_types"),
    (*_setting("llama-4-scout", [1, 1, 1, 0] * 11, "text_config", "no_rope_layers"), "no_rope_layers"),
    (*_setting("llama-4-scout", [1, 1, 1, 2] * 12, "text_config", "no_rope_layers"), "no_rope_layers"),
    (*_setting("jamba-v0.1", 8, "attn_layer_offset"), "attn_layer_offset"),
    (*_setting("jamba-v0.1", True, "attn_layer_offset"), "attn_layer_offset"),
    (*_setting("recurrentgemma-2b", "recurrent", "block_types"), "block_types"),
    (*_setting("recurrentgemma-2b", ["recurrent", "mlp"], "block_types"), "block_types"),
    (*_setting("mamba2-2.7b", {"layer": "Mamba2", "headdim": 96}, "ssm_cfg"), "headdim"),
    (*_setting("mamba2-2.7b", [0], "attn_layer_idx"), "attn_layer_idx"),
    (*_setting("llama-3-8b", "500000", "rope_theta"), "rope_theta"),
    (*_setting("qwen3-next-80b-a3b", 1.5, "partial_rotary_factor"), "partial_rotary_factor"),
    (*_setting("gemma-2-9b", 0, "query_pre_attn_scalar"), "query_pre_attn_scalar"),
    (*_setting("llama-3-8b", -1e-5, "rms_norm_eps"), "rms_norm_eps"),
    (*_setting("llama-3-8b", "false", "tie_word_embeddings"), "tie_word_embeddings"),
    (*_setting("llama-3-8b", 0, "intermediate_size"), "intermediate_size"),
    (*_setting("deepseek-v3", 0, "qk_nope_head_dim"), "qk_nope_head_dim"),
    (*_setting("deepseek-v3", -1536, "q_lora_rank"), "q_lora_rank"),
    (*_setting("falcon-mamba-7b", -1, "time_step_rank"), "time_step_rank"),
    (*_setting("qwen3-next-80b-a3b", 2.5, "linear_num_key_heads"), "linear_num_key_heads"),
    # an unknown model_type with the standard keys is read (issue 17): tests/test_families_decoder.py
    (*_without("llama-3-8b", "model_type"), "model_type"),
    (*_setting("granite-4.0-h-small", ["mamba"] * 39 + ["mlp"], "layer_types"), "layer_types"),
    (*_setting("granite-4.0-h-small", 96, "mamba_d_head"), "Mamba-2 heads"),
    (*_setting("nemotron-h-8b", "M-*X", "hybrid_override_pattern"), "hybrid_override_pattern"),
    (*_without("nemotron-h-8b", "ssm_state_size"), "ssm_state_size"),
    (*_setting("falcon-h1-0.5b", 100, "mamba_d_head"), "Mamba-2 heads"),
    (*_without("command-r7b", "sliding_window"), "sliding_window"),
]


@pytest.mark.parametrize("name, mutate, field", BAD, ids=[f"{b[0]}-{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_bad_field_is_a_one_line_error_naming_it(name, mutate, field):
    cfg = raw(name)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        from_hf_config(cfg)
    message = str(err.value)
    assert field in message and "\n" not in message


def test_unsupported_model_type_lists_the_supported_ones():
    with pytest.raises(ConfigError) as err:
        from_hf_config({"model_type": "mystery", "hidden_size": 768})  # (bert is read since h22-fam-hybrid)
    message = str(err.value)
    assert "'mystery'" in message and all(t in message for t in SUPPORTED_MODEL_TYPES)


def test_non_object_config_is_an_error():
    with pytest.raises(ConfigError, match="JSON object"):
        from_hf_config([1, 2, 3])


def test_malformed_missing_and_unreadable_files(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 4096,')
    with pytest.raises(ConfigError, match="not valid JSON") as err:
        load_config(bad)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)  # a model folder: its config.json is read
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="is a directory with no config.json"):
        load_config(tmp_path / "empty")
    (tmp_path / "latin1.json").write_bytes(b'{"model_type": "\xe9"}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path / "latin1.json")


def test_layer_spec_rejects_bad_kinds_and_sizes():
    with pytest.raises(ConfigError, match="kind"):
        LayerSpec("global")
    with pytest.raises(ConfigError, match="sliding_window"):
        LayerSpec("sliding", num_key_value_heads=1, head_dim=8)
    with pytest.raises(ConfigError, match="recurrent_family"):
        LayerSpec("recurrent", recurrent_family="lstm", state_shapes=(("h", (4,)),))


def test_text_config_merges_inner_over_outer_without_mutating():
    cfg = {"model_type": "llama4", "torch_dtype": "bfloat16", "text_config": {"hidden_size": 8, "torch_dtype": "float32"}}
    before = copy.deepcopy(cfg)
    merged = text_config(cfg)
    assert merged["torch_dtype"] == "float32" and merged["model_type"] == "llama4" and cfg == before


# ---------------------------------------------------------------- typed fields and the frozen config


@pytest.mark.parametrize("name, fields", [
    ("llama-3-8b", {"rope_theta": 500000.0, "tie_word_embeddings": False, "intermediate_size": 14336,
                    "query_pre_attn_scalar": None, "rms_norm_eps": 1e-6, "qk_nope_head_dim": 0}),
    ("llama-3.2-1b", {"tie_word_embeddings": True, "rope_theta": 10000.0}),
    ("gemma-2-9b", {"query_pre_attn_scalar": 256.0, "tie_word_embeddings": True}),  # tied by Gemma2Config default
    ("gemma-3-4b", {"query_pre_attn_scalar": 256.0}),  # a Gemma3TextConfig default the file omits
    ("deepseek-v3", {"qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": 1536,
                     "intermediate_size": 18432, "moe_intermediate_size": 2048}),
    ("deepseek-v2-lite", {"q_lora_rank": 0}),  # null: no query compression
    ("falcon-mamba-7b", {"time_step_rank": 256, "tie_word_embeddings": False}),
    ("jamba-v0.1", {"time_step_rank": 256}),  # from mamba_dt_rank
    ("mamba2-2.7b", {"time_step_rank": None, "tie_word_embeddings": True}),  # from mamba_ssm's tie_embeddings
    ("qwen3-next-80b-a3b", {"linear_num_key_heads": 16, "partial_rotary_factor": 0.25, "rope_theta": 1e7,
                            "intermediate_size": None, "moe_intermediate_size": 512}),
    ("recurrentgemma-2b", {"partial_rotary_factor": 0.5}),
])
def test_typed_fields_are_parsed_with_their_defaults(name, fields):
    spec = spec_of(name)
    assert {k: getattr(spec, k) for k in fields} == fields


def test_rms_norm_eps_and_dt_rank_aliases():
    mamba = {"model_type": "mamba", "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10}
    assert from_hf_config({**mamba, "layer_norm_epsilon": 1e-5}).rms_norm_eps == 1e-5
    assert from_hf_config({**mamba, "time_step_rank": "auto"}).time_step_rank is None
    assert from_hf_config({**mamba, "dt_rank": 4.0}).time_step_rank == 4


def test_config_is_frozen_deeply_and_the_input_is_not_aliased():
    cfg = raw("gpt-oss-20b")
    cfg["rope_scaling"] = {"factor": 32.0, "extra": [1, {"a": 2}]}
    spec = from_hf_config(cfg)
    cfg["num_key_value_heads"] = 1  # editing the caller's dict afterwards changes nothing
    assert spec.config["num_key_value_heads"] == 8
    assert isinstance(spec.config["layer_types"], tuple) and spec.config["rope_scaling"]["extra"][0] == 1
    with pytest.raises(TypeError):
        spec.config["num_key_value_heads"] = 999
    with pytest.raises(TypeError):
        spec.config["rope_scaling"]["factor"] = 1.0
    with pytest.raises(TypeError):
        spec.config["rope_scaling"]["extra"][1]["a"] = 3
    with pytest.raises(AttributeError):
        spec.config["layer_types"].append("full_attention")


def test_replace_with_a_plain_dict_freezes_it():
    spec = replace(spec_of("llama-3-8b"), config={"a": [1, 2], "b": {"c": 3}})
    assert spec.config == {"a": (1, 2), "b": {"c": 3}}
    with pytest.raises(TypeError):
        spec.config["b"]["c"] = 4


@pytest.mark.parametrize("name", model_names())
def test_a_specs_frozen_config_parses_to_the_same_spec(name):
    spec = spec_of(name)
    assert from_hf_config(dict(spec.config), name=name) == spec


# ---------------------------------------------------------------- unknown keys are ignored

# every key the parser could read: quoted names in its modules, plus every key of every data file
_KNOWN = {key for module in (config_module, families_module, families_recurrent_module, layer_fields_module,
                             hf_config_module)
          for key in re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', Path(module.__file__).read_text())}
for _p in MODELS.glob("*.json"):
    _d = json.loads(_p.read_text())
    _KNOWN |= set(_d) | set(_d.get("text_config", {})) | set(_d.get("ssm_cfg", {}))

_json = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                     | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
_extra = st.dictionaries(st.text(min_size=1, max_size=24).filter(lambda k: k not in _KNOWN), _json, max_size=5)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(model_names()), extra=_extra, nested=st.booleans())
def test_unknown_extra_keys_never_change_the_spec(name, extra, nested):
    cfg = raw(name)
    target = cfg["text_config"] if nested and "text_config" in cfg else cfg
    target.update(extra)
    assert from_hf_config(cfg, name=name) == spec_of(name)


# ---------------------------------------------------------------- issue 12, defects 5 and 6

TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
        "num_hidden_layers": 4}


@pytest.mark.parametrize("model_type", ["llama", "mistral", "mixtral", "phi3"])
def test_dense_families_honour_layer_types(model_type):
    """Defect 5: mlx-lm's test config (full, sliding, sliding, full) parsed as four sliding layers."""
    from kvsim.cache import KVCache, RotatingKVCache, make_caches
    from kvsim.calc.memory import kv_bytes

    types = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    spec = from_hf_config({**TINY, "model_type": model_type, "sliding_window": 8, "layer_types": types})
    assert [layer.kind for layer in spec.layers] == ["full", "sliding", "sliding", "full"]
    assert spec.layers[1].sliding_window == 8
    per_token = 2 * 2 * 16 * 2                      # K and V, 2 heads of 16, bf16
    assert kv_bytes(spec, 1024) == per_token * (2 * 1024 + 2 * 8)
    assert [type(c) for c in make_caches(spec)] == [KVCache, RotatingKVCache, RotatingKVCache, KVCache]
    with pytest.raises(ConfigError, match=r"layer_types\[0\]"):
        from_hf_config({**TINY, "model_type": model_type, "layer_types": ["linear_attention"] + types[1:]})


def test_qwen_sliding_window_follows_transformers():
    """Defect 5: transformers' Qwen2Config windows layers i >= max_window_layers when use_sliding_window."""
    for model_type in ("qwen2", "qwen3"):
        cfg = {**TINY, "model_type": model_type, "sliding_window": 8, "max_window_layers": 2}
        kinds = [layer.kind for layer in from_hf_config({**cfg, "use_sliding_window": True}).layers]
        assert kinds == ["full", "full", "sliding", "sliding"]
        assert from_hf_config(cfg).kinds == {"full": 4}          # use_sliding_window defaults to false
        assert from_hf_config({**cfg, "use_sliding_window": True, "max_window_layers": 28}).kinds == {"full": 4}
        assert from_hf_config({k: v for k, v in {**cfg, "use_sliding_window": True}.items()
                               if k != "max_window_layers"}).kinds == {"full": 4}   # default 28


def test_gated_deltanet_state_is_laid_out_as_mlx_lm_writes_it():
    """Defect 6: kvsim declared (Hv, Dk, Dv); mlx-lm's gated_delta writes (B, Hv, Dv, Dk)."""
    spec = from_hf_config({**TINY, "model_type": "qwen3_next", "head_dim": 16, "linear_num_key_heads": 2,
                           "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 24})
    gdn = spec.layers[0]
    assert dict(gdn.state_shapes) == {"conv": (3, 2 * 2 * 8 + 4 * 24), "ssm": (4, 24, 8)}
