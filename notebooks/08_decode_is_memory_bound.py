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
# # 08 · Decode is memory-bound
#
# **You will learn**
# - why one decode step reads the weights and the whole cache but does little arithmetic with them
#   (Sarathi-Serve, DistServe), so its time is set by bytes read, not by FLOPs;
# - to measure it: decode step time on this machine against bytes read per step, next to the machine's measured
#   copy bandwidth, for a GQA, a sliding-window and an MLA layer of real geometry;
# - the floor that memory bandwidth puts under a served model's step time, for any model, accelerator, batch and dtype;
# - which term of the cache formula each optimisation changes (the seeds' technique table, computed), and why
#   FlashAttention, Flash-Decoding, NSA and DSA change what a step **reads**, not what the cache **stores**.

# %%
# NBVAL_IGNORE_OUTPUT
import importlib.metadata as md

import matplotlib.pyplot as plt
import numpy as np

from kvsim.calc import memory, techniques
from kvsim.measure.bandwidth import measure_copy_bandwidth
from kvsim.model import build_model
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.counterfactual import as_mha, attention_variants
from kvsim.calc import speed_floor
from kvsim.measure import step_time
from kvsim.widgets import decode_speed

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| numpy", md.version("numpy"))

# %% [markdown]
# ## Prefill computes, decode reads
#
# Prefill pushes the whole prompt through the model at once: big matrix products, limited by compute.
# A decode step feeds **one** token. To produce it, every weight matrix is read from memory and used for a single
# matrix-vector product, and every attention layer reads its whole cache to score one query against it.
# Lots of bytes, little arithmetic: decode is limited by memory bandwidth (Sarathi-Serve §1 and §3.1, DistServe §2.1).
# DistServe's Appendix A counts it for one attention head of length $s$ over $l$ cached tokens: about $3sl$ memory
# reads and writes for $2sl$ operations, less than one operation per element moved.

# %% [markdown]
# ## The formula: bytes read per step
#
# $$
# R_{\text{step}} = W \;+\; B \sum_{\ell=1}^{n_{\text{layers}}} T_\ell \cdot m_\ell
# \qquad\qquad
# t_{\text{step}} \;\ge\; \frac{R_{\text{step}}}{\text{memory bandwidth}}
# $$
#
# | symbol | meaning | where it comes from |
# |---|---|---|
# | $W$ | weight bytes a step touches (all but the embedding table, of which one row) | parameters × bytes per weight |
# | $B$ | sequences decoded together (each has its own cache; the weights are read once for all) | – |
# | $T_\ell$ | tokens layer $\ell$ keeps: $T$ (full, MLA) or $\min(T, W_\ell)$ (sliding window) | `sliding_window` |
# | $m_\ell$ | bytes per token per layer: $2\, n_{\text{kv}}\, d_h\, b$, or $(d_c + d_h^R)\, b$ for MLA | `num_key_value_heads`, `head_dim`, `kv_lora_rank`, `qk_rope_head_dim` |
#
# `kvsim.calc.memory.read_bytes_per_step` is the sum; `memory.kv_bytes` is what the cache **stores**. For the layouts of
# lessons 02–06 the two are equal. The last part of this lesson shows techniques that make them differ.

# %% [markdown]
# ## How little arithmetic per byte
#
# FLOPs a decode step does per byte it reads (a multiply-add is 2 FLOPs). A weight is used once per sequence in the
# batch: $2B/b$. A cached K/V byte is used by the $g$ query heads that share its KV head: $2g/b$. MLA decoded in the
# absorbed form scores the latent with every one of $n_h$ heads, which is why it does far more arithmetic per byte.

# %%
llama = load_model("llama-3-8b")
dsv3 = load_model("deepseek-v3")
mqa = attention_variants()["MQA"]
rows = [{"what is read": f"weights, batch {b}", "FLOPs per byte (bf16)": techniques.weight_read_intensity(b)}
        for b in (1, 8, 64)]
rows += [{"what is read": f"cache: {name}", "FLOPs per byte (bf16)": techniques.cache_read_intensity(s.layers[0], s.num_attention_heads)}
         for name, s in (("Llama 3 8B if MHA (g = 1)", as_mha(llama)), ("Llama 3 8B, GQA (g = 4)", llama),
                         ("MQA at DeepSeek-V3 sizes (g = 128)", mqa), ("MLA, DeepSeek-V3 (128 heads)", dsv3))]
