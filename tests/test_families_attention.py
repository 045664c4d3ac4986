"""Attention-decoder families of kvsim.calc.families_attention (issue 17): the layer patterns their config
classes derive, the DSA indexer-key rule in every view, and the engines that refuse what kvsim does not model.
Byte-exact checks against transformers itself are in tests/test_engines_transformers.py (marker engines)."""

import json

import pytest

from kvsim.calc.config import ConfigError
from kvsim.calc.engines_transformers import transformers_rows
from kvsim.calc.hf_config import from_hf_config, load_config
from kvsim.calc.memory import bytes_per_token
from kvsim.calc.registry import data_dir
from kvsim.calc.units import InputError
from kvsim.cli import main
from tests.transformers_configs import CONFIGS

FAMILY_DIR = data_dir() / "models" / "families"


def _kinds(name):
    return [x.kind for x in from_hf_config(CONFIGS[name]).layers]


def test_derived_layer_types_follow_the_config_classes():
    # FlintConfig: full on layers 0, 1, i % 4 == 1 and the last
    assert _kinds("flint") == ["full", "full", "sliding", "sliding", "sliding", "full"]
    # Cohere2MoeConfig: 2 prefix layers with pattern 2, then pattern 2 restarts
    assert _kinds("cohere2_moe") == ["sliding", "full", "sliding", "full", "sliding"]
    assert _kinds("granitemoe_swa") == ["full", "sliding", "sliding"]
    assert _kinds("exaone_moe") == ["sliding", "sliding", "full"]
    # laguna / mellum derive all-full layer_types although their classes default a window
    assert set(_kinds("laguna")) == set(_kinds("mellum")) == {"full"}


def test_exaone_reads_num_layers():
    assert from_hf_config(CONFIGS["exaone_num_layers"]).num_hidden_layers == 2


def test_dsa_indexer_keys_on_full_indexer_layers_only():
    spec = from_hf_config(CONFIGS["glm_moe_dsa"])  # freq 2, offset 1: full where max(i, 0) % 2 == 0
    assert [x.index_head_dim for x in spec.layers] == [8, 0, 8, 0]
    assert [x.index_head_dim for x in from_hf_config(CONFIGS["hy_v4"]).layers] == [8, 8, 0]
    rows = transformers_rows(spec, 10, 2, "bf16")
    assert [r.cache for r in rows] == ["DynamicIndexedLayer"] * 4
    assert [r.kv_bytes for r in rows] == [12 * (32 + 8 + 8) * 2, 12 * (32 + 8) * 2] * 2


def test_dsa_per_token_bytes_add_the_indexer_key():
    spec = load_config(FAMILY_DIR / "deepseek_v32.json")  # DeepSeek-V3.2-Exp: 61 layers, 512 + 64 + 128
    assert bytes_per_token(spec, "bf16") == 61 * (512 + 64 + 128) * 2


def test_glm_moe_dsa_index_topk_pattern_and_bad_values():
    cfg = {**CONFIGS["glm_moe_dsa"], "index_topk_pattern": "FSSF"}
    assert [x.index_head_dim for x in from_hf_config(cfg).layers] == [8, 0, 0, 8]
    with pytest.raises(ConfigError, match="index_topk_pattern"):
        from_hf_config({**cfg, "index_topk_pattern": "FXSF"})
    with pytest.raises(ConfigError, match="indexer_types"):
        from_hf_config({**CONFIGS["hy_v4"], "indexer_types": ["full", "dense", "full"]})


@pytest.mark.parametrize("engine", ["vllm", "mlx-lm"])
def test_engines_without_a_dsa_indexer_rule_refuse_in_one_line(engine, capsys):
    from kvsim.calc.engines import engine_bytes
    name = "deepseek_v32" if engine == "vllm" else "axk2"  # mlx-lm's own DSA models are measured (test_engines_mlx_lm)
    spec = load_config(FAMILY_DIR / f"{name}.json")
    if engine == "vllm":
        from kvsim.calc.engines_vllm import vllm_plan
        with pytest.raises(InputError, match="indexer"):
            vllm_plan(spec, 100, 0)
    else:
        with pytest.raises(InputError, match="indexer"):
            engine_bytes(spec, "mlx-lm", prompt_tokens=100, decode_steps=0)
    rc = main(["calc", str(FAMILY_DIR / f"{name}.json"), "--engine", engine, "--prompt-tokens", "100"])
    err = capsys.readouterr().err
    assert rc == 2 and "indexer" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model_type", ["gemma4_assistant", "gemma4_unified_assistant"])
