"""The model registry: names, loading by name or path, entries, and finding data/ when installed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvsim
from kvsim.calc.config import ConfigError
from kvsim.calc.hf_config import load_config
from kvsim.calc.registry import (
    data_dir,
    load_model,
    model_info,
    model_names,
    source_keys,
)

NAMES = ["command-r-v01", "command-r7b", "deepseek-v2", "deepseek-v2-lite", "deepseek-v3", "falcon-h1-0.5b",
         "falcon-mamba-7b", "gemma-2-9b", "gemma-3-27b", "gemma-3-4b", "gpt-oss-120b", "gpt-oss-20b",
         "granite-4.0-h-small", "jamba-v0.1", "kimi-k2-instruct", "llama-3-70b", "llama-3-8b", "llama-3.1-405b",
         "llama-3.1-8b", "llama-3.2-1b", "llama-4-scout", "mamba2-2.7b", "mistral-7b-v0.1", "mixtral-8x7b",
         "nemotron-h-8b", "olmo-2-7b", "phi-3-mini-4k", "phi-3.5-moe", "qwen2.5-7b", "qwen3-8b",
         "qwen3-next-80b-a3b", "recurrentgemma-2b"]
LEVELS = {"P", "M", "M/T", "T", "UNVERIFIED", "name"}


def test_the_registry_is_the_32_models():
    assert model_names() == NAMES


def test_data_dir_is_the_checkout_data_folder():
    assert data_dir() == Path(kvsim.__file__).resolve().parent.parent / "data"


@pytest.mark.parametrize("name", NAMES)
def test_load_by_name_is_cached_and_named(name):
    spec = load_model(name)
    assert spec.name == name and load_model(name) is spec


def test_a_cached_spec_cannot_be_edited_through_its_config():
    with pytest.raises(TypeError):
        load_model('llama-3-8b').config['num_key_value_heads'] = 999
    assert load_model("llama-3-8b").config["num_key_value_heads"] == 8


def test_load_by_path_str_or_path_gives_the_same_layers(tmp_path):
    path = data_dir() / "models" / "gpt-oss-20b.json"
    assert load_model(str(path)).layers == load_model(path).layers == load_model("gpt-oss-20b").layers
    copy = tmp_path / "config.json"
    shutil.copy(path, copy)
    assert load_model(copy).name == "config" and load_model(copy).kinds == {"sliding": 12, "full": 12}


def test_an_edited_config_file_is_parsed_again(tmp_path):
    path = tmp_path / "config.json"
    cfg = json.loads((data_dir() / "models" / "llama-3-8b.json").read_text())
    path.write_text(json.dumps(cfg))
    assert load_model(path).num_hidden_layers == 32
    path.write_text(json.dumps({**cfg, "num_hidden_layers": 4}))
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    assert load_model(path).num_hidden_layers == 4


def test_unknown_name_lists_the_registry():
    with pytest.raises(ConfigError) as err:
        load_model("llama-5-1t")
    message = str(err.value)
    assert "'llama-5-1t'" in message and all(n in message for n in NAMES) and "\n" not in message
    with pytest.raises(ConfigError, match="registry models"):
        model_info("llama-5-1t")


def test_missing_path_says_so(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_model(tmp_path / "nope" / "config.json")


@pytest.mark.parametrize("name", NAMES)
def test_registry_entry_is_complete_and_consistent(name):
    info = model_info(name)
    path = data_dir() / info["file"]
    assert path.is_file() and info["file"] == f"models/{name}.json"
    assert "/" in info["hf_repo"] and info["sources"] and set(info["sources"]) <= set(source_keys())
    raw = json.loads(path.read_text())
    fields = {**raw, **raw.get("text_config", {})}
    assert set(info["unverified"]) <= set(fields)  # only fields the file really carries
    assert set(info["unverified"].values()) <= LEVELS - {"P", "name"}
    for pub in info["published_params"]:
        assert pub["level"] in LEVELS and pub["source"]
        assert any(pub.get(k) for k in ("total", "active", "non_embedding"))


def test_model_info_is_a_copy():
    info = model_info("llama-3-8b")
    info["unverified"]["vocab_size"] = "T"
    assert "vocab_size" not in model_info("llama-3-8b")["unverified"]


def test_readme_table_has_a_row_per_model():
    readme = (data_dir() / "README.md").read_text()
    assert all(f"| {name} |" in readme for name in NAMES)


def test_data_is_found_in_an_installed_layout(tmp_path):
    # a wheel ships data/ as kvsim/_data (hatch force-include); mimic that layout and import from it
    pkg = tmp_path / "site" / "kvsim"
    shutil.copytree(Path(kvsim.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(data_dir(), pkg / "_data")
    code = ("import kvsim.calc.registry as r, kvsim.calc.hardware as h; "
            "print(r.data_dir()); print(len(r.model_names()), r.load_model('jamba-v0.1').count('full'), "
            "h.get_accelerator('a100 40gb').memory_bytes)")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env=env).stdout.split("\n")
    assert out[0] == str(pkg / "_data") and out[1] == f"32 4 {40960 * 2**20}"


def test_the_same_file_loads_through_load_config():
    path = data_dir() / "models" / "deepseek-v3.json"
    assert load_config(path) == load_model("deepseek-v3")
