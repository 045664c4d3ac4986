"""Engine "mlx-lm" against mlx-lm 0.32's measured nbytes, to the byte: every family with its own model and
caches (tiny random models, tests/mlx_lm_configs.py), the issue's table, generate_step itself, kv_bits,
the growth rules against mlx-lm's cache classes, and `kvsim measure`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx_lm  # the test extra installs it: a missing mlx-lm fails here
from mlx.utils import tree_map
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import (
    ArraysCache,
    ChunkedKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)
from mlx_lm_configs import BASE, BF16_TOO, CONFIGS, MAMBA2, NEW_CONFIGS

from kvsim.calc.engines import kvsim_bytes, mlx_lm_bytes
from kvsim.calc.hf_config import from_hf_config
from kvsim.calc.mlx_lm_rules import (
    chunked_cache_slots,
    generate_step_feeds,
    kv_cache_slots,
    rotating_cache_slots,
)
from kvsim.calc.units import InputError
from kvsim.cli import main
from kvsim.measure.mlx_lm_bytes import build_mlx_lm_model, cache_bytes, load_mlx_lm_model, measure, run_feeds

# mlx-lm is a real engine: this file runs in make test's engines stage (the unit stage ignores it, so its
# workers never import mlx-lm, transformers and torch: ~5 CPU-s each).
pytestmark = pytest.mark.engines

GEN = generate_step_feeds(300, 2048, 20)  # a 300-token prompt + 20 decode steps, as generate_step feeds them
FP32_ONLY = {"gpt_oss", "phimoe"}  # every layer is MoE: mlx's gather_mm runs only in float32 on CPU


def _config(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def _per_layer(m):
    return [(r.kv_bytes, r.state_bytes) for r in m.measured], [(r.kv_bytes, r.state_bytes) for r in m.predicted.layers]


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_every_family_to_the_byte(family, tmp_path):
    feeds = GEN if family != "jamba" else generate_step_feeds(300, 128, 20)  # also prefill in several calls
    m = measure(_config(tmp_path, CONFIGS[family]), feeds, "fp32" if family in FP32_ONLY else "bf16")
    measured, predicted = _per_layer(m)
    assert measured == predicted and m.measured_bytes == m.predicted.total_bytes > 0
    assert [r.cache for r in m.measured] == [r.cache for r in m.predicted.layers]


# ---------------------------------------------------------------- issue 17's families, through mlx-lm's public API

NEW_FEEDS = generate_step_feeds(40, 16, 5)  # 3 prefill calls + 6 single tokens: every 8-token window wraps


def _public_build(cfg, dtype):
    """mlx-lm's model for ``cfg`` as mlx_lm.models.<type>.Model(ModelArgs.from_dict(cfg)), cast to ``dtype``."""
    model = build_mlx_lm_model(cfg)
    model.update(tree_map(lambda p: p.astype(getattr(mx, dtype)), model.parameters()))
    return model


@pytest.mark.parametrize("family, dtype", [(f, "float32") for f in sorted(NEW_CONFIGS)]
                         + [(f, "bfloat16") for f in BF16_TOO])
def test_issue17_family_to_the_byte(family, dtype):
    cfg = NEW_CONFIGS[family]
    cache = run_feeds(_public_build(cfg, dtype), NEW_FEEDS)
    predicted = mlx_lm_bytes(from_hf_config(cfg), NEW_FEEDS, {"float32": "fp32", "bfloat16": "bf16"}[dtype])
    holders = [r for r in predicted.layers if r.cache]  # layers whose cache lives in another layer's hold none
    assert [(type(c).__name__, *cache_bytes(c)) for c in cache] == [(r.cache, r.kv_bytes, r.state_bytes)
                                                                     for r in holders]
    assert predicted.total_bytes > 0


