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
# # 00 · Start here
#
# > **요약** (seed 000 「KV 캐시란?」, seed 001 「KV cache 는 이미 계산한 key·value 를 저장해 두는 캐시다」)
# > 이 노트는 열 개의 레슨이 무엇을 다루는지, 슬라이더와 명령행을 어떻게 쓰는지 안내한다.
# > 레슨의 용어는 아래 한국어–영어 용어집에 두 참고 노트, seed 000 (MLX 추론 엔진 문서의 「KV 캐시」 장)과
# > seed 001 (「KV Cache」 노트)이 쓰는 표기 그대로 모았다.
#
# **You will learn**
# - what the ten lessons cover, and in which order to read them;
# - how the interactive views work: drag a slider, or set it from code;
# - how to run the `kvsim` command line (`models`, `calc`, `--explain`, `--json`, `compare`) in a terminal or from a notebook, and what each line of its output means;
# - how the "your turn" cells work (you compute, kvsim checks), and what the self-test cells at the end of every lesson are.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md
import json

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.cli import run_cli
from kvsim.lessons.exercises import check
from kvsim.lessons.l00_start.data import partial_tail
from kvsim.lessons.l00_start.measure import kv_cache_after_prompt
from kvsim.lessons.l00_start.views import slider_demo_view

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## What this is
#
# A language model writes its answer one token at a time. To avoid recomputing the past at every step, each attention
# layer keeps the **keys and values** of every token it has seen: the **KV cache**. It is often the largest thing in
# a serving GPU's memory after the weights, and the reason most modern attention designs look the way they do.
#
# kvsim sizes that cache for real models (read from their Hugging Face `config.json`) and shows the same numbers in
# real MLX tensors while a small model decodes. Every number in these lessons comes from the `kvsim` package;
# the notebooks only call it.

# %% [markdown]
# ## The lessons
#
# | lesson | topic | in one line |
# |---|---|---|
# | 00 | Start here | this notebook: sliders, the command line, your-turn and self-test cells, the glossary |
# | 01 | Why a KV cache | recomputing the prefix costs 1,499,500 token positions for a 1,000 + 1,000 answer, caching costs 1,999 (seed 001's example); measured on a real decode |
# | 02 | How big is it | $2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$ per token: Llama 3 8B's bytes per token and 8K request are printed below |
# | 03 | MHA, GQA, MQA, MLA | four ways to store K and V, compared per token at DeepSeek-V3's sizes |
# | 04 | Sliding windows and chunks | layers that keep only the last $W$ tokens (a ring buffer), or the current chunk |
# | 05 | Hybrids | Mamba / linear-attention layers keep a fixed state: at long contexts Jamba holds a fraction of Mixtral's cache |
# | 06 | Quantized KV | fewer bits per element, plus the scales and biases that come with them, and the error they cost |
# | 07 | Paged attention and serving | fixed-size blocks instead of one reservation per request: less waste, more requests per GPU |
# | 08 | Decode is memory-bound | each step reads the weights and the whole cache; which techniques change what is read, not what is stored |
# | 09 | Speculative decoding and rewind | draft, verify, and `trim` the cache back when a guess is rejected |
# | 10 | The engine: a pool, a queue, a batch | a pool of per-sequence caches, the admission queue in front of it, sequences joining and leaving the batch between steps |
# | 11 | How a paged cache is read | through the block table without a copy, a subset of pages, a shared prefix read once (cascade), long caches split (split-K) |
#
# Read 01 → 02 → 03 first; after that the lessons stand on their own.

# %% [markdown]
# ## How a lesson is built
#
# Each lesson has the same parts, in this order: a three-line Korean summary naming the section of the seed notes it
# covers; a short story in small steps with **a picture of each mechanism**; **the formula**, each symbol tied to the
# `config.json` field it comes from; a **table** computed by kvsim; **interactive views** with sliders; a summary;
# **your turn** cells where you compute and kvsim checks; open **exercises**; and a final **self-test**.
#
# Cells that decode with a real model show a progress bar and finish in seconds. Nothing is downloaded: the models are
# built with random weights but the real layer geometry, which is all a cache cares about.

# %% [markdown]
# ## Sliders
#
# Every interactive view is a plain drawing function plus a few controls. The drawing function
# (`draw_slider_demo`) draws the KV cache of one Llama 3 8B request against its length, with a dot at the chosen
# length; the view below wraps it with a **tokens** slider and a **KV dtype** menu. Drag the slider (or click it
# and use the arrow keys): the dot moves and the figure redraws. The view is an object: `demo.controls["tokens"].value = 65536`
# in a code cell moves the slider from code, which is how kvsim's tests move every slider to its minimum and maximum.
# Sliders only work in a running notebook; on a static page you see the figure for the default values.

# %% tags=["nbval-ignore-output"]
demo = slider_demo_view()
demo

