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
# > **요약** (seed 001 「Prefill 은 캐시를 만들고 decode 는 캐시를 읽는다」, 「Attention 최적화 기법이 캐시를 바꾸는 방식」의 마지막 문단)
# > prefill 은 큰 행렬곱이라 연산이 병목이고, decode 는 토큰 하나마다 가중치와 캐시 전체를 읽지만 계산은 적어 메모리 대역폭이 병목이다: 한 스텝의 하한은 읽는 바이트 ÷ 대역폭이다.
# > 이는 산술 강도(바이트당 연산)가 기계의 균형점(FLOP/s ÷ 바이트/s)보다 낮을 때의 이야기다: H200 (205 FLOP/B) 에서는 측정점이 대역폭 선을 따르지만, 이 강의의 2 코어 Linux CPU 에서 MLX 는 연산이 병목이다.
# > 그래서 decode 의 비용은 캐시의 크기 자체가 아니라 한 스텝에 메모리에서 읽는 바이트와 한 번에 담을 수 있는 요청 수가 정한다.
#
# **You will learn**
# - the roofline model: arithmetic intensity (FLOPs per byte read), machine balance (FLOP/s ÷ bytes/s), and why
#   decode sits far left of a GPU's ridge while prefill sits right of it (Sarathi-Serve, DistServe);
# - the bytes one decode step reads, with one definition of the weights it reads (all but the input embedding
#   table, plus one row: Llama 3.1 8B reads 15.01 GB, 4.48 ms on an H100);
# - to measure your own machine's limits and decode steps, place them on its roofline, and read honestly where they
#   sit: on the Linux CPU this course was written on, MLX's kernels are compute-bound, not memory-bound;
# - what an NVIDIA H200 measured: step times that follow the bandwidth line for GQA, MHA, MQA, MLA and a sliding
#   window, a batch sweep that stays memory-bound, and kvsim beside mlx-lm;
# - which term of the cache formula each optimisation changes, and why some change what a step **reads** but not
#   what the cache **stores**.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt

from kvsim.calc import memory, phases, roofline
from kvsim.calc.counterfactual import as_mha, attention_variants
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.weights import param_count
from kvsim.lessons.exercises import check
from kvsim.lessons.l08_decode_speed.data import (
    cache_read_intensity,
    comparison_rows,
    load_fused_check,
    load_run,
    nsa_read_tokens,
    provenance,
    quantized_probe_rows,
    sparse_bytes,
    technique_table,
    weight_read_intensity,
)
from kvsim.lessons.l08_decode_speed.views import (
    batch_floor_view,
    decode_speed_view,
    draw_decode_speed_limit,
    draw_h200_time_vs_bytes,
    draw_measured_roofline,
    draw_stored_vs_read,
    draw_time_and_floors,
    h200_roof,
    h200_variants_view,
    roofline_view,
)
from kvsim.measure.bandwidth import measure_copy_bandwidth
from kvsim.measure.roofline import decode_point, device_limits, device_summary
from kvsim.model import build_model

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| numpy", md.version("numpy"))

# %% [markdown]
# ## Prefill computes, decode reads
#
# Prefill pushes the whole prompt through the model at once: every weight matrix multiplies $P$ token vectors, big
# matrix products whose speed is set by arithmetic. A decode step feeds **one** token per sequence. To produce it,
# every weight matrix is read from memory for a matrix-vector product, and every attention layer reads its whole
# cache to score one query against it. Many bytes, little arithmetic: on a GPU, decode is limited by memory
# bandwidth (Sarathi-Serve §1 and §3.1, DistServe §2.1). DistServe's Appendix A counts one attention head of length
# $s$ over $l$ cached tokens: about $3sl$ memory reads and writes for $2sl$ operations.
#
# Whether "little arithmetic" is little depends on the machine. The roofline model makes that precise; this lesson
# builds it, measures your machine with it, and then looks at a GPU where decode is memory-bound indeed.

