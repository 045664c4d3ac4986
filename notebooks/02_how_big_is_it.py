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
# # 02 · How big is a KV cache?
#
# > **요약** (seed 001 「캐시 크기는 층·key/value head·head 길이에 비례한다」, seed 000 「메모리 증가량」)
# > 토큰 하나의 캐시는 $2\times n_{\text{layers}}\times n_{\text{kv}}\times d_h\times b$ 바이트이고, 요청 전체는 여기에 토큰 수와 배치 크기를 곱한다.
# > Llama 3 8B 는 토큰당 128 KiB, 8K 요청 하나에 1 GiB 이며, 약 12 만 토큰에서 캐시가 BF16 가중치만큼 커진다 (MHA 였다면 약 3 만 토큰).
#
# **You will learn**
# - the formula for the bytes one token adds to the cache, where each symbol lives in a model's `config.json`, and the formula as three lines of Python;
# - why Llama 3 8B needs 128 KiB per token and Llama 3 70B 320 KiB, and what they would need without GQA;
# - how the cache grows with context length and batch, and where it overtakes the weights (8K = 1 GiB, 128K = 16 GiB;
#   the weights at 122,533 tokens, or 30,634 as MHA);
# - how many requests fit on one accelerator once the weights are loaded;
# - what five real engines (kvsim, mlx-lm, transformers dynamic and static, vLLM) hold for the same request, and
#   why they differ on sliding, MLA and recurrent layers.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt

from kvsim.calc import capacity, memory, units
from kvsim.calc.counterfactual import as_mha, attention_variants
from kvsim.calc.engines_all import format_engine_table
from kvsim.calc.explain import explain
from kvsim.calc.hardware import get_accelerator
from kvsim.calc.registry import load_model
from kvsim.calc.tables import format_table
from kvsim.calc.weights import weights_bytes
from kvsim.lessons.exercises import check
from kvsim.lessons.l02_how_big.data import ENGINE_MODELS, engines_all_numbers
from kvsim.lessons.l02_how_big.measure import prompt_caches_nbytes
from kvsim.lessons.l02_how_big.views import capacity_view, draw_engines_all, seed_figure_view
from kvsim.serving.fragmentation import kwon_setup_capacity_tokens

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## One token, every layer, two vectors per KV head
#
# At every decode step each attention layer stores the new token's key and value vectors for each **key/value head**.
# Query heads do not matter here: in grouped-query attention (GQA) several query heads share one KV head,
# so the cache is sized by `num_key_value_heads`, never by `num_attention_heads`.

# %% [markdown]
# ## The formula
#
# $$
# M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b
# \qquad\qquad
# M_{\text{total}} = M_{\text{token}} \times T \times B
# $$
#
# | symbol | meaning | `config.json` field |
# |---|---|---|
# | $2$ | one key and one value vector | – |
# | $n_{\text{layers}}$ | layers that keep a cache | `num_hidden_layers` |
# | $n_{\text{kv}}$ | key/value heads (MHA: = query heads; GQA: groups; MQA: 1) | `num_key_value_heads` |
# | $d_h$ | length of one head's key/value vector | `head_dim`, else `hidden_size / num_attention_heads` |
# | $b$ | bytes per element: bf16/fp16 2, fp8 1, fp32 4 | the KV dtype you choose |
# | $T$ | tokens in the sequence (prompt + answer so far) | – |
# | $B$ | sequences served at once | – |
#
# Models whose layers differ (sliding windows, MLA, recurrent layers) sum the same product layer by layer; later lessons do that.

# %% [markdown]
# ## The formula as code, on Llama 3 8B's config
#
# Here is the whole formula in plain Python, reading the fields straight from Llama 3 8B's `config.json`
# (`load_model(...).config` is that file as a dict), next to what kvsim computes:

# %%
cfg = load_model("llama-3-8b").config
head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
bytes_per_element = 2                                                    # bf16
m_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * bytes_per_element
print(f"M_token = 2 × {cfg['num_hidden_layers']} × {cfg['num_key_value_heads']} × {head_dim} × {bytes_per_element} = {m_token:,} B")
print(f"kvsim:    memory.bytes_per_token = {memory.bytes_per_token(load_model('llama-3-8b'), 'bf16'):,} B")
print(f"M_total at T = 8,192, B = 1: {m_token * 8192 * 1:,} B = {units.format_bytes(m_token * 8192)}")

# %% [markdown]
# kvsim does the same, layer by layer, and can show its work:

# %%
llama8b = load_model("llama-3-8b")
print(explain(llama8b, tokens=8192).text)

# %% [markdown]
# ## Llama 3 8B and 70B, and the MHA they avoided
#
# Both use 8 KV heads. Had they kept one KV head per query head (multi-head attention, MHA),
# the cache would be 4× (8B: 32 query heads) and 8× (70B: 64 query heads) larger.

# %%
rows = []
for name in ("llama-3-8b", "llama-3-70b"):
    spec = load_model(name)
    layer = spec.layers[0]
    rows.append({
        "model": name, "layers": spec.num_hidden_layers, "query heads": spec.num_attention_heads,
        "KV heads": layer.num_key_value_heads, "d_h": layer.head_dim,
        "bytes/token (bf16)": memory.bytes_per_token(spec, "bf16"),
        "= ": units.format_bytes(memory.bytes_per_token(spec, "bf16")),
        "if MHA": units.format_bytes(memory.bytes_per_token(as_mha(spec), "bf16")),
    })
print(format_table(rows))

# %% [markdown]
# ## The cache grows with every token held
#
# The cache is proportional to the number of tokens it holds: context length × concurrent requests.
# One 8K-token request of Llama 3 8B needs 1 GiB; sixteen 8K requests, or one 128K request
# (Llama 3.1 8B has the same shape with a 128K context), need 16 GiB. The weights in bf16 take 8.03 billion
# parameters × 2 bytes = 16.1 GB, which is 14.96 GiB. The cache reaches that size at the **crossover**:

# %%
llama31 = load_model("llama-3.1-8b")
points = [("one 8K request", 8192, 1), ("16 × 8K requests", 8192, 16), ("one 128K request", 131_072, 1)]
print(format_table([{"case": c, "tokens": t, "batch": b, "KV bytes": memory.kv_bytes(llama31, t, b),
                     "= ": units.format_bytes(memory.kv_bytes(llama31, t, b))} for c, t, b in points]))
w = weights_bytes(llama31, "bf16")
cross = capacity.crossover_tokens(llama31)
cross_mha = capacity.crossover_tokens(as_mha(llama31))
print(f"bf16 weights {w:,} B = {w / 2**30:.2f} GiB = {w / 1e9:.1f} GB")
print(f"the cache equals them at {cross:,} tokens; as MHA (4× the bytes per token) at {cross_mha:,}")

# %% [markdown]
# This is the seed's figure, with its marks computed by kvsim: the orange line is Llama 3.1 8B's cache (128 KiB per
# token), the red dashed line the same model as MHA (512 KiB per token), the dotted level its bf16 weights. The dots
# mark 8K = 1 GiB and 128K = 16 GiB, and the two crossovers: 122,533 tokens, and a quarter of that as MHA.
# The seed puts the MHA crossover at "32K" because it reads the weights' 16 GB as 16 GiB, the cache size at 128K, and
# takes a quarter of 128K; in binary units the weights are 14.96 GiB, so the quarter is 30,634 tokens.
#
# Pick another model or KV dtype. fp8 halves every line and pushes each crossover twice as far; Llama 3 70B's weights
# are so large that one request never reaches them within its 128K context.

# %% tags=["nbval-ignore-output"]
seed_figure_view()

# %% [markdown]
# ## How many requests fit on one GPU?
#
# Serving memory is shared: the weights are fixed, and what is left (minus activations and a reserve) holds KV caches.
# Kwon et al. (2023, Figure 1) served a 13B model on an A100 40GB: about 65 % of memory held the weights (26 GB)
# and about 30 % the KV cache. For OPT-13B one token needs 2 × 40 layers × 5120 × 2 B = 800 KiB
# (40 heads of 128, MHA).
#
# How much is "40GB"? The card holds 40 GiB = 42.9 × 10⁹ B (`nvidia-smi` shows 40,960 MiB), which is what kvsim's
# accelerator table stores. 30 % of it is exactly 12 GiB: the KV space Kwon et al.'s Table 1 lists for this setup
# ("12 GB"), which holds 15,728 tokens of 800 KiB (the paper's "15.7K"), the budget lesson 07 simulates. Reading
# "40GB" as 40 × 10⁹ B would give 14,648. Both, side by side:

# %%
opt13b = attention_variants(num_layers=40, num_attention_heads=40, head_dim=128)["MHA"]
per_token = memory.bytes_per_token(opt13b, "fp16")
a100_40gb = {"40 GiB (the card, kvsim's table)": get_accelerator("A100 40GB").memory_bytes,
             "40 × 10⁹ B (decimal GB)": 40 * 10**9}
