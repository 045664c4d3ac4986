"""Serving simulator: continuous batching over a bounded KV budget, one allocation policy at a time.

Contract (pure numpy + :mod:`kvsim.serving.blocks`; no MLX; deterministic for a given seed)
- Time is counted in iterations (model steps). In its first iteration an admitted request stores
  its prompt (prefill); every later iteration stores one generated token. A request of prompt p
  and output o holds f = p + o tokens when it finishes and frees its memory.
- Memory is ``capacity_tokens`` token slots. Policies:
  ``max`` reserves max_len contiguous slots, ``pow2`` the next power of two ≥ f, ``oracle`` exactly f
  (contiguous policies place reservations first-fit in one address space, so holes are real);
  ``paged`` takes blocks of ``block_size`` on demand from a :class:`~kvsim.serving.blocks.BlockAllocator`
  (optionally sharing full prompt-prefix blocks) and preempts the latest admitted request
  (recompute) when a block is missing. Admission is first come, first served.
- Memory split per iteration (slots, physical): token states (KV of stored tokens), reservation
  (allocated, filled later by the same request), internal fragmentation (allocated, never filled),
  cached (free blocks holding reusable prefixes), external fragmentation & others (free while a
  request waits: holes, too little room, watermark or batch cap) and idle (free, nobody waits).
- The loop jumps over iterations in which nothing but growth happens and sums them in closed form,
  so its cost is per event (arrival, admission, completion, preemption), not per token.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..calc import capacity, hardware, memory, registry, weights
from ..calc.units import DEFAULT_BLOCK_SIZE
from .blocks import BlockAllocator, cdiv

POLICIES = ("max", "pow2", "oracle", "paged")
SPLIT = ("token_states", "reservation", "internal_frag", "cached", "external_frag", "idle")
# Long-tailed lognormal lengths (mean, sigma); "chat" uses means near ShareGPT's as reported in
# Kwon et al. 2023 (161 prompt / 338 output tokens), "short" near Alpaca's (19 / 58).
LENGTHS = {
    "chat": {"prompt": ("lognormal", 161, 1.0), "output": ("lognormal", 338, 1.0)},
    "short": {"prompt": ("lognormal", 19, 0.6), "output": ("lognormal", 58, 0.8)},
    "long_prompt": {"prompt": ("lognormal", 1500, 0.5), "output": ("lognormal", 120, 0.8)},
    "uniform": {"prompt": ("uniform", 16, 512), "output": ("uniform", 16, 512)},
    "fixed": {"prompt": ("fixed", 128), "output": ("fixed", 128)},
}


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival iteration; ``prefix_id`` −1 = no shared system prompt."""

    arrival: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray
    prefix_tokens: int = 0
    max_len: int = 2048

    def __len__(self):
        return len(self.arrival)


def _sample(rng, spec, n):
    kind, *args = spec
    if kind == "lognormal":  # mean m: mu = ln m − σ²/2
        mean, sigma = args
        return rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)
    if kind == "uniform":
        return rng.integers(args[0], args[1] + 1, n)
    if kind == "fixed":
        return np.full(n, args[0])
    raise ValueError(f"length distribution {kind!r} is not one of lognormal, uniform, fixed")


