"""How a cache is read: cache.attend dispatch (dense / quantized / paged, the model unchanged), the paged
read paths (gather, block table, online softmax) and sparse page indirection, each equal to dense
attention over the same keys (fp32 within 1e-5), and the bytes each path reads and copies."""

import copy

import mlx.core as mx
import numpy as np
import pytest

from kvsim.cache import (ChunkedKVCache, KVCache, QuantizedKVCache, RotatingKVCache, TurboQuantKVCache,
                         attend_batched, make_caches)
from kvsim.cache.paged import PagedKVPool, cascade_read, paged_caches
from kvsim.cache.sdpa import reference_sdpa
from kvsim.calc.paged_read import read_step_bytes, sparse_pays, sparse_read_bytes
from kvsim.model import build_model, toy_spec
from kvsim.model.layers import Rows

H, HQ, D, DV, BS = 2, 4, 8, 6, 4
WINDOWS = {"full": None, "sliding": 7, "chunked": 6}
ATOL = 1e-5  # fp32


def rand(seed, *shape):
    return mx.random.normal(shape, key=mx.random.key(seed))


def reference(q, k_all, v_all, end, kind, window, keep=None):
    """Queries at [end − N, end) over every key ever written, by the layer's rule; ``keep`` = positions
    allowed (sparse pages), None = all."""
    N = q.shape[2]
    qp = mx.arange(end - N, end)[:, None]
    kp = mx.arange(0, end)[None, :]
    mask = kp <= qp
    if kind == "sliding":
        mask = mask & (kp > qp - window)
    if kind == "chunked":
        mask = mask & (kp // window == qp // window)
    if keep is not None:
        mask = mask & mx.array(np.isin(np.arange(end), keep))[None, :]
    return reference_sdpa(q, k_all[:, :, :end], v_all[:, :, :end], mask)


def filled(kind, sizes, dtype=mx.float32):
    """A pool whose sequence 's' got ``sizes`` tokens in turns with a neighbour (blocks interleave)."""
    pool = PagedKVPool(1, H, D, DV, block_size=BS, num_blocks=64, dtype=dtype, kind=kind,
                       window=WINDOWS[kind], enable_prefix_caching=False)
    for s in ("n", "s"):
        pool.add_sequence(s)
    cache, other = pool.caches("s")[0], pool.caches("n")[0]
    ks, vs = [], []
    for i, S in enumerate(sizes):
        other.update_and_fetch(rand(900 + i, 1, H, 3, D).astype(dtype), rand(950 + i, 1, H, 3, DV).astype(dtype))
        k, v = rand(2 * i, 1, H, S, D).astype(dtype), rand(2 * i + 1, 1, H, S, DV).astype(dtype)
        cache.update_and_fetch(k, v)
        ks.append(k)
        vs.append(v)
    return cache, mx.concatenate(ks, axis=2).astype(mx.float32), mx.concatenate(vs, axis=2).astype(mx.float32)


@pytest.mark.parametrize("kind", list(WINDOWS))
@pytest.mark.parametrize("path", ["gather", "block_table", "online"])
@pytest.mark.parametrize("last", [1, 3])
def test_every_read_path_equals_dense(kind, path, last):
    cache, k_all, v_all = filled(kind, [9, 1, 5, 1, 1, 7, last])
    q = rand(77, 1, HQ, last, D)
    got = cache.read(q, path=path)
    assert got.shape == (1, HQ, last, DV)
    assert mx.allclose(got, reference(q, k_all, v_all, cache.offset, kind, WINDOWS[kind]), atol=ATOL)


@pytest.mark.parametrize("kind", list(WINDOWS))
def test_fp16_pool_online_read_is_within_fp16_of_the_fp32_reference(kind):
    cache, k_all, v_all = filled(kind, [9, 1, 6, 1], dtype=mx.float16)
    q = rand(5, 1, HQ, 1, D).astype(mx.float16)
    want = reference(q.astype(mx.float32), k_all, v_all, cache.offset, kind, WINDOWS[kind])
    for path in ("block_table", "online", "gather"):   # block_table on fp16 runs the online loop (CPU gather_mm)
        got = cache.read(q, path=path)
        assert got.dtype == mx.float16 and mx.allclose(got.astype(mx.float32), want, atol=2e-3, rtol=2e-3), path


@pytest.mark.parametrize("kind", list(WINDOWS))
@pytest.mark.parametrize("path", ["gather", "block_table", "online"])
def test_sparse_pages_equal_dense_over_the_same_subset(kind, path):
    cache, k_all, v_all = filled(kind, [13, 1, 1, 9, 2])              # 26 tokens: pages 0..6
    end = cache.offset
    first_page = cache.pool.allocator.first_live_token("s") // BS
    held = list(range(first_page, -(-end // BS)))
    q = rand(3, 1, HQ, 2, D)
    for keep in (held[-1:], held[::2] + held[-1:] if held[-1] % 2 else held[::2], held):
        keep = sorted(set(keep))
        positions = [t for p in keep for t in range(p * BS, min((p + 1) * BS, end))]
        want = reference(q, k_all, v_all, end, kind, WINDOWS[kind], keep=positions)
        assert mx.allclose(cache.read(q, path=path, pages=keep), want, atol=ATOL), (keep, path)


def test_sparse_pages_are_validated_and_change_nothing():
    cache, _, _ = filled("full", [10])
    q = rand(1, 1, HQ, 1, D)
    before = cache.read(q)
    for bad in ([], [3], [0, 0], [-1]):
        with pytest.raises(ValueError, match="pages must be distinct page numbers in \\[0, 2\\]"):
            cache.read(q, pages=bad)
    with pytest.raises(ValueError, match="path must be one of"):
        cache.read(q, path="fast")
    assert cache.offset == 10 and mx.array_equal(cache.read(q), before)


def test_bytes_copied_gather_vs_block_table():
    """The gather path's copy measured (nbytes of the arrays it builds) equals the formula; block table copies 0."""
    cache, _, _ = filled("full", [30, 1, 1])                          # 32 tokens: 8 pages
    pool = cache.pool
    blocks = [b for b in pool.allocator.block_table("s") if b >= 0]
    keys, values = cache.gather_pages(blocks)
    measured = keys.nbytes + values.nbytes
    assert measured == len(blocks) * pool.layer_block_bytes == cache.read_bytes("gather")["copied_bytes"]
    assert cache.read_bytes("gather")["read_bytes"] == 2 * measured
    assert cache.read_bytes("block_table") == {"read_bytes": measured, "copied_bytes": 0}
    assert cache.read_bytes("online") == cache.read_bytes("block_table")
    sparse = cache.read_bytes("block_table", pages=[1, 5, 7])
    assert sparse == {"read_bytes": 3 * pool.layer_block_bytes, "copied_bytes": 0}
    assert sparse_read_bytes(3, 8, pool.layer_block_bytes)["read_bytes"] == sparse["read_bytes"]
    assert [sparse_read_bytes(k, 8, 100)["read_bytes"] for k in range(9)] == [100 * k for k in range(9)]
    with pytest.raises(ValueError, match="kept_pages must be in \\[0, total_pages = 8\\]"):
        sparse_read_bytes(9, 8, 100)
    assert sparse_pays(2, 8, 0.75) and not sparse_pays(3, 8, 0.75) and sparse_pays(8, 8, 0.0)
    with pytest.raises(ValueError, match="min_sparsity must be a number in \\[0, 1\\]"):
        sparse_pays(1, 8, 1.5)
    with pytest.raises(ValueError, match="path must be one of gather, block_table"):
        read_step_bytes("online", 1, 1)


def test_sliding_pool_reads_only_the_window_pages():
    cache, _, _ = filled("sliding", [40, 1, 1])                       # window 7: at most ⌈7/4⌉ + 1 pages held
    assert cache.read_bytes()["read_bytes"] <= 3 * cache.pool.layer_block_bytes


# ---------------------------------------------------------------- dispatch: the model never changes

@pytest.mark.parametrize("kind", ["gqa", "sliding", "chunked"])
def test_same_model_equal_logits_on_dense_and_paged_storage(kind):
    """The same model object decodes with dense and with paged caches: equal logits; the caches chose
    different read paths (dense SDPA vs block table) behind the same ``cache.attend`` call."""
    model = build_model(toy_spec(kind))
    dense, paged = make_caches(model.spec), paged_caches(model.spec, BS)
    assert {c.attention_path for c in dense} == {"dense sdpa"}
    assert {c.attention_path for c in paged} == {"paged block table"}
    assert {type(c) for c in dense} <= {KVCache, RotatingKVCache, ChunkedKVCache}
    tokens = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]]
    steps = [mx.array(tokens)] + [mx.array([[t]]) for t in (2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5)]
    for x in steps:                                   # prefill past the window and chunk, then decode
        a, b = model(x, dense), model(x, paged)
        assert mx.allclose(a, b, atol=1e-4), f"offset {dense[0].offset}"


def test_quantized_cache_attends_through_its_own_path():
    q, k, v = rand(1, 1, HQ, 5, 64), rand(2, 1, H, 5, 64), rand(3, 1, H, 5, 64)
    cache = QuantizedKVCache(bits=8, group_size=32)
    assert cache.attention_path == "quantized sdpa"
    got = cache.attend(q, k, v)
    deq = [mx.dequantize(*mx.quantize(a, group_size=32, bits=8), group_size=32, bits=8) for a in (k, v)]
    want = reference_sdpa(q, *deq, mx.tril(mx.ones((5, 5), dtype=mx.bool_)))
    assert mx.allclose(got, want, atol=1e-4)


def test_attend_batched_rows_keep_their_own_storage_and_windows():
    """Rows on a dense KVCache, a RotatingKVCache and a paged sliding cache: each row equals itself alone."""
    spec = toy_spec("sliding")
    model = build_model(spec)
    def row_caches():
        pool = PagedKVPool.for_layer(spec.layers[0], 1, block_size=BS, num_blocks=16, dtype=mx.float32)
        pool.add_sequence(0)
        return [KVCache(), RotatingKVCache(WINDOWS["sliding"]), pool.caches(0)[0]]
    batch, alone = row_caches(), row_caches()
    attn = model.blocks[0].mixer
    for t in range(12):
        x = rand(t, 3, 1 if t else 5, spec.hidden_size)
        out = attn(x, Rows(batch))
        for r in range(3):
            assert mx.allclose(out[r:r + 1], attn(x[r:r + 1], alone[r]), atol=1e-5), (t, r)
    with pytest.raises(ValueError, match="one cache per row"):
        attend_batched(rand(0, 2, HQ, 1, D), rand(1, 2, H, 1, D), rand(2, 2, H, 1, D), [KVCache()])


@pytest.mark.parametrize("make", [KVCache, lambda: RotatingKVCache(4), lambda: ChunkedKVCache(4),
                                  lambda: QuantizedKVCache(bits=8, group_size=32), lambda: filled("full", [5])[0]])
def test_attend_with_bad_queries_stores_nothing(make):
    cache = make()
    k = rand(1, 1, H, 2, 64 if isinstance(cache, QuantizedKVCache) else D)
    v = k if isinstance(cache, QuantizedKVCache) else rand(2, 1, H, 2, DV)
    if not hasattr(cache, "pool"):
        cache.attend(rand(0, 1, HQ, 2, k.shape[3]), k, v)
    before = cache.offset
    for bad in (rand(3, 1, HQ, 3, k.shape[3]), rand(3, 1, 3, 2, k.shape[3]), rand(3, 2, HQ, 2, k.shape[3])):
        with pytest.raises(ValueError, match="queries must be"):
            cache.attend(bad, k, v)
        assert cache.offset == before


def test_cascade_read_of_forked_sequences_equals_each_row_alone():
    """A parent's 22-token prompt forked into 3 children that then decode apart: 5 whole pages shared,
    cascade over them equals each child's own block-table read."""
    pool = PagedKVPool(1, H, D, DV, block_size=BS, num_blocks=64, dtype=mx.float32, enable_prefix_caching=False)
    pool.add_sequence("p")
    pool.caches("p")[0].update_and_fetch(rand(1, 1, H, 22, D), rand(2, 1, H, 22, DV))
    kids = [pool.fork("p", f"c{i}")[0] for i in range(3)]
    for i, c in enumerate(kids):
        for t in range(2 + 3 * i):                                   # suffixes of different lengths
            c.update_and_fetch(rand(10 + 7 * i + t, 1, H, 1, D), rand(50 + 7 * i + t, 1, H, 1, DV))
    assert pool.shared_prefix_pages([c.seq_id for c in kids]) == 5   # 22 tokens: 5 whole pages, the 6th copied on write
    q = rand(99, 3, HQ, 1, D)
    got = cascade_read(kids, q)
    for b, c in enumerate(kids):
        assert mx.allclose(got[b:b + 1], c.read(q[b:b + 1]), atol=ATOL), b
    q2 = rand(98, 3, HQ, 2, D)                                       # two queries per row: causal suffix mask
    got2 = cascade_read(kids, q2)
    for b, c in enumerate(kids):
        assert mx.allclose(got2[b:b + 1], c.read(q2[b:b + 1]), atol=ATOL), b
    with pytest.raises(ValueError, match="queries must be"):
        cascade_read(kids, q[:2])


def _layouts():
    """One cache of every layout attend_batched may hold, filled with 5 tokens, and its key width."""
    makers = {"dense": (KVCache, D), "sliding": (lambda: RotatingKVCache(4), D),
              "chunked": (lambda: ChunkedKVCache(4), D),
              "quantized": (lambda: QuantizedKVCache(bits=8, group_size=32), 64),
              "turboquant": (lambda: TurboQuantKVCache(4, 32), 64), "paged": (lambda: filled("full", [5])[0], D)}
    for name, (make, width) in makers.items():
        cache = make()
        if not hasattr(cache, "pool"):
            v_width = width if width == 64 else DV
            cache.attend(rand(10, 1, HQ, 5, width), rand(11, 1, H, 5, width), rand(12, 1, H, 5, v_width))
        yield name, cache, width


@pytest.mark.parametrize("name", ["dense", "sliding", "chunked", "quantized", "turboquant", "paged"])
def test_attend_step_equals_attend_for_every_layout(name):
    """A decode step through attend_step (what attend_batched takes for S = 1) gives attend's answer, also for
    the layouts that read their storage their own way (quantized, TurboQuant, paged)."""
    cache, width = next((c, w) for n, c, w in _layouts() if n == name)
    twin = copy.deepcopy(cache)
    for t in range(6):
        q, k = rand(20 + t, 1, HQ, 1, width), rand(30 + t, 1, H, 1, width)
        v = rand(40 + t, 1, H, 1, width if width == 64 else DV)
        assert mx.allclose(cache.attend_step(q, k, v), twin.attend(q, k, v), atol=ATOL), (name, t)
        assert cache.offset == twin.offset


def test_attend_batched_decode_over_quantized_rows():
    """Rows of a quantized cache and a dense one at different offsets: each row equals itself alone."""
    rows = [QuantizedKVCache(bits=8, group_size=32), KVCache()]
    for r, (c, n) in enumerate(zip(rows, (3, 7))):
        c.attend(rand(50 + r, 1, HQ, n, 64), rand(60 + r, 1, H, n, 64), rand(70 + r, 1, H, n, 64))
    alone = copy.deepcopy(rows)
    for t in range(4):
        q, k, v = rand(80 + t, 2, HQ, 1, 64), rand(90 + t, 2, H, 1, 64), rand(100 + t, 2, H, 1, 64)
        out = attend_batched(q, k, v, rows)
        for r in range(2):
            want = alone[r].attend(q[r:r + 1], k[r:r + 1], v[r:r + 1])
            assert mx.allclose(out[r:r + 1], want, atol=ATOL), (t, r)


def test_attend_batched_refuses_keys_of_another_batch_and_stores_nothing():
    rows = [KVCache(), KVCache()]
    with pytest.raises(ValueError, match="B = 2 rows"):
        attend_batched(rand(0, 2, HQ, 1, D), rand(1, 3, H, 1, D), rand(2, 3, H, 1, DV), rows)
    assert [c.offset for c in rows] == [0, 0]