print(format_table(rows, digits=1))

# %% [markdown]
# A data-centre GPU can do hundreds of FLOPs in the time it reads one byte from its memory, so at batch 1 everything
# in this table except MLA leaves its arithmetic units waiting for memory. Batching helps the weights (read once for
# $B$ sequences) but not the cache: every sequence reads its own.

# %% [markdown]
# ## This machine's physical limit
#
# numpy copies a 128 MiB array five times; the fastest copy counts (other work on the machine only slows it down).
# A copy reads and writes every byte, so it moves $2 \times 128$ MiB.

# %%
# NBVAL_IGNORE_OUTPUT
copy = measure_copy_bandwidth(128 * 2**20, repeats=5)
print(f"copy bandwidth (read + write): {copy.rate / 1e9:.1f} GB/s, fastest copy {1e3 * copy.best_seconds:.1f} ms")

# %% [markdown]
# ## Measured: step time against context
#
# Three real-geometry layers, one each (`kvsim.model.build_model`): Llama 3 8B's GQA (32 query heads, 8 KV heads of
# 128), Mistral 7B's sliding window (same heads, $W$ = 4096) and DeepSeek-V2-Lite's MLA (16 heads, latent 512 +
# RoPE key 64). Vocabulary, FFN and residual width are shrunk so the weights are small next to the cache; float32.
#
# For each context $T$ the caches are filled with $T$ tokens of random keys and values written straight into them
# (a prefill of 8K tokens would take minutes on a CPU; a decode step reads the same bytes whatever the values are),
# then one warm-up step and three timed steps run; the fastest counts.

# %%
names = {"GQA (Llama 3 8B)": "llama-3-8b", "sliding W=4096 (Mistral 7B)": "mistral-7b-v0.1",
         "MLA (DeepSeek-V2-Lite)": "deepseek-v2-lite"}
models = {label: build_model(load_model(name), num_layers=1, hidden_size=512, intermediate_size=512, vocab_size=1024)
          for label, name in names.items()}
gqa_bytes = memory.bytes_per_token(models["GQA (Llama 3 8B)"].spec, "fp32")
print(format_table([{"model": label, "layer": m.spec.layers[0].kind,
                     "cache bytes/token (fp32)": memory.bytes_per_token(m.spec, "fp32"),
                     "vs GQA": round(memory.bytes_per_token(m.spec, "fp32") / gqa_bytes, 3),
                     "weights read per step": step_time.weights_read_bytes(m)} for label, m in models.items()]))

# %%
# NBVAL_IGNORE_OUTPUT
contexts = [0, 2048, 4096, 8192]
results = step_time.measure_variants(models, contexts, steps=3, progress=True)

# %% [markdown]
# What each step read, from the calculator and from the caches themselves (`used_bytes` after the last step):
# the sliding window stops growing at 4096 tokens, and MLA's latent holds 0.28 of the GQA layer's K/V per token.

# %%
print(format_table([{"model": r.label, "context": r.context_tokens, "cache read (calculator)": r.cache_read_bytes,
                     "cache used_bytes (measured)": r.cache_used_bytes} for r in results]))

# %% [markdown]
# And how long each step took (these numbers depend on the machine and on what else it is doing):

# %%
# NBVAL_IGNORE_OUTPUT
print(format_table(step_time.step_rows(results)))

# %%
# NBVAL_IGNORE_OUTPUT
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
decode_speed.draw_step_time_vs_context(ax, results)
plt.show()

# %% [markdown]
# ## Measured: step time against bytes read
#
# The same points against the bytes each step read, weights plus cache. The dashed line is what a step would take if it
# read at the speed numpy copies memory: the physical limit. Points on a straight line through the origin would mean
# "time = bytes ÷ a fixed rate": the GQA and sliding-window points follow roughly one such line (its slope is the
# achieved bandwidth), and the sliding window's stop moving once the window is full.

# %%
# NBVAL_IGNORE_OUTPUT
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
decode_speed.draw_step_time_vs_bytes(ax, results, copy.rate)
plt.show()