# %% [markdown]
# ## The bytes one step reads
#
# $$
# R_{\text{step}} = W \;+\; B \sum_{\ell=1}^{n_{\text{layers}}} T_\ell \cdot m_\ell
# \qquad\qquad
# t_{\text{step}} \;\ge\; \frac{R_{\text{step}}}{\text{memory bandwidth}}
# $$
#
# | symbol | meaning | where it comes from |
# |---|---|---|
# | $W$ | weight bytes a step reads: every parameter except the input embedding table, of which one row (a lookup); with tied embeddings the table is also the output head and is read whole | parameters × bytes per weight |
# | $B$ | sequences decoded together (each has its own cache; the weights are read once for all) | – |
# | $T_\ell$ | tokens layer $\ell$ keeps: $T$ (full, MLA) or $\min(T, W_\ell)$ (sliding window) | `sliding_window` |
# | $m_\ell$ | bytes per token per layer: $2\, n_{\text{kv}}\, d_h\, b$, or $(d_c + d_h^R)\, b$ for MLA | `num_key_value_heads`, `head_dim`, `kv_lora_rank`, `qk_rope_head_dim` |
#
# $W$ has one definition in kvsim, `kvsim.calc.roofline.step_weight_bytes`, which the floor calculator, the
# measurements and the benchmarks all use. Here it is by hand for Llama 3.1 8B, next to kvsim:

# %%
llama31 = load_model("llama-3.1-8b")
count = param_count(llama31)
row = count.embedding // llama31.vocab_size                      # one row of the input table: hidden_size
w_by_hand = (count.active - count.embedding + row) * 2          # bf16: 2 bytes per weight
h100 = get_accelerator("H100 80GB")
kv_128k = memory.read_bytes_per_step(llama31, 131_072)
print(f"parameters {count.active:,}, input table {count.embedding:,} ({llama31.vocab_size:,} rows of {row:,})")
print(f"W = ({count.active:,} − {count.embedding:,} + {row:,}) × 2 B = {w_by_hand:,} B = {w_by_hand / 1e9:.2f} GB")
print(f"kvsim: phases.weights_read_bytes = {phases.weights_read_bytes(llama31):,} B")
print(f"on an H100 ({h100.bandwidth_gb_per_s:,.0f} GB/s): weights {1e3 * w_by_hand / h100.memory_bandwidth_bytes_per_s:.2f} ms; "
      f"with a 128K-token cache (+{kv_128k / 2**30:.0f} GiB) {1e3 * (w_by_hand + kv_128k) / h100.memory_bandwidth_bytes_per_s:.2f} ms")

# %% [markdown]
# ## The roofline model
#
# A step does some FLOPs and reads some bytes. Its **arithmetic intensity** $I$ is their ratio. A machine can do at
# most $F$ FLOP/s and move at most $\beta$ bytes/s, so a step takes at least the larger of two floors, and the
# FLOP/s it can attain is the smaller of two roofs:
#
# $$
# I = \frac{\text{FLOPs}}{\text{bytes read}}
# \qquad
# t \;\ge\; \max\!\left(\frac{\text{bytes}}{\beta},\; \frac{\text{FLOPs}}{F}\right)
# \qquad
# \text{attainable FLOP/s} = \min(F,\; I \cdot \beta)
# \qquad
# \text{machine balance} = \frac{F}{\beta}
# $$
#
# The **machine balance** is the intensity at the ridge where the two roofs meet. A step left of it waits on memory
# (memory-bound: its time is bytes ÷ bandwidth); right of it, on arithmetic (compute-bound).
#
# FLOPs count 2 per multiply-add (`kvsim.calc.roofline.step_flops`): 2 per weight per sequence, and per cached token
# and layer $2 H (d_k + d_v)$ for the $H$ query heads (absorbed MLA: $2 H (2 d_c + d_h^R)$). A weight is used once
# per sequence in the batch, so weights give $2B/b$ FLOPs per byte; a cached K/V byte is used by the $g$ query
# heads that share its KV head, $2g/b$, whatever the batch. A prefill of $P$ tokens uses each weight $P$ times.
# `kvsim.calc.phases` puts the pieces together for a registry model:

# %%
llama = load_model("llama-3-8b")
phase_costs = {"decode, B = 1, 8K tokens": phases.decode_cost(llama, 8192, 1),
               "decode, B = 64, 8K tokens each": phases.decode_cost(llama, 8192, 64),
               "prefill of a 2,048-token prompt": phases.prefill_cost(llama, 2048)}
print(format_table([{"Llama 3 8B, bf16": name, "GFLOPs": c.flops / 1e9, "GB read": c.read_bytes / 1e9,
                     "FLOP/B": c.intensity} for name, c in phase_costs.items()], digits=1))
