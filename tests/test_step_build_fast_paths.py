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