def test_mlx_lm_refuses_what_it_cannot_build():
    with pytest.raises(InputError, match="string such as 'LLLG'"):  # exaone4.py takes len() of the pattern
        mlx_lm_bytes(from_hf_config({**NEW_CONFIGS["exaone4"], "sliding_window_pattern": 3}), NEW_FEEDS)
    with pytest.raises(TypeError):
        _public_build({**NEW_CONFIGS["exaone4"], "sliding_window_pattern": 3}, "float32")
    lacking = {k: v for k, v in NEW_CONFIGS["mimo_v2_flash"].items() if not k.startswith("swa_")}
    with pytest.raises(InputError, match="swa_num_key_value_heads"):
        mlx_lm_bytes(from_hf_config(lacking), NEW_FEEDS)
    with pytest.raises(TypeError, match="swa_"):
        _public_build(lacking, "float32")
    # bailing_hybrid with architectures BailingMoeV3ForCausalLM: mlx-lm builds bailing_moe_v3.py's KDA (four arrays
    # per linear layer: q, k, v conv windows and the state), not bailing_hybrid.py's one GLA state kvsim models
    v3 = {**NEW_CONFIGS["bailing_hybrid"], "architectures": ["BailingMoeV3ForCausalLM"]}
    with pytest.raises(InputError, match="bailing_moe_v3"):
        mlx_lm_bytes(from_hf_config(v3), NEW_FEEDS)
    assert {len(c.cache) for c in build_mlx_lm_model(v3).make_cache() if isinstance(c, ArraysCache)} == {4}
    assert {len(c.cache) for c in build_mlx_lm_model(NEW_CONFIGS["bailing_hybrid"]).make_cache()
            if isinstance(c, ArraysCache)} == {1}


# ---------------------------------------------------------------- the issue's table


def _bytes(tmp_path, cfg, feeds, dtype="bf16"):
    m = measure(_config(tmp_path, cfg), feeds, dtype)
    assert m.measured_bytes == m.predicted.total_bytes
    return m.measured_bytes, kvsim_bytes(m.spec, feeds, dtype, state_dtype="bf16").total_bytes


def test_llama_prompt_fed_as_10_plus_290(tmp_path):
    cfg = {**BASE, "model_type": "llama", "num_key_value_heads": 4, "head_dim": 64, "num_attention_heads": 4}
    assert _bytes(tmp_path, cfg, (10, 290) + (1,) * 20) == (1_069_056, 1_048_576)


def test_gemma3_window_longer_than_the_prompt(tmp_path):
    cfg = {**CONFIGS["gemma3_text"], "num_hidden_layers": 3, "sliding_window_pattern": 3, "sliding_window": 1024,
           "num_key_value_heads": 4, "head_dim": 128, "num_attention_heads": 4}
    assert _bytes(tmp_path, cfg, GEN) == (3_321_856, 3_145_728)


def test_llama4_chunk_16(tmp_path):
    cfg = json.loads(json.dumps(CONFIGS["llama4"]))
    cfg["text_config"].update(num_key_value_heads=4, head_dim=64)
    assert _bytes(tmp_path, cfg, GEN) == (1_359_872, 573_440)


def test_mamba2_and_qwen3_next_state_in_fp32(tmp_path):
    measured, kvsim = _bytes(tmp_path, {**CONFIGS["mamba2"], "num_hidden_layers": 2}, GEN)
    assert (measured, kvsim) == (18_304, 10_112)  # ssm 2 × 8·16·16 elements: 4 B in mlx-lm, 2 B in bf16
    measured, kvsim = _bytes(tmp_path, CONFIGS["qwen3_next"], GEN)
    assert measured - kvsim == 2 * 4 * 16 * 16  # one Gated DeltaNet layer's Hv·Dv·Dk state, 2 B more each


@pytest.mark.parametrize("family", ["mistral", "gemma2", "phi3"])
def test_no_window_for_mistral_gemma2_phi3(family, tmp_path):
    measured, kvsim = _bytes(tmp_path, CONFIGS[family], GEN)  # window 16, 320 tokens
    spec = from_hf_config(CONFIGS[family])
    assert "sliding" in spec.kinds and measured == kv_cache_slots(GEN) * sum(
        2 * x.num_key_value_heads * x.head_dim * 2 for x in spec.layers) > kvsim


