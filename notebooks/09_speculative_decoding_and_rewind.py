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
# # 09 · Speculative decoding and rewind
#
# > **요약** (seed 000 「투기적 디코딩의 rewind」)
# > 투기적 디코딩은 여러 토큰을 제안하고 target 모델이 한 번에 검증하며, 수락되지 않은 위치 이후의 캐시 상태는 `trim` 으로 되돌린다.
# > sliding window 링은 쓰기 직후 R + 1 토큰(여분 슬롯 R 개와 방금 쓴 토큰 하나)까지만 되돌릴 수 있고, 순환 상태는 되돌릴 수 없어
# > 스냅숏을 복원한 뒤 수락된 토큰을 다시 넣는다.
#
# **You will learn**
# - why a cache must be able to go **back**: speculative decoding writes draft tokens into it, and some are rejected;
# - `trim` on a real `KVCache`: the offset moves back, no memory is freed, and the next token overwrites the stale rows;
# - speculative decoding on real MLX models: a draft proposes $k$ tokens, the target checks them in one pass, the
#   caches are trimmed past the first rejection, and the output is exactly plain greedy decoding; acceptance against $k$;
# - how far a sliding-window ring can rewind, and why a hybrid's recurrent state is snapshotted and restored instead;
# - Gemma 3's decode lookahead (a log of the rows each one-token write overwrites) beside kvsim's spare slots: the
#   memory each keeps, and that both restore what they promise;
# - that a prompt padded for a faster prefill and trimmed back to its true length gives the same answer, why a
#   sliding ring loses real tokens to the pads, and which families seed 000 does not let pad;
# - why the output is exactly the target's for greedy decoding, what sampling needs instead (rejection sampling), and
#   the drafters seed 000 names: a smaller full model, multi-token prediction, prompt lookup.

# %% tags=["nbval-ignore-output"]
import importlib.metadata as md

import matplotlib.pyplot as plt
import mlx.core as mx

from kvsim.cache import RotatingKVCache, make_caches
from kvsim.cache.lookahead import pad_ring_run
from kvsim.calc.padded_prefill import lookahead_rows_per_layer
from kvsim.calc.tables import format_table
from kvsim.decode import generate, prefill, speculative_generate
from kvsim.lessons.exercises import check
from kvsim.lessons.l09_speculation.data import expected_tokens_per_pass, prompt_lookup_draft, round_stages
from kvsim.lessons.l09_speculation.measure import (
    lookahead_cache_bytes,
    padded_prefill_refusal,
    padded_prefill_rows,
    refusal_rows,
    rewind_limits,
    snapshot_restore,
    speculation_sweep,
    trim_walkthrough,
    try_trim,
)
from kvsim.lessons.l09_speculation.views import (
    draw_lookahead_rows,
    draw_padded_mask,
    draw_tokens_per_pass,
    round_view,
    speculation_view,
)
from kvsim.model import build_model, perturbed, toy_spec

print("kvsim", md.version("kvsim"), "| mlx", md.version("mlx"), "| matplotlib", md.version("matplotlib"))

# %% [markdown]
# ## Why guess ahead
#
# Lesson 08 showed that a decode step is paid for in bytes: all the weights and the whole cache are read to produce
# one token. Feeding $k + 1$ tokens in one pass reads the same bytes, so on a memory-bound accelerator it costs about
# as much as one step. Speculative decoding exploits that. A cheap **draft** model proposes $k$ tokens one by one; the
# **target** model runs once over the last token and the $k$ proposals, and at every position computes the token it
# would have picked itself. It keeps the proposals up to the first disagreement, emits its own token there, and the
# round is over. The output is exactly what the target alone would have produced; only the number of target passes
# changes.
#
# The catch is the cache. The verification pass wrote keys and values for all $k + 1$ positions into every layer of
# the target (and the draft wrote its own proposals). Every row from the first rejected proposal on must be taken
# back out.
#
# One round, drawn on the target's cache. Before the round the cache holds $P$ tokens; the last token is known but
# not yet fed. The draft proposes $d_1 \dots d_k$; the target is fed the last token and all $k$ drafts in **one** pass,
# so its cache grows to $P + k + 1$. Draft $d_i$ is accepted when it equals the token the target itself picks after
# $d_{i-1}$; the first mismatch ends the round, and the target's own pick replaces it. With $n$ drafts accepted,
# `trim(k − n)` moves the offset back to $P + n + 1$: the rows beyond it are stale and get overwritten next. Move
# $k$ and $n$ to see other rounds.

