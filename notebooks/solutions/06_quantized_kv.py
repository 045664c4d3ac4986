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
# # 06 · Quantized KV — solutions
#
# Worked answers to the "your turn" cells of lesson 06.

# %%
from kvsim.lessons.exercises import check

# %% [markdown]
# **A step first: bytes per token at q4** (the registry's 06.1). Per vector of $d_h$ = 128 elements: $128 \times 4 / 8 = 64$ bytes of packed data, and $128 / 64 = 2$ groups with a
# bf16 scale and a bf16 bias each, $2 \times 2 \times 2 = 8$ bytes. Keys and values, 8 KV heads, 32 layers.

# %%
vector_bytes = 128 * 4 // 8 + (128 // 64) * 2 * 2
q4_bytes_per_token = 2 * 32 * 8 * vector_bytes
check("06.1", q4_bytes_per_token)

# %% [markdown]
# **1.** For $T > R$: $M_{q}(T) = (T - R) \cdot 36{,}864 + R \cdot 131{,}072$ and $M_{\text{bf16}}(T) = 131{,}072\, T$.
# $M_q(T) < M_{\text{bf16}}(T) / 2 \iff R\,(131{,}072 - 36{,}864) < (65{,}536 - 36{,}864)\, T$.

# %%
R, full_bytes = 256, 2 * 32 * 8 * 128 * 2
bound = R * (full_bytes - q4_bytes_per_token) / (full_bytes / 2 - q4_bytes_per_token)
first_tokens_below_half = int(bound) + 1   # the first integer T strictly above the bound
print(f"T > {bound:.2f}")
check("06.2", first_tokens_below_half)

# %% [markdown]
# **Predict, then measure (06.3).** 300 tokens fill ⌈300 / 256⌉ × 256 = 512 slots. Each slot holds, per KV head, a key and
# a value vector of 72 bytes each (64 of codes, 8 of bf16 scales and biases): 512 × 8 × 2 × 72 bytes. The rotation adds
# its sign vectors once per layer: 128 + 128 bytes.

# %%
rotated_nbytes_prediction = 512 * 8 * 2 * vector_bytes + (128 + 128)
check("06.3", rotated_nbytes_prediction)
