"""The command line: real output for good input, one line and exit status 2 for bad input."""

import json
import subprocess
import sys

import pytest

from kvsim.cli import main


def run(*argv, capsys):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_lists_the_registry(capsys):
    from kvsim.calc.registry import model_names
    code, out, _ = run("models", capsys=capsys)
    assert code == 0 and out.split() == model_names() and len(model_names()) >= 24


def test_calc_json_fields(capsys):
    code, out, _ = run("calc", "llama-3-8b", "--tokens", "8192", "--json", capsys=capsys)
    d = json.loads(out)
    assert code == 0
    assert d["kv_bytes"] == 2**30 and d["bytes_per_token"] == 131_072
    assert d["fixed_state_bytes"] == 0 and d["total_bytes"] == 2**30
    assert len(d["layers"]) == 32 and {row["kind"] for row in d["layers"]} == {"full"}
    assert sum(row["kv_bytes"] for row in d["layers"]) == d["kv_bytes"]


def test_calc_hybrid_json_has_state_and_per_layer_kinds(capsys):
    code, out, _ = run("calc", "jamba-v0.1", "--tokens", "262144", "--kv-dtype", "fp16", "--json", capsys=capsys)
    d = json.loads(out)
    assert d["kv_bytes"] == 4 * 2**30 and d["fixed_state_bytes"] > 0
    assert d["total_bytes"] == d["kv_bytes"] + d["fixed_state_bytes"]
    kinds = [row["kind"] for row in d["layers"]]
    assert kinds.count("full") == 4 and kinds.count("recurrent") == 28


def test_calc_config_path_and_gpu_capacity(tmp_path, capsys):
    from kvsim.calc.registry import data_dir
    path = data_dir() / "models" / "llama-3-8b.json"
    code, out, _ = run("calc", str(path), "--tokens", "8192", "--gpu", "A100 80GB", "--json", capsys=capsys)
    d = json.loads(out)
    assert code == 0 and d["capacity"]["max_concurrent_sequences"] > 0


def test_calc_explain_shows_the_numbers(capsys):
    code, out, _ = run("calc", "deepseek-v3", "--tokens", "1000", "--explain", capsys=capsys)
    assert code == 0 and "61 MLA layers" in out and "70,272 B/token" in out


def test_compare_table(capsys):
    code, out, _ = run("compare", "llama-3-8b", "mistral-7b-v0.1", "gemma-3-27b", "--tokens", "32768", capsys=capsys)
    assert code == 0 and out.count("\n") >= 5 and "mistral-7b-v0.1" in out


@pytest.mark.parametrize("argv, needle", [
    (["calc", "no-such-model"], "no-such-model"),
    (["calc", "llama-3-8b", "--tokens", "-5"], "--tokens"),
    (["calc", "llama-3-8b", "--tokens", "many"], "--tokens"),
    (["calc", "llama-3-8b", "--kv-dtype", "int7"], "kv dtype"),
    (["calc", "llama-3-8b", "--batch", "0"], "--batch"),
    (["calc", "llama-3-8b", "--batch", "-1"], "--batch must be an integer >= 1"),
    (["calc", "llama-3-8b", "--tp", "0"], "--tp"),
    (["calc", "phi-3-mini-4k", "--kv-dtype", "q4", "--group-size", "64"], "head_dim"),
    (["calc", "llama-3-8b", "--kv-dtype", "q4", "--group-size", "48"], "group_size"),
    (["calc", "llama-3-8b", "--gpu", "Z80"], "Z80"),
    (["calc", "llama-3-8b", "--gpu-memory", "-1"], "--gpu-memory"),
    (["calc", "llama-3-8b", "--gpu-memory", "80", "--utilization", "1.5"], "utilization"),
    (["frobnicate"], "frobnicate"),
    ([], "command"),
])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    code, out, err = run(*argv, capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_malformed_json_file(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run("calc", str(bad), capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "not valid JSON" in err


def test_console_entry_point_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "kvsim.cli", "calc", "llama-3-8b", "--tokens", "-1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
