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
# # 09 · Speculative decoding and rewind — solutions
#
# Worked answers to the "your turn" cells of lesson 09.

# %%
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** A pass yields $1 + \alpha + \alpha^2 + \dots + \alpha^k$ tokens on average: the target's own token always, the
# $i$-th draft only if the first $i$ were all accepted. The geometric sum is $(1 - \alpha^{k+1}) / (1 - \alpha)$.

# %%
alpha, k = 0.8, 4
tokens_per_pass = sum(alpha**i for i in range(k + 1))
print(round(tokens_per_pass, 4), "=", round((1 - alpha ** (k + 1)) / (1 - alpha), 4))
check("09.1", tokens_per_pass)

# %% [markdown]
# **2.** The verify pass wrote $k + 1 = 6$ positions: the last token and 5 drafts. Keep the last token, the 2 accepted
# drafts (the target's own token at the first rejection is fed next round): trim $6 - 3 = k - n$.

# %%
tokens_to_trim = 5 - 2
check("09.2", tokens_to_trim)

# %% [markdown]
# **3.** A wrapped ring of $W$ slots can rewind only the newest token: every older slot is needed by the next query.
# Each of the $R$ spare slots keeps one more token around, so right after a write it can rewind $R + 1$.

# %%
ring_rewind = 2 + 1
check("09.3", ring_rewind)

# %% [markdown]
# **4.** Predict, then measure. The overwrite log keeps the ring of $W$ = 1,024 rows (Gemma 3 27B's `sliding_window`)
# and, while 5 appends are pending, the 5 rows they overwrote. One row is a key and a value of 16 KV heads × 128, bf16:
# $2 \times 16 \times 128 \times 2$ bytes. The check builds the cache and measures `nbytes`.

# %%
row_bytes = 2 * 16 * 128 * 2
predicted_lookahead_nbytes = (1024 + 5) * row_bytes
check("09.4", predicted_lookahead_nbytes)