# %% [markdown]
# Two things to notice.
#
# - Here MLX's CPU kernels reach only a fraction of the copy bandwidth: attention is plain matrix products, not a
#   kernel tuned to stream the cache. GPU decode kernels (FlashAttention, Flash-Decoding) are written to get as close
#   to their line as possible — which does not change how many bytes there are to read.
# - MLA reads 3.6× less per token than GQA, yet on a CPU its steps need not be faster (here they grow faster): the
#   absorbed form does $2 n_h (2 d_c + d_h^R)$ FLOPs per cached token, 15 FLOPs per float32 byte for 16 heads (printed
#   below), more than a two-core CPU computes while it streams. A GPU does far more FLOPs per byte it reads, and there
#   MLA's smaller reads win.

# %%
print("FLOPs per cache byte, fp32:", {label: round(techniques.cache_read_intensity(m.spec.layers[0], m.spec.num_attention_heads, "fp32"), 1)
                                     for label, m in models.items()})

# %% [markdown]
# ## The floor on a served model
#
# For a real model on a real accelerator the same formula gives the least time a step can take:
# $(W + B \cdot \text{cache read}) / \text{bandwidth}$, with $W$ the active parameters in bf16 (a mixture of experts
# reads only the experts a token uses). Llama 3.1 8B on an H100: 16 GB of weights take 4.8 ms to read; at 128K tokens
# the cache adds another 16 GiB, so a single sequence cannot go faster than about 100 tokens per second.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
decode_speed.draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, tokens=131_072)
plt.show()
t, w_s, step_s = speed_floor.speed_floor("llama-3.1-8b", "H100 80GB", batch=1, tokens=131_072)
print(f"weights alone {1e3 * w_s:.2f} ms per step; at 128K tokens {1e3 * step_s[-1]:.2f} ms = {1 / step_s[-1]:.0f} tokens/s")

# %% [markdown]
# ## Try it: model, accelerator, batch, KV dtype, context
#
# Raise the batch: the weights line stays, each sequence's cache adds its own slope, so total throughput rises while
# each sequence slows down (the title says when the batch's caches no longer fit in the accelerator's memory).
# Switch the KV dtype to fp8 or q4 to halve or quarter the slope; pick a Gemma 3 model to see the sliding-window
# layers flatten it; pick a Mac to see a lower bandwidth.

# %%
# NBVAL_IGNORE_OUTPUT
decode_speed.decode_speed_view()

# %% [markdown]
# ## What each technique changes
#
# Every technique attacks one term of $M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$
# (times $T$), or none. "stored %" is the cache's bytes and "read/step %" the bytes one decode step reads, each relative
# to the baseline in the "example" column, computed by kvsim from the real configs
# (`kvsim.calc.techniques.technique_table`).

# %%
table = techniques.technique_table()
print(format_table(table, columns=["technique", "term changed", "what stays in the cache", "example", "stored %", "read/step %"]))

# %% [markdown]
# - **MQA, GQA** store one K/V pair per group of query heads: $h / n_{\text{kv}}$ times less (Llama 3 8B: 4×).
# - **MLA** stores a 512-element latent and a 64-element RoPE key per layer: 1.76 % of the same-sized MHA (lesson 03).
# - **KV quantization** shrinks $b$: fp8 halves the cache, 2 bits stores an eighth before the scales and biases
#   (lesson 06 counts those; the table shows both).
# - **Sliding window** caps $T$ at $W$ per layer: Mistral 7B ($W$ = 4096) keeps 8× less at 32K tokens (lesson 04).
# - **Hybrids** keep K/V only in their attention layers: Jamba 4 GB against Mixtral's 32 GB at 256K (lesson 05).
# - **NSA and DSA** keep every token. NSA reads compressed blocks, a few selected blocks and a local window;
#   DSA's indexer reads its own small key for every token, then attention reads the top 2048 — and those indexer keys
#   are *extra* storage: DSA stores more than MLA alone.
# - **PagedAttention** stores the same bytes per token in 16-token blocks; what it removes is memory reserved for tokens
#   that never come (here: a request reserved for 2,048 tokens that holds 500; lesson 07).
# - **FlashAttention, Flash-Decoding** store and read the same bytes; they read them faster (no score matrix written to
#   memory, the cache split across many processors even at batch 1).
#
# The last rows do not shrink the cache at all, and still make decode faster: decode's cost is the bytes a step reads
# and how many requests fit at once, not the cache's size by itself.

