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
# # 04 · Sliding windows and chunks
#
# **You will learn**
# - why a sliding-window layer's cache stops growing at $W$ tokens, and what that saves (Mistral 7B: 8× at 32K tokens);
# - how Gemma 3 (5 local : 1 global), gpt-oss (alternating 128-token windows) and Llama 4 Scout (8192-token chunks
#   plus global layers without RoPE) mix bounded and unbounded layers, and why the global layers end up holding almost everything;
# - how a ring buffer stores a window: which slot holds which token as decode goes on, read from a real `RotatingKVCache`;
# - what a chunked cache keeps when decode crosses a chunk boundary;
# - that a real `RotatingKVCache`'s measured `nbytes` stop growing at the window while a `KVCache` keeps growing, exactly as `kvsim.calc.memory` predicts.

# %%
# NBVAL_IGNORE_OUTPUT
import importlib.metadata as md

import matplotlib.pyplot as plt
import numpy as np

from kvsim.calc import memory, units, window_bytes as windows
from kvsim.cache import ChunkedKVCache, RotatingKVCache
from kvsim.measure.growth import measure_nbytes
from kvsim.plots.windows import plot_measured_vs_formula
from kvsim.calc.registry import load_model
from kvsim.measure.ring_slots import decode_positions
from kvsim.calc.tables import format_table
from kvsim.calc.counterfactual import full_attention

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## A layer that only looks back W tokens
#
# In **sliding-window attention** the query at position $p$ may attend only to the keys at positions $p-W+1,\dots,p$.
# A key older than that will never be read again by this layer, so the layer's cache can drop it: instead of all
# $T$ tokens it keeps the last $\min(T, W)$. Information from further back still reaches the top of the model,
# one window per layer, through the hidden states; it just is not stored as keys and values.
#
# Mistral 7B uses $W = 4096$ in every layer. Jiang et al. (2023, section 2) note that on a 32K-token sequence
# this cuts the cache 8-fold: $32768 / 4096 = 8$.

# %% [markdown]
# ## The formula, layer by layer
#
# $$
# M_{\text{total}} = B \sum_{\ell=1}^{n_{\text{layers}}} 2\, n_{\text{kv}}\, d_h\, b \cdot T_\ell,
# \qquad
# T_\ell = \begin{cases} T & \text{full attention} \\ \min(T, W) & \text{sliding window} \\
#   T - C \left\lfloor \frac{T-1}{C} \right\rfloor & \text{chunked (the current chunk)} \end{cases}
# $$
#
# | symbol | meaning | `config.json` field |
# |---|---|---|
# | $n_{\text{kv}}, d_h, b, B$ | as in lesson 02 | `num_key_value_heads`, `head_dim`, KV dtype, batch |
# | $W$ | window: the most recent tokens a sliding layer sees | `sliding_window` (RecurrentGemma: `attention_window_size`) |
# | which layers slide | local vs global layers | `layer_types`, else `sliding_window_pattern` (Gemma 3: every 6th layer is global) |
# | $C$ | chunk: a chunked layer sees only its own chunk of $C$ tokens | `attention_chunk_size` (Llama 4) |
# | global layers | full attention, without RoPE in Llama 4 | `no_rope_layers` (0 = NoPE global layer) |
#
# A calculator that multiplies $n_{\text{layers}}$ by $T$ ignores the cases: for these models it is wrong by the
# factors below. kvsim's `variants.full_attention(spec)` is exactly such a calculator (every layer made full).

# %% [markdown]
# ## Mistral 7B: 8× at 32K

# %%
mistral = load_model("mistral-7b-v0.1")
print({k: mistral.config[k] for k in ("num_hidden_layers", "num_key_value_heads", "sliding_window", "max_position_embeddings")})
rows = []
for t in (2048, 4096, 8192, 16384, 32768):
    s = windows.window_savings(mistral, t)
    rows.append({"tokens": t, "real KV": units.format_bytes(s["real_bytes"]),
                 "windows ignored": units.format_bytes(s["windows_ignored_bytes"]), "ratio": round(s["ratio"], 2)})
