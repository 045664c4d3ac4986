"""The command line: real output for good input, one line and exit status 2 for bad input."""

import json
import re
import subprocess
import sys

import pytest

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.calc.report import summary
from kvsim.calc.units import DEFAULT_BLOCK_SIZE, DEFAULT_STEP, format_bytes
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
    assert d["allocated_step_tokens"] == DEFAULT_STEP and d["paged_block_tokens"] == DEFAULT_BLOCK_SIZE
    assert d["allocated_bytes"] == d["paged_bytes"] == 2**30  # 8,192 is a multiple of both


def test_calc_step_and_block_size_options(capsys):
    code, out, _ = run("calc", "llama-3-8b", "--tokens", "8192", "--step", "100", "--block-size", "7", "--json",
                       capsys=capsys)
    d = json.loads(out)
    assert code == 0 and d["allocated_step_tokens"] == 100 and d["paged_block_tokens"] == 7
    assert d["allocated_bytes"] == 8200 * 131_072  # ⌈8192/100⌉·100 slots
    assert d["paged_bytes"] == 1171 * 7 * 131_072  # ⌈8192/7⌉ blocks of 7
    _, text, _ = run("calc", "llama-3-8b", "--tokens", "8192", "--step", "100", "--block-size", "7", capsys=capsys)
    assert "100-token steps" in text and "7-token blocks" in text and "1,074,790,400 B" in text


def test_summary_takes_keywords_and_matches_the_json(capsys):
    spec = load_model("jamba-v0.1")
    s = summary(spec, tokens=4096, batch=2, kv_dtype="q4", tp=2, state_dtype="fp32", step=128, block_size=32)
    assert s["kv_bytes"] == memory.kv_bytes(spec, 4096, 2, memory.parse_kv_dtype("q4"), 2)
    assert s["fixed_state_bytes"] == memory.fixed_state_bytes(spec, 2, "fp32")
    assert s["allocated_bytes"] == memory.allocated_bytes(spec, 4096, 2, "q4", step=128, tp=2)
    assert s["paged_bytes"] == memory.allocated_bytes(spec, 4096, 2, "q4", block_size=32, tp=2)
    _, out, _ = run("calc", "jamba-v0.1", "--tokens", "4096", "--batch", "2", "--kv-dtype", "q4", "--tp", "2",
                    "--state-dtype", "fp32", "--step", "128", "--block-size", "32", "--json", capsys=capsys)
    assert json.loads(out) == json.loads(json.dumps(s))


def test_calc_hybrid_json_has_state_and_per_layer_kinds(capsys):
    code, out, _ = run("calc", "jamba-v0.1", "--tokens", "262144", "--kv-dtype", "fp16", "--json", capsys=capsys)
    d = json.loads(out)
    assert d["kv_bytes"] == 4 * 2**30 and d["fixed_state_bytes"] > 0
    assert d["total_bytes"] == d["kv_bytes"] + d["fixed_state_bytes"]
    kinds = [row["kind"] for row in d["layers"]]
    assert kinds.count("full") == 4 and kinds.count("recurrent") == 28


def test_state_dtype_defaults_to_the_reference_implementation(capsys):
    # Qwen3-Next's delta-rule state in fp32 beside a bf16 conv window (mlx-lm measures 77,266,944 B)
    _, out, _ = run("calc", "qwen3-next-80b-a3b", "--tokens", "1", "--json", capsys=capsys)
    assert json.loads(out)["fixed_state_bytes"] == 77_266_944
    _, out, _ = run("calc", "qwen3-next-80b-a3b", "--tokens", "1", "--state-dtype", "bf16", "--json", capsys=capsys)
    assert json.loads(out)["fixed_state_bytes"] == 39_518_208


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
    models = ("llama-3-8b", "mistral-7b-v0.1", "jamba-v0.1")
    code, out, _ = run("compare", *models, "--tokens", "32768", "--block-size", "64", capsys=capsys)
    _, js, _ = run("compare", *models, "--tokens", "32768", "--block-size", "64", "--json", capsys=capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 + len(models) + 1
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines]  # columns are 2+ spaces apart
    assert cells[0] == ["model", "layers", "bytes/token", "KV cache", "state", "total", "allocated", "paged"]
    for row_cells, row in zip(cells[2:], json.loads(js)):
        keys = ("bytes_per_token", "kv_bytes", "fixed_state_bytes", "total_bytes", "allocated_bytes", "paged_bytes")
        assert row_cells == [row["model"], str(sum(row["layer_kinds"].values())), *(format_bytes(row[k]) for k in keys)]
        assert row["paged_block_tokens"] == 64
    assert "256-token steps" in lines[-1] and "64-token blocks" in lines[-1]


