"""Families read with their checkpoints' own key names (kvsim.calc.families_decoder), the notes that say
what leaves the cache unchanged, and --engine transformers rules that need no torch (pure arithmetic)."""

import json

import pytest

from kvsim.calc.config import ConfigError
from kvsim.calc.engines_transformers import transformers_rows
from kvsim.calc.families_decoder import notes
from kvsim.calc.hf_config import from_hf_config, load_config
from kvsim.calc.registry import data_dir
from kvsim.cli import main

FAMILY_DIR = data_dir() / "models" / "families"
SOURCES = json.loads((FAMILY_DIR / "SOURCES.json").read_text())


@pytest.mark.parametrize("stem", sorted(SOURCES))
def test_every_family_config_loads_and_names_its_checkpoint(stem):
    spec = load_config(FAMILY_DIR / f"{stem}.json")
    # a multimodal config (gemma3n, gemma4, qwen3_5) is read through its text_config: its own type is the outer one
    assert SOURCES[stem]["model_type"] in (spec.model_type, spec.config.get("outer_model_type"))
    assert "/" in SOURCES[stem]["checkpoint"]
    assert spec.num_hidden_layers > 0
    # every layer caches something, except KV-sharing consumers (Gemma 3n, Gemma 4) and Mllama's
    # cross-attention layers (text-only they keep nothing)
    assert sum(x.kind == "none" for x in spec.layers) == (spec.config.get("num_kv_shared_layers", 0)
                                                          + len(spec.config.get("cross_attention_layers", ())))
    assert all(x.elements_per_token > 0 or x.state_elements > 0 for x in spec.layers if x.kind != "none")


@pytest.mark.parametrize("stem, layers, kv_heads, head_dim", [
    ("gpt2", 12, 12, 64), ("gpt_bigcode", 12, 1, 64), ("falcon", 32, 1, 64), ("falcon-40b", 60, 8, 64),
    ("bloom-560m", 24, 16, 64), ("mpt", 24, 16, 128), ("dbrx", 24, 1, 128), ("gpt_neo", 24, 16, 128),
    ("glm-4.5", 92, 8, 128), ("jetmoe", 12, 16, 128)])
def test_checkpoint_key_names_are_read(stem, layers, kv_heads, head_dim):
    spec = load_config(FAMILY_DIR / f"{stem}.json")
    first = spec.layers[0]
    assert (spec.num_hidden_layers, first.num_key_value_heads, first.head_dim) == (layers, kv_heads, head_dim)


def test_gemma3n_kv_shared_layers_hold_nothing_in_every_view():
    spec = load_config(FAMILY_DIR / "gemma3n_text.json")
    assert spec.kinds == {"sliding": 16, "full": 4, "none": 15}
    rows = transformers_rows(spec, 1000, 10)
    assert [r.cache for r in rows[20:]] == ["DummyLayer"] * 15 and all(r.total_bytes == 0 for r in rows[20:])


def test_gpt2_style_keys_and_mha():
    spec = from_hf_config({"model_type": "gpt2", "n_layer": 3, "n_head": 4, "n_embd": 64, "vocab_size": 10})
    assert spec.kinds == {"full": 3} and spec.hidden_size == 64 and spec.layers[0].num_key_value_heads == 4


def test_falcon_40b_kv_heads_are_expanded_by_transformers_only():
    spec = load_config(FAMILY_DIR / "falcon-40b.json")
    rows = transformers_rows(spec, 100, 0)
    assert rows[0].kv_bytes == 100 * 128 * 2 * 64 * 2  # all 128 query heads, bf16
    assert spec.layers[0].num_key_value_heads == 8  # kvsim's own cache keeps the 8 KV heads


def test_mpt_keeps_no_cache_in_transformers():
    spec = load_config(FAMILY_DIR / "mpt.json")
    assert sum(r.total_bytes for r in transformers_rows(spec, 100, 5)) == 0
    assert any("use_cache is false" in n for n in notes(spec.model_type, spec.config))


def test_unknown_model_type_with_standard_keys_is_read_as_full_attention_with_a_note():
    cfg = {"model_type": "mystery", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "hidden_size": 64, "vocab_size": 10}
    spec = from_hf_config(cfg)
    assert spec.kinds == {"full": 2} and spec.layers[0].num_key_value_heads == 2
    [note] = notes("mystery", spec.config, known=False)
    assert "'mystery'" in note and "full attention" in note


def test_unknown_model_type_without_the_fields_is_refused():
    with pytest.raises(ConfigError, match="standard decoder keys"):
        from_hf_config({"model_type": "mystery", "hidden_size": 768})  # (bert is read since h22-fam-hybrid)


@pytest.mark.parametrize("stem, needle", [("bloom-560m", "ALiBi"), ("gpt_neox", "partial rotary"),
                                          ("olmoe", "MoE"), ("smollm3", "NoPE"), ("gpt_neo", "masked"),
                                          ("glm-4.5", "MTP")])
def test_notes_name_features_that_leave_the_cache_unchanged(stem, needle):
    spec = load_config(FAMILY_DIR / f"{stem}.json")
    assert any(needle in n for n in notes(spec.model_type, spec.config))


def test_sliding_rules_of_the_transformers_engine():
    cfg = {"model_type": "mistral", "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "hidden_size": 64, "vocab_size": 10, "sliding_window": 8}
    spec = from_hf_config(cfg)
    per_token = 2 * 2 * 16 * 2
    [after_decode] = transformers_rows(spec, 12, 5)
    assert (after_decode.kv_bytes, after_decode.storage_bytes) == (7 * per_token, 8 * per_token)  # W - 1, W
    [prefill] = transformers_rows(spec, 12, 0)
    assert (prefill.kv_bytes, prefill.storage_bytes) == (7 * per_token, 12 * per_token)  # the prompt pinned
    [static] = transformers_rows(spec, 12, 5, cache="static", max_cache_len=30)
    assert static.kv_bytes == static.storage_bytes == 8 * per_token and static.cache == "StaticSlidingWindowLayer"


def test_cli_engine_transformers_static(capsys):
    assert main(["calc", "mistral-7b-v0.1", "--engine", "transformers", "--prompt-tokens", "5000",
                 "--cache", "static", "--max-cache-len", "6000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "transformers" and out["cache_classes"] == {"StaticSlidingWindowLayer": 32}
    assert out["allocated_bytes"] == 32 * 4096 * 8 * 256 * 2


@pytest.mark.parametrize("argv", [["--cache", "static"], ["--engine", "transformers", "--max-cache-len", "9"],
                                  ["--engine", "transformers", "--cache", "static", "--max-cache-len", "9"],
                                  ["--engine", "transformers", "--kv-dtype", "q4"]])
def test_cli_engine_transformers_bad_input_exits_2(argv, capsys):
    assert main(["calc", "llama-3-8b", "--prompt-tokens", "100", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvsim: error:") and err.count("\n") == 1
