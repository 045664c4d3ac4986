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
# > 이는 산술 강도(바이트당 연산)가 머신 밸런스(ridge point, FLOP/s ÷ 바이트/s)보다 낮을 때의 이야기다: H200 에서는 측정점이 대역폭 선을 따르지만, 이 강의를 만든 2 코어 Linux CPU 에서 MLX 는 연산이 병목이다.
# > 그래서 decode 의 비용은 캐시의 크기 자체가 아니라 한 스텝에 메모리에서 읽는 바이트와 한 번에 담을 수 있는 요청 수가 정한다.
#
# **You will learn**
# - the roofline model: arithmetic intensity, machine balance, and why decode sits far left of a GPU's ridge while
#   prefill sits right of it (Sarathi-Serve, DistServe);
# - the bytes one decode step reads, with one definition of the weights it reads;
# - to measure your own machine and place its decode steps on its roofline;
# - what an NVIDIA H200 measured: steps that follow the bandwidth line, two batch sweeps, kvsim beside mlx-lm, and
#   where one step's time goes beyond the floor;
# - which term of the cache formula each optimisation changes: what a step **reads** vs what the cache **stores**.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt
import mlx.core as mx

from kvsim.calc import memory, phases, roofline
from kvsim.calc.counterfactual import as_mha, attention_variants
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.weights import param_count
from kvsim.lessons.exercises import check
from kvsim.lessons.l08_decode_speed.data import (
    batch_sweep_rows,
    breakdown_rows,
    cache_read_intensity,
    comparison_rows,
    dataset_findings,
    load_breakdown,
    load_fused_check,
    load_run,
    nsa_read_tokens,
    provenance,
    quantized_kernel_rows,
    quantized_probe_rows,
    sparse_bytes,
    step_segments,
    technique_table,
    weight_read_intensity,
)
from kvsim.lessons.l08_decode_speed.views import (
    batch_floor_view,
    decode_speed_view,
    draw_h200_time_vs_bytes,
    draw_measured_roofline,
    draw_step_breakdown,
    draw_stored_vs_read,
    draw_time_and_floors,
    h200_roof,
    h200_variants_view,
    roofline_view,
)
from kvsim.lessons.l08_decode_speed.measure import fused_vs_reference
from kvsim.measure.bandwidth import measure_copy_bandwidth
from kvsim.measure.roofline import decode_point, device_limits, device_summary
from kvsim.measure.step_time import fill_caches
from kvsim.model import build_model

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| numpy", md.version("numpy"))

# %% [markdown]
# ## Prefill computes, decode reads
#
# Prefill pushes the whole prompt through the model at once: every weight matrix multiplies $P$ token vectors, big
# matrix products set by arithmetic. A decode step feeds **one** token per sequence: every weight matrix is read
# for a matrix-vector product, and every attention layer reads its whole cache to score one query. Many bytes,
# little arithmetic: on a GPU, decode is limited by memory bandwidth (Sarathi-Serve §1 and §3.1, DistServe §2.1).
# DistServe's Appendix A counts one attention head of length $s$ over $l$ cached tokens: about $3sl$ memory reads
# and writes for $2sl$ operations (reconciled with kvsim's count below). Whether "little arithmetic" is little
# depends on the machine; the roofline model makes that precise.

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
# own, so 64 sequences at 8K stay far below 64 FLOP/B. Prefill uses each weight once per prompt token.
#
# **DistServe's count against kvsim's.** DistServe's "operations" are multiply-adds: $q \cdot k$ over $l$ keys of
# length $s$ is $sl$ of them, the weighted sum of $l$ values another $sl$, so $2sl$ operations are $4sl$ FLOPs. Its
# $3sl$ accesses are one $sl$ more than the $2sl$ elements of K and V, traffic beyond reading the cache once; kvsim's
# floor counts only the bytes that must be read. Both, per byte in bf16, for one MHA head at 8K tokens:

# %%
s, l = llama.layers[0].head_dim, 8192                           # DistServe's s (head length) and l (context)
operations, accesses, kv_elements = 2 * s * l, 3 * s * l, 2 * s * l
flops, element_bytes = 2 * operations, 2                        # 2 FLOPs per multiply-add; bf16
print(f"DistServe: {operations:,} operations / {accesses:,} accesses; in FLOPs and bytes: "
      f"{flops:,} / {accesses * element_bytes:,} = {flops / (accesses * element_bytes):.2f} FLOP/B")
print(f"kvsim:     K and V read once: {flops:,} / {kv_elements * element_bytes:,} = "
      f"{flops / (kv_elements * element_bytes):.2f} FLOP/B; cache_read_intensity (MHA, bf16): "
      f"{cache_read_intensity(as_mha(llama).layers[0], llama.num_attention_heads):.2f}")

# %% [markdown]
# The counts differ in what they call memory traffic, not in the verdict: both lie far left of a GPU's ridge.
#
# ## This machine, measured
#
# Memory bandwidth (numpy and MLX each copy 64 MiB; the faster counts) and MLX's float32 matrix product (512 × 512)
# on its default device, fastest of several runs, a few seconds in all (`kvsim.measure.bandwidth`):

# %% tags=["nbval-ignore-output"]
device = device_summary()
mlx_limits = device_limits(64 * 2**20, 512, "fp32", repeats=5)     # MLX copy + MLX matmul on its default device
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
# On Linux, MLX's CPU wheel bundles the reference BLAS (plain loops), so its matrix product is slow: on the machine
# this course was written on, the ridge with MLX's kernels lies left of every decode step measured below (the last
# line above gives yours). On Apple silicon MLX runs on the GPU, where the ridge lies far to the right.
#
# ## Decode and prefill on two rooflines
#
# The H200's roofline (measured, from the dataset below) and this machine's, with where a model's decode at batch 1,
# at batch $B$ and a prefill fall (bf16). Move the batch: decode creeps right but stops short of the H200's ridge,
# because each sequence brings its own cache. (For a mixture of experts kvsim counts the experts one token uses; a
# batch touches more, so its real intensity is lower than drawn.)

# %% tags=["nbval-ignore-output"]
machines = {**h200_roof(), f"this machine: MLX on {device['backend']}, fp32 (measured)": (bandwidth, mlx_flops)}
roofline_view(machines=machines)

# %% [markdown]
# ## Decode steps measured here
#
# One attention layer at Llama 3 8B's geometry (32 query heads, 8 KV heads of 128) in float32, the FFN and vocabulary
# shrunk (`kvsim.model.build_model`). `decode_point` fills the caches with random K/V, times the fastest of three
# steps, and returns the bytes read and FLOPs done: the context at batch 1, then the batch at 1,024 tokens.

# %% tags=["nbval-ignore-output"]
gqa = build_model(llama, num_layers=1, hidden_size=512, intermediate_size=512, vocab_size=1024)
context_points = [decode_point(gqa, t, batch=1, repeats=3) for t in (0, 1024, 2048, 4096, 8192)]
batch_points = [decode_point(gqa, 1024, batch=b, repeats=3) for b in (1, 2, 4, 8)]
here = phases.point_rows(context_points + batch_points, bandwidth, mlx_flops)
print(format_table(here, digits=2))
print(phases.roofline_verdict(here))

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
# The verdict line says which side of this machine's ridge the steps fell on and how many times each floor they
# took. Where they sit right of it (the Linux CPU), the batch sweep shows the signature of compute: twice the
# sequences, about twice the time, where a memory-bound step would barely notice a second sequence (the weights are
# read once for both). Decode is memory-bound only where the kernels are fast enough: measure before you assume.

