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
# > **요약** (seed 000 「세 가지 구조적 캐시 레이아웃」의 RotatingKVCache·ChunkedKVCache, seed 001 「Attention 최적화 기법이 캐시를 바꾸는 방식」의 sliding window)
# > sliding window 층은 최근 $W$ 개 토큰만 고정 크기 버퍼에 돌려 가며 덮어쓰고, chunked 층은 현재 chunk 만 본다. Mistral 7B 는 32K 에서 캐시가 8 배 준다.
# > 링 버퍼의 슬롯 순서가 시간 순서와 달라도 괜찮다: RoPE 는 쓰기 전에 적용되고 softmax 는 key 의 순서를 따지지 않는다 (seed 000 은 window 를 선형화해 넘긴다).
#
# **You will learn**
# - which keys each query may see in a full, sliding-window, chunked and sink-token layer, drawn as query × key masks;
# - why a sliding-window layer's cache stops growing at $W$ tokens, and what that saves (Mistral 7B: 8× at 32K tokens);
# - how Gemma 3 (5 local : 1 global), gpt-oss (alternating 128-token windows) and Llama 4 Scout (8192-token chunks
#   plus global layers without RoPE) mix bounded and unbounded layers, and why the global layers end up holding almost everything;
# - how a ring buffer stores a window, read from a real `RotatingKVCache`, and why its out-of-order slots do not change attention;
# - that a real `RotatingKVCache`'s measured `nbytes` stop growing at the window while a `KVCache` keeps growing, exactly as `kvsim.calc.memory` predicts.
#
# One numbering throughout: **token $t$ sits at position $t$**, counting from 0, so token 16 is the 17th token.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt
import numpy as np

from kvsim.cache import ChunkedKVCache, RotatingKVCache
from kvsim.calc import memory, units
from kvsim.calc import window_bytes as windows
from kvsim.calc.counterfactual import full_attention
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.lessons.exercises import check
from kvsim.lessons.l04_windows.data import attention_mask, kind_shares
from kvsim.lessons.l04_windows.measure import decode_positions, ring_order_check, ring_prompt_nbytes
from kvsim.lessons.l04_windows.plots import plot_measured_vs_formula
from kvsim.lessons.l04_windows.views import kind_share_view, mask_view, ring_link_view, window_bytes_view
from kvsim.measure.growth import measure_nbytes

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
#
# The four rules side by side, as **masks**: row $q$ is a query position, column $k$ a key position, blue where the
# query may attend. Full attention sees the whole past (a triangle); a sliding window a band of width $W$; a chunked
# layer only its own chunk of $C$ tokens (blocks on the diagonal); **sink tokens** (StreamingLLM, mlx-lm's
# `RotatingKVCache(keep=...)`) are the first few keys, which every query keeps seeing. The framed row is token 16's:
# exactly the keys its layer's cache must still hold. Move the token, the window, the chunk or the sinks:

# %% tags=["nbval-ignore-output"]
mask_view()

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
# Mistral 7B's 128K columns lie past its 32,768 positions (`max_position_embeddings`, printed above): the cache
# arithmetic still holds there, but the model was not built to run that far; its row shows what the window alone does.

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
shares = kind_shares(gemma, 131_072)
print(format_table([{"kind": k, "layers": r["layers"], "layers %": round(r["layers %"], 1), "bytes": r["bytes"],
                     "= ": units.format_bytes(r["bytes"]), "bytes %": round(r["bytes %"], 1)} for k, r in shares.items()]))
for name in ("gemma-3-27b", "gpt-oss-120b", "llama-4-scout"):
    spec = load_model(name)
    print(f"{name}: the saving tends to {spec.num_hidden_layers} / {spec.count('full')} = "
          f"{spec.num_hidden_layers / spec.count('full'):.1f}× (all layers over the global ones)")

# %% [markdown]
# The 52 sliding layers are 83.9 % of the layers but 3.9 % of the bytes: at long context the cache is essentially the
# 10 global layers, so the saving tends to $62/10 = 6.2\times$ (gpt-oss: $2\times$, Llama 4 Scout: $4\times$; the
# limit, all layers over the global ones, is printed above).
# The bars show that split at one length: move the tokens down to 1,024, before any window is full, and layers and
# bytes split alike; from the window on, the full layers take over.

# %% tags=["nbval-ignore-output"]
kind_share_view()

# %% [markdown]
# The same against tokens, one line per layer kind on log-log axes: the sliding layers' line rises until the window is
# full and stays flat, the full layers' line keeps rising and crosses it, and the total follows the full layers from
# there on. Pick Llama 4 Scout and go to 1M tokens: the chunked layers' line drops at every chunk boundary (their
# chunk restarts every $C$ tokens) while the 12 global layers keep growing.

# %% tags=["nbval-ignore-output"]
window_bytes_view()

