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
# # 07 · Paged attention and serving
#
# > **요약** (seed 000 「Paged decode 저장소와 커널」, seed 001 「Attention 최적화 기법이 캐시를 바꾸는 방식」의 PagedAttention)
# > PagedAttention 은 토큰당 크기를 바꾸지 않고, 같은 내용을 16 토큰 블록에 나눠 담아 미리 잡아 두고 안 쓰는 메모리를 없앤다.
# > 그래서 같은 GPU 에 더 많은 요청이 들어가고, 메모리가 모자라면 요청을 선점(preemption)했다가 다시 계산한다 (한 요청이 여러 번 선점될 수 있다).
# > 요청을 언제 받아들이는지(admission)와 엔진의 캐시 풀(CachePool)은 레슨 10 에서 다룬다.
#
# **You will learn**
# - why reserving one contiguous region per request wastes most of the KV memory, and how blocks with a block table
#   (PagedAttention) remove that waste without changing the bytes per token;
# - to read block tables from a real allocator: shared prefixes, a forked sample, copy-on-write;
# - how close kvsim's serving simulator comes to Kwon et al. (2023) Figure 2, and why preemptions outnumber requests;
# - how many sequences fit per accelerator (dense, paged, quantized), and why an MLA latent is copied to every GPU
#   under tensor parallelism.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md
from dataclasses import replace

import matplotlib.pyplot as plt

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.weights import weights_bytes
from kvsim.lessons.exercises import check
from kvsim.lessons.l07_paged.data import (
    UTILIZATION,
    capacity_table,
    preemption_story,
    sharing_savings,
    sharing_scenario,
)
from kvsim.lessons.l07_paged.measure import paged_vs_dense, summarize
from kvsim.lessons.l07_paged.plots import plot_policy_split
from kvsim.lessons.l07_paged.views import (
    block_table_view,
    draw_block_tables,
    preemption_view,
    serving_view,
    tp_view,
)
from kvsim.serving import fragmentation, sim
from kvsim.serving.blocks import BlockAllocator
from kvsim.serving.workload import LENGTHS, make_workload

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## The problem: a server does not know how long an answer will be
#
# How long an answer will be is known only when it ends. A server that keeps each request's KV cache in **one
# contiguous region** must reserve it up front: for the longest possible answer (Orca: the model's maximum length),
# for the length rounded up to a power of two, or, with an oracle, for the true length. Three kinds of waste follow
# (Kwon et al. 2023, §3): **reservation** (slots for tokens not yet written), **internal fragmentation** (slots for
# tokens that never come) and **external fragmentation** (holes between regions too small for the next request,
# plus whatever the allocator rounds up).

# %% [markdown]
# ## Blocks and block tables
#
# PagedAttention stores a sequence's keys and values in fixed-size **blocks** of $N$ tokens (vLLM: $N$ = 16)
# anywhere in one pool, and keeps a **block table** per sequence: logical block $i$ (tokens $iN \dots iN+N-1$)
# lives in physical block $\text{table}[i]$. A sequence takes a new block only when its last one is full, so
# at most $N - 1$ slots per sequence are ever unused, and any free block fits any sequence: no holes.
#
# $$
# \text{slot}(t) = \text{table}[\lfloor t / N \rfloor] \cdot N + (t \bmod N)
# \qquad
# M_{\text{paged}}(T) = \lceil T / N \rceil \cdot N \cdot M_{\text{token}}
# \qquad
# n_{\text{blocks}} = \left\lfloor \frac{\text{KV budget}}{N \cdot M_{\text{token}}} \right\rfloor
# $$
#
# $M_{\text{token}}$ is lesson 02's bytes per token, $N$ the server's block size (vLLM `--block-size`), $T$ the tokens a
# sequence holds, and the KV budget memory × utilization − weights (`gpu_memory_utilization`: kvsim 0.9, vLLM 0.33
# 0.92). The bytes per token do not change; paging removes memory reserved and unused. One Llama 3 8B sequence
# against a contiguous reservation of its 8,192-token maximum:

# %%
llama8b = load_model("llama-3-8b")
print(format_table([{"tokens T": t, "theoretical MiB": round(memory.kv_bytes(llama8b, t) / 2**20, 1),
                     "paged N=16 MiB": round(memory.allocated_bytes(llama8b, t, block_size=16) / 2**20, 1),
                     "reserve 8,192 MiB": round(memory.kv_bytes(llama8b, 8192) / 2**20, 1)}
                    for t in (1, 100, 1000, 4097)], digits=1))

# %% [markdown]
# ## Block tables from a real allocator
#
# `kvsim.serving.blocks.BlockAllocator` is the allocator the simulator and the MLX paged cache share: a free list, one
# reference count per block, a block table per sequence. It also **shares prompt prefixes**: a full block is
# published under a hash of its tokens and of every token before it, and a new request whose prompt starts with the
# same tokens reuses those blocks (reference count + 1). `blockview.sharing_scenario` drives one allocator
# (12 blocks of 4 tokens) through five steps and copies its state after each:
#
# 1. request A: an 8-token system prompt + a 3-token question, prefilled;
# 2. request B: the same system prompt + another question: its first two blocks are A's;
# 3. A forks a second sample (parallel sampling): the fork shares **every** block;
# 4. both samples write their next token. The last block is only partly filled and shared, so before A writes
#    into it the allocator gives A a private copy (**copy-on-write**); the other sample then owns the original alone;
# 5. B finishes: its own blocks return to the pool; a full published block stays *cached* for the next request
#    with that prefix (evicted least-recently-used when blocks run out).

# %%
steps = sharing_scenario(block_size=4, num_blocks=12)
print(format_table([{"step": i, "sequence": name, "tokens": s.tokens[name],
                     "block table (logical -> physical)": " ".join(f"P{b}" for b in s.tables[name]),
                     "copy-on-write": " ".join(f"P{a}->P{b}" for a, b in s.copies if b in s.tables[name])}
                    for i, s in enumerate(steps) for name in s.tables]))

# %%
fig, axes = plt.subplots(4, 1, figsize=(8, 12), layout="constrained")
for ax, step in zip(axes, (1, 2, 3, 4)):
    draw_block_tables(ax, step=step, block_size=4)
plt.show()

# %% [markdown]
# A physical block with a reference count above 1 is drawn gold (shared, like P2 at ref 2 in step 2); a block held by
# one sequence takes that sequence's colour. The partly shaded boxes show how full each logical block is.
# Move the sliders: with a block size that does not divide the 8-token system prompt, only its full blocks are
# shared, and the block holding the rest of the system prompt plus the question is private.

# %% tags=["nbval-ignore-output"]
block_table_view()

# %% [markdown]
# ## Attention over blocks is the same attention
#
# `kvsim.cache.paged.PagedKVCache` keeps one layer of one sequence in a pool of MLX arrays of shape
# `(num_blocks, n_kv_heads, block_size, head_dim)`: it writes each new row into the slot its block table names and,
# for attention, gathers the held blocks in table order. `paged_check.paged_vs_dense` feeds the same seeded keys,
# values and queries to it and to the dense cache of the same layer, a 100-token prefill and then 60 decode steps,
# and compares the attention outputs at every step. Real layer geometries (float32); the Gemma 3 window and the
# Llama 4 chunk are shrunk to 64 and 48 tokens so that 160 tokens cross them within seconds.

# %%
cases = {"Llama 3 8B, full": llama8b.layers[0],
         "Gemma 3 27B, sliding (W=64)": replace(load_model("gemma-3-27b").layers[0], sliding_window=64),
         "Llama 4 Scout, chunked (C=48)": replace(load_model("llama-4-scout").layers[0], attention_chunk_size=48)}
paged_runs = {name: paged_vs_dense(layer, prompt_tokens=100, decode_steps=60, block_size=16, progress=True)
              for name, layer in cases.items()}
print(format_table([{"layer": name, **summarize(rows)} for name, rows in paged_runs.items()], digits=2))

# %% [markdown]
# The outputs are identical at every step: paging changes where rows live, not what attention reads. Sliding and
# chunked layers hand blocks back as tokens leave the window or chunk, so they end with a few blocks; their "most
# blocks held" is the prefill, the whole 100-token prompt (⌈100 / 16⌉ blocks) written before any block is handed back.