def test_drafters_that_keep_no_kv_of_their_own_are_refused_in_one_line(model_type, tmp_path, capsys):
    flat = {"model_type": model_type, "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
            "vocab_size": 64}
    nested = {"model_type": model_type, "text_config": {**flat, "model_type": "gemma4_unified_text"}}
    for cfg in (flat, nested):  # the outer type decides even when text_config names a readable one
        with pytest.raises(ConfigError, match=f"{model_type}.*no K/V of its own"):
            from_hf_config(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(nested))
    assert main(["calc", str(path)]) == 2
    err = capsys.readouterr().err
    assert model_type in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_multimodal_wrappers_read_their_text_config():
    for outer, inner in (("gemma3n", "gemma3n_text"), ("gemma4", "gemma4_text"),
                         ("gemma4_unified", "gemma4_unified_text")):
        spec = load_config(FAMILY_DIR / f"{outer}.json")
        assert (spec.model_type, spec.config["outer_model_type"]) == (inner, outer)
    assert load_config(FAMILY_DIR / "gemma3n.json").kinds == {"sliding": 16, "full": 4, "none": 15}


def test_gemma4_full_layers_take_the_global_head_dim_and_kv_heads():
    spec = from_hf_config(CONFIGS["gemma4_text"])  # S F S | shared: S F
    assert [x.kind for x in spec.layers] == ["sliding", "full", "sliding", "none", "none"]
    full = spec.layers[1]
    assert (full.num_key_value_heads, full.head_dim, spec.layers[0].head_dim) == (1, 32, 16)
    # attention_k_eq_v false: the global KV heads are not overridden
    off = from_hf_config({**CONFIGS["gemma4_text"], "attention_k_eq_v": False}).layers[1]
    assert (off.num_key_value_heads, off.head_dim) == (2, 32)
    # the last layer is always full (Gemma4TextConfig forces it)
    assert from_hf_config(CONFIGS["gemma4_text_default"]).layers[-1].kind == "full"


def test_mimo_v2_flash_sliding_layers_hold_twice_the_kv_heads():
    spec = load_config(FAMILY_DIR / "mimo_v2_flash.json")
    full, sliding = spec.layers[0], spec.layers[1]
    assert (full.num_key_value_heads, sliding.num_key_value_heads, sliding.sliding_window) == (4, 8, 129)
    assert (sliding.head_dim, sliding.v_head_dim) == (192, 128)
    assert from_hf_config({**CONFIGS["mimo_v2_flash"], "sliding_window_size": 127}).layers[1].sliding_window == 128


def test_longcat_flash_caches_two_mla_layers_per_decoder_layer():
    spec = load_config(FAMILY_DIR / "longcat_flash.json")
    assert spec.num_hidden_layers == 2 * spec.config["num_layers"] and spec.kinds == {"mla": 56}


