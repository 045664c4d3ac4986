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
# **You will learn**
# - four ways to store keys and values: one K/V head per query head (MHA), per group of query heads (GQA), one for all (MQA),
#   or one compressed latent per token (MLA);
# - what each costs per token at DeepSeek-V3's attention sizes: 3.81 MiB, 244 KiB, 30.5 KiB and 68.6 KiB;
# - why MLA caches exactly as much as GQA with 2.25 groups;
# - that real MLX caches hold exactly the bytes the formula predicts, for all four, during a real decode;
# - how MLA attends over its latent without ever building per-head keys and values (the "absorbed" path), and that it gives
#   the same answer as building them.

# %%
# NBVAL_IGNORE_OUTPUT
import importlib.metadata as md

import matplotlib.pyplot as plt

from kvsim.calc import memory
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.counterfactual import attention_variants, equivalent_gqa_groups
from kvsim.measure.variant_decode import compare_mla_paths, measure_variants
from kvsim.calc.counterfactual import decodable_variants, variant_rows
from kvsim.widgets.variants import draw_measured_bytes

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## Query heads are free, K/V heads are not
#
# Multi-head attention splits each token's query into $n_h$ heads. The cache, though, only stores **keys and values**,
# so what it costs depends on how many K/V heads there are and how long they are, not on the query heads (lesson 02).
# That leaves room to design: keep many query heads, store fewer or smaller keys and values.
#
# - **MHA** (multi-head attention, the original): every query head has its own key and value head. $n_{\text{kv}} = n_h$.
# - **GQA** (grouped-query attention): query heads are split into $n_g$ groups; each group shares one key and value head. $n_{\text{kv}} = n_g$.
# - **MQA** (multi-query attention): all query heads share a single key and value head. $n_{\text{kv}} = 1$.
# - **MLA** (multi-head latent attention, DeepSeek-V2/V3): each token's keys and values for all heads are compressed
#   into one **latent** vector $c^{KV}$ of length $d_c$, and only the latent is cached, plus a short key $k^R$ of length
#   $d_h^R$ that carries the RoPE position. Each head rebuilds its own key and value from the latent with learned up-projections.

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
# By size alone MLA sits between GQA and MQA. In quality it does not: in DeepSeek-V2's comparison of MoE models (Appendix D.2)
# MLA beat MHA with a cache of 14 % (about 16B parameters) and 4 % (about 250B) of MHA's size, while the GQA and MQA
# papers reported quality close to or a little below MHA.

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

# %%
# NBVAL_IGNORE_OUTPUT
runs = measure_variants(decodable_variants(q_lora_rank=None), num_layers=2, prompt_tokens=16, answer_tokens=8,
                        kv_dtype="bf16", seed=0, progress=True, keep_models=("MLA",))

# %%
print(f"{len(runs['MHA'].spec.layers)} layers run per variant; per layer:")
print(format_table([r.row("bf16") for r in runs.values()]))

# %% [markdown]
# The last answer token is never fed back, so each cache holds 16 + 8 − 1 = 23 tokens. Dividing `used_bytes` by 23 gives
# the bytes one token adds to one layer: exactly the formula's, for all four designs. Times 61 layers, it is the table above.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_measured_bytes(ax, runs, kv_dtype="bf16")
plt.show()

# %% [markdown]
# ## Absorbed vs materialized MLA
#
# How does a head attend over a latent? Head $h$ rebuilds its key from the latent, $k_h = W^{UK}_h c$, and its value,
# $v_h = W^{UV}_h c$. The score of a query is
#
# $$
# q_h^\top k_h = q_h^\top W^{UK}_h c = \bigl(W^{UK\top}_h q_h\bigr)^\top c
# $$
#
# - **Materialized**: build $k_h$ and $v_h$ for every head and every cached token, then run ordinary attention.
#   Simple, and cheap when many tokens are processed at once (prefill).
# - **Absorbed**: fold $W^{UK}_h$ into the query once ($\tilde q_h = W^{UK\top}_h q_h$, length $d_c$), attend over the
#   cached latents directly, and apply $W^{UV}_h$ to the weighted sum of latents at the end. Per-head keys and values are
#   never built: this is how DeepSeek decodes.
#
# Both are the same arithmetic in a different order, so they must give the same answer. The MLA model above decodes the
# same prompt both ways:

