"""Issue 19: every hostile but fair input ends in a correct non-negative answer or one line naming the field,
the value and the accepted range (ValueError; the CLI exits 2 without a traceback); never a hang, an overflow,
a memory blow-up or state half-changed by a failed call. One test per group of the issue's 38 wrong inputs."""

import json
import os
import re
import signal
from contextlib import contextmanager

import mlx.core as mx
import numpy as np
import pytest

from kvsim.cache import KVCache, QuantizedKVCache, RotatingKVCache, make_caches, save_caches
from kvsim.cache.io import load_caches
from kvsim.calc import memory
from kvsim.calc.config import ConfigError
from kvsim.calc.engines import engine_bytes
from kvsim.calc.hf_config import from_hf_config, load_config
from kvsim.calc.mlx_lm_rules import (
    chunked_cache_slots,
    chunked_cache_slots_stepwise,
    generate_step_feeds,
    kv_cache_slots,
    kv_cache_slots_stepwise,
    rotating_cache_slots,
    rotating_cache_slots_stepwise,
)
from kvsim.calc.registry import data_dir, load_model
from kvsim.calc.units import InputError
from kvsim.cli import main
from kvsim.model.transformer import build_model, toy_spec
from kvsim.serving.sim import simulate
from kvsim.serving.workload import Workload, make_workload

MODELS = data_dir() / "models"


def _real(name):
    return json.loads((MODELS / f"{name}.json").read_text())


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys, *argv, needle):
    """Exit 2, nothing on stdout, exactly one line on stderr containing ``needle``, no traceback."""
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == "", (argv, code, out)
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    return err


