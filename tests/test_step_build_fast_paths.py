"""The decode step's cheap host paths give the verdicts of the full checks they stand in front of."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.cache import KVCache, RotatingKVCache
from kvsim.cache.checks import _fits_quickly, check_layer_cache
from kvsim.cache.sdpa import sdpa
from kvsim.measure.step_time import fill_caches
from kvsim.model import build_model, toy_spec
from kvsim.model.cache_checks import _HOST_RANGE_MAX, check_tokens


@pytest.mark.parametrize("size", [1, _HOST_RANGE_MAX, _HOST_RANGE_MAX + 1])
def test_token_range_on_the_host_and_on_the_device_agree(size):
    ok = mx.array(np.arange(size).reshape(1, size) % 32)
    assert check_tokens(ok, 32) is ok
    for bad, shown in ((32, "32"), (-1, "-1")):
        ids = np.arange(size).reshape(1, size) % 32
        ids[0, size // 2] = bad
        with pytest.raises(ValueError, match=rf"token ids must be in \[0, 32\) \(vocab_size\), got {shown}$"):
            check_tokens(mx.array(ids), 32)


@pytest.mark.parametrize("kind", ["gqa", "sliding", "mla"])
def test_quick_cache_fit_never_passes_what_the_full_check_refuses(kind):
    model = build_model(toy_spec(kind, num_hidden_layers=2))
    layer, other = model.spec.layers[0], build_model(toy_spec("mha" if kind != "mha" else "gqa")).spec.layers[0]
    caches = model.make_caches()
    assert all(_fits_quickly(layer, c, 1, mx.float32) for c in caches)      # empty caches fit
    fill_caches(model, caches, 5)
    cache = caches[0]
    for lay, batch, dtype in [(layer, 1, mx.float32), (layer, 2, mx.float32), (layer, 1, mx.bfloat16),
                              (layer, None, None), (other, 1, mx.float32)]:
        quick = _fits_quickly(lay, cache, batch, dtype)
        try:
            check_layer_cache(0, lay, cache, batch, dtype)
            full = True
        except ValueError:
            full = False
        assert not quick or full                              # quick True implies the full check passes
        if lay is layer:
            assert quick == full                              # and on the hot path it decides alone
    wrong = RotatingKVCache(4) if kind != "sliding" else KVCache()
    assert not _fits_quickly(layer, wrong, 1, mx.float32)
    with pytest.raises(ValueError, match=r"caches\[0\]"):
        check_layer_cache(0, layer, wrong, 1, mx.float32)


def test_a_ring_step_with_its_remembered_answer_equals_its_reference():
    q = mx.random.normal((1, 4, 1, 8), key=mx.random.key(0))
    fast, slow = RotatingKVCache(4, ordered=False), RotatingKVCache(4, ordered=False)
    for t in range(11):
        kv = mx.full((1, 2, 1, 8), float(t))
        assert fast._ring_answer(t, 1) == fast._ring_answer_unmemoized(t, 1) == slow._ring_answer_by_slots(t, 1)
        mask = fast.make_mask(1)
        out = fast.attend(q, kv, kv, 0.3)
        ref = sdpa(q, *slow.update_and_fetch(kv, kv), mask, 0.3)
        assert mx.array_equal(out, ref).item()


# --- the decode step's fast paths (Block/Attention/MLA.step, the caches' update_step) equal the reference ---

import copy
import operator
import sys

from kvsim.cache import LatentCache
from kvsim.cache.base import BaseCache
from kvsim.cache.rotating import decode_wraps
from kvsim.measure.twins import twin
from kvsim.model import TOY_KINDS

PROMPT = [3, 17, 42, 5, 99, 7, 11, 64, 2, 8, 31, 9, 4]


def _greedy_both(model, steps, trim_at=None, kv_dtype=None, **cache_kw):
    """Greedy decode twice from one prefill, fast path and reference; (tokens, logits) of each."""
    runs = {}
    for fast in (True, False):
        model.fast_decode = fast
        caches = model.make_caches(**cache_kw)
        logits = model(mx.array([PROMPT]), caches, kv_dtype)[0, -1]
        tokens, seen = [], []
        for t in range(steps):
            if t == trim_at:                                  # rewind: rewound rows sit in rings with spare slots
                for c in caches:
                    if c is not None:
                        c.trim(2)
            tokens.append(int(mx.argmax(logits).item()))
            logits = model(mx.array([[tokens[-1]]]), caches, kv_dtype)[0, -1]
            seen.append(logits)
        runs[fast] = tokens, np.array(mx.stack(seen))
    model.fast_decode = True
    return runs[True], runs[False]


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_fast_decode_equals_the_reference_for_every_toy(kind):
    model = build_model(toy_spec(kind), seed=4)
    (fast_tokens, fast), (ref_tokens, ref) = _greedy_both(model, 12)
    assert fast_tokens == ref_tokens
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["gqa", "sliding", "sliding_global", "mla"])
@pytest.mark.parametrize("options", [dict(ordered=True), dict(inplace=False), dict(rewind_tokens=3, trim_at=6),
                                     dict(kv_dtype=mx.float16), dict(step=4)])
def test_fast_decode_equals_the_reference_with_cache_options(kind, options):
    options = dict(options)
    trim_at, kv_dtype = options.pop("trim_at", None), options.pop("kv_dtype", None)
    if kv_dtype is not None:
        options["dtype"] = kv_dtype
    model = build_model(toy_spec(kind), seed=6)
    (fast_tokens, fast), (ref_tokens, ref) = _greedy_both(model, 14, trim_at, kv_dtype, **options)
    assert fast_tokens == ref_tokens
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)


def _cache_state(c):
    arrays = [np.array(a) for a in c.state]
    return c.offset, getattr(c, "_start", None), c._geom, c.capacity, arrays


@pytest.mark.parametrize("make", [lambda: KVCache(step=4), lambda: LatentCache(step=4),
                                  lambda: RotatingKVCache(6, step=4), lambda: RotatingKVCache(6, keep=2, step=4),
                                  lambda: RotatingKVCache(6, step=4, ordered=True),
                                  lambda: RotatingKVCache(6, keep=1, step=4, rewind_tokens=2)])
def test_update_step_equals_the_reference_update(make):
    """Same keys, values and mask as make_mask-then-update_and_fetch, and the same cache afterwards,
    at every position (growth, ring wrap, sinks, rewound rows after a trim)."""
    fast, ref = make(), make()
    H = 1 if isinstance(fast, LatentCache) else 2
    for t in range(23):
        if t == 13:
            assert fast.trim(2) == ref.trim(2)
        S = 3 if t == 0 else 1                                # a prefill first, then decode steps
        k = mx.full((1, H, S, 8), float(t)) + mx.arange(S, dtype=mx.float32)[:, None]
        v = -k[..., :4] if isinstance(fast, LatentCache) else -k
        got = fast.update_step(k, v)
        want = BaseCache.update_step(ref, k, v)
        for a, b in zip(got[:2], want[:2]):
            assert mx.array_equal(a, b).item(), t
        assert (got[2] is None) == (want[2] is None), t
        if got[2] is not None:
            assert mx.array_equal(got[2], want[2]).item(), t
        fs, rs = _cache_state(fast), _cache_state(ref)
        assert fs[:4] == rs[:4], t
        assert all(np.array_equal(a, b) for a, b in zip(fs[4], rs[4])), t


@pytest.mark.parametrize("make", [KVCache, lambda: RotatingKVCache(4), LatentCache])
def test_update_step_refuses_what_update_and_fetch_refuses_and_changes_nothing(make):
    cache = make()
    H = 1 if isinstance(cache, LatentCache) else 2
    cache.update_step(mx.zeros((1, H, 5, 8)), mx.zeros((1, H, 5, 4)))
    before = _cache_state(cache)
    for k, v in [(mx.zeros((1, H, 1, 8), dtype=mx.float16), mx.zeros((1, H, 1, 4), dtype=mx.float16)),
                 (mx.zeros((1, H, 1, 6)), mx.zeros((1, H, 1, 4))), (mx.zeros((2, H, 1, 8)), mx.zeros((2, H, 1, 4)))]:
        with pytest.raises(ValueError) as fast_error:
            cache.update_step(k, v)
        with pytest.raises(ValueError) as ref_error:
            copy.deepcopy(cache).update_and_fetch(k, v)
        assert str(fast_error.value) == str(ref_error.value)
        after = _cache_state(cache)
        assert after[:4] == before[:4] and all(np.array_equal(a, b) for a, b in zip(after[4], before[4]))


def test_decode_wraps_equals_the_ring_answer_by_slots():
    for keep, window, rewind in [(0, 4, 0), (2, 4, 0), (0, 5, 3), (1, 3, 2)]:
        ring = window + rewind
        for P in range(keep, 40):
            cache = RotatingKVCache(keep + window, keep=keep, rewind_tokens=rewind, ordered=False)
            assert decode_wraps(P, keep, window, ring) == cache._ring_answer_by_slots(P, 1) or not cache._fits(P, 1)


def test_w_uk_uv_are_sliced_once_and_follow_a_new_kv_b():
    model = build_model(toy_spec("mla"), seed=1)
    mla = model.blocks[0].mixer
    names = sorted(k for k, _ in nn_flatten(model.parameters()))
    first = mla._w_uk_uv()
    assert all(a is b for a, b in zip(first, mla._w_uk_uv()))          # the same arrays, not new slices
    assert sorted(k for k, _ in nn_flatten(model.parameters())) == names  # kept out of the parameters
    for a, b in zip(first, mla.split_kv_b(mla.wkv_b)):
        assert mx.array_equal(a, b).item()
    mla.wkv_b = mla.wkv_b * 2                                            # a new kv_b is sliced again
    for a, b in zip(mla._w_uk_uv(), mla.split_kv_b(mla.wkv_b)):
        assert mx.array_equal(a, b).item()
    model.set_dtype(mx.float16)
    assert all(w.dtype == mx.float16 for w in mla._w_uk_uv())


def nn_flatten(tree):
    from mlx.utils import tree_flatten
    return tree_flatten(tree)


def _calls(fn) -> int:
    n = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            n[0] += 1

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    mx.eval(out)
    return n[0]


@pytest.mark.parametrize("kind", ["gqa", "sliding", "mla"])
def test_a_fast_decode_step_makes_fewer_python_calls_than_mlx_lm_and_the_reference(kind):
    """Host work counted, not timed: Python calls per step of kvsim's fast decode step <= its mlx-lm twin's,
    and fewer than kvsim's reference path (8 layers, caches past the window)."""
    model = build_model(toy_spec(kind, num_hidden_layers=8))
    tw, tok = twin(model), mx.array([[1]])
    kc, tc = model.make_caches(), tw.make_caches(None)
    fill_caches(model, kc, 20)
    fill_caches(model, tc, 20)
    mx.eval(model(tok, kc), tw.model(tok, cache=tc))
    fast, theirs = _calls(lambda: model(tok, kc)), _calls(lambda: tw.model(tok, cache=tc))
    model.fast_decode = False
    reference = _calls(lambda: model(tok, kc))
    assert fast <= theirs and fast < reference, (fast, theirs, reference)