def test_vllm_unified_pages_count_the_larger_block_of_the_smaller_page_layers():
    """MiMo-V2-Flash in vLLM: full pages (4 KV heads) are half the sliding ones (8), so
    unify_kv_cache_spec_page_size gives the full layers 32-token blocks of the sliding page size; a full
    layer then holds ⌈T/32⌉ pages of 32 tokens (not 16-token pages)."""
    from kvsim.calc.engines_vllm import vllm_plan
    spec = load_config(FAMILY_DIR / "mimo_v2_flash.json")
    plan = vllm_plan(spec, 8000, 10)
    full = [g for g in plan.groups if g.spec == "full"]
    assert full and all(g.block_size_tokens == 32 for g in full)
    per_token = 4 * (192 + 128) * 2  # one full layer's K/V per token, bf16
    held = {i: b for i, _, b in plan.layer_held_bytes()}
    assert held[0] == -(-8010 // 32) * 32 * per_token


def test_dory_per_loop_cache_copies_the_recurrent_layers():
    assert len(from_hf_config(CONFIGS["dory"]).layers) == 4 + 2 * (3 - 1)  # 2 recurrent layers, 3 loops
    assert len(from_hf_config(CONFIGS["dory_last_loop"]).layers) == 4
    spec = load_config(FAMILY_DIR / "dory.json")  # released layout: (attention, mlp) pairs, halved
    n, n_rec = spec.config["num_hidden_layers"] // 2, spec.config["n_recurrent_layers"] // 2
    assert len(spec.layers) == n + n_rec * (spec.config["n_recurrent_loops"] - 1)


# ---------------------------------------------------------------- DeepSeek-V4: K = V, compressed entries


def test_deepseek_v4_reads_the_checkpoints_compress_ratios_and_the_modern_layer_types_alike():
    """compress_ratios 0 / 4 / 128 (the MTP entry past num_hidden_layers dropped) = layer_types + compress_rates."""
    spec = load_config(FAMILY_DIR / "deepseek_v4.json")  # DeepSeek-V4-Flash-Base: 43 layers, 3 HCA then CSA/HCA
    ratios = list(spec.config["compress_ratios"])
    assert len(ratios) == 44 and spec.num_hidden_layers == 43
    assert [x.compress_ratio for x in spec.layers] == ratios[:43]
    assert [x.index_head_dim for x in spec.layers] == [128 if r == 4 else 0 for r in ratios[:43]]
    assert all(x.k_eq_v and x.num_key_value_heads == 1 and x.head_dim == 512 and x.sliding_window == 128
               for x in spec.layers)
    tiny = CONFIGS["deepseek_v4"]
    modern = {k: v for k, v in tiny.items() if k not in ("compress_ratios", "compress_rate_hca")}
    modern["layer_types"] = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
    modern["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}
    assert from_hf_config(modern).layers == from_hf_config(tiny).layers
    default = from_hf_config({k: v for k, v in modern.items() if k not in ("layer_types", "compress_rates")})
    assert [x.compress_ratio for x in default.layers] == [128, 128, 128]  # DeepseekV4Config: 2 HCA, then HCA at i − 2 = 0
    with pytest.raises(ConfigError, match="compress_ratios"):
        from_hf_config({**tiny, "compress_ratios": [0, 4, 8]})


def test_deepseek_v4_kvsim_views_count_one_kv_tensor_plus_the_compressed_entries():
    """theoretical: min(T, W)·d·b + ⌊T/m⌋·(d + d_I)·b; allocated: step growth of both; paged: blocks of both."""
    from kvsim.calc.memory import layer_kv_bytes
    from kvsim.calc.quant_bytes import sequence_bytes_split
    spec = load_config(FAMILY_DIR / "deepseek_v4.json")
    hca, csa, t = spec.layers[0], spec.layers[3], 100_000
    assert layer_kv_bytes(hca, t) == 128 * 512 * 2 + t // 128 * 512 * 2
    assert layer_kv_bytes(csa, t) == 128 * 512 * 2 + t // 4 * (512 + 128) * 2
    assert layer_kv_bytes(csa, t, view="allocated", step=256) == 128 * 1024 + -(-(t // 4) // 256) * 256 * 1280
    assert layer_kv_bytes(csa, t, view="allocated", block_size=64) == (
        (-(-t // 64) - (t - 128) // 64) * 64 * 1024 + -(-(t // 4) // 64) * 64 * 1280)
    assert sum(sequence_bytes_split(spec, t, "q8").values()) == sum(
        layer_kv_bytes(x, t, "q8") for x in spec.layers)


def test_deepseek_v4_transformers_rows_hold_window_entries_buffers_and_overlap():
    """Tiny config (d = 32, d_I = 16, W = 8, CSA m = 4, HCA m = 8), P = 13 + 3 steps, T = 16 (fp32): the sliding
    layer stores K = V twice; CSA / HCA once, plus ⌊T/m⌋ entries; every buffer empty, yet pinning the last
    concatenation of (T − 1) mod m + 1 tokens; CSA's overlap m·(d + d_I)·(4 + 4)."""
    spec = from_hf_config(CONFIGS["deepseek_v4"])
    sliding, csa, hca = transformers_rows(spec, 13, 3, "fp32")
    assert (sliding.cache, sliding.kv_bytes) == ("DynamicSlidingWindowLayer", 2 * 7 * 32 * 4)
    assert (csa.cache, csa.kv_bytes) == ("DeepseekV4CSACache", 7 * 32 * 4 + 4 * (32 + 16) * 4)
    assert csa.state_bytes == 4 * (32 + 16) * 8
    assert csa.storage_bytes == 8 * 32 * 4 + 4 * (32 + 16) * 4 + 2 * 4 * (64 + 32) * 4 + 4 * (32 + 16) * 8
    assert (hca.cache, hca.kv_bytes, hca.state_bytes) == ("DeepseekV4HCACache", 7 * 32 * 4 + 2 * 32 * 4, 0)
    assert hca.storage_bytes == 8 * 32 * 4 + 2 * 32 * 4 + 2 * 8 * 32 * 4


@pytest.mark.parametrize("engine", ["vllm", "mlx-lm"])
def test_engines_without_a_deepseek_v4_rule_refuse_in_one_line(engine, capsys):
    rc = main(["calc", str(FAMILY_DIR / "deepseek_v4.json"), "--engine", engine, "--prompt-tokens", "100"])
    err = capsys.readouterr().err
    assert rc == 2 and ("DeepSeek-V4" in err or "deepseek_v4" in err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InputError, match="DeepSeek-V4"):
        transformers_rows(load_config(FAMILY_DIR / "deepseek_v4.json"), 100, 0, cache="static")


def test_last_decoder_families_derive_their_layer_types_and_windows():
    """Kolibri1: full every 5th; Beam: full every 6th and the last; ModernBERT decoder: full every 3rd from 0, the
    window local_attention // 2; GPT-SW3 writes GPT-2's keys (n_layer, n_head, n_embd)."""
    kolibri = load_config(FAMILY_DIR / "kolibri1.json")
    assert [x.kind for x in kolibri.layers[:5]] == ["sliding"] * 4 + ["full"] and kolibri.layers[0].sliding_window == 513
    beam = load_config(FAMILY_DIR / "beam.json")
    assert beam.layers[5].kind == beam.layers[-1].kind == "full" and beam.layers[6].sliding_window == 512
    plain = {k: v for k, v in CONFIGS["modernbert-decoder"].items()}
    layers = from_hf_config({**plain, "num_hidden_layers": 4, "global_attn_every_n_layers": 2}).layers
    assert [x.kind for x in layers] == ["full", "sliding", "full", "sliding"] and layers[1].sliding_window == 8
    sw3 = load_config(FAMILY_DIR / "gpt-sw3.json")
    assert (sw3.num_hidden_layers, sw3.layers[0].num_key_value_heads, sw3.layers[0].head_dim) == (12, 12, 64)


def test_minimax_m3_sparse_layers_cache_an_indexer_key_beside_kv_in_every_view():
    """sparse_attention_config (the checkpoint's keys): a sparse layer adds index_head_dim per token."""
    from kvsim.calc.explain import explain
    from kvsim.calc.memory import layer_token_bytes
    spec = from_hf_config(CONFIGS["minimax_m3_vl_text"])
    full, sparse = spec.layers
    assert layer_token_bytes(sparse, "bf16") - layer_token_bytes(full, "bf16") == 16 * 2
    assert bytes_per_token(spec, "bf16") == (2 * (2 * 2 * 16) + 16) * 2  # 2 layers × 2 heads × (K + V) + indexer
    assert "indexer key 16 × 2 B" in explain(spec, 100).text
    rows = transformers_rows(spec, 10, 2, "bf16")
    assert [r.cache for r in rows] == ["DynamicLayer", "MiniMaxM3VLSparseCacheLayer"]
    assert rows[1].kv_bytes == 12 * (2 * 2 * 16 + 16) * 2
    modern = {k: v for k, v in CONFIGS["minimax_m3_vl_text"].items() if k != "sparse_attention_config"}
    again = from_hf_config({**modern, "layer_types": ["full_attention", "minimax_m3_sparse"], "index_head_dim": 16})
    assert again.layers == spec.layers
    assert load_config(FAMILY_DIR / "minimax_m3_vl_text.json").kinds == {"full": 60}  # class defaults: no sparse