# %% [markdown]
# ## How much prefix sharing saves
#
# 100 requests with the same 500-token system prompt and 60 tokens of their own, blocks of 16, counted on two real
# allocators (with and without prefix caching). Only **full** blocks are shared: the system prompt's last tokens share
# a block with each request's own tokens.

# %%
print(f"500-token system prompt: {500 // 16} full blocks of 16 hold {500 // 16 * 16} tokens, {500 % 16} left over")
print(format_table([{"requests": n, "system prompt": p, "own tokens": u, **sharing_savings(n, p, u, 16)}
                    for n, p, u in ((100, 500, 60), (100, 2000, 60), (8, 500, 500))], digits=1))

# %% [markdown]
# ## The fragmentation simulation
#
# `kvsim.serving.sim` serves a stream of requests with continuous batching over a bounded KV budget, one allocation
# policy at a time, accounting for every token slot in every iteration. The setup is Kwon et al.'s: OPT-13B on an
# A100 40GB with 12 GiB of KV (Table 1: 15,728 slots of 800 KiB, lesson 02), at most 2,048 tokens per request, and
# chat-like lengths with ShareGPT's means (161 prompt, 338 output tokens; kvsim samples a lognormal, it does not have
# the trace). A request stores $p + o - 1$ tokens: its last token is never fed back.
#
# The Orca baselines reserve one contiguous chunk per request, of 2,048 slots (Max), of the prompt plus the output
# rounded up to a power of two (Pow2), or of exactly what it will store (Oracle), placed by a **buddy allocator** that
# rounds it up to a power of two (§6.1; the paper books that rounding under "external fragmentation & others").
# Requests arrive faster than they are served. kvsim reports the whole run and the iterations in which a request
# waited, beside the paper's split and Figure 13a's running requests (`kvsim.serving.fragmentation`).

# %%
capacity_tokens = fragmentation.KWON_CAPACITY_TOKENS  # Table 1: 12 GiB / 800 KiB
workload = make_workload(1000, "chat", rate=1.0, max_len=fragmentation.KWON_MAX_LEN, seed=0)
results = fragmentation.compare_policies(workload, capacity_tokens, progress=True)
print(f"KV budget: {capacity_tokens:,} token slots; {len(workload)} requests of at most "
      f"{fragmentation.KWON_MAX_LEN:,} tokens")
print(format_table(fragmentation.figure2_rows(results), digits=1, formats={"mean running": "{:.2f}".format}))

# %%
fig, ax = plt.subplots(figsize=(8, 3.8), layout="constrained")
plot_policy_split(ax, fragmentation.policy_splits(results, "whole run"),
                  reference={fragmentation.POLICY_LABELS[p]: v["token_states"] for p, v in fragmentation.KWON_FIGURE2.items()},
                  title="share of KV memory over the whole run (kvsim bars, Kwon et al. Fig. 2 diamonds)")
plt.show()

# %% [markdown]
# **How close.** Read the "while waiting" rows against the paper's: token states within 2 points for Max and Oracle,
# within 5 for Pow2, within 1 for paging; running requests equal for Max and Pow2, lower for Oracle. Max holds exactly
# 7 reservations of 2,048 whenever a request waits, and the slots left over are the paper's "others"; most of Pow2's and
# Oracle's "others" is the buddy allocator's rounding (its own column). The rest is the trace kvsim does not have:
# how long its requests are, and where each length falls between two powers of two.
#
# **Which window.** The paper's server was full throughout its experiment. A finite kvsim run starts empty and ends
# with a drain, so its whole-run averages are lower (the figure's paging bar, against the "while waiting" row); the
# longer the run, the closer the two (`benchmarks/results/sim.md`, 20,000 requests: 96.8 and 97.2 %). Paging runs
# more than twice as many requests at once as the oracle reservation (the "mean running" column).
#
# Figure 13 also counts running requests on Alpaca's short prompts and answers (19 and 58 tokens on average, kvsim's
# `"short"` lengths), 20,000 requests arriving at once:

# %%
print("mean prompt and output tokens of the 'short' lengths:",
      [LENGTHS["short"][part][1] for part in ("prompt", "output")])
alpaca = fragmentation.compare_policies(make_workload(20000, "short", max_len=fragmentation.KWON_MAX_LEN, seed=0),
                                        capacity_tokens, policies=("pow2", "oracle"))
