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
# # 11 · How a paged cache is read
#
# > **요약** (seed 000 「Paged decode 저장소와 커널」)
# > 페이지에 나눠 담긴 KV 를 읽는 방법은 네 가지다. 페이지를 연속 버퍼로 모아(gather) 복사한 뒤 attention 하거나,
# > block table 을 따라 페이지를 제자리에서 읽으며 online softmax 로 합치거나(복사 0), 고른 페이지만 읽거나(sparse
# > page indirection), 여러 시퀀스가 공유하는 prefix 를 그룹에 한 번만 읽는다(cascade attention). 긴 캐시는 키를 S 조각으로
# > 나눠 읽고(split-K, `MLXCEL_PAGED_DECODE_SPLITS`) log-sum-exp 로 합친다: cascade 와 같은 merge 다.
# > cascade 는 최소 멤버 수와 최소 공유 페이지 수(`MLXCEL_CASCADE_MIN_MEMBERS`, `MLXCEL_CASCADE_MIN_SHARED_PAGES`)를
# > 넘을 때만 켠다.
#
# **You will learn**
# - why reading a paged cache by gathering its pages into one contiguous K/V copies as many bytes as the whole cache
#   holds at every decode step, and how attention over the block table, one page at a time with an online softmax,
#   gives the same output without any copy;
# - that attention over a listed subset of pages (sparse page indirection) reads only those pages and equals dense
#   attention over exactly those keys;
# - how cascade attention reads a shared prefix once for a whole group (lesson 07's 100 requests sharing a 500-token
#   prompt), when the seed's gate lets it run, and what an H200 measured: fewer bytes is not always a faster step;
# - why splitting the keys into chunks (split-K, Flash-Decoding) helps a GPU at batch 1, and that its merge is the
#   same log-sum-exp merge as cascade's.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt

from kvsim.calc.hardware import get_accelerator
from kvsim.calc.paged_read import CASCADE_MIN_MEMBERS, CASCADE_MIN_SHARED_PAGES, sparse_pays
from kvsim.calc.tables import format_table
from kvsim.calc.units import format_bytes
from kvsim.lessons.exercises import check
from kvsim.lessons.l11_paged_read import data, measure
from kvsim.lessons.l11_paged_read.plots import plot_gpu_cascade, plot_sparse
from kvsim.lessons.l11_paged_read.views import cascade_bytes_view, copy_bytes_view, split_k_view

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## 1. Gather, then attend — or read through the block table
#
# Lesson 07's `PagedKVCache` keeps a sequence's keys and values in blocks anywhere in one pool. The simple way to
# attend over them is to **gather**: copy the sequence's blocks, in block-table order, into one contiguous K and V,
# then run ordinary attention. That copy is as large as the sequence's whole cache, and it is made again at every
# decode step, for every layer.
#
# Reading **through the block table** needs no copy. Attention is computed page by page where each page lies, and the
# pages are combined with an **online softmax**: a running maximum $m$, normaliser $\ell$ and weighted sum
# $a$ are carried from page to page; a page with scores $s$ and values $V$ updates them as
#
# $$
# m' = \max(m, \max_j s_j), \qquad
# \ell' = \ell\, e^{m - m'} + \sum_j e^{s_j - m'}, \qquad
# a' = a\, e^{m - m'} + \sum_j e^{s_j - m'} V_j, \qquad
# \text{out} = a / \ell .
# $$
#
# | symbol | meaning |
# |---|---|
# | $s_j$ | score of key $j$ of the page: $q \cdot k_j / \sqrt{d_h}$ |
# | $m, \ell, a$ | largest score so far, $\sum e^{s - m}$ so far, $\sum e^{s - m} V$ so far |
#
# `PagedKVCache.read(q, path=...)` has three paths: `gather` (copy, then attention), `block_table` (one partial per
# page straight from the pool with `mx.gather_mm`, merged by log-sum-exp) and `online` (the same as a readable loop
# over the table, the formula above). `measure.read_path_rows` writes a 1,000-token sequence in turns with a
# neighbour (so its blocks are scattered over the pool), reads the newest query by each path and compares with plain
# attention over the same keys. The gather path's copy is measured as the `nbytes` of the arrays it builds. (The seed's
# production path, "fused paged attention", is one GPU kernel that reads through the block table in the same way;
# kvsim's `block_table` path writes it with MLX operations.)