# %% [markdown]
# ## The command line
#
# Installing kvsim (`pip install -e .`, or `make lab`) also installs a `kvsim` command. In a terminal:
#
# ```bash
# kvsim models                                   # the models kvsim knows (their config.json lives in data/models/)
# kvsim calc llama-3-8b --tokens 8192            # size one model's cache
# kvsim calc llama-3-8b --tokens 8192 --explain  # ... and show the formula with the numbers plugged in
# kvsim calc llama-3-8b --tokens 8192 --json     # ... as JSON, for scripts
# kvsim compare llama-3-8b mistral-7b-v0.1 deepseek-v3 --tokens 32768
# ```
#
# In a notebook, `!kvsim models` works when the environment's `bin/` directory is on `PATH`. `run_cli` always works:
# it runs the same command in a child process with this kernel's Python and returns what a terminal would show.
# The output is deterministic, so these cells are checked like any other.

# %%
print(run_cli("kvsim models"))

# %%
print(run_cli("kvsim calc llama-3-8b --tokens 8192"))

# %% [markdown]
# Line by line:
# - `bytes per token`: what one token adds to one sequence's cache, summed over the layers (lesson 02's formula);
# - `KV cache`: bytes per token × tokens × batch, the **theoretical** size: only the tokens actually held;
# - `total`: the KV cache plus any fixed recurrent state (lesson 05; Llama has none, so it equals the KV cache);
# - `allocated, 256-token steps`: what a growing cache really reserves. kvsim's caches (like mlx-lm's) enlarge their
#   buffers 256 token slots at a time (`--step`), so they hold up to 255 empty slots;
# - `paged, 16-token blocks`: what a paged server reserves: whole blocks of 16 tokens (`--block-size`), at most 15
#   empty slots per sequence (lesson 07);
# - `read per decode step`: the cache bytes one decode step reads. Here the whole cache; a sliding-window layer reads
#   only its window, a quantized cache its compressed bytes (lesson 08).
#
# At 8,192 tokens, a multiple of both 256 and 16, the four sizes agree. `--explain` adds the formula with each number in
# place; `--json` prints one JSON object with every figure in bytes.

# %%
print(run_cli("kvsim calc llama-3-8b --tokens 8192 --explain"))

# %%
calc = json.loads(run_cli("kvsim calc llama-3-8b --tokens 8192 --json"))
print({k: calc[k] for k in ("model", "tokens", "batch", "kv_dtype", "bytes_per_token", "kv_bytes")})

# %% [markdown]
# At 8,100 tokens the last step and the last block are partly empty. `partial_tail` counts the slots the step-grown
# buffer holds and the blocks a paged cache holds with 64-token blocks (`--block-size 64`); the calculator's
# `allocated` and `paged` lines are those slots times the bytes per token:

# %%
print(partial_tail(8100, step=256, block_size=64))
print(run_cli("kvsim calc llama-3-8b --tokens 8100 --block-size 64"))

# %%
print(run_cli("kvsim compare llama-3-8b mistral-7b-v0.1 deepseek-v3 --tokens 32768"))

# %% [markdown]
# Bad input gives one line naming the problem, never a traceback:

# %%
print(run_cli("kvsim calc llama-3-8b --tokens -5"))

# %% [markdown]
# ## Your turn, and self-tests
#
# Every lesson has **your turn** cells: a question, a cell with `answer = None` for your number, and a cell that
# checks it with `check(...)`. The check compares your number with what kvsim computes and tells you, in words, what is
# off (for example "you used `num_attention_heads` in place of `num_key_value_heads`"), then shows kvsim's derivation.
# It never stops the notebook: with `None` it only says what to do. Worked solutions are in `notebooks/solutions/`.
#
# Try it: Llama 3 70B has 80 layers, 8 KV heads and `head_dim` 128. How many bytes does one token add to its cache in
# bf16 (2 bytes per element)? (This is exercise 02.1; lesson 02 explains the formula.)

# %%
bytes_per_token_70b = None  # your turn: 2 × layers × KV heads × head_dim × bytes per element

# %%
check("02.1", bytes_per_token_70b)

# %% [markdown]
# Some your-turn cells ask you to **predict, then measure**: you predict a quantity of a real cache, and the check
# builds that cache, measures it and compares. Try one: kvsim's `KVCache` (like mlx-lm's) grows its buffers 256
# token slots at a time. A `KVCache()` holding one layer of Llama 3 8B (8 KV heads of 128, bf16) is fed a 300-token
# prompt. How many bytes do its buffers take (`nbytes`, keys and values)?

# %%
predicted_nbytes = None  # your turn: slots the buffer holds × 2 × KV heads × head_dim × 2 B

# %%
check("00.1", predicted_nbytes)

# %% [markdown]
# Then measure: build that cache, feed it the prompt and read what it reports.

# %%
print(kv_cache_after_prompt(tokens=300, model="llama-3-8b", dtype="bf16"))

