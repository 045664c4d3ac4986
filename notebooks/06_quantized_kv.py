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
# # 06 · Quantized KV
#
# > **요약** (seed 001 「Attention 최적화 기법이 캐시를 바꾸는 방식」의 KV cache 양자화, seed 000 「세 가지 구조적 캐시 레이아웃」의 KV 저장 모드)
# > 양자화는 원소당 바이트 $b$ 만 바꾼다: FP8 이면 절반, 2 비트면 8 분의 1 이지만, 그룹마다 붙는 scale·bias 와 원래 정밀도로 남기는 최근 토큰이 더해진다.
# > 비트를 줄이면 attention 오차가 커지고, key 를 채널별로 양자화하면 (KIVI) outlier 채널이 있는 key 에서 오차가 준다.
#
# **You will learn**
# - what a quantized KV cache stores: packed low-bit integers **plus one scale and one bias per group**, and why
#   "FP8 halves the cache, 2-bit is an eighth" is true only before that metadata;
# - how many bytes Llama 3 8B needs per token at fp16, fp8 and 8/6/4/3/2-bit with groups of 32, 64 and 128;
# - that a real MLX `QuantizedKVCache` holds exactly the bytes the formula predicts;
# - how much attention output error each setting costs, measured on real tensors, and how keeping the newest
#   tokens in full precision buys much of it back;
# - why KIVI quantizes keys per channel rather than per token, and its whole recipe (keys per channel, values per token,
#   newest tokens exact) as one setting, measured on the same tensors;
# - the seed's storage modes side by side: FP16, uniform quantization and TurboQuant-style quantization (a random
#   rotation before the same quantizer), compared at equal bytes with every byte of metadata counted.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt
import mlx.core as mx

from kvsim.cache import QuantizedKVCache, RandomizedHadamard, make_caches
from kvsim.calc import memory, quant_bytes
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.lessons.exercises import check
from kvsim.lessons.l06_quantized.measure import (
    error_pivot,
    error_sweep,
    errors_by,
    kivi_recipe_error,
    measure_quantized_nbytes,
    recent_attention_share,
    recent_window_table,
    scheme_errors,
    storage_mode_rows,
    synthetic_qkv,
    tradeoff_points,
    view_error,
)
from kvsim.lessons.l06_quantized.plots import plot_error_vs_bits, plot_error_vs_bytes, plot_storage_modes
from kvsim.lessons.l06_quantized.views import channel_quant_view, quantized_kv_view

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## Quantization changes one term: the bytes per element
#
# Lesson 02's formula $M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$ has one
# term that does not depend on the architecture: $b$, the bytes of one stored element. Storing keys and values in
# FP8 instead of BF16 halves $b$; storing them as 2-bit integers makes it an eighth. The seeds' technique table
# says exactly this, with a caveat: *before the quantization constants and the recent tokens kept in full precision*.
# This lesson adds those two back.

# %% [markdown]
# ## Groups, scales and biases
#
# Integer quantization (`mx.quantize`, which mlx-lm's and kvsim's quantized caches use) cuts every key or value
# vector of $d_h$ elements into groups of $g$ consecutive elements. For each group it stores a **bias** $\beta$, one
# edge of the group's range, and a **scale** $s \approx (\max - \min) / (2^{\text{bits}} - 1)$, and every element as
# the integer $q = \operatorname{round}((x - \beta) / s)$ in `bits` bits; it reads back $\hat{x} = s\,q + \beta$.
# The integers are packed into `uint32` words; the scale and bias stay in the input dtype (bf16 here).
# A larger group means less metadata but one scale for more elements, so a coarser grid.
#
# Which edge is the bias? Not always the minimum: `mx.quantize` takes the edge with the **larger magnitude**, and the
# scale is negative when that edge is the maximum (the grid then runs downwards from it). Two groups of 64, at 4 bits:

# %%
for row in ([-1.0, 0.5, 2.0, 0.1], [-3.0, 0.5, 1.0, 0.2]):
    group = mx.array([row * 16])                       # one group of 64 elements
    _, scale, bias = mx.quantize(group, group_size=64, bits=4)
    print(f"min {min(row):+.1f}  max {max(row):+.1f}  ->  bias {bias.item():+.1f}  scale {scale.item():+.4f}")