dsv3, mqa = load_model("deepseek-v3"), attention_variants()["MQA"]
print(format_table([{"what is read": name, "FLOPs per byte (bf16)": cache_read_intensity(s.layers[0], s.num_attention_heads)}
                    for name, s in (("cache: Llama 3 8B if MHA (g = 1)", as_mha(llama)), ("cache: Llama 3 8B, GQA (g = 4)", llama),
                                    ("cache: MQA at DeepSeek-V3 sizes (g = 128)", mqa), ("cache: MLA, DeepSeek-V3 (128 heads)", dsv3))]
                   + [{"what is read": f"weights, batch {b}", "FLOPs per byte (bf16)": weight_read_intensity(b)}
                      for b in (1, 64)], digits=1))

# %% [markdown]
# Batching raises the weights' intensity (read once for $B$ sequences) but not the cache's: every sequence reads its
# own. That is why 64 sequences at 8K reach only 14.8 FLOP/B, not 64. Prefill does about 2,000 FLOPs per byte.

# %% [markdown]
# ## This machine's limits, measured
#
# Three quick measurements (`kvsim.measure.bandwidth`, fastest of several runs each, a few seconds in all):
# - memory bandwidth: numpy copies 64 MiB, and MLX computes `x + 0` over 64 MiB on its default device (the GPU on a
#   Mac); each reads and writes every byte. The faster of the two is what the memory can deliver;
# - compute: a 512 × 512 float32 matrix product with MLX on its default device.

# %% tags=["nbval-ignore-output"]
device = device_summary()
mlx_limits = device_limits(64 * 2**20, 512, "fp32", repeats=10)    # MLX copy + MLX matmul on its default device
numpy_copy = measure_copy_bandwidth(64 * 2**20, repeats=5)
bandwidth = max(numpy_copy.rate, mlx_limits["copy_bytes_per_s"])
mlx_flops = mlx_limits["matmul_flops_per_s"]
print(f"MLX's default device: {device['name']} ({device['backend']})")
print(format_table([
    {"measured": "copy, numpy (host memory)", "rate": f"{numpy_copy.rate / 1e9:.1f} GB/s"},
    {"measured": f"copy, MLX on {device['backend']}", "rate": f"{mlx_limits['copy_bytes_per_s'] / 1e9:.1f} GB/s"},
    {"measured": f"matmul fp32, MLX on {device['backend']}", "rate": f"{mlx_flops / 1e9:.1f} GFLOP/s"}]))
print(f"machine balance with MLX's kernels: {mlx_flops / 1e9:.1f} GFLOP/s ÷ {bandwidth / 1e9:.1f} GB/s = "
      f"{roofline.machine_balance(mlx_flops, bandwidth):.2f} FLOP/B")

# %% [markdown]
# The cell above prints this machine's rates and the ridge they give. On the 2-core Linux machine this course was
# written on, MLX's own copy came out well below numpy's, and its matrix product far below numpy's. The Linux wheel of
# MLX's CPU backend (`mlx-cpu`) bundles the reference BLAS (`libblas` 3.10, plain loops), not a tuned one: numpy's
# OpenBLAS multiplies dozens of times faster on the same cores (`measure_host_matmul_throughput`, run in a plain
# Python process). So with MLX's kernels such a machine's ridge lies well below 1 FLOP/B (the balance line above
# gives yours). On Apple silicon MLX runs on the GPU, where both numbers are far higher.
#
# ## Decode and prefill on two rooflines
#
# The view draws the H200's roofline (measured, from the dataset below) and this machine's with MLX's kernels, and
# marks where a model's decode at batch 1, decode at batch $B$ and a prefill fall (bf16). On the H200, decode sits
# far left of the ridge at 205 FLOP/B: memory-bound. Prefill sits right of it. Move the batch: the decode line
# creeps right but stops short of the ridge, because each sequence's cache comes with it; raise the context and it
# moves back. On this course's Linux machine, the ridge with MLX's kernels lies left of every mark. (For a mixture
# of experts such as DeepSeek-V3, kvsim counts the experts one token uses; a large batch touches more of them, so
# its real intensity is lower than drawn.)

# %% tags=["nbval-ignore-output"]
machines = {**h200_roof(), f"this machine: MLX on {device['backend']}, fp32 (measured)": (bandwidth, mlx_flops)}
roofline_view(machines=machines)