def make_workload(num_requests: int, lengths="chat", rate: float | None = None, max_len: int = 2048,
                  seed: int = 0, shared_prefix_tokens: int = 0, num_prefixes: int = 1) -> Workload:
    """Seeded requests: Poisson arrivals at ``rate`` per iteration (None = all at 0), lengths clipped
    so that prefix + prompt + output ≤ max_len (output ≥ 1)."""
    if lengths not in LENGTHS and not isinstance(lengths, dict):
        raise ValueError(f"lengths {lengths!r} is not one of {', '.join(LENGTHS)} or a dict")
    if not isinstance(num_requests, int) or num_requests < 1:
        raise ValueError(f"num_requests must be a positive integer, got {num_requests!r}")
    if not 0 <= shared_prefix_tokens <= max_len - 2:
        raise ValueError(f"shared_prefix_tokens must be in [0, {max_len - 2}], got {shared_prefix_tokens}")
    spec = LENGTHS.get(lengths) if isinstance(lengths, str) else lengths
    rng = np.random.default_rng(seed)
    prompt = np.clip(np.rint(_sample(rng, spec["prompt"], num_requests)), 1,
                     max_len - 1 - shared_prefix_tokens).astype(np.int64) + shared_prefix_tokens
    output = np.clip(np.rint(_sample(rng, spec["output"], num_requests)), 1, max_len - prompt)
    if rate is None:
        arrival = np.zeros(num_requests, dtype=np.int64)
    elif rate > 0:
        arrival = np.floor(np.cumsum(rng.exponential(1 / rate, num_requests))).astype(np.int64)
    else:
        raise ValueError(f"rate must be > 0 requests per iteration (or None), got {rate!r}")
    prefix = rng.integers(0, num_prefixes, num_requests) if shared_prefix_tokens else \
        np.full(num_requests, -1)
    return Workload(arrival, prompt, output.astype(np.int64), prefix, shared_prefix_tokens, max_len)


def capacity_tokens_for(model, accelerator, utilization: float = 0.9, kv_dtype="bf16",
                        weights_dtype="bf16", tp: int = 1, weights_bytes: int | None = None) -> int:
    """KV budget in token slots on one rank: ⌊(memory · utilization − weights / tp) / bytes per token⌋.

    ``model``: a registry name or a ModelSpec; ``accelerator``: a name or an Accelerator. Every
    token is charged all cache layers (the simulator has one pool; windows are not credited).
    """
    spec = registry.load_model(model) if isinstance(model, str) else model
    acc = hardware.get_accelerator(accelerator) if isinstance(accelerator, str) else accelerator
    if weights_bytes is None:
        weights_bytes = weights.weights_bytes(spec, weights_dtype) // tp
    budget = capacity.kv_budget_bytes(acc.memory_bytes, utilization, weights_bytes)
    return budget // memory.bytes_per_token(spec, kv_dtype, tp)


@dataclass
class SimResult:
    """``summary``: totals and shares of capacity; ``timeline``: one row per jump (arrays)."""

    summary: dict
    timeline: dict = field(repr=False)


class _Extents:
    """First-fit allocator over one address space of token slots: sorted free [start, end)."""

    def __init__(self, size):
        self.free = [[0, size]]

    def alloc(self, n):
        for seg in self.free:
            if seg[1] - seg[0] >= n:
                start = seg[0]
                seg[0] += n
                if seg[0] == seg[1]:
                    self.free.remove(seg)
                return start
        return None

    def release(self, start, n):
        i = next((i for i, s in enumerate(self.free) if s[0] > start), len(self.free))
        self.free.insert(i, [start, start + n])
        if i + 1 < len(self.free) and self.free[i][1] == self.free[i + 1][0]:  # merge right
            self.free[i][1] = self.free.pop(i + 1)[1]
        if i > 0 and self.free[i - 1][1] == self.free[i][0]:  # merge left
            self.free[i - 1][1] = self.free.pop(i)[1]


def _ceil_sum(n, b):
    """F(n) = Σ_{x=1..n} ⌈x / b⌉ = b·q(q+1)/2 + r(q+1), n = qb + r (vectorized)."""
    q, r = np.divmod(n, b)
    return b * q * (q + 1) // 2 + r * (q + 1)


def _reservation(policy, f, max_len):
    if policy == "max":
        return np.full_like(f, max_len)
    if policy == "pow2":
        return np.minimum(2 ** np.ceil(np.log2(f)).astype(np.int64), max_len)
    return f.copy()


