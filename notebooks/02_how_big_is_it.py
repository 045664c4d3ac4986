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
# # 02 · How big is a KV cache?
#
# **You will learn**
# - the formula for the bytes one token adds to the cache, and where each symbol lives in a model's `config.json`;
# - why Llama 3 8B needs 128 KiB per token and Llama 3 70B 320 KiB, and what they would need without GQA;
# - how the cache grows with context length and batch, and when it overtakes the weights (8K = 1 GiB, 128K = 16 GiB);
# - how many requests fit on one accelerator once the weights are loaded.

# %%
# NBVAL_IGNORE_OUTPUT
import importlib.metadata as md

import matplotlib.pyplot as plt

from kvsim.calc import capacity, memory, units
from kvsim.calc.explain import explain
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.counterfactual import as_mha, attention_variants
from kvsim.calc.weights import weights_bytes

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## One token, every layer, two vectors per KV head
#
# At every decode step each attention layer stores the new token's key and value vectors for each **key/value head**.
# Query heads do not matter here: in grouped-query attention (GQA) several query heads share one KV head,
# so the cache is sized by `num_key_value_heads`, never by `num_attention_heads`.

# %% [markdown]
# ## The formula
#
# $$
# M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b
# \qquad\qquad
# M_{\text{total}} = M_{\text{token}} \times T \times B
# $$
#
# | symbol | meaning | `config.json` field |
# |---|---|---|
# | $2$ | one key and one value vector | – |
# | $n_{\text{layers}}$ | layers that keep a cache | `num_hidden_layers` |
# | $n_{\text{kv}}$ | key/value heads (MHA: = query heads; GQA: groups; MQA: 1) | `num_key_value_heads` |
# | $d_h$ | length of one head's key/value vector | `head_dim`, else `hidden_size / num_attention_heads` |
# | $b$ | bytes per element: bf16/fp16 2, fp8 1, fp32 4 | the KV dtype you choose |
# | $T$ | tokens in the sequence (prompt + answer so far) | – |
# | $B$ | sequences served at once | – |
#
# Models whose layers differ (sliding windows, MLA, recurrent layers) sum the same product layer by layer; later lessons do that.

# %% [markdown]
# ## Llama 3 8B, read from its config
#
# kvsim reads a model's real `config.json` into one specification per layer and plugs the numbers in:

