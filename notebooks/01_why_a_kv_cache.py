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
# # 01 · Why a KV cache?
#
# > **요약** (seed 001 「캐시가 없으면 같은 계산을 매 스텝 반복한다」, 「Prefill 은 캐시를 만들고 decode 는 캐시를 읽는다」)
# > causal mask 때문에 과거 토큰의 key·value 는 바뀌지 않으므로, 한 번 계산해 캐시에 두고 매 스텝 새 토큰 하나만 계산한다.
# > prompt 1,000 + 답변 1,000 토큰이면 모델에 넣는 토큰 위치가 1,499,500 개에서 1,999 개로 준다 (약 750 분의 1).
#
# **You will learn**
# - why the keys and values of past tokens never change during generation, so they can be stored instead of recomputed;
# - how many token positions a model processes with and without a cache: 1,499,500 vs 1,999 for a 1,000-token prompt and a 1,000-token answer;
# - that the cost without a cache grows with the square of the answer length, and with a cache linearly;
# - the two functions that make a cache: the cache's `update_and_fetch` and the attention that reads what it returns;
# - what prefill and decode do to the cache, measured on a real MLX model that decodes both ways and gives the same answer.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md
import inspect

import matplotlib.pyplot as plt
import mlx.core as mx

from kvsim.cache import KVCache
from kvsim.cache.sdpa import reference_sdpa
from kvsim.model.attention import Attention
from kvsim.calc import memory
from kvsim.calc.tables import format_table
from kvsim.calc.tokens_fed import CACHED, UNCACHED, fed_rows, tokens_fed
from kvsim.lessons.exercises import check
from kvsim.lessons.l01_why_a_cache.measure import (
    attention_seams,
    cached_run_bytes,
    decode_with_and_without_cache,
    inplace_step_seconds,
    keys_without_cache,
)
from kvsim.lessons.l01_why_a_cache.views import (
    draw_decode_time,
    draw_fed_each_step,
    step_grid_view,
    tokens_fed_log_view,
)
from kvsim.model import build_model, toy_spec

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## One token at a time
#
# A language model does not write its answer in one go. It picks one token, appends it to the input, runs the model
# again and picks the next one. This is **autoregressive decoding**.
#
# Inside, every attention layer turns each token into a query, a key and a value vector. The query of the newest token
# is compared with the keys of all tokens so far, and the values are averaged with those weights.

# %% [markdown]
# ## The past does not change
#
# Attention in a language model is **causal**: the output at token $i$ depends only on tokens $1, \dots, i$. Appending
# a token at the end therefore changes nothing that was computed for the earlier ones: in every layer their hidden
# vectors, and so their keys and values, stay exactly the same.
#
# Without a cache the model is fed the whole sequence again at every step. The answer is the same, but all the work on
# the earlier tokens repeats the previous step. A **KV cache** stores each layer's keys and values once, so every new step
# only computes the new token's query, key and value and reads the rest from memory.
#
# The picture shows it for a 4-token prompt (positions 0-3; token $t$ sits at position $t$). Each row is one decode step;
# step 1 is the prefill. Without a cache (left) every step feeds the whole sequence again: red cells are positions
# computed once more although nothing about them changed. With a cache (right) those cells are blue: their keys and
# values are read, not recomputed. Green is the one position computed for the first time, gold the token the step
# produces (it is fed at the next step). Move the decode step down: the red triangle grows with the square of the
# steps, the green diagonal by one per step.

# %% tags=["nbval-ignore-output"]
step_grid_view()

# %% [markdown]
# ## Counting the work
#
# Each token position fed to the model costs one pass through every layer's projections and feed-forward network, so the
# number of positions fed measures all the work except the attention scores themselves. For a prompt of $P$ tokens and
# an answer of $A$ tokens (step $k = 1, \dots, A$ produces answer token $k$):
#
# $$
# N_{\text{no cache}} = \sum_{k=1}^{A} \bigl(P + k - 1\bigr) = A\,P + \frac{A(A-1)}{2}
# \qquad\qquad
# N_{\text{cache}} = \underbrace{P}_{\text{prefill, step 1}} + \underbrace{(A - 1)}_{\text{one new token per later step}}
# $$
#
# | symbol | meaning | where it comes from |
# |---|---|---|
# | $P$ | prompt tokens | the request |
# | $A$ | answer tokens generated | the request's `max_new_tokens` |
# | $k$ | decode step | – |
#
# Each of those positions runs through all `num_hidden_layers` layers, so the ratio between the two counts is also the
# ratio of projection and feed-forward work.

