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
# # 11 · How a paged cache is read — solutions
#
# Worked answers to the "your turn" cells of lesson 11.

# %%
from kvsim.calc.paged_read import layer_block_bytes, read_step_bytes
from kvsim.lessons.exercises import check
from kvsim.lessons.l11_paged_read import data, measure

# %% [markdown]
# **1.** The gather path copies whole pages: $\lceil 1000 / 16 \rceil = 63$ pages, each
# $16 \cdot 2 \cdot (16 + 16) \cdot 4$ bytes (block size × KV heads × ($d_k + d_v$) × float32). Predicted with the
# calculator, then measured as the `nbytes` of the arrays the live gather builds:

# %%
page_bytes = layer_block_bytes(16, 2, 16, 16, 4)
gather_copy_bytes = read_step_bytes("gather", -(-1000 // 16), page_bytes)["copied_bytes"]
measured = next(r for r in measure.read_path_rows(context=1000) if r["path"] == "gather")["copy measured (nbytes)"]
print(f"predicted {gather_copy_bytes:,} B, measured {measured:,} B")
check("11.1", gather_copy_bytes)

# %% [markdown]
# **2.** Only the 31 whole pages (496 tokens) of the prompt are shared; each row keeps the prompt's last 4 tokens, its
# 60 own and the first generated one (65 tokens). Dense reads $B (P + S)$ tokens, cascade $P + B S$ plus the extra
# float32 partial:

# %%
step = data.lesson07_step(1)
cascade_share_percent = 100 * step["cascade_bytes"] / step["dense_bytes"]
print(step)
check("11.2", cascade_share_percent)

# %% [markdown]
# **3.** Batch 1 × 32 query heads = 32 blocks per chunk; $\lceil 132 / 32 \rceil = 5$ chunks give 160 blocks, 4 give
# only 128.

# %%
splits_for_all_sms = -(-data.H200_SMS // data.geometry()["n_q"])
check("11.3", splits_for_all_sms)
