"""Undoing a speculative one-token decode on a sliding cache, Gemma 3's way; and padding a ring.

Contract
- :class:`OverwriteLogRotatingCache` (seed 000's Gemma 3 decode lookahead): a
  :class:`~kvsim.cache.RotatingKVCache` without spare slots (``rewind_tokens=0``) that, on every
  one-token write, saves the rows the write overwrites (K and V of that slot; a copy) with the
  offset and window start before it, in a log of at most ``max_saved`` entries (the lookahead
  depth k). ``undo(n)`` pops the last n entries and puts every saved row back: the cache is then
  bitwise the cache before those appends (buffers, offset, window start). ``commit()`` drops the
  log (the speculation was accepted). A multi-token update clears the log (it cannot be undone).
  ``nbytes`` counts the saved rows too: W ring rows always, plus k rows while a lookahead is pending.
- kvsim's own design is spare slots: ``RotatingKVCache(rewind_tokens=R)`` keeps W + R slots so
  that ``trim(n)`` can rewind R + 1 tokens; after it every key a later query can see is the same,
  but the rewound rows themselves are not restored (they are masked until overwritten).
  :func:`kvsim.calc.padded_prefill.lookahead_rows_per_layer` compares their memory.
- :func:`pad_ring_run`: a real RotatingKVCache fed a prompt padded at the end, then trimmed by the
  pads, beside the same prompt unpadded. Keys carry their position so the held positions can be
  read back. Padding past the window evicts real tokens: the rows the unpadded ring holds and the
  padded one lost are returned (empty when the padded length fits the window), with how many pads
  ``trim`` could take back (fewer than padded once the ring wrapped: the offset stays wrong too).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import mlx.core as mx

from ..calc.units import DEFAULT_STEP, positive_int
from .rotating import RotatingKVCache

__all__ = ["OverwriteLogRotatingCache", "PadRun", "pad_ring_run"]


@dataclass(frozen=True)
class _Saved:
    offset: int
    start: int
    capacity: int
    slot: int
    keys: mx.array | None       # (B, H, 1, D) copy of the overwritten row; None if the slot was new
    values: mx.array | None


class OverwriteLogRotatingCache(RotatingKVCache):
    """A ring of W slots that can undo its last ``max_saved`` one-token appends exactly."""

    def __init__(self, max_size: int, keep: int = 0, step: int = DEFAULT_STEP, ordered: bool = True,
                 max_saved: int = 1):
        super().__init__(max_size, keep=keep, step=step, rewind_tokens=0, ordered=ordered)
        self.max_saved = positive_int("max_saved", max_saved, ValueError)
        self._log: deque[_Saved] = deque()

    def update_and_fetch(self, keys, values):
        """Store S tokens; for S = 1, first save the rows the write will overwrite."""
        if not (isinstance(keys, mx.array) and keys.ndim == 4 and keys.shape[2] == 1):
            out = super().update_and_fetch(keys, values)   # validates; a chunk cannot be undone
            self._log.clear()
            return out
        P, cap, start = self.offset, self.capacity, self._start
        slot = P if P < self.keep else self.keep + (P - self.keep) % self.ring
        saved_k = saved_v = None
        if slot < cap:       # the slot exists: copy what it holds (a multiply makes a real copy)
            saved_k, saved_v = self.keys[..., slot:slot + 1, :] * 1, self.values[..., slot:slot + 1, :] * 1
        out = super().update_and_fetch(keys, values)       # bad input raises here, nothing logged
        self._log.append(_Saved(P, start, cap, slot, saved_k, saved_v))
        if len(self._log) > self.max_saved:
            self._log.popleft()
        return out

    @property
    def pending(self) -> int:
        """One-token appends that ``undo`` can still take back."""
        return len(self._log)

    def undo(self, n: int = 1) -> None:
        """Take back the last n one-token appends exactly (ValueError if fewer are logged)."""
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= len(self._log):
            raise ValueError(f"n must be an integer in [0, {len(self._log)}] (appends logged), got {n!r}")
        for _ in range(n):
            s = self._log.pop()
            if s.keys is None:   # the write grew the buffers: shrink them back
                self.keys, self.values = self.keys[..., :s.capacity, :], self.values[..., :s.capacity, :]
            else:
                self.keys[..., s.slot:s.slot + 1, :] = s.keys
                self.values[..., s.slot:s.slot + 1, :] = s.values
            self.offset, self._start = s.offset, s.start

    def commit(self) -> None:
        """The speculation was accepted: forget the saved rows."""
        self._log.clear()

    @property
    def saved_nbytes(self) -> int:
        return sum(s.keys.nbytes + s.values.nbytes for s in self._log if s.keys is not None)

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.saved_nbytes


@dataclass(frozen=True)
class PadRun:
    """Positions a ring holds after a prefill of ``prompt_tokens``, unpadded and padded-then-trimmed."""

    window: int
    prompt_tokens: int
    padded_tokens: int
    held_unpadded: tuple[int, ...]
    held_padded: tuple[int, ...]      # real positions only (pads left over are not listed)
    evicted_real: tuple[int, ...]     # real positions the unpadded ring holds and the padded one lost
    trimmed: int                      # pads trim() could take back (all of them only if nothing wrapped)
    offset_after: int                 # the padded cache's offset after the trim (prompt_tokens if exact)


def _positions_held(cache: RotatingKVCache) -> tuple[int, ...]:
    keys, _ = cache.state
    return tuple(int(x) for x in keys[0, 0, :, 0].tolist())


def pad_ring_run(window: int, prompt_tokens: int, pad_multiple: int) -> PadRun:
    """Prefill a RotatingKVCache(window) with the prompt padded to a multiple of ``pad_multiple``, trim the pads."""
    positive_int("window", window, ValueError)
    positive_int("prompt_tokens", prompt_tokens, ValueError)
    positive_int("pad_multiple", pad_multiple, ValueError)
    padded = -(-prompt_tokens // pad_multiple) * pad_multiple
    # key/value of position t = t (pads included), so the positions held can be read back
    kv = mx.arange(padded, dtype=mx.float32).reshape(1, 1, padded, 1)
    plain, pad = RotatingKVCache(window), RotatingKVCache(window)
    plain.update_and_fetch(kv[:, :, :prompt_tokens], kv[:, :, :prompt_tokens])
    pad.update_and_fetch(kv, kv)
    trimmed = pad.trim(padded - prompt_tokens)   # rewinds only what the ring can (trim's contract)
    held_plain, held_pad = _positions_held(plain), _positions_held(pad)
    held_pad = tuple(t for t in held_pad if t < prompt_tokens)
    lost = tuple(t for t in held_plain if t not in held_pad)
    return PadRun(window, prompt_tokens, padded, held_plain, held_pad, lost, trimmed, pad.offset)
