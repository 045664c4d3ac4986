"""Lesson 04 support: windows arithmetic, slots read from real caches, measured growth, the views.
"""

import matplotlib.pyplot as plt
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, strategies as st
from matplotlib.collections import QuadMesh

from kvsim.cache import ChunkedKVCache, KVCache, RotatingKVCache
from kvsim.calc import memory, window_bytes as windows
from kvsim.calc.config import ModelSpec
from kvsim.calc.counterfactual import full_attention
from kvsim.calc.registry import load_model
from kvsim.calc.units import InputError
from kvsim.lessons.l04_windows.data import attention_mask, kind_shares, ring_contents, ring_slot
from kvsim.lessons.l04_windows.measure import (
    EMPTY,
    decode_positions,
    position_tensor,
    ring_history,
    ring_order_check,
    slot_positions,
    write_positions,
)
from kvsim.lessons.l04_windows.data import attended_label, ordinal, position_ordinal, ring_link_numbers
from kvsim.lessons.l04_windows.plots import plot_kind_shares, plot_masks, plot_ring_link
from kvsim.lessons.l04_windows.views import (
    chunk_view,
    draw_chunks,
    draw_masks,
    draw_ring_buffer,
    draw_window_bytes,
    ring_buffer_view,
    window_bytes_view,
    windowed_models,
)
from kvsim.measure.growth import layer_cache, measure_nbytes
from kvsim.model import toy_spec


def test_mistral_saves_eight_times_at_32k():
    s = windows.window_savings(load_model("mistral-7b-v0.1"), 32_768)
    assert s["ratio"] == 8.0 and s["real_bytes"] == 512 * 2**20


def test_gemma3_split_by_kind_sums_to_kv_bytes():
    gemma = load_model("gemma-3-27b")
    t = np.array([0, 1, 1024, 1025, 131_072])
    split = windows.bytes_by_kind(gemma, t)
    assert set(split) == {"sliding", "full"}
    assert (split["sliding"] + split["full"] == memory.kv_bytes(gemma, t)).all()
    assert windows.bytes_by_kind(gemma, 131_072)["sliding"] == 52 * 1024 * 2 * 16 * 128 * 2


def test_patterns_read_from_configs():
    assert windows.pattern_period(load_model("gemma-3-27b")) == "SSSSSF"
    assert windows.pattern_period(load_model("gpt-oss-20b")) == "SF"
    assert windows.pattern_period(load_model("llama-4-scout")) == "CCCN"
    assert windows.layer_pattern(load_model("llama-3-8b")) == "F" * 32
    assert windows.largest_window_tokens(load_model("llama-3-8b")) is None
    assert windows.largest_window_tokens(load_model("llama-4-scout")) == 8192


def test_window_savings_is_one_below_the_window():
    gemma = load_model("gemma-3-27b")
    assert windows.window_savings(gemma, 1024)["ratio"] == 1.0
    assert windows.window_savings(gemma, 2048)["ratio"] > 1.0


def test_position_tensor_rejects_bad_input():
    with pytest.raises(ValueError, match="start"):
        position_tensor(-1)
    with pytest.raises(ValueError, match="2\\*\\*24"):
        position_tensor(2**24)


def test_slots_of_an_empty_cache_are_empty():
    assert len(slot_positions(RotatingKVCache(4))) == 0


@given(window=st.integers(1, 10), keep=st.integers(0, 3), steps=st.integers(1, 40))
def test_ring_slots_follow_the_rotating_layout(window, keep, steps):
    cache = RotatingKVCache(window + keep, keep=keep)
    h = decode_positions(cache, steps)
    last = h.slots[-1]
    for t in range(steps):  # every held position sits where the cache's contract puts it
        held = t < keep or t > steps - 1 - window
        if held:
            slot = t if t < keep else keep + (t - keep) % window
            assert last[slot] == t
    # the query of the last token saw the sinks and the last `window` positions
    p = steps - 1
    want = list(range(min(keep, steps))) + list(range(max(keep, p - window + 1), p + 1))
    assert list(h.visible[-1]) == want
    assert h.visible_mask()[-1].sum() == len(want)
    assert h.capacity[-1] == window + keep == cache.capacity  # step 256 > max_size: one allocation