# %% [markdown]
# ## The formula
#
# $$
# M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times
# \Big( \underbrace{d_h \cdot \tfrac{\text{bits}}{8}}_{\text{packed data}}
#     + \underbrace{2 \cdot \tfrac{d_h}{g} \cdot b_s}_{\text{scale + bias per group}} \Big)
# $$
#
# With the newest $R$ tokens kept in full precision (dtype $b_s$), a sequence of $T$ tokens needs
#
# $$
# M(T) = 2\, n_{\text{layers}}\, n_{\text{kv}} \Big[ \max(T - R, 0) \cdot \big(d_h \tfrac{\text{bits}}{8} + 2 \tfrac{d_h}{g} b_s\big)
#        + \min(T, R) \cdot d_h\, b_s \Big]
# $$
#
# | symbol | meaning | where it comes from |
# |---|---|---|
# | $n_{\text{layers}}$ | layers that keep a cache | `num_hidden_layers` |
# | $n_{\text{kv}}$ | key/value heads | `num_key_value_heads` |
# | $d_h$ | elements in one key or value vector | `head_dim` (else `hidden_size / num_attention_heads`) |
# | bits | bits per stored integer: 8, 6, 4, 3, 2 | the cache setting (`kv_bits` in mlx-lm) |
# | $g$ | elements sharing one scale and bias: 32, 64, 128 (must divide $d_h$) | the cache setting (`kv_group_size`, default 64) |
# | $b_s$ | bytes of a scale, a bias, and a full-precision element (bf16: 2) | the model's activation dtype |
# | $R$ | newest tokens kept unquantized | the cache setting (`full_precision_tokens` in kvsim) |
#
# kvsim computes this in `memory.parse_kv_dtype(name, group_size, scale_dtype, full_precision_tokens)` and
# `memory.layer_token_bytes`; `quant_bytes.token_bytes_split` splits it into data and metadata.

# %% [markdown]
# ## Llama 3 8B at every setting
#
# 32 layers × 8 KV heads × $d_h$ = 128. One 128-element vector at 4 bits is 64 B of data; with $g$ = 64 it carries
# 2 groups × (scale + bias) × 2 B = 8 B of metadata, an eighth on top. The column `% of fp16 (data)` is the seed's
# "before metadata" ratio; `% of fp16 (all)` is what the memory really holds.

# %%
llama8b = load_model("llama-3-8b")
print(format_table(quant_bytes.bytes_table(llama8b, tokens=8192), digits=1))

# %% [markdown]
# FP8 halves the cache exactly (it has no metadata). 2-bit data is an eighth of fp16, but with groups of 32 the
# scales and biases add half as much again: 24,576 B per token is 18.8 % of fp16, not 12.5 %. Small groups hurt
# most at low bit widths, where the data itself is small.

# %% [markdown]
# ## A real quantized cache
#
# `kvsim.cache.QuantizedKVCache` stores what `mx.quantize` returns. Ten tokens of one Llama 3 8B layer, in bf16:

# %%
k = mx.random.normal((1, 8, 10, 128), key=mx.random.key(0)).astype(mx.bfloat16)
v = mx.random.normal((1, 8, 10, 128), key=mx.random.key(1)).astype(mx.bfloat16)
cache = QuantizedKVCache(bits=4, group_size=64)
fetched = cache.update_and_fetch(k, v)
for name, part in zip(("packed data", "scales", "biases"), fetched.keys):
    print(f"keys {name:<11} shape {tuple(part.shape)}  {part.dtype}")
print(f"offset {cache.offset}, token slots allocated {cache.capacity}, nbytes {cache.nbytes:,}, filled bytes {cache.used_bytes:,}")

# %% [markdown]
# 128 elements × 4 bits = 16 `uint32` words, and 128 / 64 = 2 scales and 2 biases per vector. Like every kvsim cache it
# grows its buffers 256 token slots at a time, so `nbytes` is the **allocated** view and `used_bytes` the
# **theoretical** one. Now one full layer fed up to 4,096 tokens, with and without $R$ = 128 full-precision tokens,
# against `memory.layer_kv_bytes`:

# %%
layer = llama8b.layers[0]
counts = [1, 256, 257, 1000, 4096]
rows = []
for recent in (0, 128):
    dt = memory.parse_kv_dtype("q4", group_size=64, scale_dtype="bf16", full_precision_tokens=recent)
    measured = measure_quantized_nbytes(layer, counts, bits=4, group_size=64, full_precision_tokens=recent)
    allocated = memory.layer_kv_bytes(layer, measured.tokens, dt, view="allocated")
    theoretical = memory.layer_kv_bytes(layer, measured.tokens, dt)
    rows += [{"R": recent, "tokens": int(t), "nbytes (MLX)": int(n), "allocated formula": int(a),
              "used_bytes (MLX)": int(u), "theoretical formula": int(th)}
             for t, n, a, u, th in zip(measured.tokens, measured.nbytes, allocated, measured.used_bytes, theoretical)]
