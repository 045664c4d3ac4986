"""The "your turn" exercises of lessons 01-10, checked against kvsim.

Contract (pure)
- ``EXERCISES`` maps a key such as "02.1" (lesson 02, exercise 1) to an
  :class:`~kvsim.lessons.checking.Exercise`. Every expected value comes from a kvsim function
  (memory, capacity, window_bytes, hybrid, speculation, ...), never from a literal, and every
  derivation spells the same arithmetic with the config numbers plugged in.
- :func:`check` prints the verdict for a learner's answer (a placeholder ``None`` prints what to do);
  :func:`verdict_for` returns it for tests. Neither raises on what a learner types.
- The questions themselves are in the lessons' markdown; ``Exercise.title`` repeats them in short.
"""

from __future__ import annotations

import math

from ..calc import capacity, memory, phases
from ..calc.counterfactual import as_mha, attention_variants, equivalent_gqa_groups
from ..calc.hardware import get_accelerator
from ..calc.registry import load_model
from ..calc.search import first_true
from ..calc.units import DTYPE_BYTES, InputError
from ..calc.weights import param_count, weights_bytes
from .checking import Exercise, Solution, Verdict, verdict
from .l04_windows.data import ring_slot
from .l05_hybrids.data import hybrid_crossover_tokens
from .l08_decode_speed import data as h200
from .l09_speculation import data as speculation
from .l10_engine import data as engine

BF16 = DTYPE_BYTES["bf16"]


def _attn(name: str):
    """(spec, its first attention layer) of a registry model."""
    spec = load_model(name)
    return spec, next(layer for layer in spec.layers if layer.num_key_value_heads)


# ---------------------------------------------------------------- 01 why a KV cache

def _fed_uncached(p=500, a=200):
    from ..calc.tokens_fed import tokens_fed
    value = tokens_fed(p, a, cached=False)
    return Solution(value, f"Σ_(k=1..{a}) ({p} + k − 1) = {a}·{p} + {a}·{a - 1}/2 = {value:,} (tokens_fed)",
                    ((tokens_fed(p, a, cached=True), "that is the count WITH a cache."),
                     (a * p + a * (a + 1) // 2, "step k feeds P + k − 1 positions, not P + k: "
                                                "answer token k is produced at step k, not fed.")))


def _fed_cached(p=500, a=200):
    from ..calc.tokens_fed import tokens_fed
    value = tokens_fed(p, a, cached=True)
    return Solution(value, f"prefill {p} + one token at each of the {a - 1} later steps = {value:,} (tokens_fed)",
                    ((p + a, "the last answer token is never fed back: it is the output of the last step."),
                     (a, "the first step (prefill) feeds the whole prompt.")))