@contextmanager
def _deadline(seconds):
    """Fail instead of hanging (SIGALRM, main thread): a FIFO or /dev/zero must be refused at once."""
    def boom(*_):
        raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _write(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


# ---------------------------------------------------------------- sizes overflow int64


@pytest.mark.parametrize("argv, needle", [
    (["--tokens", 10**14], "at most 2^63 - 1 bytes"),      # printed kv_bytes -5339544073709551616 before
    (["--batch", 10**15], "at most 2^63 - 1 bytes"),
    (["--tokens", 2**62], "--tokens must be an integer in [0, 9007199254740992]"),
    (["--batch", 10**20], "--batch must be an integer in [1, "),
    (["--step", 10**20], "--step must be an integer in [1, "),
    (["--block-size", 10**20], "--block-size must be an integer in [1, "),
    (["--kv-dtype", "q4", "--full-precision-tokens", 10**20], "--full-precision-tokens must be an integer in"),
])
def test_sizes_never_wrap_negative(argv, needle, capsys):
    _refused(capsys, "calc", "llama-3-8b", *argv, needle=needle)


def test_sizes_are_python_ints_up_to_the_limit():
    spec = load_model("llama-3-8b")
    t = (2**63 - 1) // memory.bytes_per_token(spec) - 256  # just inside 2^63 with the allocation slack
    assert memory.kv_bytes(spec, t) == t * 131072 > 0
    with pytest.raises(InputError, match="at most 2"):
        memory.kv_bytes(spec, 2**53)
    with pytest.raises(InputError, match=r"tokens must be integers in \[0, "):
        memory.kv_bytes(spec, np.array([1, 2**60]))  # the array path checks too
    with pytest.raises(InputError, match=r"tokens must be integers in \[0, 9007199254740992\], got 1.5"):
        memory.kv_bytes(spec, 1.5)
    # a window bounds the cache: far past any context, Mistral keeps 4096 tokens
    assert memory.kv_bytes(load_model("mistral-7b-v0.1"), 2**53) == 4096 * 131072
    with pytest.raises(InputError, match="recurrent state would take"):
        memory.fixed_state_bytes(load_model("mamba2-2.7b"), batch=2**53)


# ---------------------------------------------------------------- floats read as integers


@pytest.mark.parametrize("model, field", [
    ("llama-3-8b", "num_hidden_layers"), ("llama-3-8b", "head_dim"), ("deepseek-v3", "kv_lora_rank"),
    ("llama-3-8b", "vocab_size"),
])
def test_a_count_is_a_json_integer_in_range(model, field):
    cfg = _real(model)
    for bad in (1e308, float("inf"), 2.5, True, "32", 10**400):
        with pytest.raises(ConfigError, match=f"{field} must be an integer in") as e:
            from_hf_config({**cfg, field: bad})
        assert "\n" not in str(e.value) and len(str(e.value)) < 300
    assert from_hf_config({**cfg, "num_hidden_layers": 4.0}).num_hidden_layers == 4  # integral float: fine


def test_layer_count_is_bounded_so_parsing_never_blows_up():
    with pytest.raises(ConfigError, match=r"num_hidden_layers must be an integer in \[1, 4096\]"):
        from_hf_config({**_real("llama-3-8b"), "num_hidden_layers": 10**9})
    with pytest.raises(ConfigError, match="at most 4096 layers"):
        from_hf_config({**_real("nemotron-h-8b"), "hybrid_override_pattern": "M" * 5000})


# ---------------------------------------------------------------- impossible geometry


@pytest.mark.parametrize("kv", [7, 64, 3])
def test_kv_heads_must_divide_query_heads(kv):
    with pytest.raises(ConfigError, match=f"num_key_value_heads {kv} must divide num_attention_heads 32"):
        from_hf_config({**_real("llama-3-8b"), "num_key_value_heads": kv})


@pytest.mark.parametrize("value", [-1, 0, "long", [4096], 1.5])
def test_max_position_embeddings_is_a_positive_integer(value):
    # -1 used to switch Mistral's window off silently (4 GiB at 32K instead of 512 MiB)
    with pytest.raises(ConfigError, match="max_position_embeddings must be an integer in"):
        from_hf_config({**_real("mistral-7b-v0.1"), "max_position_embeddings": value})


@pytest.mark.parametrize("value", [["llama"], 3, {"a": 1}])
def test_model_type_must_be_a_string(value):
    with pytest.raises(ConfigError, match="model_type must be a string"):
        from_hf_config({**_real("llama-3-8b"), "model_type": value})


def test_nemotron_h_with_null_attention_head_dim_parses():
    cfg = {**_real("nemotron-h-8b"), "attention_head_dim": None}
    cfg.pop("head_dim", None)
    spec = from_hf_config(cfg)
    full = [layer for layer in spec.layers if layer.kind == "full"]
    assert full and full[0].head_dim == cfg["hidden_size"] // cfg["num_attention_heads"]


def test_moe_layer_freq_zero_with_gpu_is_one_line(tmp_path, capsys):
    path = _write(tmp_path, {**_real("deepseek-v3"), "moe_layer_freq": 0})
    _refused(capsys, "calc", path, "--gpu", "H100 80GB", needle="moe_layer_freq must be an integer in [1, ")


def test_deep_nesting_is_refused_before_the_parser_recurses(tmp_path, capsys):
    text = json.dumps(_real("llama-3-8b"))[:-1] + ', "ignored": ' + "[" * 100000 + "]" * 100000 + "}"
    path = tmp_path / "deep.json"
    path.write_text(text)
    _refused(capsys, "calc", path, needle="nests JSON deeper than 64 levels")
    nested = []
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(ConfigError, match="nests deeper than 64 levels"):
        from_hf_config({**_real("llama-3-8b"), "ignored": nested})


# ---------------------------------------------------------------- special files


def test_fifo_dev_zero_and_directories_are_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with _deadline(10):  # `kvsim measure` on a FIFO: tests/test_hostile_measure.py (it runs mlx-lm)
        _refused(capsys, "calc", fifo, needle="is not a regular file")
        _refused(capsys, "calc", "/dev/zero", needle="is not a regular file")
    empty = tmp_path / "adir"
    empty.mkdir()
    _refused(capsys, "calc", empty, needle="is a directory with no config.json")
    with pytest.raises(ConfigError, match="is a directory with no config.json"):
        load_config(empty)
    _write(empty, _real("llama-3-8b"))  # a model folder: its config.json is read
    assert load_model(str(empty)).num_hidden_layers == 32


def test_a_config_file_is_capped_at_16_mib(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(16 * 2**20 + 1)  # sparse: no memory or disk
    with pytest.raises(ConfigError, match="accepted: at most 16,777,216 bytes"):
        load_config(big)


# ---------------------------------------------------------------- flags


@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "1e-30", "-1", "0", "2e6"])
def test_gpu_memory_is_finite_and_named(value, capsys):
    _refused(capsys, "calc", "llama-3-8b", "--gpu-memory", value,
             needle="--gpu-memory must be a finite number of GiB in [2^-30, 2^20]")


def test_decode_steps_are_closed_form(capsys):
    """10^12 decode steps used to build a tuple per step; feeds are runs now, answered at once."""
    for model in ("llama-3-8b", "gemma-3-27b", "llama-4-scout"):
        code, out, _ = _cli(capsys, "calc", model, "--engine", "mlx-lm", "--prompt-tokens", 300,
                            "--decode-steps", 10**12, "--json")
        d = json.loads(out)
        assert code == 0 and d["model_calls"] == 10**12 + 2 and d["allocated_total_bytes"] > 0
    spec = load_model("llama-3-8b")
    eb = engine_bytes(spec, "mlx-lm", prompt_tokens=300, decode_steps=10**6)
    assert eb.kv_bytes == memory.bytes_per_token(spec) * kv_cache_slots_stepwise(list(generate_step_feeds(300, 2048, 10**6)))