# %% tags=["nbval-ignore-output"]
round_view()

# %% [markdown]
# ## The formulas
#
# The verify pass writes $k + 1$ rows: the last token and the $k$ proposals. With $n$ of them accepted, the rows kept
# are the last token and the $n$ accepted proposals, so each cache rewinds $k + 1 - (n + 1) = k - n$ tokens. The
# target's replacement token is not in the cache: like any new last token, it is fed at the start of the next round.
#
# $$
# \text{offset} \leftarrow \text{offset} - (k - n), \qquad \text{nbytes unchanged}, \qquad
# \mathbb{E}[\text{tokens per target pass}] = \frac{1 - \alpha^{k+1}}{1 - \alpha}, \qquad
# \text{speedup} = \frac{1 - \alpha^{k+1}}{(1 - \alpha)(k c + 1)}
# $$
#
# | symbol | meaning | where it comes from |
# |---|---|---|
# | $k$ | draft tokens proposed per round | `num_draft` of `speculative_generate` |
# | $n$ | proposals accepted this round (0 … $k$) | counted during decoding |
# | $\alpha$ | chance the target accepts a proposal, assumed independent (Leviathan et al., 2023) | measured: `acceptance_rate` |
# | $c$ | time of one draft step ÷ time of one target step | the two models' sizes |
# | $W$, $R$ | a ring's window and its extra rewind slots | `sliding_window`; `rewind_tokens` = $k + 1$ |

# %% [markdown]
# ## `trim` in action
#
# A real `KVCache` with one Llama 3 8B layer's geometry (8 KV heads of 128, bf16). Every element of a token's key is
# set to the token's id, so we can read back which token sits in which slot (`|` marks the offset, `.` a slot never
# written). Six tokens are written; the last two are rejected; the target's own token, 42, is written next.

# %%
print(format_table(trim_walkthrough(model="llama-3-8b", dtype="bf16", written=(11, 12, 13, 14, 15, 16),
                                                rejected=2, replacement=(42,))))

# %% [markdown]
# - `trim(2)` only moves the offset from 6 to 4. The buffer keeps its 256 slots (`nbytes` = 256 × 4 KiB = 1 MiB): trimming
#   frees nothing. `used_bytes` (the tokens actually held) drops by two tokens.
# - Tokens 15 and 16 are still in the buffer, but beyond the offset nothing reads them. The next write goes to slot 4
#   and overwrites 15; 16 waits to be overwritten in turn.
# - mlx-lm's `ConcatenateKVCache` gets this wrong: its `trim` lowers the offset but the next update is concatenated
#   *after* the stale rows (5 tokens, `trim(2)`, add 1: offset 6, with the rejected tokens still attended to).
#   kvsim's caches never do that.

# %% [markdown]
# ## Speculative decoding on real models
#
# The target is a small random-weight GQA transformer (`toy_spec("gqa")`). A real draft is a smaller model trained on
# the same data; here each draft is the target with noise added to every weight (`kvsim.model.perturbed`): a little
# noise and it mostly agrees, more and it often does not. The draft that *is* the target accepts everything.
# Each run is checked against plain greedy decoding of the target.