# %% [markdown]
# ## The ring buffer: which slot holds which token
#
# A sliding layer's cache (`RotatingKVCache`) needs only $W$ slots. Token $t$ goes to slot $t \bmod W$: once the
# ring is full, each new token overwrites the oldest one, the one that just left the window. Nothing is shifted.
#
# To see it on a **real** cache we decode tokens whose key and value *are* their position (+1, so an empty slot
# reads 0), then read the cache's key buffer back slot by slot. Here $W = 6$, ten decode steps; each row is the cache
# right after token $t$ was written:

# %%
ring_cache = RotatingKVCache(max_size=6)
ring = decode_positions(ring_cache, 10)
print(format_table([{"after token": int(p), **{f"slot {j}": (int(v) if v >= 0 else None) for j, v in enumerate(row)},
                     "slot written": int(w), "query sees": len(vis)} for p, row, w, vis in zip(ring.positions, ring.slots, ring.written, ring.visible)]))
print(ring_cache)

# %% [markdown]
# Token 6 lands in slot 0, where token 0 was; from then on the query of token $t$ sees exactly the 6 keys
# $t-5, \dots, t$, and the buffer never grows.
#
# With sink tokens the first `keep` slots are pinned and the ring of recent tokens is the slots after them. The picture
# links the three views of token 16 in `RotatingKVCache(max_size=8, keep=2)`: its mask row (top), the slots of the real
# cache after writing it (middle: tokens 14-16 sit before 11-13, because the ring wrapped), and the same keys in
# temporal order (bottom).

# %% tags=["nbval-ignore-output"]
ring_link_view()

# %% [markdown]
# ## Out of order, and still the same attention
#
# The middle row is not in temporal order. Does attention care? No, for two reasons:
# 1. **RoPE is applied before the write.** A key is rotated by its own position $t$ when it is computed, and then
#    stored. Whatever slot it lands in, it carries its position with it; attention never reads the slot number.
# 2. **Softmax does not care about order.** The output is $\sum_j \mathrm{softmax}(q \cdot k_j)\, v_j$, a sum over the
#    keys: permuting the keys (with their values, and the mask entries) permutes the terms, not the sum.
#
# Seed 000 describes mlxcel's ring as handing attention a **linearized** window (선형화: oldest first). kvsim's
# `RotatingKVCache(ordered=True)` does that: once the ring wraps it copies the window into temporal order. mlx-lm skips
# the copy and returns the ring as stored, with a mask that describes that order; kvsim's `ordered=False` does the same.
# The two are the same attention; linearizing costs a copy of the window per step and buys a simpler mask. Measured on real caches, seeded
# keys rotated by RoPE before each write, one query per decode step:

# %%
order = ring_order_check(steps=24, window=6, sinks=2)
print(f"steps whose keys came back out of temporal order (ordered=False): {order.reordered_steps()} of 24")
print("token 23's keys, as stored:", order.stored_positions[-1], "| linearized:", order.ordered_positions[-1])
print(f"largest |difference| between the two attention outputs: {order.max_abs_difference.max():.1e}")

# %% [markdown]
# ## Chunks: Llama 4 forgets at the boundary
#
# A chunked layer lets the query at $p$ see only keys of its own chunk, $C\lfloor p/C \rfloor, \dots, p$ (the blocks on
# the diagonal of the chunked mask above). So the cache needs $C$ slots, and at every multiple of $C$ the visible set
# drops back to one token. In kvsim's `ChunkedKVCache` position $t$ lives in slot $t \bmod C$: the first token of a new
# chunk overwrites slot 0, and the rest of the old chunk stays in the buffer until overwritten, never attended to again.
# Llama 4 Scout's global NoPE layers (every 4th) keep a standard `KVCache`, so long-range information survives there.

# %%
chunk_cache = ChunkedKVCache(chunk_size=8)
chunk_rows, visible = [], []
for _ in range(12):
    start = chunk_cache.start_position          # read from the cache before the step: the first key it returns
    step = decode_positions(chunk_cache, 1)
    p, vis = int(step.positions[0]), step.visible[0]
    visible.append(vis)
    chunk_rows.append({"after token": p, "visible positions": f"{vis[0]}..{vis[-1]}", "keys attended": len(vis),
                       "cache.start_position before the step": start})
