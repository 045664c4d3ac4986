"""RotatingKVCache: a sliding-window layer's cache, a ring of at most ``max_size`` token slots.

Contract
- Window semantics: the first ``keep`` tokens are sinks that every later query sees; the other
  ``window = max_size - keep`` slots hold the most recent tokens. A query at absolute position p
  sees key q iff ``q <= p`` and (``q < keep`` or ``q > p - window``). With keep=0 that is the
  Hugging Face ``sliding_window`` rule: positions p-W+1..p. The sinks sit inside ``max_size``.
- Layout: position t lives in slot t (t < keep) or ``keep + (t - keep) % ring`` (ring = window +
  rewind_tokens), so every write is a slice assignment into at most two slot ranges and the
  layout is a pure function of the positions held; nothing is ever shifted or re-concatenated.
- Capacity = ``min(allocated_slots(T_peak, step), max_size + rewind_tokens)``: no transient
  ``max_size - 1 + S`` rows are retained after a long prefill (an mlx-lm quirk). For a chunk of S
  tokens the returned keys (the sinks, the ``window - 1`` tokens before the chunk and the S new
  ones) are a temporary built for that call's attention; the ring keeps only its slots.
- Returned keys/values are in temporal order: a view while the window does not wrap around the
  ring, else a copy of the window (O(max_size) per decode step, whatever the offset).
  ``ordered=False`` skips that copy as mlx-lm does: when the window wraps, the whole ring is
  returned as stored (a view) and ``key_positions`` / ``make_mask`` describe that order (slots
  holding no live token get position NOT_HELD and are masked). Attention is the same either way.
- Compared with mlx-lm: identical outputs with keep=0 (checked on a tiny mlx-lm llama); with
  sinks, decode agrees, but mlx-lm's mask for a multi-token chunk hides the sinks from later
  queries of the chunk, while here every query sees them.
- Trim: ``trim(n)`` is exact. While no row has been overwritten (offset <= max_size + rewind_tokens)
  any ``n <= offset`` works. Afterwards ``trimmable_tokens = offset - (start + window - 1)``, where
  ``start`` is the oldest recent position still held: the rewind may only go back as far as every
  key the next query can see is still in the ring. That is 1 token with ``rewind_tokens=0`` and
  ``rewind_tokens + 1`` right after a write with R extra slots (speculative decoding: set it to
  the draft length). ``trim(n)`` rewinds ``min(n, trimmable_tokens)`` and returns that count
  (mlx-lm's contract); it never reaches back past what the ring still holds. ``is_trimmable()`` is
  True only while nothing has been overwritten (mlx-lm's ``offset < max_size``), so mlx-lm's
  speculative decoding and prompt-cache reuse never ask a wrapped ring for a partial trim.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from ..calc.memory import allocated_slots
from ..calc.units import DEFAULT_STEP
from .base import BufferedCache, check_kv, check_step, grow_buffer, step_geometry
from .standard import _geometry

NOT_HELD = 2**31 - 1  # key position of a slot that holds no live token (masked for every query)


def _nonneg_int(name, value, low=0):
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


@lru_cache(maxsize=4096)
def decode_wraps(P: int, keep: int, window: int, ring: int) -> bool:
    """Do the keys a decode step at position P >= keep returns (the sinks, then positions
    max(keep, P - window + 1) .. P) lie in more than one run of slots? A pure function of integers,
    remembered: every layer of a step with the same ring geometry shares one answer."""
    a = max(keep, P - window + 1)                # oldest recent position returned
    first = keep + (a - keep) % ring             # its slot
    return first + (P + 1 - a) > keep + ring or (keep > 0 and first != keep)   # wraps, or sinks not followed by it


class RotatingKVCache(BufferedCache):
    """Sink tokens plus a ring of the most recent ``max_size - keep`` tokens."""

    def __init__(self, max_size: int, keep: int = 0, step: int = DEFAULT_STEP, rewind_tokens: int = 0,
                 ordered: bool = True):
        self.max_size = _nonneg_int("max_size", max_size, 1)
        self.keep = _nonneg_int("keep", keep)
        if keep >= max_size:
            raise ValueError(f"keep must be in [0, max_size - 1] = [0, {max_size - 1}], got {keep}")
        self.rewind_tokens = _nonneg_int("rewind_tokens", rewind_tokens)
        self.step = check_step(step)
        self.ordered = bool(ordered)
        self.window = max_size - keep  # recent tokens a query sees, itself included
        self.ring = self.window + rewind_tokens  # slots after the sinks
        self.keys = self.values = None  # (B, H, capacity, D), capacity <= keep + ring
        self.offset = 0
        self._start = keep  # oldest non-sink position still held; > keep once a row was overwritten
        self._geom = None
        self._ring_memo = (None, None, False)  # (P, S, _ring_answer(P, S)) of the last question

    # ------------------------------------------------------------ layout
    def _slices(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Slot ranges holding positions [lo, hi), oldest first (at most three)."""
        out = []
        if lo < min(hi, self.keep):  # sinks: slot = position
            out.append((lo, min(hi, self.keep)))
        lo = max(lo, self.keep)
        if lo < hi:
            s, n, end = self.keep + (lo - self.keep) % self.ring, hi - lo, self.keep + self.ring
            out += [(s, s + n)] if s + n <= end else [(s, end), (self.keep, self.keep + s + n - end)]
        return out

    def _slots_of(self, ranges) -> list[tuple[int, int]]:
        """Slot ranges holding the positions of several [lo, hi) ranges, adjacent ones merged."""
        merged: list[tuple[int, int]] = []
        for s, e in (r for lo, hi in ranges if lo < hi for r in self._slices(lo, hi)):
            if merged and s == merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        return merged

    def _gather(self, buf, ranges):
        """Positions given as [lo, hi) ranges, read from ``buf`` in temporal order."""
        parts = [buf[..., s:e, :] for s, e in self._slots_of(ranges)] or [buf[..., :0, :]]
        return parts[0] if len(parts) == 1 else mx.concatenate(parts, axis=2)

    def _put(self, buf, x, lo: int):
        """Write x (positions [lo, lo + len)) into its slots; len of the ring part <= ring."""
        i = 0
        for s, e in self._slices(lo, lo + x.shape[2]):
            buf[..., s:e, :] = x[..., i : i + e - s, :]
            i += e - s
        return buf

    def _returned(self, P: int, S: int):
        """Position ranges an update of S tokens at offset P returns: sinks, then [a, P + S)."""
        h = min(self.keep, P)
        return [(0, h), (max(h, P - self.window + 1), P + S)]

    def _fits(self, P: int, S: int) -> bool:
        """Are all returned positions still in the ring after the write? (always for decode)"""
        return P + S - max(self._returned(P, S)[1][0], self.keep) <= self.ring

    def _ring_answer(self, P: int, S: int) -> bool:
        """Return the ring as stored: ordered=False, the answer fits and it wraps around the ring."""
        if self.ordered:
            return False
        if self._ring_memo[:2] == (P, S):  # a decode step asks twice (its mask, then its update)
            return self._ring_memo[2]
        answer = self._ring_answer_unmemoized(P, S)
        self._ring_memo = (P, S, answer)
        return answer

    def _ring_answer_unmemoized(self, P: int, S: int) -> bool:
        """:meth:`_ring_answer` for ordered=False, computed (a function of P, S and the fixed layout)."""
        if S == 1 and P >= self.keep:  # a decode step: the closed form of _ring_answer_by_slots
            return decode_wraps(P, self.keep, self.window, self.ring)
        return self._ring_answer_by_slots(P, S)

    def _ring_answer_by_slots(self, P: int, S: int) -> bool:
        """The general rule: the returned positions fit and lie in more than one run of slots."""
        return not self.ordered and self._fits(P, S) and len(self._slots_of(self._returned(P, S))) > 1

    # ------------------------------------------------------------ update
    def update_and_fetch(self, keys, values):
        """Store S new tokens; return the keys/values the S queries may see, oldest first."""
        g = check_kv(keys, values, self._geom)
        P, S = self.offset, g["S"]
        if S == 1 and P >= self.keep and (P < self.capacity or self.capacity == self.keep + self.ring):
            return self._decode_step(keys, values, g)  # the slot exists already: no growth
        end = P + S
        ranges, fits = self._returned(P, S), self._fits(P, S)
        if end > self.capacity < self.keep + self.ring:  # grow (never once the ring is complete)
            slots = min(allocated_slots(end, self.step), self.keep + self.ring) - self.capacity
            self.keys = grow_buffer(self.keys, slots, keys)
            self.values = grow_buffer(self.values, slots, values)
        if not fits:  # long chunk: old rows must be read before they are overwritten
            old = [(0, ranges[0][1]), (ranges[1][0], P)]
            out_k = mx.concatenate([self._gather(self.keys, old), keys], axis=2)
            out_v = mx.concatenate([self._gather(self.values, old), values], axis=2)
        # keep only what the ring retains: new sinks and the last `ring` recent tokens
        lo = max(P, self.keep, end - self.ring)
        sink = slice(0, max(0, min(self.keep, end) - P))
        for name, x in (("keys", keys), ("values", values)):
            buf = self._put(getattr(self, name), x[..., sink, :], P)
            setattr(self, name, self._put(buf, x[..., lo - P :, :], lo))
        self._start = max(self._start, end - self.ring)
        self._geom, self.offset = g, end
        if not fits:
            return out_k, out_v
        if self._ring_answer(P, S):  # a view of every slot (a new object: later writes can't rebind it)
            return self.keys[..., : self.capacity, :], self.values[..., : self.capacity, :]
        return self._gather(self.keys, ranges), self._gather(self.values, ranges)

    def _decode_step(self, keys, values, g):
        """The common decode step (one token, its slot already allocated): one slot written in place.

        The same result as the general path, which would take a few times longer in Python.
        """
        P = self.offset
        slot = self.keep + (P - self.keep) % self.ring
        self.keys[..., slot:slot + 1, :] = keys
        self.values[..., slot:slot + 1, :] = values
        self._start = max(self._start, P + 1 - self.ring)
        self._geom, self.offset = g, P + 1
        if self._ring_answer(P, 1):  # every slot, as stored: the buffers themselves (valid until the next write)
            return self.keys, self.values
        ranges = self._returned(P, 1)
        return self._gather(self.keys, ranges), self._gather(self.values, ranges)

    def update_step(self, keys, values):
        """:meth:`BaseCache.update_step` for the common decode step (one token, its slot allocated, past the
        sinks): the mask answered from integers (None unless rewound rows sit in the ring), one slot
        written, the keys returned as :meth:`_decode_step` returns them. Anything else: the reference."""
        P, keep, ring = self.offset, self.keep, self.ring
        cap = 0 if self.keys is None else self.keys.shape[2]
        g = step_geometry(keys, values, self._geom)
        if g is None or P < keep or not (P < cap or cap == keep + ring):
            return super().update_step(keys, values)
        one_run = not decode_wraps(P, keep, self.window, ring)          # the keys returned lie in one run of slots
        wraps = not self.ordered and not one_run                        # == _ring_answer(P, 1)
        # all_visible(1), asked before the write: the window in order, or a ring holding exactly the window
        if not wraps or (self.rewind_tokens == 0 and self._start <= P + 1 - ring):
            mask = None
        else:
            mask = self.make_mask(1)
        slot = keep + (P - keep) % ring
        self.keys[:, :, slot:slot + 1] = keys         # (B, H, slots, D)
        self.values[:, :, slot:slot + 1] = values
        self._start = max(self._start, P + 1 - ring)
        self._geom, self.offset = g, P + 1
        if wraps:  # every slot, as stored: the buffers themselves (valid until the next write)
            return self.keys, self.values, mask
        if one_run:  # what _gather returns for one run: one view, the sinks [0, keep) then slots [first, end)
            a = max(keep, P - self.window + 1)
            first = keep + (a - keep) % ring
            lo, hi = (0 if keep else first), first + P + 1 - a
            return self.keys[:, :, lo:hi], self.values[:, :, lo:hi], mask
        ranges = self._returned(P, 1)  # ordered and wrapped: a copy in temporal order
        return self._gather(self.keys, ranges), self._gather(self.values, ranges), mask

    # ------------------------------------------------------------ accounting
    def size(self) -> int:
        return min(self.keep, self.offset) + max(0, self.offset - self._start)

    # ------------------------------------------------------------ rewinding and masks
    @property
    def trimmable_tokens(self) -> int:
        if self._start <= self.keep:  # nothing overwritten yet
            return self.offset
        return max(0, self.offset - (self._start + self.window - 1))

    def trim(self, n: int) -> int:
        n = self._check_trim(n)
        self.offset -= n  # rewound rows stay until the next write overwrites them
        return n

    def all_visible(self, n: int) -> bool:
        """One query sees every key returned: the sinks and the window in temporal order, or the ring
        as stored when it holds exactly the window (no rewind slots, no rewound rows)."""
        if n != 1:
            return False
        if not self._ring_answer(self.offset, 1):
            return True
        return self.rewind_tokens == 0 and self._start <= self.offset + 1 - self.ring

    def key_positions(self, n: int) -> mx.array:
        P, end = self.offset, self.offset + n
        if self._ring_answer(P, n):
            cap = max(self.capacity, min(allocated_slots(end, self.step), self.keep + self.ring))
            return self._slot_positions(end, max(self._start, end - self.ring), cap)
        parts = [mx.arange(lo, hi, dtype=mx.int32) for lo, hi in self._returned(P, n)]
        return mx.concatenate(parts)

    def _slot_positions(self, end: int, start: int, cap: int) -> mx.array:
        """Position held by each of ``cap`` slots once positions < end are written (ring order).

        Sink slot s holds s; ring slot keep + j holds the newest t < end with t = keep + j (mod
        ring), unless that t was never written or is older than ``start`` (the slot then holds a
        rewound row): such slots report NOT_HELD, which no query can see.
        """
        e = end - 1  # the ring answer only arises once end > keep: every sink slot is live
        j = mx.arange(max(0, cap - self.keep), dtype=mx.int32)
        t = e - (((e - self.keep) % self.ring - j) % self.ring)
        t = mx.where((t >= start) & (t >= self.keep), t, NOT_HELD)
        return mx.concatenate([mx.arange(self.keep, dtype=mx.int32), t])

    def visible(self, q_pos, k_pos):
        return (k_pos <= q_pos) & ((k_pos < self.keep) | (k_pos > q_pos - self.window))

    # ------------------------------------------------------------ persistence
    def _held(self):
        return [(0, min(self.keep, self.offset)), (self._start, self.offset)]

    @property
    def state(self) -> tuple:
        if self.keys is None:
            return ()
        if self.size() == 0:
            return self.keys[..., :0, :], self.values[..., :0, :]
        return self._gather(self.keys, self._held()), self._gather(self.values, self._held())

    @property
    def meta_state(self) -> tuple:
        return tuple(str(x) for x in (self.offset, self._start, self.max_size, self.keep,
                                      self.rewind_tokens, self.step, self.capacity, int(self.ordered)))

    @classmethod
    def from_state(cls, state, meta_state):
        offset, start, max_size, keep, rewind, step, capacity, ordered = (int(x) for x in meta_state)
        cache = cls(max_size, keep=keep, step=step, rewind_tokens=rewind, ordered=bool(ordered))
        cache.offset, cache._start = offset, start
        if not state:
            return cache
        keys, values = state
        if keys.shape[2] != cache.size() or capacity > keep + cache.ring:
            raise ValueError(f"state holds {keys.shape[2]} tokens, meta_state implies {cache.size()}")
        cache.keys = grow_buffer(None, capacity, keys)
        cache.values = grow_buffer(None, capacity, values)
        h = min(keep, offset)
        for name, x in (("keys", keys), ("values", values)):
            buf = cache._put(getattr(cache, name), x[..., :h, :], 0)
            setattr(cache, name, cache._put(buf, x[..., h:, :], start))
        cache._geom = _geometry(keys, values)
        return cache