# %% [markdown]
# ## Measured here: decode steps on this machine
#
# One real-geometry attention layer, Llama 3 8B's GQA (32 query heads, 8 KV heads of 128), in float32, with the
# vocabulary, FFN and residual width shrunk so that the cache weighs as much as the weights early on
# (`kvsim.model.build_model`). `kvsim.measure.roofline.decode_point` fills the caches with random keys and values
# (a decode step reads the same bytes whatever they hold), runs one warm-up step and three timed ones, and keeps the
# fastest; it returns the bytes the step read and the FLOPs it did. Two sweeps: the context at batch 1, and the
# batch at 1,024 tokens.

# %% tags=["nbval-ignore-output"]
gqa = build_model(llama, num_layers=1, hidden_size=512, intermediate_size=512, vocab_size=1024)
context_points = [decode_point(gqa, t, batch=1, repeats=3) for t in (0, 1024, 2048, 4096, 8192)]
batch_points = [decode_point(gqa, 1024, batch=b, repeats=3) for b in (1, 2, 4, 8)]
here = phases.point_rows(context_points + batch_points, bandwidth, mlx_flops)
print(format_table(here, digits=2))
print(phases.roofline_verdict(here))

# %% [markdown]
# Each point against both floors of this machine, and on its roofline (MLX's matrix product and the measured memory
# bandwidth).

# %% tags=["nbval-ignore-output"]
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
draw_time_and_floors(axes[0], context_points, bandwidth, mlx_flops, x="context_tokens",
                     title="batch 1: step time against context")
draw_time_and_floors(axes[1], batch_points, bandwidth, mlx_flops, x="batch", title="1,024 tokens: against batch")
plt.show()
fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
draw_measured_roofline(ax, {"measured: context 0-8K, B = 1": context_points, "measured: B = 1-8, 1K tokens": batch_points},
                       {f"MLX's kernels on {device['backend']}, measured": (bandwidth, mlx_flops)},
                       title=f"decode steps measured on {device['name']}")
plt.show()

# %% [markdown]
# **Where the points sit, and why.** On the Linux CPU this course was written on, every point lies right of MLX's
# ridge: the float32 layer does more FLOPs per byte it reads than the ridge printed above (more with more sequences).
# The verdict above prints how many times their bandwidth floor and their compute floor your steps took: many times
# the bandwidth floor, a small multiple of the compute floor (a step below its compute floor means the matrix product
# was timed while the machine was busy: run the measurements again), and the roofline plot shows them just under MLX's compute roof. The batch sweep shows the
# signature: twice the sequences, about twice the time. A memory-bound step would barely notice a second sequence,
# since the weights are read once for both. So here decode is **compute-bound in MLX's kernels**, not limited by the
# memory: with a tuned BLAS (numpy's, dozens of times faster here) the same cores would move the ridge to several
# FLOP/B, and these steps to its left.
#
# On Apple silicon MLX runs the same steps on the GPU, whose ridge lies far to the right, and the points come
# close to the bandwidth line, as on the H200 below. The printed verdict above says which case your machine is.

# %% [markdown]
# ## The H200: where decode follows the bandwidth line
#
# `data/h200/` holds decode steps measured with `benchmarks/bench_roofline.py` on an NVIDIA H200 with MLX's CUDA
# backend: bf16, real geometries (Llama 3 8B with all 32 layers, Mistral 7B, DeepSeek-V3's attention in 4 layers),
# kvsim's step and mlx-lm's with the same weights, interleaved. `kvsim.lessons.l08_decode_speed.data` reads it without MLX:

# %%
run = load_run()
print("\n".join(provenance(run)))

# %% [markdown]
# Every point of the dataset, step time against the bytes the step read. The dashed line is the floor, bytes ÷ the
# copy bandwidth measured in the same process; the dotted line is twice the floor.

# %%
fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
draw_h200_time_vs_bytes(ax, run)
plt.show()

# %% [markdown]
# All 47 points lie between the floor and twice the floor, along lines through the origin: step time = bytes ÷ a
# fixed rate. Here the title of this lesson holds. The steps read at 50 to 98 % of the copy bandwidth, closest for
# the largest reads (MHA at 128K: 85 GB in 23.8 ms, 1.02 times its floor). The dataset does not say why smaller
# steps fall further behind; a fixed cost per step (launching the kernels of every layer) would weigh most there.

