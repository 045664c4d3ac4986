"""ChunkedKVCache: chunked local attention (Llama 4), at most ``chunk_size`` token slots.

Contract
- The sequence is cut into chunks of C = ``chunk_size`` tokens: positions [k·C, (k+1)·C). A query
  at absolute position p sees key q iff ``q <= p`` and ``q // C == p // C`` (same chunk).
- ``offset`` is the global position (for RoPE); ``start_position`` = ``offset - offset % C``, the
  start of the chunk the next token falls in: the absolute position of the first key the next
  ``update_and_fetch`` returns, which mlx-lm's llama4 reads to build its chunk mask (right at a
  chunk boundary that is the new chunk, whose keys start with the next token). Position t lives
  in slot ``t % C``, so a chunk always starts at slot 0 and a decode step is one slice assignment:
  no reallocation on every step (mlx-lm swings between C and C + 256 slots).
- Capacity = ``min(allocated_slots(T_peak, step), C)``, the calculator's allocated view.
- An update of S tokens at offset P returns the keys from the start of P's chunk to P + S, in
  temporal order; when the S tokens cross a chunk boundary that is a temporary (a concat) and
  the buffer keeps only the newest chunk.
- The buffer holds the chunk of the last token written, from ``held_start`` (its first position)
  to ``offset``: at a boundary that is the whole previous chunk, until the next write reuses its
  slots. ``size()`` = ``trimmable_tokens`` = ``offset - held_start`` (the calculator's kept tokens);
  ``trim(n)`` rewinds ``min(n, trimmable_tokens)`` exactly. ``is_trimmable()`` holds while the
  first chunk is still in the buffer (mlx-lm says True always, and then trims only to its start).
- save/load restores offset and held_start exactly (mlx-lm's state loses the offset).
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.memory import allocated_slots
from ..calc.units import DEFAULT_STEP
from .base import BufferedCache, check_kv, check_step, grow_buffer
from .standard import _geometry


class ChunkedKVCache(BufferedCache):
    """The tokens of the current attention chunk."""

    def __init__(self, chunk_size: int, step: int = DEFAULT_STEP):
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.chunk_size = chunk_size
        self.step = check_step(step)
        self.keys = self.values = None  # (B, H, capacity, D), capacity <= chunk_size
        self.offset = 0
        self.held_start = 0  # first position of the chunk in the buffer (slot 0); a multiple of C
        self._geom = None

    def chunk_start(self, p: int) -> int:
        """First position of the chunk containing p: p - p mod C."""
        return p - p % self.chunk_size

    @property
    def start_position(self) -> int:
        """First position the next update returns (mlx-lm's llama4 mask origin): offset - offset mod C."""
        return self.chunk_start(self.offset)

    def update_and_fetch(self, keys, values):
        """Store S new tokens; return keys/values from the start of the first query's chunk."""
        g = check_kv(keys, values, self._geom)
        P, S = self.offset, g["S"]
        end = P + S
        first, last = self.chunk_start(P), self.chunk_start(end - 1)
        if end > self.capacity < self.chunk_size:  # grow (never once the chunk's slots exist)
            slots = min(allocated_slots(end, self.step), self.chunk_size) - self.capacity
            self.keys = grow_buffer(self.keys, slots, keys)
            self.values = grow_buffer(self.values, slots, values)
        if first == last:  # one chunk: write in place, return a view
            self.keys[..., P - first : end - first, :] = keys
            self.values[..., P - first : end - first, :] = values
            out = self.keys[..., : end - first, :], self.values[..., : end - first, :]
        else:  # crosses a boundary: a temporary for this call; the buffer keeps the last chunk
            out = (mx.concatenate([self.keys[..., : P - first, :], keys], axis=2),
                   mx.concatenate([self.values[..., : P - first, :], values], axis=2))
            self.keys[..., : end - last, :] = keys[..., last - P :, :]
            self.values[..., : end - last, :] = values[..., last - P :, :]
        self._geom, self.offset, self.held_start = g, end, last
        return out

    def maybe_trim_front(self):
        """mlx-lm's llama4 calls this before each forward pass; kvsim never needs it (no-op)."""

    # ------------------------------------------------------------ accounting
    def size(self) -> int:
        return self.offset - self.held_start

    # ------------------------------------------------------------ rewinding and masks
    @property
    def trimmable_tokens(self) -> int:
        return self.offset - self.held_start

    def trim(self, n: int) -> int:
        n = self._check_trim(n)
        self.offset -= n
        return n

    def all_visible(self, n: int) -> bool:
        return n == 1  # one query sees its whole chunk, and only its chunk is returned

    def key_positions(self, n: int) -> mx.array:
        return mx.arange(self.chunk_start(self.offset), self.offset + n, dtype=mx.int32)

    def visible(self, q_pos, k_pos):
        c = self.chunk_size
        return (k_pos <= q_pos) & ((k_pos // c) == (q_pos // c))

    # ------------------------------------------------------------ persistence
    @property
    def state(self) -> tuple:
        if self.keys is None:
            return ()
        return self.keys[..., : self.size(), :], self.values[..., : self.size(), :]

    @property
    def meta_state(self) -> tuple:
        return tuple(str(x) for x in (self.offset, self.held_start, self.chunk_size,
                                      self.step, self.capacity))

    @classmethod
    def from_state(cls, state, meta_state):
        offset, start, chunk_size, step, capacity = (int(x) for x in meta_state)
        cache = cls(chunk_size, step=step)
        if start % chunk_size or not 0 <= offset - start <= chunk_size:
            raise ValueError(f"held_start {start} must be a chunk start within {chunk_size} of offset {offset}")
        cache.offset, cache.held_start = offset, start
        if not state:
            return cache
        keys, values = state
        if keys.shape[2] != offset - start or capacity > chunk_size:
            raise ValueError(f"state holds {keys.shape[2]} tokens, meta_state implies {offset - start}")
        cache.keys = grow_buffer(keys, capacity - keys.shape[2])
        cache.values = grow_buffer(values, capacity - values.shape[2])
        cache._geom = _geometry(keys, values)
        return cache
