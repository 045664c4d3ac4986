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
# # 08 · Decode is memory-bound — solutions
#
# Worked answers to the "your turn" cells of lesson 08, from the models' config fields and the H200 dataset, and a
# worked answer to the open exercise 3.

# %%
import math

from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.calc.search import first_true
from kvsim.lessons.exercises import check
from kvsim.lessons.l08_decode_speed.data import load_run, sparse_bytes

# %% [markdown]
# **1.** A step multiplies by every weight matrix, but it only looks up one row of the input embedding table (the new
# token's): all parameters minus the table, plus one row of `hidden_size` elements, 2 bytes each in bf16.

# %%
cfg = load_model("llama-3.1-8b").config
parameters = 8_030_261_248
table = cfg["vocab_size"] * cfg["hidden_size"]                  # untied: the output head is a separate matrix
step_weight_bytes_8b = (parameters - table + cfg["hidden_size"]) * 2
check("08.1", step_weight_bytes_8b)

# %% [markdown]
# **2.** The cache at 131,072 tokens holds 128 KiB per token ($2 \times 32 \times 8 \times 128 \times 2$ B), 16 GiB in
# all. The step reads it and the weights once; the floor is those bytes over the bandwidth.

# %%
cache_bytes = 2 * 32 * 8 * 128 * 2 * 131_072
bandwidth = get_accelerator("H100 80GB").memory_bandwidth_bytes_per_s      # 3.35e12 B/s
floor_ms_128k = 1e3 * (step_weight_bytes_8b + cache_bytes) / bandwidth
check("08.2", floor_ms_128k)

# %% [markdown]
# **3.** With an empty cache, $B$ sequences do $2B$ FLOPs per weight and read each 2-byte weight once: $B$ FLOPs per
# byte. The step turns compute-bound where that intensity reaches the machine balance, FLOP/s ÷ bytes/s; a batch is
# a whole number of sequences, so the answer is the balance rounded up.

# %%
run = load_run()
balance = run.flops_per_s / run.bytes_per_s
ridge_batch_h200 = math.ceil(balance)
print(f"balance {balance:.2f} FLOP/B: a batch of {ridge_batch_h200 - 1} is below it, {ridge_batch_h200} past it")
check("08.3", ridge_batch_h200)

# %% [markdown]
# **4.** The layer keeps 8 KV heads of 128, K and V, 4 bytes each (float32): $2 \times 8 \times 128 \times 4$ = 8 KiB
# per token. The step writes its own token first, so each sequence attends to 1,024 + 1 tokens, and each of the 4
# sequences has its own rows. (The buffers hold more, `nbytes`: they grow in steps of 256 slots; the step reads only
# the rows held.)

# %%
predicted_step_kv_bytes = 4 * (1024 + 1) * 2 * 8 * 128 * 4
check("08.4", predicted_step_kv_bytes)

# %% [markdown]
# ## Exercise 3: where DSA reads more than dense MLA
#
# DSA reads every token's indexer key (132 B per layer: 128 fp8 bytes and one fp32 scale) and then the top 2,048
# latents. Below 2,048 tokens it reads every latent anyway, so the indexer keys are pure extra; past 2,048 the
# latents it reads stop growing while dense MLA's keep growing. Search the first context at which DSA reads no more
# than dense (`kvsim.calc.search.first_true` bisects a predicate that turns true once):

# %%
# Exercise 3: the first context at which DSA reads no more than dense MLA
dsv3 = load_model("deepseek-v3")


def dsa_reads_no_more(tokens: int) -> bool:
    return sparse_bytes(dsv3, tokens, "dsa")["read"] <= sparse_bytes(dsv3, tokens, "dense")["read"]


crossover = first_true(dsa_reads_no_more, 1, 131_072)
for t in (1024, 2048, crossover - 1, crossover, 4096):
    r = {m: sparse_bytes(dsv3, t, m)["read"] for m in ("dsa", "dense")}
    print(f"{t:>6,} tokens: DSA reads {r['dsa'] / 2**20:7.1f} MiB, dense MLA {r['dense'] / 2**20:7.1f} MiB")
print(f"DSA reads more than dense MLA below {crossover:,} tokens")
