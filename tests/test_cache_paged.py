"""PagedKVCache: same attention as a dense cache, isolation, sharing, windows, pressure."""

import copy

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import ChunkedKVCache, KVCache, RotatingKVCache, load_cache, save_cache
from kvsim.cache.paged import PagedKVCache, PagedKVPool
from kvsim.cache.sdpa import sdpa
from kvsim.calc.config import LayerSpec
from kvsim.serving.block_pool import RequestTooLarge

H, D, HQ, BS = 2, 8, 4, 4
WINDOWS = {"full": None, "sliding": 7, "chunked": 6}


def rows(seed, S, dim=D):
    """Deterministic (1, H, S, dim) rows."""
    return mx.array(np.random.default_rng(seed).normal(size=(1, H, S, dim)).astype(np.float32))


def queries(seed, S):
    """Deterministic (1, HQ, S, D) queries (HQ = 2·H: grouped-query attention)."""
    return mx.array(np.random.default_rng(seed).normal(size=(1, HQ, S, D)).astype(np.float32))


def token_rows(tokens, start):
    """K/V that depend only on (token, position): identical prefixes give identical rows."""
    t = np.asarray(tokens, dtype=np.float32)[:, None]
    pos = np.arange(start, start + len(tokens), dtype=np.float32)[:, None]
    base = np.sin(t * np.arange(1, H * D + 1) * 0.37 + pos * 0.01).reshape(len(tokens), H, D)
    k = mx.array(base.transpose(1, 0, 2)[None])
    return k, -k * 0.5


