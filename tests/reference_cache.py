"""A naive reference cache for tests: keep every K/V by concatenation, apply the rule by slicing.

Contract
- ``ReferenceCache(rule)`` stores all T tokens ever seen (trim drops the last n, always exactly).
- ``update_and_fetch`` returns the keys/values of every position that at least one of the S new
  queries may see, found by evaluating the visibility rule on all (query, key) pairs: no rings,
  no slots, no arithmetic shortcuts. ``visibility_mask(N)`` is that same rule, restricted to those keys.
- Rules: ``full`` (k <= q); ``sliding`` with ``max_size``/``keep`` (the ``keep`` first tokens plus
  the ``max_size - keep`` most recent, the query included); ``chunked`` with ``chunk_size``
  (same chunk, k <= q).
- :func:`attention` is plain softmax(Q K^T / sqrt(d), masked) V, for comparing outputs.
Slow on purpose (O(T·S) per call); for tiny test shapes only.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from kvsim.cache import load_cache, save_cache


def visible(rule: str, q: np.ndarray, k: np.ndarray, max_size=None, keep=0, chunk_size=None):
    """Boolean array: may the query at position q attend to the key at position k?"""
    causal = k <= q
    if rule == "full":
        return causal
    if rule == "sliding":
        recent = q - k < max_size - keep  # the query itself counts as one of the recent tokens
        return causal & ((k < keep) | recent)
    if rule == "chunked":
        return causal & (k // chunk_size == q // chunk_size)
    raise ValueError(f"rule must be full, sliding or chunked, got {rule!r}")


class ReferenceCache:
    """Everything concatenated; the attention rule applied by slicing at each call."""

    def __init__(self, rule: str = "full", **params):
        self.rule, self.params = rule, params
        self.keys = self.values = None  # (B, H, offset, D): every token ever seen
        self.offset = 0

    def _rule(self, n: int):
        """(visible-key positions, mask) for the next n queries."""
        q = np.arange(self.offset, self.offset + n)[:, None]
        k = np.arange(self.offset + n)[None, :]
        vis = visible(self.rule, q, k, **self.params)
        idx = np.nonzero(vis.any(axis=0))[0]
        return idx, vis[:, idx]

    def update_and_fetch(self, keys, values):
        idx, _ = self._rule(keys.shape[2])
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = mx.concatenate([self.keys, keys], axis=2)
            self.values = mx.concatenate([self.values, values], axis=2)
        self.offset += keys.shape[2]
        sel = mx.array(idx.astype(np.int32))
        return mx.take(self.keys, sel, axis=2), mx.take(self.values, sel, axis=2)

    def key_positions(self, n: int) -> np.ndarray:
        return self._rule(n)[0]

    def visibility_mask(self, n: int) -> mx.array:
        return mx.array(self._rule(n)[1])

    def trim(self, n: int) -> int:
        n = min(n, self.offset)
        self.offset -= n
        if self.keys is not None:
            self.keys = self.keys[..., : self.offset, :]
            self.values = self.values[..., : self.offset, :]
        return n


def attention(queries, keys, values, mask) -> mx.array:
    """softmax(Q K^T / sqrt(d) where mask else -inf) V; shapes (B, H, N, D), (B, H, L, D), (N, L)."""
    scores = (queries @ keys.swapaxes(-1, -2)) / math.sqrt(queries.shape[-1])  # (B, H, N, L)
    scores = mx.where(mask, scores, -mx.inf)
    return mx.softmax(scores, axis=-1) @ values  # (B, H, N, D_v)


def compare_update(cache, ref: ReferenceCache, keys, values, queries=None) -> None:
    """One update on both caches; AssertionError naming the first thing that differs.

    Compares, for the S new tokens: the mask (taken before the update), the returned keys and
    values (shape and elements), the offset, and ``attention(queries, ...)`` when queries are given.
    A cache with ``ordered=False`` may return keys in storage order, plus rows no query sees:
    its keys are compared after keeping the visible ones and sorting them by key position.
    """
    S = keys.shape[2]
    mask, ref_mask = cache.visibility_mask(S), ref.visibility_mask(S)
    given = cache.make_mask(S)  # what attention gets: None only when every key is visible
    if cache.all_visible(S):
        assert given is None and bool(np.array(mask).all()), f"all_visible({S}) but the mask hides keys"
    else:
        assert given is not None and np.array_equal(np.array(given), np.array(mask))
    pos, ref_pos = np.array(cache.key_positions(S)), ref.key_positions(S)
    out_k, out_v = cache.update_and_fetch(keys, values)
    ref_k, ref_v = ref.update_and_fetch(keys, values)
    assert mask.dtype == mx.bool_ and mask.shape == (S, out_k.shape[2]), f"mask shape {mask.shape}"
    got_k, got_v, got_mask = out_k, out_v, mask
    if not getattr(cache, "ordered", True):  # ring order: keep keys some query sees, sort by position
        cols = np.nonzero(np.array(mask).any(axis=0))[0]
        cols = mx.array(cols[np.argsort(pos[cols], kind="stable")].astype(np.int32))
        pos = pos[np.array(cols)]
        got_k, got_v = mx.take(out_k, cols, axis=2), mx.take(out_v, cols, axis=2)
        got_mask = mx.take(mask, cols, axis=1)
    assert pos.tolist() == ref_pos.tolist(), f"key positions {pos.tolist()} != {ref_pos.tolist()}"
    assert got_mask.shape == ref_mask.shape, f"mask {got_mask.shape} != {ref_mask.shape}"
    assert mx.array_equal(got_mask, ref_mask).item(), f"mask differs at offset {ref.offset - S}"
    assert got_k.shape == ref_k.shape, f"keys shape {got_k.shape} != {ref_k.shape}"
    assert mx.array_equal(got_k, ref_k).item() and mx.array_equal(got_v, ref_v).item(), "keys/values differ"
    assert cache.offset == ref.offset, f"offset {cache.offset} != {ref.offset}"
    if queries is not None:
        got, want = attention(queries, out_k, out_v, mask), attention(queries, ref_k, ref_v, ref_mask)
        assert mx.allclose(got, want, atol=1e-5).item(), "attention outputs differ"


def fingerprint(cache) -> tuple:
    """Everything observable about a cache, as plain Python (for 'unchanged' and round-trip checks)."""
    arrays = tuple(np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a).tolist()
                   for a in cache.state)
    return (type(cache).__name__, cache.offset, cache.size(), cache.capacity, cache.nbytes,
            cache.used_bytes, cache.trimmable_tokens, tuple(cache.meta_state), arrays)


class Lockstep:
    """A kvsim cache and a :class:`ReferenceCache` driven by the same operations (property tests).

    ``slots(peak, offset)`` is the capacity the layout must have; ``layer`` (a LayerSpec) adds the
    check ``nbytes == memory.layer_kv_bytes(layer, peak, view="allocated")`` (T_peak = largest
    offset reached). Keys (B, H, S, k_dim), values (B, H, S, v_dim), float32, from numpy seeds.
    """

    def __init__(self, cache, ref, slots, layer=None, B=1, H=2, k_dim=4, v_dim=3):
        self.cache, self.ref, self.slots, self.layer = cache, ref, slots, layer
        self.shape = (B, H, k_dim, v_dim)
        self.peak = 0

    def update(self, S: int, seed: int) -> None:
        B, H, k_dim, v_dim = self.shape
        rng = np.random.default_rng(seed)
        k, v, q = (mx.array(rng.standard_normal((B, H, S, d)).astype(np.float32)) for d in (k_dim, v_dim, k_dim))
        compare_update(self.cache, self.ref, k, v, q)
        self.peak = max(self.peak, self.cache.offset)

    def trim(self, n: int) -> None:
        """trim(n) rewinds exactly min(n, trimmable_tokens) and says so; the reference rewinds as many.

        is_trimmable() is mlx-lm's capability test: every rewind up to offset would be exact.
        """
        can = self.cache.trimmable_tokens
        assert 0 <= can <= self.cache.offset
        assert self.cache.is_trimmable() == (can == self.cache.offset)
        want = min(n, can)
        assert self.cache.trim(n) == self.ref.trim(want) == want

    def save_load(self, path) -> None:
        """Round-trip through safetensors; the loaded cache replaces the original."""
        save_cache(path, self.cache)
        loaded = load_cache(path, type(self.cache))
        assert fingerprint(loaded) == fingerprint(self.cache), "save/load changed the cache"
        self.cache = loaded

    def check(self) -> None:
        from kvsim.calc.memory import layer_kv_bytes
        c, (B, H, k_dim, v_dim) = self.cache, self.shape
        assert c.offset == self.ref.offset
        assert c.capacity == self.slots(self.peak, c.offset), f"capacity {c.capacity} at peak {self.peak}"
        token_bytes = B * H * (k_dim + v_dim) * 4
        assert c.nbytes == c.capacity * token_bytes and c.used_bytes == c.size() * token_bytes
        if self.layer is not None:
            assert c.nbytes == layer_kv_bytes(self.layer, self.peak, "fp32", B, "allocated", c.step)
