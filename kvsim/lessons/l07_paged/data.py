"""Lesson 07 (paged attention and serving): pure numbers for this lesson's pictures (calc and serving only; no
MLX, no drawing).

Block tables read from a real :class:`~kvsim.serving.blocks.BlockAllocator`, step by step.

Contract
- :func:`snapshot` copies what an allocator holds right now: each sequence's block table
  (logical block i -> physical block id), its token count, every block's reference count and
  whether a free block still holds a published prefix (``cached``). Nothing is computed here
  that the allocator did not decide.
- :func:`sharing_scenario` drives one real allocator through prefix sharing and copy-on-write:
  request A (system prompt + question) is prefilled and its full blocks published; request B with
  the same system prompt reuses those blocks; A forks a second sample (parallel sampling) that
  shares every block; both samples write a token, so the shared partial last block is copied
  first (CoW); B finishes. Returns one :class:`BlockSnapshot` per step.
- :func:`sharing_savings`: blocks that N requests with one common system prompt hold with and
  without prefix sharing, measured on real allocators.

Capacity tables: how many sequences fit per model, accelerator and context length.

Contract (pure arithmetic over kvsim.calc.memory / capacity / hardware / registry / weights; no MLX)
- KV budget per rank = memory · utilization − weights / tp (:func:`kvsim.calc.capacity.kv_budget_bytes`);
  utilization defaults to 0.9 on GPUs (vLLM 0.33's own gpu_memory_utilization is 0.92) and 0.75 on
  Macs (macOS lets the GPU wire about that much unified memory by default). Tensor parallelism splits KV heads, replicates the MLA
  latent (:mod:`kvsim.calc.memory`).
- Columns, each ⌊budget / bytes of one sequence⌋:
  ``dense``: every sequence reserves the whole context T up front (contiguous max-length
  reservation, 256-token steps; window layers reserve their window);
  ``paged``: blocks of ``block_size`` when every sequence really reaches T (what sequences hold,
  window layers ⌈W/bs⌉ + 1 blocks). Not vLLM's logged "Maximum concurrency", which divides by
  reservation bounds (a window layer reserves W − 1 + 2 × max_num_batched_tokens tokens):
  :mod:`kvsim.calc.engines_vllm`;
  ``paged_chat``: blocks for sequences whose final lengths follow the simulator's long-tailed
  ``chat`` distribution capped at T (mean over 4,096 seeded samples) - what paging gains when
  requests are shorter than the maximum;
  ``quantized``: ``paged`` with a quantized KV dtype (default q8: 8-bit + bf16 scale and bias per 64).
- ``tp`` on GPUs is the smallest power of two with weights / tp ≤ 70 % of usable memory (Macs: 1).
  Rows whose weights leave no KV budget hold 0 sequences and say so in ``note``.
- :func:`capacity_table` returns plain rows (list of dicts); :func:`to_markdown` renders them
  through the one table renderer, :func:`kvsim.calc.tables.format_table`.

A few requests on a real block allocator, step by step: why preemptions can outnumber requests.

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
- :func:`serving_run` / :func:`serving_numbers`: the serving view's seeded simulator run (cached) and the
  numbers its picture and title show.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from dataclasses import dataclass

import numpy as np

from ...calc import capacity, hardware, memory, registry, weights
from ...calc.tables import format_table
from ...calc.units import DEFAULT_BLOCK_SIZE, DEFAULT_STEP, InputError
from ...serving.block_pool import OutOfBlocks, cdiv
from ...serving.blocks import BlockAllocator
from ...serving import fragmentation, sim
from ...serving.workload import make_workload


@dataclass(frozen=True)
class BlockSnapshot:
    """One moment of an allocator: tables, token counts, reference counts, cached blocks."""

    label: str
    block_size: int
    tables: dict          # sequence name -> tuple of physical ids (-1 = released)
    tokens: dict          # sequence name -> tokens held
    ref_count: tuple      # per physical block
    cached: frozenset     # ref 0 but still holding a published prefix (reusable, evictable)
    copies: tuple = ()    # (src, dst) copy-on-write pairs this step made

    @property
    def num_blocks(self) -> int:
        return len(self.ref_count)

    def fill(self, seq: str, i: int) -> int:
        """Tokens in logical block i of ``seq``: bs for full blocks, the remainder for the last."""
        return max(0, min(self.block_size, self.tokens[seq] - i * self.block_size))

    def state(self, b: int) -> str:
        """'shared' (ref > 1), 'used' (ref 1), 'cached' or 'free'."""
        r = self.ref_count[b]
        return "shared" if r > 1 else "used" if r == 1 else "cached" if b in self.cached else "free"

    def owners(self, b: int) -> list[str]:
        return [s for s, table in self.tables.items() if b in table]


def snapshot(alloc: BlockAllocator, label: str, names: dict | None = None, copies=()) -> BlockSnapshot:
    """Copy of ``alloc``'s state; ``names`` maps sequence ids to display names (default str(id))."""
    names = names or {}
    seqs = alloc.sequences()
    cached = frozenset(b for b in range(alloc.num_blocks)
                       if alloc.ref_count[b] == 0 and alloc.block_hashes[b] is not None)
    return BlockSnapshot(label, alloc.block_size,
                         {names.get(s, str(s)): tuple(alloc.block_table(s)) for s in seqs},
                         {names.get(s, str(s)): alloc.num_tokens(s) for s in seqs},
                         tuple(alloc.ref_count), cached, tuple(copies))