# %%
print(format_table(fed_rows(prompt_tokens=1000, answer_tokens=1000)))
un, ca = tokens_fed(1000, 1000, cached=False), tokens_fed(1000, 1000, cached=True)
print(f"ratio {un:,} / {ca:,} = {un / ca:.0f}")

# %% [markdown]
# With the cache the model processes the ratio printed above fewer token positions. Where does the square come from?
# Plot what each step feeds, on a linear axis. Without a cache step $k$ feeds $P + k - 1$ positions: a line that
# rises by one per step. With a cache step 1 feeds the prompt and every later step one token: a line on the floor.
# The total is the area under each line, a triangle on a rectangle ($AP + A(A-1)/2$) against a thin strip
# ($P + A - 1$).

# %%
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
draw_fed_each_step(ax, prompt_tokens=1000, answer_tokens=1000)
plt.show()

# %% [markdown]
# ## Try it: prompt and answer length
#
# The view below draws the running totals. On a linear axis the cached total would lie flat on the x axis, so its
# axis is logarithmic: each grid line is 10 times the one below. At step 1 both feed the whole prompt; after that the
# red curve climbs and the blue one barely moves. Drag the sliders. A longer prompt lifts both lines at the start, but only the red one keeps paying for it at every step.
# A longer answer bends the red curve up: every extra token makes all later steps longer.

# %% tags=["nbval-ignore-output"]
tokens_fed_log_view()

# %% [markdown]
# ## The code: write to the cache, read from it
#
# Two short functions make all of this. The cache's `update_and_fetch` stores the new tokens' keys and values at
# `[offset, offset + S)` and hands back everything stored so far; attention then scores the new queries against those
# keys and averages the values. Both are read from the package, so they are always its current code. The first is
# what every decode step runs:

# %%
print(inspect.getsource(KVCache.update_and_fetch))

# %% [markdown]
# The second is attention written out, `reference_sdpa`: scale the queries, multiply by the transposed keys, mask,
# softmax, multiply by the values. (`_group_queries` lets several query heads share one K/V head: lesson 03.) The
# model runs the same arithmetic through MLX's fused kernel (`kvsim.cache.sdpa.sdpa`), which the tests check against
# this reference.

# %%
print(inspect.getsource(reference_sdpa))

# %% [markdown]
# The cache holds one array for keys and one for values, each of shape **[B, n_kv_heads, T, head_dim]**: batch,
# key/value heads, tokens (the axis that grows), head length. A prefill of 5 tokens and one decode step on one layer
# of Llama 3 8B's shape (8 KV heads of 128; its 32 query heads never enter the cache):

# %%
cache = KVCache()
k = v = mx.zeros((1, 8, 5, 128))                        # prefill: 5 tokens
keys, values = cache.update_and_fetch(k, v)
print("after prefill:", tuple(keys.shape), "offset", cache.offset)
keys, values = cache.update_and_fetch(mx.zeros((1, 8, 1, 128)), mx.zeros((1, 8, 1, 128)))  # one decode step
print("after 1 step: ", tuple(keys.shape), "offset", cache.offset)

# %% [markdown]
# `update_and_fetch` has two branches. The default, `inplace=True`, writes the new rows into a buffer that grows 256
# slots at a time (seed 000's in-place write); `inplace=False` concatenates, which copies the whole cache at every
# step. Measured here: one decode write to a cache already holding 2,048 tokens of this layer's shape (bf16); the
# times depend on the machine, so they are printed, not quoted:

# %% tags=["nbval-ignore-output"]
t = inplace_step_seconds(context_tokens=2048, steps=32, num_key_value_heads=8, head_dim=128, dtype="bf16")
print(f"one write at {2048:,} tokens cached: inplace=True {t[True] * 1e6:,.0f} µs per step, inplace=False {t[False] * 1e6:,.0f} µs per step "
      f"({t[False] / t[True]:.0f}× slower)")

# %% [markdown]
# ## The attention forward, with and without a cache
#
# Where does the cache enter the model? In one place: the attention layer's forward. Without a cache it rotates the
# queries and keys from position 0 (RoPE) and masks the future with a causal $S \times S$ mask; with one it rotates
# from `cache.offset`, the position of the first new token, and hands the keys and values to the cache, which stores
# them (`update_and_fetch`) and attends over everything it holds. A single new query sees every cached key, so it
# needs no mask. The code, read from the package:

# %%
print(inspect.getsource(Attention._attend_one))
# %% [markdown]
# ## A real decode, both ways
#
# Counting is one thing; now run it. kvsim builds a small decoder-only transformer in MLX with random weights (its
# geometry is a tiny Llama: 2 layers, 4 query heads and 2 KV heads of 32, float32). It greedy-decodes the same random
# prompt twice: once with a KV cache per layer (prefill the prompt, then one token per step) and once with no cache at
# all, feeding the whole sequence at every step. The progress bar counts answer tokens over both runs.

# %%
model = build_model(toy_spec("gqa"), seed=0)
print({k: model.spec.config[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                         "head_dim", "hidden_size", "vocab_size")})

# %% [markdown]
# First the premise (seed 001: the key and value of a past token do not change). Without any cache, compute the
# last layer's key of position 3 at step 2 (the model is fed 33 tokens) and again at step 4 (35 tokens). Bit for
# bit the same:

# %%
sequence = mx.random.randint(0, model.spec.vocab_size, (40,), key=mx.random.key(1)).tolist()
key3_step2 = keys_without_cache(model, sequence[:33])[0, :, 3]
key3_step4 = keys_without_cache(model, sequence[:35])[0, :, 3]
print(f"position 3's key at step 2 ({len(sequence[:33])} tokens fed) and at step 4 ({len(sequence[:35])} tokens fed): "
      f"array_equal = {mx.array_equal(key3_step2, key3_step4).item()}")

# %% [markdown]
# And the two forwards side by side, one step of the first attention layer on those 33 tokens: fed all of them from
# position 0 with a causal mask, or fed only the newest at `cache.offset` after the other 32 were cached. The newest
# token's output is the same:

# %%
print(format_table(attention_seams(model, sequence[:33], layer=0)))

# %% tags=["nbval-ignore-output"]
run = decode_with_and_without_cache(model, prompt_tokens=32, answer_tokens=96, seed=0, progress=True)

# %% [markdown]
# Both runs produce the same tokens, and each run counted the positions it fed; they match the formula.

# %%
print(format_table(run.rows()))
print("same answer tokens:", run.same_tokens())
print("first answer tokens:", run.cached.tokens[:12])

# %% [markdown]
# ## Measured time: quadratic vs linear
#
# The wall time of every step was recorded during the runs (forward pass plus evaluation). Summed up, the time without a
# cache bends upward like the count above; with a cache it grows in a straight line. The exact numbers depend on this
# machine and what else it is doing, so they are not checked against stored values; the shape is the point.
#
# Both ratios are printed below the plot. The measured time ratio is usually smaller than the ratio of positions fed:
# every forward pass also pays a fixed cost for launching its few dozen operations, and a model this small does so
# little work per token that the fixed cost is a large share of a cached step. The larger the model, the closer the
# time ratio gets to the count ratio.

# %% tags=["nbval-ignore-output"]
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
draw_decode_time(ax, run)
plt.show()
seconds = run.seconds()
print(f"without a cache {seconds[UNCACHED]:.2f} s, with a cache {seconds[CACHED]:.2f} s")
fed_ratio = run.uncached.positions_fed / run.cached.positions_fed
print(f"positions fed {run.uncached.positions_fed:,} / {run.cached.positions_fed:,} = {fed_ratio:.0f}; "
      f"measured time ratio {run.slowdown():.0f}")

# %% [markdown]
# ## Prefill builds the cache, decode reads it
#
# Generation has two phases.
# 1. **Prefill**: the whole prompt goes through the model in one pass; every layer computes the prompt's keys and values
#    and writes them to its cache. The first answer token comes out of this pass.
# 2. **Decode**: one new token per step. Its key and value are appended to the cache, and its query attends over
#    everything in the cache. Repeat until the answer is done.
#
# The bytes the cache holds grow by the same amount at every step. With $L$ = `num_hidden_layers`,
# $n_{\text{kv}}$ = `num_key_value_heads`, $d_h$ = `head_dim` and $b$ bytes per element (float32 here: 4), one token adds
# $M_{\text{token}} = 2 \times L \times n_{\text{kv}} \times d_h \times b = 2 \times 2 \times 2 \times 32 \times 4 = 1{,}024$ bytes
# (lesson 02 is all about this formula). The table reads `used_bytes` from the real caches after each step:

# %%
print(format_table(run.trace_rows(steps=(0, 1, 2, 3))))
print("bytes per token:", memory.bytes_per_token(run.spec, run.kv_dtype))

# %% [markdown]
# The cache does not make attention free. At step $k$ the new query still takes a dot product with all $P + k - 1$ cached
# keys and averages all the values, so every step reads the whole cache from memory. Prefill does a lot of arithmetic on
# many tokens at once and is limited by compute; decode does little arithmetic per byte it reads (weights and cache) and
# is limited by memory bandwidth (Sarathi-Serve §1, §3.1; DistServe §2.1). A bigger cache means slower decode steps:
# lesson 08 measures that.

