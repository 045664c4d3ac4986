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
# # 05 · Hybrids: a fixed state beside a growing cache
#
# > **요약** (seed 000 「순환·하이브리드 모델」, seed 001 「Attention 최적화 기법이 캐시를 바꾸는 방식」의 hybrid)
# > Mamba·linear attention 층은 문맥 길이와 상관없는 고정 크기 순환 상태를 매 토큰 갱신하고, softmax attention 층만 key·value 를 쌓는다.
# > 그래서 긴 문맥에서는 하이브리드의 캐시가 훨씬 작지만 (Jamba: 256K 에서 4 GB, Mixtral 32 GB), 짧은 문맥 (Jamba 는 수십 토큰, Qwen3-Next 는 약 천 토큰 아래) 에서는 상태 때문에 오히려 더 크다.
#
# **You will learn**
# - how recurrent layers (Mamba, Mamba-2, Gated DeltaNet, RG-LRU) replace a growing K/V cache by a state of fixed size;
# - why Jamba needs 4 GB of KV at 256K tokens where Mixtral needs 32 GB (Lieber et al., 2024, Table 1), and where
#   Qwen3-Next (36 Gated DeltaNet + 12 full attention) and RecurrentGemma (18 RG-LRU + 8 local attention) land;
# - which cache each layer of a model gets (the architecture table), and how big a purely recurrent model's state is;
# - by decoding a real reduced-depth Jamba and Qwen3-Next: the recurrent layers' measured `nbytes` stay constant while
#   the attention layer's `KVCache` grows, byte for byte as `kvsim.calc.memory` says;
# - what one state update does, drawn, and the short-context crossover: below a few dozen to about a thousand tokens a
#   hybrid holds MORE than the same depth of attention layers.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt
import numpy as np

from kvsim.calc import hybrid, memory, units
from kvsim.calc import window_bytes as windows
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.lessons.exercises import check
from kvsim.lessons.l05_hybrids.data import hybrid_crossover_tokens, layer_crossover
from kvsim.lessons.l05_hybrids.measure import prompt_caches_nbytes
from kvsim.lessons.l05_hybrids.plots import plot_layer_bytes
from kvsim.lessons.l05_hybrids.views import (
    draw_short_context,
    draw_state_vs_kv,
    hybrid_view,
    short_context_view,
    state_update_view,
)
from kvsim.measure.growth import decode_layer_bytes, kvsim_cache_classes
from kvsim.model import build_model

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## A state instead of a cache
#
# Softmax attention has to look at every past key, so it keeps them all. A **recurrent** layer instead folds each
# new token into a state of fixed shape and forgets the token itself: Mamba's selective state space, Qwen3-Next's
# Gated DeltaNet (a matrix memory updated by the delta rule), Griffin/RecurrentGemma's RG-LRU. Each also keeps the
# last $K-1$ inputs of a short causal convolution. Neither part depends on how many tokens came before.
#
# A **hybrid** stacks mostly recurrent layers with a few softmax-attention layers, which keep exact recall.
# Only those few grow with the context: in the size formula, $n_{\text{layers}}$ becomes the number of attention layers.
#
# One update of a Jamba (Mamba) layer, sketched: the old state decays, the new token's contribution is added, and the
# output is read from the new state, which has exactly the old one's shape. Below, the same layer's state beside one
# attention layer's keys and values after the tokens on the slider, bar lengths proportional to bytes: the state
# never grows, the K/V grows by one row per token and passes the state at the dashed line. Slide the tokens, or pick
# Qwen3-Next (Gated DeltaNet: a matrix memory written with the delta rule) or RecurrentGemma (RG-LRU: one decaying
# vector per layer).

# %% tags=["nbval-ignore-output"]
state_update_view()

# %% [markdown]
# ## Which cache each layer gets
#
# `kvsim.cache.make_caches` picks one cache per layer from its kind: the seeds' architecture table, computed by
# building the caches of each model (the counts are layers). One difference from seed 000's engine: there the
# recurrent layers of Mamba, Jamba and the other recurrent and hybrid models keep their state *inside the model*, per
# sequence, and the cache pool holds only a light placeholder for them; kvsim keeps that state in the cache list, one
# `RecurrentStateCache` per recurrent layer, as mlx-lm does (its `ArraysCache`).

