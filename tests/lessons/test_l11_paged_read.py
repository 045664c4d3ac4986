"""Lesson 11 helpers: bytes per read path, sparse pages, the cascade group and its gate, split-K work, the H200 runs
(data, against formulas written out here); the live runs (measure) against dense attention; sparse page subsets
equal to dense over the same keys for ANY subset, and partials merged in any grouping (hypothesis); the plots."""

import json

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache.paged import PagedKVPool
from kvsim.cache.partials import attention_partial, merge_partials, split_k_attention
from kvsim.cache.sdpa import reference_sdpa
from kvsim.calc.units import InputError
from kvsim.lessons.exercises import verdict_for
from kvsim.lessons.l11_paged_read import data, measure
from kvsim.lessons.l11_paged_read.plots import plot_copy_vs_context, plot_gpu_cascade, plot_sparse

LLAMA_LAYERS, LLAMA_TOKEN_BYTES = 32, 8 * (128 + 128) * 2      # Llama 3 8B per layer and token, bf16


def test_copy_rows_gather_copies_the_whole_cache_and_reads_it_twice():
    rows = {(r["context"], r["path"]): r for r in data.copy_rows()}
    for T in data.CONTEXTS:
        cache_bytes = LLAMA_LAYERS * -(-T // 16) * 16 * LLAMA_TOKEN_BYTES
        assert rows[T, "gather"]["copied_bytes"] == cache_bytes and rows[T, "gather"]["read_bytes"] == 2 * cache_bytes
        assert rows[T, "block_table"] == {"context": T, "path": "block_table", "pages": T // 16,
                                          "read_bytes": cache_bytes, "copied_bytes": 0}
    assert data.copy_rows((1000,), block_size=64)[0]["copied_bytes"] == LLAMA_LAYERS * 16 * 64 * LLAMA_TOKEN_BYTES
    assert data.copy_rows((1024,), kv_dtype="fp8")[0]["copied_bytes"] * 2 == rows[1024, "gather"]["copied_bytes"]


def test_sparse_rows_read_in_proportion_to_the_pages_kept():
    rows = data.sparse_rows(32768)
    assert [r["kept_pages"] for r in rows] == [32, 64, 128, 256, 512, 1024, 2048]
    assert all(r["read_bytes"] == LLAMA_LAYERS * r["kept_pages"] * 16 * LLAMA_TOKEN_BYTES for r in rows)
    assert rows[-1]["read_bytes"] == rows[-1]["dense_bytes"]
    assert data.sparse_rows(100, (1 / 64,))[0]["kept_pages"] == 1           # at least one page
    with pytest.raises(InputError, match="fractions must be in \\(0, 1\\]"):
        data.sparse_rows(1024, (0,))


def test_lesson07_group_bytes_and_gate():
    s = data.lesson07_step(1)
    P, S, B = 496, 500 + 60 + 1 - 496, 100
    assert (s["prefix_tokens"], s["suffix_tokens"], s["shared_pages"]) == (P, S, 31)
    assert s["dense_bytes"] == LLAMA_LAYERS * B * (P + S) * LLAMA_TOKEN_BYTES
    assert s["cascade_kv_bytes"] == LLAMA_LAYERS * (P + B * S) * LLAMA_TOKEN_BYTES
    assert s["partial_bytes"] == LLAMA_LAYERS * 2 * B * 32 * (128 + 1) * 4
    assert s["cascade_bytes"] == s["cascade_kv_bytes"] + s["partial_bytes"] and s["gate_open"]
    assert data.lesson07_step(2)["suffix_tokens"] == S + 1
    one = data.cascade_group(1, 31, 65)
    assert not one["gate_open"] and one["break_even_pages"] is None and one["cascade_bytes"] > one["dense_bytes"]
    # at the break-even page cascade first reads fewer bytes than dense, one page earlier it does not
    for B in (2, 3, 8, 100):
        rows = data.cascade_rows(B, 65, 10)
        even = rows[0]["break_even_pages"]
        assert rows[even]["cascade_bytes"] < rows[even]["dense_bytes"]
        assert rows[even - 1]["cascade_bytes"] >= rows[even - 1]["dense_bytes"]
    assert [r["gate_open"] for r in data.cascade_rows(2, 65, 3)] == [False, False, True, True]
    assert data.whole_pages(500, 16) == 31 and data.whole_pages(15, 16) == 0


def test_split_k_rows_same_bytes_more_blocks():
    rows = data.split_k_rows(8192)
    assert [r["work_blocks"] for r in rows] == [32 * S for S in data.SPLITS]
    assert {r["kv_bytes"] for r in rows} == {LLAMA_LAYERS * 8192 * LLAMA_TOKEN_BYTES}
    assert [r["sm_share"] for r in rows][:3] == [32 / 132, 64 / 132, 128 / 132] and rows[3]["sm_share"] == 1.0
    assert rows[0]["partial_bytes"] == LLAMA_LAYERS * 32 * 129 * 4
    assert data.splits_to_fill(1) == 5 and data.splits_to_fill(8) == 1
    assert data.split_k_rows(8192, batch=4)[0]["work_blocks"] == 128
    with pytest.raises(InputError, match="splits must be in \\[1, context = 8\\]"):
        data.split_k_rows(8, splits=(9,))


def test_geometry_refuses_models_with_windows_or_no_attention():
    assert data.geometry("llama-3-70b")["n_q"] == 64
    for model in ("gemma-3-27b", "mamba2-2.7b", "deepseek-v3"):
        with pytest.raises(InputError, match="model must have only full-attention layers"):
            data.geometry(model)


def test_gpu_runs_are_read_as_written(tmp_path):
    runs = data.load_gpu_runs()
    assert [r["file"] for r in runs] == ["paged_read_gpu.json", "paged_read_gpu_repeat.json"]
    rows = data.gpu_rows(runs)
    raw = json.loads((data._results_dir() / "paged_read_gpu.json").read_text())["rows"]
    mine = [r for r in rows if r["run"] == "paged_read_gpu.json"]
    assert [(r["sequences"], r["case"], r["step_us"], r["read_bytes"]) for r in mine] == [
        (r["sequences"], r["case"], r["step_us"], r["read_bytes"]) for r in raw]
    for r in mine:
        fused = next(x for x in raw if x["sequences"] == r["sequences"] and x["case"] == "dense (mx.fast sdpa)")
        assert r["over_fused"] == r["step_us"] / fused["step_us"]
        assert r["read_GB_per_s"] == pytest.approx(r["read_bytes"] / (r["step_us"] * 1e-6) / 1e9)
    with pytest.raises(FileNotFoundError, match="paged_read_gpu"):
        data.load_gpu_runs(tmp_path)


def test_live_read_paths_equal_dense_and_the_copy_is_measured():
    rows = {r["path"]: r for r in measure.read_path_rows(context=200)}
    assert all(r["max |path - dense|"] < 1e-5 for r in rows.values())
    g = rows["gather"]
    assert g["copy measured (nbytes)"] == g["copied_bytes"] == 13 * 16 * 2 * 32 * 4 == g["read_bytes"] // 2
    assert rows["block_table"]["copied_bytes"] == rows["online"]["copied_bytes"] == 0
    cache, _, _ = measure.interleaved_cache(200)
    table = measure.block_table_of(cache)
    assert table != list(range(table[0], table[0] + len(table)))          # interleaved: not contiguous


def test_live_sparse_cascade_and_split_k():
    sparse = measure.sparse_rows(context=200, strides=(1, 3))
    assert [r["kept pages"] for r in sparse] == [13, 5]
    assert all(r["max |sparse - dense over kept|"] < 1e-5 for r in sparse)
    group = measure.cascade_run(requests=6, prompt_tokens=50, own_tokens=7, block_size=8)
    assert group["shared pages"] == 6 and group["context"] == 58 and group["max |cascade - each row alone|"] < 1e-5
    assert group["blocks held"] == 6 + 6 * (8 - 6)                         # 6 shared + each row's own 2 blocks
    rows = measure.split_k_rows(context=300, splits=(1, 7), cut_sets=2)
    assert len(rows) == 4 and all(r["max |split-K - dense|"] < 1e-5 for r in rows)


# ---------------------------------------------------------------- properties (hypothesis)

@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=5), data_=st.data(),
       block_size=st.sampled_from([2, 4, 8]),
       path=st.sampled_from(["block_table", "online", "gather"]), seed=st.integers(0, 2**16))
