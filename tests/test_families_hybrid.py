"""Hybrid, recurrent and encoder-style families (kvsim.calc.families_hybrid): the layer patterns read from
real configs, each new state rule's formula in --engine transformers (pure arithmetic; the byte-exact runs
against transformers itself are tests/test_engines_transformers.py), and the refused model types."""

import json

import pytest

from kvsim.calc.config import ConfigError
from kvsim.calc.engines import engine_bytes
from kvsim.calc.engines_transformers import transformers_rows
from kvsim.calc.families_hybrid import REFUSED
from kvsim.calc.hf_config import from_hf_config, load_config
from kvsim.calc.registry import data_dir
from kvsim.cli import main
from kvsim.calc.units import InputError

FAMILY_DIR = data_dir() / "models" / "families"
T = 110  # prompt 100 + 10 decode steps


def _load(stem):
    return load_config(FAMILY_DIR / f"{stem}.json")


def _lfm2_with_conv_layers():
    """Lfm2Config's defaults (32 layers, all attention: full_attn_idxs absent) with 6 attention layers named."""
    cfg = json.loads((FAMILY_DIR / "lfm2.json").read_text())
    cfg.pop("layer_types", None)  # to_dict wrote the derived all-attention list; full_attn_idxs decides then
    return from_hf_config({**cfg, "full_attn_idxs": [2, 5, 8, 10, 12, 14]})


def test_lfm2_conv_layers_keep_k_columns_of_hidden_size():
    """LFM2 conv layer: conv_L_cache · hidden_size · b (no recurrent state); attention layers T · 2·n_kv·d·b."""
    assert _load("lfm2").kinds == {"full": 32}  # the class defaults: every layer attention
    spec = _lfm2_with_conv_layers()
    assert spec.kinds == {"recurrent": 26, "full": 6}
    rows = transformers_rows(spec, 100, 10, "bf16")
    conv = [r for r in rows if r.cache == "LinearAttentionLayer"]
    assert {r.state_bytes for r in conv} == {3 * 2560 * 2} and all(r.kv_bytes == 0 for r in conv)
    full = [r for r in rows if r.cache == "DynamicLayer"]
    assert {r.kv_bytes for r in full} == {T * 2 * 8 * 80 * 2}


def test_lfm2_full_attn_idxs_absent_means_every_layer_attention():
    cfg = {"model_type": "lfm2", "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
           "hidden_size": 64, "vocab_size": 10}
    assert from_hf_config(cfg).kinds == {"full": 3}
    assert from_hf_config({**cfg, "full_attn_idxs": [2]}).kinds == {"recurrent": 2, "full": 1}


def test_kda_state_is_conv_k_columns_of_3hd_plus_fp32_h_d_d():
    """KDA: K · 3·H·d · b + H·d·d · 4 (fp32); the MLA layers keep the latent, T · (r + d_R) · b."""
    spec = _load("kimi_linear")  # Kimi-Linear-48B-A3B: 27 layers, MLA every 4th from layer 4
    rows = transformers_rows(spec, 100, 10, "bf16")
    assert [r.kind for r in rows].count("mla") == 6
    kda = rows[0]
    assert kda.state_bytes == 4 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4
    mla = next(r for r in rows if r.kind == "mla")
    assert mla.kv_bytes == T * (512 + 64) * 2


def test_kimi_linear_layers_are_one_indexed_in_linear_attn_config():
    cfg = {"model_type": "kimi_linear", "num_hidden_layers": 3, "num_attention_heads": 4, "hidden_size": 64,
           "vocab_size": 10, "kv_lora_rank": 8, "qk_rope_head_dim": 4,
           "linear_attn_config": {"full_attn_layers": [3], "kda_layers": [1, 2], "head_dim": 8, "num_heads": 2}}
    assert [x.kind for x in from_hf_config(cfg).layers] == ["recurrent", "recurrent", "mla"]
    with pytest.raises(ConfigError, match="cover layers 1..3"):
        from_hf_config({**cfg, "linear_attn_config": {**cfg["linear_attn_config"], "kda_layers": [1]}})