# %%
rows = []
for name in ("llama-3-8b", "gemma-3-27b", "llama-4-scout", "jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b",
             "mamba2-2.7b", "falcon-mamba-7b"):
    spec = load_model(name)
    rows.append({"model": name, "layers": windows.pattern_period(spec),
                 "caches (make_caches)": " + ".join(f"{n} {c}" for c, n in kvsim_cache_classes(spec).items())})
print(format_table(rows))
print("letters: F full, S sliding, C chunked, N full without RoPE, R recurrent (repeating unit shown)")

# %% [markdown]
# ## The formula
#
# $$
# M_{\text{total}} = B \Big( \sum_{\ell \in \text{attention}} 2\, n_{\text{kv}}\, d_h\, b \cdot T_\ell
#   \;+\; \sum_{\ell \in \text{recurrent}} \sum_{s \in \text{states}} \textstyle\prod \text{shape}(s) \cdot b_s \Big)
# $$
#
# The first sum is lessons 02–04 ($T_\ell$ = $T$, or $\min(T, W)$ for local layers). The second has no $T$ in it.
# Its $b_s$ is per state tensor: kvsim keeps each one in the dtype the family's reference implementation keeps it in.
# Mamba-2's SSM state, Gated DeltaNet's delta-rule memory and the RG-LRU state are fp32; Mamba's SSM state and every
# convolution window stay in the model dtype (bf16 here).
#
# | model | which layers attend | recurrent state per layer (per sequence) | `config.json` fields |
# |---|---|---|---|
# | Jamba | 1 in 8 (`i % attn_layer_period == attn_layer_offset`) | conv $(K-1) \times d_{\text{inner}}$, SSM $d_{\text{inner}} \times d_{\text{state}}$, $d_{\text{inner}} = $ expand · hidden | `attn_layer_period`, `attn_layer_offset`, `mamba_d_conv`, `mamba_d_state`, `mamba_expand`, `hidden_size` |
# | Qwen3-Next | every 4th | conv $(K-1) \times (2 n_k d_k + n_v d_v)$, delta-rule memory $n_v \times d_v \times d_k$ | `full_attention_interval`, `linear_num_key_heads`, `linear_num_value_heads`, `linear_key_head_dim`, `linear_value_head_dim`, `linear_conv_kernel_dim` |
# | RecurrentGemma | every 3rd, local ($W$ = 2048) | conv $(K-1) \times$ width, RG-LRU state width | `block_types`, `attention_window_size`, `lru_width`, `conv1d_width` |
# | Mamba-2 | none | conv $(K-1) \times (d_{\text{inner}} + 2 g\, d_{\text{state}})$, SSM heads $\times$ head_dim $\times d_{\text{state}}$ | `expand`, `state_size`, `head_dim`, `n_groups`, `conv_kernel` |
# | Falcon-Mamba | none | as Jamba's Mamba layers | `intermediate_size`, `state_size`, `conv_kernel` |
#
# One recurrent layer of each, as kvsim reads it from `config.json`: every state tensor with its shape and dtype.

# %%
rows = []
for name in ("jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b", "mamba2-2.7b", "falcon-mamba-7b"):
    layer = next(x for x in load_model(name).layers if x.kind == "recurrent")
    tensors = [f"{t} {' × '.join(map(str, shape))} {dtype}"
               for (t, shape), (_, dtype) in zip(layer.state_shapes, layer.state_dtypes())]
    rows.append({"model": name, "family": layer.recurrent_family, "state tensors (one layer)": ", ".join(tensors),
                 "bytes (one layer)": units.format_bytes(memory.state_bytes(layer))})
print(format_table(rows))

# %% [markdown]
# ## Jamba vs Mixtral at 256K tokens
#
# Jamba v0.1 has 32 layers; only 4 are attention (one in every block of 8), each with 8 KV heads of 128 — the same
# attention geometry as Mixtral 8x7B's 32 layers. At 16 bits and 256K tokens (Lieber et al., 2024, Table 1):

