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
# # 03 · MHA, GQA, MQA, MLA
#
# > **요약** (seed 001 「MHA, GQA, MQA, MLA 의 토큰당 캐시 비교」, seed 000 「Matrix-absorbed MLA decode」)
# > 캐시는 query head 가 아니라 key·value head 를 저장하므로, GQA 와 MQA 는 여러 query head 가 key·value head 하나를 함께 읽게 해 캐시를 줄인다.
# > MLA 는 층마다 latent 512 + RoPE key 64 만 저장해 같은 크기 MHA 의 1.76% 이고, 이는 그룹이 2.25 개인 GQA 와 같다.
#
# **You will learn**
# - four ways to store keys and values: one K/V head per query head (MHA), per group of query heads (GQA), one for all (MQA),
#   or one compressed latent per token (MLA), drawn head by head;
# - what each costs per token at DeepSeek-V3's attention sizes: 3.81 MiB, 244 KiB, 30.5 KiB and 68.6 KiB;
# - why MLA caches exactly as much as GQA with 2.25 groups, and why it keeps a separate 64-element RoPE key;
# - that real MLX caches hold exactly the bytes the formula predicts, for all four, during a real decode;
# - how MLA attends over its latent without ever building per-head keys and values (the "absorbed" path), that it gives
#   the same answer as building them, and which of the two is cheaper for a given call (seed 000's `use_absorbed_mla`).

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt
import mlx.core as mx

from kvsim.calc import memory
from kvsim.calc.counterfactual import (
    attention_variants,
    decodable_variants,
    equivalent_gqa_groups,
    variant_rows,
)
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.lessons.exercises import check
from kvsim.cache import make_caches
from kvsim.lessons.l03_attention_variants.data import mla_path_curves
from kvsim.lessons.l03_attention_variants.measure import compare_mla_paths, measure_variants
from kvsim.lessons.l03_attention_variants.plots import plot_mla_path_costs
from kvsim.lessons.l03_attention_variants.views import draw_measured_bytes_linear, head_sharing_view, mla_view

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## Query heads cost the cache nothing; K/V heads are what it stores
#
# Multi-head attention splits each token's query into $n_h$ heads. The cache, though, only stores **keys and values**,
# so its size depends on how many K/V heads there are and how long they are, not on the query heads (lesson 02).
# Query heads still cost weights and arithmetic; they just never enter the cache. That leaves room to design: keep many
# query heads, store fewer or smaller keys and values.
#
# - **MHA** (multi-head attention, the original): every query head has its own key and value head. $n_{\text{kv}} = n_h$.
# - **GQA** (grouped-query attention): query heads are split into $n_g$ groups; each group shares one key and value head. $n_{\text{kv}} = n_g$.
# - **MQA** (multi-query attention): all query heads share a single key and value head. $n_{\text{kv}} = 1$.
# - **MLA** (multi-head latent attention, DeepSeek-V2/V3): each token's keys and values for all heads are compressed
#   into one **latent** vector $c^{KV}$ of length $d_c$, and only the latent is cached, plus a short key $k^R$ of length
#   $d_h^R$ that carries the RoPE position. Each head rebuilds its own key and value from the latent with learned up-projections.
#
# The picture: DeepSeek-V3's 128 query heads, each coloured by the K/V head it reads, for GQA with 8 groups. Below,
# one square per design whose **area** is its bytes per token (61 layers, bf16): 16 times the bytes is 16 times the area.
# Slide `num_key_value_heads` from 128 (MHA: one colour per query head) down to 1 (MQA: one colour for all).

# %% tags=["nbval-ignore-output"]
head_sharing_view()

