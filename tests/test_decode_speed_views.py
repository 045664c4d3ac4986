"""Lesson 08 helpers: caches filled without a prefill, measured step times, the bandwidth floor, stored vs read."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from kvsim.cache import RecurrentStateCache
from kvsim.calc import memory
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import model_names
from kvsim.calc.speed_floor import speed_floor, stored_vs_read
from kvsim.calc.weights import param_count
from kvsim.measure.step_time import fill_caches, weights_read_bytes
from kvsim.widgets.decode_speed import (
    KV_DTYPES,
    draw_decode_speed_limit,
    draw_stored_vs_read,
)


@pytest.mark.parametrize("kind", ["gqa", "sliding", "mla", "jamba"])
def test_fill_then_step_holds_what_the_calculator_says(toys, kind):
    model = toys[kind]
    caches = model.make_caches()
    fill_caches(model, caches, 20)
    assert all(c.offset == 20 for c in caches)
    held = sum(c.used_bytes for c in caches if not isinstance(c, RecurrentStateCache))
    assert held == memory.kv_bytes(model.spec, 20, kv_dtype="fp32")
    import mlx.core as mx
    logits = model(mx.array([[1]]), caches)                # a decode step runs on the filled caches
    assert logits.shape == (1, 1, model.spec.vocab_size) and all(c.offset == 21 for c in caches)


def test_fill_rejects_negative_tokens(toys):
    with pytest.raises(ValueError, match="tokens"):
        fill_caches(toys["gqa"], toys["gqa"].make_caches(), -1)


def test_weights_read_skip_the_embedding_table_but_one_row(toys):
    m = toys["gqa"]
    hidden, vocab = m.spec.hidden_size, m.spec.vocab_size
    assert weights_read_bytes(m) == m.weight_bytes - (vocab - 1) * hidden * 4


def test_stored_vs_read_dense_reads_what_it_stores():
    t, stored, read = stored_vs_read("deepseek-v3", 131_072, points=5)
    dense = "dense / FlashAttention"
    assert np.array_equal(stored[dense], read[dense])
    assert np.array_equal(stored["NSA"], stored[dense]) and read["NSA"][-1] < read[dense][-1]
    assert stored["DSA"][-1] > stored[dense][-1] and read["DSA"][-1] < read[dense][-1]
    fig, ax = plt.subplots()
    draw_stored_vs_read(ax)
    lines = ax.get_lines()                                 # curves that coincide are drawn once
    assert len(lines) == 4 == len(ax.get_legend().texts)
    assert all(not np.array_equal(a.get_ydata(), b.get_ydata()) for i, a in enumerate(lines) for b in lines[i + 1:])
    assert lines[0].get_label() == f"stored: {dense}, NSA; read per step: {dense}"
    assert [ln.get_linestyle() for ln in lines] == ["-", "-", "--", "--"]
    plt.close(fig)


def test_speed_floor_is_bytes_over_bandwidth():
    acc = get_accelerator("H100 80GB")
    t, w_s, step_s = speed_floor("llama-3.1-8b", "H100 80GB", batch=1, tokens=8192, points=3)
    from kvsim.calc.registry import load_model
    spec = load_model("llama-3.1-8b")
    count = param_count(spec)                              # read: all but the input table, plus one row
    w = (count.active - count.embedding + spec.hidden_size) * 2
    assert w / 1e9 == pytest.approx(15.01, abs=0.005)      # not the 16.06 GB of all active parameters
    assert w_s == pytest.approx(w / acc.memory_bandwidth_bytes_per_s)
    assert step_s[-1] == pytest.approx((w + 2**30) / acc.memory_bandwidth_bytes_per_s)   # 8K tokens = 1 GiB
    _, _, batched = speed_floor("llama-3.1-8b", "H100 80GB", batch=4, tokens=8192, points=3)
    assert batched[-1] - w_s == pytest.approx(4 * (step_s[-1] - w_s))


@pytest.mark.parametrize("model", model_names())
def test_speed_limit_draws_for_every_model_and_dtype(model):
    fig, ax = plt.subplots()
    for dtype in KV_DTYPES:
        draw_decode_speed_limit(ax, model=model, kv_dtype=dtype, tokens=4096)
        assert ax.get_lines()
    plt.close(fig)


def test_speed_limit_says_when_the_batch_does_not_fit():
    fig, ax = plt.subplots()
    draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, tokens=131_072)
    assert "does not fit" not in ax.get_title()
    draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=16, tokens=131_072)
    assert ax.get_title().endswith("does not fit)")        # 16 GB weights + 16 x 16 GiB of KV > 80 GiB
    plt.close(fig)
