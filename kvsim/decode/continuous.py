"""Continuous (iteration-level) batching: sequences join and leave the running batch between steps.

Contract
- :func:`continuous_generate` (Orca, Yu et al. 2022; vLLM): requests arrive at given steps and wait
  in FIFO order; at the start of every step each waiting request that the pool takes
  (``pool.allocate``, :class:`~kvsim.cache.pool.PoolFullError` = no free slot: it keeps waiting)
  is prefilled alone on its own caches (its first token); in the same step every sequence that was
  already running decodes in ONE batched forward pass (:class:`~kvsim.model.Rows`, each row on its
  own caches). A sequence that has its ``max_new_tokens`` leaves: its slot is released at once and
  the next step may give it to a waiting request.
- Row isolation: every sequence's tokens equal decoding it alone with :func:`~.generate.generate`,
  and its logits are allclose (tested on tiny random-weight models).
- ``supports_batching`` (seed 000): a model that owns recurrent state and whose family does not
  report batching (:func:`kvsim.model.owned_state.supports_batching`) runs one slot at a time.
- ``state_store``: a :class:`~kvsim.model.owned_state.SequenceStateStore`: the pool keeps
  placeholders and the model keeps recurrent state per SequenceId (the seed's design); tokens equal
  the cache-list design.
- The returned :class:`Schedule` has one row per request and one column per step, each cell one of
  ``"", "waiting", "prefill", "decode", "finished"`` (not arrived yet, queued, its prefill step,
  a batched decode step, done): the picture of the batch over time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import mlx.core as mx

from ..cache.pool import CachePool, PoolFullError
from ..calc.units import DEFAULT_STEP
from ..model.owned_state import supports_batching
from .batched import _decode_together, _prefill_alone
from .generate import Generation, cache_dtypes, prompt_list

__all__ = ["Request", "Schedule", "continuous_generate", "CELLS"]

CELLS = ("", "waiting", "prefill", "decode", "finished")


@dataclass(frozen=True)
class Request:
    """A prompt, how many tokens to generate, and the step at which it arrives."""

    prompt: tuple
    max_new_tokens: int
    arrival_step: int = 0


@dataclass(frozen=True)
class Schedule:
    """cells[r][s]: what request r did at step s; batch[s]: sequences in step s's decode pass."""

    cells: tuple[tuple[str, ...], ...]
    batch: tuple[int, ...]
    slots: int

    @property
    def steps(self) -> int:
        return len(self.batch)

    def codes(self) -> tuple[tuple[int, ...], ...]:
        """cells as indices into CELLS (0 = not arrived ... 4 = finished), for an image of the batch."""
        return tuple(tuple(CELLS.index(c) for c in row) for row in self.cells)

    def count(self, cell: str) -> tuple[int, ...]:
        """Per step, how many requests are in state ``cell``."""
        return tuple(sum(row[s] == cell for row in self.cells) for s in range(self.steps))


def _requests(requests, vocab_size) -> list[Request]:
    out = []
    for r in requests:
        r = r if isinstance(r, Request) else Request(*r)
        if not isinstance(r.max_new_tokens, int) or r.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {r.max_new_tokens!r}")
        if not isinstance(r.arrival_step, int) or r.arrival_step < 0:
            raise ValueError(f"arrival_step must be an integer >= 0, got {r.arrival_step!r}")
        out.append(Request(tuple(prompt_list(r.prompt, vocab_size)), r.max_new_tokens, r.arrival_step))
    return out


def continuous_generate(model, requests, max_batch: int = 4, pool: CachePool | None = None, *,
                        state_store=None, kv_dtype: str | None = None,
                        step: int = DEFAULT_STEP) -> tuple[list[Generation], Schedule]:
    """Serve ``requests`` (Request or (prompt, max_new_tokens, arrival_step)) with iteration-level batching.

    Slots = ``max_batch`` (1 if the model cannot batch); returns one Generation per request (in
    request order) and the Schedule.
    """
    reqs = _requests(requests, model.spec.vocab_size)
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
    slots = max_batch if supports_batching(model.spec) else 1
    written, state_dtype = cache_dtypes(model, kv_dtype)
    if pool is None:
        pool = CachePool(model.spec, slots, kv_dtype=kv_dtype, step=step, dtype=state_dtype,
                         state_owner="model" if state_store is not None else "cache")
    arrivals = deque(sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival_step, i)))
    waiting: deque[int] = deque()
    running: dict[int, int] = {}                     # request -> seq id, in admission order
    results: dict[int, Generation] = {}
    cells = [[] for _ in reqs]
    batch, t = [], 0

    def caches_of(r):
        sid = running[r]
        return pool.caches(sid) if state_store is None else state_store.caches_for(sid, pool.caches(sid))

    while arrivals or waiting or running:
        while arrivals and reqs[arrivals[0]].arrival_step <= t:
            waiting.append(arrivals.popleft())
        decoding = [r for r in running if len(results[r].tokens) < reqs[r].max_new_tokens]
        joined = []
        while waiting and len(running) < slots:     # the pool says no with PoolFullError only
            try:
                sid = pool.allocate(len(reqs[waiting[0]].prompt))
            except PoolFullError:
                break
            r = waiting.popleft()
            running[r] = sid
            if state_store is not None:
                state_store.prepare_sequence_state(sid)
            results[r] = _prefill_alone(model, list(reqs[r].prompt), caches_of(r), written)
            joined.append(r)
        if decoding:
            _decode_together(model, [results[r] for r in decoding], [caches_of(r) for r in decoding],
                             written, t)
        batch.append(len(decoding))
        for r in range(len(reqs)):
            cells[r].append("prefill" if r in joined else "decode" if r in decoding else
                            "waiting" if r in waiting else "finished" if r in results and r not in running else "")
        for r in [r for r in running if len(results[r].tokens) >= reqs[r].max_new_tokens]:
            sid = running.pop(r)
            if state_store is not None:
                state_store.release_sequence_state(sid)
            pool.release(sid)
        t += 1
    for res in results.values():
        res.logits = mx.stack(res.logits)
    schedule = Schedule(tuple(tuple(row) for row in cells), tuple(batch), slots)
    return [results[r] for r in range(len(reqs))], schedule