# %%
paths = measure.read_path_rows(context=1000)
print(format_table(paths, formats={"max |path - dense|": "{:.1e}".format}))

# %% [markdown]
# All three paths give dense attention's output (float32: the differences above are rounding), the gather copy
# measured is exactly what `kvsim.calc.paged_read.read_step_bytes` predicts, and the block-table paths copy nothing and
# read the pool once. Scaled up to Llama 3 8B in bf16 (32 layers, 8 KV heads of 128), the copy grows with the context:
# at every decode step the gather path copies as many bytes as the block-table path reads, and then reads them again.

# %%
print(format_table([{"context": r["context"], "path": r["path"], "copied per step": format_bytes(r["copied_bytes"]),
                     "read per step": format_bytes(r["read_bytes"])} for r in data.copy_rows()]))

# %% tags=["nbval-ignore-output"]
copy_bytes_view()

# %% [markdown]
# ## 2. Sparse page indirection: read only the pages you list
#
# Sparse attention methods pick, per step, the pages most likely to matter and attend only over them. With a block
# table this costs nothing extra: `read(q, pages=[...])` reads the listed pages through the table and nothing else.
# The output equals dense attention over exactly the keys of those pages (not over all keys: what is skipped is
# skipped). The live run keeps every $n$-th page of the 1,000-token sequence above, and always the newest page:

# %%
sparse = measure.sparse_rows(context=1000)
print(format_table(sparse, formats={"max |sparse - dense over kept|": "{:.1e}".format, "kept fraction": "{:.3f}".format}))

# %% [markdown]
# Bytes read fall in proportion to the pages kept. For Llama 3 8B at 32,768 tokens:

# %%
fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
plot_sparse(ax, data.sparse_rows(), title="Llama 3 8B, 32,768 tokens, bf16: bytes read by the pages kept")
plt.show()

# %% [markdown]
# The seed's engine takes the sparse path only when enough pages are skipped (`MLXCEL_SPARSE_PAGED_ATTENTION`, gated
# by `MLXCEL_SPARSE_PAGED_MIN_SPARSITY`; the seed names the knob but not its value). `kvsim.calc.paged_read.sparse_pays`
# is that gate with the threshold passed in:

# %%
print({f"keep {k} of 64 pages, min sparsity 0.75": sparse_pays(k, 64, 0.75) for k in (8, 16, 17, 32)})

# %% [markdown]
# ## 3. Cascade attention: a shared prefix read once per group
#
# Lesson 07 served 100 requests that share a 500-token system prompt, each with 60 tokens of its own. Prefix sharing
# kept one copy of the prompt's 31 whole blocks in memory, but at every decode step each request still **reads** those
# blocks for its own attention: the same bytes, 100 times.
#
# Cascade attention splits each row's attention into two **partials** and merges them. The prefix partial is
# computed once for the whole group, every row's query against the shared prefix in one product (the prefix is read
# once); the suffix partial is each row against its own keys. Each partial keeps its output $o$ and the log-sum-exp
# of its scores $\text{lse} = \log \sum_j e^{s_j}$, and the merge weighs them by their share of the softmax:
#
# $$
# o = \frac{e^{\text{lse}_p} o_p + e^{\text{lse}_s} o_s}{e^{\text{lse}_p} + e^{\text{lse}_s}}
# \qquad\text{(computed with } M = \max(\text{lse}_p, \text{lse}_s) \text{ subtracted first)}
# $$
#
# It is exact: the softmax normaliser over all keys is the sum of the parts' normalisers. `measure.cascade_run`
# builds lesson 07's group on one real paged layer: the prompt written once, forked 100 times (every block shared;
# the partly filled last block is copied on the first write), each request writing its own 60 tokens and one decode
# token; then `kvsim.cache.paged.cascade_read` against each row's own paged read:

# %%
group = measure.cascade_run()
print(group)

# %% [markdown]
# The same group on Llama 3 8B in bf16, bytes read per decode step with and without cascade (all layers). Cascade
# reads the 496 shared prompt tokens once instead of 100 times, and pays for one extra partial per row, written and
# read back in float32:

# %%
steps = {g: data.lesson07_step(g) for g in (1, 100, 500)}
print(format_table([{"decode step": g, "shared tokens": s["prefix_tokens"], "own tokens per row": s["suffix_tokens"],
                     "dense": format_bytes(s["dense_bytes"]), "cascade K/V": format_bytes(s["cascade_kv_bytes"]),
                     "extra partial": format_bytes(s["partial_bytes"]), "cascade total": format_bytes(s["cascade_bytes"]),
                     "cascade / dense": f"{s['cascade_bytes'] / s['dense_bytes']:.3f}"} for g, s in steps.items()]))

# %% [markdown]
# **When it pays.** The seed's engine runs cascade only for a group with at least `MLXCEL_CASCADE_MIN_MEMBERS`
# sequences sharing at least `MLXCEL_CASCADE_MIN_SHARED_PAGES` whole pages. The seed names these knobs, not their
# values; kvsim's defaults come from the byte count: cascade saves $(B-1)\,P$ tokens of K/V per layer and costs the
# extra partial, so it pays from `cascade_break_even_pages` pages on (one member never pays):

# %%
print(f"kvsim's gate: min members {CASCADE_MIN_MEMBERS}, min shared pages {CASCADE_MIN_SHARED_PAGES}")
print({f"B = {b}": data.cascade_group(b, 0, 65)["break_even_pages"] for b in (1, 2, 8, 100)})

# %% [markdown]
# Move the sliders: with one sequence the gate stays shut; with two, cascade reads less only from the break-even
# page on; with lesson 07's 100 requests the saving at its 31 shared pages is most of the step.

# %% tags=["nbval-ignore-output"]
cascade_bytes_view()

# %% [markdown]
# ### Measured on an H200: fewer bytes, not always a faster step
#
# `benchmarks/bench_paged_read.py --gpu` timed one layer (8 KV heads, 32 query heads, head dim 128, bf16) for 8 to 64
# sequences sharing a 4,096-token prefix with 64 tokens of their own: kvsim's cascade (two partial products and the
# merge, written as MLX matmuls) against dense attention over each row's own copy, both with kvsim's explicit partial
# attention and with MLX's fused `mx.fast.scaled_dot_product_attention`. Two runs; read from the results files:

# %%
runs = data.load_gpu_runs()
gpu = data.gpu_rows(runs)
print([f"{r['file']}: {r['device']}, mlx {r['mlx']}, median of {r['steps']}" for r in runs])
print(format_table([{"run": r["run"], "sequences": r["sequences"], "case": r["case"], "µs per step": round(r["step_us"]),
                     "K/V read": format_bytes(r["read_bytes"]), "/ fused dense": f"{r['over_fused']:.2f}",
                     "GB/s if only reading": round(r["read_GB_per_s"])} for r in gpu]))
print(f"H200 memory bandwidth: {get_accelerator('H200 141GB').memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s")

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
plot_gpu_cascade(ax, gpu, title="H200, one layer, 4K shared prefix + 64 own tokens: step time")
plt.show()