# %% [markdown]
# ## The batch sweep: flat while memory-bound
#
# Llama 3 8B at 8,192 tokens with 1 to 64 sequences: the measured step time (kvsim) against the two floors. 64
# sequences take 3.6 times as long as one, for 64 times the tokens: the weights are read once for all, only the
# caches add bytes. The compute floor stays far below. A step turns compute-bound where the two floors cross, at
# the batch whose intensity equals the machine balance. At 8K tokens they never cross: as $B$ grows the intensity
# tends to a sequence's FLOPs ÷ its cache bytes, 18 FLOP/B, short of the ridge at 205; and memory is full at 125
# sequences anyway. Move the context down to 128 tokens: the weights dominate, and the floors cross near $B$ = 265.

# %% tags=["nbval-ignore-output"]
batch_floor_view()

# %% [markdown]
# ## GQA, MHA, MQA, MLA and a sliding window on the H200
#
# Step time against context for each variant (pick one to see its mlx-lm twin and its floor). The weights set
# the level, the cache the slope: MHA (32 KV heads) reads 4 times GQA-8's cache per token and climbs from 7.6 to
# 23.8 ms; MQA (1 KV head) stays nearly flat; the sliding window (Mistral 7B, 4,096) stops growing at its window;
# MLA's latent is small. The MLA model has only 4 of DeepSeek-V3's 61 layers (its weights would not fit), so
# compare its slope, not its level.

# %% tags=["nbval-ignore-output"]
h200_variants_view()

# %% [markdown]
# ## kvsim beside mlx-lm on the H200
#
# The same shapes and weights through kvsim's model and mlx-lm's, best of 8 interleaved steps: kvsim runs within a
# few per cent of mlx-lm at every point, both between 1.0 and 2.0 times the floor.

# %%
print(format_table(comparison_rows(run), digits=3))

# %% [markdown]
# **Quantized caches could not be measured there.** MLX 0.32.4's CUDA backend has no `quantized_matmul` for a
# one-query product over rows sliced out of a larger buffer, which is what both kvsim's and mlx-lm's quantized caches
# return, so every 8-bit decode step failed, for kvsim and for mlx-lm alike. `benchmarks/check_fused.py` probed it:
# the same product over a freshly quantized array runs at every length tried.

# %%
print(format_table(quantized_probe_rows(load_fused_check())))
print(f"{len(run.errors)} quantized decode points failed, e.g.: {run.errors[0]['error'].split(', transpose')[0]}")

# %% [markdown]
# ## The floor on a served model
#
# For a real model on a real accelerator the same formula gives the least time a step can take:
# $(W + B \cdot \text{cache read}) / \text{bandwidth}$, with $W$ as defined above (for a mixture of experts, the experts
# one token uses: a lower bound for a batch). Llama 3.1 8B on an H100: 15.01 GB of weights take 4.48 ms to read; at
# 128K tokens the cache adds another 16 GiB (17.2 GB), so a single sequence cannot go faster than about 104 tokens
# per second. The H200 measured above ran Llama 3 8B at 1.33 times its own floor at 128K.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, tokens=131_072)
plt.show()

# %% [markdown]
# ## Try it: model, accelerator, batch, KV dtype, context
#
# Raise the batch: the weights line stays, each sequence's cache adds its own slope, so total throughput rises while
# each sequence slows down (the title says when the batch's caches no longer fit in the accelerator's memory).
# Switch the KV dtype to fp8 or q4 to halve or quarter the slope; pick a Gemma 3 model to see the sliding-window
# layers flatten it; pick a Mac to see a lower bandwidth.

# %% tags=["nbval-ignore-output"]
decode_speed_view()

# %% [markdown]
# ## What each technique changes
#
# Every technique attacks one term of $M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$
# (times $T$), or none. "stored %" is the cache's bytes and "read/step %" the bytes one decode step reads, each relative
# to the baseline in the "example" column, computed by kvsim from the real configs
# (`kvsim.lessons.l08_decode_speed.data.technique_table`).

# %%
table = technique_table()
print(format_table(table, columns=["technique", "term changed", "what stays in the cache", "example", "stored %", "read/step %"]))

