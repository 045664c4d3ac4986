"""Save/load of every cache class to safetensors: exact round trips, plain-JSON header, clear errors."""

import json
import struct
from functools import partial

import mlx.core as mx
import pytest
from lockstep import random_kv
from reference_cache import fingerprint

from kvsim.cache import (
    ChunkedKVCache,
    KVCache,
    LatentCache,
    QuantizedKVCache,
    RecurrentStateCache,
    RotatingKVCache,
    load_caches,
    save_caches,
)
from kvsim.cache.io import load_cache, save_cache

_kv = partial(random_kv, D=32, Dv=32, dtype=mx.bfloat16)  # seeded K, V (1, H=2, S, 32) in bf16


def _filled_caches():
    """One of each class (None for a layer without cache), fed and trimmed a little, bf16."""
    caches = [KVCache(step=8), None, RotatingKVCache(6, keep=1, step=4, rewind_tokens=2),
              ChunkedKVCache(5, step=4), QuantizedKVCache(4, 32, step=8, full_precision_tokens=3),
              LatentCache(step=8), KVCache(inplace=False)]
    for i, c in enumerate(caches):
        if c is None:
            continue
        H = 1 if isinstance(c, LatentCache) else 2
        for S in (7, 1, 3, 1):
            c.update_and_fetch(*_kv(S, H=H, seed=i * 10 + S))
    caches[0].trim(2)
    caches[2].trim(1)
    state = RecurrentStateCache((("conv", (3, 8)), ("ssm", (8, 4))), batch=2, dtype=mx.bfloat16)
    state["ssm"] = mx.ones((2, 8, 4), dtype=mx.bfloat16)
    state.advance(5)
    return caches + [state]


def _header(path):
    """The safetensors JSON header, read by hand (8-byte length, then JSON)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def test_round_trip_every_class_and_continue(tmp_path):
    caches = _filled_caches()
    path = tmp_path / "model.safetensors"
    save_caches(path, caches, {"model": "tiny", "note": "bf16"})
    loaded, meta = load_caches(path)
    assert meta == {"model": "tiny", "note": "bf16"}
    assert [type(c).__name__ for c in loaded] == [type(c).__name__ for c in caches]
    for a, b in zip(caches, loaded):
        if a is None:
            assert b is None
            continue
        assert fingerprint(a) == fingerprint(b)
        assert a.nbytes == b.nbytes and a.capacity == b.capacity and a.offset == b.offset
    for i in (0, 2, 3, 6):  # the structural layouts continue identically after loading
        x, y = caches[i].update_and_fetch(*_kv(2, seed=99)), loaded[i].update_and_fetch(*_kv(2, seed=99))
        assert all(mx.array_equal(p, q).item() for p, q in zip(x, y))


def test_file_is_plain_safetensors_with_only_filled_rows(tmp_path):
    cache = KVCache()
    cache.update_and_fetch(*_kv(5))
    path = tmp_path / "one.safetensors"
    save_cache(path, cache, metadata={"who": "test"})
    header = _header(path)
    meta = header.pop("__metadata__")
    assert all(isinstance(v, str) for v in meta.values())
    assert meta["0.class"] == "KVCache" and json.loads(meta["0.meta_state"])[0] == "5"
    assert meta["user.who"] == "test"
    assert {k: v["shape"] for k, v in header.items()} == {"0.0": [1, 2, 5, 32], "0.1": [1, 2, 5, 32]}
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    assert load_cache(path, KVCache).capacity == 256  # slack re-allocated, not stored


def test_empty_and_fully_trimmed_caches_round_trip(tmp_path):
    empty, trimmed = RotatingKVCache(4), KVCache(step=4)
    trimmed.update_and_fetch(*_kv(3))
    trimmed.trim(3)
    save_caches(tmp_path / "e.safetensors", [empty, trimmed])
    a, b = load_caches(tmp_path / "e.safetensors")[0]
    assert fingerprint(a) == fingerprint(empty) and fingerprint(b) == fingerprint(trimmed)
    assert b.nbytes == trimmed.nbytes > 0 and b.offset == 0


def test_errors(tmp_path):
    cache = KVCache()
    cache.update_and_fetch(*_kv(2))
    with pytest.raises(ValueError, match="must end with .safetensors"):
        save_cache(tmp_path / "x.npz", cache)
    with pytest.raises(ValueError, match="does not exist"):
        load_cache(tmp_path / "missing.safetensors", KVCache)
    with pytest.raises(ValueError, match="metadata must map str to str"):
        save_cache(tmp_path / "m.safetensors", cache, metadata={"n": 3})
    with pytest.raises(ValueError, match=r"caches\[0\] must be a kvsim cache"):
        save_caches(tmp_path / "m.safetensors", ["not a cache"])
    mx.save_safetensors(str(tmp_path / "plain.safetensors"), {"a": mx.zeros(2)})
    with pytest.raises(ValueError, match="not a kvsim cache file"):
        load_cache(tmp_path / "plain.safetensors")
    save_cache(tmp_path / "r.safetensors", RotatingKVCache(4))
    with pytest.raises(ValueError, match="holds a RotatingKVCache, not a KVCache"):
        load_cache(tmp_path / "r.safetensors", KVCache)
    save_caches(tmp_path / "two.safetensors", [cache, cache])
    with pytest.raises(ValueError, match="use load_caches"):
        load_cache(tmp_path / "two.safetensors")


def test_unknown_class_name_is_refused(tmp_path):
    path = tmp_path / "evil.safetensors"
    meta = {"kvsim.format": "kvsim-cache-1", "kvsim.layers": "1", "0.class": "os.system",
            "0.meta_state": "[]", "0.n_state": "0"}
    mx.save_safetensors(str(path), {"x": mx.zeros(1)}, metadata=meta)
    with pytest.raises(ValueError, match="'os.system' is not a kvsim cache"):
        load_caches(path)