def test_step_geometry_accepts_exactly_the_one_token_updates_check_kv_accepts():
    from kvsim.cache.base import check_kv, step_geometry
    g = check_kv(mx.zeros((1, 2, 3, 8)), mx.zeros((1, 2, 3, 4)))
    cases = [((1, 2, 1, 8), (1, 2, 1, 4), mx.float32), ((1, 2, 2, 8), (1, 2, 2, 4), mx.float32),
             ((1, 2, 1, 8), (1, 2, 1, 4), mx.float16), ((2, 2, 1, 8), (2, 2, 1, 4), mx.float32),
             ((1, 1, 1, 8), (1, 1, 1, 4), mx.float32), ((1, 2, 1, 6), (1, 2, 1, 4), mx.float32),
             ((1, 2, 1, 8), (1, 2, 1, 5), mx.float32), ((1, 2, 1, 8), (1, 2, 2, 4), mx.float32)]
    for ks, vs, dtype in cases:
        k, v = mx.zeros(ks, dtype=dtype), mx.zeros(vs, dtype=dtype)
        fast = step_geometry(k, v, g)
        try:
            full = check_kv(k, v, g)
        except ValueError:
            full = None
        assert fast == (full if full is not None and full["S"] == 1 else None), (ks, vs, dtype)
    assert step_geometry(mx.zeros((1, 2, 1, 8)), mx.zeros((1, 2, 1, 4)), None) is None


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_kept_transposes_follow_new_weights_and_update_drops_them(kind):
    from kvsim.model.layers import DERIVED, transposed
    model = build_model(toy_spec(kind), seed=2)
    names = sorted(k for k, _ in nn_flatten(model.parameters()))
    (tokens, fast), (ref_tokens, ref) = _greedy_both(model, 4)
    assert tokens == ref_tokens
    kept = [m for _, m in model.named_modules() if "_transposed" in m.__dict__]
    assert kept and sorted(k for k, _ in nn_flatten(model.parameters())) == names   # never parameters
    ffn, names = model.blocks[0].ffn, operator.itemgetter("gate", "up", "down")
    assert transposed(ffn, names) is transposed(ffn, names)                       # made once
    ffn.up = ffn.up * 3                                                           # a new array: transposed again
    assert all(mx.array_equal(t, w.T).item() for t, w in zip(transposed(ffn, names), names(ffn)))
    (tokens, fast), (ref_tokens, ref) = _greedy_both(model, 4)
    assert tokens == ref_tokens
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)
    model.set_dtype(mx.float16)                                                   # through Model.update
    assert not any(key in m.__dict__ for _, m in model.named_modules() for key in DERIVED)
    (tokens, fast), (ref_tokens, ref) = _greedy_both(model, 4)
    assert tokens == ref_tokens and fast.dtype == np.float16
    np.testing.assert_allclose(fast, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape", [(1, 1, 64, 128), (1, 64, 256, 1024), (2, 7, 100, 37), (1, 3, 8192, 40)])
def test_contiguous_transpose_gives_the_bits_of_the_view(shape):
    """transpose_for_matmul: on a CPU a contiguous copy of w.T; x @ it has exactly the bits of x @ w.T."""
    from kvsim.model.layers import transpose_for_matmul
    batch, rows, inner, out = shape
    x = mx.random.normal((batch, rows, inner), key=mx.random.key(1))
    w = mx.random.normal((out, inner), key=mx.random.key(2))
    t = transpose_for_matmul(w)
    assert t.shape == (inner, out) and mx.array_equal(t, w.T).item()
    assert mx.array_equal(x @ t, x @ w.T).item()


@pytest.mark.parametrize("kind", ["gqa", "mla", "mamba", "mamba2", "jamba", "gated_deltanet", "rg_lru"])
def test_decode_with_contiguous_transposes_equals_decode_with_views(kind, monkeypatch):
    """Kept transposes as contiguous copies (CPU) or as views (what a GPU reads): the same logits, bit for bit,
    on the fast step and on the recurrent mixers (which read their projections through transposed too)."""
    import kvsim.model.layers as layers
    runs = []
    for limit in (layers.CONTIGUOUS_MAX_BYTES, -1):                     # -1: every transpose a view
        monkeypatch.setattr(layers, "CONTIGUOUS_MAX_BYTES", limit)
        model = build_model(toy_spec(kind), seed=3)
        runs.append(_greedy_both(model, 6))
    (tokens, fast), (ref_tokens, ref) = runs[0]
    (view_tokens, view_fast), (view_ref_tokens, view_ref) = runs[1]
    assert tokens == view_tokens and ref_tokens == view_ref_tokens
    assert np.array_equal(fast, view_fast) and np.array_equal(ref, view_ref)