# %% [markdown]
# ## Stored vs read
#
# One DeepSeek-V3 sequence, bf16: solid lines are what the cache holds, dashed what one decode step reads.
# Dense attention (with or without FlashAttention) reads everything it stores. NSA reads about 1/16 of the tokens
# plus a fixed budget; DSA stores a bit more, and reads the indexer keys plus 2,048 latents.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
decode_speed.draw_stored_vs_read(ax, model="deepseek-v3", tokens=131_072)
plt.show()
print(format_table([{"tokens": t, "NSA tokens read": techniques.nsa_read_tokens(t)} for t in (8192, 16384, 32768, 65536)]))

# %% [markdown]
# The second table is NSA's own count (Yuan et al., 2025, Table 4): 2,048 token-equivalents read at 8K, 5,632 at 64K.

# %% [markdown]
# ## Check yourself

# %%
rows = {r["technique"]: r for r in table}
assert rows["MQA, GQA"]["stored %"] == 25.0                          # Llama 3 8B: 4x
assert rows["MLA"]["stored %"] == 1.76
assert rows["KV quantization (fp8)"]["stored %"] == 50.0 and rows["KV quantization (2-bit)"]["stored %"] == 12.5
assert rows["sliding window"]["stored %"] == 12.5                     # Mistral 7B at 32K: 8x
jamba, mixtral = load_model("jamba-v0.1"), load_model("mixtral-8x7b")
assert round(memory.kv_bytes(jamba, 262_144) / 2**30) == 4 and round(memory.kv_bytes(mixtral, 262_144) / 2**30) == 32
# read-only techniques: the cache stores as much (DSA: more), a step reads less
assert rows["NSA"]["stored %"] == 100.0 and rows["NSA"]["read/step %"] < 10
assert rows["DSA"]["stored %"] > 100.0 and rows["DSA"]["read/step %"] < 15
assert rows["FlashAttention, Flash-Decoding"]["stored %"] == rows["FlashAttention, Flash-Decoding"]["read/step %"] == 100.0
assert techniques.nsa_read_tokens(np.array([8192, 65536])).tolist() == [2048, 5632]
# the measurements: what each step read is what the caches hold, byte for byte
assert all(r.cache_used_bytes == r.cache_read_bytes for r in results)
by = {(r.label, r.context_tokens): r for r in results}
gqa, sw = "GQA (Llama 3 8B)", "sliding W=4096 (Mistral 7B)"
assert by[sw, 4096].cache_read_bytes == by[sw, 8192].cache_read_bytes      # the window is full
assert by[gqa, 8192].cache_read_bytes > 3 * by[gqa, 2048].cache_read_bytes
# timing (loose: the machine may be busy): more bytes read, longer steps; nothing beats memory by much
assert by[gqa, 8192].seconds > by[gqa, 0].seconds
assert np.corrcoef([r.read_bytes for r in results if r.label == gqa], [r.seconds for r in results if r.label == gqa])[0, 1] > 0.5
assert max(r.bytes_per_s for r in results) < 3 * copy.rate
print("all checks passed")

# %% [markdown]
# ## Summary
# - A decode step reads every weight it uses and every cached token its layers keep, and does about one to a few FLOPs
#   per byte: its time is bytes read ÷ achieved bandwidth. Measured here: step time grows with the bytes read, below
#   the machine's copy-bandwidth line.
# - Sliding windows stop the growth at $W$; MLA reads fewer bytes per token (on a CPU its extra arithmetic shows).
# - The bandwidth floor makes long contexts expensive: Llama 3.1 8B on an H100 cannot go beyond about 100 tokens/s
#   for one 128K-token sequence.
# - GQA/MQA, MLA, quantization, windows and hybrids shrink what is **stored** (and so what is read); NSA and DSA shrink
#   only what is **read**; FlashAttention and Flash-Decoding read the same bytes faster; PagedAttention wastes less.
#
# ## Exercises
# 1. Rerun the measurement with `intermediate_size=4096` in `build_model`. How do the weights and the step time at
#    context 0 change, and at which context does the cache now overtake the weights?
# 2. In the view, find the batch at which Llama 3.1 8B on an H100 spends as much time reading KV as reading weights at
#    8K tokens. Check it with `memory.read_bytes_per_step`.
# 3. With `techniques.sparse_bytes(load_model("deepseek-v3"), T, "dsa")`, find the context below which DSA reads
#    *more* than dense MLA (hint: the indexer keys).

# %%
# Exercise 3 - your answer here: compare techniques.sparse_bytes(dsv3, T, "dsa")["read"] with "dense" for T = 1024, 2048, 4096
