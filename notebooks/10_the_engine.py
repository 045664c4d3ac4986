# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · The engine: a pool, a queue, a batch
#
# > **요약** (seed 000 「시퀀스별 상태와 CachePool」, 「순환·하이브리드 모델」, 「Attention 분기와 in-place decode 쓰기」)
# > 서버는 요청마다 단조 증가하고 재사용되지 않는 SequenceId를 할당하고, CachePool이 시퀀스별 캐시 세트를 소유한다.
# > 풀은 max_sequences만 강제하고 가득 차면 오류를 낼 뿐이며, 대기시킬지 busy로 거절할지는 풀 앞의 admission queue가 정한다.
# > CachePool은 Sync가 아니므로 여러 thread가 공유하려면 호출자가 lock을 잡아야 한다.
# > 순환 상태를 모델이 소유하는 계열은 풀에 placeholder만 두고, supports_batching()을 보고할 때만 여러 시퀀스를 한 배치로 decode한다.
# > attention 실행 방식은 모델이 아니라 캐시가 정한다: 모델은 cache.attend만 부르고 캐시가 dense SDPA와 paged 경로 중 하나를 고른다.
#
# **You will learn**
# - what a **CachePool** is: one cache set per sequence, a `SequenceId` that only ever grows, `max_sequences`,
#   `release`, and `memory_usage_bytes()`, checked live against Σ `nbytes` and the calculator for Llama- and
#   Jamba-like sequences side by side;
# - why the pool is **not thread-safe** and what a lock buys: two callers' steps interleaved by hand;
# - that the pool only ever says "full" (`PoolFullError`); **waiting or answering busy** is the admission queue's
#   decision, and what each policy does to time-to-first-token and rejected requests as traffic grows;
# - **continuous batching**: sequences join and leave the running batch between decode steps, and every sequence still
#   gets exactly the tokens it would get alone;
# - **who owns a recurrent state** (the cache list, as in kvsim and mlx-lm, or the model per `SequenceId`, as in seed
#   000's engine), and why a family that cannot batch runs one sequence at a time;
# - that **the cache, not the model, decides how attention reads it**: the same model code on dense and paged storage.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt

from kvsim.cache.pool import CachePool, PoolFullError
from kvsim.calc.tables import format_table
from kvsim.lessons.exercises import check
from kvsim.lessons.l10_engine.data import MAX_QUEUE, MAX_SEQUENCES, NUM_REQUESTS, admission_curves, burst, ids_after
from kvsim.lessons.l10_engine.measure import (
    POOL_SLOTS,
    REQUESTS,
    STEP,
    continuous_run,
    dispatch_rows,
    owned_vs_cache_rows,
    pool_timeline,
    race_rows,
    toy_model,
)
from kvsim.lessons.l10_engine.views import (
    admission_view,
    batch_view,
    draw_admission_sweep,
    draw_pool_timeline,
)
from kvsim.model.owned_state import sequence_state_layout, supports_batching

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## From one sequence to a server
#
# Lessons 01-09 decoded one sequence with its own list of caches. A server decodes many at once, and they come and go:
# requests arrive at any time, each generates as many tokens as it needs and leaves. Something has to own all those
# caches, hand them out, take them back, say how much memory they hold, and decide what happens to a request when
# there is no room. Seed 000's engine splits this into three parts, and so does kvsim:
#
# | part | what it does | kvsim |
# |---|---|---|
# | **CachePool** | one cache set per sequence; ids; `max_sequences`; bytes | `kvsim.cache.pool.CachePool` |
# | **admission queue** | a request that finds the pool full waits, or is turned away (HTTP 503) | `kvsim.serving.admission` |
# | **scheduler** | which sequences run in the next forward pass | `kvsim.decode.continuous` |
#
# The models in this lesson are tiny random-weight ones in fp32 (`kvsim.model.toy_spec`): a Llama-like GQA
# transformer and a Jamba-like hybrid (attention every second layer, a Mamba state on the others). Every byte and
# every token below is measured on real MLX arrays.