print(format_table(rows))

# %% [markdown]
# Every measured number equals the formula. Times 32 layers, one 4,096-token sequence of Llama 3 8B:

# %%
q4_g64 = memory.parse_kv_dtype("q4", group_size=64)
print(f"q4, g = 64: {memory.kv_bytes(llama8b, 4096, kv_dtype=q4_g64) / 2**20:g} MiB; "
      f"bf16: {memory.kv_bytes(llama8b, 4096, kv_dtype='bf16') / 2**20:g} MiB")

# %% [markdown]
# ## What it costs: attention error on real tensors
#
# Fewer bits mean a coarser grid, so the cached keys and values change and so does what attention computes.
# We measure it directly: queries attend to a real `QuantizedKVCache` through `quantized_sdpa` (MLX's
# `quantized_matmul` on the packed data, no dequantized copy), and to the exact keys and values through
# dense attention. The error is $\lVert O_q - O \rVert_F / \lVert O \rVert_F$ over all heads and queries.
#
# The keys and values are synthetic, seeded and **structured** to look like two things reported for real models
# (they are not a trained model's tensors): a few key channels much larger than the rest (KIVI finds such outlier
# channels in key caches; with per-token groups one outlier stretches its whole group's scale), and queries and keys
# that share a direction, which RoPE turns into a preference for nearby tokens. 1,024 tokens, 8 queries at the end,
# $d_h$ = 128, 4 query heads per KV head, rope_theta 500,000 as in Llama 3; computed in float32.

# %%
qkv = synthetic_qkv(tokens=1024, queries=8)
print("q", tuple(qkv.q.shape), "k", tuple(qkv.k.shape), "v", tuple(qkv.v.shape))
share_128 = recent_attention_share(qkv, 128)
print(f"share of the attention on the newest 128 of 1,024 tokens: {100 * share_128:.0f} %")

# %% tags=["nbval-ignore-output"]
sweep = error_sweep(qkv, full_precision_tokens=(0, 128), progress=True)
print(format_table(error_pivot(sweep, recent_tokens=0)))

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.4), layout="constrained")
plot_error_vs_bits(ax, {f"group {g}": c for g, c in errors_by([r for r in sweep if r["recent R"] == 0]).items()},
                   dashed={f"group {g}, newest 128 exact": c
                           for g, c in errors_by([r for r in sweep if r["recent R"] == 128]).items()},
                   title="attention error of a real QuantizedKVCache (1,024 tokens, structured K/V)")
plt.show()

# %% [markdown]
# From 3 bits up, each extra bit roughly halves the error; 8-bit is around 1 %, 2-bit tens of percent. Smaller groups help at every bit
# width (a scale fitted to 32 elements wastes less of the grid on an outlier) but cost metadata. Which is better
# per byte? Plot the same errors against Llama 3 8B's bytes per token:

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
plot_error_vs_bytes(ax, tradeoff_points(llama8b, sweep),
                    title="Llama 3 8B: bytes per token (with bf16 scales and biases) against error")
plt.show()

# %% [markdown]
# Per byte, the three group sizes lie on nearly one curve: what a smaller group gains in accuracy it pays for in
# metadata. Bits decide where on the curve you are; at 4 bits and above, groups of 32 sit slightly lower (better).

# %% [markdown]
# ## Keeping the newest tokens exact
#
# Attention is not spread evenly: here more than half of it falls on the newest 128 of 1,024 tokens (printed above). Keeping those $R$ tokens in
# bf16 and quantizing a token only once it is older (kvsim's `full_precision_tokens`; KIVI keeps a similar
# full-precision residual) removes much of the error for a fixed cost of $R$ bf16 tokens. That cost is large
# at 1,024 tokens and small at 32K:

# %% tags=["nbval-ignore-output"]
window_rows = recent_window_table(llama8b, qkv, bits=4, group_size=64, progress=True)
print(format_table(window_rows))

# %% [markdown]
# ## Try it: bits, group size, recent window, tokens
#
# Each redraw fills a fresh `QuantizedKVCache` with the lesson's structured keys and values (the same sample as the
# tables above, at the chosen length) and measures the attention error; the bars are one Llama 3 8B sequence at that
# length. At its defaults it is the recent-window table's row $R$ = 128.