def reference(q, k_all, v_all, start, kind, window):
    """Attention of queries at [start, start+S) over every key ever written, by the layer's rule."""
    T = start + q.shape[2]
    qp = mx.arange(start, T)[:, None]
    kp = mx.arange(0, T)[None, :]
    mask = kp <= qp
    if kind == "sliding":
        mask = mask & (kp > qp - window)
    if kind == "chunked":
        mask = mask & (kp // window == qp // window)
    return sdpa(q, k_all[:, :, :T], v_all[:, :, :T], mask)


def pool_for(kind, num_blocks=64, layers=1, **kw):
    return PagedKVPool(layers, H, D, block_size=BS, num_blocks=num_blocks, dtype=mx.float32,
                       kind=kind, window=WINDOWS[kind], **kw)


def step(cache, k, v, q):
    """Attention after one update; a paged cache's block-wise ``attend`` must agree with it."""
    mask = cache.visibility_mask(k.shape[2])
    keys, values = cache.update_and_fetch(k, v)
    assert mask.shape == (k.shape[2], keys.shape[2])
    out = sdpa(q, keys, values, mask)
    if isinstance(cache, PagedKVCache):
        assert mx.allclose(cache.attend(q), out, atol=1e-5), "attend differs from gather + sdpa"
    return out


@pytest.mark.parametrize("kind", list(WINDOWS))
def test_paged_attention_equals_the_dense_cache(kind):
    dense = {"full": KVCache(), "sliding": RotatingKVCache(7), "chunked": ChunkedKVCache(6)}[kind]
    pool = pool_for(kind, layers=2)
    pool.add_sequence("s")
    caches = pool.caches("s")
    for i, S in enumerate([5, 1, 1, 3, 1, 1, 9, 1, 1, 2, 1, 1, 1]):
        k, v, q = rows(3 * i, S), rows(3 * i + 1, S), queries(3 * i + 2, S)
        expect = step(dense, k, v, q)
        for layer in caches:  # both layers of the group store the same rows here
            assert mx.allclose(step(layer, k, v, q), expect, atol=1e-6)
    held = sum(b >= 0 for b in pool.allocator.block_table("s"))
    if kind != "full":  # old blocks went back: at most ⌈W / bs⌉ + 1 stay
        assert held <= -(-WINDOWS[kind] // BS) + 1
    assert caches[0].nbytes == held * BS * H * 2 * D * 4 == caches[0].capacity * H * 2 * D * 4


@settings(max_examples=25)
@given(kind=st.sampled_from(list(WINDOWS)),
       ops=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=12))
def test_any_schedule_of_updates_and_rewinds_matches_the_oracle(kind, ops):
    pool = pool_for(kind)
    pool.add_sequence(0)
    cache = pool.caches(0)[0]
    k_all, v_all = mx.zeros((1, H, 0, D)), mx.zeros((1, H, 0, D))
    for i, (S, back) in enumerate(ops):
        back = min(back, cache.trimmable_tokens)
        cache.trim(back)
        o = cache.offset
        k, v, q = rows(10 * i, S), rows(10 * i + 1, S), queries(10 * i + 2, S)
        k_all = mx.concatenate([k_all[:, :, :o], k], axis=2)
        v_all = mx.concatenate([v_all[:, :, :o], v], axis=2)
        out = step(cache, k, v, q)
        assert mx.allclose(out, reference(q, k_all, v_all, o, kind, WINDOWS[kind]), atol=1e-5)
        pool.allocator.check_invariants()


def test_poisoning_every_other_block_changes_no_output():
    pool = pool_for("full", num_blocks=40)
    seqs = {s: [] for s in range(4)}
    for s in seqs:
        pool.add_sequence(s)
    rng = np.random.default_rng(0)
    hist = {s: (mx.zeros((1, H, 0, D)), mx.zeros((1, H, 0, D))) for s in seqs}
    for i in range(24):
        s = int(rng.integers(0, 4))
        cache = pool.caches(s)[0]
        S = int(rng.integers(1, 4))
        k, v, q = rows(100 + 3 * i, S), rows(101 + 3 * i, S), queries(102 + 3 * i, S)
        others = mx.array(sorted(set(range(40)) - set(pool.allocator.block_table(s))))
        saved = [mx.array(a) for a in pool.keys + pool.values]
        if others.size:  # poison every block this sequence does not hold (free ones too)
            pool.keys[0][others] = mx.full((others.size, H, BS, D), 1e4)
            pool.values[0][others] = mx.full((others.size, H, BS, D), -1e4)
        o = cache.offset
        out = step(cache, k, v, q)
        ka = mx.concatenate([hist[s][0], k], axis=2)
        va = mx.concatenate([hist[s][1], v], axis=2)
        hist[s] = (ka, va)
        assert mx.allclose(out, reference(q, ka, va, o, "full", None), atol=1e-5), f"seq {s} saw poison"
        # restore the others' rows; blocks this update took from the free list keep its rows
        back = mx.array(sorted(set(range(40)) - set(pool.allocator.block_table(s))))
        if back.size:
            pool.keys[0][back] = saved[0][back]
            pool.values[0][back] = saved[1][back]


def test_shared_prefix_blocks_give_the_same_attention():
    pool = pool_for("full", num_blocks=20, layers=2)
    prompt = list(range(11))
    assert pool.add_sequence("a", prompt) == 0
    for layer in pool.caches("a"):
        layer.update_and_fetch(*token_rows(prompt, 0))
    hit = pool.add_sequence("b", prompt[:9] + [77, 78])
    assert hit == 8  # two full blocks of the common 9-token prefix
    ta, tb = pool.allocator.block_table("a"), pool.allocator.block_table("b")
    assert ta[:2] == tb[:2] and pool.allocator.ref_count[ta[0]] == 2
    b_tokens = prompt[:9] + [77, 78]
    q = queries(5, 3)
    for layer in pool.caches("b"):
        assert layer.offset == 8
        out = step(layer, *token_rows(b_tokens[8:], 8), q)
        k_all, v_all = token_rows(b_tokens, 0)
        assert mx.allclose(out, reference(q, k_all, v_all, 8, "full", None), atol=1e-6)


def test_fork_copies_on_write_and_leaves_the_parent_intact():
    pool = pool_for("full", num_blocks=10)
    pool.add_sequence("p")
    parent = pool.caches("p")[0]
    k0, v0 = rows(1, 6), rows(2, 6)
    parent.update_and_fetch(k0, v0)
    child = pool.fork("p", "c")[0]
    kc, vc, kp, vp = rows(3, 1), rows(4, 1), rows(5, 1), rows(6, 1)
    q = queries(7, 1)
    out_c = step(child, kc, vc, q)
    out_p = step(parent, kp, vp, q)
    assert pool.allocator.stats["cow_copies"] == 1
    for out, k, v in ((out_c, kc, vc), (out_p, kp, vp)):
        ka, va = mx.concatenate([k0, k], axis=2), mx.concatenate([v0, v], axis=2)
        assert mx.allclose(out, reference(q, ka, va, 6, "full", None), atol=1e-6)
    assert pool.allocator.block_table("p")[0] == pool.allocator.block_table("c")[0]  # full block shared


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_pressure_preempts_the_latest_other_sequence(mode):
    pool = pool_for("full", num_blocks=6, num_host_blocks=4, preemption=mode)
    for s in ("a", "b", "c"):
        pool.add_sequence(s)
        pool.caches(s)[0].update_and_fetch(rows(ord(s), 6), rows(ord(s) + 1, 6))  # 2 blocks each
    c = pool.caches("c")[0]
    k, v = rows(9, 3), rows(10, 3)
    c.update_and_fetch(k, v)  # needs a 3rd block: "b" is the latest other sequence
    assert pool.preempted == ["b"] and pool.allocator.stats["preemptions"] == 1
    with pytest.raises(KeyError, match="preempted"):
        pool.caches("b")[0].update_and_fetch(rows(1, 1), rows(2, 1))
    pool.free("a")
    assert pool.resume("b") == (6 if mode == "swap" else 0)
    b = pool.caches("b")[0]
    if mode == "recompute":  # the caller feeds the prompt again
        b.update_and_fetch(rows(ord("b"), 6), rows(ord("b") + 1, 6))
    q = queries(11, 1)
    kb, vb = rows(12, 1), rows(13, 1)
    ka = mx.concatenate([rows(ord("b"), 6), kb], axis=2)
    va = mx.concatenate([rows(ord("b") + 1, 6), vb], axis=2)
    assert mx.allclose(step(b, kb, vb, q), reference(q, ka, va, 6, "full", None), atol=1e-6)
    pool.allocator.check_invariants()


def test_a_write_that_cannot_fit_changes_nothing():
    pool = pool_for("full", num_blocks=3)
    pool.add_sequence("s")
    cache = pool.caches("s")[0]
    cache.update_and_fetch(rows(1, 5), rows(2, 5))
    before = (pool.allocator.block_table("s"), cache.offset, [np.array(a) for a in pool.keys])
    with pytest.raises(RequestTooLarge, match="the pool has 3 in all"):
        cache.update_and_fetch(rows(3, 9), rows(4, 9))
    after = (pool.allocator.block_table("s"), cache.offset, [np.array(a) for a in pool.keys])
    assert before[:2] == after[:2] and all((x == y).all() for x, y in zip(before[2], after[2]))


def test_trim_gives_blocks_back_once_every_layer_rewound():
    pool = pool_for("full", num_blocks=10, layers=2)
    pool.add_sequence("s")
    l0, l1 = pool.caches("s")
    for layer in (l0, l1):
        layer.update_and_fetch(rows(1, 10), rows(2, 10))
    assert pool.used_blocks == 3
    l0.trim(7)
    assert pool.used_blocks == 3  # layer 1 still holds 10 tokens
    l1.trim(7)
    assert pool.used_blocks == 1 and l0.offset == l1.offset == 3


def test_budget_decides_the_number_of_blocks_and_nbytes():
    layer = LayerSpec(kind="sliding", num_key_value_heads=2, head_dim=8, sliding_window=16)
    pool = PagedKVPool.for_layer(layer, 3, block_size=16, budget_bytes=10_000_000, dtype=mx.float16)
    block_bytes = 3 * 16 * 2 * (8 + 8) * 2  # layers · block_size · n_kv · (d_k + d_v) · bytes
    assert pool.num_blocks == 10_000_000 // block_bytes
    assert pool.nbytes == sum(a.nbytes for a in pool.keys + pool.values) <= 10_000_000
    with pytest.raises(ValueError, match="smaller than one block"):
        PagedKVPool(1, 2, 8, budget_bytes=100)


def test_save_and_load_round_trip(tmp_path):
    pool = pool_for("sliding")
    pool.add_sequence(0)
    cache = pool.caches(0)[0]
    for i in range(5):
        cache.update_and_fetch(rows(i, 3), rows(i + 50, 3))
    save_cache(tmp_path / "paged.safetensors", cache)
    loaded = load_cache(tmp_path / "paged.safetensors", PagedKVCache)
    assert (loaded.offset, loaded.size(), loaded.nbytes) == (cache.offset, cache.size(), cache.nbytes)
    q, k, v = queries(7, 1), rows(8, 1), rows(9, 1)
    assert mx.allclose(step(loaded, k, v, q), step(cache, k, v, q))


def test_bad_input_names_the_field():
    pool = pool_for("full")
    pool.add_sequence(0)
    cache = pool.caches(0)[0]
    with pytest.raises(ValueError, match=r"keys.shape\[0\] \(batch\) must be 1"):
        cache.update_and_fetch(mx.zeros((2, H, 1, D)), mx.zeros((2, H, 1, D)))
    with pytest.raises(ValueError, match="n_kv_heads"):
        cache.update_and_fetch(mx.zeros((1, 3, 1, D)), mx.zeros((1, 3, 1, D)))
    with pytest.raises(ValueError, match="window must be None"):
        PagedKVPool(1, H, D, num_blocks=4, kind="sliding")
    with pytest.raises(ValueError, match="exactly one of num_blocks or budget_bytes"):
        PagedKVPool(1, H, D)
    assert cache.offset == 0 and pool.used_blocks == 0


def test_bf16_pool_bytes_and_attention():
    pool = PagedKVPool(2, H, D, block_size=BS, num_blocks=8, dtype=mx.bfloat16)
    pool.add_sequence(0)
    layer = pool.caches(0)[0]
    k = rows(1, 6).astype(mx.bfloat16)
    keys, values = layer.update_and_fetch(k, k)
    assert layer.nbytes == 2 * BS * H * 2 * D * 2  # 2 blocks · bs · n_kv · (d_k + d_v) · 2 bytes
    assert layer.used_bytes == 6 * H * 2 * D * 2 and pool.nbytes == 8 * 2 * BS * H * 2 * D * 2
    q = queries(2, 6).astype(mx.bfloat16)
    mask = mx.tril(mx.ones((6, 6), dtype=mx.bool_))
    # the block read accumulates in float32 and rounds once to bf16; sdpa rounds its bf16 matmuls:
    # both within bf16 resolution (2^-8 relative) of the float32 attention over the same bf16 rows
    f32 = [a.astype(mx.float32) for a in (q, keys, values)]
    exact = sdpa(*f32, mask)
    for out in (layer.attend(q), sdpa(q, keys, values, mask)):
        assert out.dtype == mx.bfloat16 and mx.allclose(out.astype(mx.float32), exact, rtol=2 ** -7, atol=2 ** -7)
    with pytest.raises(ValueError, match="queries must be"):
        layer.attend(queries(2, 7))


# ---------------------------------------------------------------- the pool's per-layer interface


def pool_snapshot(pool: PagedKVPool):
    """Everything a pool operation could change: allocator state, per-layer offsets and write ends,
    the preempted list and every stored row (the allocator's admission counter aside)."""
    arrays = ("keys", "values", "host_keys", "host_values")
    allocator = {k: copy.deepcopy(v) for k, v in vars(pool.allocator).items() if k != "_counter"}
    rest = {k: copy.deepcopy(v) for k, v in vars(pool).items()
            if k not in arrays + ("allocator", "geometry", "dtype")}
    return allocator, rest, [np.array(a) for name in arrays for a in getattr(pool, name)]


def same_snapshot(a, b) -> bool:
    return a[:2] == b[:2] and len(a[2]) == len(b[2]) and all(np.array_equal(x, y) for x, y in zip(a[2], b[2]))


def test_pool_writes_rows_into_the_slots_its_block_table_names():
    pool = pool_for("full", num_blocks=8, layers=2)
    pool.add_sequence("s")
    k, v = rows(1, 6), rows(2, 6)
    assert pool.write("s", 0, k, v) == (0, 6)
    assert (pool.offset("s", 0), pool.offset("s", 1)) == (6, 0)
    slots = pool.allocator.slots("s", 0, 6)
    stored = pool.keys[0][mx.array(slots // BS), :, mx.array(slots % BS)]  # (S, H, D)
    assert mx.array_equal(stored, k[0].swapaxes(0, 1))
    assert pool.write("s", 1, k, v) == (0, 6) and pool.used_blocks == 2


def test_pool_rewind_gives_blocks_back_once_no_layer_is_past_them():
    pool = pool_for("full", num_blocks=8, layers=2)
    pool.add_sequence("s")
    for layer in (0, 1):
        pool.write("s", layer, rows(1, 10), rows(2, 10))
    assert pool.rewind("s", 0, 7) == 7 and pool.used_blocks == 3  # layer 1 still at 10
    assert pool.rewind("s", 1, 5) == 5 and pool.used_blocks == 2  # highest offset 5: ⌈5 / 4⌉ blocks
    assert (pool.offset("s", 0), pool.offset("s", 1)) == (3, 5)
    assert pool.write("s", 0, rows(3, 2), rows(4, 2)) == (0, 5)  # rewrites positions 3, 4


def test_pool_write_returns_the_window_it_can_read():
    pool = pool_for("sliding", num_blocks=8)  # W = 7, blocks of 4
    pool.add_sequence("s")
    assert pool.write("s", 0, rows(1, 12), rows(2, 12)) == (0, 12)
    assert pool.first_kept("s") == 4  # release point 12 − 7 + 1 = 6, rounded down to a block
    assert pool.write("s", 0, rows(3, 1), rows(4, 1)) == (4, 13)
    assert pool.allocator.first_live_token("s") == 4


def test_pool_start_at_restores_a_sequence_past_its_window():
    pool = pool_for("sliding", num_blocks=8, layers=2)
    pool.add_sequence("r")
    pool.start_at("r", 10)
    assert [pool.offset("r", layer) for layer in (0, 1)] == [10, 10]
    assert pool.allocator.first_live_token("r") == 8 and pool.used_blocks == 1
    assert pool.write("r", 0, rows(1, 1), rows(2, 1)) == (8, 11)


def _bad_calls(pool):
    k, v = rows(1, 2), rows(2, 2)
    return [
        lambda: pool.offset("s", 2),
        lambda: pool.write("s", 2, k, v),
        lambda: pool.write("s", True, k, v),
        lambda: pool.write("s", 0, mx.zeros((2, H, 1, D)), mx.zeros((2, H, 1, D))),
        lambda: pool.write("s", 0, mx.zeros((1, 3, 1, D)), mx.zeros((1, 3, 1, D))),
        lambda: pool.rewind("s", 0, -1),
        lambda: pool.rewind("s", 0, 11),  # layer 0 holds positions 4..13: the window released 0..3
        lambda: pool.rewind("s", 0, 1.0),
        lambda: pool.rewind("s", 0, True),
        lambda: pool.rewind("s", -1, 1),
        lambda: pool.start_at("s", 3),  # "s" already holds tokens
        lambda: pool.start_at("e", -1),
        lambda: pool.start_at("e", 1.5),
        lambda: pool.start_at("e", 100),  # RequestTooLarge: 25 blocks, the pool has 8
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls(None))))
def test_bad_pool_input_is_a_one_line_value_error_and_changes_nothing(case):
    pool = pool_for("sliding", num_blocks=8, layers=2)
    pool.add_sequence("s")
    pool.add_sequence("e")
    for layer in (0, 1):
        pool.write("s", layer, rows(layer, 13), rows(layer + 9, 13))
    pool.write("s", 0, rows(5, 1), rows(6, 1))
    assert pool.allocator.first_live_token("s") == 4
    before = pool_snapshot(pool)
    with pytest.raises(ValueError) as err:
        _bad_calls(pool)[case]()
    assert "\n" not in str(err.value)
    assert same_snapshot(pool_snapshot(pool), before)


def test_unknown_sequence_is_a_key_error_and_changes_nothing():
    pool = pool_for("full", num_blocks=8)
    pool.add_sequence("s")
    pool.write("s", 0, rows(1, 3), rows(2, 3))
    before = pool_snapshot(pool)
    for call in (lambda: pool.offset("x", 0), lambda: pool.write("x", 0, rows(1, 1), rows(2, 1)),
                 lambda: pool.rewind("x", 0, 1), lambda: pool.start_at("x", 0)):
        with pytest.raises(KeyError, match="not in this pool"):
            call()
    assert same_snapshot(pool_snapshot(pool), before)


def test_deepcopy_of_a_paged_cache_copies_its_pool():
    """Issue 12, defect 1 (deepcopy raised 'cannot pickle Dtype'): the copy and its pool are independent."""
    import copy

    pool = PagedKVPool(1, 2, 4, num_blocks=8, block_size=4)
    pool.add_sequence("a")
    cache = pool.caches("a")[0]
    x = mx.ones((1, 2, 5, 4), dtype=mx.float16)
    cache.update_and_fetch(x, x)
    twin = copy.deepcopy(cache)
    assert twin.pool is not pool and twin.offset == 5
    k, _ = twin.update_and_fetch(2 * x[:, :, :1], x[:, :, :1])
    assert twin.offset == 6 and cache.offset == 5 and pool.allocator.num_tokens("a") == 5
    assert mx.array_equal(k[:, :, :5], cache.update_and_fetch(x[:, :, :1], x[:, :, :1])[0][:, :, :5]).item()