# %% [markdown]
# ## 1 · The pool
#
# `CachePool(spec, max_sequences)` owns one cache set (one cache per layer) per active sequence.
#
# - `allocate(prompt_tokens)` opens a sequence with fresh, empty caches and returns its `SequenceId`: 0, 1, 2, ...,
#   **strictly increasing and never reused**, even after a release. A stale id held by some other part of the server
#   can then never point at somebody else's sequence. (The seed's ids are 64-bit integers: wrapping around is not
#   impossible, only absurdly far away; Python's ints never wrap.)
# - With `max_sequences` sequences active, `allocate` raises `PoolFullError` and changes nothing.
# - `release(seq_id)` drops the sequence's caches; MLX frees the arrays once nothing refers to them.
# - `memory_usage_bytes()` is Σ `cache.nbytes` over every sequence and layer: every array held, the slack of slots
#   grown in steps included. (The seed sums its K/V buffers; kvsim keeps a Jamba's Mamba state in the cache list as
#   mlx-lm does, so the state is counted here too. Section 4 shows the other design.)
#
# One pool, just big enough for the four sequences below (sizes printed with the table). Each allocate is followed by a real prefill of that many
# tokens through the sequence's own model: a Llama-like or a Jamba-like one. The pool then refuses a fifth sequence,
# releases sequence 1 and takes a new one. The last three columns are the pool's own count, the sum over the caches'
# arrays, and the calculator's allocated view (`kvsim.calc.pool_bytes.pool_allocated_bytes`: K/V slots rounded up to
# the step, plus each Jamba sequence's fixed state) for the same sequences.
#
# *Predict first:* after `release 1`, which id does the next allocate return? And which holds more bytes: the
# Llama-like sequence of 5 tokens or the Jamba-like one of 3?

# %%
timeline = pool_timeline()
print(f"one CachePool: max_sequences = {POOL_SLOTS}, slots grown in steps of {STEP} tokens")
print(format_table([{k: r[k] for k in ("event", "id", "active", "next_id", "memory_usage_bytes", "Σ nbytes",
                                       "calculator")} for r in timeline]))

# %%
fig, ax = plt.subplots(figsize=(9, 4.4), layout="constrained")
draw_pool_timeline(ax, timeline)
plt.show()

# %% [markdown]
# - The ids go up by one per allocate. The refused allocate did not consume one; after `release 1`, the next sequence
#   gets a new id, not the freed 1.
# - The three byte columns agree on every row. Released bytes leave the total at once.
# - A Jamba-like sequence of very few tokens still holds a fixed block: its Mamba state does not grow with the
#   context, it is there from the first token.
#
# ### Not thread-safe: why the caller holds a lock
#
# Seed 000's pool is deliberately not `Sync`: threads that share it must wrap every call in a mutex. The reason is
# that `allocate` is several steps: check the count, read `next_id`, insert the sequence, write `next_id + 1`.
# `CachePool.allocate_steps` is the same operation cut at those steps, so two callers, A and B, can be interleaved
# **by hand** (no real threads: the order is chosen, so the cell gives the same answer every time).
#
# Without a lock, in the order A, B, A, B, ...:

# %%
racy_rows, racy = race_rows("ABABAB", locked=False)
print(format_table(racy_rows))
print("ids returned:", racy.ids, "| sequences in the pool:", list(racy.active), "| lost updates:", racy.lost_updates)

# %% [markdown]
# Both callers read `next_id` before either wrote it back, so both were told the same id, and the second insert
# overwrote the first caller's sequence: one caller now holds an id whose caches are somebody else's. That is a
# **lost update**. With a lock, a caller holds it from its first step to its last; the other only waits:

# %%
safe_rows, safe = race_rows("ABABAB", locked=True)
print(format_table(safe_rows))
print("ids returned:", safe.ids, "| sequences in the pool:", list(safe.active), "| lost updates:", safe.lost_updates)

# %% [markdown]
# The unit tests also run real threads sharing one pool under a `threading.Lock` (tests/test_pool_seed.py): no id is
# ever handed out twice.
#
# ## 2 · The admission queue decides, not the pool
#
# The pool knows one thing: whether it is full. What to do with a request that arrives when it is full is a policy,
# and it lives in front of the pool, in the server's **admission queue** (`kvsim.serving.admission.AdmissionQueue`):
#
# - **wait**: a bounded FIFO queue of `max_queue` requests. A request that finds no free slot waits; a released slot
#   goes to the head of the queue. Only a request that also finds the queue full is turned away.
# - **busy**: no queue. A request that finds no free slot is turned away at once, as an HTTP server answers
#   503 Service Unavailable.
#
# The queue learns that the pool is full only from `PoolFullError`: the pool never waits and never rejects.