@pytest.mark.parametrize("name, heads, layers, per_token", [("v2", 128, 60, 4_915_200), ("v2-lite", 16, 27, 276_480)])
def test_deepseek_v2_caches_per_head_k_and_v(name, heads, layers, per_token, tmp_path):
    cfg = {**CONFIGS["deepseek_v2"], "num_hidden_layers": 1, "num_attention_heads": heads,
           "num_key_value_heads": heads, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
           "v_head_dim": 128, "first_k_dense_replace": 1}
    measured, _ = _bytes(tmp_path, cfg, (1,))  # one token: 256 slots
    assert measured // 256 * layers == per_token
    v3 = _bytes(tmp_path, {**cfg, "model_type": "deepseek_v3"}, (1,))[0]
    assert v3 // 256 == (512 + 64) * 2  # the latent: 1,152 B per layer per token


# ---------------------------------------------------------------- generate_step itself


@pytest.mark.parametrize("family", ["gemma3_text", "llama4", "qwen3_next"])
def test_generate_step_makes_the_calls_generate_step_feeds_says(family, tmp_path):
    model, config, _ = load_mlx_lm_model(_config(tmp_path, CONFIGS[family]), "bf16")
    cache = make_prompt_cache(model)
    prompt = mx.arange(40) % 64
    for _ in generate_step(prompt, model, max_tokens=5, prompt_cache=cache, prefill_step_size=16):
        pass
    predicted = mlx_lm_bytes(from_hf_config(config), generate_step_feeds(40, 16, 5))
    assert sum(c.nbytes for c in cache) == predicted.total_bytes


# ---------------------------------------------------------------- quantized KV