@pytest.mark.parametrize("p, s, d", [(1, 1, 0), (300, 2048, 20), (5000, 7, 300), (4097, 1, 5000), (10, 3, 1000)])
@pytest.mark.parametrize("step", [1, 3, 256])
def test_closed_form_growth_equals_the_stepwise_reference(p, s, d, step):
    feeds = generate_step_feeds(p, s, d)
    stepwise = list(feeds)
    assert kv_cache_slots(feeds, step) == kv_cache_slots_stepwise(stepwise, step)
    for window in (1, 5, 64, 4096):
        assert rotating_cache_slots(feeds, window, 0, step) == rotating_cache_slots_stepwise(stepwise, window, 0, step)
        assert chunked_cache_slots(feeds, window, step) == chunked_cache_slots_stepwise(stepwise, window, step)
    assert rotating_cache_slots(feeds, 64, 4, step) == rotating_cache_slots_stepwise(stepwise, 64, 4, step)


def test_too_many_prefill_calls_is_one_line(capsys):
    _refused(capsys, "calc", "llama-3-8b", "--engine", "mlx-lm", "--prompt-tokens", 10**9, "--prefill-step", 2,
             needle="accepted: at most 100000 (raise prefill_step)")


# ---------------------------------------------------------------- kvsim measure: tests/test_hostile_measure.py


# ---------------------------------------------------------------- API


def test_quantized_cache_takes_integers_only():
    for bad in (dict(bits=4.0), dict(group_size=64.0), dict(bits=True), dict(full_precision_tokens=2.0)):
        with pytest.raises(ValueError, match="must be"):
            QuantizedKVCache(**bad)
    assert QuantizedKVCache(bits=np.int64(4), group_size=np.int32(64)).bits == 4


def test_trim_takes_numpy_integers():
    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 2, 5, 8)), mx.zeros((1, 2, 5, 8)))
    assert c.trim(np.int64(2)) == 2 and c.offset == 3
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        c.trim(1.0)


def test_token_ids_must_be_integers_in_the_vocab():
    model = build_model(toy_spec("gqa"), num_layers=1, vocab_size=32)
    for bad, needle in ((mx.array([[1.7, 2.2]]), "integer token ids"), (np.array([[1.7]]), "integer token ids"),
                        (mx.array([[1, 32]]), r"token ids must be in \[0, 32\)"), (mx.array([1, 2]), r"\(B, L\)")):
        with pytest.raises(ValueError, match=needle):
            model(bad)
    assert model(np.array([[1, 2]], dtype=np.int64)).shape == (1, 2, 32)  # numpy integers are integers


def _state(caches):
    return [None if c is None else (c.offset, c.nbytes, [np.array(a) for a in c.state]) for c in caches]


def test_another_models_caches_change_nothing():
    ours = build_model(toy_spec("gqa"), num_layers=2, vocab_size=32)
    theirs = build_model(toy_spec("mha"), num_layers=2, vocab_size=32)
    caches = ours.make_caches()
    ours(mx.array([[1, 2, 3]]), caches)
    before = _state(caches)
    with pytest.raises(ValueError, match=r"caches\[0\] \(full layer\): KV heads must be 4"):
        theirs(mx.array([[4]]), caches)
    after = _state(caches)
    assert [b[:2] for b in before] == [a[:2] for a in after]
    assert all(np.array_equal(x, y) for b, a in zip(before, after) for x, y in zip(b[2], a[2]))
    with pytest.raises(ValueError, match=r"caches\[1\] \(full layer\) is a RotatingKVCache"):
        ours(mx.array([[1]]), [caches[0], RotatingKVCache(8)])
    assert caches[0].offset == 3  # layer 0 untouched by the refused call


def _saved(tmp_path, caches, name="c.safetensors"):
    path = tmp_path / name
    save_caches(path, caches)
    return path


