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
# # 02 · How big is a KV cache? — solutions
#
# Worked answers to the "your turn" cells of lesson 02, from the models' config fields.

# %%
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.calc.weights import weights_bytes
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** $M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$, with the KV heads (8), not
# the query heads (64).

# %%
cfg = load_model("llama-3-70b").config
head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
bytes_per_token_70b = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2
check("02.1", bytes_per_token_70b)

# %% [markdown]
# **2.** The budget is 90 % of the card's 80 GiB minus the bf16 weights; divide by 128 KiB per token and round down.

# %%
llama8b = load_model("llama-3-8b")
memory_bytes = get_accelerator("H100 80GB").memory_bytes          # 80 GiB
budget = int(0.9 * memory_bytes - weights_bytes(llama8b, "bf16"))
longest_context = budget // (2 * 32 * 8 * 128 * 2)
check("02.2", longest_context)

# %% [markdown]
# **3.** The first $T$ with $T \times 327{,}680 \geq$ the 8B weights: divide and round up.

# %%
w8 = weights_bytes(llama8b, "bf16")
tokens_70b_equals_8b_weights = -(-w8 // bytes_per_token_70b)     # ceiling division
check("02.3", tokens_70b_equals_8b_weights)