print(format_table(rows))

# %% [markdown]
# Below 4096 tokens the window is not yet full and both agree. From then on Mistral's cache is a constant
# 512 MiB per sequence, and the window-ignoring number keeps climbing.

# %% [markdown]
# ## Gemma 3, gpt-oss, Llama 4: windows mixed with global layers
#
# Newer models keep a few **global** (full-attention) layers for long-range retrieval and make the rest local.
# - **Gemma 3 27B**: 5 sliding layers (W = 1024) for every global one: 52 sliding + 10 full of 62.
# - **gpt-oss**: sliding (W = 128) and full layers alternate.
# - **Llama 4 Scout**: three chunked layers (C = 8192) then one global layer without RoPE (NoPE): 36 + 12.
#
# The letters below are read from each config (`S` sliding, `F` full, `C` chunked, `N` full without RoPE).

# %%
rows = []
for name in ("mistral-7b-v0.1", "gemma-3-27b", "gemma-3-4b", "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout"):
    spec = load_model(name)
    at32k, at128k = windows.window_savings(spec, 32_768), windows.window_savings(spec, 131_072)
    rows.append({"model": name, "pattern": windows.pattern_period(spec), "layers": spec.num_hidden_layers,
                 "kinds": ", ".join(f"{n} {k}" for k, n in spec.kinds.items()), "W or C": windows.largest_window_tokens(spec),
                 "KV @32K": units.format_bytes(at32k["real_bytes"]), "ignored @32K": units.format_bytes(at32k["windows_ignored_bytes"]),
                 "KV @128K": units.format_bytes(at128k["real_bytes"]), "ratio @128K": round(at128k["ratio"], 2)})
print(format_table(rows))

# %% [markdown]
# Where do Gemma 3 27B's bytes sit at 128K tokens? Every sliding layer holds 1024 tokens, every global layer all 131,072:

# %%
gemma = load_model("gemma-3-27b")
split = windows.bytes_by_kind(gemma, 131_072)
print(format_table([{"kind": k, "layers": gemma.count(k), "bytes": v, "= ": units.format_bytes(v),
                     "share %": round(100 * v / sum(split.values()), 1)} for k, v in split.items()]))

# %% [markdown]
# The 52 sliding layers are 84 % of the layers but 4 % of the bytes: at long context the cache is
# essentially the 10 global layers, so the saving tends to $62/10 = 6.2\times$ (gpt-oss: $2\times$, Llama 4 Scout: $4\times$).
# The plot shows the stacked bytes per layer kind against tokens, with the window-ignoring calculator dashed.

# %%
from kvsim.widgets.windows import draw_window_bytes  # noqa: E402

fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_window_bytes(ax, model="gemma-3-27b", tokens=131_072)
plt.show()

# %% [markdown]
# ## Try it: model, tokens, dtype
#
# Pick Llama 4 Scout and go to 1M tokens: the chunked layers draw a saw-tooth (their chunk restarts every 8192 tokens)
# too thin to see next to the 12 global layers. Pick gpt-oss: the sliding half vanishes after 128 tokens.

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.windows import window_bytes_view  # noqa: E402

window_bytes_view()

# %% [markdown]
# ## The ring buffer: which slot holds which token
#
# A sliding layer's cache (`RotatingKVCache`) needs only $W$ slots. Token $t$ goes to slot $t \bmod W$: once the
# ring is full, each new token overwrites the oldest one, the one that just left the window. Nothing is shifted.
#
# To see it on a **real** cache we decode tokens whose key and value *are* their position (+1, so an empty slot
# reads 0), then read the cache's key buffer back slot by slot. Here $W = 6$, ten decode steps:

# %%
ring_cache = RotatingKVCache(max_size=6)
ring = decode_positions(ring_cache, 10)
print(format_table([{"after token": int(p), **{f"slot {j}": (int(v) if v >= 0 else None) for j, v in enumerate(row)},
                     "slot written": int(w), "query sees": len(vis)} for p, row, w, vis in zip(ring.positions, ring.slots, ring.written, ring.visible)]))