# %%
jamba, mixtral = load_model("jamba-v0.1"), load_model("mixtral-8x7b")
print({k: jamba.config[k] for k in ("num_hidden_layers", "attn_layer_period", "attn_layer_offset", "num_key_value_heads",
                                    "mamba_d_state", "mamba_d_conv", "mamba_expand", "hidden_size")})
rows = []
for spec in (jamba, mixtral):
    split = hybrid.cache_split(spec, 262_144, kv_dtype="bf16")
    rows.append({"model": spec.name, "attention layers": spec.num_hidden_layers - spec.count("recurrent"),
                 "recurrent layers": spec.count("recurrent"), "KV @256K": units.format_bytes(split["kv"]),
                 "KV (GB)": round(split["kv"] / 1e9, 2), "recurrent state": units.format_bytes(split["state"]),
                 "total": units.format_bytes(split["total"])})
print(format_table(rows))

# %% [markdown]
# 4 GiB against 32 GiB (the paper rounds to 4 GB and 32 GB): one attention layer in eight means one eighth of the KV.
# The price, 28 Mamba states, is 8.31 MiB per sequence — what Mixtral's cache reaches after 67 tokens. (That compares
# the state alone with Mixtral's whole cache; the short-context section below compares Jamba's whole cache, state plus
# its 4 attention layers, with its all-attention twin, and finds a slightly later crossover: 28 states against 28
# swapped layers' K/V instead of against 32 layers'.)

# %%
print(f"Mixtral's KV reaches Jamba's whole state after {hybrid.tokens_to_reach(mixtral, hybrid.cache_split(jamba, 0)['state'])} tokens")

# %% [markdown]
# ## Qwen3-Next, RecurrentGemma, and purely recurrent models
#
# The same split for every recurrent model in the registry, with the **all-attention counterfactual**: the same depth
# with every recurrent layer replaced by the model's own attention layer (`hybrid.all_attention`).

# %%
rows = []
for name in ("jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b", "mamba2-2.7b", "falcon-mamba-7b"):
    spec = load_model(name)
    at4k, at256k = hybrid.cache_split(spec, 4096), hybrid.cache_split(spec, 262_144)
    has_attention = spec.count("recurrent") < spec.num_hidden_layers
    rows.append({"model": name, "mixers": ", ".join(f"{n} {k}" for k, n in hybrid.mixers(spec).items()),
                 "state": units.format_bytes(at4k["state"]), "KV @4K": units.format_bytes(at4k["kv"]),
                 "KV @256K": units.format_bytes(at256k["kv"]), "total @256K": units.format_bytes(at256k["total"]),
                 "all-attention @256K": units.format_bytes(memory.kv_bytes(hybrid.all_attention(spec), 262_144)) if has_attention else "-"})
print(format_table(rows))

# %% [markdown]
# - **Qwen3-Next 80B-A3B**: 36 Gated DeltaNet + 12 full-attention layers (2 KV heads of 256): 6 GiB at 256K instead of 24.
#   Its delta-rule memories are large, 32 value heads × 128 × 128 in fp32 per layer: with the bf16 convolution windows,
#   the 73.7 MiB of state in the table. But fixed.
# - **RecurrentGemma 2B**: 18 RG-LRU + 8 *local* attention layers (W = 2048, one KV head): nothing grows after 2048 tokens.
#   The whole cache stays at 16 MiB, however long the input.
# - **Mamba-2 2.7B, Falcon-Mamba 7B**: no attention at all: 162 MiB and 19 MiB per sequence, at any length. Per layer,
#   Mamba-2's SSM state has five times the elements of Falcon-Mamba's (80 × 64 × 128 against 8192 × 16, in the table
#   of state tensors above) and keeps them in fp32, not bf16.
#
# On log-log axes: the transformer's line (Mixtral) rises forever; the hybrids rise beside it, lower by their share of
# attention KV (at 256K Jamba ends 8.0× below Mixtral, Qwen3-Next 5.3×, printed below: its 4× above is against its
# own all-attention twin, whose 2 KV heads per layer hold less than Mixtral's 8); the windowed RecurrentGemma flattens
# at 2048 tokens and the pure state-space models are flat from the first token.

