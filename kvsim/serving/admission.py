"""The admission queue: in front of the pool, it decides whether a request waits or is turned away.

Contract (pure Python + numpy; deterministic for a given workload)
- The pool only counts: :class:`SlotPool` (and :class:`kvsim.cache.pool.CachePool`, the same
  contract on real MLX caches) hands out strictly increasing, never reused ids and raises
  :class:`PoolFullError` while ``max_sequences`` are active. It never waits and never rejects.
- :class:`AdmissionQueue` sits in front of such a pool and decides, per arrival, with a policy:
  ``"wait"``: a bounded FIFO queue of ``max_queue`` requests; a request that finds no free slot
  waits, one that also finds the queue full is rejected (HTTP 503); a released slot goes to the
  head of the queue. ``"busy"``: no queue at all; a request that finds no free slot is rejected
  at once (HTTP 503). The queue learns that the pool is full only from ``PoolFullError``.
- :func:`simulate_admission` drives the queue with the serving simulator's requests
  (:func:`kvsim.serving.workload.make_workload`): time in iterations; an admitted request of
  o output tokens holds its slot for o iterations (its first token comes at the end of its first
  iteration, as in :mod:`kvsim.serving.sim`), so time-to-first-token = wait + 1 iterations.
  At each iteration: finished requests release, the queue admits from its head, then the
  iteration's arrivals are admitted, queued or rejected in order.
- :func:`admission_sweep` gives, per arrival rate and policy, queue length over time,
  time-to-first-token per admitted request and the rejected count: plain data for a plot;
  :func:`sweep_table` one row per (policy, rate): mean and p95 TTFT, rejected share, longest queue.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from ..calc.units import InputError
from .workload import Workload, make_workload

POLICIES = ("wait", "busy")
HTTP_BUSY = 503  # what the server answers a rejected request


class PoolFullError(RuntimeError):
    """allocate() while max_sequences sequences are active (the only error a full pool raises)."""


def _positive_int(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class SlotPool:
    """The pool's bookkeeping without arrays: ids from 0, never reused; PoolFullError when full."""

    def __init__(self, max_sequences: int):
        self.max_sequences = _positive_int("max_sequences", max_sequences)
        self._active: set[int] = set()
        self.next_id = 0

    def allocate(self, prompt_tokens: int = 0) -> int:
        """A new id (strictly increasing); PoolFullError while max_sequences are active."""
        if len(self._active) >= self.max_sequences:
            raise PoolFullError(f"pool is full: {len(self._active)} of max_sequences={self.max_sequences} active")
        seq_id, self.next_id = self.next_id, self.next_id + 1
        self._active.add(seq_id)
        return seq_id

    def release(self, seq_id: int) -> None:
        if seq_id not in self._active:
            raise InputError(f"sequence id {seq_id!r} is not active")
        self._active.remove(seq_id)

    def __len__(self):
        return len(self._active)


@dataclass(frozen=True)
class Decision:
    """What the queue did with one request: 'admitted' (with its id), 'queued' or 'rejected' (503)."""

    request: int
    outcome: str
    seq_id: int | None = None
    status: int = 200


class AdmissionQueue:
    """Wait (bounded FIFO) or busy (reject at once) in front of a pool that raises PoolFullError."""

    def __init__(self, pool, policy: str = "wait", max_queue: int = 16):
        if policy not in POLICIES:
            raise InputError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
        if policy == "wait":
            _positive_int("max_queue", max_queue)
        self.pool, self.policy, self.max_queue = pool, policy, max_queue if policy == "wait" else 0
        self.waiting: deque[tuple[int, int]] = deque()   # (request, prompt_tokens), FIFO

    def _try(self, request: int, prompt_tokens: int) -> Decision | None:
        try:
            return Decision(request, "admitted", self.pool.allocate(prompt_tokens))
        except PoolFullError:
            return None

    def arrive(self, request: int, prompt_tokens: int = 0) -> Decision:
        """A new request: admitted if the pool takes it (and nobody waits before it), else queued or 503."""
        if not self.waiting:
            admitted = self._try(request, prompt_tokens)
            if admitted:
                return admitted
        if len(self.waiting) < self.max_queue:
            self.waiting.append((request, prompt_tokens))
            return Decision(request, "queued")
        return Decision(request, "rejected", status=HTTP_BUSY)

    def admit_waiting(self) -> list[Decision]:
        """Admit from the head of the queue while the pool takes them (FIFO: never skip the head)."""
        out = []
        while self.waiting:
            admitted = self._try(*self.waiting[0])
            if admitted is None:
                break
            self.waiting.popleft()
            out.append(admitted)
        return out


