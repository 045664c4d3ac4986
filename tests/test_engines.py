"""Engine-aware sizing without running an engine: generate_step's feeds, mlx-lm's growth rules on the
issue's cases, the layouts mlx-lm gives real registry models, refusals, and the CLI's --engine options.
(tests/test_engines_mlx_lm.py checks the same rules against mlx-lm's measured nbytes.)"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.calc import memory
from kvsim.calc.engines import engine_bytes, kvsim_bytes, mlx_lm_bytes
from kvsim.calc.mlx_lm_rules import (
    chunked_cache_slots,
    generate_step_feeds,
    kv_cache_slots,
    mlx_lm_caches,
    quantized_vector_bytes,
    rotating_cache_slots,
)
from kvsim.calc.registry import load_model
from kvsim.calc.units import InputError
from kvsim.cli import main

DECODE_20 = (1,) * 20


@pytest.mark.parametrize("p, s, d, feeds", [
    (300, 2048, 20, (299, 1) + DECODE_20),  # the last prompt token is its own call
    (5000, 2048, 0, (2048, 2048, 903, 1)),
    (1, 2048, 2, (1, 1, 1)),
    (257, 128, 1, (128, 128, 1, 1)),
])
def test_generate_step_feeds(p, s, d, feeds):
    assert generate_step_feeds(p, s, d) == feeds and sum(feeds) == p + d


@pytest.mark.parametrize("args, field", [((0,), "prompt_tokens"), ((5, 0), "prefill_step"), ((5, 8, -1), "decode_steps")])
def test_generate_step_feeds_rejects_bad_input(args, field):
    with pytest.raises(InputError, match=field):
        generate_step_feeds(*args)


# ---------------------------------------------------------------- the issue's cases, rule by rule


def test_kv_cache_regrows_from_an_offset_off_the_step_grid():
    assert kv_cache_slots((10, 290) + DECODE_20) == 522  # 10 -> 256; 10 + 290 overflows: cut to 10, + 512
    assert kv_cache_slots((299, 1) + DECODE_20) == 512 == memory.allocated_slots(320)
    assert kv_cache_slots((1, 10, 255)) == 267 and kv_cache_slots((1, 10, 255, 1, 1)) == 523  # reference table


def test_rotating_cache_keeps_a_prefill_exactly_then_grows_by_the_step():
    assert rotating_cache_slots((299,), 1024) == 299
    assert rotating_cache_slots((299, 1) + DECODE_20, 1024) == 555  # + min(256, 1024 - 299)
    assert rotating_cache_slots((1,) * 700, 600) == 600  # 256 -> 512 -> 600 (reference: max_size 600)
    assert rotating_cache_slots((5,) + (1,) * 8 + (3,), 8, keep=2) == 10  # reference trace: max_size - 1 + S


def test_chunked_cache_holds_the_chunk_plus_a_step():
    assert chunked_cache_slots((299, 1) + DECODE_20, 16) == 16 + 256
    assert chunked_cache_slots((299,), 16) == 512  # no call has cut the front yet


def test_the_issues_table_in_bytes():
    """The issue's measured column, from the rules (geometry as in the issue's tiny models)."""
    gen = generate_step_feeds(300, 2048, 20)
    assert 2 * 2 * 4 * 64 * 2 * kv_cache_slots((10, 290) + DECODE_20) == 1_069_056  # llama, 2 layers
    gemma = (512 + 2 * rotating_cache_slots(gen, 1024)) * 2048  # 1 global + 2 sliding layers, 2 KiB/slot
    assert gemma == 3_321_856
    llama4 = (3 * chunked_cache_slots(gen, 16) + kv_cache_slots(gen)) * 1024  # 3 chunked + 1 global
    assert llama4 == 1_359_872


# ---------------------------------------------------------------- layouts of real models


@pytest.mark.parametrize("name", ["mistral-7b-v0.1", "gemma-2-9b", "phi-3-mini-4k"])
def test_mlx_lm_gives_these_models_no_window(name):
    spec = load_model(name)
    assert "sliding" in spec.kinds  # transformers and vLLM window them
    assert {c.cls for c in mlx_lm_caches(spec)} == {"KVCache"}
    mlx, own = (engine_bytes(spec, e, prompt_tokens=8192, decode_steps=100) for e in ("mlx-lm", "kvsim"))
    assert mlx.kv_bytes == memory.bytes_per_token(spec) * kv_cache_slots(generate_step_feeds(8192, 2048, 100))
    assert mlx.kv_bytes > own.kv_bytes


@pytest.mark.parametrize("name, per_token, kvsim_per_token", [
    ("deepseek-v2", 4_915_200, 69_120), ("deepseek-v2-lite", 276_480, 31_104),
    ("deepseek-v3", 70_272, 70_272), ("kimi-k2-instruct", 70_272, 70_272),
])
def test_deepseek_v2_caches_expanded_heads_v3_and_kimi_the_latent(name, per_token, kvsim_per_token):
    spec = load_model(name)
    one_step = [mlx_lm_bytes(spec, (256,) * k).kv_bytes for k in (1, 2)]
    assert (one_step[1] - one_step[0]) // 256 == per_token
    assert memory.bytes_per_token(spec) == kvsim_per_token


def test_gemma3_and_gpt_oss_layouts_follow_mlx_lm_make_cache():
    gemma = mlx_lm_caches(load_model("gemma-3-27b"))
    assert [i for i, c in enumerate(gemma) if c.cls == "KVCache"] == list(range(5, 62, 6))
    assert {c.max_size for c in gemma if c.cls == "RotatingKVCache"} == {1024}
    oss = mlx_lm_caches(load_model("gpt-oss-20b"))
    assert [c.cls for c in oss[:2]] == ["RotatingKVCache", "KVCache"] and oss[0].max_size == 128


def test_llama4_chunks_only_as_the_multimodal_llama4_model():
    spec = load_model("llama-4-scout")  # model_type llama4 around a llama4_text text_config
    caches = mlx_lm_caches(spec)
    assert [c.cls for c in caches[:4]] == ["ChunkedKVCache"] * 3 + ["KVCache"] and caches[0].chunk_size == 8192
    text_only = dict(spec.config)
    del text_only["outer_model_type"]  # a text-only checkpoint loads mlx-lm's llama4_text: no make_cache
    from kvsim.calc.hf_config import from_hf_config
    assert {c.cls for c in mlx_lm_caches(from_hf_config(text_only))} == {"KVCache"}


@pytest.mark.parametrize("name, state_bytes", [
    ("qwen3-next-80b-a3b", 77_266_944),  # 36 × (conv 3·8192·2 B + ssm 32·128·128·4 B)
    ("mamba2-2.7b", 169_836_544),  # 64 × (conv 3·5376·2 B + ssm 80·64·128·4 B)
    ("jamba-v0.1", 28 * (3 * 8192 + 8192 * 16) * 2),  # Mamba-1 state in the model dtype
])
def test_mlx_lm_keeps_mamba2_and_deltanet_state_in_fp32(name, state_bytes):
    spec = load_model(name)
    assert mlx_lm_bytes(spec, (1,)).state_bytes == state_bytes
    assert kvsim_bytes(spec, (1,), state_dtype="bf16").state_bytes == memory.fixed_state_bytes(spec, 1, "bf16")


def test_falcon_h1_layers_hold_a_cache_list_of_state_and_kv():
    spec = load_model("falcon-h1-0.5b")
    caches = mlx_lm_caches(spec)
    assert len(caches) == 36 and {c.cls for c in caches} == {"CacheList"}
    assert [p.cls for p in caches[0].parts] == ["ArraysCache", "KVCache"]
    eb = mlx_lm_bytes(spec, (299, 1))
    assert eb.state_bytes == 36 * (3 * (1536 + 2 * 128) * 2 + 24 * 64 * 128 * 4)
    assert eb.kv_bytes == 36 * 512 * 2 * 2 * 64 * 2


# ---------------------------------------------------------------- kvsim's engine is the allocated view


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["llama-3-8b", "gemma-3-4b", "jamba-v0.1", "llama-4-scout", "deepseek-v3"]),
       p=st.integers(1, 20_000), d=st.integers(0, 3000), s=st.integers(1, 4096))
def test_kvsim_engine_is_the_allocated_view_plus_state(name, p, d, s):
    spec = load_model(name)
    eb = engine_bytes(spec, "kvsim", prompt_tokens=p, prefill_step=s, decode_steps=d, state_dtype="fp32")
    assert eb.kv_bytes == memory.allocated_bytes(spec, p + d)
    assert eb.state_bytes == memory.fixed_state_bytes(spec, 1, "fp32")


# ---------------------------------------------------------------- quantization and refusals


def test_quantized_vector_bytes_and_the_fresh_cache_refusal():
    assert quantized_vector_bytes(128, 8, 64, 2) == 128 + 2 * 2 * 2  # 32 words + scale and bias per group
    assert quantized_vector_bytes(128, 6, 64, 2) == 4 * 24 + 8  # to_quantized packs 24 words
    for bits in (6, 5):
        with pytest.raises(InputError, match=f"cannot hold {bits}-bit K/V of width 128"):
            quantized_vector_bytes(128, bits, 64, 2, fresh=True)
    assert quantized_vector_bytes(64, 6, 64, 2, fresh=True) == 4 * 12 + 4  # 64 // 5 = 12 words: it fits
    with pytest.raises(InputError, match="group_size 128"):
        quantized_vector_bytes(64, 4, 128, 2)


def test_kv_bits_follow_generate_step():
    spec = load_model("llama-3-8b")
    gen = generate_step_feeds(300, 2048, 20)
    assert mlx_lm_bytes(spec, gen, kv_bits=8).kv_bytes == mlx_lm_bytes(spec, gen).kv_bytes  # below 5000 tokens
    q8 = mlx_lm_bytes(spec, gen, kv_bits=8, quantized_kv_start=0)
    assert q8.quantized and q8.kv_bytes == 32 * 512 * 2 * 8 * (128 + 8)
    assert {r.cache for r in q8.layers} == {"QuantizedKVCache"}
    assert mlx_lm_bytes(spec, gen, kv_bits=6, quantized_kv_start=0).kv_bytes == 32 * 512 * 2 * 8 * (96 + 8)
    with pytest.raises(InputError, match="QuantizedKVCache cannot hold 6-bit"):
        mlx_lm_bytes(spec, gen, kv_bits=6, quantized_cache=True)
    with pytest.raises(InputError, match="NotImplementedError"):
        mlx_lm_bytes(load_model("gemma-3-4b"), gen, kv_bits=4, quantized_kv_start=0)
    with pytest.raises(InputError, match="kv_bits 7"):
        mlx_lm_bytes(spec, gen, kv_bits=7)


@pytest.mark.parametrize("kwargs, field", [
    ({"batch": 2}, "batch"), ({"tp": 2}, "tp"), ({"kv_dtype": "fp8"}, "model dtype"),
    ({"kv_dtype": memory.parse_kv_dtype("q8", full_precision_tokens=64)}, "full_precision_tokens"),
])
def test_settings_mlx_lm_has_no_meaning_for(kwargs, field):
    with pytest.raises(InputError, match=field):
        engine_bytes(load_model("llama-3-8b"), "mlx-lm", prompt_tokens=10, **kwargs)


def test_unknown_engine():
    with pytest.raises(InputError, match="sglang"):  # vllm is registered since issue 17
        engine_bytes(load_model("llama-3-8b"), "sglang", prompt_tokens=10)


# ---------------------------------------------------------------- the command line


def _calc(*argv, capsys):
    code = main(["calc", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_calc_engine_mlx_lm_json(capsys):
    code, out, _ = _calc("qwen3-next-80b-a3b", "--engine", "mlx-lm", "--prompt-tokens", "300", "--decode-steps", "20",
                         "--json", capsys=capsys)
    d = json.loads(out)
    eb = engine_bytes(load_model("qwen3-next-80b-a3b"), "mlx-lm", prompt_tokens=300, decode_steps=20)
    assert code == 0 and d["tokens"] == 320 and d["engine"] == "mlx-lm" and d["model_calls"] == 22
    assert (d["allocated_bytes"], d["allocated_state_bytes"]) == (eb.kv_bytes, eb.state_bytes)
    assert d["allocated_total_bytes"] == eb.total_bytes and d["cache_classes"] == {"ArraysCache": 36, "KVCache": 12}
    assert sum(r["allocated_state_bytes"] for r in d["engine_layers"]) == 77_266_944


def test_calc_engine_text_and_the_kvsim_engine(capsys):
    code, out, _ = _calc("llama-3-8b", "--engine", "mlx-lm", "--prompt-tokens", "300", "--kv-dtype", "q8", capsys=capsys)
    assert code == 0 and "allocated by mlx-lm (32 KVCache): 67,108,864 B" in out and "stay unquantized" in out
    code, out, _ = _calc("llama-3-8b", "--prompt-tokens", "300", "--decode-steps", "20", "--json", capsys=capsys)
    d = json.loads(out)
    assert d["engine"] == "kvsim" and d["tokens"] == 320 and d["allocated_bytes"] == memory.allocated_bytes(
        load_model("llama-3-8b"), 320)
    code, out, _ = _calc("llama-3-8b", "--json", capsys=capsys)
    assert "engine" not in json.loads(out) and json.loads(out)["tokens"] == 8192  # unchanged without engine options


@pytest.mark.parametrize("argv, needle", [
    (["--tokens", "5", "--prompt-tokens", "4"], "not both"),
    (["--decode-steps", "4"], "--decode-steps needs --prompt-tokens"),
    (["--engine", "mlx-lm", "--decode-steps", "4"], "--decode-steps needs --prompt-tokens"),
    (["--prefill-step", "4"], "--prefill-step needs --engine mlx-lm"),
    (["--prompt-tokens", "4", "--prefill-step", "2"], "apply to --engine mlx-lm"),
    (["--engine", "mlx-lm", "--state-dtype", "fp32"], "--state-dtype applies to --engine kvsim"),
    (["--engine", "mlx-lm", "--step", "128"], "--step applies"),
    (["--engine", "mlx-lm", "--batch", "2"], "batch must be 1"),
    (["--engine", "mlx-lm", "--kv-dtype", "fp8"], "model dtype"),
    (["--engine", "vllm"], "--engine"),
    (["--engine", "mlx-lm", "--prompt-tokens", "0"], "--prompt-tokens"),
])
def test_calc_engine_bad_combinations_one_line_exit_2(argv, needle, capsys):
    code, out, err = _calc("llama-3-8b", *argv, capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err


def test_calc_engine_refusal_is_one_line(capsys):
    code, _, err = _calc("gemma-3-4b", "--engine", "mlx-lm", "--kv-dtype", "q4", "--quantized-kv-start", "0",
                         capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "NotImplementedError" in err