# %% [markdown]
# ## The H200: where decode follows the bandwidth line
#
# `data/h200/` holds decode steps measured with `benchmarks/bench_roofline.py` on an NVIDIA H200 with MLX's CUDA
# backend: bf16, real geometries (Llama 3 8B with all 32 layers, Mistral 7B, DeepSeek-V3's attention in 4 layers),
# kvsim's eager and compiled steps and mlx-lm's with the same weights, interleaved
# (`kvsim.lessons.l08_decode_speed.data` reads it without MLX):

# %%
run = load_run()
print("\n".join(provenance(run)))

# %% [markdown]
# Every single-sequence point and the one-tensor batch sweep, step time against the bytes the step read; dashed: the
# floor (bytes ÷ the copy bandwidth measured in the same process), dotted: twice the floor.

# %%
fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
draw_h200_time_vs_bytes(ax, run)
plt.show()
print("\n".join(dataset_findings(run)))

# %% [markdown]
# The points lie along lines through the origin, step time = bytes ÷ a fixed rate: here the title of this lesson
# holds, closest for the largest reads. The batch points are a batch kept in one cache tensor per layer; the next
# section shows the other way to keep one.

# %% [markdown]
# ## Two batch sweeps: one tensor, or a cache per sequence
#
# Llama 3 8B at 8,192 tokens with 1 to 64 sequences against the two floors, measured two ways: an earlier run with
# **one** cache tensor per layer for the whole batch (the weights read once, only the caches add bytes), and the
# current run with **one cache per sequence**, as a server keeps them (kvsim's `batched_generate`; mlx-lm's
# `BatchKVCache`): the same bytes, not the same time. At 8K no batch reaches the ridge (the title gives the limit);
# move the context to 128 tokens and the floors cross.

# %% tags=["nbval-ignore-output"]
batch_floor_view()

# %%
print(format_table(batch_sweep_rows(run)))
first, last = run.batch_sweep["points"][0], run.batch_sweep["points"][-1]
one_first, one_last = run.batch_sweep_one_tensor["points"][0], run.batch_sweep_one_tensor["points"][-1]
print(f"B = {last['batch']} takes this many times the step of B = 1, for {last['batch']}× the tokens: one tensor "
      f"{one_last['step_ms']['kvsim'] / one_first['step_ms']['kvsim']:.1f}×; a cache per sequence: kvsim "
      f"{last['step_ms']['kvsim'] / first['step_ms']['kvsim']:.1f}×, mlx-lm "
      f"{last['step_ms']['mlx-lm'] / first['step_ms']['mlx-lm']:.1f}×")

# %% [markdown]
# ## GQA, MHA, MQA, MLA and a sliding window on the H200
#
# Step time against context per variant (pick one for its mlx-lm twin and floor). The weights set the level, the
# cache the slope: MHA (32 KV heads) reads 4 times GQA-8's cache per token, MQA (1 KV head) stays nearly flat, the
# sliding window stops growing at its window, MLA's latent is small. The MLA model has 4 of DeepSeek-V3's 61 layers,
# so compare its slope, not its level.

# %% tags=["nbval-ignore-output"]
h200_variants_view()

# %% [markdown]
# ## kvsim beside mlx-lm on the H200
#
# Same shapes and weights, best of the interleaved steps: kvsim's eager step and its compiled step
# (`kvsim.model.compiled`: the fixed-shape parts of a layer under `mx.compile`) against mlx-lm's.

# %%
print(format_table(comparison_rows(run), digits=3))

# %% [markdown]
# ## Where one step's time goes
#
# The floor is not the step. `benchmarks/bench_step_breakdown.py` timed, in one H200 process, Llama 3 8B's eager
# step, its compiled step, mlx-lm's step, and the chain of every layer's weight matrix-vector products alone.
# `step_segments` splits the eager step into five parts that sum to it:
#
# | part | measured as |
# |---|---|
# | weights' floor | weight bytes ÷ copy bandwidth |
# | matrix-vector kernels | the chain's time − the chain's own floor: what MLX's GEMV kernels lose to the bandwidth |
# | cache's floor | cache bytes read ÷ copy bandwidth |
# | launch and host overhead | eager step − compiled step: what `mx.compile` removes |
# | rest | the step − the four: attention and the output head above their floors, norms, RoPE, the cache write, host time the compile does not remove |

