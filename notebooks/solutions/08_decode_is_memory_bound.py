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
# Worked answers to the "your turn" cells of lesson 08, from the models' config fields and the H200 dataset.

# %%
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.lessons.exercises import check
from kvsim.lessons.l08_decode_speed.data import load_run

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
# byte. The step turns compute-bound where that intensity reaches the machine balance, FLOP/s ÷ bytes/s.

# %%
run = load_run()
ridge_batch_h200 = run.flops_per_s / run.bytes_per_s
check("08.3", ridge_batch_h200)