# %% tags=["nbval-ignore-output"]
quantized_kv_view()

# %% [markdown]
# ## Keys per channel: KIVI
#
# kvsim's `QuantizedKVCache`, like mlx-lm's, groups **per token**: the $g$ elements sharing a scale and a bias are $g$
# consecutive channels of one token's vector (`mx.quantize` groups along the last axis, and the cache grows one token at
# a time). KIVI (Liu et al., 2024) quantizes **keys per channel** instead, and values per token: a group is one channel
# over $g$ consecutive tokens. Why: the large values of key caches sit in a few fixed channels. In a per-token group one
# outlier channel sets the scale for all the channels beside it, and their small values land on a coarse grid. In a
# per-channel group the outlier channel gets scales of its own and the other channels keep a fine grid. The metadata is
# the same, one scale and one bias per $g$ elements; the price is that a group is complete only after $g$ tokens, so
# KIVI keeps the newest tokens in full precision until it is.
#
# The picture: the first 64 tokens of one key head of the lesson's sample (left, outlier channels dark), and the error
# each grouping leaves in them (one colour scale for both, on the colour bar). Per token, the error spreads over every
# channel; per channel, it stays in the outlier channels. The attention errors are over the whole sample, values per
# token in both. Move to 8 bits and groups of 32 (exercise 3):

# %% tags=["nbval-ignore-output"]
channel_quant_view()

# %% [markdown]
# The same comparison at every bit width, on the lesson's sample and on the same sample without outlier channels
# (`synthetic_qkv(..., outlier_channels=0)`):

# %% tags=["nbval-ignore-output"]
no_outliers = synthetic_qkv(tokens=1024, queries=8, outlier_channels=0)
kivi_rows = []
for label, sample in (("4 outlier channels", qkv), ("no outlier channels", no_outliers)):
    for bits in (2, 3, 4, 8):
        e = scheme_errors(sample, bits, 64)
        kivi_rows.append({"sample": label, "bits": bits, "keys per token %": round(100 * e["keys per token"], 2),
                          "keys per channel %": round(100 * e["keys per channel (KIVI)"], 2)})
print(format_table(kivi_rows))

# %% [markdown]
# With outlier channels, per-channel keys cut the error by about half at 3 and 4 bits; without them the two groupings
# are close. KIVI's argument rests on the outliers being there.
#
# **How does this compare with a real model?** Not measured here: kvsim's models have random weights, so there are
# no trained keys and values to quantize. The outliers in this sample are a stand-in with the property KIVI describes;
# their size (4 of 128 channels, 8 times larger) is a choice, not a measurement. And a relative attention error on one
# layer is not what papers report: KIVI reports task quality, and finds that its 2-bit cache (keys per channel, values
# per token, recent tokens in full precision) keeps Llama, Falcon and Mistral models at almost the quality of 16 bits.
# Read the numbers here for their direction (bits matter most; per-channel keys help when outlier channels exist),
# not their size.
#
# ### KIVI's whole recipe, as one setting
#
# KIVI does three things at once: keys per channel, values per token, and the newest tokens in full precision (its
# residual; a key group per channel is complete only after $g$ tokens, so the incomplete remainder stays exact too).
# `kivi_recipe_error` runs all three on the lesson's sample, beside kvsim's `QuantizedKVCache` with the same
# $R$ = 128 exact tokens (keys and values per token), at the same bits and $g$: same metadata per element.

# %%
recipe_rows = []
for bits in (2, 3, 4):
    for g in (32, 64):
        e = kivi_recipe_error(qkv, bits, g, recent_tokens=128)
        recipe_rows.append({"bits": bits, "g": g, "exact tokens": e["exact tokens"],
                            "per token, R exact %": round(100 * e["per token (kvsim cache)"], 2),
                            "KIVI recipe %": round(100 * e["KIVI recipe"], 2)})
print(format_table(recipe_rows))

