"""Decode lookahead rewind on a sliding cache: Gemma 3's overwrite log and kvsim's spare slots both
restore what they promise; their memory; padded prefill on a ring; the seed's refusal list."""

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import RotatingKVCache
from kvsim.cache.lookahead import OverwriteLogRotatingCache, pad_ring_run
from kvsim.calc import registry
from kvsim.calc.padded_prefill import PADDED_PREFILL_REFUSALS, lookahead_rows_per_layer, refusal_for
from kvsim.decode.generate import check_padded_prefill

H, D = 2, 8
ROW_BYTES = 2 * H * D * 4   # K and V of one token, fp32


def kv(t0, n, salt=0.0):
    """Distinct K/V for positions t0..t0+n-1 (salt marks speculative ones)."""
    x = mx.arange(t0, t0 + n, dtype=mx.float32)[None, None, :, None] + mx.zeros((1, H, n, D)) + salt
    return x, -x


def feed(cache, t0, n):
    out = None
    for t in range(t0, t0 + n):
        out = cache.update_and_fetch(*kv(t, 1))
    return out


def bitwise(a, b):
    return a.shape == b.shape and mx.array_equal(a, b).item()


@settings(max_examples=40, deadline=None)
@given(window=st.integers(2, 9), prefill=st.integers(1, 20), before=st.integers(0, 12), k=st.integers(1, 4),
       undo=st.integers(0, 4), ordered=st.booleans())
def test_overwrite_log_restores_the_exact_state(window, prefill, before, k, undo, ordered):
    undo = min(undo, k)
    spec = OverwriteLogRotatingCache(window, step=4, ordered=ordered, max_saved=k)
    ref2 = RotatingKVCache(window, step=4, ordered=ordered)   # never makes the undone appends
    for c in (spec, ref2):
        c.update_and_fetch(*kv(0, prefill))
        feed(c, prefill, before)
    P = prefill + before
    for i in range(k):                                   # k speculative appends (different values)
        spec.update_and_fetch(*kv(P + i, 1, salt=0.5))
    assert spec.pending == k and spec.saved_nbytes <= k * ROW_BYTES
    spec.undo(undo)
    for i in range(k - undo):                            # the appends kept, made for real
        ref2.update_and_fetch(*kv(P + i, 1, salt=0.5))
    # bitwise the cache that never made the undone appends: buffers, offset, window start
    assert spec.offset == ref2.offset and spec._start == ref2._start
    assert bitwise(spec.keys, ref2.keys) and bitwise(spec.values, ref2.values)
    # and it decodes on exactly like it
    for t in range(spec.offset, spec.offset + 3):
        a, b = spec.update_and_fetch(*kv(t, 1)), ref2.update_and_fetch(*kv(t, 1))
        assert bitwise(a[0], b[0]) and bitwise(a[1], b[1])


@settings(max_examples=40, deadline=None)
@given(window=st.integers(2, 9), prefill=st.integers(1, 20), before=st.integers(0, 12), k=st.integers(1, 4))
def test_spare_slots_restore_every_visible_key(window, prefill, before, k):
    spec, ref = RotatingKVCache(window, step=4, rewind_tokens=k - 1), RotatingKVCache(window, step=4)
    for c in (spec, ref):
        c.update_and_fetch(*kv(0, prefill))
        feed(c, prefill, before)
    P = prefill + before
    for i in range(k):
        spec.update_and_fetch(*kv(P + i, 1, salt=0.5))
    assert spec.trim(k) == k and spec.offset == ref.offset == P
    for t in range(P, P + window + 2):                   # every key any later query sees is the same
        a, b = spec.update_and_fetch(*kv(t, 1)), ref.update_and_fetch(*kv(t, 1))
        assert bitwise(a[0], b[0]) and bitwise(a[1], b[1])


def test_without_spare_slots_or_log_only_one_token_comes_back():
    ring = RotatingKVCache(4, step=4)
    ring.update_and_fetch(*kv(0, 10))
    feed(ring, 10, 2)
    assert ring.trimmable_tokens == 1 and ring.trim(2) == 1