@dataclass(frozen=True)
class AdmissionResult:
    """One run: per iteration the queue length and running count; per request its fate and TTFT."""

    policy: str
    rate: float | None
    max_sequences: int
    max_queue: int
    queue_length: np.ndarray      # (iterations,) requests waiting at the end of each iteration
    running: np.ndarray           # (iterations,) sequences holding a slot during each iteration
    ttft_iterations: np.ndarray   # (requests,) admit - arrival + 1; nan for a rejected request
    rejected: np.ndarray          # (requests,) bool: answered 503

    @property
    def rejected_count(self) -> int:
        return int(self.rejected.sum())

    @property
    def mean_ttft(self) -> float:
        """Mean time-to-first-token over admitted requests, in iterations (nan if none)."""
        done = self.ttft_iterations[~self.rejected]
        return float(done.mean()) if done.size else float("nan")

    @property
    def max_queue_length(self) -> int:
        return int(self.queue_length.max(initial=0))


def simulate_admission(workload: Workload, max_sequences: int, policy: str = "wait", max_queue: int = 16,
                       pool=None) -> AdmissionResult:
    """Run the workload through an AdmissionQueue in front of ``pool`` (default a SlotPool).

    Slot held for o iterations from admission; TTFT = admit iteration - arrival + 1.
    """
    pool = SlotPool(max_sequences) if pool is None else pool
    queue = AdmissionQueue(pool, policy, max_queue)
    n = len(workload)
    arrival, output = workload.arrival.astype(np.int64), workload.output_tokens.astype(np.int64)
    ttft, rejected = np.full(n, np.nan), np.zeros(n, dtype=bool)
    ends: dict[int, list[int]] = {}            # iteration -> ids whose slot frees at its start
    queue_len, running, t, nxt = [], [], 0, 0

    def admitted(d: Decision, now: int):
        ttft[d.request] = now - arrival[d.request] + 1
        ends.setdefault(now + int(output[d.request]), []).append(d.seq_id)

    while True:
        for sid in ends.pop(t, []):
            pool.release(sid)
        if nxt == n and not queue.waiting and not ends:   # every request answered and done
            break
        for d in queue.admit_waiting():
            admitted(d, t)
        while nxt < n and arrival[nxt] == t:
            d = queue.arrive(nxt, int(workload.prompt_tokens[nxt]))
            if d.outcome == "admitted":
                admitted(d, t)
            rejected[nxt] = d.outcome == "rejected"
            nxt += 1
        queue_len.append(len(queue.waiting))
        running.append(len(pool))
        t += 1
    return AdmissionResult(policy, None, max_sequences, queue.max_queue, np.array(queue_len, dtype=np.int64),
                           np.array(running, dtype=np.int64), ttft, rejected)


def admission_sweep(rates, max_sequences: int = 8, max_queue: int = 16, num_requests: int = 200,
                    lengths="short", seed: int = 0, policies=POLICIES) -> dict[str, list[AdmissionResult]]:
    """{policy: [result per rate]}: the same seeded requests (make_workload) under each policy."""
    out: dict[str, list[AdmissionResult]] = {p: [] for p in policies}
    for rate in rates:
        workload = make_workload(num_requests, lengths, rate=rate, seed=seed)
        for p in policies:
            out[p].append(replace(simulate_admission(workload, max_sequences, p, max_queue), rate=float(rate)))
    return out


def sweep_table(sweep: dict[str, list[AdmissionResult]]) -> list[dict]:
    """One row per (policy, rate) of :func:`admission_sweep`: TTFT mean / p95 (iterations), 503 share, queue."""
    rows = []
    for policy, results in sweep.items():
        for r in results:
            done = r.ttft_iterations[~r.rejected]
            rows.append({"policy": policy, "rate": r.rate, "mean TTFT": r.mean_ttft,
                         "p95 TTFT": float(np.percentile(done, 95)) if done.size else float("nan"),
                         "rejected": r.rejected_count, "rejected share": r.rejected_count / len(r.rejected),
                         "max queue": r.max_queue_length})
    return rows