# %% [markdown]
# Honestly: in both runs kvsim's cascade is **slower** than the fused dense kernel at 8, 16 and 32 sequences, even
# though it reads several times fewer bytes; only at 64 sequences does it draw level (one run slightly slower, the other
# faster). Against the explicit dense attention, the same arithmetic without the sharing, cascade wins from 16
# sequences on. The last column says why: none of these steps comes near the H200's memory bandwidth, so the step
# time is set by something other than reading bytes (kernel launches, the arithmetic, the merge), and one fused kernel
# beats several unfused ones. Cascade's byte saving turns into time when the group is large and the shared prefix
# long, or inside a fused kernel (as the seed's production path); that is why the seed makes it opt-in
# (`MLXCEL_CASCADE_ATTENTION`) and gated.

# %% [markdown]
# ## 4. Split-K (Flash-Decoding): more parallel work over the same bytes
#
# A decode step at batch 1 has one query per head. A GPU kernel that gives each (sequence, query head) one block of
# threads has only as many blocks as query heads, Llama 3 8B's 32, for an H200 with 132 streaming multiprocessors:
# most of the chip waits while a few blocks stream the whole cache. **Split-K** cuts the keys into $S$ chunks; each
# (sequence, head, chunk) is its own block and produces a partial $(o_i, \text{lse}_i)$, and the partials are merged
# with the same log-sum-exp merge as cascade's:
#
# $$
# o = \frac{\sum_i e^{\text{lse}_i - M} o_i}{\sum_i e^{\text{lse}_i - M}}, \qquad M = \max_i \text{lse}_i .
# $$
#
# The K/V bytes read do not change; the work is spread over $S$ times as many blocks, at the price of $S$ small float32
# partials. The seed sets $S$ with `MLXCEL_PAGED_DECODE_SPLITS`. `kvsim.cache.partials.split_k_attention` on 4,096
# keys, in equal chunks and at random cut points, against dense attention:

# %%
print(format_table(measure.split_k_rows(), formats={"max |split-K - dense|": "{:.1e}".format}))

# %%
print(f"Llama 3 8B at batch 1, 8,192 tokens, on an H200 ({data.H200_SMS} SMs):")
print(format_table([{"S": r["splits"], "blocks": r["work_blocks"], "SMs busy": f"{r['sm_share']:.0%}",
                     "K/V read": format_bytes(r["kv_bytes"]), "partials": format_bytes(r["partial_bytes"])}
                    for r in data.split_k_rows()]))
print("blocks at batch 16 without splitting:", data.split_k_rows(batch=16, splits=(1,))[0]["work_blocks"])

# %% tags=["nbval-ignore-output"]
split_k_view()

# %% [markdown]
# With a batch of 16 there are already more blocks than SMs without splitting (printed above): split-K is a remedy
# for batch 1 and few heads, where a long cache meets too little parallel work.

# %% [markdown]
# ## Summary
# - Gathering pages into contiguous K/V copies the whole cache at every decode step (and reads it twice); reading
#   through the block table with an online softmax gives the same output and copies nothing.
# - Sparse page indirection reads only the listed pages: bytes in proportion to the pages kept, output equal to dense
#   attention over those pages' keys.
# - Cascade attention reads a shared prefix once per group and merges two partials by their log-sum-exp; for lesson 07's
#   100 requests it cuts the bytes of their first decode step several-fold, less as their own tokens grow. It runs
#   only past the gate (members, whole shared pages).
#   Measured on an H200, kvsim's unfused cascade is still slower than one fused dense kernel for small groups.
# - Split-K cuts the keys into chunks to give a GPU more parallel work at batch 1, with the same bytes and the same merge.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/11_how_a_paged_cache_is_read.ipynb`.
#
# **1.** Predict, then measure: how many bytes does the gather path copy for the live 1,000-token read of section 1
# (16-token pages, 2 KV heads of 16 dimensions for K and for V, float32)? After checking, compare with the
# `copy measured (nbytes)` column printed there.

# %%
gather_copy_bytes = None  # your turn

# %%
check("11.1", gather_copy_bytes)

