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
# # 05 · Hybrids — solutions
#
# Worked answers to the "your turn" cells of lesson 05.

# %%
import math

from kvsim.calc import hybrid, memory
from kvsim.calc.registry import load_model
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** Only the 4 attention layers keep K/V: $4 \times 2 \times 8 \times 128 \times 2$ bytes per token, times 262,144
# tokens, in GiB ($2^{30}$ bytes).

# %%
jamba_kv_gib = 4 * 2 * 8 * 128 * 2 * 262_144 / 2**30
check("05.1", jamba_kv_gib)

# %% [markdown]
# **2.** Convolution: the last $K - 1 = 3$ inputs of 8,192 channels; SSM: $8{,}192 \times 16$.

# %%
cfg = load_model("jamba-v0.1").config
d_inner = cfg["mamba_expand"] * cfg["hidden_size"]
mamba_state_elements = (cfg["mamba_d_conv"] - 1) * d_inner + d_inner * cfg["mamba_d_state"]
check("05.2", mamba_state_elements)

# %% [markdown]
# **3.** The twin replaces each of the 28 Mamba layers by an attention layer, so per token it holds
# 28 × (one attention layer's K/V per token) more than Jamba, and Jamba holds the 28 states more from the start.
# They meet at $\lceil \text{state} / \text{extra K/V per token} \rceil$.

# %%
jamba = load_model("jamba-v0.1")
state = memory.fixed_state_bytes(jamba)
extra_per_token = memory.bytes_per_token(hybrid.all_attention(jamba)) - memory.bytes_per_token(jamba)
jamba_crossover = math.ceil(state / extra_per_token)
print(f"{state:,} B of state / {extra_per_token:,} B per token")
check("05.3", jamba_crossover)

# %% [markdown]
# **4.** The 4 attention caches each hold ⌈1000 / 256⌉ × 256 = 1,024 slots of 2 × 8 × 128 × 2 B; the 28 Mamba states
# hold what exercise 2 counted, in bf16 (Mamba-1 keeps its SSM state in the model dtype). The check builds the real
# caches and measures them.

# %%
slots = int(memory.allocated_slots(1000))
kv = 4 * slots * 2 * 8 * 128 * 2
predicted_jamba_nbytes = kv + 28 * mamba_state_elements * 2
print(f"{kv:,} B of K/V + {28 * mamba_state_elements * 2:,} B of state = {predicted_jamba_nbytes:,} B")
check("05.4", predicted_jamba_nbytes)