# %%
breakdown = load_breakdown()
fig, ax = plt.subplots(figsize=(9, 4.6), layout="constrained")
draw_step_breakdown(ax, breakdown)
plt.show()
print(format_table(breakdown_rows(breakdown), digits=2))
repeat = load_breakdown(name="repeats/step_breakdown_cuda_repeat.json")
print("the same benchmark run again minutes earlier (spread between runs):")
print(format_table(breakdown_rows(repeat), digits=2))
clipped = [(p["context_tokens"], k, v) for b in (breakdown, repeat) for p in map(step_segments, b["points"])
           for k, v in p["clipped"].items()]
print("measured below zero, drawn as 0 (noise): " + "; ".join(f"{k} at {t:,} tokens ({v:+.2f} ms)" for t, k, v in clipped))

# %% [markdown]
# Read the bars bottom up. The weights' floor is the same at every context and the cache's floor grows with it; the
# GEMV kernels add little to the weights' floor; launch and host overhead moves between runs, as the two tables
# show. What is left (many small kernels per layer) is the largest part after the weights until the cache read
# overtakes it at 128K. The ticks beside each bar are the compiled step and mlx-lm's step, measured in the same
# process.

# %% [markdown]
# **Quantized caches on the H200.** MLX 0.32.4's CUDA backend has no `quantized_matmul` for a one-query product over
# rows sliced out of a larger buffer, which is what both kvsim's and mlx-lm's quantized caches return, so quantized
# decode steps failed for both (`benchmarks/check_fused.py` probed which products run). The current run timed one
# layer's attention over 32 heads' K/V the ways that do run: `quantized_matmul` on a fresh array, and dequantizing
# to bf16 first (`kvsim.cache.sdpa.dequantized_sdpa`), against bf16 attention.

# %%
print(format_table(quantized_probe_rows(load_fused_check())))
print(f"{len(run.errors)} quantized decode points failed, e.g.: {run.errors[0]['error'].split(', transpose')[0]}")
print(format_table(quantized_kernel_rows(run)))

# %% [markdown]
# A quantized cache reads fewer bytes, but on this backend each way that runs takes longer than bf16 attention over
# the same tokens (the "× bf16" columns).
#
# ## The floor on a served model: try it
#
# For a real model on a real accelerator the same formula gives the least time a step can take,
# $(W + B \cdot \text{cache read}) / \text{bandwidth}$ (for a mixture of experts, the experts one token uses: a lower
# bound for a batch). Raise the batch: the weights line stays, each sequence's cache adds its own slope, so total
# throughput rises while each sequence slows down (the title says when the caches no longer fit). Switch the KV
# dtype to fp8 or q4 to halve or quarter the slope; pick a Gemma 3 model to see its sliding-window layers flatten
# it; pick a Mac for a lower bandwidth.

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
# - **MQA, GQA** store one K/V pair per group of query heads; **MLA** a latent and a RoPE key per layer (lesson 03).
# - **KV quantization** shrinks $b$ (lesson 06 counts the scales and biases; the table shows both).
# - **Sliding window** caps $T$ at $W$ per layer (lesson 04); **hybrids** keep K/V only in their attention layers
#   (lesson 05).
# - **NSA and DSA** keep every token. NSA reads compressed blocks, a few selected blocks and a local window; DSA's
#   indexer reads its own small key for every token, then attention reads the top 2048, and those indexer keys are
#   *extra* storage.
# - **PagedAttention** stores the same bytes per token in blocks; it removes memory reserved for tokens that never
#   come (lesson 07).
# - **FlashAttention, Flash-Decoding** store and read the same bytes and read them faster: no score matrix written
#   to memory, the cache split across many processors even at batch 1. Measured here, one decode query of Llama 3
#   8B's shape over 4,096 cached tokens, the plain definition (`reference_sdpa`) against MLX's fused path (`sdpa`):

