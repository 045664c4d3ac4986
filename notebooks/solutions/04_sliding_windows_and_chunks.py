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
# # 04 · Sliding windows and chunks — solutions
#
# Worked answers to the "your turn" cells of lesson 04.

# %%
from kvsim.calc.registry import load_model
from kvsim.lessons.exercises import check

# %% [markdown]
# **1.** Every layer holds at most $W$ tokens, so the cache tops out at $W \times M_{\text{token}}$:
# $W = 256\ \text{MiB} / (2 \times 32 \times 8 \times 128 \times 2)$.

# %%
largest_window = 256 * 2**20 // (2 * 32 * 8 * 128 * 2)
check("04.1", largest_window)

# %% [markdown]
# **2.** Sliding layers hold $\min(T, W)$ = 1,024 tokens, full layers all 32,768; each layer-token is
# $2 \times 16 \times 128 \times 2$ bytes. The layer counts come from the config's layer types.

# %%
gemma = load_model("gemma-3-27b")
sliding, full = gemma.count("sliding"), gemma.count("full")
per_layer_token = 2 * 16 * 128 * 2
gemma_bytes_32k = (sliding * min(32_768, 1024) + full * 32_768) * per_layer_token
print(sliding, "sliding +", full, "full layers")
check("04.2", gemma_bytes_32k)

# %% [markdown]
# **3.** Sinks own slots 0 and 1; the ring of $W = 6 - 2 = 4$ slots starts at slot 2, and position $t \geq 2$ goes to
# $2 + (t - 2) \bmod 4$.

# %%
keep, window = 2, 6 - 2
slot_of_token_20 = keep + (20 - keep) % window
check("04.3", slot_of_token_20)

# %% [markdown]
# **4.** A ring never holds more than its window: ⌈5000 / 256⌉ × 256 = 5,120 slots would be a `KVCache`'s buffer, but
# the ring stops at W = 4,096 slots of 2 × 8 × 128 × 2 B. The check builds the real ring and measures it.

# %%
from kvsim.calc import memory
from kvsim.calc import window_bytes as windows

slots = min(int(memory.allocated_slots(5000)), 4096)
predicted_ring_nbytes = slots * 2 * 8 * 128 * 2
print(f"{slots:,} slots × {2 * 8 * 128 * 2:,} B = {predicted_ring_nbytes:,} B")
check("04.4", predicted_ring_nbytes)

# %% [markdown]
# **Exercise 4 (open).** phi-3-mini-4k's 32 layers all slide with W = 2,047, and its context is 4,096 tokens: at the
# end of a full context each layer keeps 2,047 of the 4,096 tokens, a saving of 4096 / 2047 ≈ 2×. (mlx-lm does not
# build a ring for phi3, lesson 02's engine table notes, so there it saves nothing.)

# %%
phi3 = load_model("phi-3-mini-4k")
print({k: phi3.config[k] for k in ("sliding_window", "max_position_embeddings", "num_hidden_layers")})
s = windows.window_savings(phi3, 4096)
print(f"real {s['real_bytes']:,} B vs windows ignored {s['windows_ignored_bytes']:,} B: {s['ratio']:.3f}×")
