"""CachePool: owns one cache set (one cache per layer) per active sequence, as a server would.

Contract
- ``CachePool(spec, max_sequences, kv_dtype=None, step=DEFAULT_STEP, dtype=mx.float32, **options)``;
  each sequence's caches come from :func:`kvsim.cache.make_caches` (``options``: group_size,
  full_precision_tokens, inplace, keep, rewind_tokens). The combination is checked once at
  construction, so ``allocate`` never fails on it later.
- ``allocate(prompt_tokens) -> SequenceId``: ids are ints from 0, strictly increasing and never
  reused, even after a release. Allocating while ``max_sequences`` are active raises
  :class:`PoolFullError`; a failed allocate changes nothing (the next id is not consumed).
- ``release(seq_id)`` drops the sequence's caches (MLX frees the arrays once nothing refers to
  them); an unknown or already released id raises :class:`UnknownSequenceError` (a ValueError
  and a KeyError) naming the id, and changes nothing.
- ``caches(seq_id)``, ``info(seq_id)`` (prompt length, offset, allocation time from
  ``time.monotonic()``, bytes), ``memory_usage_bytes()`` = Σ over sequences and layers of
  ``cache.nbytes`` (every array held: allocated slack and recurrent state included).
- Not thread-safe, like the seeds' pool (not Sync): callers that share a pool between threads
  must hold their own lock around every call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NewType

import mlx.core as mx

from ..calc.config import ModelSpec
from ..calc.units import DEFAULT_STEP

SequenceId = NewType("SequenceId", int)


class PoolFullError(RuntimeError):
    """allocate() while max_sequences sequences are active."""


class UnknownSequenceError(ValueError, KeyError):
    """A sequence id that is not active (never allocated, or already released)."""

    __str__ = Exception.__str__  # KeyError would quote the message


@dataclass(frozen=True)
class SequenceInfo:
    """A sequence as the scheduler sees it, at the moment ``info`` was called."""

    seq_id: SequenceId
    prompt_tokens: int
    offset: int              # tokens its caches have seen (max over layers)
    allocated_at: float      # time.monotonic() seconds at allocate()
    nbytes: int              # Σ cache.nbytes over its layers


@dataclass
class _Sequence:
    caches: list
    prompt_tokens: int
    allocated_at: float


def _make(spec, kv_dtype, step, dtype, options):
    from .factory import make_caches  # lazy: factory imports every layout
    return make_caches(spec, kv_dtype=kv_dtype, step=step, dtype=dtype, **options)


class CachePool:
    """Per-sequence cache sets with a cap on active sequences. Single-threaded (see module doc)."""

    def __init__(self, spec: ModelSpec, max_sequences: int, kv_dtype: str | None = None,
                 step: int = DEFAULT_STEP, dtype=mx.float32, **options):
        if not isinstance(spec, ModelSpec):
            raise ValueError(f"spec must be a kvsim.calc.config.ModelSpec, got {type(spec).__name__}")
        if not isinstance(max_sequences, int) or isinstance(max_sequences, bool) or max_sequences < 1:
            raise ValueError(f"max_sequences must be a positive integer, got {max_sequences!r}")
        self.spec, self.max_sequences = spec, max_sequences
        self._config = (kv_dtype, step, dtype, dict(options))
        _make(spec, *self._config)  # raises now for a combination make_caches rejects
        self._sequences: dict[int, _Sequence] = {}  # insertion order = id order
        self._next_id = 0

    # ------------------------------------------------------------ lifecycle
    def allocate(self, prompt_tokens: int) -> SequenceId:
        """Open a sequence with fresh, empty caches; returns its id (never reused)."""
        if not isinstance(prompt_tokens, int) or isinstance(prompt_tokens, bool) or prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be an integer >= 0, got {prompt_tokens!r}")
        if len(self._sequences) >= self.max_sequences:
            raise PoolFullError(f"pool is full: {len(self._sequences)} of max_sequences="
                                f"{self.max_sequences} active; release one first")
        caches = _make(self.spec, *self._config)  # built before any bookkeeping changes
        seq_id = SequenceId(self._next_id)
        self._sequences[seq_id] = _Sequence(caches, prompt_tokens, time.monotonic())
        self._next_id += 1
        return seq_id

    def release(self, seq_id: int) -> None:
        """Close a sequence and drop its caches."""
        self._get(seq_id)
        del self._sequences[seq_id]

    def _get(self, seq_id) -> _Sequence:
        try:
            return self._sequences[seq_id]
        except (KeyError, TypeError):
            raise UnknownSequenceError(
                f"sequence id {seq_id!r} is not active (active: {list(self._sequences)})") from None

    # ------------------------------------------------------------ queries
    def caches(self, seq_id: int) -> list:
        """The sequence's caches, one per layer (None where a layer caches nothing)."""
        return self._get(seq_id).caches

    def info(self, seq_id: int) -> SequenceInfo:
        seq = self._get(seq_id)
        live = [c for c in seq.caches if c is not None]
        return SequenceInfo(SequenceId(seq_id), seq.prompt_tokens,
                            max((c.offset for c in live), default=0), seq.allocated_at,
                            sum(c.nbytes for c in live))

    def sequence_bytes(self, seq_id: int) -> int:
        """Σ cache.nbytes over the sequence's layers."""
        return self.info(seq_id).nbytes

    def memory_usage_bytes(self) -> int:
        """Bytes of every array held by every active sequence."""
        return sum(c.nbytes for seq in self._sequences.values() for c in seq.caches if c is not None)

    def active_ids(self) -> tuple[SequenceId, ...]:
        """Active ids, oldest first."""
        return tuple(SequenceId(i) for i in self._sequences)

    @property
    def next_id(self) -> int:
        """The id the next successful allocate() will return."""
        return self._next_id

    @property
    def free_slots(self) -> int:
        return self.max_sequences - len(self._sequences)

    def __len__(self) -> int:
        return len(self._sequences)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._sequences

    def __repr__(self):
        return (f"CachePool({self.spec.name!r}, active={len(self)}/{self.max_sequences}, "
                f"next_id={self._next_id}, memory_usage_bytes={self.memory_usage_bytes()})")