# %% [markdown]
# ## The formula
#
# Elements one token adds to the cache of one layer, and in bytes over all layers:
#
# $$
# \text{MHA: } 2\,n_h d_h \qquad \text{GQA: } 2\,n_g d_h \qquad \text{MQA: } 2\,d_h \qquad \text{MLA: } d_c + d_h^R
# \qquad\qquad M_{\text{token}} = n_{\text{layers}} \times \text{elements per layer} \times b
# $$
#
# | symbol | meaning | `config.json` field (DeepSeek-V3) |
# |---|---|---|
# | $n_{\text{layers}}$ | layers | `num_hidden_layers` (61) |
# | $n_h$ | query heads | `num_attention_heads` (128) |
# | $n_g$ | GQA groups = K/V heads | `num_key_value_heads` |
# | $d_h$ | length of one head's key and value | `head_dim`; DeepSeek: `qk_nope_head_dim` = `v_head_dim` (128) |
# | $d_c$ | length of the MLA latent | `kv_lora_rank` (512) |
# | $d_h^R$ | length of MLA's RoPE key | `qk_rope_head_dim` (64) |
# | $b$ | bytes per element | bf16: 2 |
#
# To compare like with like, fix DeepSeek-V3's attention sizes and change only the way keys and values are stored:

# %%
ds = load_model("deepseek-v3").config
print({k: ds[k] for k in ("num_hidden_layers", "num_attention_heads", "qk_nope_head_dim", "v_head_dim",
                          "kv_lora_rank", "qk_rope_head_dim")})
variants = attention_variants(num_layers=61, num_attention_heads=128, head_dim=128, gqa_groups=8,
                              kv_lora_rank=512, qk_rope_head_dim=64)
print(format_table(variant_rows(variants, kv_dtype="bf16")))

# %% [markdown]
# GQA with 8 groups keeps $1/16$ of MHA's cache, MQA $1/128$. MLA lands between them: larger than MQA, far smaller than GQA-8.

# %% [markdown]
# ## MLA = GQA with 2.25 groups
#
# DeepSeek-V2 (Table 1) chose $d_c = 4 d_h$ and $d_h^R = d_h / 2$, so MLA caches $d_c + d_h^R = \tfrac{9}{2} d_h$ elements per
# layer. GQA with $n_g$ groups caches $2 n_g d_h$; they are equal at $n_g = 2.25$.

# %%
groups = equivalent_gqa_groups(variants["MLA"], head_dim=128)
print(f"MLA caches {ds['kv_lora_rank']} + {ds['qk_rope_head_dim']} = {ds['kv_lora_rank'] + ds['qk_rope_head_dim']} elements "
      f"per layer = GQA with {groups} groups (2 x {groups} x 128 = {2 * groups * 128:.0f})")

# %% [markdown]
# By size, then, MLA sits between GQA-8 and MQA. Its quality does not follow its size: in DeepSeek-V2's comparison of
# MoE models (Appendix D.2) MLA beat MHA with a cache of 14 % (about 16 billion parameters) and 4 % (about 250
# billion) of MHA's size,
# while the GQA and MQA papers reported quality close to or a little below MHA. A smaller cache need not cost quality.

# %% [markdown]
# ## Inside MLA: a latent for everything, a separate key for position
#
# What one token caches per layer, and what each head rebuilds from it (box widths are vector lengths). The sliders
# change the latent's and the RoPE key's length:

# %% tags=["nbval-ignore-output"]
mla_view()

# %% [markdown]
# **Why a separate RoPE key?** RoPE rotates a query at position $s$ by $R_s$ and a key at position $t$ by $R_t$, and
# $R_s^\top R_t = R_{t-s}$. Suppose MLA rotated the rebuilt key, $k_h = R_t W^{UK}_h c_t$. With $q_h$ the query
# before rotation, the score would be
#
# $$
# (R_s q_h)^\top k_h = (R_s q_h)^\top R_t W^{UK}_h c_t = q_h^\top \, R_{t-s} \, W^{UK}_h \, c_t .
# $$
#
# The rotation $R_{t-s}$ changes with every cached token $t$ and sits **between** the query and $W^{UK}_h$, so
# $W^{UK}_h$ can no longer be folded into the query once for all keys: every head's key would have to be rebuilt for
# every cached token, which is what the latent was meant to avoid. DeepSeek-V2 therefore splits each head's score in two:
#
# $$
# \text{score}_h(s, t) = \underbrace{(W^{UK\top}_h q^C_h)^\top c_t}_{\text{no RoPE: absorbable}}
# \;+\; \underbrace{(R_s q^R_h)^\top (R_t k^R_t)}_{\text{RoPE on } d_h^R = 64 \text{ elements}}
# $$
#
# The first term carries the content and never sees a position; the second carries the position through a small key
# $k^R_t$ that is the same for every head and is rotated **before** it is cached. So the cache holds $c_t$ (512) and
# $R_t k^R_t$ (64): 576 elements.