print(ring_cache)

# %% [markdown]
# Token 6 lands in slot 0, where token 0 was; from then on the query of token $t$ sees exactly the 6 keys
# $t-5, \dots, t$, and the buffer never grows. The picture below is drawn from the same kind of real cache: coloured
# cells are the keys the step's query attended to (what `update_and_fetch` returned), the frame marks the slot
# that step wrote.

# %%
from kvsim.widgets.windows import draw_ring_buffer  # noqa: E402

fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
draw_ring_buffer(ax, step=14, window=6, sinks=0)
plt.show()

# %% [markdown]
# ## Try it: decode step, window, sink tokens
#
# Drag the decode step and watch the frame walk around the ring. `keep` (sink tokens) pins the first few tokens
# in their own slots forever, as mlx-lm's `RotatingKVCache(keep=...)` and StreamingLLM's attention sinks do:
# they are hatched and always coloured, and the ring of recent tokens shrinks to the slots after them.

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.windows import ring_buffer_view  # noqa: E402

ring_buffer_view()

# %% [markdown]
# ## Chunks: Llama 4 forgets at the boundary
#
# A chunked layer lets the query at $p$ see only keys of its own chunk, $C\lfloor p/C \rfloor, \dots, p$. So the
# cache needs $C$ slots, and at every multiple of $C$ the visible set drops back to one token. In kvsim's
# `ChunkedKVCache` position $t$ lives in slot $t \bmod C$: the first token of a new chunk overwrites slot 0, and the
# rest of the old chunk stays in the buffer (grey) until overwritten, never attended to again.
# Llama 4 Scout's global NoPE layers (every 4th) keep a standard `KVCache`, so long-range information survives there.

# %%
chunk_cache = ChunkedKVCache(chunk_size=8)
chunks = decode_positions(chunk_cache, 12)
print(format_table([{"after token": int(p), "visible positions": f"{vis[0]}..{vis[-1]}", "keys attended": len(vis),
                     "start_position": int(p) - len(vis) + 1} for p, vis in zip(chunks.positions, chunks.visible)]))

# %%
from kvsim.widgets.windows import draw_chunks  # noqa: E402

fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
draw_chunks(ax, step=12, chunk_size=8)
plt.show()

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.windows import chunk_view  # noqa: E402

chunk_view()

# %% [markdown]
# ## Measured: a real RotatingKVCache stops growing at the window
#
# Now one layer of Mistral 7B at its real geometry (8 KV heads × 128, bf16, W = 4096), fed random keys and values
# 512 tokens at a time, next to the same layer as a full-attention `KVCache`. kvsim's caches grow their buffers in
# steps of 256 tokens, so the formula to compare with is the **allocated** view,
# $\min(\lceil T/256 \rceil \cdot 256,\ W) \cdot 2\, n_{\text{kv}}\, d_h\, b$ (`memory.layer_kv_bytes(..., view="allocated")`).

# %%
token_counts = np.arange(0, 12_289, 512)
measured_ring = measure_nbytes(mistral, 0, token_counts, dtype="bf16", progress=True)
measured_full = measure_nbytes(full_attention(mistral), 0, token_counts, dtype="bf16", progress=True)
formula_ring = memory.layer_kv_bytes(mistral.layers[0], token_counts, "bf16", view="allocated")
formula_full = memory.layer_kv_bytes(full_attention(mistral).layers[0], token_counts, "bf16", view="allocated")
print(format_table([{"tokens": int(t), "RotatingKVCache nbytes": int(r), "sliding formula": int(fr), "KVCache nbytes": int(f), "full formula": int(ff)}
                    for t, r, fr, f, ff in zip(token_counts, measured_ring, formula_ring, measured_full, formula_full) if t % 2048 == 0]))

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
plot_measured_vs_formula(ax, token_counts,
                         measured={"RotatingKVCache(4096), measured": measured_ring, "KVCache, measured": measured_full},
                         formula={"sliding layer, memory.layer_kv_bytes": formula_ring, "full layer, memory.layer_kv_bytes": formula_full},
                         vlines={"W = 4096": 4096}, title="one Mistral 7B layer, bf16: measured nbytes vs the allocated-view formula")
