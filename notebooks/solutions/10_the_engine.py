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
# # 10 · The engine: a pool, a queue, a batch — solutions
#
# Worked answers to the "your turn" cells of lesson 10.

# %%
import numpy as np

from kvsim.calc.memory import bytes_per_token, fixed_state_bytes
from kvsim.calc.registry import load_model
from kvsim.lessons.exercises import check
from kvsim.lessons.l10_engine.data import burst

# %% [markdown]
# **1.** A kvsim pool keeps each sequence's Mamba state in its cache list, so `memory_usage_bytes()` is, per sequence,
# the attention layers' K/V slots (grown in steps of 256: 1,000 tokens occupy ⌈1000/256⌉ · 256 slots) plus the fixed
# state of the Mamba layers; times 3 sequences.

# %%
jamba = load_model("jamba-v0.1")
slots = -(-1000 // 256) * 256
per_slot = bytes_per_token(jamba, "bf16")                    # only the attention layers hold K/V
state = fixed_state_bytes(jamba, 1, model_dtype="bf16")      # conv + SSM state of every Mamba layer
pool_bytes = 3 * (slots * per_slot + state)
print(f"3 × ({slots} × {per_slot:,} + {state:,}) = {pool_bytes:,} B")
check("10.1", pool_bytes)

# %% [markdown]
# **2.** 4 requests take the 4 slots at iteration 0 (TTFT 1: the first token comes at the end of the first iteration).
# The next 4 fill the queue; the last 2 find the queue full and get a 503. The slots free at iteration 3, when the 4
# queued requests start: their TTFT is 3 + 1. The simulator agrees:

# %%
res = burst(10, 3, 4, 4, "wait")
print("TTFT per request:", res.ttft_iterations, "| rejected:", res.rejected_count)
last_ttft = 3 + 1
assert last_ttft == np.nanmax(res.ttft_iterations)
check("10.2", last_ttft)