# %%
pool = CachePool(toy_model("gqa").spec, max_sequences=2)
first, second = pool.allocate(3), pool.allocate(5)
try:
    pool.allocate(4)
except PoolFullError as err:
    print("PoolFullError:", err)
print("ids:", first, second, "| after a release and two allocates:", ids_after(["a", "a", 0, "a", 1, "a"]))

# %% [markdown]
# The traffic is the serving simulator's (lesson 07): `kvsim.serving.workload.make_workload` draws requests with
# short chat-like lengths and Poisson arrivals at a given rate per iteration, seeded, so both policies see the very
# same requests. A request holds its slot for as many iterations as it generates tokens; its first token comes at the
# end of its first iteration, so its time-to-first-token (TTFT) is the iterations it waited plus one. The number of
# requests, the pool's slots and the queue's bound are printed with the table.
#
# *Predict first:* at the highest rate, which policy turns more requests away, and which makes the admitted ones wait
# longer for their first token?

# %%
curves = admission_curves()
print(f"{NUM_REQUESTS} requests, max_sequences = {MAX_SEQUENCES}, max_queue = {MAX_QUEUE} (wait policy)")
fig, axes = plt.subplots(1, 3, figsize=(13, 3.9), layout="constrained")
for ax, measure in zip(axes, ("mean_ttft", "rejected", "max_queue")):
    draw_admission_sweep(ax, curves, measure)
plt.show()
print(format_table([{"rate": r, **{f"{p} {m}": curves[p][m][i] for p in ("wait", "busy")
                                   for m in ("mean_ttft", "rejected")}} for i, r in enumerate(curves["rates"])]))

# %% [markdown]
# - At low rates the pool is rarely full: both policies admit everyone at once (TTFT one iteration).
# - As the rate grows past what the slots can serve, **busy** keeps TTFT at one iteration by turning more and more
#   requests away. **wait** turns nobody away for a while, and pays in TTFT instead: the queue fills, and each admitted
#   request first waits for a slot. Once the queue is full as well, wait rejects too, but fewer than busy at every rate
#   here (compare the two rejected columns).
# - Neither is right in general. An interactive service may prefer a quick 503 (the client retries elsewhere) to a
#   long silent wait; a batch pipeline prefers to wait. Either way, it is the queue's choice, not the pool's.
#
# Move the rate and the two bounds and watch both policies over time (waiting solid, running dotted):

# %% tags=["nbval-ignore-output"]
admission_view()

# %% [markdown]
# ## 3 · Continuous batching
#
# A decode step of one sequence reads all the weights for one token (lesson 08); a batch of sequences shares that read.
# The simple way is to start a batch and run it until its longest sequence finishes: the slots of the sequences that
# finish early sit idle, and new requests wait for the whole batch. **Continuous** (iteration-level) batching, as in
# Orca (Yu et al., 2022) and vLLM, reconsiders the batch **between every two decode steps**: a sequence that has its
# tokens leaves and releases its slot at once; a waiting request takes the free slot, is prefilled alone, and joins
# the batched decode from the next step.
#
# `kvsim.decode.continuous.continuous_generate` does exactly that on a CachePool: every step, ONE forward pass decodes
# all running sequences, each row reading and writing only its own caches (`kvsim.model.Rows`: its own RoPE offset,
# mask and state). A few requests, with different prompts and lengths, arrive over the first steps; there are 2 slots
# (`max_batch=2`).
#
# *Predict first:* request 2 arrives at step 1, when both slots are taken. At which step is it prefilled?

# %%
run = continuous_run("gqa", 2)
print(format_table([{"request": i, "prompt": list(p), "new tokens": n, "arrives at step": a, "tokens": t,
                     "= decoding it alone": eq}
                    for i, ((p, n, a), t, eq) in enumerate(zip(REQUESTS, run["tokens"], run["equal_alone"]))]))
print("largest |logit difference| against decoding alone:", run["max_abs_diff"])

# %% [markdown]
# Every sequence's tokens equal decoding it alone (**row isolation**): sharing a forward pass changes nothing in any
# row. The batch over time, one row per request and one column per step (change the model and the number of slots
# with the controls; the recurrent family is the subject of the next section):

# %% tags=["nbval-ignore-output"]
batch_view()

# %% [markdown]
# - A request that arrives while both slots are busy waits (grey) until a running sequence finishes; the free slot is
#   given at the start of the next step, and the newcomer is prefilled (orange) while the others decode (blue).
# - The number above each column is that step's decode batch: it changes from step to step, which is the whole point.