def _toy_cache_bytes(p=100, a=50):
    toy = attention_variants(num_layers=2, num_attention_heads=4, head_dim=32, gqa_groups=2)["GQA-2"]
    per_token = memory.bytes_per_token(toy, "bf16")
    value = per_token * (p + a - 1)
    return Solution(value, f"2 × 2 layers × 2 KV heads × 32 × 2 B = {per_token:,} B per token × ({p} + {a} − 1) "
                           f"tokens = {value:,} B (memory.bytes_per_token)",
                    (((p + a) * per_token, "the cache holds P + A − 1 tokens: the last answer token is never fed."),
                     (2 * value, "2× too large: num_attention_heads (4) in place of num_key_value_heads (2), "
                                 "or float32's 4 bytes in place of bf16's 2."),
                     (value // 2, "the 2 for one key AND one value vector is missing.")))


# ---------------------------------------------------------------- 02 how big

def _bytes_70b():
    spec, layer = _attn("llama-3-70b")
    value = memory.bytes_per_token(spec, "bf16")
    n, kv, d = spec.num_hidden_layers, layer.num_key_value_heads, layer.head_dim
    return Solution(value, f"2 × {n} layers × {kv} KV heads × {d} × {BF16} B = {value:,} B (memory.bytes_per_token)",
                    ((memory.bytes_per_token(as_mha(spec), "bf16"),
                      f"{spec.num_attention_heads // kv}× too large: num_attention_heads ({spec.num_attention_heads}) "
                      f"in place of num_key_value_heads ({kv}), or bits instead of bytes."),
                     (value // 2, "the 2 counts one key AND one value vector."),
                     (value // n, f"that is one layer; the cache has {n}.")))


def _longest_context(model="llama-3-8b", accelerator="H100 80GB", utilization=0.9):
    spec, acc = load_model(model), get_accelerator(accelerator)
    w, per = weights_bytes(spec, "bf16"), memory.bytes_per_token(spec, "bf16")
    value = capacity.max_context_tokens(spec, 1, acc.memory_bytes, utilization)
    gib = acc.memory_bytes // 2**30
    return Solution(value, f"⌊({utilization} × {gib} GiB − {w:,} B of weights) / {per:,} B per token⌋ = {value:,} "
                           "tokens (capacity.max_context_tokens)",
                    ((int(utilization * acc.memory_bytes) // per, "the bf16 weights come off the budget first."),
                     ((acc.memory_bytes - w) // per, f"only {utilization:.0%} of memory is the server's to use."),
                     (int(utilization * gib * 10**9 - w) // per, f"the card holds {gib} GiB (2**30 B each), not GB.")))


def _crossover_70b_vs_8b():
    spec = load_model("llama-3-70b")
    w = weights_bytes(load_model("llama-3-8b"), "bf16")
    value = capacity.crossover_tokens(spec, weights_bytes=w)
    per = memory.bytes_per_token(spec, "bf16")
    return Solution(value, f"⌈{w:,} B / {per:,} B per token⌉ = {value:,} tokens (capacity.crossover_tokens)",
                    ((w // per, "round up: at ⌊…⌋ tokens the cache is still a little smaller than the weights."),
                     (capacity.crossover_tokens(load_model("llama-3-8b")),
                      "that is the 8B model's own crossover; use the 70B's bytes per token.")))


# ---------------------------------------------------------------- 03 MHA GQA MQA MLA

def _mla_70b(kv_lora_rank=512, qk_rope_head_dim=64):
    mla = attention_variants(num_layers=80, num_attention_heads=64, kv_lora_rank=kv_lora_rank,
                             qk_rope_head_dim=qk_rope_head_dim)["MLA"]
    value = memory.bytes_per_token(mla, "bf16")
    return Solution(value, f"80 layers × ({kv_lora_rank} + {qk_rope_head_dim}) × {BF16} B = {value:,} B "
                           "(memory.bytes_per_token)",
                    ((2 * value, "no factor 2: one latent serves both keys and values."),
                     (value // 80, "that is one layer; Llama 3 70B has 80.")))


def _mla_share_of_gqa():
    gqa = memory.bytes_per_token(load_model("llama-3-70b"), "bf16")
    mla = _mla_70b().value
    value = 100 * mla / gqa
    mha = memory.bytes_per_token(as_mha(load_model("llama-3-70b")), "bf16")
    return Solution(value, f"100 × {mla:,} / {gqa:,} = {value:.4g} %",
                    ((100 * mla / mha, "that is the share of the MHA cache; compare with the GQA-8 one."),
                     (mla / gqa, "as a percentage, not a fraction (× 100).")))


def _equivalent_groups(kv_lora_rank=256, qk_rope_head_dim=32, head_dim=128):
    mla = attention_variants(kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim)["MLA"]
    value = equivalent_gqa_groups(mla, head_dim)
    return Solution(value, f"({kv_lora_rank} + {qk_rope_head_dim}) / (2 × {head_dim}) = {value:g} groups "
                           "(counterfactual.equivalent_gqa_groups)",
                    ((2 * value, "a GQA group stores a key AND a value head: 2·n_g·d_h elements."),))


# ---------------------------------------------------------------- 04 windows

def _window_for_budget(model="mistral-7b-v0.1", budget_bytes=256 * 2**20):
    spec, layer = _attn(model)
    per = memory.bytes_per_token(spec, "bf16")
    value = budget_bytes // per
    return Solution(value, f"256 MiB / (2 × {spec.num_hidden_layers} × {layer.num_key_value_heads} × "
                           f"{layer.head_dim} × {BF16} B = {per:,} B per token) = {value:,} tokens",
                    ((2 * value, "the 2 for K and V is missing from the bytes per token."),
                     (value * spec.num_hidden_layers, "every one of the layers holds the window.")))


def _gemma_at(tokens=32_768):
    spec, layer = _attn("gemma-3-27b")
    value = memory.kv_bytes(spec, tokens)
    per = memory.layer_token_bytes(layer, "bf16")
    s, f = spec.count("sliding"), spec.count("full")
    return Solution(value, f"({s} × {layer.sliding_window} + {f} × {tokens:,}) tokens × {per:,} B per layer-token "
                           f"= {value:,} B (memory.kv_bytes)",
                    ((spec.num_hidden_layers * tokens * per, f"sliding layers keep only W = {layer.sliding_window} "
                                                             "tokens, not all of them."),))


def _ring_slot(position=20, window=4, keep=2):
    value = ring_slot(position, window, keep)
    return Solution(value, f"keep + (t − keep) mod W = {keep} + ({position} − {keep}) mod {window} = {value} "
                           "(masks.ring_slot)",
                    ((position % (window + keep), f"the {keep} sinks own slots 0..{keep - 1}; the ring of W = "
                                                  f"{window} slots starts after them."),))


# ---------------------------------------------------------------- 05 hybrids

def _jamba_kv_gib(tokens=262_144):
    spec, layer = _attn("jamba-v0.1")
    value = memory.kv_bytes(spec, tokens) / 2**30
    n_att = spec.num_hidden_layers - spec.count("recurrent")
    return Solution(value, f"{n_att} attention layers × 2 × {layer.num_key_value_heads} × {layer.head_dim} × {BF16} B "
                           f"× {tokens:,} tokens = {value:g} GiB (memory.kv_bytes)",
                    ((value * spec.num_hidden_layers / n_att, "only the attention layers keep K and V."),
                     (value * 2**30 / 1e9, "GiB (2**30 B), not GB.")))


def _mamba_state_elements():
    spec = load_model("jamba-v0.1")
    layer = next(x for x in spec.layers if x.kind == "recurrent")
    cfg = spec.config
    d_inner, k, n = cfg["mamba_expand"] * cfg["hidden_size"], cfg["mamba_d_conv"], cfg["mamba_d_state"]
    value = layer.state_elements
    return Solution(value, f"conv ({k} − 1) × {d_inner:,} + SSM {d_inner:,} × {n} = {value:,} elements "
                           "(LayerSpec.state_elements)",
                    ((k * d_inner + d_inner * n, f"the convolution keeps the last K − 1 = {k - 1} inputs."),
                     (d_inner * n, "the convolution's inputs are part of the state too.")))


def _jamba_crossover():
    spec = load_model("jamba-v0.1")
    value = hybrid_crossover_tokens(spec)
    return Solution(value, f"first T with KV(all-attention Jamba, T) ≥ KV(Jamba, T) + its state = {value:,} tokens "
                           "(short_context.hybrid_crossover_tokens)")


# ---------------------------------------------------------------- 06 quantized

def _q4_bytes(group_size=64):
    spec, layer = _attn("llama-3-8b")
    value = memory.bytes_per_token(spec, memory.parse_kv_dtype("q4", group_size=group_size))
    d, n, kv = layer.head_dim, spec.num_hidden_layers, layer.num_key_value_heads
    data = 2 * n * kv * d * 4 // 8
    return Solution(value, f"2 × {n} × {kv} × ({d} × 4/8 + 2 × {d}/{group_size} × {BF16}) B = {value:,} B",
                    ((data, "the scales and biases (one each per group, bf16) are missing."),
                     (data + (value - data) // 2, "a group stores a scale AND a bias.")))


def _half_of_bf16(recent=256):
    spec = load_model("llama-3-8b")
    dt = memory.parse_kv_dtype("q4", group_size=64, full_precision_tokens=recent)
    # kv_q(T)·2 < kv_bf16(T) is monotone in T once T > R
    hi = first_true(lambda t: 2 * memory.kv_bytes(spec, t, kv_dtype=dt) < memory.kv_bytes(spec, t), 1, 2**20)
    return Solution(hi, f"first T with 2 × kv_bytes(q4, g64, R={recent}) < kv_bytes(bf16) = {hi:,} tokens")


# ---------------------------------------------------------------- 07 paged

def _blocks(tokens=1000, block_size=16):
    value = math.ceil(tokens / block_size)
    return Solution(value, f"⌈{tokens} / {block_size}⌉ = {value} blocks",
                    ((tokens // block_size, "a partly filled last block is still a whole block."),))


def _blocks_in_budget(budget_bytes=20 * 2**30, block_size=16):
    per = memory.bytes_per_token(load_model("llama-3-8b"), "bf16")
    value = budget_bytes // (block_size * per)
    return Solution(value, f"⌊20 GiB / ({block_size} × {per:,} B)⌋ = {value:,} blocks",
                    ((budget_bytes // per, "that counts token slots; a block holds 16 of them."),))


def _mla_per_gpu(tp=8):
    spec = load_model("deepseek-v3")
    value = memory.bytes_per_token(spec, "bf16", tp=tp)
    return Solution(value, f"{spec.num_hidden_layers} layers × (512 + 64) × {BF16} B = {value:,} B on EVERY one of "
                           f"the {tp} GPUs (memory.bytes_per_token(..., tp={tp}))",
                    ((value // tp, "the latent has no heads to split: each GPU keeps all of it."),))


# ---------------------------------------------------------------- 08 decode

def _step_weights(model="llama-3.1-8b"):
    spec = load_model(model)
    count, h = param_count(spec), spec.hidden_size
    value = phases.weights_read_bytes(spec, "bf16")
    return Solution(value, f"({count.active:,} parameters − {count.embedding:,} of the input table + one row of "
                           f"{h:,}) × {BF16} B = {value:,} B (phases.weights_read_bytes)",
                    ((count.active * BF16, "that counts the whole input embedding table; a step looks up one row."),
                     ((count.active - count.embedding) * BF16, f"the step does read one row of the table: the new "
                                                               f"token's embedding, {h:,} × {BF16} B."),
                     (count.active * 4, "bf16 is 2 bytes per weight, and the input table is read one row only.")))


def _floor_ms(model="llama-3.1-8b", accelerator="H100 80GB", tokens=131_072):
    spec, acc = load_model(model), get_accelerator(accelerator)
    w, kv = phases.weights_read_bytes(spec), memory.read_bytes_per_step(spec, tokens)
    bw = acc.memory_bandwidth_bytes_per_s
    value = 1e3 * (w + kv) / bw
    return Solution(value, f"({w:,} B of weights + {kv:,} B of cache) / {bw / 1e12:g} TB/s = {value:.4g} ms "
                           "(speed_floor.speed_floor)",
                    ((1e3 * w / bw, "that is the weights alone; the step reads the whole 128K-token cache too."),
                     (1e3 * kv / bw, "the weights are read at every step as well."),
                     (1e3 * (param_count(spec).active * BF16 + kv) / bw,
                      "the whole input embedding table is not read, one row of it is.")))


def _ridge_batch():
    run = h200.load_run()
    spec = load_model(run.variants[run.batch_sweep["variant"]]["geometry"]["source"])
    balance = run.flops_per_s / run.bytes_per_s
    ridge = phases.ridge_batch(spec, 0, run.bytes_per_s, run.flops_per_s)
    value = math.ceil(ridge)                    # a batch is a whole number of sequences: the first at the ridge
    return Solution(value, f"weights-only decode does 2·B FLOPs per 2-byte weight = B FLOP/B; it reaches the "
                           f"ridge {run.flops_per_s:.4g} / {run.bytes_per_s:.4g} = {balance:.4g} FLOP/B at "
                           f"B = {ridge:.4g} (phases.ridge_batch), so the first whole batch past it is {value}",
                    ((value - 1, f"a batch of {value - 1} still does fewer FLOPs per byte than the ridge "
                                 f"({balance:.4g}): round up, to the first batch at or past it."),
                     (round(ridge, 1), "a batch is a whole number of sequences: round the ridge up."),
                     (2 * value, "a bf16 weight is 2 bytes: 2·B FLOPs per weight is B FLOPs per byte, not 2·B."),
                     (math.ceil(balance / 2), "a multiply-add is 2 FLOPs: B sequences do 2·B FLOPs per weight.")))


def _step_reads_cache(model="llama-3-8b", tokens=1024, batch=4, kv_dtype="fp32"):
    spec = load_model(model)
    held = tokens + 1                                              # the decode step writes its token, then reads
    per_layer = memory.kv_bytes(spec, held, kv_dtype=kv_dtype) // spec.num_hidden_layers   # one layer
    value = batch * per_layer
    row = per_layer // held
    return Solution(value, f"{batch} sequences × {held:,} tokens (the {tokens:,} filled + the step's own) × "
                           f"{row:,} B per token (2 × 8 KV heads × 128 × 4 B, fp32) = {value:,} B "
                           "(memory.kv_bytes of one layer × batch)",
                    ((batch * 1280 * row, "that is the buffer's nbytes: it grows in steps of 256 slots, and the "
                                          "step reads only the rows it holds (used_bytes)."),
                     (batch * tokens * row, "the step writes its own token's K/V first, then attends to it too."),
                     (per_layer, "each of the 4 sequences has its own cache rows."),
                     (value // 2, "the measured layer is float32: 4 bytes per element.")))


# ---------------------------------------------------------------- 09 speculative

def _tokens_per_pass(alpha=0.8, k=4):
    value = float(speculation.expected_tokens_per_pass(alpha, k))
    return Solution(value, f"(1 − {alpha}^{k + 1}) / (1 − {alpha}) = {value:.4f} tokens "
                           "(speculation.expected_tokens_per_pass)",
                    ((alpha * k, "the target's own token comes on top, and a rejection ends the round."),
                     (1 + alpha * k, "acceptances are not independent of position: "
                                     "d_3 counts only if d_1, d_2 passed.")))


def _trimmed(k=5, accepted=2):
    value = k - accepted
    return Solution(value, f"k + 1 − (n + 1) = k − n = {k} − {accepted} = {value}: the verify pass wrote the last "
                           f"token and the {k} drafts; the rows kept are the last token and the {accepted} accepted "
                           "drafts (the target's replacement token is not in the cache: it is fed next round)",
                    ((k - accepted + 1, "that drops the last token's row too: the verify pass fed the last token "
                                        "and the k drafts, and the last token's row stays."),
                     (k - accepted - 1, "the target's replacement token was never written: it is fed next "
                                        "round, so there is no row of it to keep.")))


def _ring_rewind(rewind_tokens=2):
    value = rewind_tokens + 1
    return Solution(value, f"R + 1 = {value} (RotatingKVCache.trimmable_tokens right after a write)",
                    ((rewind_tokens, "one more: the newest token itself can be rewound too."),
                     (1, f"that is a ring without spare slots; this one has R = {rewind_tokens}.")))


def _ex(key, title, unit, hint, solve, rel_tol=None):
    return key, Exercise(key, title, unit, hint, solve, rel_tol)


EXERCISES = dict([
    _ex("01.1", "positions fed without a cache (P = 500, A = 200)", "positions",
        "sum P + k − 1 over the A steps", _fed_uncached),
    _ex("01.2", "positions fed with a cache (P = 500, A = 200)", "positions",
        "prefill, then one token per step", _fed_cached),
    _ex("01.3", "bytes in the toy model's bf16 caches after a 100-token prompt and a 50-token answer", "bytes",
        "2 × layers × KV heads × head_dim × 2 B, times the tokens held", _toy_cache_bytes),
    _ex("02.1", "bytes per token of Llama 3 70B in bf16", "bytes",
        "2 × num_hidden_layers × num_key_value_heads × head_dim × bytes per element", _bytes_70b),
    _ex("02.2", "longest context of one Llama 3 8B request on an H100 80GB", "tokens",
        "(utilization × memory − weights) / bytes per token, rounded down", _longest_context),
    _ex("02.3", "tokens at which one Llama 3 70B request's KV equals the 8B's bf16 weights", "tokens",
        "weights bytes / 70B bytes per token, rounded up", _crossover_70b_vs_8b),
    _ex("03.1", "Llama 3 70B with MLA (512 + 64): bytes per token in bf16", "bytes",
        "layers × (kv_lora_rank + qk_rope_head_dim) × bytes per element", _mla_70b),
    _ex("03.2", "that MLA cache as a share of Llama 3 70B's GQA-8 cache", "%", "100 × MLA / GQA-8", _mla_share_of_gqa),
    _ex("03.3", "GQA groups with the cache of an MLA layer with d_c = 256, d_h^R = 32 (d_h = 128)", "groups",
        "(d_c + d_h^R) / (2 × d_h)", _equivalent_groups),
    _ex("04.1", "largest window W for which a Mistral 7B sequence fits in 256 MiB", "tokens",
        "budget / bytes per token (every layer holds W tokens)", _window_for_budget),
    _ex("04.2", "Gemma 3 27B's KV bytes at 32,768 tokens (bf16)", "bytes",
        "sliding layers hold W tokens, full layers all T", _gemma_at),
    _ex("04.3", "the slot of token 20 in RotatingKVCache(max_size=6, keep=2)", "slot", "keep + (t − keep) mod W",
        _ring_slot),
    _ex("05.1", "Jamba's KV at 262,144 tokens (bf16)", "GiB", "only the attention layers grow", _jamba_kv_gib),
    _ex("05.2", "elements in one Jamba Mamba layer's state", "elements",
        "conv (K − 1) × d_inner plus SSM d_inner × d_state", _mamba_state_elements),
    _ex("05.3", "tokens from which all-attention Jamba holds at least as much as Jamba", "tokens",
        "search T: all-attention KV(T) ≥ Jamba KV(T) + state", _jamba_crossover),
    _ex("06.1", "Llama 3 8B bytes per token at q4, group 64, bf16 scales", "bytes",
        "2 × layers × KV heads × (d_h·bits/8 + 2·(d_h/g)·2) B", _q4_bytes),
    _ex("06.2", "first T at which q4 (g64, R = 256) is below half of bf16 for Llama 3 8B", "tokens",
        "R tokens in bf16, the rest at q4; compare with half the bf16 bytes", _half_of_bf16),
    _ex("07.1", "blocks of 16 for a 1,000-token sequence", "blocks", "round up", _blocks),
    _ex("07.2", "blocks of 16 that a 20 GiB budget holds for Llama 3 8B", "blocks",
        "budget / (block size × bytes per token), rounded down", _blocks_in_budget),
    _ex("07.3", "DeepSeek-V3 KV bytes per token on each GPU at tp = 8", "bytes",
        "which part of an MLA cache can be split over GPUs?", _mla_per_gpu),
    _ex("08.1", "weight bytes one Llama 3.1 8B decode step reads in bf16", "bytes",
        "all parameters but the input embedding table, plus one row of it, × 2 B", _step_weights),
    _ex("08.2", "least time of one Llama 3.1 8B decode step at 131,072 tokens on an H100 80GB", "ms",
        "(weights read + cache read) / memory bandwidth", _floor_ms),
    _ex("08.3", "smallest batch at which weights-only decode of Llama 3 8B is compute-bound on the measured H200",
        "sequences", "FLOPs per byte of a batch of B ≥ machine balance (FLOP/s ÷ bytes/s); B is a whole number",
        _ridge_batch),
    _ex("09.1", "expected tokens per target pass, α = 0.8, k = 4", "tokens", "(1 − α^(k+1)) / (1 − α)",
        _tokens_per_pass),
    _ex("09.2", "tokens trimmed after a round with k = 5 and 2 drafts accepted", "tokens",
        "the verify pass wrote k + 1 rows; keep the last token and the accepted drafts", _trimmed),
    _ex("09.3", "how far RotatingKVCache(8, rewind_tokens=2) can rewind right after a write", "tokens",
        "spare slots plus the newest token", _ring_rewind),
    # lesson 08
    _ex("08.4", "K/V bytes the measured layer's decode step reads: 4 sequences filled with 1,024 tokens, fp32",
        "bytes", "batch × tokens the step attends to × 2 × KV heads × head_dim × 4 B", _step_reads_cache),
])


# ---------------------------------------------------------------- lesson 10: the engine

def _jamba_pool_bytes(sequences=3, tokens=1000, step=256):
    from ..calc.pool_bytes import pool_allocated_bytes
    spec = load_model("jamba-v0.1")
    view = pool_allocated_bytes([(spec, tokens)] * sequences, "bf16", step, "bf16")
    slots = -(-tokens // step) * step
    per_slot = memory.bytes_per_token(spec, "bf16")
    state = memory.fixed_state_bytes(spec, 1, model_dtype="bf16")
    attention = sum(1 for layer in spec.layers if layer.kind != "recurrent")
    return Solution(view["pool"], f"{sequences} × (⌈{tokens}/{step}⌉·{step} = {slots} slots × {per_slot:,} B "
                                  f"({attention} attention layers) + {state:,} B of Mamba state) = {view['pool']:,} B "
                                  "(pool_allocated_bytes)",
                    ((view["kv"], "the Mamba layers' state is in the pool too (kvsim keeps it in the cache list)."),
                     (sequences * (tokens * per_slot + state), f"slots grow in steps of {step}: {slots} are "
                                                               f"allocated, not {tokens}."),
                     (view["pool"] // sequences, "that is one sequence; the pool holds all of them.")))


def _burst_ttft(requests=10, output_tokens=3, max_sequences=4, max_queue=4):
    import numpy as np
    res = engine.burst(requests, output_tokens, max_sequences, max_queue, "wait")
    value = int(np.nanmax(res.ttft_iterations))
    return Solution(value, f"{max_sequences} start at iteration 0; {max_queue} wait; the slots free at iteration "
                           f"{output_tokens}, so the last admitted starts there: TTFT = {output_tokens} + 1 = {value} "
                           f"iterations; {res.rejected_count} answered 503 (admission.simulate_admission)",
                    ((value - 1, "the first token comes at the END of the request's first iteration: + 1."),
                     (1, "the queue holds only the requests the pool cannot take yet; they start when a slot "
                         "frees."),
                     (2 * output_tokens + 1, f"the queue is bounded at {max_queue}: the requests beyond it are "
                                             "rejected, not queued for a third wave.")))


# lesson 10
EXERCISES.update([
    _ex("10.1", "memory_usage_bytes() of a pool of 3 Jamba v0.1 sequences after 1,000 tokens each (bf16, step 256)",
        "bytes", "allocated K/V slots of the attention layers plus each sequence's Mamba state", _jamba_pool_bytes),
    _ex("10.2", "time-to-first-token of the last admitted request: 10 at once, 4 slots, queue 4, 3 tokens each",
        "iterations", "who starts at once, who waits for a slot, who is turned away?", _burst_ttft),
])


def verdict_for(key: str, answer, reveal: bool = False) -> Verdict:
    """The :class:`~kvsim.lessons.checking.Verdict` for exercise ``key`` (e.g. "02.1")."""
    if key not in EXERCISES:
        raise InputError(f"exercise {key!r} is not one of {', '.join(EXERCISES)}")
    return verdict(EXERCISES[key], answer, reveal)


# exercise key -> wrong answers checked so far in this kernel: the second miss shows kvsim's value
_MISSES: dict[str, int] = {}


def check(key: str, answer, reveal: bool = False) -> None:
    """Print whether ``answer`` to exercise ``key`` is right; if not, what is off and the hint.

    kvsim's value and derivation show when the answer is right, from the second wrong answer to the same
    exercise on, or with ``reveal=True``.
    """
    first = verdict_for(key, answer)
    if first.ok is False:
        _MISSES[key] = _MISSES.get(key, 0) + 1
        reveal = reveal or _MISSES[key] >= 2
    print(verdict_for(key, answer, reveal).message if reveal else first.message)