# %%
llama8b = load_model("llama-3-8b")
cfg = llama8b.config
print({k: cfg[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size")})
print(explain(llama8b, tokens=8192).text)

# %% [markdown]
# ## Llama 3 8B and 70B, and the MHA they avoided
#
# Both use 8 KV heads. Had they kept one KV head per query head (multi-head attention, MHA),
# the cache would be 4× (8B: 32 query heads) and 8× (70B: 64 query heads) larger.

# %%
rows = []
for name in ("llama-3-8b", "llama-3-70b"):
    spec = load_model(name)
    layer = spec.layers[0]
    rows.append({
        "model": name, "layers": spec.num_hidden_layers, "query heads": spec.num_attention_heads,
        "KV heads": layer.num_key_value_heads, "d_h": layer.head_dim,
        "bytes/token (bf16)": memory.bytes_per_token(spec, "bf16"),
        "= ": units.format_bytes(memory.bytes_per_token(spec, "bf16")),
        "if MHA": units.format_bytes(memory.bytes_per_token(as_mha(spec), "bf16")),
    })
print(format_table(rows))

# %% [markdown]
# ## The cache grows with every token held
#
# The cache is proportional to the number of tokens it holds: context length × concurrent requests.
# One 8K-token request of Llama 3 8B needs 1 GiB; sixteen 8K requests, or one 128K request
# (Llama 3.1 8B has the same shape with a 128K context), need 16 GiB. The dotted line is the bf16 weights,
# about 16 GB (8 billion parameters × 2 bytes): near 128K tokens the cache is as large as the model.
# As MHA, it would be as large at a quarter of that, about 32K tokens.

# %%
llama31 = load_model("llama-3.1-8b")
points = [("one 8K request", 8192, 1), ("16 × 8K requests", 8192, 16), ("one 128K request", 131_072, 1)]
print(format_table([{"case": c, "tokens": t, "batch": b, "KV bytes": memory.kv_bytes(llama31, t, b),
                     "= ": units.format_bytes(memory.kv_bytes(llama31, t, b))} for c, t, b in points]))
cross = capacity.crossover_tokens(llama31)
cross_mha = capacity.crossover_tokens(as_mha(llama31))
print(f"weights {weights_bytes(llama31, 'bf16'):,} B; the cache equals them at {cross:,} tokens ({cross_mha:,} if MHA)")

# %%
from kvsim.widgets.size import draw_kv_vs_tokens  # noqa: E402

fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_kv_vs_tokens(ax, model="llama-3.1-8b", tokens=131_072, batch=1, kv_dtype="bf16")
plt.show()

# %% [markdown]
# ## Try it: model, tokens, batch, dtype
#
# Move the sliders. Switch to a Gemma 3 or gpt-oss model and watch the curve bend: their sliding-window layers
# stop growing at the window (lesson 04). A DeepSeek model has no MHA line: its MLA cache is not made of KV heads (lesson 03).

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.size import kv_size_view  # noqa: E402

kv_size_view()

# %% [markdown]
# ## How many requests fit on one GPU?
#
# Serving memory is shared: the weights are fixed, and what is left (minus activations and a reserve) holds KV caches.
# Kwon et al. (2023, Figure 1) served a 13B model on an A100 40GB: about 65 % of memory held the weights (26 GB)
# and about 30 % the KV cache. For OPT-13B one token needs 2 × 40 layers × 5120 × 2 B = 800 KiB
# (40 heads of 128, MHA), so 30 % of 40 GB holds only about 14,300 tokens: seven 2,048-token requests.

# %%
opt13b = attention_variants(num_layers=40, num_attention_heads=40, head_dim=128)["MHA"]
a100_40gb = 40 * 10**9
kv_share = int(0.30 * a100_40gb)
per_token = memory.bytes_per_token(opt13b, "fp16")
n_requests = capacity.max_concurrent_sequences(opt13b, 2048, a100_40gb, utilization=0.95, kv_dtype="fp16",
                                               weights_bytes=int(0.65 * a100_40gb))
print(f"OPT-13B: {per_token:,} B per token; 30 % of 40 GB = {kv_share:,} B = {kv_share // per_token:,} tokens")
print(f"requests of 2,048 tokens that fit: {n_requests}")

# %% [markdown]
# The same question for the models in kvsim's registry: pick a model, an accelerator, a context length and the
# share of memory the server may use (vLLM's default `gpu_memory_utilization` is 0.9).

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.size import capacity_view  # noqa: E402

capacity_view()

# %% [markdown]
# ## Check yourself

# %%
assert memory.bytes_per_token(load_model("llama-3-8b"), "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072
assert memory.bytes_per_token(load_model("llama-3-70b"), "bf16") == 327_680
assert memory.bytes_per_token(as_mha(load_model("llama-3-8b")), "bf16") == 512 * 2**10
assert memory.kv_bytes(llama31, 8192) == 2**30
assert memory.kv_bytes(llama31, 8192, batch=16) == memory.kv_bytes(llama31, 131_072) == 16 * 2**30
assert 2 * memory.kv_bytes(llama31, 8192, kv_dtype="fp8") == memory.kv_bytes(llama31, 8192, kv_dtype="bf16")
assert cross_mha * 4 in range(cross - 4, cross + 4)
assert per_token == 800 * 2**10 and n_requests == 7
print("all checks passed")

# %% [markdown]
# ## Summary
# - $M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$: count KV heads, not query heads.
# - Llama 3 8B: 128 KiB per token, 1 GiB per 8K request, 16 GiB for 16 × 8K or one 128K request, as large as its weights near 128K tokens.
# - GQA with 8 KV heads is what keeps Llama 3 at a quarter (8B) or an eighth (70B) of the MHA cache.
# - On a GPU, what remains after the weights decides how many requests run at once.
#
# ## Exercises
# 1. With `kvsim calc llama-3-70b --tokens 32768 --batch 4 --tp 8 --json` in a terminal, how much KV does each of 8 GPUs hold? Why does `--tp 16` not halve it again?
# 2. Find a registry model whose `head_dim` is not `hidden_size / num_attention_heads` (hint: Gemma 2, gpt-oss, Qwen3-Next). By how much would a calculator that derives `head_dim` be wrong?
# 3. At what context length does one request of Llama 3 70B need as much KV as the 8B model's whole bf16 weights?

# %%
# Exercise 3 - your answer here: compare memory.kv_bytes(load_model("llama-3-70b"), T) with weights_bytes(load_model("llama-3-8b")).
