"""Pure helpers behind lessons 01, 03, 04, 05 and 09's pictures, checked against formulas and real caches."""

import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import ChunkedKVCache, KVCache, RotatingKVCache
from kvsim.calc import hybrid, memory
from kvsim.calc.draft_round import prompt_lookup_draft, round_stages
from kvsim.calc.head_sharing import area_sides, kv_head_of
from kvsim.calc.kind_share import kind_shares
from kvsim.calc.masks import attention_mask, ring_contents, ring_slot
from kvsim.calc.registry import load_model
from kvsim.calc.short_context import hybrid_crossover_tokens, short_context_curves
from kvsim.calc.step_grid import (
    FUTURE,
    NEW,
    PRODUCED,
    READ,
    RECOMPUTED,
    fed_per_step,
    step_grid,
)
from kvsim.calc.tokens_fed import tokens_fed
from kvsim.calc.units import InputError
from kvsim.measure.ring_slots import decode_positions, ring_history


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12))
def test_step_grid_counts_equal_tokens_fed(p, a):
    for cached in (False, True):
        grid = step_grid(p, a, cached)
        assert fed_per_step(grid).sum() == tokens_fed(p, a, cached)
        assert [int(np.flatnonzero(row == PRODUCED)[0]) for row in grid] == [p + k - 1 for k in range(1, a + 1)]
    assert (step_grid(p, a, True) != RECOMPUTED).all() and (step_grid(p, a, False) != READ).all()


def test_step_grid_rows():
    assert step_grid(2, 3, cached=True).tolist() == [[NEW, NEW, PRODUCED, FUTURE, FUTURE],
                                                     [READ, READ, NEW, PRODUCED, FUTURE],
                                                     [READ, READ, READ, NEW, PRODUCED]]
    with pytest.raises(InputError, match="prompt_tokens"):
        step_grid(0, 3, True)


@pytest.mark.parametrize("window,sinks", [(4, 0), (4, 2), (1, 0), (6, 1)])
def test_sliding_mask_row_is_what_a_real_ring_returns(window, sinks):
    h = decode_positions(RotatingKVCache(window + sinks, keep=sinks), 20)
    mask = attention_mask(20, "sliding", window=window, sinks=sinks)
    for t in range(20):
        assert sorted(h.visible[t]) == list(np.flatnonzero(mask[t]))
        assert ring_contents(t, window, sinks).tolist() == h.slots[t].tolist()
        assert h.written[t] == ring_slot(t, window, sinks)


def test_chunked_and_full_masks_are_what_real_caches_return():
    h = decode_positions(ChunkedKVCache(5), 17)
    chunked, full = attention_mask(17, "chunked", chunk=5), attention_mask(17, "full")
    hf = decode_positions(KVCache(), 17)
    for t in range(17):
        assert sorted(h.visible[t]) == list(np.flatnonzero(chunked[t]))
        assert sorted(hf.visible[t]) == list(np.flatnonzero(full[t]))


def test_mask_bad_input():
    with pytest.raises(InputError, match="kind"):
        attention_mask(4, "local")
    with pytest.raises(InputError, match="window"):
        attention_mask(4, "sliding")
    assert ring_slot(20, 4, keep=2) == 4 and ring_slot(1, 4, keep=2) == 1 and ring_slot(9, 4, 0, rewind_tokens=2) == 3


def test_kv_head_of_groups_consecutive_query_heads():
    assert kv_head_of(8, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert kv_head_of(4, 4).tolist() == [0, 1, 2, 3] and kv_head_of(4, 1).tolist() == [0] * 4
    with pytest.raises(InputError, match="multiple"):
        kv_head_of(6, 4)


def test_area_sides_make_areas_proportional():
    sides = area_sides({"a": 16, "b": 1, "c": 4}, largest_side=8)
    assert sides["a"] == 8 and sides["a"] ** 2 / sides["b"] ** 2 == pytest.approx(16)
    assert sides["c"] ** 2 / sides["b"] ** 2 == pytest.approx(4)


def test_kind_shares_of_gemma_3():
    s = kind_shares(load_model("gemma-3-27b"), 131_072)
    assert s["sliding"]["layers"] == 52 and s["full"]["layers"] == 10
    assert sum(r["bytes %"] for r in s.values()) == pytest.approx(100)
    assert s["sliding"]["bytes"] == 52 * 1024 * 2 * 16 * 128 * 2 and s["sliding"]["bytes %"] < 5


def test_hybrid_crossover_is_where_the_all_attention_twin_catches_up():
    jamba = load_model("jamba-v0.1")
    t = hybrid_crossover_tokens(jamba)
    curves = short_context_curves(jamba, [t - 1, t])
    assert curves["hybrid"][0] > curves["all-attention"][0] and curves["hybrid"][1] <= curves["all-attention"][1]
    per_token_saved = memory.bytes_per_token(hybrid.all_attention(jamba)) - memory.bytes_per_token(jamba)
    assert t == math.ceil(memory.fixed_state_bytes(jamba) / per_token_saved)
    with pytest.raises(InputError, match="no recurrent layer"):
        hybrid_crossover_tokens(load_model("llama-3-8b"))


def test_round_stages_match_a_real_cache():
    for k, n in ((4, 2), (1, 0), (5, 5)):
        r = round_stages(7, k, n)
        cache = KVCache()
        kv = mx.zeros((1, 1, 7, 2))
        cache.update_and_fetch(kv, kv)
        cache.update_and_fetch(mx.zeros((1, 1, k + 1, 2)), mx.zeros((1, 1, k + 1, 2)))
        assert cache.offset == r.offset_after_verify
        cache.trim(r.trimmed)
        assert cache.offset == r.offset_after and r.emitted == n + 1
    with pytest.raises(InputError, match="accepted"):
        round_stages(7, 2, 3)


def test_prompt_lookup_draft():
    words = "the cat sat on the mat . the cat".split()
    assert prompt_lookup_draft(words, 4) == ["sat", "on", "the", "mat"]
    assert prompt_lookup_draft([1, 2, 3, 1, 2, 4, 1, 2], 2) == [4, 1]  # the latest earlier occurrence
    assert prompt_lookup_draft([1, 2, 3, 1, 2], 9) == [3, 1, 2]         # fewer at the end of the context
    assert prompt_lookup_draft([1, 2, 3, 4], 3) == [] and prompt_lookup_draft([1], 3) == []


def test_ring_history_default_view_is_out_of_order():
    _, h = ring_history(6, 2, 17)
    assert h.slots[-1].tolist() != sorted(h.slots[-1].tolist())


def test_short_context_layer_crossover_matches_the_model_crossover():
    from kvsim.calc.short_context import layer_crossover
    for name in ("jamba-v0.1", "qwen3-next-80b-a3b"):
        spec = load_model(name)
        c = layer_crossover(spec)
        assert c["tokens"] == hybrid_crossover_tokens(spec) == math.ceil(c["state_bytes"] / c["kv_token_bytes"])
    with pytest.raises(InputError, match="recurrent and an attention layer"):
        layer_crossover(load_model("mamba2-2.7b"))