# %% [markdown]
# ## Real caches, real decode
#
# Now the same four designs as real MLX models. Each keeps the real per-layer geometry (128 query heads of 128; 128, 8
# or 1 K/V heads; or a 512 + 64 latent with DeepSeek-V3's up-projections), but only 2 layers, a residual width of 128, a
# vocabulary of 128 tokens and random weights, so it runs in seconds on a CPU. The MLA model also skips DeepSeek-V3's
# query compression (`q_lora_rank`, as DeepSeek-V2-Lite does): that shapes the query, never the cache (exercise 2).
#
# Each model greedy-decodes a 16-token prompt for 8 tokens; its math runs in float32 and the cache stores keys and values
# in **bf16**, as a server would. Afterwards kvsim reads each layer's cache: `used_bytes` (bytes of the tokens held) and
# `nbytes` (bytes allocated: caches grow in steps of 256 tokens, so 256 slots are reserved).

# %% tags=["nbval-ignore-output"]
runs = measure_variants(decodable_variants(q_lora_rank=None), num_layers=2, prompt_tokens=16, answer_tokens=8,
                        kv_dtype="bf16", seed=0, progress=True, keep_models=("MLA",))

# %%
print(f"{len(runs['MHA'].spec.layers)} layers run per variant; per layer:")
print(format_table([r.row("bf16") for r in runs.values()]))

# %% [markdown]
# The last answer token is never fed back, so each cache holds the 16 prompt tokens and all answer tokens but the last
# (16 + 8 − 1). Dividing `used_bytes` by that count gives the bytes one token adds to one layer: exactly the
# formula's, for all four designs. Times 61 layers, it is the table above. On a linear axis the MQA and MLA bars are slivers beside MHA's: that is their real size.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_measured_bytes_linear(ax, runs, kv_dtype="bf16")
plt.show()

# %% [markdown]
# ## Absorbed vs materialized MLA
#
# How does a head attend over a latent? Head $h$ rebuilds its key from the latent, $k_h = W^{UK}_h c$, and its value,
# $v_h = W^{UV}_h c$. The content part of the score is
#
# $$
# q_h^\top k_h = q_h^\top W^{UK}_h c = \bigl(W^{UK\top}_h q_h\bigr)^\top c
# $$
#
# - **Materialized**: build $k_h$ and $v_h$ for every head and every cached token, then run ordinary attention.
#   Simple, and cheap when many tokens are processed at once (prefill).
# - **Absorbed**: fold $W^{UK}_h$ into the query once ($\tilde q_h = W^{UK\top}_h q_h$, length $d_c$), attend over the
#   cached latents directly, and apply $W^{UV}_h$ to the weighted sum of latents at the end. Per-head keys and values are
#   never built: this is how DeepSeek decodes (seed 000's "matrix-absorbed MLA decode").
#
# Both are the same arithmetic in a different order, so they must give the same answer. The MLA model above decodes the
# same prompt both ways:

# %%
paths = compare_mla_paths(runs["MLA"].model, prompt_tokens=8, answer_tokens=4, seed=0)
print("same tokens:", paths["same tokens"], paths["tokens"])
print(f"max |logit difference| = {paths['max |logit difference|']:.0e}  (largest |logit| {paths['max |logit|']:.2f})")