print(format_table(fragmentation.running_rows(alpaca, fragmentation.KWON_FIGURE13["alpaca"]), digits=2))

# %% [markdown]
# Within one request of Figure 13b for Pow2 and within three for Oracle, in either window.

# %% [markdown]
# ## More preemptions than requests
#
# A preemption is an **event**, not a request: when a running request needs a block and none is free, the scheduler
# preempts the most recently admitted request (vLLM's choice), frees its blocks and queues it again at the front. When
# it is readmitted it recomputes the keys and values of everything it had, and it can be preempted again:

# %%
paged_summary = results["paged"].summary
print({k: paged_summary[k] for k in ("completed", "preemptions", "recomputed_tokens", "prefill_tokens")})
print(f"{paged_summary['preemptions']:,} preemption events for {paged_summary['completed']:,} requests: "
      f"{paged_summary['preemptions'] / paged_summary['completed']:.3f} per request")

# %% [markdown]
# Small enough to see: four requests (6-token prompts, 10-token answers) arrive together on a real `BlockAllocator` of
# 11 blocks of 4 tokens. Each step every running request grows by one token; when a block is missing the latest
# admitted request is preempted (×). The counts per request, printed here, add up to more events than requests; the
# allocator counts the same way on its own (one sequence preempted, resumed and preempted again is two events).

# %%
story = preemption_story(((0, 6, 10),) * 4, num_blocks=11, block_size=4)
print("preempted per request:", story.preempted, "| the allocator's count:", story.events)
alloc = BlockAllocator(num_blocks=8, block_size=4, enable_prefix_caching=False)
alloc.add_sequence("A", num_tokens=10)
alloc.preempt("A")
alloc.resume("A")
alloc.preempt("A")
print("one sequence, preemptions:", alloc.stats["preemptions"])

# %% tags=["nbval-ignore-output"]
preemption_view()

# %% [markdown]
# ## Prefix sharing in the simulator
#
# The same stream, now with one of 4 system prompts of 512 tokens in front of every prompt, served with paged blocks
# with and without prefix sharing:

# %%
shared_workload = make_workload(500, "chat", rate=1.0, max_len=2048, seed=0, shared_prefix_tokens=512, num_prefixes=4)
shared_runs = {sharing: sim.simulate(shared_workload, "paged", capacity_tokens=capacity_tokens, prefix_sharing=sharing)
               for sharing in (False, True)}
print(format_table([{"prefix sharing": sharing, "iterations": r.summary["iterations"],
                     "mean running": round(r.summary["mean_running"], 1),
                     "tokens/iteration": round(r.summary["tokens_per_iteration"], 2),
                     "prefill tokens computed": r.summary["prefill_tokens"],
                     "logical tokens per slot": round(r.summary["logical_token_share"], 2)}
                    for sharing, r in shared_runs.items()]))

# %% [markdown]
# With sharing, one physical copy of each system prompt serves every request that uses it: the server holds more
# logical tokens than it has slots, runs more requests at once and computes far fewer prefill tokens.

# %% [markdown]
# ## Try it: policy, block size, arrival rate
#
# 200 requests on the same budget, arriving as fast as above (the view's default). Lower the rate and memory sits idle
# whatever the policy; at a high one the policy decides how much of the full memory holds tokens. Large blocks bring
# internal fragmentation back.

# %% tags=["nbval-ignore-output"]
serving_view()

# %% [markdown]
# ## Capacity: how many sequences fit
#
# `kvsim.serving` turns the budget into sequences per accelerator: bf16 weights (DeepSeek-V3 in its released FP8),
# `tp` the smallest power of two whose weight shard leaves room, and a share of memory (`UTILIZATION`, printed).
# Each column is $\lfloor \text{KV budget per GPU} / \text{bytes of one sequence} \rfloor$: `dense` reserves the whole
# context up front; `paged` uses blocks of 16 with every sequence reaching the context; `paged_chat` blocks of 16 for
# chat-like lengths (capped at the context); `quantized` is `paged` with 8-bit KV (lesson 06). At 8,192 tokens:

# %%
print("utilization:", UTILIZATION)
capacity_columns = ["model", "accelerator", "tp", "kv_budget_gib", "dense", "paged", "paged_chat", "quantized", "note"]
print(format_table(capacity_table(contexts=(8192,)), columns=capacity_columns, digits=1))

