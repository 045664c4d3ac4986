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
# # 03 · MHA, GQA, MQA, MLA — solutions
#
# Worked answers to the "your turn" cells of lesson 03.

# %%
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** MLA caches $d_c + d_h^R$ elements per layer and token, with no factor 2: the one latent serves keys and values.

# %%
mla_bytes_70b = 80 * (512 + 64) * 2
check("03.1", mla_bytes_70b)

# %% [markdown]
# **2.** Llama 3 70B's GQA-8 cache: $2 \times 80 \times 8 \times 128 \times 2$ bytes per token.

# %%
gqa_bytes_70b = 2 * 80 * 8 * 128 * 2
mla_percent_of_gqa = 100 * mla_bytes_70b / gqa_bytes_70b
check("03.2", mla_percent_of_gqa)

# %% [markdown]
# **4.** A `LatentCache` grows in steps of 256 token slots, so 300 tokens allocate $\lceil 300 / 256 \rceil \times 256 = 512$
# slots; each slot holds the latent and the RoPE key, $512 + 64$ elements of 2 bytes (one per layer, not per head).

# %%
cache_nbytes_prediction = 512 * (512 + 64) * 2
check("03.4", cache_nbytes_prediction)