# %%
paths = compare_mla_paths(runs["MLA"].model, prompt_tokens=8, answer_tokens=4, seed=0)
print("same tokens:", paths["same tokens"], paths["tokens"])
print("max |logit difference| < 1e-4:", paths["max |logit difference|"] < 1e-4)

# %% [markdown]
# ## Try it: heads and latent size
#
# Choose GQA's number of K/V heads, MLA's latent length `kv_lora_rank` and RoPE key length `qk_rope_head_dim`, and the
# element type. The bars show bytes per token over 61 layers and each design's share of MHA.
# How few K/V heads does GQA need to beat MLA? Which latent would match GQA-8?

# %%
# NBVAL_IGNORE_OUTPUT
from kvsim.widgets.variants import variants_view  # noqa: E402

variants_view()

# %% [markdown]
# ## Check yourself

# %%
rows = {r["variant"]: r for r in variant_rows(variants)}
assert [rows[v]["elements/layer"] for v in ("MHA", "GQA-8", "MQA", "MLA")] == [32_768, 2_048, 256, 576]
assert [rows[v]["× 61 layers"] for v in ("MHA", "GQA-8", "MQA", "MLA")] == [1_998_848, 124_928, 15_616, 35_136]
assert [rows[v]["="] for v in ("MHA", "GQA-8", "MQA", "MLA")] == ["3.81 MiB", "244 KiB", "30.5 KiB", "68.6 KiB"]
assert [rows[v]["% of MHA"] for v in ("MHA", "GQA-8", "MQA", "MLA")] == [100.0, 6.25, 0.78, 1.76]
assert groups == 2.25 and 512 == 4 * 128 and 64 == 128 // 2
# measured on the real caches = formula, per layer and over 61 layers
for name, run in runs.items():
    assert run.tokens_cached == 16 + 8 - 1
    assert run.measured_token_bytes() == [memory.layer_token_bytes(run.spec.layers[0], "bf16")] * 2
    assert run.measured_token_bytes()[0] * 61 == memory.bytes_per_token(variants[name], "bf16")
    assert all(c.nbytes == 256 * run.measured_token_bytes()[0] for c in run.generation.caches)  # 256 slots allocated
assert runs["MLA"].measured_token_bytes()[0] == (512 + 64) * 2
# absorbed and materialized MLA agree
assert paths["same tokens"] and paths["max |logit difference|"] < 1e-4
print("all checks passed")

# %% [markdown]
# ## Summary
# - The cache stores K/V heads, not query heads: MHA $2n_hd_h$, GQA $2n_gd_h$, MQA $2d_h$, MLA $d_c + d_h^R$ elements per layer and token.
# - At DeepSeek-V3's sizes (61 layers, 128 heads of 128, bf16): 3.81 MiB, 244 KiB, 30.5 KiB, 68.6 KiB per token;
#   6.25 %, 0.78 % and 1.76 % of MHA.
# - MLA's 512 + 64 = 576 elements equal GQA with 2.25 groups, yet DeepSeek-V2 reports better quality than MHA.
# - Real caches measured during decode hold exactly those bytes; absorbed and materialized MLA give the same answer.
# - Which term of the size formula each technique (GQA, MLA, quantization, windows, hybrids, paging, FlashAttention)
#   changes is the table of lesson 08.
#
# ## Exercises
# 1. Llama 3 70B has 64 query heads and 8 K/V heads of 128 in 80 layers. Use `attention_variants(num_layers=80, num_attention_heads=64, head_dim=128)`:
#    how large would an MLA cache with DeepSeek's 512 + 64 be, compared with its GQA-8 cache?
# 2. Rerun the real decode with the real query compression, `decodable_variants(q_lora_rank=1536)`. Does any measured byte change? Why not?
# 3. Compare `kvsim compare deepseek-v3 deepseek-v2 deepseek-v2-lite --tokens 32768`. Which fields of their configs make the difference?

# %%
# Exercise 2 - your answer here: runs2 = measure_variants(decodable_variants(q_lora_rank=1536)); print(format_table([r.row() for r in runs2.values()]))
