"""Lesson 10 (the engine): pure numbers for this lesson's pictures (calc and serving only; no MLX, no drawing).

The admission queue in front of the pool, swept over arrival rates, and a burst of requests.

Contract
- :func:`admission_curves`: :func:`kvsim.serving.admission.admission_sweep` (the serving simulator's
  seeded workload, :func:`kvsim.serving.workload.make_workload`) reduced to one array per policy and
  measure, index-aligned with ``rates``: mean and p95 time-to-first-token (iterations), rejected
  requests (HTTP 503), longest queue.
- :func:`admission_at`: both policies at one arrival rate: {policy: AdmissionResult} (queue length and
  running count per iteration).
- :func:`burst`: ``num_requests`` requests that all arrive at iteration 0, each generating
  ``output_tokens`` tokens, through one policy: the same arithmetic a learner can do by hand (the first
  ``max_sequences`` start at once, then the queue drains in waves of ``max_sequences`` every
  ``output_tokens`` iterations).
- :func:`ids_after`: the ids a :class:`kvsim.serving.admission.SlotPool` hands out for a sequence of
  allocate / release operations (ids strictly increase and are never reused).
"""

from __future__ import annotations

import numpy as np

from ...calc.units import InputError, positive_int
from ...serving.admission import POLICIES, AdmissionResult, SlotPool, admission_sweep, simulate_admission
from ...serving.workload import Workload

RATES = (0.02, 0.05, 0.08, 0.11, 0.14, 0.17, 0.2, 0.25, 0.3)  # requests per iteration
MAX_SEQUENCES, MAX_QUEUE, NUM_REQUESTS = 8, 16, 200
LENGTHS = "short"  # the simulator's short-chat lengths: a slot is held for a request's output tokens


def slots_label(slots: int) -> str:
    """'1 slot', '4 slots': the slot count, plural above one."""
    return f"{slots} slot{'s' if slots > 1 else ''}"


def admission_curves(rates=RATES, max_sequences: int = MAX_SEQUENCES, max_queue: int = MAX_QUEUE,
                     num_requests: int = NUM_REQUESTS, lengths=LENGTHS, seed: int = 0) -> dict:
    """{"rates", policy: {"mean_ttft", "p95_ttft", "rejected", "max_queue"}}: one value per rate."""
    sweep = admission_sweep(rates, max_sequences, max_queue, num_requests, lengths, seed)
    out: dict = {"rates": np.asarray(rates, dtype=float)}
    for policy, results in sweep.items():
        done = [r.ttft_iterations[~r.rejected] for r in results]
        out[policy] = {
            "mean_ttft": np.array([r.mean_ttft for r in results]),
            "p95_ttft": np.array([np.percentile(d, 95) if d.size else np.nan for d in done]),
            "rejected": np.array([r.rejected_count for r in results]),
            "max_queue": np.array([r.max_queue_length for r in results]),
        }
    return out


def admission_at(rate: float, max_sequences: int = MAX_SEQUENCES, max_queue: int = MAX_QUEUE,
                 num_requests: int = NUM_REQUESTS, lengths=LENGTHS, seed: int = 0) -> dict[str, AdmissionResult]:
    """{policy: AdmissionResult} for the same seeded requests at one arrival rate."""
    sweep = admission_sweep([rate], max_sequences, max_queue, num_requests, lengths, seed)
    return {policy: results[0] for policy, results in sweep.items()}


def burst(num_requests: int, output_tokens: int, max_sequences: int, max_queue: int = MAX_QUEUE,
          policy: str = "wait") -> AdmissionResult:
    """``num_requests`` requests arriving together at iteration 0, each holding a slot ``output_tokens`` iterations."""
    n = positive_int("num_requests", num_requests)
    output_tokens = positive_int("output_tokens", output_tokens)
    if policy not in POLICIES:
        raise InputError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    workload = Workload(arrival=np.zeros(n, dtype=np.int64), prompt_tokens=np.ones(n, dtype=np.int64),
                        output_tokens=np.full(n, output_tokens, dtype=np.int64), prefix_id=np.full(n, -1))
    return simulate_admission(workload, max_sequences, policy, max_queue)


def ids_after(operations, max_sequences: int = 4) -> list[int]:
    """Ids handed out for ``operations``: "a" allocates, an int releases that id (SlotPool)."""
    pool, handed = SlotPool(max_sequences), []
    for op in operations:
        if op == "a":
            handed.append(pool.allocate())
        else:
            pool.release(op)
    return handed
