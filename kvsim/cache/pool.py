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
  must hold their own lock around every call. ``allocate`` is ``allocate_steps`` run to the end:
  the same operation cut at its reads and writes, so :func:`interleave_allocations` can replay two
  callers' steps in a chosen order (deterministic, no threads) and show the lost update a lock
  prevents.
- Mixed pools: ``allocate(prompt_tokens, spec=other)`` gives one sequence another model's caches
  (say a Jamba beside a Llama); ``memory_usage_bytes()`` is still Σ ``nbytes`` over everything held,
  and equals the calculator's allocated view summed over the sequences (tests/test_pool_seed.py).
- ``state_owner="model"``: recurrent layers get a :class:`StatePlaceholder` (0 bytes, an offset
  for the scheduler) instead of their state, which the model keeps per SequenceId (the seed's
  Jamba/Mamba/RWKV: :class:`kvsim.model.owned_state.SequenceStateStore`). Default ``"cache"``:
  the state lives in the cache list, as in mlx-lm.
- Failures (bad input: ValueError; full: PoolFullError, the only error a full pool raises) leave the
  pool exactly as it was.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, NewType

import mlx.core as mx

from ..calc.config import ModelSpec
from ..calc.units import DEFAULT_STEP
from ..serving.admission import PoolFullError

SequenceId = NewType("SequenceId", int)


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
    model: str = ""          # the spec's name (a pool may hold sequences of several models)


@dataclass
class _Sequence:
    caches: list
    prompt_tokens: int
    allocated_at: float
    spec: ModelSpec


STATE_OWNERS = ("cache", "model")


class StatePlaceholder:
    """What the pool keeps for a layer whose state the model owns: no arrays, only an offset.

    The model's store advances it (``advance(n)``) so the scheduler still sees how far a sequence got.
    """

    nbytes = used_bytes = 0
    rewind_tokens = 0

    def __init__(self, layer_index: int):
        self.layer_index, self.offset = layer_index, 0

    def advance(self, tokens: int) -> None:
        self.offset += tokens

    def trim(self, n: int) -> int:
        return 0  # a state cannot be un-mixed

    def __getitem__(self, name):
        raise TypeError(f"layer {self.layer_index}'s state is owned by the model, not the pool: run the model "
                        "on SequenceStateStore.caches_for(seq_id, pool.caches(seq_id))")

    def __repr__(self):
        return f"StatePlaceholder(layer={self.layer_index}, offset={self.offset})"


def _make(spec, kv_dtype, step, dtype, options, state_owner="cache"):
    from .factory import make_caches  # lazy: factory imports every layout
    caches = make_caches(spec, kv_dtype=kv_dtype, step=step, dtype=dtype, **options)
    if state_owner == "model":  # the model keeps the state per SequenceId; the pool a placeholder
        caches = [StatePlaceholder(i) if layer.kind == "recurrent" else c
                  for i, (layer, c) in enumerate(zip(spec.layers, caches))]
    return caches