def test_minimax_lightning_state_is_model_dtype_h_d_d_in_linear_cache():
    """MiniMax lightning layer: H·d·d·b in the model dtype (no conv), kept in MiniMaxCache.linear_cache."""
    spec = _load("minimax")
    rows = transformers_rows(spec, 100, 10, "bf16")
    lightning = rows[1]
    assert lightning.cache == "MiniMaxCache.linear_cache"
    assert lightning.state_bytes == 32 * 128 * 128 * 2 and lightning.kv_bytes == 0  # 32 heads of 4096 / 32
    assert transformers_rows(spec, 100, 10, "fp32")[1].state_bytes == 32 * 128 * 128 * 4


def test_zamba_hybrid_layers_hold_kv_of_twice_the_width_and_mamba_state():
    """Zamba hybrid layer: T·2·n_kv·(2·hidden/heads)·b + Mamba-1 conv K·d_inner·b + SSM d_inner·N·4."""
    spec = _load("zamba")  # Zyphra/Zamba-7B-v1: hidden 3712, 16 heads
    rows = transformers_rows(spec, 100, 10, "bf16")
    hybrid = next(r for r in rows if r.cache == "LinearAttentionAndFullAttentionLayer")
    d_inner = 2 * 3712
    assert hybrid.kv_bytes == T * 2 * 16 * (2 * 3712 // 16) * 2
    assert hybrid.state_bytes == 4 * d_inner * 2 + d_inner * 16 * 4


def test_zamba2_needs_layers_block_type_unless_54_layers():
    cfg = {"model_type": "zamba2", "num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 64,
           "vocab_size": 10, "n_mamba_heads": 8}
    with pytest.raises(ConfigError, match="layers_block_type"):
        from_hf_config(cfg)
    spec = from_hf_config({**cfg, "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"]})
    assert [x.kind for x in spec.layers] == ["recurrent", "full", "recurrent", "recurrent"]
    assert spec.layers[1].state_shapes == spec.layers[0].state_shapes and spec.layers[1].head_dim == 32


@pytest.mark.parametrize("stem, kinds", [
    ("bamba", {"recurrent": 32}), ("olmo_hybrid", {"recurrent": 24, "full": 8}),
    ("qwen3_5_text", {"recurrent": 24, "full": 8}), ("qwen3_5_moe_text", {"recurrent": 30, "full": 10}),
    ("bailing_hybrid", {"recurrent": 35, "mla": 7}), ("zamba2", {"recurrent": 45, "full": 9}),
    ("bart", {"full": 12}), ("bert", {"full": 12})])
def test_real_configs_layer_kinds(stem, kinds):
    assert _load(stem).kinds == kinds


def test_qwen3_5_read_through_text_config():
    inner = json.loads((FAMILY_DIR / "qwen3_5_text.json").read_text())
    spec = from_hf_config({"model_type": "qwen3_5", "text_config": inner, "vision_config": {"depth": 2}})
    assert spec.model_type == "qwen3_5_text" and spec.kinds == {"recurrent": 24, "full": 8}


def test_seq2seq_decoder_keys_win_over_the_encoders():
    """bart-style *ForCausalLM: decoder_layers × decoder_attention_heads of d_model / heads, MHA."""
    spec = from_hf_config({"model_type": "bart", "d_model": 64, "decoder_layers": 2, "encoder_layers": 5,
                           "decoder_attention_heads": 4, "encoder_attention_heads": 2, "num_hidden_layers": 5,
                           "vocab_size": 10})
    assert spec.kinds == {"full": 2} and (spec.layers[0].num_key_value_heads, spec.layers[0].head_dim) == (4, 16)
    assert sum(r.kv_bytes for r in transformers_rows(spec, 100, 10, "fp32")) == 2 * T * 2 * 4 * 16 * 4


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_refused_model_types_name_the_type_and_the_reason(model_type):
    cfg = {"model_type": model_type, "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
           "vocab_size": 10}
    with pytest.raises(ValueError, match=f"model_type '{model_type}' is not supported: "):
        from_hf_config(cfg)