# %% [markdown]
# The last section of every lesson, **self-test**, is different: its one cell holds `assert` statements that check the
# package itself, i.e. that kvsim still reproduces the numbers the lesson quotes from its sources and that a formula
# matches bytes measured on real MLX arrays. When everything holds, the cell prints only "self-test passed"; a failed
# check stops it with an error. You do not need to read them.
#
# ## Glossary: 용어집
#
# The seed notes (in Korean) keep many terms in English; the middle column shows the term as the seeds write it, or,
# marked †, the usual Korean term where the seeds have none.
#
# | English | in the seeds | lesson |
# |---|---|---|
# | KV cache | KV cache, KV 캐시 | 00–09 |
# | key, value, query | key·value, query (key(K), value(V)) | 01 |
# | autoregressive decoding | autoregressive decoding | 01 |
# | causal mask | causal mask | 01, 04 |
# | prefill | prefill; 프리필 (seed 000: 콜드 프리필, cold prefill) | 01, 09 |
# | decode, decoding | decode; 디코딩 | 01, 08 |
# | step (decode step) | 스텝, decode step | 01 |
# | token, sequence, batch | 토큰, 시퀀스, 배치 | 01, 02 |
# | layer | 층, layer | 02 |
# | bytes per token | 토큰당 크기, 토큰당 캐시 | 02 |
# | element, bytes per element | 원소, 원소당 바이트 | 02, 03 |
# | context (length) | 문맥 (길이) | 02 |
# | weights | 가중치 | 02 |
# | memory bandwidth, bottleneck | 메모리 대역폭, 병목 | 01, 08 |
# | KV head, query head, group | key·value head, query head, 그룹 | 03 |
# | latent (MLA) | latent 벡터 | 03 |
# | absorption (absorbed MLA) | 흡수 | 03 |
# | sliding window | sliding window | 04 |
# | ring buffer, linearize | 고정 크기 버퍼에 돌려 가며 덮어쓴다; 링 버퍼†; 선형화 | 04 |
# | chunk, chunked attention | chunk, ChunkedKVCache | 04 |
# | recurrent state | 순환 상태 | 05 |
# | hybrid | 하이브리드 | 05 |
# | quantization | 양자화 | 06 |
# | allocation | 할당 | 00, 07 |
# | in-place write (slice update) | 캐시 버퍼에 직접(in place) 쓴다 | 01 |
# | materialize (MLA's per-head K/V) | materialize 경로 | 03 |
# | quantization constants (scales, biases) | 양자화 상수 | 06 |
# | arithmetic intensity, roofline | 산술 강도†, roofline† | 08 |
# | block, page | 블록 (16 토큰 블록), page | 07 |
# | prefix sharing | prefix 공유 | 07 |
# | preemption, eviction | preemption, eviction; 선점(preemption)† | 07 |
# | block table | 블록 테이블† | 07 |
# | copy-on-write | copy-on-write† (쓰기 시 복사) | 07 |
# | admission queue: wait or busy | 대기할지 busy 응답을 받을지 (seed 000); 입장 대기열† | 10 |
# | speculative decoding | 투기적 디코딩 | 09 |
# | drafter, prompt lookup | 드래프터, 프롬프트 조회 | 09 |
# | rewind, trim | rewind, 되돌리다; trim() | 09 |
# | decode lookahead | decode lookahead, lookahead 파이프라인 | 09 |
# | padded prefill | padded prefill | 09 |
#
# Plots stay in English, like the code they are drawn from.

# %% [markdown]
# ## Summary
# - Ten lessons: why a cache (01), its size (02), the attention designs that shrink it (03-05), storing it in fewer bits (06)
#   or in pages (07), what decode reads (08), and rewinding it (09).
# - A view is a drawing function plus controls; drag them, or set `view.controls[name].value` from code.
# - `kvsim models | calc | compare` size caches from the command line; `--explain` shows the formula, `--json` the raw bytes.
# - Your-turn cells: you compute, `check` says what is off. The self-test cell: the package checks itself.
#
# ## Exercises
# 1. Move the demo's tokens slider to 131,072 (Llama 3.1's context). How large is the cache? Now pick `fp8`.
# 2. Run `kvsim calc llama-3-8b --tokens 32768 --gpu "H100 80GB"` (`kvsim gpus` lists the names). How many 32K sequences
#    fit? Try `llama-3-70b`: why does the answer drop to 0?
# 3. Use `--json` to find which layer of `gemma-3-4b` holds the most KV at 32K tokens, and why the others hold less (lesson 04).

# %%
# Exercise 2 - your answer here: print(run_cli('kvsim calc llama-3-8b --tokens 32768 --gpu "H100 80GB"'))

# %% [markdown]
# ## Self-test
#
# The package against lesson 02's formula for Llama 3 8B at 8,192 tokens; the cell prints "self-test passed" when
# every check holds:
#
# $$
# M_{\text{total}} = 2 \times \underbrace{32}_{\texttt{num\_hidden\_layers}} \times \underbrace{8}_{\texttt{num\_key\_value\_heads}}
# \times \underbrace{128}_{\texttt{head\_dim}} \times \underbrace{2}_{\text{bf16}} \times \underbrace{8192}_{T} = 2^{30}\ \text{B} = 1\ \text{GiB}
# $$

# %% tags=["self-test"]
cfg = load_model("llama-3-8b").config
assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]) == (32, 8, 128)
assert calc["bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131_072
assert calc["kv_bytes"] == memory.kv_bytes(load_model("llama-3-8b"), 8192) == 2**30
assert "llama-3-8b" in run_cli("kvsim models").split()
assert demo.controls["tokens"].value == 8192
print("self-test passed")
