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
# # 07 · Paged attention and serving — solutions
#
# Worked answers to the "your turn" cells of lesson 07.

# %%
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** A sequence takes a new block when its last one is full: $\lceil 1000 / 16 \rceil$ blocks, the last one holding
# 8 tokens and 8 empty slots.

# %%
blocks_for_1000_tokens = -(-1000 // 16)
check("07.1", blocks_for_1000_tokens)

# %% [markdown]
# **2.** One block holds 16 tokens of 131,072 bytes each: 2 MiB. The budget holds $\lfloor 20\ \text{GiB} / 2\ \text{MiB}
# \rfloor$ of them.

# %%
block_bytes = 16 * 2 * 32 * 8 * 128 * 2
blocks_in_20_gib = 20 * 2**30 // block_bytes
check("07.2", blocks_in_20_gib)

# %% [markdown]
# **3.** Each head is rebuilt from the whole latent, so each GPU keeps the whole latent: tensor parallelism does not
# divide it.

# %%
mla_bytes_per_gpu = 61 * (512 + 64) * 2
check("07.3", mla_bytes_per_gpu)

# %% [markdown]
# **4.** After 100 + 50 tokens the cache holds ⌈150 / 16⌉ = 10 whole blocks of 16 tokens, each token 2 × 8 × 128 × 4 B
# in float32. The check runs the real paged cache and measures it.

# %%
blocks = -(-150 // 16)
predicted_paged_nbytes = blocks * 16 * 2 * 8 * 128 * 4
print(f"{blocks} blocks × 16 tokens × {2 * 8 * 128 * 4:,} B = {predicted_paged_nbytes:,} B")
check("07.4", predicted_paged_nbytes)
