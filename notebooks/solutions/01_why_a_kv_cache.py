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
# # 01 · Why a KV cache? — solutions
#
# Worked answers to the "your turn" cells of lesson 01. Each computes the number from the formula, then `check`
# compares it with kvsim.

# %%
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** Without a cache step $k$ feeds the whole sequence so far, $P + k - 1$ positions:
# $\sum_{k=1}^{A} (P + k - 1) = AP + A(A-1)/2$.

# %%
P, A = 500, 200
fed_without_cache = sum(P + k - 1 for k in range(1, A + 1))
print(fed_without_cache, "=", A * P + A * (A - 1) // 2)
check("01.1", fed_without_cache)

# %% [markdown]
# **2.** With a cache the prefill feeds the prompt once and every later step one token: $P + (A - 1)$.

# %%
fed_with_cache = P + (A - 1)
check("01.2", fed_with_cache)

# %% [markdown]
# **3.** The toy model: 2 layers, 2 KV heads of 32; bf16 is 2 bytes. One token adds $2 \times 2 \times 2 \times 32 \times 2$
# bytes; the cache holds the prompt and every answer token but the last: $100 + 50 - 1 = 149$ tokens.

# %%
bytes_per_token = 2 * 2 * 2 * 32 * 2
cache_bytes_at_end = bytes_per_token * (100 + 50 - 1)
check("01.3", cache_bytes_at_end)

# %% [markdown]
# **4.** Predict, then measure. The cache holds $100 + 200 - 1 = 299$ tokens; the buffers grow 256 slots at a time, so
# they hold $\lceil 299 / 256 \rceil \times 256 = 512$ slots. In float32 one slot of both layers takes
# $2 \times 2 \times 2 \times 32 \times 4$ bytes (layers × key and value × KV heads × head_dim × bytes). The check runs
# the decode and measures `nbytes`.

# %%
slots = -(-(100 + 200 - 1) // 256) * 256
predicted_nbytes = slots * 2 * 2 * 2 * 32 * 4
check("01.4", predicted_nbytes)
