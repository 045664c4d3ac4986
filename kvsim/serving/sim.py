"""Serving simulator: continuous batching over a bounded KV budget, one allocation policy at a time.

Contract (pure numpy + :mod:`kvsim.serving.blocks`; no MLX; deterministic for a given workload)
- Requests: :mod:`kvsim.serving.workload`. Time is counted in iterations (model steps). Every
  iteration a running request generates one token. In its first iteration it stores its prompt
  (prefill); every later iteration stores the token generated before. A request of prompt p and
  output o runs o iterations and stores f = p + o − 1 tokens (its last token is never fed back).
- Memory is ``capacity_tokens`` token slots. Contiguous policies (the paper's Orca baselines,
  :mod:`kvsim.serving.contiguous`): ``max`` reserves max_len slots, ``pow2`` p + 2^⌈log2 o⌉,
  ``oracle`` exactly f, each placed by a buddy allocator (every chunk rounded up to a power of
  two, :mod:`kvsim.serving.buddy`) or first fit, in one address space, so holes are real.
  ``paged`` takes blocks of ``block_size`` on demand from a
  :class:`~kvsim.serving.blocks.BlockAllocator` (optionally sharing full prompt-prefix blocks) and
  preempts the latest admitted request when a block is missing; that request later recomputes its
  prompt and the tokens it generated. Admission is first come, first served.
- Memory split per iteration (slots, physical): token states (KV of stored tokens), reservation
  (allocated, filled later by the same request), internal fragmentation (allocated, never filled),
  cached (free blocks holding reusable prefixes), external fragmentation & others (free while a
  request waits: holes, too little room, watermark or batch cap; and, always, the buddy
  allocator's rounding) and idle (free, nobody waits).
- The loop jumps over iterations in which nothing but growth happens and sums them in closed form
  (:mod:`kvsim.serving.closed_form`, totals in :mod:`kvsim.serving.ledger`), so its cost is per
  event (arrival, admission, completion, preemption), not per token.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..calc import capacity, hardware, memory, registry, weights
from ..calc.search import last_true
from ..calc.units import DEFAULT_BLOCK_SIZE, InputError
from ..calc.validate import as_int

# stated limits of one simulation: per-slot arrays of max_running entries, blocks of capacity_tokens
MAX_RUNNING = 2**16
MAX_CAPACITY_TOKENS = 2**31
from . import closed_form
from .block_pool import cdiv
from .blocks import BlockAllocator
from .contiguous import PLACEMENTS, reservation_tokens
from .ledger import Ledger, SimResult
from .workload import Workload, check_workload, prefix_token_ids

POLICIES = ("max", "pow2", "oracle", "paged")


def capacity_tokens_for(model, accelerator, utilization: float = 0.9, kv_dtype="bf16",
                        weights_dtype="bf16", tp: int = 1, weights_bytes: int | None = None) -> int:
    """KV budget in token slots on one rank: ⌊(memory · utilization − weights / tp) / bytes per token⌋.

    ``model``: a registry name or a ModelSpec; ``accelerator``: a name or an Accelerator. Every
    token is charged all cache layers (the simulator has one pool; windows are not credited).
    """
    spec = registry.load_model(model) if isinstance(model, str) else model
    device = hardware.get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    if weights_bytes is None:
        weights_bytes = weights.weights_bytes(spec, weights_dtype) // tp
    budget = capacity.kv_budget_bytes(device.memory_bytes, utilization, weights_bytes)
    return budget // memory.bytes_per_token(spec, kv_dtype, tp)


def simulate(workload: Workload, policy: str = "paged", capacity_tokens: int = 16384,
             block_size: int = DEFAULT_BLOCK_SIZE, prefix_sharing: bool = False, max_running: int = 256,
             watermark: float = 0.01, placement: str = "buddy", jump: bool = True) -> SimResult:
    """Run the workload under one policy; shares are of capacity_tokens · iterations.

    ``placement`` (contiguous policies): "buddy" (the paper's) or "first_fit". ``jump=False``
    advances one iteration at a time (same results, slower; used by the tests).
    """
    if policy not in POLICIES:
        raise InputError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    if placement not in PLACEMENTS:
        raise InputError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
    if prefix_sharing and policy != "paged":
        raise InputError("prefix_sharing needs policy 'paged'")
    capacity_tokens = as_int("capacity_tokens", capacity_tokens, 1, MAX_CAPACITY_TOKENS)
    as_int("block_size", block_size, 1, capacity_tokens)
    as_int("max_running", max_running, 1, MAX_RUNNING)
    if isinstance(watermark, bool) or not isinstance(watermark, (int, float, np.floating)) or not 0 <= watermark < 1:
        raise InputError(f"watermark must be a number in [0, 1), got {watermark!r}")
    check_workload(workload)  # non-empty, consistent arrays, every request with >= 1 output token
    return _Simulator(workload, policy, int(capacity_tokens), int(block_size), bool(prefix_sharing),
                      int(max_running), float(watermark), placement, jump).run()


class _Simulator:
    """One run. A running request sits in a slot (0..max_running−1); per-slot arrays hold its state."""

    def __init__(self, workload, policy, capacity_tokens, block_size, prefix_sharing, max_running,
                 watermark, placement, jump):
        self.workload, self.policy, self.jump = workload, policy, jump
        self.capacity_tokens, self.block_size = capacity_tokens, block_size
        self.paged, self.prefix_sharing = policy == "paged", prefix_sharing
        # per request
        self.final_tokens = workload.prompt_tokens + workload.output_tokens - 1  # stored when it finishes
        self.prefill_tokens = workload.prompt_tokens.copy()  # to (re)compute at (re)admission
        if self.paged:
            self._init_paged(watermark)
        else:
            self._init_contiguous(placement)
        # per slot: request id; tokens stored (a new request counts prefill − 1: its first
        # iteration stores the prompt); blocks held (paged) or slots held (contiguous);
        # tokens the allocator was told of; first slot of the reservation; admission number
        (self.request_of, self.stored_tokens, self.held, self.allocator_tokens, self.extent_start,
         self.admission_order) = (np.zeros(max_running, dtype=np.int64) for _ in range(6))
        self.free_slots = list(range(max_running))[::-1]
        self.running = np.zeros(0, dtype=np.int64)  # slots of running requests, in admission order
        self.waiting = deque()                      # request ids, first come first served
        self.next_arrival, self.iteration, self.admissions = 0, 0, 0
        self.ledger = Ledger()

    def _init_paged(self, watermark):
        num_blocks = self.capacity_tokens // self.block_size
        longest = cdiv(int(self.final_tokens.max()), self.block_size)
        if longest > num_blocks:
            raise InputError(f"capacity_tokens {self.capacity_tokens} holds {num_blocks} blocks of "
                             f"{self.block_size}; the longest request needs {longest}")
        self.allocator = BlockAllocator(num_blocks, self.block_size, enable_prefix_caching=self.prefix_sharing)
        self.watermark_blocks = int(watermark * num_blocks)
        self.prefix_token_ids = prefix_token_ids(self.workload)

    def _init_contiguous(self, placement):
        w, allocator = self.workload, PLACEMENTS[placement]
        self.placement = placement
        self.reserved_tokens = reservation_tokens(self.policy, w.prompt_tokens, w.output_tokens, w.max_len)
        self.held_tokens = np.array([allocator.block_tokens(n) for n in self.reserved_tokens.tolist()],
                                    dtype=np.int64)  # the reservation, rounded by the allocator
        largest = int(self.reserved_tokens.max())
        if allocator(self.capacity_tokens).alloc(largest) is None:
            raise InputError(f"capacity_tokens {self.capacity_tokens} is smaller than one {self.policy} "
                             f"reservation ({largest} tokens, {allocator.block_tokens(largest)} placed "
                             f"by {placement})")
        self.extents = allocator(self.capacity_tokens)

    # ------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        num_requests = len(self.workload)
        while self.ledger.stats["completed"] < num_requests:
            self._enqueue_arrivals()
            self.admit()
            if not len(self.running):
                self._idle_until_next_arrival()
                continue
            if self.paged:
                self.preempt_for_next_iteration()
                if not len(self.running):
                    continue
            steps = self.horizon()
            self.accumulate(steps)
            self.advance(steps)
        return self.result()

    def _enqueue_arrivals(self):
        arrival = self.workload.arrival
        while self.next_arrival < len(arrival) and arrival[self.next_arrival] <= self.iteration:
            self.waiting.append(self.next_arrival)
            self.next_arrival += 1

    def _idle_until_next_arrival(self):
        if self.next_arrival >= len(self.workload):
            raise RuntimeError("no request is running or arriving but some never finished")
        gap = int(self.workload.arrival[self.next_arrival]) - self.iteration
        cached = self.block_size * self.allocator.num_cached_blocks if self.paged else 0
        self.ledger.record({"cached": gap * cached, "idle": gap * (self.capacity_tokens - cached)},
                           self.iteration, gap, 0, len(self.waiting))
        self.iteration += gap

    # ------------------------------------------------------------ admission and preemption
    def admit(self):
        """Admit waiting requests in order while a slot and memory are free (FCFS: the head blocks)."""
        while self.waiting and self.free_slots:
            request = self.waiting[0]
            prefill = int(self.prefill_tokens[request])
            placed = self._place_paged(request, prefill) if self.paged else self._place_contiguous(request)
            if placed is None:
                break
            self.waiting.popleft()
            self._start(request, prefill, *placed)

    def _place_paged(self, request, prefill):
        """(blocks held, 0, prompt tokens found in the prefix cache), or None below the watermark."""
        prefix_id = int(self.workload.prefix_id[request])
        known = self.prefix_token_ids.get(prefix_id) if self.prefix_sharing else None
        left = self.allocator.num_free_blocks - self.allocator.blocks_needed(known, prefill)
        if left < (self.watermark_blocks if len(self.running) else 0):
            return None  # keep a watermark of free blocks for running requests to grow into
        hit = self.allocator.add_sequence(request, known, num_tokens=prefill)
        self.allocator.mark_computed(request, prefill)
        return cdiv(prefill, self.block_size), 0, hit

    def _place_contiguous(self, request):
        """(slots held, first slot, 0), or None if the allocator finds no free block large enough."""
        start = self.extents.alloc(int(self.reserved_tokens[request]))
        if start is None:
            return None
        return int(self.held_tokens[request]), start, 0

    def _start(self, request, prefill, held, start, hit):
        slot = self.free_slots.pop()
        self.request_of[slot], self.stored_tokens[slot], self.held[slot] = request, prefill - 1, held
        self.allocator_tokens[slot], self.extent_start[slot] = prefill, start
        self.admission_order[slot], self.admissions = self.admissions, self.admissions + 1
        self.ledger.stats["prefill_tokens"] += prefill - hit
        if prefill > self.workload.prompt_tokens[request]:
            self.ledger.stats["recomputed_tokens"] += prefill - hit
        self.running = np.append(self.running, slot)

    def preempt_for_next_iteration(self):
        """Free the latest admitted requests until every running one can store its next token."""
        while True:
            running = self.running
            need = int((cdiv(self.stored_tokens[running] + 1, self.block_size)
                        - self.held[running]).clip(0).sum())
            if need <= self.allocator.num_free_blocks:
                return
            slot = running[np.argmax(self.admission_order[running])]
            request = int(self.request_of[slot])
            self.allocator.free(request)
            # recompute what it stored and the token it generated last (unchanged if it never ran)
            self.prefill_tokens[request] = self.stored_tokens[slot] + 1
            self.waiting.appendleft(request)
            self._remove(slot)
            self.ledger.stats["preemptions"] += 1

    def _remove(self, slot):
        self.running = self.running[self.running != slot]
        self.free_slots.append(int(slot))

    # ------------------------------------------------------------ growth in closed form
    def horizon(self) -> int:
        """Iterations to advance: up to the next completion, arrival (if nobody waits) or full pool."""
        stored, held = self.stored_tokens[self.running], self.held[self.running]
        steps = int((self.final_tokens[self.request_of[self.running]] - stored).min())
        if not self.waiting and self.next_arrival < len(self.workload):
            steps = min(steps, int(self.workload.arrival[self.next_arrival]) - self.iteration)
        if not self.jump:
            steps = 1
        if self.paged:
            free = self.allocator.num_free_blocks

            def fits(j):  # growth by j iterations finds its new blocks (j = 1 does: preempted before)
                return closed_form.new_blocks(stored, held, self.block_size, j) <= free

            if not fits(steps):
                steps = last_true(fits, 1, steps)
        return max(steps, 1)

    def accumulate(self, steps):
        """Add ``steps`` iterations of pure growth (every running request stores one token each)."""
        running, requests = self.running, self.request_of[self.running]
        stored, held, final = self.stored_tokens[running], self.held[running], self.final_tokens[requests]
        num_running = len(running)
        logical = steps * int(stored.sum()) + num_running * steps * (steps + 1) // 2  # Σ_j Σ_i (c_i + j)
        grow = self._paged_growth if self.paged else self._contiguous_growth
        token_states, reserved, held_slots, usable, cached = grow(stored, held, final, requests, steps, logical)
        rounding = held_slots - reserved  # the buddy allocator's rounding (0 when paged or first fit)
        free = steps * self.capacity_tokens - held_slots - cached
        split = {"token_states": token_states, "reservation": usable - token_states,
                 "internal_frag": reserved - usable, "cached": cached, "external_frag": rounding, "idle": 0,
                 "logical_tokens": logical, "buddy_rounding": rounding}
        split["external_frag" if self.waiting else "idle"] += free
        self.ledger.record(split, self.iteration, steps, num_running, len(self.waiting))
        self.ledger.stats["output_tokens"] += steps * num_running  # one token per request per iteration

    def _contiguous_growth(self, stored, held, final, requests, steps, logical):
        """(token states, reserved, held, usable, cached) slot-iterations: reservations keep their size."""
        reserved = steps * int(self.reserved_tokens[requests].sum())
        return logical, reserved, steps * int(held.sum()), steps * int(final.sum()), 0

    def _paged_growth(self, stored, held, final, requests, steps, logical):
        """(token states, reserved = held, held, usable, cached) slot-iterations; a block in several
        tables counts once."""
        bs, allocator = self.block_size, self.allocator
        held_slots, usable = closed_form.paged_slot_iterations(stored, final, bs, steps)
        shared = (int(held.sum()) - allocator.num_used_blocks) * bs  # slots counted more than once
        cached = bs * closed_form.cached_block_iterations(
            stored, held, bs, steps, allocator.num_cached_blocks, allocator.num_free_blocks)
        held_slots -= steps * shared
        return logical - steps * shared, held_slots, held_slots, usable - steps * shared, cached

    def advance(self, steps):
        """Store ``steps`` tokens per running request, take the blocks they need, retire finished ones."""
        running = self.running
        self.stored_tokens[running] += steps
        if self.paged:
            self._take_new_blocks(running)
        self.iteration += steps
        for slot in running[self.stored_tokens[running] == self.final_tokens[self.request_of[running]]]:
            self._finish(slot)

    def _take_new_blocks(self, running):
        grow = running[cdiv(self.stored_tokens[running], self.block_size) > self.held[running]]
        if len(grow):
            new_tokens = self.stored_tokens[grow] - self.allocator_tokens[grow]
            for request, count in zip(self.request_of[grow].tolist(), new_tokens.tolist()):
                self.allocator.append(request, count)
            self.allocator_tokens[grow] = self.stored_tokens[grow]
            self.held[grow] = cdiv(self.stored_tokens[grow], self.block_size)

    def _finish(self, slot):
        if self.paged:
            self.allocator.free(int(self.request_of[slot]))
        else:
            self.extents.release(int(self.extent_start[slot]))
        self._remove(slot)
        self.ledger.stats["completed"] += 1

    def result(self) -> SimResult:
        run = {"policy": self.policy, "block_size": self.block_size if self.paged else None,
               "placement": None if self.paged else self.placement,
               "prefix_sharing": self.prefix_sharing, "capacity_tokens": self.capacity_tokens,
               "num_requests": len(self.workload), "iterations": self.iteration}
        result = self.ledger.result(run, self.capacity_tokens)
        if self.paged:
            result.summary["evictions"] = self.allocator.stats["evictions"]
            result.summary["prefix_hit_tokens"] = self.allocator.stats["hit_tokens"]
        return result