# %% [markdown]
# **2.** Lesson 07's 100 requests on Llama 3 8B at their first decode step: what share (%) of dense attention's bytes
# does cascade read, its extra partial included?

# %%
cascade_share_percent = None  # your turn

# %%
check("11.2", cascade_share_percent)

# %% [markdown]
# **3.** At batch 1, Llama 3 8B has 32 query heads. What is the fewest number of split-K chunks $S$ that gives each of
# the H200's 132 SMs at least one block?

# %%
splits_for_all_sms = None  # your turn

# %%
check("11.3", splits_for_all_sms)

# %% [markdown]
# ## Exercises
# 1. In `cascade_bytes_view`, set 2 sequences and find where the cascade line crosses the dense one. Why does it move
#    right when you shrink the own tokens? (Hint: what does the extra partial cost depend on?)
# 2. Take `cache, keys, values = measure.interleaved_cache(100)` and read one query with `cache.read(q, pages=[0])`.
#    Which keys does it attend over, and which dense attention does it equal?
# 3. In the H200 table, cascade's bytes grow with the sequences much more slowly than dense's. Which part of its
#    bytes grows with them?

# %%
# Exercise 1 - your answer here: data.cascade_rows(2, suffix_tokens) and look at break_even_pages.

# %% [markdown]
# ## Self-test
#
# The live runs above against their yardsticks, the byte counts against the formulas, the H200 results as stated in
# the prose (silent when everything holds).

# %% tags=["self-test"]
assert all(r["max |path - dense|"] < 1e-5 for r in paths)
gather_row = next(r for r in paths if r["path"] == "gather")
assert gather_row["copy measured (nbytes)"] == gather_row["copied_bytes"] == gather_row["read_bytes"] // 2
assert all(r["copied_bytes"] == 0 and r["read_bytes"] == gather_row["copied_bytes"] for r in paths if r["path"] != "gather")
assert all(r["max |sparse - dense over kept|"] < 1e-5 for r in sparse)
assert [r["read_bytes"] for r in sparse] == [r["kept pages"] * gather_row["copied_bytes"] // gather_row["pages"] for r in sparse]
assert group["max |cascade - each row alone|"] < 1e-5 and group["shared pages"] == 31
assert group["blocks held"] < group["blocks without sharing"] / 5
assert steps[1]["cascade_bytes"] < steps[1]["dense_bytes"] / 5
assert all(s["cascade_bytes"] < s["dense_bytes"] and s["partial_bytes"] > 0 for s in steps.values())
assert data.cascade_group(1, 31, 65)["gate_open"] is False and steps[1]["gate_open"]
fused_ratio = {(r["run"], r["sequences"]): r["over_fused"] for r in gpu if r["case"] == "cascade"}
assert len(runs) == 2 and all(fused_ratio[(run["file"], b)] > 1 for run in runs for b in (8, 16, 32))
assert min(fused_ratio[(run["file"], 64)] for run in runs) < 1 < max(fused_ratio[(run["file"], 64)] for run in runs)
explicit = {(r["run"], r["sequences"]): r["step_us"] for r in gpu if r["case"] == "dense (explicit)"}
cascade_us = {(r["run"], r["sequences"]): r["step_us"] for r in gpu if r["case"] == "cascade"}
assert all(cascade_us[k] < explicit[k] for k in cascade_us if k[1] >= 16)
bandwidth = get_accelerator("H200 141GB").memory_bandwidth_bytes_per_s / 1e9
assert all(r["read_GB_per_s"] < bandwidth / 2 for r in gpu)
assert all(r["max |split-K - dense|"] < 1e-5 for r in measure.split_k_rows(context=512, cut_sets=1))
split = data.split_k_rows()
assert len({r["kv_bytes"] for r in split}) == 1 and split[0]["work_blocks"] < data.H200_SMS <= split[3]["work_blocks"]
assert data.split_k_rows(batch=16, splits=(1,))[0]["work_blocks"] > data.H200_SMS
print("self-test passed")