# %% [markdown]
# The two paths differ only by float32 rounding, far below the logits themselves.
#
# ## Which path, decided per call
#
# Same answer, different cost. Per layer, a call of $L$ query tokens after $C$ cached tokens ($T = C + L$ keys) costs
# (`kvsim.calc.mla_paths.mla_call_costs`, $H$ heads, $r = d_c$, $R = d_h^R$, $N$ = `qk_nope_head_dim`, $V$ = `v_head_dim`):
#
# - **absorbed**: every (query, key) pair works on the latent, $2H(2r + R)$ FLOPs per pair; it reads the latent once,
#   $T(r + R)\,b$ bytes, for all heads;
# - **materialized**: expanding costs $2 T r H (N + V)$ FLOPs once per call, then each pair costs only $2H(N + R + V)$;
#   but it writes and reads per-head keys and values, $2 T H (N + R + V)\,b$ more bytes.
#
# Decode ($L = 1$) cannot pay the expansion back; a long prefill can. Seed 000's engine decides per call with
# `use_absorbed_mla`; kvsim's `use_absorbed_mla` does the same on a roofline (time = max(FLOPs ÷ FLOP/s, bytes ÷ bytes/s))
# of the H200 measured by `benchmarks/bench_roofline.py`, and kvsim's MLA layer takes its path from that function on
# every call (`MLA.choose_path`; `tests/test_mla_paths.py` runs a model through both paths and checks equal outputs).
# At DeepSeek-V3's widths, with the seed's four kinds of call placed on the curves:

# %%
mla = mla_path_curves(cached_tokens=(0, 32_768))
fig, (ax_f, ax_b) = plt.subplots(1, 2, figsize=(10.5, 5.2), layout="constrained")
plot_mla_path_costs(ax_f, ax_b, mla, title="one DeepSeek-V3 MLA layer, one call: absorbed vs materialized "
                                           "(markers filled in the colour of the path chosen)")
plt.show()
for C, x in mla["crossover"].items():
    print(f"after {C:,} cached tokens, materializing is cheaper from L = {x:,} query tokens per call")
print(format_table([{"call": r["label"], "L": r["query_tokens"], "C": r["cached_tokens"],
                     "absorbed µs": round(1e6 * r["absorbed_s"], 1), "materialized µs": round(1e6 * r["materialized_s"], 1),
                     "path": r["path"]} for r in mla["points"]]))

# %% [markdown]
# The absorbed path always moves fewer bytes (right), but past the crossover its per-pair work on the 512-wide latent
# costs more than expanding once (left). So a cold prefill and a 512-token chunk materialize; a $k = 4$ verify block
# (lesson 09) and a decode step absorb. The decision is per call, not per model: the same layer switches as a request
# moves from prefill to decode.
#
# **Split-KV over the latent.** A decode step at batch 1 is one query against a long latent: little parallel work for a
# GPU. Seed 000's `MLXCEL_MLA_SPLIT_KV` cuts the cached latent into chunks, attends to each chunk on its own and merges
# the partial outputs by their log-sum-exp, the same merge as split-K (Flash-Decoding) and cascade attention
# (`kvsim.cache.partials`). kvsim's MLA layer does this with `split_kv = S` on the absorbed path, tested equal to the
# unsplit path.
#
# ## Predict, then measure
#
# **Your turn.** Build DeepSeek-V3's first-layer cache (`make_caches(load_model("deepseek-v3"))[0]`, a `LatentCache`,
# bf16) and prefill 300 tokens. Predict its `nbytes` (allocated bytes: slots grow 256 at a time) before you run it.

# %%
cache_nbytes_prediction = None  # your turn

# %%
check("03.4", cache_nbytes_prediction)

# %% [markdown]
# Now measure it on the real cache; the checker compares the measurement with the same number:

# %%
latent_cache = make_caches(load_model("deepseek-v3"))[0]
latent_cache.update_and_fetch(mx.zeros((1, 1, 300, 512), dtype=mx.bfloat16), mx.zeros((1, 1, 300, 64), dtype=mx.bfloat16))
print(type(latent_cache).__name__, "offset", latent_cache.offset, "nbytes", f"{latent_cache.nbytes:,}")
check("03.4", latent_cache.nbytes)