# %% [markdown]
# ## 4 · Who owns a recurrent state
#
# A Mamba layer keeps a fixed-size state per sequence instead of keys and values (lesson 05). Two designs hold it:
#
# - **cache-owned** (kvsim, mlx-lm): the state is one more entry in the sequence's cache list
#   (`RecurrentStateCache`); the pool owns it like any K/V cache.
# - **model-owned** (seed 000's Jamba, Mamba, RWKV): the model keeps the state itself, per `SequenceId`
#   (`sequence_state_layout`, `prepare_sequence_state`); the pool keeps only a **placeholder** per recurrent layer,
#   no arrays, just the offset the scheduler needs. kvsim has this design too
#   (`kvsim.model.owned_state.SequenceStateStore`, `CachePool(..., state_owner="model")`).
#
# What one Jamba-like sequence's model-owned state is:

# %%
jamba = toy_model("jamba")
print(format_table([{"layer": t.layer, "name": t.name, "shape": t.shape, "dtype": t.dtype, "nbytes": t.nbytes}
                    for t in sequence_state_layout(jamba.spec)]))

# %% [markdown]
# The same prompt decoded with each design:

# %%
print(format_table(owned_vs_cache_rows()))

# %% [markdown]
# Same tokens, same total bytes: only the owner changes. With a model-owned state the pool's `memory_usage_bytes()`
# counts only the K/V; the rest is the model's.
#
# **Batching needs the model's word.** A scheduler can put several sequences with model-owned state into one forward
# pass only if the model can run its state update on many rows at once, each on its own state. Seed 000's models
# report that with `supports_batching()`: Mamba, Mamba2, Jamba and RWKV7 do; the others run as a single-slot worker,
# one sequence after another. kvsim's scheduler honours the same flag (`kvsim.model.owned_state.supports_batching`):

# %%
rg_lru = toy_model("rg_lru")
for kind in ("gqa", "jamba", "rg_lru"):
    one = continuous_run(kind, 4)
    print(f"{kind:7s} supports_batching={supports_batching(toy_model(kind).spec)!s:5s} "
          f"slots={one['schedule'].slots} steps={one['schedule'].steps} "
          f"largest decode batch={max(one['schedule'].batch)} tokens equal alone={one['all_equal']}")
owned = continuous_run("jamba", 2, state_owner="model")
print("Jamba, model-owned state, 2 slots: tokens equal the cache-owned run:",
      owned["tokens"] == continuous_run("jamba", 2)["tokens"])

# %% [markdown]
# The RecurrentGemma-like model, which does not report batching, gets one slot however many it is offered, so its
# requests run one after another and the same work takes more steps. (kvsim's own mixers could batch it; the flag is
# the engine's policy, and the scheduler keeps it.)
#
# ## 5 · The cache decides how attention reads it
#
# The model never reads a cache's storage itself. Its attention layer calls `cache.attend(queries, keys, values)`
# (`attend_batched` for several rows, one cache per row), and the **cache** picks the read path by how it stores its
# state: dense K/V → SDPA with the cache's own mask; a paged cache → attention through its block table. A sliding
# (`RotatingKVCache`) or chunked (`ChunkedKVCache`) cache keeps its window semantics behind the same call.
#
# So storage can change without touching the model. One model object per layer kind, run once on dense caches and once
# on paged caches (a block pool per layer), through a prefill longer than the window and the chunk, then decode steps
# (the sizes are in the table):

# %%
dispatch = dispatch_rows()
print(format_table([{k: v for k, v in r.items() if k != "max |Δ logit|"} for r in dispatch]))
for r in dispatch:
    print(f"{r['layer kind']:8s} largest |logit difference|, paged vs dense: {r['max |Δ logit|']:.3e}")

# %% [markdown]
# Both read paths give the same logits for full, sliding and chunked layers; only `attention_path` differs, and the
# model did not change a line. That is what lets an engine add a new storage (paged, quantized, ...) without
# rewriting every model.