# %%
target = build_model(toy_spec("gqa"), seed=0)
prompt = mx.random.randint(1, target.spec.vocab_size, (12,), key=mx.random.key(3)).tolist()
drafts = {"the target itself": target, "noise 0.05": perturbed(target, 0.05, seed=5),
          "noise 0.2": perturbed(target, 0.2, seed=5)}
print({k: target.spec.config[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                          "head_dim", "vocab_size")}, "prompt:", prompt)

# %% tags=["nbval-ignore-output"]
runs = speculation_sweep(target, drafts, prompt, max_new_tokens=40, ks=(1, 2, 4, 8), progress=True)

# %%
print(format_table([r.row() for r in runs]))

# %% [markdown]
# - Every run produced exactly the greedy answer (`= greedy`), whatever the draft proposed.
# - With a perfect draft each target pass yields $k + 1$ tokens. With a noisy one, **acceptance falls as $k$ grows**:
#   once a proposal is rejected, all later proposals of that round are wasted, so long drafts pay off only when the
#   draft is good.
# - "target positions fed" counts the verification work: the prompt, then $k + 1$ positions per round.
#
# The dashed lines are the independent-acceptance formula with $\alpha$ taken from the $k = 1$ run. Real drafts (and
# these) do not reject independently — some stretches of text are easy, some hard — so the measured curves bend
# differently; the formula is a first estimate. (Even the perfect draft stays below $k + 1$: the last round is cut
# short so that decoding stops at exactly 40 tokens.)

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
draw_tokens_per_pass(ax, runs)
plt.show()

# %% [markdown]
# ## Try it: acceptance, draft cost, draft length
#
# How much faster is it? A round costs $k$ draft steps plus one target pass, $kc + 1$ target-step times, and yields
# $(1 - \alpha^{k+1}) / (1 - \alpha)$ tokens. Move $\alpha$ and $c$ and watch the best $k$ (the star) move: a cheap, good
# draft wants long proposals; an expensive or poor one wants short ones.

# %% tags=["nbval-ignore-output"]
speculation_view()

# %% [markdown]
# ## Exact for greedy decoding; sampling needs rejection sampling
#
# Every run above equals greedy decoding because acceptance compares tokens: the target keeps a draft only if it would
# have picked that very token, and otherwise emits its own. With **sampling** there is no single token the target
# "would have picked", and comparing sampled tokens would change the output distribution. Speculative sampling
# (Leviathan et al., 2023; Chen et al., 2023) keeps it exact instead: with $p$ the target's and $q$ the draft's
# next-token distributions at a position, accept the draft token $x$ with probability $\min(1, p(x)/q(x))$; at the first
# rejection, draw the replacement from $\max(0, p - q)$, renormalized. Then every emitted token is distributed exactly as
# if the target had sampled it alone. Greedy decoding is the special case where $p$ puts all its mass on one token.
# The cache is handled the same either way: trim back past the first rejection. kvsim implements the greedy case.
#
# ## Where drafts come from
#
# Seed 000 lists the round loops a real engine runs: one for prompt lookup and full-model drafters, and one for MTP and
# DFlash drafters. The draft only has to be cheap and often right:
# - **A smaller full model** of the same family and vocabulary (what this lesson's noisy copies stand in for). It has
#   its own KV cache, which is trimmed too.
# - **Multi-token prediction (MTP)**: extra heads or a small module trained with the target to predict the tokens after
#   the next one (DeepSeek-V3 trains one). It reuses the target's hidden state, so drafting costs a fraction of a step.
# - **Prompt lookup**: no model at all. If the last few tokens occurred earlier in the context (code being edited, a
#   document being quoted), propose the tokens that followed them there. Free to compute; right only when text repeats.
#   `prompt_lookup_draft` does exactly this, here on words:

# %%
context = "the cache keeps the keys and values . to rewind the cache keeps".split()
print("context ends with:", context[-2:], "-> proposal:", prompt_lookup_draft(context, num_draft=4, ngram=2))
print("no earlier match:", prompt_lookup_draft("a b c d".split(), num_draft=4, ngram=2))

