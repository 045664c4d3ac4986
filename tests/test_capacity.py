"""Serving capacity: budgets, concurrency, context and the KV = weights crossover."""

import pytest

from kvsim.calc import capacity, memory
from kvsim.calc.counterfactual import as_mha
from kvsim.calc.registry import load_model


def test_budget_and_concurrency_arithmetic():
    spec = load_model("llama-3-8b")
    mem, w = 80 * 2**30, 16 * 2**30
    budget = capacity.kv_budget_bytes(mem, 0.9, w)
    assert budget == int(mem * 0.9 - w)
    n = capacity.max_concurrent_sequences(spec, 8192, mem, 0.9, weights_bytes=w)
    assert n == budget // 2**30
    assert capacity.max_concurrent_sequences(spec, [4096, 8192], mem, 0.9, weights_bytes=w).tolist() == [
        budget // 2**29, budget // 2**30]


def test_max_context_is_the_largest_fitting_t():
    spec = load_model("llama-3-8b")
    t = capacity.max_context_tokens(spec, 2, 40 * 2**30, 0.9, weights_bytes=16 * 2**30)
    budget = capacity.kv_budget_bytes(40 * 2**30, 0.9, 16 * 2**30)
    assert 2 * memory.kv_bytes(spec, t) <= budget < 2 * memory.kv_bytes(spec, t + 1)


def test_windowed_only_model_has_unbounded_context():
    assert capacity.max_context_tokens(load_model("mistral-7b-v0.1"), 1, 80 * 2**30, 0.9) is None


def test_llama3_8b_cache_equals_weights_near_128k_and_near_32k_if_mha():
    spec = load_model("llama-3-8b")
    t = capacity.crossover_tokens(spec)
    t_mha = capacity.crossover_tokens(as_mha(spec))
    assert 115_000 < t < 131_072 and 28_000 < t_mha < 32_768
    assert t_mha == pytest.approx(t / 4, abs=1)


def test_tensor_parallel_splits_weights_and_heads():
    spec = load_model("llama-3-70b")
    budget = capacity.kv_budget_bytes(80 * 2**30, 0.9, 0)
    per_seq = memory.kv_bytes(spec, 8192)
    one = capacity.max_concurrent_sequences(spec, 8192, 80 * 2**30, 0.9, weights_bytes=0)
    eight = capacity.max_concurrent_sequences(spec, 8192, 80 * 2**30, 0.9, tp=8, weights_bytes=0)
    assert one == budget // per_seq and eight == budget // (per_seq // 8)  # 1 of 8 KV heads per rank
    w = load_model("llama-3-70b")
    from kvsim.calc.weights import weights_bytes
    full = capacity.max_concurrent_sequences(w, 8192, 80 * 2**30, 0.9, tp=8)
    assert full == capacity.kv_budget_bytes(80 * 2**30, 0.9, weights_bytes(w) // 8) // (per_seq // 8)


@pytest.mark.parametrize("kw", [dict(utilization=0), dict(utilization=1.2), dict(memory_bytes=0)])
def test_bad_budget_inputs(kw):
    args = dict(memory_bytes=2**30, utilization=0.9, weights_bytes=0) | kw
    with pytest.raises(ValueError, match=next(iter(kw))):
        capacity.kv_budget_bytes(**args)