def sharing_scenario(block_size: int = 4, num_blocks: int = 12, system_tokens: int = 8,
                     question_tokens: tuple = (3, 5)) -> list[BlockSnapshot]:
    """Prefix sharing, fork and copy-on-write on a real allocator (see module docstring)."""
    if system_tokens < 1 or min(question_tokens) < 1:
        raise InputError("system_tokens and question_tokens must be >= 1")
    alloc = BlockAllocator(num_blocks, block_size, enable_prefix_caching=True)
    system = list(range(1000, 1000 + system_tokens))
    qa = list(range(2000, 2000 + question_tokens[0]))
    qb = list(range(3000, 3000 + question_tokens[1]))
    names = {"A": "A", "A2": "A, sample 2", "B": "B"}
    steps = []

    def snap(label, copies=()):
        steps.append(snapshot(alloc, label, names, copies))

    alloc.add_sequence("A", system + qa)
    alloc.mark_computed("A", len(system + qa))
    snap(f"A: system prompt ({system_tokens}) + question ({question_tokens[0]}) prefilled")
    hit = alloc.add_sequence("B", system + qb)
    alloc.mark_computed("B", len(system + qb))
    snap(f"B: same system prompt, {hit} tokens found in A's published blocks")
    alloc.fork("A", "A2")
    snap("A forks a second sample: every block shared (refs +1, no copy)")
    copies = alloc.append("A", token_ids=[4000])
    copies += alloc.append("A2", token_ids=[5000])
    snap("both samples write a token: the shared last block is copied first", copies)
    alloc.free("B")
    snap("B finishes: its own blocks are freed, full published ones stay cached")
    return steps


def last_step(steps) -> int:
    """The last slider position of a scenario: len(steps) - 1 (steps are numbered from 0)."""
    return len(steps) - 1


def scenario_step(steps, step: int):
    """The snapshot shown at slider ``step``: steps[min(step, last_step(steps))] (the last one past the end)."""
    return steps[min(step, last_step(steps))]


def sharing_savings(num_requests: int, system_tokens: int, question_tokens: int,
                    block_size: int = DEFAULT_BLOCK_SIZE) -> dict:
    """Blocks held by N requests sharing one system prompt, on real allocators with and without sharing.

    Without: N·⌈(P+U)/bs⌉. With: ⌊P/bs⌋ shared full blocks + N·(⌈(P+U)/bs⌉ − ⌊P/bs⌋) (hits stop at
    the last full block of the system prompt, and one token short of a prompt).
    """
    per_request = cdiv(system_tokens + question_tokens, block_size)
    held = {}
    for sharing in (False, True):
        alloc = BlockAllocator(num_requests * per_request, block_size, enable_prefix_caching=sharing)
        for r in range(num_requests):
            tokens = list(range(system_tokens)) + [10**6 + r * 10**4 + i for i in range(question_tokens)]
            alloc.add_sequence(r, tokens)
            alloc.mark_computed(r, len(tokens))
        held["with sharing" if sharing else "without sharing"] = alloc.num_used_blocks
    held["saved %"] = round(100 * (1 - held["with sharing"] / held["without sharing"]), 1)
    return held


MODELS = ("llama-3-8b", "llama-3-70b", "deepseek-v3", "gemma-3-27b")
ACCELERATORS = ("A100 40GB", "A100 80GB", "H100 80GB", "H200 141GB",
                "M4 Pro 48GB", "M4 Max 128GB", "M2 Ultra 192GB", "M3 Ultra 512GB")
CONTEXTS = (4096, 8192, 32768, 131072)
WEIGHTS_DTYPE = {"deepseek-v3": "fp8"}  # released as FP8 weights; the others as bf16
UTILIZATION = {"gpu": 0.9, "apple-silicon": 0.75}
TP_CHOICES = (1, 2, 4, 8, 16, 32)
COLUMNS = ("model", "accelerator", "tp", "context_tokens", "kv_budget_gib", "dense", "paged",
           "paged_chat", "quantized", "note")


def plan_tp(weights_bytes: int, acc, utilization: float) -> int:
    """Smallest power of two tp with weights / tp ≤ 0.7 · memory · utilization (Macs: 1)."""
    if acc.kind != "gpu":
        return 1
    usable = acc.memory_bytes * utilization
    return next((tp for tp in TP_CHOICES if weights_bytes / tp <= 0.7 * usable), TP_CHOICES[-1])


def _chat_lengths(context: int, samples: int = 4096) -> np.ndarray:
    w = make_workload(samples, "chat", max_len=context, seed=0)
    return w.prompt_tokens + w.output_tokens


