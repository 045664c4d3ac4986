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
from kvsim.calc import memory
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

# %% [markdown]
# **4.** 1,000 tokens need ⌈1000 / 256⌉ = 4 steps of 256 slots, so every layer's buffer holds 1,024 slots; one slot of
# all 16 layers is $M_{\text{token}}$ = 2 × 16 × 8 × 64 × 2 B. The check builds the real caches and measures them.

# %%
spec_1b = load_model("llama-3.2-1b")
slots = int(memory.allocated_slots(1000))
predicted_nbytes = slots * memory.bytes_per_token(spec_1b, "bf16")
print(f"{slots:,} slots × {memory.bytes_per_token(spec_1b, 'bf16'):,} B = {predicted_nbytes:,} B")
check("02.4", predicted_nbytes)

# %% [markdown]
# **Exercise 1 (open).** With `--tp 8` each of the 8 GPUs holds one of Llama 3 70B's 8 KV heads: an eighth of the
# cache. With `--tp 16` there are still only 8 KV heads; each is replicated on two GPUs, so a GPU holds as much as at
# `tp = 8`. `memory.kv_bytes(..., tp=...)` is the per-GPU figure `kvsim calc --tp` prints:

# %%
llama70b = load_model("llama-3-70b")
for tp in (1, 8, 16):
    print(f"tp = {tp:>2}: {memory.kv_bytes(llama70b, 32_768, 4, tp=tp):,} B per GPU")