def test_any_page_subset_equals_dense_over_those_keys(sizes, data_, block_size, path, seed):
    """Sparse page indirection: ANY non-empty set of held pages, read through the block table, equals dense
    attention over exactly the keys of those pages (fp32 within 1e-5), and reads kept · block bytes."""
    pool = PagedKVPool(1, 2, 4, 3, block_size=block_size, num_blocks=64, dtype=mx.float32, enable_prefix_caching=False)
    for s in ("n", "s"):
        pool.add_sequence(s)
    cache, other = pool.caches("s")[0], pool.caches("n")[0]
    key = mx.random.key(seed)
    ks, vs = [], []
    for S in sizes:
        key, a, b, c = mx.random.split(key, 4)
        other.update_and_fetch(mx.random.normal((1, 2, 2, 4), key=c), mx.random.normal((1, 2, 2, 3), key=c))
        ks.append(mx.random.normal((1, 2, S, 4), key=a))
        vs.append(mx.random.normal((1, 2, S, 3), key=b))
        cache.update_and_fetch(ks[-1], vs[-1])
    T = cache.offset
    pages = -(-T // block_size)
    kept = sorted(data_.draw(st.sets(st.integers(0, pages - 1), min_size=1)))
    q = mx.random.normal((1, 4, 1, 4), key=mx.random.key(seed + 1))
    idx = mx.array([t for p in kept for t in range(p * block_size, min((p + 1) * block_size, T))])
    want = reference_sdpa(q, mx.concatenate(ks, axis=2)[:, :, idx], mx.concatenate(vs, axis=2)[:, :, idx])
    assert mx.allclose(cache.read(q, path=path, pages=kept), want, atol=1e-5)
    assert cache.read_bytes(pages=kept)["read_bytes"] == len(kept) * pool.layer_block_bytes


@settings(max_examples=30, deadline=None)
@given(T=st.integers(2, 40), data_=st.data(), seed=st.integers(0, 2**16))
def test_partials_merge_in_any_grouping(T, data_, seed):
    """The log-sum-exp merge is associative: chunks merged one at a time (online), all at once (split-K) or
    as (first part, rest) (cascade's prefix-then-suffix) give the same attention as dense (fp32, 1e-5)."""
    cuts = sorted(data_.draw(st.sets(st.integers(1, T - 1), min_size=1, max_size=min(6, T - 1))))
    k1, k2, k3 = mx.random.split(mx.random.key(seed), 3)
    q, k, v = (mx.random.normal((1, 4, 2, 8), key=k1), mx.random.normal((1, 2, T, 8), key=k2),
               mx.random.normal((1, 2, T, 5), key=k3))
    dense = reference_sdpa(q, k, v)
    edges = [0, *cuts, T]
    parts = [attention_partial(q, k[:, :, a:b], v[:, :, a:b]) for a, b in zip(edges, edges[1:])]
    running = parts[0]
    for p in parts[1:]:
        running = merge_partials([running, p])                               # online, one chunk at a time
    prefix_then_rest = merge_partials([parts[0], merge_partials(parts[1:])])  # cascade's grouping
    for out in (running[0], prefix_then_rest[0], merge_partials(parts)[0], split_k_attention(q, k, v, cuts)):
        assert mx.allclose(out, dense, atol=1e-5)
    assert np.allclose(np.array(running[1]), np.array(merge_partials(parts)[1]), atol=1e-5)


# ---------------------------------------------------------------- exercises and plots

def test_exercises_are_answered_by_the_package():
    assert verdict_for("11.1", 63 * 16 * 2 * 32 * 4).ok
    s = data.lesson07_step(1)
    assert verdict_for("11.2", 100 * s["cascade_bytes"] / s["dense_bytes"]).ok
    assert not verdict_for("11.2", 100 * s["cascade_kv_bytes"] / s["dense_bytes"]).ok
    assert verdict_for("11.3", 5).ok and not verdict_for("11.3", 4).ok


def test_plots_draw_the_rows(ax):
    rows = data.copy_rows()
    plot_copy_vs_context(ax, rows)
    assert [list(line.get_ydata()) for line in ax.get_lines()][0] == [r["copied_bytes"] / 2**30 for r in rows
                                                                      if r["path"] == "gather"]
    plot_sparse(ax, data.sparse_rows())
    assert len(ax.get_lines()) == 2
    plot_gpu_cascade(ax, data.gpu_rows(data.load_gpu_runs()))
    assert len(ax.get_lines()) == 6 and len(ax.get_lines()[0].get_xdata()) == 4