# %% [markdown]
# ## How far a ring can rewind
#
# A sliding-window layer keeps its last $W$ tokens in a ring of slots (lesson 04). Once the ring has wrapped, the slot
# of the oldest token has been reused, and a rewind must not reach back before it: after rewinding, the next query must
# still find all $W$ keys it is allowed to see. A plain ring of $W$ slots can then rewind only **one** token.
# kvsim's `RotatingKVCache(max_size=W, rewind_tokens=R)` keeps $R$ spare slots, so right after a write it can rewind
# $R + 1$ tokens (the $R$ spare ones and the one just written); `speculative_generate` builds it with $R = k + 1$,
# since its verify pass writes $k + 1$ rows in one update. (The table: $W$ = 8, written one token at a time.)

# %%
print(format_table(rewind_limits(max_size=8, rewind_tokens=(0, 4), offsets=(3, 8, 9, 12, 20))))
ring = RotatingKVCache(8)
for t in range(12):
    ring.update_and_fetch(mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 1, 4)))
print("W=8, R=0, offset 12, trim(3):", try_trim(ring, 3))
print("W=8, R=0, right after, trim(1):", try_trim(ring, 1))

# %% [markdown]
# `trim(n)` rewinds $\min(n, \texttt{trimmable\_tokens})$ tokens and returns that count: never further than the layout
# can rewind exactly. Asked for 3, the wrapped ring rewinds 1 (offset 12 → 11); asked for 1 right after, it rewinds 0:
# that one token was all it could give back, and `trimmable_tokens` stays 0 until the next write. The caller reads the
# count, so it always knows how far the cache really went back.
# With the spare slots, speculative decoding works on a sliding-window model too, and still matches greedy decoding:

# %%
sliding = build_model(toy_spec("sliding"), seed=0)
spec_run = speculative_generate(sliding, perturbed(sliding, 0.1, seed=5), prompt, 30, num_draft=4)
print("sliding_window:", sliding.spec.layers[0].sliding_window, "| prompt", len(prompt), "+ 30 tokens, k = 4")
print("same as greedy:", spec_run.tokens == generate(sliding, prompt, 30, trace=False).tokens,
      "| acceptance", round(spec_run.acceptance_rate, 3), "| target passes", spec_run.rounds)

# %% [markdown]
# ## Decode lookahead: Gemma 3's overwrite log beside spare slots
#
# A server can also guess at a smaller scale: it pipelines decode, starting the next step before the previous one's
# result has been checked (a stop token, a cancelled request), and takes the one-token append back when the guess was
# wrong. Seed 000's engine does this for a model only when it can undo a speculative one-token append exactly
# (`supports_decode_lookahead_rewind()`), and Gemma 3 can because its sliding layers record the rows each decode
# write overwrites. `OverwriteLogRotatingCache` is that design: a ring of exactly $W$ slots that, before each
# one-token write, copies the row about to be overwritten; `undo(n)` puts the last $n$ rows back, and the cache is
# then bit for bit what it was. kvsim's own design keeps spare slots instead: to undo $k$ one-token appends, a ring of
# $W + R$ slots with $R = k - 1$ (the newest token is always trimmable). The two trade memory for copies:
#
# | design | rows per sliding layer | rows copied per decode step | after the undo |
# |---|---|---|---|
# | spare slots, $R = k - 1$ | $W + k - 1$, always | 0 | every key a later query sees is the same; the rewound rows stay masked until overwritten |
# | overwrite log, depth $k$ | $W$, plus $k$ saved rows while a lookahead is pending | 1 | the buffers, offset and window start bit for bit as before |

# %%
fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
draw_lookahead_rows(ax, model="gemma-3-27b", max_k=8)
plt.show()