# %% [markdown]
# And on one H100 80GB at 4K to 128K tokens (Llama 3 was released with 8,192 positions; Llama 3.1 extends the same
# shapes to 128K):

# %%
h100 = capacity_table(accelerators=("H100 80GB",))
print(format_table(h100, columns=["model", "tp", "context_tokens", "dense", "paged", "paged_chat", "quantized", "note"], digits=1))

# %% [markdown]
# **Why `paged` equals `dense`.** Both assume every sequence reaches the context $T$, and every $T$ here is a multiple
# of 256: dense's $\lceil T/256 \rceil \cdot 256$ slots and paged's $\lceil T/16 \rceil \cdot 16$ are both $T$. Paging removes
# memory reserved and **unused**; what it buys is that a short request holds only what it uses (`paged_chat`). The two
# part only when $T$ is not a multiple of the step, by less than 256 tokens:

# %%
print(format_table([{"tokens T": t,
                     "dense, 256-token steps (MiB)": round(memory.allocated_bytes(llama8b, t) / 2**20, 2),
                     "paged, 16-token blocks (MiB)": round(memory.allocated_bytes(llama8b, t, block_size=16) / 2**20, 2)}
                    for t in (4096, 8192, 8100, 8200)], digits=2))

# %% [markdown]
# ## Tensor parallelism: heads are split, an MLA latent is copied
#
# With tensor parallelism each GPU keeps the K/V heads of its share of the query heads: Llama 3 70B's 8 KV heads split
# 8 ways leave one per GPU (beyond 8 GPUs a KV head is copied, so the bytes stop falling). An MLA latent has no heads
# to split: every head is rebuilt from the whole latent, so every GPU keeps all of it, which is why the `tp` column above
# does not shrink DeepSeek-V3's KV. Bytes per token on each GPU:

# %% tags=["nbval-ignore-output"]
tp_view()

# %% [markdown]
# ## Summary
# - Contiguous reservation wastes KV memory three ways: reserved-but-not-yet-used, reserved-never-used, and holes;
#   Kwon et al. (Figure 2) measured real tokens in 20.4–38.2 % of it, and 96.3 % with 16-token blocks.
# - A block table maps logical blocks to physical blocks anywhere in one pool: under one block of waste per sequence,
#   and full prefix blocks and forks are shared until one writes (copy-on-write).
# - kvsim's emulated baselines land within a few points of Figure 2, paging within one; the rest is the trace.
# - Attention over gathered blocks equals dense attention, exactly, for full, sliding and chunked layers.
# - Paging does not shrink a token: a full-length sequence costs the same; short requests hold only what they use.
# - Preemptions are events; under tensor parallelism KV heads are split, an MLA latent is copied to every GPU.
# - When a request may start (admission) and the engine's CachePool: lesson 10.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/07_paged_attention_and_serving.ipynb`.
#
# **1.** How many blocks of 16 tokens does a sequence of 1,000 tokens hold?

# %%
blocks_for_1000_tokens = None  # your turn

# %%
check("07.1", blocks_for_1000_tokens)

# %% [markdown]
# **2.** A server gives Llama 3 8B (128 KiB per token in bf16) a KV budget of 20 GiB, in blocks of 16 tokens. How many
# blocks is that?

# %%
blocks_in_20_gib = None  # your turn

# %%
check("07.2", blocks_in_20_gib)

# %% [markdown]
# **3.** DeepSeek-V3 (61 MLA layers, latent 512 + RoPE key 64, bf16) served with tensor parallelism over 8 GPUs: how many
# bytes of KV does each GPU hold per token?

# %%
mla_bytes_per_gpu = None  # your turn

# %%
check("07.3", mla_bytes_per_gpu)

# %% [markdown]
# **4. Predict, then measure.** One Llama 3 8B layer (8 KV heads × 128, float32 here) in a `PagedKVCache` with blocks of
# 16 tokens: a 100-token prompt, then 50 decode steps. Predict its `nbytes` at the end (whole blocks), then run the
# check: it runs `paged_vs_dense` on that layer and compares your number with what the paged cache holds.

# %%
predicted_paged_nbytes = None  # your turn