def capacity_rows(model: str, accelerator: str, contexts=CONTEXTS, kv_dtype: str = "bf16",
                  quantized_kv: str = "q8", block_size: int = DEFAULT_BLOCK_SIZE,
                  utilization: float | None = None, tp: int | None = None) -> list[dict]:
    """One row per context length for one model on one accelerator (see module docstring)."""
    spec = registry.load_model(model)
    acc = hardware.get_accelerator(accelerator)
    util = UTILIZATION[acc.kind] if utilization is None else utilization
    w_dtype = WEIGHTS_DTYPE.get(model, "bf16")
    w_bytes = weights.weights_bytes(spec, w_dtype)
    tp = plan_tp(w_bytes, acc, util) if tp is None else tp
    budget = capacity.kv_budget_bytes(acc.memory_bytes, util, w_bytes / tp)

    def fit(tokens, dtype=kv_dtype, **view):
        per_seq = capacity.per_sequence_bytes(spec, tokens, dtype, tp, "allocated", **view)
        return int(budget // max(int(np.mean(per_seq)), 1))

    rows = []
    for T in contexts:
        note = []
        if budget == 0:
            note.append(f"{w_dtype} weights ({w_bytes / tp / 2**30:.0f} GiB per rank) leave no KV budget")
        if spec.max_position_embeddings and T > spec.max_position_embeddings:
            note.append(f"beyond the model's {spec.max_position_embeddings:,} positions")
        rows.append({
            "model": model, "accelerator": acc.name, "kind": acc.kind, "tp": tp,
            "weights_dtype": w_dtype, "utilization": util, "context_tokens": T,
            "kv_budget_gib": round(budget / 2**30, 1),
            "dense": fit(T, step=DEFAULT_STEP),
            "paged": fit(T, block_size=block_size),
            "paged_chat": fit(_chat_lengths(T), block_size=block_size),
            "quantized": fit(T, quantized_kv, block_size=block_size),
            "quantized_kv": quantized_kv, "block_size": block_size, "note": "; ".join(note),
        })
    return rows


def capacity_table(models=MODELS, accelerators=ACCELERATORS, contexts=CONTEXTS, **kwargs) -> list[dict]:
    """Rows for every model × accelerator × context (keyword arguments go to capacity_rows)."""
    return [row for m in models for a in accelerators
            for row in capacity_rows(m, a, contexts, **kwargs)]


def to_markdown(rows: list[dict], columns=COLUMNS) -> str:
    """A GitHub-flavoured markdown table of ``rows`` (:func:`kvsim.calc.tables.format_table`, floats to 0.1)."""
    return format_table(rows, columns=list(columns), digits=1, style="markdown")


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


STORY_PROMPT_TOKENS = 6  # prompt length of every request in the preemption story


def story_requests(output_tokens: int, requests: int = 4, prompt_tokens: int = STORY_PROMPT_TOKENS) -> tuple:
    """``requests`` identical requests arriving together: ((0, prompt_tokens, output_tokens),) * requests."""
    return ((0, prompt_tokens, output_tokens),) * requests


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


TPS = (1, 2, 4, 8, 16)  # tensor-parallel sizes of the per-GPU bytes picture


def tp_bytes_series(models, kv_dtype="bf16", tps=TPS) -> dict:
    """{"model (MLA latent | n KV heads)": [KV bytes per token on each GPU at tp]} for each model
    (:func:`kvsim.calc.memory.bytes_per_token` with ``tp``: KV heads split, the MLA latent copied)."""
    series = {}
    for name in models:
        spec = registry.load_model(name)
        kind = "MLA latent" if any(x.kind == "mla" for x in spec.layers) else \
            f"{spec.layers[0].num_key_value_heads} KV heads"
        series[f"{name} ({kind})"] = [memory.bytes_per_token(spec, kv_dtype, tp=tp) for tp in tps]
    return series


VIEW_REQUESTS = 200          # requests per simulated run in the serving view (a redraw stays well under a second)


@lru_cache(maxsize=64)
def serving_run(policy: str, block_size: int, rate: float, num_requests: int = VIEW_REQUESTS):
    """One seeded simulator run: ``num_requests`` chat requests at ``rate`` on OPT-13B's A100 40GB KV budget."""
    w = make_workload(num_requests, "chat", rate=rate, seed=0)
    return sim.simulate(w, policy, capacity_tokens=fragmentation.kwon_setup_capacity_tokens(),
                        block_size=block_size)


def serving_numbers(policy: str, block_size: int, rate: float, bins: int = 100) -> dict:
    """The serving view's curves and title numbers: token_states_percent = 100 · summary.share.token_states."""
    res = serving_run(policy, block_size, rate)
    t, shares = fragmentation.split_over_time(res, bins=bins)
    s = res.summary
    return {"t": t, "shares": shares, "summary": s,
            "policy_label": f"blocks of {block_size}" if policy == "paged" else fragmentation.POLICY_LABELS[policy],
            "token_states_percent": 100 * s["share"]["token_states"]}