@pytest.mark.parametrize("k", [1, 2, 3])
def test_memory_per_layer_matches_real_nbytes(k):
    W = 6
    rows = lookahead_rows_per_layer(W, k)
    spare = RotatingKVCache(W, step=W + k, rewind_tokens=k - 1)
    log = OverwriteLogRotatingCache(W, step=W, max_saved=k)
    for c in (spare, log):
        c.update_and_fetch(*kv(0, 20))
    assert spare.nbytes == rows["spare_slots"]["peak"] * ROW_BYTES
    assert log.nbytes == rows["overwrite_log"]["idle"] * ROW_BYTES
    feed(log, 20, k)
    assert log.nbytes == rows["overwrite_log"]["peak"] * ROW_BYTES and log.saved_nbytes == k * ROW_BYTES
    log.commit()
    assert log.nbytes == W * ROW_BYTES and log.pending == 0
    with pytest.raises(ValueError, match="window"):
        lookahead_rows_per_layer(0, 1)


def test_log_bad_input_and_chunks():
    log = OverwriteLogRotatingCache(4, max_saved=2)
    log.update_and_fetch(*kv(0, 6))
    feed(log, 6, 1)
    with pytest.raises(ValueError, match=r"n must be an integer in \[0, 1\]"):
        log.undo(2)
    before = (log.offset, log.pending, log.nbytes)
    with pytest.raises(ValueError):
        log.update_and_fetch(mx.zeros((1, H, 1, D + 1)), mx.zeros((1, H, 1, D + 1)))
    assert (log.offset, log.pending, log.nbytes) == before
    log.update_and_fetch(*kv(7, 3))                      # a chunk cannot be undone: the log is dropped
    assert log.pending == 0
    with pytest.raises(ValueError, match="max_saved"):
        OverwriteLogRotatingCache(4, max_saved=0)


def test_padding_past_the_window_evicts_real_tokens():
    fits = pad_ring_run(8, 5, 8)
    assert fits.evicted_real == () and fits.held_padded == fits.held_unpadded and fits.offset_after == 5
    over = pad_ring_run(8, 10, 16)
    assert over.held_unpadded == tuple(range(2, 10)) and over.evicted_real == tuple(range(2, 8))
    assert over.trimmed < over.padded_tokens - over.prompt_tokens and over.offset_after != 10
    with pytest.raises(ValueError, match="sliding_window"):   # kvsim refuses it up front
        from kvsim.model import toy_spec
        check_padded_prefill(toy_spec("sliding"), 10, 16)


def test_refusal_list_matches_the_configs_kvsim_ships():
    assert [r["model"] for r in PADDED_PREFILL_REFUSALS] == [
        "NemotronH", "AFMoE", "Llama 4", "Gemma 4", "DeepSeek V4", "Bailing linear", "Qwen3-Next"]
    assert all(r["reason"] and r["kind"] for r in PADDED_PREFILL_REFUSALS)
    for name in ("nemotron-h-8b", "llama-4-scout", "qwen3-next-80b-a3b"):
        spec = registry.load_model(name)
        row = refusal_for(spec.model_type)
        assert row is not None and row["kind"] in spec.kinds
        with pytest.raises(ValueError, match=row["kind"]):
            check_padded_prefill(spec, 100, 128)
    assert refusal_for("llama") is None and refusal_for("gemma3_text") is None


@settings(max_examples=30, deadline=None)
@given(window=st.integers(2, 7), keep=st.integers(1, 3), prefill=st.integers(1, 16), before=st.integers(0, 10),
       k=st.integers(1, 3))
def test_overwrite_log_with_sink_tokens_restores_the_exact_state(window, keep, prefill, before, k):
    spec = OverwriteLogRotatingCache(window + keep, keep=keep, step=4, max_saved=k)
    ref = RotatingKVCache(window + keep, keep=keep, step=4)
    for c in (spec, ref):
        c.update_and_fetch(*kv(0, prefill))
        feed(c, prefill, before)
    for i in range(k):
        spec.update_and_fetch(*kv(prefill + before + i, 1, salt=0.5))
    spec.undo(k)
    assert spec.offset == ref.offset and spec._start == ref._start
    assert bitwise(spec.keys, ref.keys) and bitwise(spec.values, ref.values)


def test_log_keeps_only_the_last_max_saved_appends():
    spec, ref = OverwriteLogRotatingCache(4, step=4, max_saved=2), RotatingKVCache(4, step=4)
    for c in (spec, ref):
        c.update_and_fetch(*kv(0, 9))
    spec.update_and_fetch(*kv(9, 1, salt=0.5))
    ref.update_and_fetch(*kv(9, 1, salt=0.5))           # the first append falls out of the log: it stays
    feed(spec, 10, 2)
    assert spec.pending == 2
    spec.undo(2)
    assert spec.offset == ref.offset == 10 and bitwise(spec.keys, ref.keys) and bitwise(spec.values, ref.values)
    with pytest.raises(ValueError, match=r"\[0, 0\]"):
        spec.undo(1)