rows = []
for label, memory_bytes in a100_40gb.items():
    kv_share = 3 * memory_bytes // 10                        # 30 %
    rows.append({"A100 40GB as": label, "30 % for KV (B)": kv_share, "tokens": kv_share // per_token,
                 "2,048-token requests": capacity.max_concurrent_sequences(
                     opt13b, 2048, memory_bytes, utilization=0.95, kv_dtype="fp16",
                     weights_bytes=int(0.65 * memory_bytes))})
print(f"OPT-13B: {per_token:,} B per token (fp16); Kwon et al.'s weights: 13 × 10⁹ parameters × 2 B = "
      f"{13 * 2:,} GB = {13 * 2 / 40:.0%} of 40 GB")
print(f"the card: {get_accelerator('A100 40GB').memory_bytes // 2**20:,} MiB")
print(format_table(rows))
print("lesson 07's simulated KV budget:", f"{kwon_setup_capacity_tokens():,} token slots "
      f"(the paper's {kwon_setup_capacity_tokens() / 1000:.1f}K)")

# %% [markdown]
# Either way only about 15 thousand tokens fit: seven requests of 2,048 tokens.
#
# The same question for the models in kvsim's registry: pick a model, an accelerator, a context length and the
# share of memory the server may use (kvsim's default is 0.9; vLLM 0.33's `gpu_memory_utilization` defaults to 0.92).

# %% tags=["nbval-ignore-output"]
capacity_view()

# %% [markdown]
# ## One request, five engines
#
# The formula counts what a model *must* keep. An engine keeps what its cache classes allocate, and the engines
# differ: kvsim's caches and mlx-lm's grow in steps of slots, transformers' `DynamicCache` holds exactly the tokens fed
# (its `StaticCache` a fixed length), vLLM hands out fixed-size blocks and frees the blocks a sliding layer no longer
# needs only once decoding starts. For one request, a prompt and no decode step yet, here is what each holds
# (`kvsim calc MODEL --engine all --prompt-tokens P` prints the same table):

# %%
engine_tables = engines_all_numbers(ENGINE_MODELS, prompt_tokens=8192, decode_steps=0)
print(format_table([{"model": name, **{c["engine"]: units.format_bytes(c["total_bytes"]) if "total_bytes" in c
                                       else "refused" for c in t["engines"]}} for name, t in engine_tables.items()]))

# %% [markdown]
# A plain GQA model (Llama 3 8B) and an MLA model (DeepSeek-V3) get the same bytes from every engine. The rest differ
# layer kind by layer kind, each bar below split by kind:
# - **sliding** (Gemma 3 27B): vLLM still holds the whole prompt in the 52 sliding layers right after prefill;
#   the others keep only the window (transformers' dynamic layer one token less).
# - **recurrent** (Jamba, Qwen3-Next): transformers keeps the whole convolution window and Mamba-1's state in fp32;
#   vLLM pads each state page up to an attention page, and its attention blocks are larger for these hybrids.
#
# The one-line rule behind every column, per layer kind, as `--engine all` prints it for Gemma 3 and Jamba:

# %%
for name in ("gemma-3-27b", "jamba-v0.1"):
    print(name)
    print(format_engine_table(engine_tables[name]))

# %%
fig, axes = plt.subplots(len(ENGINE_MODELS), 1, figsize=(8.5, 9.5), layout="constrained")
draw_engines_all(axes, prompt_tokens=8192, decode_steps=0)
plt.show()

# %% [markdown]
# ## Summary
# - $M_{\text{token}} = 2 \times n_{\text{layers}} \times n_{\text{kv}} \times d_h \times b$: count KV heads, not query heads.
# - Llama 3 8B: 128 KiB per token, 1 GiB per 8K request, 16 GiB for 16 × 8K or one 128K request; as large as its bf16
#   weights (14.96 GiB) at 122,533 tokens, at 30,634 had it been MHA.
# - GQA with 8 KV heads is what keeps Llama 3 at a quarter (8B) or an eighth (70B) of the MHA cache.
# - On a GPU, what remains after the weights decides how many requests run at once.
#
# ## Your turn
#
# Put your number in place of `None`, then run the `check` cell. Solutions: `notebooks/solutions/02_how_big_is_it.ipynb`.
#
# **1.** Llama 3 70B has `num_hidden_layers` 80, `num_key_value_heads` 8, `num_attention_heads` 64 and `head_dim` 128.
# How many bytes does one token add to its cache in bf16?