@given(chunk=st.integers(1, 9), steps=st.integers(1, 30))
def test_chunk_slots_restart_at_each_boundary(chunk, steps):
    h = decode_positions(ChunkedKVCache(chunk), steps)
    p = steps - 1
    assert list(h.visible[-1]) == list(range(p - p % chunk, p + 1))
    assert h.written[-1] == p % chunk
    assert h.slots[-1][p % chunk] == p


def test_written_slot_and_nbytes_per_step():
    h = decode_positions(KVCache(step=4), 6)
    assert list(h.written) == [0, 1, 2, 3, 4, 5]
    assert list(h.capacity) == [4, 4, 4, 4, 8, 8]
    assert list(h.nbytes) == [2 * c * 4 for c in h.capacity]  # K and V, 1 head x 1 dim, float32
    assert h.slots[3, 4] == EMPTY


def test_write_positions_is_a_prefill():
    cache = RotatingKVCache(4)
    assert list(write_positions(cache, 6)) == list(range(6))  # a prefill sees all its tokens
    assert sorted(slot_positions(cache)) == [2, 3, 4, 5]
    assert list(decode_positions(cache, 1).visible[0]) == [3, 4, 5, 6]


def test_measured_nbytes_equal_the_allocated_formula():
    spec = toy_spec("sliding_global", sliding_window=40)  # sliding + full layer, 2 KV heads of 32
    t = np.array([0, 1, 39, 40, 41, 300, 600])
    for i, layer in enumerate(spec.layers):
        got = measure_nbytes(spec, i, t, dtype="bf16", chunk_tokens=64, step=32)
        assert (got == memory.layer_kv_bytes(layer, t, "bf16", view="allocated", step=32)).all()
    assert measure_nbytes(spec, 0, [600], step=32)[0] == 2 * 2 * 40 * 32 * 2


def test_measure_nbytes_of_a_chunked_and_a_recurrent_layer():
    chunked = toy_spec("chunked")  # chunk 8
    t = [5, 8, 9, 20]
    assert (measure_nbytes(chunked, 0, t, dtype="fp16", step=4)
            == memory.layer_kv_bytes(chunked.layers[0], t, "fp16", view="allocated", step=4)).all()
    mamba = toy_spec("mamba")
    got = measure_nbytes(mamba, 0, [0, 100])
    assert (got == memory.state_bytes(mamba.layers[0], "bf16")).all()


def test_measure_nbytes_rejects_bad_input():
    spec = toy_spec("gqa")
    with pytest.raises(ValueError, match="ascending"):
        measure_nbytes(spec, 0, [4, 2])
    with pytest.raises(ValueError, match="layer_index"):
        layer_cache(spec, 5)
    with pytest.raises(ValueError, match="dtype"):
        measure_nbytes(spec, 0, [1], dtype="q4")


def test_layer_cache_follows_make_caches():
    mistral = load_model("mistral-7b-v0.1")
    assert isinstance(layer_cache(mistral, 0), RotatingKVCache)
    assert isinstance(layer_cache(full_attention(mistral), 0), KVCache)
    assert isinstance(layer_cache(load_model("llama-4-scout"), 0), ChunkedKVCache)
    assert isinstance(load_model("llama-4-scout"), ModelSpec)


def test_ring_picture_is_read_from_the_cache():
    fig, ax = plt.subplots()
    draw_ring_buffer(ax, step=9, window=4)
    img = ax.collections[0].get_array()  # the coloured layer: positions the step's query attends to
    # last row: slots hold 8, 5, 6, 7 and all four are visible (coloured)
    assert list(np.asarray(img[-1])) == [8, 5, 6, 7]
    assert "positions 5–8" in ax.get_title()


def test_chunk_picture_greys_out_the_old_chunk():
    fig, ax = plt.subplots()
    draw_chunks(ax, step=6, chunk_size=4)
    last = ax.collections[0].get_array()[-1]
    assert list(last[:2]) == [4, 5] and last.mask[2:].all()


def test_window_bytes_draws_total_and_reference():
    fig, ax = plt.subplots()
    draw_window_bytes(ax, model="gpt-oss-20b", tokens=4096)
    total, ignored = ax.get_lines()[0].get_ydata(), ax.get_lines()[1].get_ydata()
    assert ignored[-1] > total[-1] > 0
    assert "mistral-7b-v0.1" in windowed_models() and "llama-3-8b" not in windowed_models()