# %% tags=["nbval-ignore-output"]
fused = fused_vs_reference(context=4096)
print(f"on {fused['device']}, {fused['dtype']}, {fused['context_tokens']:,} tokens: both read {fused['kv_bytes']:,} B "
      f"of K/V; the reference also writes and reads back {fused['score_bytes']:,} B of scores")
print(f"reference {fused['reference_ms']:.2f} ms, fused {fused['fused_ms']:.2f} ms: "
      f"fused / reference = {fused['fused_ms'] / fused['reference_ms']:.2f}; "
      f"largest output difference {fused['max_abs_difference']:.1e}")

# %% [markdown]
# Same bytes in, the same answer out. On Metal and CUDA the fused kernel keeps the scores on chip and splits the
# keys across the processors, so its time ratio drops below 1; on a CPU MLX composes the same matrix products both
# ways, so the ratio there is run-to-run noise around 1: the saving is a GPU kernel's, not a smaller cache.

# %% [markdown]
# ## Stored vs read
#
# One DeepSeek-V3 sequence, bf16, both axes logarithmic: solid lines are what the cache holds, dashed lines what one
# decode step reads. Curves that coincide are drawn once: dense attention (with or without FlashAttention) stores
# what NSA stores and reads all of it. NSA reads a fixed budget plus 1/16 of the tokens; DSA stores a bit more (the
# indexer keys) and reads the indexer keys plus 2,048 latents.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_stored_vs_read(ax, model="deepseek-v3", tokens=131_072)
plt.show()
print(format_table([{"tokens": t, "NSA tokens read": nsa_read_tokens(t)} for t in (8192, 16384, 32768, 65536)]))

# %% [markdown]
# The table is NSA's own count (Yuan et al., 2025, Table 4).

# %% [markdown]
# ## Summary
# - A step takes at least $\max(\text{bytes} / \beta,\ \text{FLOPs} / F)$. Its arithmetic intensity against the machine
#   balance $F / \beta$ says which floor binds.
# - A decode step reads every weight it uses (all but the input table, plus one row) and every cached token its
#   layers keep, and does a few FLOPs per byte in bf16 (more for MLA); prefill does thousands.
# - On the H200 single-sequence decode follows the bandwidth line; what lies above the floor is kernel launches and
#   small ops as much as bytes, and a batch kept as one cache per sequence costs far more than its bytes.
# - On a CPU with slow kernels (MLX's reference BLAS on Linux) the same step is compute-bound. Measure before you
#   assume.
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
# **3.** With an empty cache (context 0), a decode step of Llama 3 8B reads only the weights. What is the smallest
# whole batch $B$ at which it is compute-bound on the H200 as measured (`run.flops_per_s`, `run.bytes_per_s`)?

# %%
ridge_batch_h200 = None  # your turn

# %%
check("08.3", ridge_batch_h200)

# %% [markdown]
# **4. Predict, then measure.** Fill the measured layer's caches with 1,024 tokens for 4 sequences and run one
# decode step. How many bytes of K/V does that step read (float32)? Predict first; then the next cell runs it on
# real MLX caches and checks what they hold (`used_bytes`, the rows the step attends to) against the same answer.

# %%
predicted_step_kv_bytes = None  # your prediction

# %%
check("08.4", predicted_step_kv_bytes)

# %%
caches = gqa.make_caches()
fill_caches(gqa, caches, 1024, batch=4)
mx.eval(gqa(mx.array([[1]] * 4), caches))                            # one decode step of 4 sequences
measured_step_kv_bytes = sum(c.used_bytes for c in caches)
print(f"held and read by the step: {measured_step_kv_bytes:,} B; allocated (nbytes): {sum(c.nbytes for c in caches):,} B")
check("08.4", measured_step_kv_bytes)