plt.show()

# %% [markdown]
# The whole model is 32 such layers: 32 × 16 MiB = 512 MiB per sequence however long the conversation gets.

# %% [markdown]
# ## Check yourself

# %%
assert windows.window_savings(mistral, 32_768)["ratio"] == 8.0
assert memory.kv_bytes(mistral, 32_768) == 32 * 4096 * memory.layer_token_bytes(mistral.layers[0]) == 512 * 2**20
assert gemma.kinds == {"sliding": 52, "full": 10} and windows.largest_window_tokens(gemma) == 1024
assert windows.pattern_period(gemma) == "SSSSSF"
assert memory.kv_bytes(gemma, 131_072) == (52 * 1024 + 10 * 131_072) * 2 * 16 * 128 * 2
gpt_oss = load_model("gpt-oss-120b")
assert windows.pattern_period(gpt_oss) == "SF" and windows.largest_window_tokens(gpt_oss) == 128
scout = load_model("llama-4-scout")
assert scout.kinds == {"chunked": 36, "full": 12} and windows.pattern_period(scout) == "CCCN"
assert all(not layer.use_rope for layer in scout.layers if layer.kind == "full")
# the real ring: the last W tokens sit in slot t mod W, the query saw exactly the last W positions
last = ring.positions[-6:]
assert (ring.slots[-1][last % 6] == last).all() and list(ring.visible[-1]) == list(last)
assert ring_cache.capacity == 6 and ring_cache.nbytes == 2 * 6 * 4
# the real chunk cache: after crossing position 8 the query sees only its own chunk
assert list(chunks.visible[8]) == [8] and list(chunks.visible[-1]) == [8, 9, 10, 11]
assert chunk_cache.start_position == 8 and chunk_cache.size() == 4
# measured MLX nbytes equal the formula, and the ring stops at W while the KVCache keeps growing
assert (measured_ring == formula_ring).all() and (measured_full == formula_full).all()
assert (measured_ring[token_counts >= 4096] == 4096 * 8 * 128 * 2 * 2).all()
assert measured_full[-1] == 3 * measured_ring[-1]
print("all checks passed")

# %% [markdown]
# ## Summary
# - A sliding layer keeps $\min(T, W)$ tokens, a chunked layer at most $C$; only full layers grow with $T$.
# - Mistral 7B (all layers W = 4096): 512 MiB per sequence at any length, 8× less than a window-ignoring calculator at 32K.
# - Gemma 3 (5 local : 1 global), gpt-oss (alternating W = 128) and Llama 4 Scout (C = 8192, every 4th layer global, NoPE)
#   save 6.2×, 2× and 4× at long context: their few global layers hold nearly all of the cache.
# - A ring buffer writes token $t$ into slot $t \bmod W$ and never moves anything; a chunked cache restarts at slot 0
#   at every chunk boundary.
# - Real MLX caches measure what `kvsim.calc.memory` computes, slack included.
#
# ## Exercises
# 1. Gemma 3 27B: at what context length do the 10 global layers hold 99 % of the cache? (Use `windows.bytes_by_kind`.)
# 2. In the ring-buffer view set `sinks` to 2 and `window` to 4. Which slots are never overwritten, and what does the
#    query of token 20 attend to? Check your answer with `decode_positions(RotatingKVCache(6, keep=2), 21).visible[-1]`.
# 3. `RotatingKVCache(6, rewind_tokens=2)` keeps 2 extra slots so that speculative decoding can rewind. Decode 10 tokens
#    into it: how many slots does it allocate, which tokens do they hold, and what is `trimmable_tokens`?
# 4. phi-3-mini-4k declares `sliding_window = 2047`. How much does that save at its 4K context?

# %%
# Exercise 3 - your answer here: h = decode_positions(RotatingKVCache(6, rewind_tokens=2), 10); look at h.slots[-1].