@pytest.mark.parametrize("factory", [ring_buffer_view, chunk_view, window_bytes_view])
def test_views_do_not_stay_registered_with_pyplot(factory):
    before = set(plt.get_fignums())
    view = factory()
    assert set(plt.get_fignums()) == before  # a later plt.show() will not repeat it
    first = view.lines()
    control = next(iter(view.controls.values()))
    options = getattr(control, "options", None)
    control.value = options[-1] if options else control.max   # a real change: the view redraws
    assert len(view.redraw_seconds) == 2 and not all(np.array_equal(a, b) for a, b in zip(first, view.lines()))
    assert set(plt.get_fignums()) == before


def test_mx_dtype_of_positions_is_exact_for_bf16_small_positions():
    assert (position_tensor(0, 200, mx.bfloat16).astype(mx.float32)[0, 0, :, 0]
            == mx.arange(1, 201).astype(mx.float32)).all().item()


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


def test_kind_shares_of_gemma_3():
    s = kind_shares(load_model("gemma-3-27b"), 131_072)
    assert s["sliding"]["layers"] == 52 and s["full"]["layers"] == 10
    assert sum(r["bytes %"] for r in s.values()) == pytest.approx(100)
    assert s["sliding"]["bytes"] == 52 * 1024 * 2 * 16 * 128 * 2 and s["sliding"]["bytes %"] < 5


def test_ring_history_default_view_is_out_of_order():
    _, h = ring_history(6, 2, 17)
    assert h.slots[-1].tolist() != sorted(h.slots[-1].tolist())


@pytest.mark.parametrize("sinks", [0, 2])
def test_storage_order_ring_gives_the_same_attention(sinks):
    r = ring_order_check(steps=20, window=5, sinks=sinks)
    assert r.reordered_steps() > 0                      # the stored order really differed
    assert r.max_abs_difference.max() < 1e-5
    assert all(sorted(a) == sorted(b) for a, b in zip(r.ordered_positions, r.stored_positions))




def _meshes(ax):
    return [c for c in ax.collections if isinstance(c, QuadMesh) and c.get_visible()]


def test_masks_and_ring_link(ax):
    plot_masks(ax, {"full": attention_mask(6), "w": attention_mask(6, "sliding", window=2)}, query=4)
    assert len(_meshes(ax)) == 2 and _meshes(ax)[1].get_array()[4].tolist().count(1.0) == 2
    ax.clear()
    row = attention_mask(9, "sliding", window=3, sinks=1)[8]
    plot_ring_link(ax, 8, row, np.array([0, 7, 8, 6]), sinks=1)
    assert len(ax.get_lines()) == 2 * int(row.sum())  # each held key joined to its slot and its place


def test_kind_shares_bars(ax):
    plot_kind_shares(ax, {"sliding": {"layers %": 80.0, "bytes %": 2.0}, "full": {"layers %": 20.0, "bytes %": 98.0}})
    widths = sorted(round(p.get_width(), 6) for c in ax.containers for p in c)
    assert widths == [2.0, 20.0, 80.0, 98.0]


def test_ordinals_and_mask_title(ax):
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
    draw_masks(ax, token=0)
    assert "token 0 (the 1st token" in ax.get_title()


def test_window_bytes_numbers_and_the_view_title():
    from kvsim.lessons.l04_windows.data import window_bytes_numbers
    gemma = load_model("gemma-3-27b")
    d = window_bytes_numbers("gemma-3-27b", 131_072, "bf16")
    s = windows.window_savings(gemma, 131_072)
    assert d["real_bytes"] == s["real_bytes"] == memory.kv_bytes(gemma, 131_072) and d["ratio"] == s["ratio"]
    assert d["pattern"] == "SSSSSF" and d["ignored"][-1] == pytest.approx(d["ratio"] * d["real_bytes"])
    assert sum(d["by_kind"].values())[-1] == d["real_bytes"]
    fig, ax = plt.subplots()
    draw_window_bytes(ax, "gemma-3-27b", 131_072, "bf16")
    assert ax.get_title() == (f"gemma-3-27b: layers SSSSSF repeated, bf16\n{d['ratio']:.1f}× smaller than a "
                              "window-ignoring calculator at 131,072 tokens")
    assert d["ratio"] == pytest.approx(6.0, abs=0.05)
    # the sliding layers' line is drawn inside the Axes on a log scale (a stacked band of 416 MiB under 10 GiB was
    # invisible), and its label carries their bytes at the end
    sliding = next(line for line in ax.get_lines() if line.get_label().startswith("sliding layers"))
    assert ax.get_yscale() == "log" and sliding.get_ydata()[-1] == d["by_kind"]["sliding"][-1] / 2**20
    assert ax.get_ylim()[0] < sliding.get_ydata()[-1] < ax.get_ylim()[1]
    assert "416 MiB" in sliding.get_label()
    plt.close(fig)