# %% [markdown]
# ## Summary
# - A **CachePool** owns one cache set per sequence; `SequenceId`s only grow; `max_sequences` caps the active ones;
#   `memory_usage_bytes()` = Σ `nbytes` = the calculator's allocated view, for a mix of models.
# - The pool is not thread-safe: `allocate` is several steps, and two callers interleaved without a lock lose an
#   update. Callers that share it hold a lock.
# - The pool only says "full". **Wait** (bounded FIFO) trades time-to-first-token for fewer rejections; **busy**
#   answers 503 at once and keeps TTFT low. The admission queue decides.
# - **Continuous batching** lets sequences join and leave between steps; every row's tokens equal decoding it alone.
# - Recurrent state can be **cache-owned** (kvsim, mlx-lm) or **model-owned** per `SequenceId` (seed 000): same
#   tokens, same bytes; batching such models needs `supports_batching`, else one slot.
# - The **cache** picks the attention path (dense SDPA, paged block table) behind one `attend` call; the model is the
#   same for every storage.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/10_the_engine.ipynb`.
#
# **1.** A pool holds 3 sequences of Jamba v0.1 (the real config: `kvsim.calc.registry.load_model("jamba-v0.1")`), each
# after 1,000 tokens, in bf16, with slots grown in steps of 256 (the default). What does `memory_usage_bytes()` say?

# %%
pool_bytes = None  # your turn

# %%
check("10.1", pool_bytes)

# %% [markdown]
# **2.** 10 requests arrive together at iteration 0; the pool has 4 slots, the wait queue holds 4, and every request
# generates 3 tokens (so holds its slot 3 iterations). What is the time-to-first-token, in iterations, of the last
# request that is admitted?

# %%
last_ttft = None  # your turn

# %%
check("10.2", last_ttft)

# %% [markdown]
# ## Exercises
# 1. Run `burst(10, 3, 4, 4, "busy")` and `burst(10, 3, 4, 4, "wait")`: how many requests does each reject, and what
#    TTFT does each admitted request see?
# 2. In the race, try the schedule `"AAAABBBB"` without a lock. Is an update lost? What does that say about testing
#    thread safety by running a program a few times?
# 3. With `batch_view`, give the Llama-like model 1 slot and then 4: how many steps does the same work take?

# %%
# Exercise 2 - your answer here: rows, result = race_rows("AAAABBBB", locked=False); print(result.lost_updates)

# %% [markdown]
# ## Self-test
#
# kvsim checking itself on the real runs above (silent when everything holds).

# %% tags=["self-test"]
# the pool: ids 0.. never reused; memory_usage_bytes = Σ nbytes = calculator on every row; a full pool refuses
assert [r["id"] for r in timeline] == [0, 1, 2, 3, None, 1, 4]
assert all(r["memory_usage_bytes"] == r["Σ nbytes"] == r["calculator"] for r in timeline)
assert timeline[4]["memory_usage_bytes"] == timeline[3]["memory_usage_bytes"] and timeline[4]["next_id"] == 4
# the race: a lost update without the lock, none with it
assert racy.lost_updates == 1 and racy.ids == {"A": 0, "B": 0} and safe.lost_updates == 0 and safe.active == (0, 1)
# admission: busy never queues and its TTFT is one iteration; wait rejects no more than busy at any rate
assert (curves["busy"]["max_queue"] == 0).all() and (curves["busy"]["mean_ttft"] == 1).all()
assert (curves["wait"]["rejected"] <= curves["busy"]["rejected"]).all() and curves["wait"]["max_queue"].max() == 16
b = burst(10, 3, 4, 4, "wait")
assert b.rejected_count == 2 and sorted(set(b.ttft_iterations[~b.rejected])) == [1, 4]
# continuous batching: row isolation, sequences joined mid-flight, at most 2 in flight
assert run["all_equal"] and run["max_abs_diff"] < 1e-4
assert run["schedule"].cells[2][:4] == ("", "waiting", "waiting", "prefill") and max(run["schedule"].batch) == 2
# model-owned = cache-owned; the family that cannot batch gets one slot
cache_row, model_row = owned_vs_cache_rows()
assert cache_row["tokens"] == model_row["tokens"] and cache_row["total bytes"] == model_row["total bytes"]
assert model_row["pool bytes"] < cache_row["pool bytes"]
assert continuous_run("rg_lru", 4)["schedule"].slots == 1 and continuous_run("jamba", 4)["schedule"].slots == 4
# dispatch: the same model on dense and paged storage, equal logits for full, sliding and chunked layers
assert [r["paged path"] for r in dispatch] == ["paged block table"] * 3
assert all(r["max |Δ logit|"] < 1e-4 for r in dispatch)
print("self-test passed")