# %%
at_256k = {name: hybrid.cache_split(load_model(name), 262_144)["total"] for name in ("jamba-v0.1", "qwen3-next-80b-a3b")}
print(", ".join(f"{name}: {memory.kv_bytes(mixtral, 262_144) / b:.1f}× below Mixtral at 256K" for name, b in at_256k.items()))
fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
draw_state_vs_kv(ax, tokens=262_144)
plt.show()

# %% [markdown]
# ## Try it: model, tokens, batch
#
# The KV of the attention layers, the flat recurrent state (dashed), their total and the all-attention counterfactual
# of one model, on log-log axes so that the state stays visible beside gigabytes of KV: below the point where the KV
# line crosses the state, the state is most of the cache. With batch 64 the state is paid 64 times too: it is per
# sequence, like the KV.

# %% tags=["nbval-ignore-output"]
hybrid_view()

# %% [markdown]
# ## The short context: where a hybrid holds more
#
# The state is paid from the first token. Its all-attention twin (the same depth, every recurrent layer replaced by the
# model's own attention layer, `hybrid.all_attention`) starts from nothing and pays K/V per token in those layers. So
# at short context the hybrid holds **more**, and only from a crossover on does it hold less. Per recurrent layer the
# crossover is its state divided by one attention layer's K/V per token; since every recurrent layer is swapped for
# one attention layer, the whole model crosses at the same length (`short_context.hybrid_crossover_tokens`):

# %%
crossover_rows = []
for name in ("jamba-v0.1", "qwen3-next-80b-a3b", "recurrentgemma-2b"):
    spec = load_model(name)
    c = layer_crossover(spec)
    crossover_rows.append({"model": name, "state per recurrent layer": units.format_bytes(c["state_bytes"]),
                 "K/V per token, one attention layer": units.format_bytes(c["kv_token_bytes"]),
                 "layer crossover (tokens)": c["tokens"], "model crossover (tokens)": hybrid_crossover_tokens(spec)})
print(format_table(crossover_rows))

# %% [markdown]
# Below those lengths (a few dozen tokens for Jamba and RecurrentGemma, about a thousand for Qwen3-Next with its large
# delta-rule memories) the hybrid is the bigger cache; a server full of short chats gains nothing from it in memory.
# On log-log axes, each hybrid (solid) against its twin (dashed):

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.4), layout="constrained")
draw_short_context(ax)
plt.show()

# %% tags=["nbval-ignore-output"]
short_context_view()

# %% [markdown]
# ## Real hybrid decode: measured bytes per layer
#
# Now real models. `kvsim.model.build_model` keeps every cache-relevant dimension of Jamba (8 KV heads × 128,
# $d_{\text{inner}}$ = 8192, $d_{\text{state}}$ = 16, conv 4) and of Qwen3-Next (2 KV heads × 256; Gated DeltaNet
# with 32 value heads of 128 × 128) and reduces what does not change the cache: 2 layers (the first recurrent layer
# and the first attention layer), hidden width 256, a small vocabulary, random weights.
# `growth.decode_layer_bytes` runs `kvsim.decode.generate` on each: a 64-token prompt, then 48 decode steps with
# the caches from `make_caches` (bf16 K/V grown in steps of 32 tokens; each recurrent state in its reference dtype,
# so Qwen3-Next's delta-rule memory in fp32), reading every layer's `nbytes` after every step.

# %%
qwen = load_model("qwen3-next-80b-a3b")
small = {name: build_model(spec, num_layers=2, hidden_size=256, intermediate_size=512, vocab_size=512, seed=0)
         for name, spec in (("jamba-v0.1", jamba), ("qwen3-next-80b-a3b", qwen))}
runs = decode_layer_bytes(small, prompt_tokens=64, new_tokens=48, kv_dtype="bf16", step=32, progress=True)
for name, run in runs.items():
    print(name, "kept layers", small[name].info.source_layers, "->", [type(c).__name__ for c in run.caches])

# %%
jamba_run = runs["jamba-v0.1"]
print(format_table([{"tokens": int(t), "Mamba layer nbytes": int(m[0]), "Mamba formula": int(f[0]),
                     "attention layer nbytes": int(m[1]), "attention formula": int(f[1])}
                    for t, m, f in zip(jamba_run.tokens, jamba_run.measured.T, jamba_run.formula.T) if t % 8 == 0]))

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
for ax, (name, run) in zip(axes, runs.items()):
    plot_layer_bytes(ax, run.tokens, run.measured, run.formula, run.labels,
                     title=f"{name}: 2 of {small[name].info.source_num_layers} layers, bf16")