# %%
check("07.4", predicted_paged_nbytes)

# %% [markdown]
# The same run, shown: blocks held and bytes of the paged cache against the dense `KVCache` beside it.

# %%
measured = summarize(paged_vs_dense(llama8b.layers[0], prompt_tokens=100, decode_steps=50, block_size=16))
print({k: measured[k] for k in ("tokens", "blocks at end", "paged nbytes at end", "dense nbytes at end")})

# %% [markdown]
# ## Exercises
# 1. In the simulator, at which block size does the paged token-state share fall below the oracle reservation's?
#    (`fragmentation.compare_policies(workload, capacity_tokens, block_size=...)`)
# 2. Why does `sharing_savings(10, 15, 1, 16)` save nothing? Change one number so that it does.
# 3. Rerun the policy comparison with `make_workload(..., lengths="short")` (Alpaca-like lengths). Which policy
#    suffers most from short answers, and why?

# %%
# Exercise 1 - your answer here: try block_size in (16, 64, 256, 1024) with policies=("oracle", "paged").

# %% [markdown]
# ## Self-test
#
# kvsim against Kwon et al.'s Figure 2 and the real allocator and caches above (prints "self-test passed").

# %% jupyter={"source_hidden": true} tags=["self-test"]
split = {p: fragmentation.figure2_split(r, "while waiting") for p, r in results.items()}
paper, share = fragmentation.KWON_FIGURE2, {p: split[p]["token_states"] for p in sim.POLICIES}
assert share["max"] < share["pow2"] < share["oracle"] < share["paged"]                  # Kwon et al.'s order
gap = {p: abs(share[p] - paper[p]["token_states"]) for p in share}  # tolerances earned in tests/test_kwon_figures.py
assert gap["max"] < 2.5 and gap["pow2"] < 5 and gap["oracle"] < 1 and gap["paged"] < 1.5
assert abs(split["max"]["external_frag_and_others"] - paper["max"]["external_frag_and_others"]) < 0.5  # 1 − 7·2048/15,728
running = {p: r.summary["mean_running_saturated"] for p, r in results.items()}
assert running["max"] == 7 and running["paged"] > 2 * running["oracle"]
assert memory.allocated_bytes(llama8b, 1000, block_size=16) - memory.kv_bytes(llama8b, 1000) < 16 * memory.bytes_per_token(llama8b)
assert steps[3].copies and steps[3].tables["A"][:2] == steps[3].tables["B"][:2] == steps[3].tables["A, sample 2"][:2]
assert sharing_savings(100, 500, 60, 16) == {"without sharing": 3500, "with sharing": 31 + 100 * 4, "saved %": 87.7}
assert shared_runs[True].summary["prefill_tokens"] < shared_runs[False].summary["prefill_tokens"] / 2
assert all(summarize(rows)["max |paged - dense|"] == 0.0 for rows in paged_runs.values())
assert summarize(paged_runs["Gemma 3 27B, sliding (W=64)"])["blocks at end"] <= 64 // 16 + 1
cap = {(r["model"], r["context_tokens"]): r for r in h100}
assert all(r["dense"] == r["paged"] <= r["paged_chat"] and r["quantized"] >= r["paged"] for r in h100)
assert cap[("llama-3-8b", 8192)]["dense"] == int(0.9 * 80 * 2**30 - weights_bytes(llama8b, "bf16")) // (8192 * 131_072)
# preemptions are events: the allocator counts one sequence twice; the small story has more events than requests
assert alloc.stats["preemptions"] == 2 and story.events > len(story.preempted)
assert paged_summary["completed"] == len(workload)
# paged = dense at full length; the MLA latent is the same on every GPU, GQA heads split
assert memory.allocated_bytes(llama8b, 8192) == memory.allocated_bytes(llama8b, 8192, block_size=16)
ds = load_model("deepseek-v3")
assert memory.bytes_per_token(ds, tp=8) == memory.bytes_per_token(ds) and \
    memory.bytes_per_token(load_model("llama-3-70b"), tp=8) * 8 == memory.bytes_per_token(load_model("llama-3-70b"))
assert measured["paged nbytes at end"] == -(-150 // 16) * 16 * memory.layer_token_bytes(llama8b.layers[0], "float32")
print("self-test passed")
