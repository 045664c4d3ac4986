"""Capacity tables: formulas, tensor-parallel plans, column ordering, markdown."""

import pytest

from kvsim.calc import weights
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.serving.capacity_tables import (
    ACCELERATORS,
    CONTEXTS,
    MODELS,
    capacity_rows,
    capacity_table,
    plan_tp,
    to_markdown,
)


@pytest.fixture(scope="module")
def table():
    return capacity_table()


def test_every_model_accelerator_and_context_has_a_row(table):
    assert len(table) == len(MODELS) * len(ACCELERATORS) * len(CONTEXTS)
    assert {r["model"] for r in table} == set(MODELS)
    assert {r["context_tokens"] for r in table} == set(CONTEXTS)


def test_dense_column_is_budget_over_reserved_bytes():
    spec = load_model("llama-3-8b")
    row = capacity_rows("llama-3-8b", "H100 80GB", contexts=(8192,))[0]
    budget = int(80 * 2**30 * 0.9 - weights.weights_bytes(spec, "bf16"))
    assert row["tp"] == 1
    assert row["dense"] == budget // (8192 * 131072)  # 2·32 layers·8 heads·128·2 B per token
    assert row["quantized"] == budget // (8192 * 131072 * 136 // 256)  # q8: 136 B per 128-vector


def test_mla_latent_is_replicated_across_ranks():
    row = capacity_rows("deepseek-v3", "H200 141GB", contexts=(4096,))[0]
    spec = load_model("deepseek-v3")
    w = weights.weights_bytes(spec, "fp8")
    assert row["tp"] == 8 and row["weights_dtype"] == "fp8"
    budget = int(get_accelerator("H200 141GB").memory_bytes * 0.9 - w / 8)
    assert row["dense"] == budget // (4096 * 70272)  # every rank stores the whole latent


def test_tensor_parallel_plan_for_llama_3_70b():
    w = weights.weights_bytes(load_model("llama-3-70b"), "bf16")
    gpus = ("A100 40GB", "A100 80GB", "H100 80GB", "H200 141GB")
    plans = {a: plan_tp(w, get_accelerator(a), 0.9) for a in gpus}
    assert plans == {"A100 40GB": 8, "A100 80GB": 4, "H100 80GB": 4, "H200 141GB": 2}
    assert plan_tp(w, get_accelerator("M3 Ultra 512GB"), 0.75) == 1


def test_columns_are_ordered_as_paging_and_quantization_predict(table):
    for r in table:
        assert r["paged"] >= r["dense"], r  # 16-token blocks never reserve more than 256-token steps
        assert r["paged_chat"] >= r["paged"], r  # real requests are shorter than the maximum
        assert r["quantized"] >= r["paged"], r
    long = [r for r in table if r["context_tokens"] == 131072 and r["dense"] > 0]
    assert all(r["paged_chat"] > 20 * r["dense"] for r in long if r["model"] != "gemma-3-27b")


def test_rows_explain_zero_budgets_and_long_contexts(table):
    mac = next(r for r in table if r["model"] == "deepseek-v3" and r["accelerator"] == "M4 Pro 48GB")
    assert mac["dense"] == 0 and "leave no KV budget" in mac["note"]
    llama = next(r for r in table if r["model"] == "llama-3-8b" and r["context_tokens"] == 32768)
    assert "beyond the model's 8,192 positions" in llama["note"]


def test_markdown_rendering():
    rows = capacity_rows("gemma-3-27b", "M4 Max 128GB", contexts=(4096, 131072))
    md = to_markdown(rows).splitlines()
    assert md[0].startswith("| model | accelerator | tp |")
    assert md[1].startswith("|---|---|---:|")
    assert len(md) == 4 and "131,072" in md[3]
    assert to_markdown([]) == "(no rows)"
