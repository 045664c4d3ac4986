"""Property-based fuzzing of everything a user, a file or a caller gives kvsim (issue 19).

Targets (each asserts: exit 0 / a result with non-negative sizes, or exit 2 / ValueError with one line and no
traceback; never a hang: SIGALRM per example; never a memory blow-up: peak RSS growth per example bounded):
- ``config``: config.json dicts around the real ones in data/models (deleted keys, swapped types, extreme
  values, deep nesting), written to a file and run through ``kvsim calc`` in-process (``main()``);
- ``argv``: ``kvsim calc`` / ``compare`` argument vectors (registry models, every sizing flag, hostile values);
- ``cache_file``: files written by ``save_caches`` with a mutated header, metadata or bytes, through
  ``load_caches``.
CI runs a few hundred examples in total (bounded in time); ``KVSIM_FUZZ_EXAMPLES=20000`` raises the count
per target for a long run by hand (``tests/fuzz_long_run.py`` runs that under an address-space rlimit).
"""

import atexit
import collections
import contextlib
import io
import json
import math
import os
import re
import resource
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsim.calc.registry import data_dir, model_names
from kvsim.cli import main

EXAMPLES = int(os.environ.get("KVSIM_FUZZ_EXAMPLES", "0"))
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck),
                max_examples=EXAMPLES or 120)
SECONDS_PER_EXAMPLE = 20
RSS_GROWTH_LIMIT_KIB = 1_500_000  # ru_maxrss is in KiB on Linux: 1.5 GB per example at most

MODELS = data_dir() / "models"
REAL = {p.stem: json.loads(p.read_text()) for p in sorted(MODELS.glob("*.json"))}
_TMP = Path(tempfile.mkdtemp(prefix="kvsim-fuzz-"))
STATS = collections.Counter()  # "target: outcome" -> examples; written to $KVSIM_FUZZ_STATS at exit


@atexit.register
def _write_stats():
    if os.environ.get("KVSIM_FUZZ_STATS"):
        Path(os.environ["KVSIM_FUZZ_STATS"]).write_text(json.dumps(dict(sorted(STATS.items())), indent=1))