# %% [markdown]
# Both designs on one real sliding layer of Gemma 3 27B (its window, KV heads and head_dim, bf16): a prompt past the
# window, then $k$ = 3 speculative one-token appends. The log is undone and compared bit for bit with the buffers
# before the appends; the spare-slot ring is trimmed and its next step compared with a ring that never made them:

# %%
lookahead = lookahead_cache_bytes("gemma-3-27b", lookahead_tokens=3, prompt_tokens=2000)
print(format_table([{k: v for k, v in lookahead.items()}]))
print("rows from lookahead_rows_per_layer:", lookahead_rows_per_layer(lookahead["window"], 3))

# %% [markdown]
# ## Hybrids: a state cannot be trimmed
#
# A recurrent layer (Mamba, Gated DeltaNet, …) does not keep one row per token: every token is folded into a
# fixed-size state (lesson 05). There is no row to drop, so `trim` rewinds nothing and returns 0 (the table's
# `trim(3) rewinds 0`: offset and state unchanged). In mlx-lm this state lives in a
# non-trimmable `ArraysCache`, and speculative decoding and prompt-cache reuse are unavailable for hybrid models
# (mlx-lm issue #1446). kvsim's `RecurrentStateCache` offers `snapshot()` before the round and `restore()` after it:
# the state comes back exactly, and the accepted tokens are fed again. A reduced-depth Jamba (Mamba + attention):

# %%
jamba = build_model(toy_spec("jamba"), seed=0)
print(format_table(snapshot_restore(jamba, prompt[:8], extra=(1, 2, 3))))
hybrid_run = speculative_generate(jamba, perturbed(jamba, 0.1, seed=5), prompt, 24, num_draft=3)
plain_fed = len(prompt) - 1 + hybrid_run.proposed + hybrid_run.rounds
print("same as greedy:", hybrid_run.tokens == generate(jamba, prompt, 24, trace=False).tokens,
      "| target positions fed", hybrid_run.target_positions_fed, "of which re-fed after restores",
      hybrid_run.target_positions_fed - plain_fed)

# %% [markdown]
# The price of a restore: the accepted tokens of each rejected round go through the target a second time.

# %% [markdown]
# ## Padded prefill, then trim
#
# Some engines pad a prompt to a multiple of a tile size so the prefill runs on well-shaped matrices, then trim every
# cache back to the true prompt length (seed 000). Causal attention means no real token ever looked at the pads, so
# after the trim the caches hold exactly what an unpadded prefill writes, and the answer is the same. The mask shows
# why: the pads sit at the end, so causality hides them from every real query; only the pads' own rows see them, and
# those rows are thrown away.

# %%
fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
draw_padded_mask(ax, prompt_tokens=6, padded_tokens=8)
plt.show()

# %% [markdown]
# The toy target with this lesson's prompt, unpadded and padded to multiples of 8 and 16:

# %%
print("prompt tokens:", len(prompt))
print(format_table(padded_prefill_rows(target, prompt, pad_multiples=(None, 8, 16), answer_tokens=8)))

# %% [markdown]
# That holds only while every cache can take the pads back. A sliding ring of $W$ slots cannot once the padded
# prompt is longer than $W$: the pads are written into the ring and push the oldest real tokens out before any trim
# runs. A real `RotatingKVCache` with $W$ = 8, a 10-token prompt padded to 16, beside the same prompt unpadded (each
# key holds its position, so the positions held are read back):

# %%
ring_pad = pad_ring_run(window=8, prompt_tokens=10, pad_multiple=16)
print(format_table([{"": "unpadded", "real positions held": list(ring_pad.held_unpadded), "offset": ring_pad.prompt_tokens},
                    {"": f"padded to {ring_pad.padded_tokens}, trim({ring_pad.padded_tokens - ring_pad.prompt_tokens})",
                     "real positions held": list(ring_pad.held_padded), "offset": ring_pad.offset_after}]))
