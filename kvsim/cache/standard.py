"""KVCache: the standard layout, one row per token, growing in steps of ``step`` tokens.

Contract
- In place (default): two buffers (B, H, capacity, D); new rows are written by slice assignment
  at ``[offset, offset + S)`` and the views ``[:offset]`` are returned. The buffers grow only when
  full, to ``capacity = allocated_slots(T_peak, step) = ceil(T_peak / step) · step`` where T_peak
  is the largest offset ever reached, so ``nbytes`` equals the calculator's allocated view.
- ``inplace=False`` (the seeds' toggle) concatenates instead: no slack, ``capacity == offset``,
  and every update copies the whole cache. Both modes return identical keys and values.
- ``trim(n)`` rewinds ``min(n, offset)`` tokens and frees nothing; the next update overwrites the
  rewound rows (mlx-lm's ConcatenateKVCache appends after them instead). Always trimmable.
- ``to_quantized(group_size=64, bits=4)`` (mlx-lm's name and defaults, called by its
  ``generate_step`` with ``kv_bits``): a :class:`~kvsim.cache.quantized.QuantizedKVCache` holding
  the same tokens quantized, with its own capacity rule (mlx-lm quantizes the slack too).
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.memory import allocated_slots
from ..calc.units import DEFAULT_STEP
from .base import BufferedCache, check_kv, check_step, grow_buffer, step_geometry
from .quantized import QuantizedKVCache


def _geometry(keys, values) -> dict:
    """The fixed part of check_kv's geometry, read back from stored arrays."""
    B, H, _, k_dim = keys.shape
    return {"B": B, "H": H, "S": 0, "k_dim": k_dim, "v_dim": values.shape[3], "dtype": keys.dtype}


class KVCache(BufferedCache):
    """Every token of every sequence, in temporal order (full attention layers)."""

    def __init__(self, step: int = DEFAULT_STEP, inplace: bool = True):
        self.step = check_step(step)
        self.inplace = bool(inplace)
        self.keys = None  # (B, H, capacity, k_dim)
        self.values = None  # (B, H, capacity, v_dim)
        self.offset = 0
        self._geom = None  # shapes/dtype fixed by the first update

    def update_and_fetch(self, keys, values):
        """Store S new tokens; return all ``offset + S`` keys and values, oldest first."""
        g = check_kv(keys, values, self._geom)
        prev, end = self.offset, self.offset + g["S"]
        if not self.inplace:
            if self.keys is None:
                self.keys, self.values = keys, values
            else:  # copies the whole cache: O(offset) per step
                self.keys = mx.concatenate([self.keys[..., :prev, :], keys], axis=2)
                self.values = mx.concatenate([self.values[..., :prev, :], values], axis=2)
        else:
            if end > self.capacity:  # grow once per `step` tokens, never on every step
                slots = allocated_slots(end, self.step) - self.capacity
                self.keys = grow_buffer(self.keys, slots, keys)
                self.values = grow_buffer(self.values, slots, values)
            self.keys[..., prev:end, :] = keys  # overwrites rows a trim rewound
            self.values[..., prev:end, :] = values
        self._geom, self.offset = g, end
        return self.keys[..., :end, :], self.values[..., :end, :]

    def update_step(self, keys, values):
        """:meth:`BaseCache.update_step` for one token written in place: (all keys, all values, None),
        no mask (one query at the newest position sees every key). Anything else: the reference."""
        g, prev = step_geometry(keys, values, self._geom), self.offset
        if g is None or not self.inplace:
            return super().update_step(keys, values)
        end = prev + 1
        if end > self.keys.shape[2]:  # grow once per `step` tokens, as update_and_fetch does
            slots = allocated_slots(end, self.step) - self.keys.shape[2]
            self.keys, self.values = grow_buffer(self.keys, slots), grow_buffer(self.values, slots)
        self.keys[:, :, prev:end] = keys              # (B, H, T, D): ':, :' indexes faster than '...'
        self.values[:, :, prev:end] = values
        self._geom, self.offset = g, end
        return self.keys[:, :, :end], self.values[:, :, :end], None

    # ------------------------------------------------------------ accounting
    def size(self) -> int:
        return self.offset

    # ------------------------------------------------------------ rewinding and masks
    @property
    def trimmable_tokens(self) -> int:
        return self.offset

    def trim(self, n: int) -> int:
        n = self._check_trim(n)
        self.offset -= n
        if not self.inplace and self.keys is not None:  # concatenation keeps no slack
            self.keys = self.keys[..., : self.offset, :]
            self.values = self.values[..., : self.offset, :]
        return n

    def all_visible(self, n: int) -> bool:
        return n == 1  # one query at the newest position sees every key returned (causal)

    def key_positions(self, n: int) -> mx.array:
        return mx.arange(0, self.offset + n, dtype=mx.int32)

    def to_quantized(self, group_size: int = 64, bits: int = 4) -> QuantizedKVCache:
        """The same tokens in a QuantizedKVCache(bits, group_size, step): every held row quantized."""
        cache = QuantizedKVCache(bits=bits, group_size=group_size, step=self.step)
        if self.offset:
            cache.update_and_fetch(self.keys[..., : self.offset, :], self.values[..., : self.offset, :])
        return cache

    # ------------------------------------------------------------ persistence
    @property
    def state(self) -> tuple:
        if self.keys is None:
            return ()
        return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]

    @property
    def meta_state(self) -> tuple:
        return str(self.offset), str(self.step), str(int(self.inplace)), str(self.capacity)

    @classmethod
    def from_state(cls, state, meta_state):
        offset, step, inplace, capacity = (int(x) for x in meta_state)
        cache = cls(step=step, inplace=bool(inplace))
        if not state:
            return cache
        keys, values = state
        if keys.shape[2] != offset or capacity < offset:
            raise ValueError(f"state holds {keys.shape[2]} tokens but meta_state says offset {offset}, "
                             f"capacity {capacity}")
        if inplace:
            cache.keys = grow_buffer(keys, capacity - offset)
            cache.values = grow_buffer(values, capacity - offset)
        else:
            cache.keys, cache.values = keys, values
        cache.offset, cache._geom = offset, _geometry(keys, values)
        return cache