# %% [markdown]
# - **MQA, GQA** store one K/V pair per group of query heads: $h / n_{\text{kv}}$ times less (Llama 3 8B: 4×).
# - **MLA** stores a 512-element latent and a 64-element RoPE key per layer: 1.76 % of the same-sized MHA (lesson 03).
# - **KV quantization** shrinks $b$: fp8 halves the cache, 2 bits stores an eighth before the scales and biases
#   (lesson 06 counts those; the table shows both).
# - **Sliding window** caps $T$ at $W$ per layer: Mistral 7B ($W$ = 4096) keeps 8× less at 32K tokens (lesson 04).
# - **Hybrids** keep K/V only in their attention layers: Jamba 4 GB against Mixtral's 32 GB at 256K (lesson 05).
# - **NSA and DSA** keep every token. NSA reads compressed blocks, a few selected blocks and a local window;
#   DSA's indexer reads its own small key for every token, then attention reads the top 2048, and those indexer keys
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
# One DeepSeek-V3 sequence, bf16: solid lines are what the cache holds, dashed lines what one decode step reads.
# Curves that coincide are drawn once: dense attention (with or without FlashAttention) stores what NSA stores and
# reads all of it. NSA reads about 1/16 of the tokens plus a fixed budget; DSA stores a bit more (the indexer keys),
# and reads the indexer keys plus 2,048 latents.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_stored_vs_read(ax, model="deepseek-v3", tokens=131_072)
plt.show()
print(format_table([{"tokens": t, "NSA tokens read": nsa_read_tokens(t)} for t in (8192, 16384, 32768, 65536)]))

# %% [markdown]
# The table is NSA's own count (Yuan et al., 2025, Table 4): 2,048 token-equivalents read at 8K, 5,632 at 64K.

# %% [markdown]
# ## Summary
# - A step takes at least $\max(\text{bytes} / \beta,\ \text{FLOPs} / F)$. Its arithmetic intensity against the machine
#   balance $F / \beta$ says which floor binds.
# - A decode step reads every weight it uses (all but the input table, plus one row: Llama 3.1 8B 15.01 GB) and every
#   cached token its layers keep, and does 1 to 15 FLOPs per byte in bf16 (more for MLA); prefill does thousands.
# - On an H200 (ridge 205 FLOP/B) decode is memory-bound: all 47 measured points lie within 1–2× their bandwidth
#   floor, a batch of 64 at 8K costs 3.6× one sequence, and at 8K no batch reaches the ridge.
# - On a CPU with slow kernels (MLX's reference BLAS on Linux: ridge near 0.1 FLOP/B) the same step is compute-bound:
#   time tracks FLOPs, and batching costs proportionally. Measure before you assume.
# - GQA/MQA, MLA, quantization, windows and hybrids shrink what is **stored** (and so what is read); NSA and DSA shrink
#   only what is **read**; FlashAttention and Flash-Decoding read the same bytes faster; PagedAttention wastes less.
#
# ## Your turn
#
# Put your number in place of `None`, then run the `check` cell. Solutions:
# `notebooks/solutions/08_decode_is_memory_bound.ipynb`.
#
# **1.** Llama 3.1 8B has 8,030,261,248 parameters, `vocab_size` 128,256 and `hidden_size` 4,096, with untied
# embeddings. How many weight bytes does one decode step read in bf16?

# %%
step_weight_bytes_8b = None  # your turn

# %%
check("08.1", step_weight_bytes_8b)

# %% [markdown]
# **2.** What is the least time, in milliseconds, that one Llama 3.1 8B decode step can take at 131,072 tokens
# (batch 1, bf16 cache: 128 KiB per token) on an H100 80GB (3.35 TB/s)?

# %%
floor_ms_128k = None  # your turn

# %%
check("08.2", floor_ms_128k)

# %% [markdown]
# **3.** With an empty cache (context 0), a decode step of Llama 3 8B reads only the weights. From which batch $B$
# is it compute-bound on the H200 as measured (`run.flops_per_s`, `run.bytes_per_s`)?

# %%
ridge_batch_h200 = None  # your turn

# %%
check("08.3", ridge_batch_h200)

# %% [markdown]
# ## Exercises
# 1. Rebuild the measured layer with `intermediate_size=4096`. Its weights grow eightfold: does the step time at
#    context 0 grow in proportion to the bytes, to the FLOPs, or to neither? What does that say about this machine?
# 2. In the batch view, find the largest context at which the two floors still cross. Check it with
#    `phases.ridge_batch(llama, tokens, run.bytes_per_s, run.flops_per_s)`.
# 3. With `sparse_bytes(load_model("deepseek-v3"), T, "dsa")`, find the context below which DSA reads
#    *more* than dense MLA (hint: the indexer keys).
# 4. Measure numpy's matrix product on your CPU with
#    `kvsim.measure.bandwidth.measure_host_matmul_throughput(512, repeats=20)` (on a 2-core machine, in a plain
#    Python process: inside Jupyter it can read far lower, its two BLAS threads competing with the notebook's own).
#    Add it as a second roof to the measured roofline: on which side of that ridge would the measured steps fall?

