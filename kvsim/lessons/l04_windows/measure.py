"""Lesson 04 (sliding windows and chunks): this lesson's MLX runs on real kvsim caches and models.

Reading a real cache's slots: which token each slot of a KV buffer holds as decode goes on.

Contract
- Nothing here models a cache: every number is read back from a real :mod:`kvsim.cache` object
  (KVCache, RotatingKVCache, ChunkedKVCache: anything with a ``keys`` buffer (B, H, capacity, D)).
- Tokens are written with :func:`position_tensor`: K and V of shape (1, 1, S, 1) whose single
  element is the token's absolute position + 1 (float32 holds integers exactly up to 2**24), so
  a slot's value minus 1 names the token stored there and 0 means "never written".
- :func:`slot_positions` reads ``cache.keys[0, 0, :, 0]``: position per slot, -1 if never written.
- :func:`decode_positions` runs decode steps (one token each) and records, after every step, the
  slot contents, the slot that step wrote, the positions ``update_and_fetch`` returned (what that
  token's query attends to) and ``nbytes``, as a :class:`SlotHistory`.
- :func:`ring_history` / :func:`chunk_history`: the same on a fresh RotatingKVCache (window W plus
  sink tokens) or ChunkedKVCache, what lesson 04's slot pictures draw.
- :func:`ring_prompt_nbytes`: a real RotatingKVCache's nbytes after one long prompt (exercise 04.4).

Out-of-order ring slots are harmless: attention over a ring read in storage order equals
attention over the same window read in temporal ("linearized") order.

Contract
- Two real :class:`~kvsim.cache.RotatingKVCache` of the same window and sinks, one with
  ``ordered=True`` (returns the window oldest first, as seed 000's ring "linearizes" it) and one
  with ``ordered=False`` (returns the ring as stored, mlx-lm's way), are fed the same seeded keys
  and values one decode step at a time. RoPE is applied to each key at its own position BEFORE it
  is written, so a key carries its position wherever its slot is; each query attends through
  :func:`~kvsim.cache.sdpa.sdpa` with the mask the cache gives (``visibility_mask``).
- :func:`ring_order_check` returns, per step, the key positions each cache returned and the
  largest |difference| of the two attention outputs (float32; softmax is a sum over keys, so
  only floating-point summation order can differ).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ...cache import ChunkedKVCache, RotatingKVCache
from ...cache.sdpa import sdpa
from ...model.layers import rope


EMPTY = -1  # slot never written


def position_tensor(start: int, count: int = 1, dtype=mx.float32) -> mx.array:
    """(1, 1, count, 1) array holding positions start+1 .. start+count (the token ids as values)."""
    if not isinstance(start, int) or start < 0 or not isinstance(count, int) or count < 1:
        raise ValueError(f"start must be an integer >= 0 and count >= 1, got {start!r}, {count!r}")
    if start + count >= 2**24:
        raise ValueError(f"positions must stay below 2**24 - 1 (float32 integers), got {start + count}")
    return mx.arange(start + 1, start + count + 1, dtype=mx.float32).astype(dtype).reshape(1, 1, count, 1)


def _positions(values: mx.array) -> np.ndarray:
    """Stored values (position + 1, 0 = empty) -> positions (EMPTY = -1), int64."""
    return np.array(values.astype(mx.float32)).astype(np.int64) - 1


def slot_positions(cache) -> np.ndarray:
    """Position held by each slot of ``cache``'s key buffer (capacity entries, EMPTY if never written)."""
    if getattr(cache, "keys", None) is None:
        return np.zeros(0, dtype=np.int64)
    return _positions(cache.keys[0, 0, :, 0])


def write_positions(cache, count: int, dtype=mx.float32) -> np.ndarray:
    """Append ``count`` tokens in one update (a prefill); return the positions it returned."""
    k = position_tensor(cache.offset, count, dtype)
    keys, _ = cache.update_and_fetch(k, k)
    return _positions(keys[0, 0, :, 0])


@dataclass(frozen=True)
class SlotHistory:
    """What a cache's buffer looked like after each decode step (row i = after step i)."""

    positions: np.ndarray  # (steps,) absolute position of the token each step wrote
    slots: np.ndarray  # (steps, capacity) position per slot, EMPTY if never written
    written: np.ndarray  # (steps,) slot index each step wrote (-1 if no slot changed)
    visible: tuple  # per step: positions update_and_fetch returned (oldest first)
    nbytes: np.ndarray  # (steps,) cache.nbytes after each step
    capacity: np.ndarray  # (steps,) cache.capacity after each step

    def visible_mask(self) -> np.ndarray:
        """(steps, capacity) True where a slot holds a position that step's query attended to."""
        return np.stack([np.isin(row, vis) & (row != EMPTY) for row, vis in zip(self.slots, self.visible)])