def test_cli_refused_model_type_exits_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "xlstm", "num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 10}))
    assert main(["calc", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvsim: error:") and "xlstm" in err and err.count("\n") == 1


def test_cli_engine_transformers_reads_a_hybrid(capsys):
    assert main(["calc", str(FAMILY_DIR / "olmo_hybrid.json"), "--engine", "transformers", "--prompt-tokens", "100",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cache_classes"] == {"LinearAttentionLayer": 24, "DynamicLayer": 8}


@pytest.mark.parametrize("stem, match", [
    ("lfm2", "models/lfm2.py sizes LFM2's conv state by conv_dim"),  # class defaults lack the checkpoint's conv_dim
    ("kimi_linear", "linear_attn_config"),  # ... and Kimi-Linear's linear_attn_config (tests/test_engines_vllm.py)
    ("minimax", "kvsim does not model vLLM")])
def test_vllm_refuses_states_kvsim_does_not_model_for_it(stem, match):
    spec = _lfm2_with_conv_layers() if stem == "lfm2" else _load(stem)
    with pytest.raises(InputError, match=match):
        engine_bytes(spec, "vllm", prompt_tokens=100)


def test_lfm3_conv_sliding_and_full_layers():
    """LFM3 (class defaults, LiquidAI/LFM3-1.7B): conv 7 · hidden · b; sliding min(T, W − 1) tokens; full T."""
    spec = _load("lfm3")
    rows = transformers_rows(spec, 300, 10, "bf16")
    per_token = 2 * 4 * 128 * 2
    by_class = {r.cache: r for r in rows}
    assert by_class["LinearAttentionLayer"].state_bytes == 7 * 2048 * 2
    assert by_class["DynamicSlidingWindowLayer"].kv_bytes == 255 * per_token  # W = 256
    assert by_class["DynamicLayer"].kv_bytes == 310 * per_token


def test_zaya_layers_keep_kv_beside_the_cca_conv_and_delayed_v_state():
    """ZAYA: K/V + conv ((t0 − 1) + (t1 − 1)) · (H + n_kv)·d · b + delayed V n_kv·d / 2 · b, model dtype."""
    spec = _load("zaya")  # Zyphra/ZAYA1-8B defaults: 8 heads, 2 KV heads of 128, cca_time0 = cca_time1 = 2
    row = transformers_rows(spec, 100, 10, "bf16")[0]
    assert row.cache == "LinearAttentionAndFullAttentionLayer"
    assert row.kv_bytes == T * 2 * 2 * 128 * 2
    assert row.state_bytes == 2 * (8 + 2) * 128 * 2 + 2 * 128 // 2 * 2


@pytest.mark.parametrize("stem", ["bert", "bart", "zamba"])
def test_vllm_refuses_model_types_it_does_not_generate_with(stem):
    with pytest.raises(InputError, match="does not run model_type"):
        engine_bytes(_load(stem), "vllm", prompt_tokens=100)


def test_rwkv_state_is_two_shift_vectors_in_the_model_dtype_and_three_fp32_wkv_vectors():
    """RWKV layer: 2·hidden·b + 3·hidden·4 bytes, carried in generate's model_kwargs['state']."""
    spec = _load("rwkv")
    rows = transformers_rows(spec, 100, 10, "bf16")
    assert {r.cache for r in rows} == {"model_kwargs['state']"}
    assert {r.state_bytes for r in rows} == {2 * 4096 * 2 + 3 * 4096 * 4} and len(rows) == 32


def test_lfm2_moe_needs_layer_types_and_its_checkpoint_has_6_attention_layers():
    spec = _load("lfm2_moe")  # LiquidAI/LFM2-8B-A1B
    assert spec.kinds == {"recurrent": 18, "full": 6}
    cfg = {k: v for k, v in dict(spec.config).items() if k != "layer_types"}
    with pytest.raises(ConfigError, match="lfm2_moe needs layer_types"):
        from_hf_config(cfg)