# %%
# Exercise 3 - your answer here: compare sparse_bytes(dsv3, T, "dsa")["read"] with "dense" for T = 1024, 2048, 4096

# %% [markdown]
# ## Self-test
#
# kvsim against the seeds' numbers, the H200 dataset and the measurements above (silent when everything holds;
# no timing is checked, only what was counted).

# %% tags=["self-test"]
rows = {r["technique"]: r for r in table}
assert rows["MQA, GQA"]["stored %"] == 25.0                          # Llama 3 8B: 4x
assert rows["MLA"]["stored %"] == 1.76
assert rows["KV quantization (fp8)"]["stored %"] == 50.0 and rows["KV quantization (2-bit)"]["stored %"] == 12.5
assert rows["sliding window"]["stored %"] == 12.5                     # Mistral 7B at 32K: 8x
jamba, mixtral = load_model("jamba-v0.1"), load_model("mixtral-8x7b")
assert round(memory.kv_bytes(jamba, 262_144) / 2**30) == 4 and round(memory.kv_bytes(mixtral, 262_144) / 2**30) == 32
assert rows["NSA"]["stored %"] == 100.0 and rows["NSA"]["read/step %"] < 10
assert rows["DSA"]["stored %"] > 100.0 and rows["DSA"]["read/step %"] < 15
assert rows["FlashAttention, Flash-Decoding"]["stored %"] == rows["FlashAttention, Flash-Decoding"]["read/step %"] == 100.0
assert nsa_read_tokens(8192) == 2048 and nsa_read_tokens(65536) == 5632
# one definition of the weights a step reads: 15.01 GB, 4.48 ms on an H100; the H200 dataset used the same
assert w_by_hand == phases.weights_read_bytes(llama31) == 15_009_857_536
assert round(1e3 * w_by_hand / h100.memory_bandwidth_bytes_per_s, 2) == 4.48
assert run.variants["GQA-8 (Llama 3 8B)"]["geometry"]["weights_read_bytes"] == phases.weights_read_bytes(llama)
# intensities: decode far left of the H200's ridge, prefill right of it; 64 sequences at 8K reach 14.8 FLOP/B
ridge = run.flops_per_s / run.bytes_per_s
assert phase_costs["decode, B = 1, 8K tokens"].intensity < 2 < 14 < phase_costs["decode, B = 64, 8K tokens each"].intensity < 15
assert phase_costs["prefill of a 2,048-token prompt"].intensity > ridge > 200
assert phases.ridge_batch(llama, 8192, run.bytes_per_s, run.flops_per_s) is None
# the H200 points follow the bandwidth line: within 1-2x the floor recomputed from their bytes
h200_points = [p for v in run.measured_variants() for p in run.points(v)] + run.batch_sweep["points"]
assert len(h200_points) == 47
assert all(1 <= p["step_ms"]["kvsim"] / 1e3 / roofline.floor_seconds(p["read_bytes"], run.bytes_per_s) < 2
           for p in h200_points)
# the live points: bytes and FLOPs as the calculator counts them (their times depend on the machine)
per_token = memory.bytes_per_token(gqa.spec, "fp32")                 # 2 x 8 KV heads x 128 x 4 B = 8 KiB
assert all(p["cache_read_bytes"] - context_points[0]["cache_read_bytes"] == p["context_tokens"] * per_token
           for p in context_points)
one = batch_points[0]                                                 # B sequences: weights once, B caches, B x FLOPs
assert all(p["read_bytes"] == one["weights_read_bytes"] + p["batch"] * one["cache_read_bytes"] and
           abs(p["flops"] - p["batch"] * one["flops"]) <= 1e-9 * p["flops"] for p in batch_points)
assert all(r["bound by"] == ("memory" if r["FLOP/B"] < roofline.machine_balance(mlx_flops, bandwidth) else "compute")
           for r in here)
print("self-test passed")