def simulate(workload: Workload, policy: str = "paged", capacity_tokens: int = 16384,
             block_size: int = DEFAULT_BLOCK_SIZE, prefix_sharing: bool = False, max_running: int = 256,
             watermark: float = 0.01, jump: bool = True) -> SimResult:
    """Run the workload under one policy; shares are of capacity_tokens · iterations.

    ``jump=False`` advances one iteration at a time (same results, slower; used by the tests).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    if prefix_sharing and policy != "paged":
        raise ValueError("prefix_sharing needs policy 'paged'")
    for name, value in (("capacity_tokens", capacity_tokens), ("block_size", block_size),
                        ("max_running", max_running)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not 0 <= watermark < 1:
        raise ValueError(f"watermark must be in [0, 1), got {watermark!r}")
    return _Sim(workload, policy, int(capacity_tokens), int(block_size), bool(prefix_sharing),
                int(max_running), float(watermark), jump).run()


class _Sim:
    """One run. Running requests live in slots; arrays are indexed by slot (see simulate)."""

    def __init__(self, w, policy, cap, bs, sharing, max_running, watermark, jump):
        self.w, self.policy, self.cap, self.bs, self.jump = w, policy, cap, bs, jump
        self.paged, self.sharing = policy == "paged", sharing
        self.f = w.prompt_tokens + w.output_tokens       # final tokens per request
        self.p = w.prompt_tokens.copy()                  # tokens to (re)compute at admission
        if self.paged:
            num_blocks = cap // bs
            longest = cdiv(int(self.f.max()), bs)
            if longest > num_blocks:
                raise ValueError(f"capacity_tokens {cap} holds {num_blocks} blocks of {bs}; "
                                 f"the longest request needs {longest}")
            self.alloc = BlockAllocator(num_blocks, bs, enable_prefix_caching=sharing)
            self.wm = int(watermark * num_blocks)
            P = w.prefix_tokens
            self.prefix = {k: [k * 1_000_003 + i for i in range(P)] for k in set(w.prefix_id.tolist())}
        else:
            self.res = _reservation(policy, self.f, w.max_len)
            if self.res.max() > cap:
                raise ValueError(f"capacity_tokens {cap} is smaller than one {policy} reservation "
                                 f"({int(self.res.max())} tokens)")
            self.space = _Extents(cap)
        z = lambda: np.zeros(max_running, dtype=np.int64)  # noqa: E731
        self.rid, self.c, self.A, self.n_al, self.start, self.order = z(), z(), z(), z(), z(), z()
        self.free_slots = list(range(max_running))[::-1]
        self.act = np.zeros(0, dtype=np.int64)
        self.waiting, self.nxt, self.t, self.counter = deque(), 0, 0, 0
        self.acc = {k: 0 for k in SPLIT + ("logical_tokens",)}
        self.sat = {k: 0 for k in SPLIT}                 # same, only iterations with a waiting request
        self.stats = {"completed": 0, "output_tokens": 0, "prefill_tokens": 0,
                      "recomputed_tokens": 0, "preemptions": 0, "running_iterations": 0,
                      "saturated_iterations": 0}
        self.rows = []

    # ------------------------------------------------------------ admission
    def admit(self):
        w, bs = self.w, self.bs
        while self.waiting and self.free_slots:
            r = self.waiting[0]
            p, hit = int(self.p[r]), 0
            if self.paged:
                known = self.prefix.get(int(w.prefix_id[r])) if self.sharing else None
                left = self.alloc.num_free_blocks - self.alloc.blocks_needed(known, p)
                if left < (self.wm if len(self.act) else 0):
                    break  # keep a watermark of free blocks for running requests to grow into
                hit = self.alloc.add_sequence(r, known, num_tokens=p)
                self.alloc.mark_computed(r, p)
                held, start = cdiv(p, bs), 0
            else:
                start = self.space.alloc(int(self.res[r]))
                if start is None:
                    break  # first fit found no hole large enough: FCFS head blocks the queue
                held = int(self.res[r])
            self.waiting.popleft()
            s = self.free_slots.pop()
            self.rid[s], self.c[s], self.A[s], self.n_al[s], self.start[s] = r, p - 1, held, p, start
            self.order[s], self.counter = self.counter, self.counter + 1
            self.stats["prefill_tokens"] += p - hit
            if p > w.prompt_tokens[r]:
                self.stats["recomputed_tokens"] += p - hit
            self.act = np.append(self.act, s)

    def preempt_for_next_iteration(self):
        """Free the latest admitted requests until every running one can store its next token."""
        while True:
            act = self.act
            need = int((cdiv(self.c[act] + 1, self.bs) - self.A[act]).clip(0).sum())
            if need <= self.alloc.num_free_blocks:
                return
            s = act[np.argmax(self.order[act])]
            r = int(self.rid[s])
            self.alloc.free(r)
            if self.c[s] >= self.p[r]:
                self.p[r] = self.c[s]  # recompute prompt + generated tokens on re-admission
            self.waiting.appendleft(r)
            self.remove(s)
            self.stats["preemptions"] += 1

    def remove(self, s):
        self.act = self.act[self.act != s]
        self.free_slots.append(int(s))

    # ------------------------------------------------------------ growth in closed form
    def horizon(self):
        """Iterations to advance: up to the next completion, arrival (if nobody waits) or full pool."""
        act = self.act
        c, A, bs = self.c[act], self.A[act], self.bs
        k = int((self.f[self.rid[act]] - c).min())
        if not self.waiting and self.nxt < len(self.w):
            k = min(k, int(self.w.arrival[self.nxt]) - self.t)
        if not self.jump:
            k = 1
        if self.paged:
            free = self.alloc.num_free_blocks
            cum = lambda j: int((cdiv(c + j, bs) - A).sum())  # noqa: E731  blocks needed by j
            if cum(k) > free:  # largest k whose growth still fits (cum(1) fits: preempted before)
                lo, hi = 1, k
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if cum(mid) <= free else (lo, mid)
                k = lo
        return max(k, 1)

    def accumulate(self, k):
        """Add k iterations of pure growth (every running request stores one token each)."""
        act, bs = self.act, self.bs
        r = self.rid[act]
        c, A, f, n = self.c[act], self.A[act], self.f[r], len(act)
        tokens = k * int(c.sum()) + n * k * (k + 1) // 2
        cached = 0
        if self.paged:
            F = _ceil_sum
            held = bs * int((F(c + k, bs) - F(c, bs)).sum())      # Σ_j Σ_i ⌈(c+j)/bs⌉·bs
            last = (cdiv(f, bs) - 1) * bs                          # first slot of the last block
            usable = bs * (F(np.minimum(c + k, last), bs) - F(np.minimum(c, last), bs)) \
                + f * np.maximum(0, c + k - np.maximum(c, last))   # Σ_j min(held, f)
            usable = int(usable.sum())
            dup = (int(A.sum()) - self.alloc.num_used_blocks) * bs  # shared blocks counted twice
            tokens_p, held, usable = tokens - k * dup, held - k * dup, usable - k * dup
            cached = bs * self._cached_sum(c, A, k)
        else:
            tokens_p, held, usable = tokens, k * int(A.sum()), k * int(f.sum())
        split = {"token_states": tokens_p, "reservation": usable - tokens_p,
                 "internal_frag": held - usable, "cached": cached}
        free = k * self.cap - held - cached
        split["external_frag" if self.waiting else "idle"] = free
        self._add(split, k, n)
        self.acc["logical_tokens"] += tokens
        fresh = int((c == self.p[r] - 1).sum())  # their first iteration is the prefill
        self.stats["output_tokens"] += k * n - fresh
        self.stats["running_iterations"] += k * n

    def _cached_sum(self, c, A, k):
        """Σ_j cached blocks over k iterations: new blocks come from the free list, then evict LRU."""
        cached0 = self.alloc.num_cached_blocks
        free0 = self.alloc.num_free_blocks
        if cached0 == 0:
            return 0
        bs, A_sum = self.bs, int(A.sum())
        cum = lambda j: int(cdiv(c + j, bs).sum()) - A_sum if j else 0  # noqa: E731
        S = lambda j: int((_ceil_sum(c + j, bs) - _ceil_sum(c, bs)).sum()) - j * A_sum  # noqa: E731
        lo, hi = 0, k + 1  # largest j with cum(j) <= free0 - cached0 (no eviction yet)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if cum(mid) <= free0 - cached0 else (lo, mid)
        return lo * cached0 + (k - lo) * free0 - (S(k) - S(lo))

    def _add(self, split, k, n):
        for key, v in split.items():
            self.acc[key] += v
            if self.waiting:
                self.sat[key] += v
        self.stats["saturated_iterations"] += k if self.waiting else 0
        self.rows.append((self.t, k, n, len(self.waiting), *(split.get(s, 0) / k for s in SPLIT)))

    def advance(self, k):
        act, bs = self.act, self.bs
        self.c[act] += k
        if self.paged:
            grow = act[cdiv(self.c[act], bs) > self.A[act]]
            if len(grow):
                for r, k_new in zip(self.rid[grow].tolist(), (self.c[grow] - self.n_al[grow]).tolist()):
                    self.alloc.append(r, k_new)
                self.n_al[grow], self.A[grow] = self.c[grow], cdiv(self.c[grow], bs)
        self.t += k
        for s in act[self.c[act] == self.f[self.rid[act]]]:
            r = int(self.rid[s])
            if self.paged:
                self.alloc.free(r)
            else:
                self.space.release(int(self.start[s]), int(self.A[s]))
            self.remove(s)
            self.stats["completed"] += 1

    # ------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        w, N = self.w, len(self.w)
        while self.stats["completed"] < N:
            while self.nxt < N and w.arrival[self.nxt] <= self.t:
                self.waiting.append(self.nxt)
                self.nxt += 1
            self.admit()
            if not len(self.act):  # idle until the next arrival
                if self.nxt >= N:
                    raise RuntimeError("no request is running or arriving but some never finished")
                gap = int(w.arrival[self.nxt]) - self.t
                cached = self.bs * self.alloc.num_cached_blocks if self.paged else 0
                self._add({"cached": gap * cached, "idle": gap * (self.cap - cached)}, gap, 0)
                self.t += gap
                continue
            if self.paged:
                self.preempt_for_next_iteration()
                if not len(self.act):
                    continue
            k = self.horizon()
            self.accumulate(k)
            self.advance(k)
        return self.result()

    def result(self) -> SimResult:
        T, cap = max(self.t, 1), self.cap
        s = {"policy": self.policy, "block_size": self.bs if self.paged else None,
             "prefix_sharing": self.sharing, "capacity_tokens": cap, "num_requests": len(self.w),
             "iterations": self.t, **self.stats}
        s["tokens_per_iteration"] = s["output_tokens"] / T        # throughput proxy
        s["mean_running"] = s["running_iterations"] / T
        s["slot_iterations"] = dict(self.acc)                     # raw sums: Σ over iterations
        s["share"] = {k: self.acc[k] / (cap * T) for k in SPLIT}
        Ts = max(s["saturated_iterations"], 1)
        s["share_saturated"] = {k: self.sat[k] / (cap * Ts) for k in SPLIT}
        s["logical_token_share"] = self.acc["logical_tokens"] / (cap * T)
        if self.paged:
            s["evictions"] = self.alloc.stats["evictions"]
            s["prefix_hit_tokens"] = self.alloc.stats["hit_tokens"]
        cols = ("t", "iterations", "running", "waiting") + SPLIT
        rows = np.array(self.rows, dtype=float).reshape(-1, len(cols))
        return SimResult(s, {name: rows[:, i] for i, name in enumerate(cols)})
