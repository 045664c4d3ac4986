"""A few requests on a real block allocator, step by step: why preemptions can outnumber requests.

Contract (pure: :class:`~kvsim.serving.blocks.BlockAllocator`, no MLX)
- Requests are (arrival step, prompt tokens, output tokens). Every step: waiting requests are admitted
  first come, first served (a preempted request goes back to the front of the queue) while their blocks
  fit, and their prefill (prompt plus any tokens generated before a preemption) produces one token; every
  other running request appends one token, before any admission; a step that preempted admits nobody
  (vLLM). When a block is missing, the most recently admitted running request is preempted (recompute:
  its blocks are freed, its tokens kept) until the append fits, as :func:`kvsim.serving.sim.simulate`
  does. A finished request frees its blocks.
- :func:`preemption_story` returns per request and step a state code (:data:`STATES`), the preemptions of
  each request, and the allocator's own count, which counts events: one request can be preempted again
  after each readmission, so the events can outnumber the requests.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .block_pool import OutOfBlocks
from .blocks import BlockAllocator

STATES = ("not arrived", "waiting", "prefill", "decode", "preempted", "done")
ABSENT, WAITING, PREFILL, DECODE, PREEMPTED, DONE = range(6)


@dataclass(frozen=True)
class Story:
    """Rows = requests (arrival order), columns = steps; ``preempted`` per request; ``events`` from the allocator."""

    states: np.ndarray
    preempted: tuple[int, ...]
    events: int
    blocks_used: np.ndarray


def _admit(alloc, queue, running, state, done_tokens, req, step):
    while queue:
        i = queue[0]
        try:
            if alloc.preemption_mode(i):
                alloc.resume(i)
            else:
                alloc.add_sequence(i, num_tokens=req[i][1] + done_tokens[i])
        except OutOfBlocks:
            return
        queue.popleft()
        running.append(i)
        state[i, step] = PREFILL


def _append(alloc, i, running, queue, state, preempted, step) -> bool:
    """One more token for running request i, preempting the latest admitted until it fits; False if i was."""
    while True:
        try:
            alloc.append(i, 1)
            return True
        except OutOfBlocks:
            victim = alloc.pick_victim()
            alloc.preempt(victim)
            running.remove(victim)
            queue.appendleft(victim)
            preempted[victim] += 1
            state[victim, step] = PREEMPTED
            if victim == i:
                return False


def preemption_story(requests=((0, 6, 10),) * 4, num_blocks: int = 11,
                     block_size: int = 4, max_steps: int = 80) -> Story:
    """Serve ``requests`` (arrival, prompt, output) on ``num_blocks`` blocks; record every step.

    A step first grows the running requests (decode), then admits waiting ones (prefill).
    """
    alloc = BlockAllocator(num_blocks, block_size, enable_prefix_caching=False)
    n = len(requests)
    state = np.full((n, max_steps), ABSENT, dtype=np.int64)
    done_tokens, preempted, used = [0] * n, [0] * n, []
    queue, running, finished = deque(), [], set()
    for step in range(max_steps):
        for i in list(running):
            if i in running and _append(alloc, i, running, queue, state, preempted, step):
                state[i, step] = DECODE
                done_tokens[i] += 1
        queue.extend(i for i, r in enumerate(requests) if r[0] == step)
        admitted = len(running)
        if not (state[:, step] == PREEMPTED).any():  # as vLLM: no new prefill in a step that preempted
            _admit(alloc, queue, running, state, done_tokens, requests, step)
        for i in running[admitted:]:         # the prefill produces the next token too
            done_tokens[i] += 1
        for i in [i for i in running if done_tokens[i] == requests[i][2]]:
            alloc.free(i)
            running.remove(i)
            finished.add(i)
        for i in range(n):
            if state[i, step] == ABSENT:
                state[i, step] = WAITING if i in queue else DONE if i in finished else ABSENT
        used.append(alloc.num_used_blocks)
        if len(finished) == n:
            return Story(state[:, :step + 1], tuple(preempted), alloc.stats["preemptions"], np.array(used))
    return Story(state, tuple(preempted), alloc.stats["preemptions"], np.array(used))