def _tamper(path, edit):
    """Rewrite the safetensors header of ``path`` with ``edit(header)`` (data bytes kept)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])
    return path


def test_load_caches_validates_the_whole_file_first(tmp_path):
    spec = toy_spec("gqa")
    model = build_model(spec, num_layers=2, vocab_size=32)
    caches = model.make_caches()
    model(mx.array([[1, 2, 3]]), caches)
    good = _saved(tmp_path, caches)
    assert [c.offset for c in load_caches(good)[0]] == [3, 3]
    raw = good.read_bytes()
    cases = {
        "empty": (b"", "is truncated"),
        "truncated": (raw[:-10], "data_offsets"),
        "header cut": (raw[:40], "header length"),
    }
    for name, (data, needle) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.safetensors"
        path.write_bytes(data)
        with pytest.raises(ValueError, match=needle):
            load_caches(path)
    edits = {
        "int32 state": (lambda h: h["0.0"].update(dtype="I32"), "data_offsets span|dtype must be one of F32"),
        "K/V mismatch": (lambda h: h["0.1"].update(shape=[1, 2 * h["0.1"]["shape"][1], 3, h["0.1"]["shape"][3] // 2]),
                         r"layer 0 \(KVCache\): values .* must match keys"),
        "K/V span": (lambda h: h["0.1"].update(shape=[1, 4, 3, 4]), "data_offsets span"),
        "dropped layer": (lambda h: h["__metadata__"].update({"kvsim.layers": "1"}), "array '1.0' is not"),
        "bad offset": (lambda h: h["__metadata__"].update({"0.meta_state": '["99", "256", "1", "256"]'}),
                       "keys hold 3 tokens; meta_state implies 99"),
        "huge capacity": (lambda h: h["__metadata__"].update({"0.meta_state": '["3", "256", "1", "99999999999"]'}),
                          "cache buffers"),
        "bad json": (lambda h: h["__metadata__"].update({"1.meta_state": "[oops"}), "layer 1 meta_state must be"),
        "n_state": (lambda h: h["__metadata__"].update({"1.n_state": "-1"}), "1.n_state must be an integer"),
    }
    for name, (edit, needle) in edits.items():
        path = _tamper(_saved(tmp_path, caches, f"{name.replace(' ', '_').replace('/', '')}.safetensors"), edit)
        with pytest.raises(ValueError, match=needle):
            load_caches(path)
    ring = _saved(tmp_path, [RotatingKVCache(8), caches[1]], "ring.safetensors")
    with pytest.raises(ValueError, match="layer 0 holds a RotatingKVCache; its full layer takes"):
        load_caches(ring, spec=model.spec)
    with pytest.raises(ValueError, match="holds 2 layers; the model"):
        load_caches(good, spec=toy_spec("gqa", num_hidden_layers=3))
    other = build_model(toy_spec("mha"), num_layers=2, vocab_size=32)
    with pytest.raises(ValueError, match="KV heads must be 4"):
        load_caches(good, spec=other.spec)


def test_workload_and_simulate_arguments_are_one_line():
    for kwargs, needle in (
        (dict(lengths={"prompt": ("lognormal", -5, 1.0), "output": ("fixed", 8)}), "mean must be a finite number"),
        (dict(rate="fast"), "rate must be a finite number > 0"),
        (dict(rate=float("nan")), "rate must be a finite number > 0"),
        (dict(lengths={"prompt": ("uniform", 9, 3), "output": ("fixed", 8)}), "high must be an integer in [9, "),
        (dict(lengths={"prompt": ("fixed",), "output": ("fixed", 8)}), "lengths['prompt'] must be"),
    ):
        with pytest.raises(InputError, match=re.escape(needle)):
            make_workload(10, **kwargs)
    w = make_workload(3, "fixed")
    empty = Workload(*(a[:0] for a in (w.arrival, w.prompt_tokens, w.output_tokens, w.prefix_id)))
    with pytest.raises(InputError, match="at least 1 request"):
        simulate(empty)
    zero = Workload(w.arrival, w.prompt_tokens, w.output_tokens * 0, w.prefix_id)
    with pytest.raises(InputError, match="output_tokens >= 1"):
        simulate(zero)


# ---------------------------------------------------------------- messages name the field and the range


def test_messages_name_the_field_and_the_range(capsys):
    err = _refused(capsys, "calc", "llama-3-8b", "--tokens", 2**70, needle="--tokens")
    assert "[0, 9007199254740992]" in err  # an integer: the message says the accepted range
    with pytest.raises(InputError, match=r"tokens must be an integer in \[0, 9007199254740992\], got 1180591620717411303424"):
        memory.kv_bytes(load_model("llama-3-8b"), 2**70)
    _refused(capsys, "calc", "llama-3-8b", "--gpu-memory", "1e-30", needle="--gpu-memory")
    with pytest.raises(ValueError, match="spec must be a kvsim.calc.config.ModelSpec"):
        make_caches("llama-3-8b")