@pytest.mark.parametrize("bits", [8, 4, 6, 5])
def test_kv_bits_through_generate_step(bits, tmp_path):
    """generate_step quantizes its KVCaches with to_quantized: 6 and 5 bits work there (mx.quantize packs)."""
    cfg = {**BASE, "model_type": "llama", "head_dim": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
    feeds = generate_step_feeds(250, 2048, 20)  # regrows after the conversion
    m = measure(_config(tmp_path, cfg), feeds, "bf16", kv_bits=bits, quantized_kv_start=0)
    assert m.predicted.quantized and _per_layer(m)[0] == _per_layer(m)[1]


@pytest.mark.parametrize("bits", [8, 4, 6, 5])
def test_a_fresh_quantized_kv_cache(bits, tmp_path):
    """A QuantizedKVCache built empty holds 8 and 4 bits as predicted and refuses 6 and 5 at head_dim 128."""
    cfg = {**BASE, "model_type": "llama", "head_dim": 128, "num_attention_heads": 2, "num_key_value_heads": 1}
    model, config, _ = load_mlx_lm_model(_config(tmp_path, cfg), "bf16")
    spec = from_hf_config(config)
    cache = [QuantizedKVCache(group_size=64, bits=bits) for _ in range(2)]
    if bits in (6, 5):
        with pytest.raises(ValueError, match="broadcast"):
            mx.eval(model(mx.arange(299)[None] % 64, cache=cache))
        with pytest.raises(InputError, match=f"cannot hold {bits}-bit"):
            mlx_lm_bytes(spec, (299, 1, 1), kv_bits=bits, quantized_cache=True)
        return
    for n in (299, 1, 1):
        mx.eval(model(mx.arange(n)[None] % 64, cache=cache))
    assert sum(c.nbytes for c in cache) == mlx_lm_bytes(spec, (299, 1, 1), kv_bits=bits, quantized_cache=True).kv_bytes


def test_kv_bits_on_a_rotating_cache_is_refused_by_both(tmp_path):
    model, config, _ = load_mlx_lm_model(_config(tmp_path, CONFIGS["gemma3_text"]), "bf16")
    with pytest.raises(NotImplementedError):
        run_feeds(model, (20, 1), kv_bits=4, quantized_kv_start=0)
    with pytest.raises(InputError, match="NotImplementedError"):
        mlx_lm_bytes(from_hf_config(config), (20, 1), kv_bits=4, quantized_kv_start=0)


# ---------------------------------------------------------------- the growth rules against mlx-lm's classes

_feeds = st.lists(st.one_of(st.just(1), st.integers(1, 300)), min_size=1, max_size=25)


def _fill(cache, feeds, before=None):
    for n in feeds:
        if before:
            before(cache)
        x = mx.zeros((1, 1, n, 4), mx.float16)
        cache.update_and_fetch(x, x)
    mx.eval(cache.state)
    return cache.nbytes // (2 * 4 * 2)  # slots: K and V of one head of 4 fp16 elements


@settings(max_examples=60, deadline=None)
@given(feeds=_feeds, max_size=st.integers(2, 600), keep=st.integers(0, 4), chunk=st.integers(1, 300))
def test_growth_rules_match_mlx_lm_caches(feeds, max_size, keep, chunk):
    keep = min(keep, max_size - 1)
    assert _fill(KVCache(), feeds) == kv_cache_slots(feeds)
    assert _fill(RotatingKVCache(max_size, keep), feeds) == rotating_cache_slots(feeds, max_size, keep)
    assert _fill(ChunkedKVCache(chunk), feeds, ChunkedKVCache.maybe_trim_front) == chunked_cache_slots(feeds, chunk)


def test_cache_bytes_splits_state_from_kv(tmp_path):
    model, _, _ = load_mlx_lm_model(_config(tmp_path, CONFIGS["falcon_h1"]), "bf16")
    cache = run_feeds(model, (5,))
    kv, state = cache_bytes(cache[0])
    assert kv == cache[0].caches[1].nbytes and state == cache[0].caches[0].nbytes and kv + state == cache[0].nbytes


# ---------------------------------------------------------------- kvsim measure


def _measure(*argv, capsys):
    code = main(["measure", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_measure_a_config_json(tmp_path, capsys):
    path = _config(tmp_path, {**CONFIGS["qwen3_next"], "torch_dtype": "bfloat16"})
    code, out, _ = _measure(path, "--prompt-tokens", "50", "--decode-steps", "3", "--json", capsys=capsys)
    d = json.loads(out)
    assert code == 0 and d["dtype"] == "bf16" and d["mlx_lm_version"] == mlx_lm.__version__
    assert d["measured_bytes"] == d["predicted_bytes"] == sum(r["measured_bytes"] for r in d["layers"])
    assert [r["cache"] for r in d["layers"]] == ["ArraysCache", "KVCache"]
    code, out, _ = _measure(path, "--prompt-tokens", "50", capsys=capsys)
    assert code == 0 and "total" in out and "are equal" in out


def test_measure_an_mlx_model_folder(tmp_path, capsys):
    from mlx_lm.utils import save_config, save_model
    cfg = {**BASE, **MAMBA2, "model_type": "mamba2", "num_hidden_layers": 1, "tie_word_embeddings": True}
    model, _, _ = load_mlx_lm_model(_config(tmp_path, cfg), "fp16")
    folder = tmp_path / "tiny-mamba2"
    save_model(folder, model)
    save_config(dict(cfg), folder / "config.json")
    code, out, _ = _measure(folder, "--prompt-tokens", "30", "--json", capsys=capsys)
    d = json.loads(out)
    assert code == 0 and d["dtype"] == "fp16" and d["measured_bytes"] == d["predicted_bytes"] == 3 * 160 * 2 + 8 * 16 * 16 * 4


def test_measure_bad_input_is_one_line(tmp_path, capsys):
    code, _, err = _measure(tmp_path, capsys=capsys)  # a folder without weights
    assert code == 2 and err.count("\n") == 1 and "safetensors" in err
    code, _, err = _measure(_config(tmp_path, CONFIGS["llama"]), "--dtype", "int8", capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "dtype" in err


def test_measure_without_mlx_lm_says_to_install_it(tmp_path):
    shadow = tmp_path / "shadow" / "mlx_lm"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'mlx_lm'\")\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), str(root)])}
    proc = subprocess.run([sys.executable, "-m", "kvsim", "measure", str(_config(tmp_path, CONFIGS["llama"]))],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "pip install" in proc.stderr