plt.show()

# %% [markdown]
# The recurrent layers' lines are flat from the prompt on; the attention layers' `KVCache` steps up every 32 tokens.
# Every measured value sits on the formula. Since every layer of a kind is identical, the full models follow:
# Jamba's 28 Mamba states and 4 attention caches, Qwen3-Next's 36 delta-rule memories and 12 attention caches.

# %%
t_end = int(jamba_run.tokens[-1])
rows = []
for name, spec in (("jamba-v0.1", jamba), ("qwen3-next-80b-a3b", qwen)):
    run, n_rec = runs[name], spec.count("recurrent")
    rows.append({"model": name, "layers": f"{n_rec} recurrent + {spec.num_hidden_layers - n_rec} attention",
                 "from measured layers": n_rec * int(run.measured[0, -1]) + (spec.num_hidden_layers - n_rec) * int(run.measured[1, -1]),
                 "kvsim.calc.memory": int(memory.allocated_bytes(spec, t_end, step=32)) + memory.fixed_state_bytes(spec)})
print(format_table(rows))

# %% [markdown]
# ## Summary
# - A recurrent layer keeps a fixed state per sequence; only attention layers grow with the context.
# - Jamba (4 attention layers of 32): 4 GiB of KV at 256K tokens vs Mixtral's 32 GiB, plus 8.31 MiB of Mamba state.
# - Qwen3-Next (12 of 48 layers attend): 6 GiB at 256K instead of 24; RecurrentGemma (8 local layers, W = 2048) stops at 16 MiB;
#   Mamba-2 2.7B and Falcon-Mamba 7B hold 162 MiB and 19 MiB whatever the length.
# - A real hybrid decode measures exactly that: `RecurrentStateCache.nbytes` constant, `KVCache.nbytes` growing in steps.
# - A recurrent layer updates its state in place, token by token; the state is paid from the first token, so below the
#   crossover (tens of tokens for Jamba, about a thousand for Qwen3-Next) a hybrid holds more than its all-attention twin.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/05_hybrids.ipynb`.
#
# **1.** Jamba v0.1 has 32 layers, of which 4 are attention layers with 8 KV heads of 128. How large is its KV cache, in
# GiB, for one sequence of 262,144 tokens in bf16?

# %%
jamba_kv_gib = None  # your turn

# %%
check("05.1", jamba_kv_gib)

# %% [markdown]
# **2.** A Jamba Mamba layer keeps the last $K - 1$ inputs of its convolution ($K$ = `mamba_d_conv` = 4) for each of
# $d_{\text{inner}}$ = `mamba_expand` × `hidden_size` = 8,192 channels, and an SSM state of $d_{\text{inner}} \times
# d_{\text{state}}$ (`mamba_d_state` = 16). How many elements is that?

# %%
mamba_state_elements = None  # your turn

# %%
check("05.2", mamba_state_elements)

# %% [markdown]
# **3.** From how many tokens on does Jamba's all-attention twin hold at least as many bytes as Jamba itself (KV plus
# state)? Use kvsim's bytes for the state (`memory.fixed_state_bytes(jamba)`) and for the K/V per token.

# %%
jamba_crossover = None  # your turn

# %%
check("05.3", jamba_crossover)

# %% [markdown]
# **4. Predict, then measure.** `make_caches(jamba)` builds 4 `KVCache`s and 28 `RecurrentStateCache`s. A
# 1,000-token prompt is written into the attention caches (bf16 K/V, each buffer growing in steps of 256 slots); the
# Mamba states keep their own dtypes. Predict the `nbytes` of all 32 caches together, then run the check: it builds
# them, writes the prompt and compares your number with what they hold.

# %%
predicted_jamba_nbytes = None  # your turn

# %%
check("05.4", predicted_jamba_nbytes)

# %% [markdown]
# The same measurement, shown: the attention caches and the states, read back from the real caches.