print("real tokens lost to the pads:", list(ring_pad.evicted_real), "| pads trim could take back:", ring_pad.trimmed)

# %% [markdown]
# So a sliding or chunked family either refuses padding or trims its own state model-side (seed 000's
# `LanguageModel::trim_state`, which is how Gemma 3 pads like a dense model). kvsim refuses up front
# (`check_padded_prefill`): a recurrent or chunked layer always, a sliding one when the padded prompt exceeds its
# window. Recurrent layers refuse too: the pads would already be mixed into the state, which no trim can undo.
# Seed 000 names the families whose `supports_padded_prefill()` is false; the reason per layer kind comes from
# `kvsim.calc.padded_prefill`, and the last column is kvsim's own check on the config it ships, where it ships one:

# %%
print(format_table(refusal_rows(prompt_tokens=100, padded_tokens=128)))
print("the toy Jamba:", padded_prefill_refusal(jamba, prompt, pad_multiple=16))

# %% [markdown]
# ## Summary
# - Speculative decoding trades cheap draft steps for fewer target passes; verifying $k + 1$ tokens reads the same bytes
#   as one step, and the output is exactly greedy decoding of the target.
# - Rejected tokens are rewound with `trim`: the offset moves back, memory stays allocated, the next write overwrites
#   the stale rows.
# - Acceptance falls as $k$ grows; the best $k$ depends on how good and how cheap the draft is.
# - A ring can rewind only as far as its spare slots allow ($R + 1$ after a write); a recurrent state cannot be trimmed
#   at all and is snapshotted and restored, at the price of re-feeding the accepted tokens.
# - A decode lookahead is undone either by spare slots ($W + k - 1$ rows, nothing copied) or, as Gemma 3 does, by a log
#   of the rows each write overwrites ($W$ rows, plus $k$ while pending, one row copied per step).
# - Padding a prefill and trimming back gives the same answer for full-attention caches; a ring loses real tokens to
#   pads past its window, and recurrent layers cannot un-mix them: those families refuse, or trim model-side.
# - Greedy verification is exact by construction; sampling stays exact with rejection sampling. Drafts can come from a
#   smaller model, MTP heads or a lookup in the prompt.
#
# ## Your turn
#
# Solutions: `notebooks/solutions/09_speculative_decoding_and_rewind.ipynb`.
#
# **1.** A draft whose proposals the target accepts independently with probability $\alpha$ = 0.8, with $k$ = 4
# proposals per round: how many tokens does one target pass yield on average?

# %%
tokens_per_pass = None  # your turn

# %%
check("09.1", tokens_per_pass)

# %% [markdown]
# **2.** A round proposes $k$ = 5 drafts and the target accepts the first 2. By how many tokens must each cache be trimmed?

# %%
tokens_to_trim = None  # your turn

# %%
check("09.2", tokens_to_trim)

# %% [markdown]
# **3.** A sliding-window layer's `RotatingKVCache(8, rewind_tokens=2)` has wrapped long ago. Right after a one-token
# write, how many tokens can it rewind?

# %%
ring_rewind = None  # your turn

# %%
check("09.3", ring_rewind)

# %% [markdown]
# **4. Predict, then measure.** Gemma 3 27B's sliding layer (its window and the bytes of one row are in the lookahead
# table above, bf16) uses the overwrite log, now with 5 one-token appends pending. How many bytes does the cache hold
# (`nbytes`, its ring and the saved rows)? The check builds that cache and measures it.

# %%
predicted_lookahead_nbytes = None  # your turn

# %%
check("09.4", predicted_lookahead_nbytes)

# %% [markdown]
# Then measure: both designs on the real layer, now with 5 appends.

# %%
print(lookahead_cache_bytes("gemma-3-27b", lookahead_tokens=5, prompt_tokens=2000))

