"""The one bisection (kvsim.calc.search): against a linear scan, with its call count and bounds never called."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvsim.calc import capacity, hybrid, memory
from kvsim.calc.registry import load_model
from kvsim.calc.search import T_MAX, first_tokens, first_true, last_true


@given(low=st.integers(-50, 50), width=st.integers(1, 200), data=st.data())
def test_first_and_last_true_match_a_linear_scan(low, width, data):
    high = low + width
    edge = data.draw(st.integers(low + 1, high))  # the first true point, in (low, high]
    calls = []

    def at_or_after_edge(j):
        calls.append(j)
        return j >= edge

    assert first_true(at_or_after_edge, low, high) == next(j for j in range(low + 1, high + 1) if j >= edge)
    assert low not in calls and high not in calls  # the bounds are taken as given, never called
    assert len(calls) <= math.ceil(math.log2(width)) if width > 1 else calls == []
    assert last_true(lambda j: j < edge, low, high) == max(j for j in range(low, high) if j < edge) == edge - 1


def test_first_tokens_at_zero_never_and_in_between():
    assert first_tokens(lambda t: True) == 0
    assert first_tokens(lambda t: t >= T_MAX + 1) is None  # unmet at the bound: never met
    assert first_tokens(lambda t: t >= 123_457) == 123_457
    assert first_tokens(lambda t: t >= T_MAX) == T_MAX
    assert T_MAX == 2**40


def test_the_searches_built_on_it_agree_with_the_formula():
    spec = load_model("llama-3-8b")  # 131,072 B per token, no windows
    t = hybrid.tokens_to_reach(spec, 10**9)
    assert memory.kv_bytes(spec, t) >= 10**9 > memory.kv_bytes(spec, t - 1) and t == -(-10**9 // 131_072)
    ctx = capacity.max_context_tokens(spec, 1, 80 * 2**30, weights_bytes=0)
    assert ctx == int(80 * 2**30 * 0.9) // 131_072
    assert capacity.max_context_tokens(load_model("mistral-7b-v0.1"), 1, 80 * 2**30, weights_bytes=0) is None


@pytest.mark.parametrize("low, high", [(0, 1), (5, 6)])
def test_an_empty_interval_returns_the_bound_without_calling(low, high):
    def never(j):
        raise AssertionError("called")
    assert first_true(never, low, high) == high and last_true(never, low, high) == low