# %% [markdown]
# ## Summary
# - Causal attention never changes the keys and values of earlier tokens, so each layer can store them: the KV cache.
# - Without it the model reprocesses the whole prefix at every step: $AP + A(A-1)/2$ positions, 1,499,500 for 1,000 + 1,000.
#   With it: $P + A - 1$, 1,999. The first grows with the square of the answer, the second linearly.
# - `update_and_fetch` writes the new keys and values at the offset of a [B, n_kv_heads, T, head_dim] buffer and returns
#   all of them; attention reads what it returns.
# - A real decode gives the same tokens both ways; the measured time shows the same quadratic vs linear shape.
# - Prefill writes the prompt's keys and values in one pass; each decode step appends one token and reads the whole cache.
#
# ## Your turn
#
# Put your number in place of `None`, run the cell and the `check` cell below it. The check says what is off, if
# anything. Worked solutions: `notebooks/solutions/01_why_a_kv_cache.ipynb`.
#
# **1.** A 500-token prompt, a 200-token answer, **no cache**: how many token positions does the model process in all?

# %%
fed_without_cache = None  # your turn

# %%
check("01.1", fed_without_cache)

# %% [markdown]
# **2.** The same request **with** a cache?

# %%
fed_with_cache = None  # your turn

# %%
check("01.2", fed_with_cache)

# %% [markdown]
# **3.** The toy model of the real run (its config is printed above), now with **bf16** caches (2 bytes per element):
# how many bytes do its two layers' caches hold together after a 100-token prompt and a 50-token answer?
# (The last answer token is produced, never fed.)

# %%
cache_bytes_at_end = None  # your turn

# %%
check("01.3", cache_bytes_at_end)

# %% [markdown]
# **4. Predict, then measure.** Run the toy model again with a cache, on a 100-token prompt and a 200-token answer
# (float32, as above). What will the `nbytes` of its two caches add up to at the end? `nbytes` counts the buffers, and
# they grow 256 token slots at a time. The check decodes for real and measures.

# %%
predicted_nbytes = None  # your turn

# %%
check("01.4", predicted_nbytes)

# %% [markdown]
# Then measure: the real decode, and what its caches report at the end.

# %%
print(cached_run_bytes(prompt_tokens=100, answer_tokens=200))

# %% [markdown]
# ## Exercises
# 1. With the sliders, find a prompt and answer length where the cache saves "only" a factor of ten. What does that say about short answers?
# 2. Rerun the real decode with `answer_tokens=192`. By how much does the time without a cache grow compared with 96? And with a cache?
# 3. Decode with `kv_dtype="bf16"` (`decode_with_and_without_cache(model, 32, 96, kv_dtype="bf16")`): how many bytes per token
#    does the cache hold now, and are the answer tokens still the same as without a cache?

# %%
# Exercise 3 - your answer here: run2 = decode_with_and_without_cache(model, 32, 96, kv_dtype="bf16"); print(format_table(run2.trace_rows()))

# %% [markdown]
# ## Self-test
#
# kvsim checking itself against the seed's numbers and the real runs above; the cell prints "self-test passed" when
# every check holds.

# %% tags=["self-test"]
assert tokens_fed(1000, 1000, cached=False) == sum(999 + k for k in range(1, 1001)) == 1_499_500
assert tokens_fed(1000, 1000, cached=True) == 1000 + 999 == 1_999
assert round(1_499_500 / 1_999) == 750
# the real runs: same answer, same logits, positions counted = formula
assert run.same_tokens() and run.max_logit_difference() < 1e-4
assert run.uncached.positions_fed == tokens_fed(32, 96, cached=False) == 96 * 32 + 96 * 95 // 2 == 7_632
assert run.cached.positions_fed == tokens_fed(32, 96, cached=True) == 127
# prefill fed the prompt, every later step one token; the cache grew by M_token per step
assert [s.positions_fed for s in run.cached.trace] == [32] + [1] * 95
assert all(s.cache_used_bytes == (32 + s.step) * 1024 for s in run.cached.trace)
assert run.uncached.caches is None
# the cache layout: [B, n_kv_heads, T, head_dim]
assert tuple(keys.shape) == (1, 8, 6, 128) and cache.offset == 6
# the premise: a past key never changes; the cached forward gives the newest token the same output
assert mx.array_equal(key3_step2, key3_step4).item()
assert float(attention_seams(model, sequence[:33])[-1]["with a cache"]) < 1e-5
print("self-test passed")
