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
# **You will learn**
# - what the ten lessons cover, and in which order to read them;
# - how the interactive views work: drag a slider, or set it from code;
# - how to run the `kvsim` command line (`models`, `calc`, `--explain`, `--json`, `compare`) in a terminal or from a notebook;
# - what the "check yourself" cells at the end of every lesson do.

# %%
# NBVAL_IGNORE_OUTPUT
import importlib.metadata as md
import json

import matplotlib.pyplot as plt

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.cli import run_cli
from kvsim.widgets.start import draw_slider_demo

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
# | 00 | Start here | this notebook: sliders, the command line, check-yourself cells |
# | 01 | Why a KV cache | recomputing the prefix costs 1,499,500 token positions for a 1,000 + 1,000 answer, caching costs 1,999; measured on a real decode |
# | 02 | How big is it | $2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$ per token: Llama 3 8B needs 128 KiB, 1 GiB per 8K request |
# | 03 | MHA, GQA, MQA, MLA | four ways to store K and V at DeepSeek-V3's sizes: 3.81 MiB, 244 KiB, 30.5 KiB, 68.6 KiB per token |
# | 04 | Sliding windows and chunks | layers that keep only the last $W$ tokens (a ring buffer), or the current chunk |
# | 05 | Hybrids | Mamba / linear-attention layers keep a fixed state: Jamba needs 4 GB at 256K where Mixtral needs 32 GB |
# | 06 | Quantized KV | fewer bits per element, plus the scales and biases that come with them, and the error they cost |
# | 07 | Paged attention and serving | fixed-size blocks instead of one reservation per request: less waste, more requests per GPU |
# | 08 | Decode is memory-bound | each step reads the weights and the whole cache; which techniques change what is read, not what is stored |
# | 09 | Speculative decoding and rewind | draft, verify, and `trim` the cache back when a guess is rejected |
#
# Read 01 → 02 → 03 first; after that the lessons stand on their own.

# %% [markdown]
# ## How a lesson is built
#
# Each lesson has the same parts, in this order: a short story in small steps; **the formula**, each symbol tied to the
# `config.json` field it comes from; a **table** computed by kvsim; a **plot**; an **interactive view** with sliders;
# **check yourself** cells; a summary and **exercises**.
#
# Cells that decode with a real model show a progress bar and finish in seconds. Nothing is downloaded: the models are
# built with random weights but the real layer geometry, which is all a cache cares about.

# %% [markdown]
# ## Sliders
#
# Every interactive view is a plain drawing function plus a few controls. The drawing function works on its own:
# here it draws the KV cache of one Llama 3 8B request against its length, with a dot at 8,192 tokens.

# %%
fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
draw_slider_demo(ax, tokens=8192, kv_dtype="bf16")
plt.show()

# %% [markdown]
# The view below wraps the same function with a **tokens** slider and a **KV dtype** menu. Drag the slider (or click it
# and use the arrow keys): the dot moves and the figure redraws. The view is an object: `demo.controls["tokens"].value = 65536`
# in a code cell moves the slider from code, which is how kvsim's tests move every slider to its minimum and maximum.
# Sliders only work in a running notebook; on a static page you see the figure for the default values.

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.start import slider_demo_view  # noqa: E402

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
# `--explain` adds the formula with each number in place. `--json` prints one JSON object with every figure in bytes.

# %%
print(run_cli("kvsim calc llama-3-8b --tokens 8192 --explain"))

# %%
calc = json.loads(run_cli("kvsim calc llama-3-8b --tokens 8192 --json"))
print({k: calc[k] for k in ("model", "tokens", "batch", "kv_dtype", "bytes_per_token", "kv_bytes")})

# %% [markdown]
# The `allocated` and `paged` lines are what a real cache reserves: a growing cache adds slots 256 tokens at a time
# (`--step`), a paged one holds 16 tokens per block (`--block-size`). At 8,192 tokens both fit exactly; at 8,100
# the last step and the last block (here 64 tokens) are partly empty:

# %%
print(run_cli("kvsim calc llama-3-8b --tokens 8100 --block-size 64"))

# %%
print(run_cli("kvsim compare llama-3-8b mistral-7b-v0.1 deepseek-v3 --tokens 32768"))

# %% [markdown]
# Bad input gives one line naming the problem, never a traceback:

# %%
print(run_cli("kvsim calc llama-3-8b --tokens -5"))

# %% [markdown]
# ## Check yourself
#
# The last cells of every lesson are `assert` statements. They compare what kvsim computes with the numbers in the
# lesson's sources, or a formula with bytes measured on real MLX arrays. When a cell runs without an error, every
# check in it holds; an `AssertionError` points at the line that does not. Change a number and run the cell to see one
# fail. For example, the formula of lesson 02 for Llama 3 8B at 8,192 tokens:
#
# $$
# M_{\text{total}} = 2 \times \underbrace{32}_{\texttt{num\_hidden\_layers}} \times \underbrace{8}_{\texttt{num\_key\_value\_heads}}
# \times \underbrace{128}_{\texttt{head\_dim}} \times \underbrace{2}_{\text{bf16}} \times \underbrace{8192}_{T} = 2^{30}\ \text{B} = 1\ \text{GiB}
# $$

# %%
cfg = load_model("llama-3-8b").config
assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]) == (32, 8, 128)
assert calc["bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131_072
assert calc["kv_bytes"] == memory.kv_bytes(load_model("llama-3-8b"), 8192) == 2**30
assert "llama-3-8b" in run_cli("kvsim models").split()
assert demo.controls["tokens"].value == 8192
print("all checks passed")

# %% [markdown]
# ## Summary
# - Ten lessons: why a cache (01), its size (02), the attention designs that shrink it (03-05), storing it in fewer bits (06)
#   or in pages (07), what decode reads (08), and rewinding it (09).
# - A view is a drawing function plus controls; drag them, or set `view.controls[name].value` from code.
# - `kvsim models | calc | compare` size caches from the command line; `--explain` shows the formula, `--json` the raw bytes.
# - "Check yourself" cells are asserts: silent when right, loud when not.
#
# ## Exercises
# 1. Move the demo's tokens slider to 131,072 (Llama 3.1's context). How large is the cache? Now pick `fp8`.
# 2. Run `kvsim calc llama-3-8b --tokens 32768 --gpu "H100 80GB"` (`kvsim gpus` lists the names). How many 32K sequences
#    fit? Try `llama-3-70b`: why does the answer drop to 0?
# 3. Use `--json` to find which layer of `gemma-3-4b` holds the most KV at 32K tokens, and why the others hold less (lesson 04).

# %%
# Exercise 2 - your answer here: print(run_cli('kvsim calc llama-3-8b --tokens 32768 --gpu "H100 80GB"'))