@pytest.mark.parametrize("argv, needle", [
    (["calc", "no-such-model"], "no-such-model"),
    (["calc", "llama-3-8b", "--tokens", "-5"], "--tokens"),
    (["calc", "llama-3-8b", "--tokens", "many"], "--tokens"),
    (["calc", "llama-3-8b", "--kv-dtype", "int7"], "kv dtype"),
    (["calc", "llama-3-8b", "--batch", "0"], "--batch"),
    (["calc", "llama-3-8b", "--batch", "-1"], "--batch must be an integer in [1, "),
    (["calc", "llama-3-8b", "--tp", "0"], "--tp"),
    (["calc", "llama-3-8b", "--tp", "3"], "tp=3 neither divides num_key_value_heads=8 nor is a multiple of it"),
    (["compare", "deepseek-v3", "llama-3-8b", "--tp", "5"], "tp=5 neither divides num_key_value_heads=8"),
    (["calc", "phi-3-mini-4k", "--kv-dtype", "q4", "--group-size", "64"], "head_dim"),
    (["calc", "llama-3-8b", "--kv-dtype", "q4", "--group-size", "48"], "group_size"),
    (["calc", "llama-3-8b", "--gpu", "Z80"], "Z80"),
    (["calc", "llama-3-8b", "--gpu-memory", "-1"], "--gpu-memory"),
    (["calc", "llama-3-8b", "--gpu-memory", "80", "--utilization", "1.5"], "utilization"),
    (["calc", "llama-3-8b", "--gpu-memory", "80", "--weights-dtype", "fp7"], "weights dtype"),
    (["calc", "jamba-v0.1", "--state-dtype", "q4"], "state_dtype"),
    (["calc", "llama-3-8b", "--step", "0"], "--step"),
    (["compare", "llama-3-8b", "--block-size", "-16"], "--block-size"),
    (["frobnicate"], "frobnicate"),
    ([], "command"),
])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    code, out, err = run(*argv, capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_tp_beyond_the_kv_heads_says_each_head_is_replicated(capsys):
    code, out, _ = run("calc", "llama-3-8b", "--tp", "16", "--json", capsys=capsys)
    d = json.loads(out)
    assert code == 0 and d["bytes_per_token"] == 32 * 2 * 128 * 2  # 1 of 8 heads per rank, not 8/16
    assert d["tp_split"] == [{"kind": "attention", "layers": 32, "num_key_value_heads": 8, "heads_per_rank": 1,
                              "ranks_per_copy": 2}]
    _, text, _ = run("calc", "llama-3-8b", "--tp", "16", "--explain", capsys=capsys)
    assert "per rank: 8 KV heads on 16 ranks: each rank keeps 1 head, each head replicated on 2 ranks" in text
    assert "× 1 KV heads (each replicated on 2 ranks) ×" in text
    _, text, _ = run("calc", "deepseek-v3", "--tp", "8", capsys=capsys)
    assert "per rank: the MLA latent has no heads to split: every one of the 8 ranks holds all of it" in text
    _, text, _ = run("compare", "llama-3-8b", "deepseek-v3", "--tp", "8", capsys=capsys)
    assert "llama-3-8b per rank: 8 KV heads split over 8 ranks: 1 per rank" in text
    assert "deepseek-v3 per rank: the MLA latent has no heads to split" in text


def test_malformed_json_file(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run("calc", str(bad), capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and "not valid JSON" in err


@pytest.mark.parametrize("error", [ValueError("boom"), KeyError("boom")])
@pytest.mark.parametrize("argv", [["calc", "llama-3-8b"], ["compare", "llama-3-8b", "mistral-7b-v0.1"]])
def test_a_bug_is_not_bad_input(argv, error, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise error
    monkeypatch.setattr(memory, "kv_bytes", broken)  # a calculator bug, not the caller's input
    with pytest.raises(type(error), match="boom"):
        main(argv)
    assert capsys.readouterr().err == ""


def test_python_m_kvsim_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "kvsim", "calc", "llama-3-8b", "--tokens", "-1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    ok = subprocess.run([sys.executable, "-m", "kvsim", "calc", "llama-3-8b", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["kv_bytes"] == 2**30


def test_a_bug_shows_its_traceback_in_a_process():
    code = ("import sys, kvsim.calc.memory as m\n"
            "def broken(*a, **k): raise ValueError('boom')\n"
            "m.kv_bytes = broken\n"
            "from kvsim.cli import main\n"
            "sys.exit(main(['calc', 'llama-3-8b']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ValueError: boom" in proc.stderr
