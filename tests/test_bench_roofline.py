"""benchmarks/bench_roofline.py end to end on toy models (the real sizes take minutes): every variant,
the batch sweep and the MLA kernels land in the JSON and the markdown, in both output folders."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from kvsim.measure.twins import mlx_lm_version
from kvsim.model import toy_spec

ROOT = Path(__file__).resolve().parents[1]
# The benchmark runs mlx-lm beside kvsim (mlx-lm imports transformers and torch, ~5 CPU-s): make test's engines
# stage runs this file; the unit stage ignores it (tests/test_stages.py).
pytestmark = pytest.mark.engines
TOYS = {"llama-3-8b": toy_spec("gqa", head_dim=64),          # 8-bit caches need head_dim % 64 == 0
        "deepseek-v3": toy_spec("mla"), "mistral-7b-v0.1": toy_spec("sliding")}


@pytest.fixture
def bench(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_roofline", ROOT / "benchmarks" / "bench_roofline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    real_plan = module.plan

    def toy_plan(gpu, quick):
        p = real_plan(gpu, quick)
        for v in p["variants"]:
            v.build, v.contexts = {}, (8, 20)                  # past the toy window (8)
            v.kv_heads = 4 if v.kv_heads == 32 else v.kv_heads   # MHA: the toy has 4 query heads
        return {**p, "batches": (1, 2), "batch_context": 8, "repeats": 1, "copy_bytes": 2**20, "matmul_n": 64}

    monkeypatch.setattr(module, "load_model", TOYS.__getitem__)
    monkeypatch.setattr(module, "plan", toy_plan)
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    return module


def test_benchmark_runs_every_variant_on_toys(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_roofline.py", "--device", "cpu", "--quick", "--out", str(tmp_path / "out")])
    bench.main()
    for folder in ("results", "out"):
        res = json.loads((tmp_path / folder / "roofline_cpu_quick.json").read_text())
        md = (tmp_path / folder / "roofline_cpu_quick.md").read_text()
    assert not res["errors"] and not res["skipped"]
    assert len(res["variants"]) == 6 and all(len(v["points"]) == 2 for v in res["variants"].values())
    for v in res["variants"].values():
        for pt in v["points"]:
            assert pt["kvsim_over_mlx_lm"] > 0 and pt["floor_ms"] > 0
            assert pt["floor_ms"] == pytest.approx(1e3 * pt["read_bytes"] / res["calibration"]["copy_bytes_per_s"])
    assert [pt["batch"] for pt in res["batch_sweep"]["points"]] == [1, 2]
    assert [k["context_tokens"] for k in res["mla_kernels"]] == [8, 20]
    assert len(res["calibration"]["runs"]) == 2 and res["meta"]["mlx_lm"] == mlx_lm_version()
    assert md.count("| GQA-8 (Llama 3 8B) |") == 4 and "kvsim / mlx-lm over 12 points" in md


def test_an_exhausted_budget_skips_instead_of_running(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_roofline.py", "--device", "cpu", "--quick", "--budget-s", "1e-9",
                                      "--no-mlx-lm"])
    bench.main()
    res = json.loads((tmp_path / "results" / "roofline_cpu_quick.json").read_text())
    assert not res["variants"] and len(res["skipped"]) == 6


def test_a_failing_point_is_recorded_and_the_run_goes_on(bench, tmp_path, monkeypatch):
    real = bench.decode_point

    def flaky(model, context, *args, **kwargs):
        if context == 20:
            raise RuntimeError("out of memory (simulated)")
        return real(model, context, *args, **kwargs)

    monkeypatch.setattr(bench, "decode_point", flaky)
    monkeypatch.setattr(sys, "argv", ["bench_roofline.py", "--device", "cpu", "--quick", "--no-mlx-lm"])
    bench.main()
    res = json.loads((tmp_path / "results" / "roofline_cpu_quick.json").read_text())
    assert all([pt["context_tokens"] for pt in v["points"]] == [8] for v in res["variants"].values())
    assert len(res["errors"]) == 6 and all("simulated" in e["error"] for e in res["errors"])