# %% [markdown]
# ## Summary
# - The cache stores K/V heads, not query heads: MHA $2n_hd_h$, GQA $2n_gd_h$, MQA $2d_h$, MLA $d_c + d_h^R$ elements per layer and token.
# - At DeepSeek-V3's sizes (61 layers, 128 heads of 128, bf16): 3.81 MiB, 244 KiB, 30.5 KiB, 68.6 KiB per token;
#   6.25 %, 0.78 % and 1.76 % of MHA.
# - MLA's 512 + 64 = 576 elements equal GQA with 2.25 groups, yet DeepSeek-V2 reports better quality than MHA.
# - RoPE on the rebuilt keys would block folding $W^{UK}$ into the query; MLA carries position in a separate 64-element key.
# - Real caches measured during decode hold exactly those bytes; absorbed and materialized MLA give the same answer.
# - Absorbed MLA reads less, materialized MLA computes less once a call is long: kvsim, like seed 000, picks per call
#   (decode and verify blocks absorb, long prefills materialize).
# - Which term of the size formula each technique (GQA, MLA, quantization, windows, hybrids, paging, FlashAttention)
#   changes is the table of lesson 08.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/03_mha_gqa_mqa_mla.ipynb`.
#
# **1.** Llama 3 70B has 80 layers, 64 query heads and 8 K/V heads of 128. Had it used MLA with DeepSeek's
# $d_c = 512$ and $d_h^R = 64$, how many bytes would one token add to its cache in bf16?

# %%
mla_bytes_70b = None  # your turn

# %%
check("03.1", mla_bytes_70b)

# %% [markdown]
# **2.** That MLA cache as a percentage of Llama 3 70B's real GQA-8 cache (327,680 B per token)?

# %%
mla_percent_of_gqa = None  # your turn

# %%
check("03.2", mla_percent_of_gqa)

# %% [markdown]
# ## Exercises
# 1. With the head view at 4, 8 and 16 K/V heads, how many query heads read each K/V head? What would go wrong with 96 K/V heads?
# 2. Rerun the real decode with the real query compression, `decodable_variants(q_lora_rank=1536)`. Does any measured byte change? Why not?
# 3. Compare `kvsim compare deepseek-v3 deepseek-v2 deepseek-v2-lite --tokens 32768`. Which fields of their configs make the difference?

# %%
# Exercise 2 - your answer here: runs2 = measure_variants(decodable_variants(q_lora_rank=1536)); print(format_table([r.row() for r in runs2.values()]))

# %% [markdown]
# ## Self-test
#
# kvsim against the seed's table and the real caches above (the cell prints "self-test passed" when everything holds;
# its source is collapsed: click to open it).

# %% jupyter={"source_hidden": true} tags=["self-test"]
rows = {r["variant"]: r for r in variant_rows(variants)}
assert [rows[v]["elements/layer"] for v in ("MHA", "GQA-8", "MQA", "MLA")] == [32_768, 2_048, 256, 576]
assert [rows[v]["× 61 layers"] for v in ("MHA", "GQA-8", "MQA", "MLA")] == [1_998_848, 124_928, 15_616, 35_136]
assert [rows[v]["% of MHA"] for v in ("MHA", "GQA-8", "MQA", "MLA")] == [100.0, 6.25, 0.78, 1.76]
assert groups == 2.25 and 512 == 4 * 128 and 64 == 128 // 2
# measured on the real caches = formula, per layer and over 61 layers
for name, run in runs.items():
    assert run.tokens_cached == 16 + 8 - 1
    assert run.measured_token_bytes() == [memory.layer_token_bytes(run.spec.layers[0], "bf16")] * 2
    assert run.measured_token_bytes()[0] * 61 == memory.bytes_per_token(variants[name], "bf16")
    assert all(c.nbytes == 256 * run.measured_token_bytes()[0] for c in run.generation.caches)  # 256 slots allocated
assert runs["MLA"].measured_token_bytes()[0] == (512 + 64) * 2
# absorbed and materialized MLA agree; the named calls take the paths the prose says
assert paths["same tokens"] and paths["max |logit difference|"] < 1e-4 * paths["max |logit|"]
assert [r["path"] for r in mla["points"]] == ["materialized", "materialized", "absorbed", "absorbed"]
assert latent_cache.nbytes == 512 * (512 + 64) * 2
print("self-test passed")