# %% [markdown]
# ## Exercises
# 1. Rebuild the measured layer with `intermediate_size=4096`. Its weights grow eightfold: does the step time at
#    context 0 grow in proportion to the bytes, to the FLOPs, or to neither? What does that say about this machine?
# 2. In the batch view, find the largest context at which the two floors still cross. Check it with
#    `phases.ridge_batch(llama, tokens, run.bytes_per_s, run.flops_per_s)`.
# 3. With `sparse_bytes(load_model("deepseek-v3"), T, "dsa")`, find the context below which DSA reads
#    *more* than dense MLA (hint: the indexer keys).
# 4. Measure numpy's matrix product with `kvsim.measure.bandwidth.measure_host_matmul_throughput(512, repeats=20)`
#    (in a plain Python process) and add it as a second roof to the measured roofline: on which side of that ridge
#    would the measured steps fall?

# %%
# Exercise 3 - your answer here: compare sparse_bytes(dsv3, T, "dsa")["read"] with "dense" for T = 1024, 2048, 4096

# %% [markdown]
# ## Self-test
#
# kvsim against the seeds' numbers, the H200 dataset and the measurements above (no timing is checked, only what
# was counted). The cell is collapsed: run it, or open it to read the checks.

# %% jupyter={"source_hidden": true} tags=["self-test"]
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
assert breakdown["geometry"]["weights_read_bytes"] == phases.weights_read_bytes(llama)
# DistServe's 2sl multiply-adds over kvsim's 2sl K/V elements: kvsim's 1.0 FLOP/B for MHA in bf16
assert flops / (kv_elements * element_bytes) == cache_read_intensity(as_mha(llama).layers[0], llama.num_attention_heads)
# intensities: decode far left of the H200's ridge, prefill right of it; 64 sequences at 8K below 15 FLOP/B
ridge = run.flops_per_s / run.bytes_per_s
assert phase_costs["decode, B = 1, 8K tokens"].intensity < 2 < 14 < phase_costs["decode, B = 64, 8K tokens each"].intensity < 15
assert phase_costs["prefill of a 2,048-token prompt"].intensity > ridge > 200
assert phases.ridge_batch(llama, 8192, run.bytes_per_s, run.flops_per_s) is None
# the H200's single-sequence points lie above their floor; the breakdown's parts sum to each measured step
h200_points = [p for v in run.measured_variants() for p in run.points(v)]
assert all(p["step_ms"]["kvsim"] / 1e3 >= roofline.floor_seconds(p["read_bytes"], run.bytes_per_s) for p in h200_points)
assert all(abs(sum(s["segments"].values()) - s["step_ms"]) < 1e-9 for s in map(step_segments, breakdown["points"]))
# the live points: bytes and FLOPs as the calculator counts them (their times depend on the machine)
per_token = memory.bytes_per_token(gqa.spec, "fp32")                 # 2 x 8 KV heads x 128 x 4 B = 8 KiB
assert all(p["cache_read_bytes"] - context_points[0]["cache_read_bytes"] == p["context_tokens"] * per_token
           for p in context_points)
one = batch_points[0]                                                 # B sequences: weights once, B caches, B x FLOPs
assert all(p["read_bytes"] == one["weights_read_bytes"] + p["batch"] * one["cache_read_bytes"] and
           abs(p["flops"] - p["batch"] * one["flops"]) <= 1e-9 * p["flops"] for p in batch_points)
assert all(r["bound by"] == ("memory" if r["FLOP/B"] < roofline.machine_balance(mlx_flops, bandwidth) else "compute")
           for r in here)
assert fused["kv_bytes"] == 2 * 8 * 4096 * 128 * 4 and fused["max_abs_difference"] < 1e-4
assert measured_step_kv_bytes == 4 * 1025 * per_token
print("self-test passed")