print(format_table(chunk_rows))

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
# ## Summary
# - A query sees a triangle of keys (full), a band of $W$ (sliding), its own chunk of $C$ (chunked), plus any sinks; its
#   layer's cache must hold exactly those keys.
# - A sliding layer keeps $\min(T, W)$ tokens, a chunked layer at most $C$; only full layers grow with $T$.
# - Mistral 7B (all layers W = 4096): 512 MiB per sequence at any length, 8× less than a window-ignoring calculator at 32K.
# - Gemma 3 (5 local : 1 global), gpt-oss (alternating W = 128) and Llama 4 Scout (C = 8192, every 4th layer global, NoPE)
#   save 6.2×, 2× and 4× at long context: their few global layers hold nearly all of the cache.
# - A ring buffer writes token $t$ into slot $t \bmod W$ and never moves anything; the slot order does not matter to
#   attention because RoPE is applied before the write and softmax sums over keys in any order.
# - Real MLX caches measure what `kvsim.calc.memory` computes, slack included.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/04_sliding_windows_and_chunks.ipynb`.
#
# **1.** A Mistral-7B-shaped model (32 layers, 8 KV heads of 128, bf16) with a sliding window in every layer: what is
# the largest window $W$ (in tokens) for which one sequence's cache fits in 256 MiB, however long it gets?

# %%
largest_window = None  # your turn

# %%
check("04.1", largest_window)

# %% [markdown]
# **2.** Gemma 3 27B (52 sliding layers with $W = 1024$, 10 full layers; 16 KV heads of 128 in every layer): how many
# bytes of KV does one sequence of 32,768 tokens hold in bf16?

# %%
gemma_bytes_32k = None  # your turn

# %%
check("04.2", gemma_bytes_32k)

# %% [markdown]
# **3.** `RotatingKVCache(max_size=6, keep=2)`: 2 sink slots, then a ring of 4. In which slot does token 20 sit?
# (Check your reasoning with `ring_link_view`.)

# %%
slot_of_token_20 = None  # your turn

# %%
check("04.3", slot_of_token_20)

# %% [markdown]
# **4. Predict, then measure.** One Mistral 7B layer (8 KV heads × 128, bf16) in a `RotatingKVCache(4096)`, the window
# of its config, receives a single 5,000-token prompt. Predict its `nbytes` (it grows in steps of 256 slots, but
# never past its window), then run the check: it builds the ring, writes the prompt and compares your number with
# what the ring holds.

# %%
predicted_ring_nbytes = None  # your turn

# %%
check("04.4", predicted_ring_nbytes)

# %% [markdown]
# The same measurement, shown: the ring's `nbytes` and its offset (the tokens it has seen).

# %%
measured = ring_prompt_nbytes(window=4096, tokens=5000)
print(f"RotatingKVCache(4096) after 5,000 tokens: nbytes {measured['nbytes']:,} B = "
      f"{measured['nbytes'] // measured['row_bytes']:,} slots of {measured['row_bytes']:,} B; offset {measured['offset']:,}")

# %% [markdown]
# ## Exercises
# 1. Gemma 3 27B: at what context length do the 10 global layers hold 99 % of the cache? (Use `kind_shares`.)
# 2. In the ring view set `sinks` to 2 and `window` to 4. Which slots are never overwritten, and what does the
#    query of token 20 attend to? Check with `decode_positions(RotatingKVCache(6, keep=2), 21).visible[-1]`.
# 3. `RotatingKVCache(6, rewind_tokens=2)` keeps 2 extra slots so that speculative decoding can rewind. Decode 10 tokens
#    into it: how many slots does it allocate, which tokens do they hold, and what is `trimmable_tokens`?
# 4. phi-3-mini-4k declares `sliding_window = 2047`. How much does that save at its 4K context?

# %%
# Exercise 1 - your answer here: the first t with kind_shares(gemma, t)["full"]["bytes %"] >= 99
# Exercise 3 - your answer here: h = decode_positions(RotatingKVCache(6, rewind_tokens=2), 10); look at h.slots[-1].

# %% [markdown]
# ## Self-test
#
# kvsim against the papers' numbers and the real caches above (prints "self-test passed").

# %% jupyter={"source_hidden": true} tags=["self-test"]
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
assert list(visible[8]) == [8] and list(visible[-1]) == [8, 9, 10, 11]
assert all(r["cache.start_position before the step"] == r["after token"] - r["keys attended"] + 1 for r in chunk_rows)
assert chunk_cache.start_position == 8 and chunk_cache.size() == 4
# measured MLX nbytes equal the formula, and the ring stops at W while the KVCache keeps growing
assert (measured_ring == formula_ring).all() and (measured_full == formula_full).all()
assert (measured_ring[token_counts >= 4096] == 4096 * 8 * 128 * 2 * 2).all()
assert measured_full[-1] == 3 * measured_ring[-1]
# the masks are what the real caches returned; out-of-order ring slots gave the same attention
assert [list(np.flatnonzero(attention_mask(10, "sliding", window=6)[t])) for t in range(10)] == [list(v) for v in ring.visible]
assert order.reordered_steps() > 0 and order.max_abs_difference.max() < 1e-5
assert round(shares["sliding"]["bytes %"], 1) == 3.9 and round(shares["sliding"]["layers %"], 1) == 83.9
assert measured["nbytes"] == memory.layer_kv_bytes(mistral.layers[0], 5000, "bf16", view="allocated")
print("self-test passed")