# %%
measured = prompt_caches_nbytes("jamba-v0.1", 1000)
print(f"KV {measured['kv_bytes']:,} B + state {measured['state_bytes']:,} B = {measured['nbytes']:,} B")
print(f"memory.allocated_bytes + fixed_state_bytes = "
      f"{memory.allocated_bytes(jamba, 1000) + memory.fixed_state_bytes(jamba):,} B")

# %% [markdown]
# ## Exercises
# 1. At how many tokens does Jamba's KV equal its Mamba state? And Qwen3-Next's? (Use `hybrid.tokens_to_reach`.)
# 2. Serving 64 sequences of 4K tokens, which needs more cache memory: Falcon-Mamba 7B or Llama 3 8B? At what
#    context length do they swap?
# 3. Run `decode_layer_bytes(small, kv_dtype="fp32", step=32)`: which layers' bytes double, which one grows by only a
#    few percent (why? see `layer.state_dtypes()`), and does the Mamba state change with the number of tokens?
# 4. RecurrentGemma's attention is local. How large would its cache be at 256K tokens if those 8 layers were global?

# %%
# Exercise 2 - your answer here: compare hybrid.cache_split(load_model("falcon-mamba-7b"), 4096, batch=64)["total"]
# with memory.kv_bytes(load_model("llama-3-8b"), 4096, batch=64).

# %% [markdown]
# ## Self-test
#
# kvsim against the papers' numbers and the real decode above (prints "self-test passed").

# %% jupyter={"source_hidden": true} tags=["self-test"]
assert memory.kv_bytes(jamba, 262_144) == 4 * 2**30 and memory.kv_bytes(mixtral, 262_144) == 32 * 2**30
assert memory.kv_bytes(hybrid.all_attention(jamba), 262_144) == memory.kv_bytes(mixtral, 262_144)
assert hybrid.mixers(jamba) == {"mamba": 28, "full": 4} and windows.pattern_period(jamba) == "RRRRFRRR"
assert hybrid.mixers(qwen) == {"gated_deltanet": 36, "full": 12}
rgemma = load_model("recurrentgemma-2b")
assert hybrid.mixers(rgemma) == {"rg_lru": 18, "sliding": 8} and windows.largest_window_tokens(rgemma) == 2048
assert hybrid.cache_split(rgemma, 2048)["total"] == hybrid.cache_split(rgemma, 10**6)["total"]
for name in ("mamba2-2.7b", "falcon-mamba-7b"):
    pure = hybrid.cache_split(load_model(name), np.array([1, 10**6]))
    assert (pure["kv"] == 0).all() and pure["total"][0] == pure["total"][1] > 0
assert kvsim_cache_classes(jamba) == {"RecurrentStateCache": 28, "KVCache": 4}
assert kvsim_cache_classes(rgemma) == {"RecurrentStateCache": 18, "RotatingKVCache": 8}
# the real decode: recurrent nbytes constant and equal to state_bytes, KV growing, all equal to the formula
for run, spec in ((runs["jamba-v0.1"], jamba), (runs["qwen3-next-80b-a3b"], qwen)):
    assert (run.measured == run.formula).all()
    assert (run.measured[0] == memory.state_bytes(spec.layers[0])).all()
    assert run.measured[1, -1] > run.measured[1, 0]
    assert [c.offset for c in run.caches] == [t_end, t_end] == [64 + 47] * 2
assert rows[0]["from measured layers"] == rows[0]["kvsim.calc.memory"] and rows[1]["from measured layers"] == rows[1]["kvsim.calc.memory"]
# the short-context crossover: the hybrid holds more just below it, the twin at least as much from it on
for name in ("jamba-v0.1", "qwen3-next-80b-a3b"):
    spec = load_model(name)
    t = hybrid_crossover_tokens(spec)
    twin = hybrid.all_attention(spec)
    assert hybrid.cache_split(spec, t - 1)["total"] > memory.kv_bytes(twin, t - 1)
    assert hybrid.cache_split(spec, t)["total"] <= memory.kv_bytes(twin, t)
    assert t == layer_crossover(spec)["tokens"]
assert measured["kv_bytes"] == memory.allocated_bytes(jamba, 1000)
assert measured["state_bytes"] == memory.fixed_state_bytes(jamba)
print("self-test passed")