# %%
bytes_per_token_70b = None  # your turn

# %%
check("02.1", bytes_per_token_70b)

# %% [markdown]
# **2.** One Llama 3 8B request on an H100 80GB (80 GiB, kvsim's table), with the bf16 weights loaded
# (`weights_bytes(llama8b)` bytes) and a server that may use a share 0.9 of the memory: what is the longest context, in tokens,
# whose cache still fits?

# %%
longest_context = None  # your turn

# %%
check("02.2", longest_context)

# %% [markdown]
# **3.** At how many tokens does one Llama 3 70B request's cache become as large as the **8B** model's bf16 weights?

# %%
tokens_70b_equals_8b_weights = None  # your turn

# %%
check("02.3", tokens_70b_equals_8b_weights)

# %% [markdown]
# **4. Predict, then measure.** `make_caches(load_model("llama-3.2-1b"))` builds one `KVCache` per layer (16 layers,
# 8 KV heads of 64). A 1,000-token prompt is written into every one of them in bf16. Predict the `nbytes` of all
# the caches together (each buffer grows in whole steps of slots; `memory.allocated_slots` says how many), then run
# the check: it builds those caches, writes the prompt and compares your number with what they hold.

# %%
predicted_nbytes = None  # your turn

# %%
check("02.4", predicted_nbytes)

# %% [markdown]
# The same measurement, shown: the real caches' `nbytes`, the tokens they hold (`used_bytes`) and the formula.

# %%
measured = prompt_caches_nbytes("llama-3.2-1b", 1000)
print(f"{measured['layers']} real caches: nbytes {measured['nbytes']:,} B, used_bytes {measured['used_bytes']:,} B")
print(f"memory.allocated_bytes: {memory.allocated_bytes(load_model('llama-3.2-1b'), 1000):,} B")

# %% [markdown]
# ## Exercises
# 1. With `kvsim calc llama-3-70b --tokens 32768 --batch 4 --tp 8 --json` in a terminal, how much KV does each of 8 GPUs hold? Why does `--tp 16` not halve it again?
# 2. Find a registry model whose `head_dim` is not `hidden_size / num_attention_heads` (hint: Gemma 2, gpt-oss, Qwen3-Next). By how much would a calculator that derives `head_dim` be wrong?
# 3. In the figure's view, pick fp8: where do the crossovers move, and why exactly there?

# %%
# Exercise 2 - your answer here: compare load_model("gemma-2-9b").config["head_dim"] with hidden_size / num_attention_heads.

# %% [markdown]
# ## Self-test
#
# kvsim against the seed's numbers, the engines and the measured caches (prints "self-test passed").

# %% jupyter={"source_hidden": true} tags=["self-test"]
assert m_token == memory.bytes_per_token(load_model("llama-3-8b"), "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072
assert memory.bytes_per_token(load_model("llama-3-70b"), "bf16") == 327_680
assert memory.bytes_per_token(as_mha(load_model("llama-3-8b")), "bf16") == 512 * 2**10
assert memory.kv_bytes(llama31, 8192) == 2**30
assert memory.kv_bytes(llama31, 8192, batch=16) == memory.kv_bytes(llama31, 131_072) == 16 * 2**30
assert 2 * memory.kv_bytes(llama31, 8192, kv_dtype="fp8") == memory.kv_bytes(llama31, 8192, kv_dtype="bf16")
assert (cross, cross_mha) == (122_533, 30_634) and cross_mha * 4 in range(cross - 4, cross + 4)
assert memory.kv_bytes(llama31, cross - 1) < w <= memory.kv_bytes(llama31, cross)
assert per_token == 800 * 2**10 and [r["2,048-token requests"] for r in rows] == [7, 7]
assert rows[0]["30 % for KV (B)"] == 12 * 2**30 and rows[0]["tokens"] == kwon_setup_capacity_tokens() == 15_728
engines_8b = {c["engine"]: c["total_bytes"] for c in engine_tables["llama-3-8b"]["engines"]}
assert set(engines_8b.values()) == {memory.kv_bytes(llama8b, 8192)}
gemma_engines = {c["engine"]: c["bytes_by_kind"]["sliding"] for c in engine_tables["gemma-3-27b"]["engines"]}
assert gemma_engines["vllm"] > gemma_engines["kvsim"]
assert measured["nbytes"] == memory.allocated_bytes(load_model("llama-3.2-1b"), 1000) > measured["used_bytes"]
print("self-test passed")