@contextlib.contextmanager
def guarded():
    """One example: a SIGALRM deadline (a hang fails the test) and a bound on peak-RSS growth."""
    def boom(*_):
        raise TimeoutError(f"example still running after {SECONDS_PER_EXAMPLE} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(SECONDS_PER_EXAMPLE)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < RSS_GROWTH_LIMIT_KIB, f"peak RSS grew by {grown} KiB in one example"


def run_cli(argv):
    """(exit code, stdout, stderr) of ``kvsim <argv>`` in-process; any other exception propagates (a bug)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's --help would exit 0; nothing else may
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _numbers(value):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)


def check_outcome(argv, code, out, err):
    """Exit 0 with non-negative numbers, or exit 2 with exactly one line on stderr and no traceback."""
    if code == 0:
        assert err == "", (argv, err)
        if "--json" in argv:
            for n in _numbers(json.loads(out)):
                assert n >= 0 and not (isinstance(n, float) and math.isnan(n)), (argv, n)
        else:  # no negative number anywhere (model names such as llama-3-8b have a letter before the dash)
            assert not re.search(r"(?<![\w.])-\d", out), (argv, out)
        return "ok"
    assert code == 2, (argv, code, out, err)
    assert out == "" and err.count("\n") == 1 and err.startswith("kvsim: error: "), (argv, err)
    assert "Traceback" not in err and len(err) < 2000, (argv, err)
    return "refused"


# ---------------------------------------------------------------- strategies

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308, 1e-300, 0.5, 12.0, 4096.0]),
    st.text(max_size=12), st.sampled_from(["auto", "full_attention", "M*-E", "bfloat16", "1e308", ""]),
    st.lists(st.integers(-3, 3), max_size=6), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def mutated_config(draw):
    """A real config with a few deletions, type swaps, extreme values and nesting (also inside text_config)."""
    name = draw(st.sampled_from(sorted(REAL)))
    cfg = json.loads(json.dumps(REAL[name]))
    target = cfg["text_config"] if isinstance(cfg.get("text_config"), dict) and draw(st.booleans()) else cfg
    for _ in range(draw(st.integers(1, 4))):
        keys = sorted(target)
        action = draw(st.sampled_from(["delete", "swap", "extreme", "nest", "add"]))
        if action == "add" or not keys:
            target[draw(st.sampled_from(["num_key_value_heads", "sliding_window", "head_dim", "max_position_embeddings",
                                         "layer_types", "moe_layer_freq", "attention_chunk_size", "n_ctx",
                                         "text_config", "ssm_cfg", "model_type"]))] = draw(HOSTILE)
            continue
        key = draw(st.sampled_from(keys))
        if action == "delete":
            del target[key]
        elif action == "swap":
            target[key] = draw(HOSTILE)
        elif action == "extreme":
            target[key] = draw(st.sampled_from([0, -1, 1, 2, 3, 7, 2**20, 2**31 - 1, 2**31, 2**62, 1e308, 1.5]))
        else:
            target[key] = nested(draw(st.sampled_from([2, 10, 63, 65, 200, 900])))
    return name, cfg


SIZING_FLAGS = {
    "--tokens": st.one_of(st.integers(0, 2**20), st.sampled_from([2**53, 2**53 + 1, 10**14, 2**62, -1, "1e3", "x"])),
    "--batch": st.one_of(st.integers(1, 64), st.sampled_from([0, 10**15, 10**20, -3, "2.0"])),
    "--kv-dtype": st.sampled_from(["bf16", "fp32", "fp8", "q8", "q4", "q3", "q2", "q6", "int7", ""]),
    "--group-size": st.sampled_from([32, 64, 128, 48, 0, -64, 10**30]),
    "--scale-dtype": st.sampled_from(["bf16", "fp32", "q4", "nope"]),
    "--full-precision-tokens": st.one_of(st.integers(0, 5000), st.sampled_from([10**20, -1])),
    "--state-dtype": st.sampled_from(["fp32", "bf16", "fp16", "q4"]),
    "--step": st.one_of(st.integers(1, 4096), st.sampled_from([0, 10**20, 2**53])),
    "--block-size": st.one_of(st.integers(1, 4096), st.sampled_from([0, 10**20, -16])),
}
CALC_FLAGS = {
    "--gpu": st.sampled_from(["H100 80GB", "A100 40GB", "H200 141GB", "L4", "M2 16GB", "Z80"]),
    "--gpu-memory": st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                              st.sampled_from(["1e308", "1e-30", "80", "0.001", "1048576", "inf", "nan", "-1"])),
    "--utilization": st.sampled_from(["0.9", "1", "0", "1.5", "nan", "inf", "1e-300"]),
    "--weights-dtype": st.sampled_from(["bf16", "fp8", "q4", "fp7"]),
    "--engine": st.sampled_from(["kvsim", "mlx-lm", "vllm?"]),
    "--prompt-tokens": st.one_of(st.integers(1, 20000), st.sampled_from([0, 10**12, 2**53])),
    "--prefill-step": st.one_of(st.integers(1, 4096), st.sampled_from([0, 1, 10**20])),
    "--decode-steps": st.one_of(st.integers(0, 1000), st.sampled_from([10**12, 2**53, -1])),
    "--quantized-kv-start": st.one_of(st.integers(0, 10000), st.sampled_from([-1, 10**30])),
}


@st.composite
def argv_vector(draw):
    command = draw(st.sampled_from(["calc", "calc", "compare"]))
    names = model_names()
    if command == "calc":
        argv = ["calc", draw(st.sampled_from(names + ["no-such-model", "/dev/zero", "/nonexistent/x.json"]))]
    else:
        argv = ["compare", *draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))]
    flags = dict(SIZING_FLAGS, **(CALC_FLAGS if command == "calc" else {}))
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=5, unique=True)):
        argv += [flag, draw(flags[flag])]
    if draw(st.booleans()):
        argv.append("--json")
    if command == "calc" and draw(st.booleans()):
        argv.append("--explain")
    return argv


# ---------------------------------------------------------------- targets


@FUZZ
@given(case=mutated_config(), extra=st.lists(st.sampled_from(
    [["--tokens", "32768"], ["--batch", "8"], ["--kv-dtype", "q4"], ["--gpu", "H100 80GB"], ["--json"],
     ["--engine", "mlx-lm", "--prompt-tokens", "300", "--decode-steps", "20"], ["--explain"]]), max_size=3))
def test_fuzz_config_files(case, extra):
    name, cfg = case
    path = _TMP / f"{name}.json"
    path.write_text(json.dumps(cfg))  # Infinity/NaN are written as Python's json does, and read back
    argv = ["calc", str(path)] + [a for flags in extra for a in flags]
    if "--engine" in argv and "--kv-dtype" in argv:
        argv = argv[: argv.index("--kv-dtype")] + argv[argv.index("--kv-dtype") + 2:]
    with guarded():
        STATS["config: " + check_outcome(argv, *run_cli(argv))] += 1


@FUZZ
@given(argv=argv_vector())
def test_fuzz_cli_arguments(argv):
    with guarded():
        STATS["argv: " + check_outcome(argv, *run_cli(argv))] += 1


def _saved_caches():
    """A small file holding one cache of every class, the fuzzer's seed."""
    import mlx.core as mx
    from lockstep import random_kv

    from kvsim.cache import (
        ChunkedKVCache,
        KVCache,
        LatentCache,
        QuantizedKVCache,
        RecurrentStateCache,
        RotatingKVCache,
        save_caches,
    )
    caches = [KVCache(step=8), RotatingKVCache(8, step=4), ChunkedKVCache(8, step=4), QuantizedKVCache(4, 32, step=8),
              QuantizedKVCache(8, 32, step=8, full_precision_tokens=2), LatentCache(step=8), None,
              RecurrentStateCache([("conv", (3, 8)), ("ssm", (2, 4))])]
    for i, c in enumerate(caches[:6]):
        H = 1 if isinstance(c, LatentCache) else 2  # one latent shared by all heads
        c.update_and_fetch(*random_kv(11, H=H, D=32, Dv=32, seed=2 * i))  # fp32 K, V (1, H, S, 32)
        c.update_and_fetch(*random_kv(1, H=H, D=32, Dv=32, seed=2 * i + 1))
    caches[7]["ssm"] = mx.ones((1, 2, 4))
    path = _TMP / "seed.safetensors"
    save_caches(path, caches, {"note": "fuzz"})
    return path.read_bytes()


SEED_FILE = None


@st.composite
def mutated_file(draw):
    global SEED_FILE
    if SEED_FILE is None:
        SEED_FILE = _saved_caches()
    raw = SEED_FILE
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    action = draw(st.sampled_from(["meta", "meta", "tensor", "tensor", "drop", "bytes", "truncate", "length"]))
    if action == "meta":
        key = draw(st.sampled_from(sorted(header["__metadata__"])))
        value = header["__metadata__"][key]
        if value.startswith("["):  # a meta_state list: change one entry
            items = json.loads(value)
            if items:
                i = draw(st.integers(0, len(items) - 1))
                items[i] = draw(st.one_of(st.sampled_from(["", "-1", "0", "1", "99999999999", "1e3", "x", "float64",
                                                           "conv:0x8:float32", str(2**64)]),
                                          st.integers(-5, 10**6).map(str)))
            header["__metadata__"][key] = draw(st.sampled_from([json.dumps(items), value[:-1], "[]", "{}", "null"]))
        else:
            header["__metadata__"][key] = draw(st.sampled_from(["", "0", "1", "-1", "8", "1000000", "None", "KVCache",
                                                                "RotatingKVCache", "os.system", "x"]))
    elif action == "tensor":
        key = draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets"]))
        if field == "dtype":
            header[key]["dtype"] = draw(st.sampled_from(["F32", "F16", "BF16", "I32", "U32", "F64", "U8", "X"]))
        elif field == "shape":
            shape = list(header[key]["shape"])
            i = draw(st.integers(0, len(shape) - 1))
            shape[i] = draw(st.sampled_from([0, 1, 2, 3, 4, 8, 2**31, -1]))
            header[key]["shape"] = draw(st.sampled_from([shape, shape[::-1], shape[:-1], shape + [1]]))
        else:
            a, b = header[key]["data_offsets"]
            header[key]["data_offsets"] = draw(st.sampled_from([[b, a], [a, a], [a, b + 4], [a - 4, b - 4], [0, 2**40]]))
    elif action == "drop":
        key = draw(st.sampled_from(sorted(header)))
        del header[key]
    text = json.dumps(header).encode()
    data = len(text).to_bytes(8, "little") + text + raw[8 + n:]
    if action == "bytes":
        data = bytearray(raw)
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        data = bytes(data)
    elif action == "truncate":
        data = raw[: draw(st.integers(0, len(raw) - 1))]
    elif action == "length":
        data = draw(st.sampled_from([0, 1, 2**40, len(text) - 1, len(raw)])).to_bytes(8, "little") + raw[8:]
    return data


@settings(FUZZ, max_examples=EXAMPLES or 80)
@given(data=mutated_file())
def test_fuzz_cache_files(data):
    from kvsim.cache.io import load_caches
    path = _TMP / "mutated.safetensors"
    path.write_bytes(data)
    with guarded():
        try:
            caches, _ = load_caches(path)
        except ValueError as e:
            message = str(e)
            assert message and "\n" not in message and len(message) < 2000, message
            STATS["cache_file: refused"] += 1
            return
        for c in caches:  # loaded: a consistent cache
            if c is not None:
                assert c.offset >= 0 and c.nbytes >= 0 and c.size() >= 0 and c.capacity >= 0
        STATS["cache_file: ok"] += 1


def test_fuzz_examples_are_counted():
    """The long run's count per target comes from KVSIM_FUZZ_EXAMPLES (default: CI's small run)."""
    assert FUZZ.max_examples == (EXAMPLES or 120)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