def decode_positions(cache, steps: int, dtype=mx.float32) -> SlotHistory:
    """Run ``steps`` one-token decode steps on ``cache`` and record its real slots after each."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    rows, written, visible, nbytes, cap, pos = [], [], [], [], [], []
    before = slot_positions(cache)
    for _ in range(steps):
        p = cache.offset
        k = position_tensor(p, 1, dtype)
        keys, _ = cache.update_and_fetch(k, k)
        visible.append(_positions(keys[0, 0, :, 0]))
        after = slot_positions(cache)
        padded = np.full(len(after), EMPTY, dtype=np.int64)
        padded[: len(before)] = before
        changed = np.flatnonzero(after != padded)
        written.append(int(changed[0]) if len(changed) else -1)
        rows.append(after)
        nbytes.append(cache.nbytes)
        cap.append(cache.capacity)
        pos.append(p)
        before = after
    width = max(len(r) for r in rows)
    slots = np.full((steps, width), EMPTY, dtype=np.int64)
    for i, r in enumerate(rows):
        slots[i, : len(r)] = r
    return SlotHistory(np.array(pos), slots, np.array(written), tuple(visible),
                       np.array(nbytes, dtype=np.int64), np.array(cap, dtype=np.int64))


def ring_history(window: int, sinks: int, steps: int) -> tuple[str, SlotHistory]:
    """A fresh RotatingKVCache(max_size=window+sinks, keep=sinks) after ``steps`` decode steps: (name, history)."""
    cache = RotatingKVCache(window + sinks, keep=sinks)
    return f"RotatingKVCache(max_size={window + sinks}, keep={sinks})", decode_positions(cache, steps)


def chunk_history(chunk_size: int, steps: int) -> tuple[str, SlotHistory]:
    """A fresh ChunkedKVCache(chunk_size) after ``steps`` decode steps: (name, history)."""
    return f"ChunkedKVCache(chunk_size={chunk_size})", decode_positions(ChunkedKVCache(chunk_size), steps)


@dataclass(frozen=True)
class RingOrderCheck:
    """Per decode step: positions returned by each cache, and max |out_ordered − out_stored|."""

    ordered_positions: tuple
    stored_positions: tuple
    max_abs_difference: np.ndarray

    def reordered_steps(self) -> int:
        """Steps at which the stored order differed from the temporal order."""
        return sum(list(a) != list(b) for a, b in zip(self.ordered_positions, self.stored_positions))


def ring_order_check(steps: int = 24, window: int = 6, sinks: int = 0, heads: int = 2, head_dim: int = 16,
                     rope_theta: float = 10_000.0, seed: int = 0) -> RingOrderCheck:
    """Decode ``steps`` tokens into an ordered and a storage-order ring; compare attention at every step."""
    caches = (RotatingKVCache(window + sinks, keep=sinks), RotatingKVCache(window + sinks, keep=sinks, ordered=False))
    kq, kk, kv = mx.random.split(mx.random.key(seed), 3)
    q = mx.random.normal((1, heads, steps, head_dim), key=kq)
    k = mx.random.normal((1, heads, steps, head_dim), key=kk)
    v = mx.random.normal((1, heads, steps, head_dim), key=kv)
    positions: tuple[list, list] = ([], [])
    diffs = []
    for t in range(steps):
        q_t = rope(q[:, :, t:t + 1], head_dim, rope_theta, t)
        k_t = rope(k[:, :, t:t + 1], head_dim, rope_theta, t)   # RoPE before the write
        outs = []
        for cache, pos in zip(caches, positions):
            pos.append(np.array(cache.key_positions(1)).tolist())
            mask = cache.visibility_mask(1)
            keys, values = cache.update_and_fetch(k_t, v[:, :, t:t + 1])
            outs.append(sdpa(q_t, keys, values, mask))
        diffs.append(float(mx.abs(outs[0] - outs[1]).max()))
    return RingOrderCheck(tuple(positions[0]), tuple(positions[1]), np.array(diffs))


def ring_prompt_nbytes(window: int = 4096, tokens: int = 5000, num_key_value_heads: int = 8,
                       head_dim: int = 128) -> dict:
    """{"nbytes", "offset", "row_bytes"} of a real bf16 ``RotatingKVCache(window)`` after one ``tokens``-token
    prompt of zero keys and values (``num_key_value_heads`` × ``head_dim``: Mistral 7B's layer by default)."""
    cache = RotatingKVCache(window)
    k = mx.zeros((1, num_key_value_heads, tokens, head_dim), dtype=mx.bfloat16)
    cache.update_and_fetch(k, k)
    return {"nbytes": cache.nbytes, "offset": cache.offset, "row_bytes": 2 * num_key_value_heads * head_dim * 2}