def test_slot_history_padding_and_title_are_the_data_numbers():
    from kvsim.lessons.l04_windows.data import padded_history_rows, position_span
    from kvsim.lessons.l04_windows.measure import EMPTY, ring_history
    from kvsim.lessons.l04_windows.views import ROWS
    assert position_span([0, 1, 2, 3, 7, 9, 10]) == "0–3, 7, 9–10" and position_span([4]) == "4"
    positions = np.arange(3)
    slots = np.array([[0, EMPTY], [0, 1], [2, 1]])
    visible = slots != EMPTY
    pos, s, v, w = padded_history_rows(positions, slots, visible, np.array([0, 1, 0]), step=3, rows=5, empty=EMPTY)
    assert pos == [None, None, 0, 1, 2] and s[:2].tolist() == [[EMPTY, EMPTY]] * 2 and s[2:].tolist() == slots.tolist()
    assert not v[:2].any() and w.tolist() == [-1, -1, 0, 1, 0]
    # the view's picture and title are these numbers for a real ring
    name, h = ring_history(4, 0, 9)
    pos, s, v, w = padded_history_rows(h.positions, h.slots, h.visible_mask(), h.written, 9, ROWS, empty=EMPTY)
    assert len(pos) == ROWS and pos[:ROWS - 9] == [None] * (ROWS - 9)
    fig, ax = plt.subplots()
    draw_ring_buffer(ax, step=9, window=4)
    assert np.asarray(ax.collections[0].get_array())[-1].tolist() == s[-1].tolist()
    vis = list(h.visible[-1])
    assert f"positions {position_span(vis)} ({len(vis)} keys)" in ax.get_title()
    # window 4 after token 8: the query attends to positions 5, 6, 7, 8
    assert ax.get_title().endswith("its query attended to positions 5–8 (4 keys)")
    plt.close(fig)


def test_exercise_04_4_prediction_is_what_the_real_ring_holds():
    from kvsim.lessons.exercises import EXERCISES
    from kvsim.lessons.l04_windows.measure import ring_prompt_nbytes

    m = ring_prompt_nbytes(4096, 5000)
    mistral = load_model("mistral-7b-v0.1")
    assert m["nbytes"] == EXERCISES["04.4"].solve().value == memory.layer_kv_bytes(mistral.layers[0], 5000, "bf16",
                                                                                     view="allocated")
    assert m["offset"] == 5000 and m["row_bytes"] == memory.layer_token_bytes(mistral.layers[0])


def test_view_labels_are_data_labels_worked_by_hand():
    from kvsim.lessons.l04_windows.views import mask_view, ring_link_view
    # position t is the (t + 1)-th token: 0 -> 1st, 10 -> 11th, 20 -> 21st
    assert [position_ordinal(t) for t in (0, 10, 20)] == ["1st", "11th", "21st"]
    assert attended_label([4, 5, 6, 7, 8, 9]) == "4–9 (6 keys)"
    assert attended_label([3]) == "3 (1 key)" and attended_label([0, 1, 5]) == "0–1, 5 (3 keys)"
    # token 16, window 6, 2 sinks: keys 0, 1 (sinks) and 11..16 (the window) = 8 keys, 17 tokens written
    d = ring_link_numbers(16, 6, 2)
    assert d["tokens_written"] == 17 and d["keys"] == 8
    assert np.flatnonzero(d["row"]).tolist() == [0, 1, 11, 12, 13, 14, 15, 16]
    view = ring_link_view(16, 6, 2)
    assert ": 8 keys; RoPE rotated" in view.ax.get_title() and "after token 16" in view.ax.get_title()
    view.controls["sinks"].value = 0  # window 6 alone: keys 11..16 = 6 keys
    assert ": 6 keys; RoPE rotated" in view.ax.get_title()
    plt.close(view.figure)
    view = mask_view(token=10)
    assert view.ax.get_title() == "token 10 (the 11th token of the sequence) attends to the blue keys of its row"
    assert view.controls["token"].max == 19  # 20 positions shown, 0-based
    plt.close(view.figure)