class CachePool:
    """Per-sequence cache sets with a cap on active sequences. Single-threaded (see module doc)."""

    def __init__(self, spec: ModelSpec, max_sequences: int, kv_dtype: str | None = None,
                 step: int = DEFAULT_STEP, dtype=mx.float32, state_owner: str = "cache", **options):
        if not isinstance(spec, ModelSpec):
            raise ValueError(f"spec must be a kvsim.calc.config.ModelSpec, got {type(spec).__name__}")
        if not isinstance(max_sequences, int) or isinstance(max_sequences, bool) or max_sequences < 1:
            raise ValueError(f"max_sequences must be a positive integer, got {max_sequences!r}")
        if state_owner not in STATE_OWNERS:
            raise ValueError(f"state_owner must be one of {', '.join(STATE_OWNERS)}, got {state_owner!r}")
        self.spec, self.max_sequences, self.state_owner = spec, max_sequences, state_owner
        self._config = (kv_dtype, step, dtype, dict(options), state_owner)
        _make(spec, *self._config)  # raises now for a combination make_caches rejects
        self._sequences: dict[int, _Sequence] = {}  # insertion order = id order
        self._next_id = 0

    # ------------------------------------------------------------ lifecycle
    def allocate(self, prompt_tokens: int, spec: ModelSpec | None = None) -> SequenceId:
        """Open a sequence with fresh, empty caches (of ``spec``, default the pool's); returns its id (never reused)."""
        steps = self.allocate_steps(prompt_tokens, spec)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def allocate_steps(self, prompt_tokens: int, spec: ModelSpec | None = None) -> Iterator[str]:
        """allocate() cut into its steps: yields the name of each step done, returns the id.

        Steps: check the active count against max_sequences, read next_id, insert the sequence,
        write next_id + 1. Run alone it is allocate(); interleaved with another caller without a
        lock, two callers can read the same next_id (:func:`interleave_allocations`).
        """
        if not isinstance(prompt_tokens, int) or isinstance(prompt_tokens, bool) or prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be an integer >= 0, got {prompt_tokens!r}")
        spec = self.spec if spec is None else spec
        if not isinstance(spec, ModelSpec):
            raise ValueError(f"spec must be a kvsim.calc.config.ModelSpec, got {type(spec).__name__}")
        if len(self._sequences) >= self.max_sequences:
            raise PoolFullError(f"pool is full: {len(self._sequences)} of max_sequences="
                                f"{self.max_sequences} active; release one first")
        yield "check count"
        seq_id = SequenceId(self._next_id)
        yield "read next_id"
        caches = _make(spec, *self._config)  # built before any bookkeeping changes
        self._sequences[seq_id] = _Sequence(caches, prompt_tokens, time.monotonic(), spec)
        yield "insert sequence"
        self._next_id = seq_id + 1
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
                            sum(c.nbytes for c in live), seq.spec.name)

    def spec_of(self, seq_id: int) -> ModelSpec:
        """The model spec whose caches the sequence holds."""
        return self._get(seq_id).spec

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


# ---------------------------------------------------------------- the "not Sync" demonstration
@dataclass(frozen=True)
class RaceStep:
    """One tick of :func:`interleave_allocations`: who moved, what it did, the pool after it."""

    tick: int
    caller: str
    action: str
    next_id: int
    active: tuple[int, ...]


@dataclass(frozen=True)
class RaceResult:
    steps: tuple[RaceStep, ...]
    ids: dict                      # caller -> id its allocate returned
    active: tuple[int, ...]        # ids in the pool at the end

    @property
    def lost_updates(self) -> int:
        """Allocations that returned but hold no sequence of their own (ids handed out twice)."""
        return len(self.ids) - len(set(self.ids.values()) & set(self.active))


def interleave_allocations(pool: CachePool, schedule: str = "ABAB", locked: bool = False,
                           prompt_tokens: int = 1) -> RaceResult:
    """Two callers, "A" and "B", each allocate once; ``schedule`` says who takes the next step.

    Without a lock the steps interleave as written (a lost update when both read next_id before
    either writes it). With ``locked`` a caller holds the lock from its first step to its last:
    a step of the other caller meanwhile only waits ("waits for lock"). Ticks beyond the schedule
    alternate A, B until both are done. Deterministic: no threads.
    """
    if set(schedule) - {"A", "B"}:
        raise ValueError(f"schedule must use only the callers 'A' and 'B', got {schedule!r}")
    running = {c: pool.allocate_steps(prompt_tokens) for c in "AB"}
    ids, steps, holder, tick = {}, [], None, 0
    order = iter(list(schedule) + ["A", "B"] * 8)
    while len(ids) < 2:
        caller = next(order)
        if caller in ids:
            continue
        if locked and holder not in (None, caller):
            action = "waits for lock"
        else:
            holder = caller if locked else None
            try:
                action = next(running[caller])
            except StopIteration as done:
                ids[caller], action, holder = done.value, "write next_id", None
        steps.append(RaceStep(tick, caller, action, pool.next_id, pool.active_ids()))
        tick += 1
    return RaceResult(tuple(steps), ids, pool.active_ids())