# %% [markdown]
# With the recent tokens exact in both, per-channel keys still pay at every row here. At 2 bits the values, quantized
# per token in both columns, keep the error high: that is where KIVI's paper leans on its residual and on the task
# quality it measures, not on this single-layer error.
#
# ## Three storage modes side by side: FP16, uniform, rotated
#
# Seed 000's engine offers three ways to store K and V: full precision (FP16), uniform quantization (the
# `QuantizedKVCache` above) and a TurboQuant-style mode. The third multiplies every key and value vector by a random
# orthogonal matrix before the same scalar quantizer and undoes it on read. kvsim's `TurboQuantKVCache` uses a
# randomized Hadamard rotation $R = H\,\mathrm{diag}(s)/\sqrt{d}$ ($H$ the $d \times d$ Hadamard matrix, $s$ a
# seeded vector of $\pm 1$), applied with `mx.hadamard_transform` in $O(d \log d)$.
#
# Why it helps: after the rotation every coordinate mixes all channels, so an outlier channel's energy is spread over
# the whole vector and no group has one coordinate that stretches its scale. Why it costs almost nothing: $R$ is
# orthogonal, so $(Rq)\cdot(Rk) = q \cdot k$; the cache rotates the query instead of un-rotating every key, attends over
# the stored codes, and rotates the output back once. The only extra bytes are the signs $s$: one byte per element of
# $d_k + d_v$, per layer, not per token. The rotation is exact in float32:

# %%
rotation = RandomizedHadamard(128, seed=0)
x = qkv.k[0, 0, :64]                                                       # 64 keys of the lesson's sample
print(f"max |Rᵀ R x − x| = {mx.abs(rotation.inverse(rotation.rotate(x)) - x).max().item():.0e}"
      f"  (largest |x| {mx.abs(x).max().item():.1f}); signs kept: {rotation.nbytes} B")

# %% [markdown]
# `make_caches(spec, kv_dtype="q4", quant_mode="rotated")` builds one `TurboQuantKVCache` per layer (each layer its
# own signs). The three modes on the lesson's sample, each quantized mode a real cache filled with all 1,024 tokens;
# `data` and `metadata` are counted by `quant_bytes.storage_mode_bytes` and `nbytes` read from the cache. The sample is
# float32, so each scale and bias takes 4 bytes here (2 in a bf16 model):

# %%
modes = storage_mode_rows(qkv, bits=(2, 3, 4, 6, 8), group_size=64)
print(format_table([{"mode": r["mode"], "bits": r["bits"], "data B": r["data"], "metadata B": r["metadata"],
                     "total B": r["total"], "nbytes (cache)": r.get("nbytes", "-"),
                     "bits/element": round(r["bits_per_element"], 3), "error %": round(100 * r["relative_error"], 2)}
                    for r in modes]))

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.4), layout="constrained")
plot_storage_modes(ax, modes, title="attention error against the bytes stored, metadata included "
                                    "(lesson 06's sample, g = 64)")
plt.show()

# %% [markdown]
# At equal bytes (the rotated points sit a few sign bytes to the right of the uniform ones, invisible at this scale)
# the rotation lowers the error at every bit width on these keys with outlier channels: the table's `error %` column.
# On keys without outliers it neither helps nor hurts much (`tests/test_turboquant.py` checks both).
#
# ## Predict, then measure
#
# **Your turn.** `make_caches(load_model("llama-3-8b"), kv_dtype="q4", group_size=64, quant_mode="rotated")[0]` is
# one layer's `TurboQuantKVCache`. Feed it 300 tokens of bf16 keys and values (8 KV heads of 128). Predict its `nbytes`
# before you run it: slots come 256 at a time, each vector's codes, scales and biases as in the formula above, and the
# rotation's signs.

# %%
rotated_nbytes_prediction = None  # your turn

# %%
check("06.3", rotated_nbytes_prediction)

# %% [markdown]
# Now the real cache; the checker compares the measurement with the same number:

# %%
rotated = make_caches(llama8b, kv_dtype="q4", group_size=64, quant_mode="rotated")[0]
kv300 = mx.random.normal((1, 8, 300, 128), key=mx.random.key(2)).astype(mx.bfloat16)
rotated.update_and_fetch(kv300, kv300)
print(type(rotated).__name__, "offset", rotated.offset, "nbytes", f"{rotated.nbytes:,}")
check("06.3", rotated.nbytes)