# %% [markdown]
# ## Exercises
# 1. Add a draft with noise 0.1 to the sweep. Where does its acceptance rate at $k = 4$ land between the other two?
# 2. Build a `RotatingKVCache(8, rewind_tokens=2)`, write 20 tokens one at a time and find `trimmable_tokens`. Then
#    write 3 tokens in one update: how far can it rewind now, and why is that enough for speculative decoding with $k = 1$?
# 3. With the view, find $\alpha$ for which proposing any tokens at all is slower than plain decoding when $c = 0.3$.

# %%
# Exercise 2 - your answer here: ring2 = RotatingKVCache(8, rewind_tokens=2); write tokens; print(ring2.trimmable_tokens)

# %% [markdown]
# ## Self-test
#
# kvsim checking itself on the real runs above; the cell prints "self-test passed" when every check holds.

# %% tags=["self-test"]
walk = trim_walkthrough()
assert [r["offset"] for r in walk] == [0, 6, 4, 5]
assert walk[1]["nbytes"] == walk[2]["nbytes"] == walk[3]["nbytes"] == 256 * 2 * 8 * 128 * 2   # trim frees nothing
assert walk[2]["used_bytes"] == 4 * 4096 and walk[3]["used_bytes"] == 5 * 4096
# speculative output = greedy output, always; a perfect draft is always accepted
assert all(r.same_as_greedy for r in runs)
assert all(r.result.acceptance_rate == 1.0 for r in runs if r.draft == "the target itself")
noisy = {r.num_draft: r.result.acceptance_rate for r in runs if r.draft == "noise 0.2"}
assert noisy[8] < noisy[1] < 1.0
assert all(r.result.target_positions_fed == len(prompt) - 1 + r.result.proposed + r.result.rounds for r in runs)
# rings: one token after the wrap, R + 1 with R spare slots; trim(3) on the wrapped ring rewound 1, then trim(1) 0
limits = {(r["rewind_tokens"], r["offset"]): r["trimmable_tokens"] for r in rewind_limits()}
assert limits[0, 20] == 1 and limits[4, 20] == 5
assert ring.offset == 11
assert spec_run.tokens == generate(sliding, prompt, 30, trace=False).tokens
# hybrids: the state is restored exactly; the accepted tokens were fed again
assert [r["state = after prefill"] for r in snapshot_restore(jamba, prompt[:8])] == [True, True, False, True]
assert hybrid_run.tokens == generate(jamba, prompt, 24, trace=False).tokens and hybrid_run.target_positions_fed > plain_fed
# padded prefill: same tokens, trimmed back to the true length
assert all(r["same tokens"] and r["logits within 1e-5"] for r in padded_prefill_rows(target, prompt))
trimmed_caches = make_caches(target.spec)
prefill(target, prompt, trimmed_caches, pad_multiple=16)
assert {c.offset for c in trimmed_caches} == {len(prompt)}
# a ring padded past its window lost real tokens; the seed's seven families all refuse
assert ring_pad.evicted_real and ring_pad.offset_after != ring_pad.prompt_tokens
assert len(refusal_rows()) == 7 and not any("accepted" in r["kvsim's check"] for r in refusal_rows())
# decode lookahead: the log holds W + k rows while pending and is undone bit for bit; spare slots W + k - 1
assert lookahead["overwrite_log_rows"] == lookahead["window"] + 3 and lookahead["spare_slots_rows"] == lookahead["window"] + 2
assert lookahead["overwrite_log_restored"] and lookahead["spare_slots_restored"]
assert float(expected_tokens_per_pass(0.5, 3)) == 1 + 0.5 + 0.25 + 0.125
# the drawn round is the arithmetic of speculative_generate: P -> P + k + 1 -> P + n + 1
r = round_stages(20, 4, 2)
assert (r.offset_after_verify, r.trimmed, r.offset_after, r.emitted) == (25, 2, 23, 3)
assert prompt_lookup_draft(context, 4) == ["the", "keys", "and", "values"]
print("self-test passed")