# %% [markdown]
# ## Summary
# - A quantized cache stores $d_h \cdot \text{bits}/8$ bytes of packed integers **plus** $2 \cdot (d_h/g)$ scales and biases per
#   vector; the seed's "FP8 halves, 2-bit is an eighth" holds before that metadata (Llama 3 8B: 128 → 64 KiB at FP8,
#   16 KiB of 2-bit data + 4 KiB of metadata at $g$ = 64).
# - A real MLX `QuantizedKVCache` holds exactly those bytes (allocated in steps of 256 tokens).
# - From 3 bits up, each bit roughly halves the attention error; smaller groups lower it further at a metadata cost.
# - Keeping the newest tokens exact targets the tokens attention reads most; its fixed cost vanishes at long contexts.
# - Grouping keys per channel (KIVI) gives outlier channels their own scales: about half the error at 3-4 bits on keys
#   with outlier channels, little change without them; KIVI's full recipe also keeps the newest tokens exact.
# - A random rotation before the same quantizer (TurboQuant-style) spreads outlier channels over every coordinate: lower
#   error at the same bytes, for one byte of signs per element of $d_k + d_v$ per layer.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/06_quantized_kv.ipynb`.
#
# **1.** Llama 3 8B (32 layers, 8 KV heads of 128) at 4 bits with groups of 64 and bf16 scales and biases, keeping
# the newest $R$ = 256 tokens in bf16: from how many tokens $T$ on is it smaller than half
# of the bf16 cache? (Write $M(T)$ for both and solve, or search with `memory.kv_bytes`.)

# %%
first_tokens_below_half = None  # your turn

# %%
check("06.2", first_tokens_below_half)

# %% [markdown]
# ## Exercises
# 1. DeepSeek-V3 caches a 512-element latent and a 64-element RoPE key per layer (lesson 03). Which group sizes can
#    quantize the RoPE key? Compute its bytes per token at q4 with `quant_bytes.token_bytes_split`.
# 2. Set `outlier_channels=0` in `quant_error.synthetic_qkv` and rerun the sweep. Which group size gains most, and why?
# 3. In the per-channel view, move to 8 bits and to groups of 32. Does per-channel grouping still pay? Why does the
#    gap shrink as the grid gets finer?

# %%
# Exercise 2 - your answer here: error_sweep(synthetic_qkv(tokens=1024, queries=8, outlier_channels=0))

# %% [markdown]
# ## Self-test
#
# kvsim against the seed's ratios and the real caches above (the cell prints "self-test passed" when everything
# holds; its source is collapsed: click to open it).

# %% jupyter={"source_hidden": true} tags=["self-test"]
fp16 = memory.bytes_per_token(llama8b, "fp16")
q2 = memory.parse_kv_dtype("q2", group_size=64)
assert memory.bytes_per_token(llama8b, "fp8") * 2 == fp16 == 131_072                     # FP8 halves
assert quant_bytes.token_bytes_split(llama8b, q2)["data"] * 8 == fp16                   # 2-bit: an eighth before metadata
assert memory.bytes_per_token(llama8b, q2) == fp16 // 8 + 32 * 8 * 2 * (2 * 2 * 2)       # + 2 groups × scale, bias × 2 B
assert all(r["nbytes (MLX)"] == r["allocated formula"] and r["used_bytes (MLX)"] == r["theoretical formula"] for r in rows)
assert memory.kv_bytes(llama8b, 4096, kv_dtype=q4_g64) == 144 * 2**20
errors = errors_by([r for r in sweep if r["recent R"] == 0])
for g, (bits, err) in errors.items():
    assert all(err[i] > err[i + 1] for i in range(len(err) - 1)), f"group {g}: error must fall with bits"
assert errors[32][1][-1] < 0.02 and errors[128][1][0] > 0.3                             # 8-bit ~1 %, 2-bit tens of %
assert all(errors[32][1] < errors[128][1])                                               # smaller groups, smaller error
assert 0.5 < share_128 < 0.7
assert window_rows[0]["error %"] > 1.4 * next(r["error %"] for r in window_rows if r["R"] == 128)
# the view measures the tables' sample: at its defaults, the recent-window table's R = 128 row
assert round(100 * view_error(4, 64, 128, 1024), 2) == next(r["error %"] for r in window_rows if r["R"] == 128)
assert all(r["keys per channel %"] < r["keys per token %"] for r in kivi_rows if r["sample"] == "4 outlier channels")
assert all(r["KIVI recipe %"] < r["per token, R exact %"] for r in recipe_rows)
# storage modes: real nbytes = the pure count; rotated adds only the signs and lowers the error here
by_mode = {(r["mode"], r["bits"]): r for r in modes}
for b in (2, 3, 4, 6, 8):
    u, r = by_mode["uniform", b], by_mode["rotated", b]
    assert u["nbytes"] == u["total"] and r["nbytes"] == r["total"] and r["total"] - u["total"] == 128 + 128
    assert r["relative_error"] < u["relative_error"]
assert rotated.nbytes == 512 * 8 * 2 * (64 + 8) + 256
print("self-test passed")
