"""The "your turn" exercises of lessons 00-11, checked against kvsim.

Contract (pure)
- ``EXERCISES`` maps a key such as "02.1" (lesson 02, exercise 1) to an
  :class:`~kvsim.lessons.checking.Exercise`. Every expected value comes from a kvsim function
  (memory, capacity, window_bytes, hybrid, speculation, ...), never from a literal, and every
  derivation spells the same arithmetic with the config numbers plugged in.
- :func:`check` prints the verdict for a learner's answer (a placeholder ``None`` prints what to do);
  :func:`verdict_for` returns it for tests. Neither raises on what a learner types.
- The questions themselves are in the lessons' markdown; ``Exercise.title`` repeats them in short.
- Predict-then-measure items (00.1, 01.4, 09.4): the learner predicts a quantity of a real cache or run, the check
  compares it with the calculator, and the lesson's next cell measures the real cache or run with its ``measure``
  module (this module stays pure); the lesson tests check that the measurement equals the expected value.
"""

from __future__ import annotations

import math

from ..calc import capacity, hybrid, memory, phases
from ..calc.counterfactual import as_mha, attention_variants, equivalent_gqa_groups
from ..calc.hardware import get_accelerator
from ..calc.padded_prefill import lookahead_rows_per_layer
from ..calc.paged_read import layer_block_bytes, read_step_bytes
from ..calc.registry import load_model
from ..calc.search import first_true
from ..calc.units import DEFAULT_STEP, DTYPE_BYTES, InputError
from ..calc.weights import param_count, weights_bytes
from .checking import Exercise, Solution, Verdict, verdict
from .l04_windows.data import ring_slot
from .l05_hybrids.data import hybrid_crossover_tokens
from .l08_decode_speed import data as h200
from .l09_speculation import data as speculation
from .l10_engine import data as engine
from .l11_paged_read import data as paged_read

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


# ---------------------------------------------------------------- predict, then measure (lessons 00/01/09)

def _prompt_cache_nbytes(tokens=300, model="llama-3-8b"):
    spec, layer = _attn(model)
    row = memory.layer_token_bytes(layer, "bf16")
    slots = int(memory.allocated_slots(tokens))
    value = slots * row
    return Solution(value, f"⌈{tokens} / 256⌉ × 256 = {slots} slots × (2 × {layer.num_key_value_heads} × "
                           f"{layer.head_dim} × {BF16} B = {row:,} B) = {value:,} B (memory.allocated_slots; a real "
                           "KVCache's nbytes, measured in the next cell)",
                    ((tokens * row, "that is used_bytes, the tokens held; the buffer grows 256 slots at a time."),
                     (256 * row, f"{tokens} tokens do not fit in one step of 256 slots: the buffer grew twice."),
                     (spec.num_hidden_layers * value, f"that is all {spec.num_hidden_layers} layers; the "
                                                      "question asks for one layer's cache.")))


def _run_cache_nbytes(p=100, a=200):
    toy = attention_variants(num_layers=2, num_attention_heads=4, head_dim=32, gqa_groups=2)["GQA-2"]
    per = memory.bytes_per_token(toy, "float32")
    held = p + a - 1
    slots = int(memory.allocated_slots(held))
    value = slots * per
    return Solution(value, f"{p} + {a} − 1 = {held} tokens held → ⌈{held} / 256⌉ × 256 = {slots} slots × {per:,} B "
                           f"per token (2 layers × 2 × 2 KV heads × 32 × 4 B) = {value:,} B (memory.allocated_slots; "
                           "the real run's nbytes, measured in the next cell)",
                    ((held * per, "that is used_bytes (the tokens held); nbytes counts whole 256-slot steps."),
                     ((p + a) * per, "that counts P + A tokens, and only the tokens held: the last answer token "
                                     "is never fed, and the buffer grows in 256-slot steps."),
                     (value // 2, "half: count both layers, and a key AND a value per token.")))


def _lookahead_nbytes(model="gemma-3-27b", k=5):
    layer = next(x for x in load_model(model).layers if x.kind == "sliding")
    w, row = layer.sliding_window, memory.layer_token_bytes(layer, "bf16")
    rows = lookahead_rows_per_layer(w, k)
    value = rows["overwrite_log"]["peak"] * row
    return Solution(value, f"(W + k) = ({w:,} + {k}) rows × {row:,} B = {value:,} B "
                           "(padded_prefill.lookahead_rows_per_layer; a real OverwriteLogRotatingCache's nbytes, "
                           "measured in the next cell)",
                    ((w * row, f"that is the ring alone; while k = {k} appends are pending it also keeps the "
                               f"{k} rows they overwrote."),
                     (rows["spare_slots"]["peak"] * row, f"that is kvsim's spare-slot ring, W + k − 1 rows; the "
                                                         f"log keeps the W ring rows plus the {k} overwritten ones."),
                     (value // 2, "a row holds a key AND a value.")))
# ---------------------------------------------------------------- 11 how a paged cache is read

def _gather_copy(tokens=1000, block_size=16, heads=2, head_dim=16, dtype_bytes=4):
    pages = -(-tokens // block_size)
    block = layer_block_bytes(block_size, heads, head_dim, head_dim, dtype_bytes)
    value = read_step_bytes("gather", pages, block)["copied_bytes"]
    return Solution(value, f"⌈{tokens}/{block_size}⌉ = {pages} pages × {block_size}·{heads}·({head_dim} + {head_dim})·"
                           f"{dtype_bytes} B = {block:,} B per page = {value:,} B (paged_read.read_step_bytes)",
                    ((2 * value, "that is what the gather path READS (the pool once, the copy once); it copies half."),
                     (tokens * block // block_size, "the copy is of whole pages: the last page is copied whole, "
                                                    "even where it is not full."),
                     (value // 2, "K and V are both copied.")))


def _cascade_share(generated=1):
    step = paged_read.lesson07_step(generated)
    value = 100 * step["cascade_bytes"] / step["dense_bytes"]
    return Solution(value, f"cascade (P + B·S)·tb·layers + extra partial = {step['cascade_bytes']:,} B over dense "
                           f"B·(P + S)·tb·layers = {step['dense_bytes']:,} B, "
                           f"P = {step['prefix_tokens']} shared tokens, "
                           f"S = {step['suffix_tokens']} own (data.lesson07_step)",
                    ((100 * step["cascade_kv_bytes"] / step["dense_bytes"],
                      "add the extra partial cascade writes and reads back (output and log-sum-exp, float32)."),))


def _splits_to_fill(batch=1):
    value = paged_read.splits_to_fill(batch)
    heads = paged_read.geometry()["n_q"]
    return Solution(value, f"⌈{paged_read.H200_SMS} SMs / ({batch} × {heads} query heads)⌉ = {value} "
                           "(data.splits_to_fill)",
                    ((value - 1, f"{value - 1} chunks give {batch * heads * (value - 1)} blocks: fewer than the SMs."),
                     (8, "the smallest power of two is not asked; any whole S may be set.")))

# ---------------------------------------------------------------- predict, then measure (lessons 02/04/05/07)
# The learner predicts what a real cache or pool will hold, then measures it in the lesson (its measure module); the
# checker compares the prediction with the package's formula, which tests/lessons/test_lNN_* check equal to the
# measurement (the checker itself stays pure: no MLX).

def _measured_prompt_caches(model="llama-3.2-1b", tokens=1000):
    spec, layer = _attn(model)
    per = memory.bytes_per_token(spec, "bf16")
    slots = int(memory.allocated_slots(tokens))
    value = int(memory.allocated_bytes(spec, tokens))
    return Solution(value, f"⌈{tokens:,} / 256⌉ × 256 = {slots:,} slots × (2 × {spec.num_hidden_layers} × "
                           f"{layer.num_key_value_heads} × {layer.head_dim} × {BF16} B = {per:,} B) = {value:,} B "
                           "(memory.allocated_bytes; the lesson measures the same nbytes on the real caches)",
                    ((tokens * per, "that is used_bytes, the tokens held; each buffer grows 256 slots at a time."),
                     (value // spec.num_hidden_layers, f"that is one layer; make_caches builds "
                                                       f"{spec.num_hidden_layers}."),
                     (value // 2, "a slot holds a key AND a value.")))


def _measured_ring(model="mistral-7b-v0.1", window=4096, tokens=5000):
    spec, layer = _attn(model)
    row = memory.layer_token_bytes(layer, "bf16")
    slots = int(memory.allocated_slots(tokens, limit=window))
    value = slots * row
    return Solution(value, f"min(⌈{tokens:,} / 256⌉ × 256, W = {window:,}) = {slots:,} slots × (2 × "
                           f"{layer.num_key_value_heads} × {layer.head_dim} × {BF16} B = {row:,} B) = {value:,} B "
                           f"(memory.allocated_slots; the lesson measures a real RotatingKVCache({window}))",
                    ((tokens * row, f"that keeps all {tokens:,} tokens; the ring keeps only the last W = {window:,}."),
                     (int(memory.allocated_slots(tokens)) * row, "that is a KVCache's 256-slot steps; a ring never "
                                                                 "grows past W."),
                     (value // 2, "a slot holds a key AND a value.")))


def _measured_hybrid(model="jamba-v0.1", tokens=1000):
    spec = load_model(model)
    kv, state = int(memory.allocated_bytes(spec, tokens)), memory.fixed_state_bytes(spec)
    n_att, n_rec = spec.num_hidden_layers - spec.count("recurrent"), spec.count("recurrent")
    return Solution(kv + state, f"K/V: {n_att} attention layers × ⌈{tokens:,} / 256⌉ × 256 slots = {kv:,} B "
                                f"(memory.allocated_bytes) + {n_rec} recurrent states = {state:,} B "
                                f"(memory.fixed_state_bytes) = {kv + state:,} B (the lesson measures the real caches)",
                    ((kv, f"that is the K/V alone; the {n_rec} recurrent states are held from the first token."),
                     (state, f"that is the state alone; the {n_att} attention layers hold K/V too."),
                     (memory.kv_bytes(hybrid.all_attention(spec), tokens), "that is the all-attention twin.")))


def _measured_paged(model="llama-3-8b", prompt_tokens=100, decode_steps=50, block_size=16):
    spec, layer = _attn(model)
    tokens = prompt_tokens + decode_steps
    per = memory.layer_token_bytes(layer, "float32")
    blocks = math.ceil(tokens / block_size)
    value = blocks * block_size * per
    return Solution(value, f"⌈{tokens} / {block_size}⌉ = {blocks} blocks × {block_size} tokens × (2 × "
                           f"{layer.num_key_value_heads} × {layer.head_dim} × 4 B = {per:,} B) = {value:,} B (the "
                           "lesson measures a real PagedKVCache)",
                    ((tokens * per, "that counts tokens; the pool hands out whole blocks."),
                     (int(memory.allocated_slots(tokens)) * per, "that is a dense KVCache's 256-slot buffer, not "
                                                                 "the blocks."),
                     (value // 2, "float32 here: 4 B per element, and a key AND a value.")))

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
    _ex("04.3", "the slot of token 20 in RotatingKVCache(max_size=6, keep=2)", "(slot index, from 0)",
        "keep + (t − keep) mod W",
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
    # lessons 00/01/09: predict a real cache's bytes, then the checker measures it
    _ex("00.1", "nbytes of a KVCache() holding one Llama 3 8B layer after a 300-token prompt (bf16)", "bytes",
        "the buffer grows 256 slots at a time; each slot holds a key and a value of 8 heads × 128", _prompt_cache_nbytes),
    _ex("01.4", "nbytes of the toy model's two caches after a 100-token prompt and a 200-token answer", "bytes",
        "tokens held P + A − 1, rounded up to whole 256-slot steps, × bytes per token (float32)", _run_cache_nbytes),
    _ex("09.4", "nbytes of Gemma 3 27B's sliding layer in the overwrite-log design with 5 appends pending",
        "bytes", "W ring rows plus one saved row per pending append; a row is 2 × 16 × 128 × 2 B",
        _lookahead_nbytes),
    # lesson 11
    _ex("11.1", "bytes the gather path copies for the live 1,000-token read (16-token pages, 2 KV heads × 16, fp32)",
        "bytes", "whole pages × block_size × KV heads × (d_k + d_v) × bytes per element", _gather_copy),
    _ex("11.2", "cascade's bytes per decode step as a share of dense for lesson 07's 100 requests (Llama 3 8B)", "%",
        "(P + B·S) tokens + the extra partial, over B·(P + S) tokens", _cascade_share, rel_tol=0.001),
    _ex("11.3", "fewest split-K chunks giving every H200 SM a block at batch 1 (Llama 3 8B)", "chunks",
        "blocks = batch × query heads × S ≥ SMs", _splits_to_fill),
    # lessons 02/04/05/07: predict a real cache's or pool's bytes, then the checker measures it
    _ex("02.4", "nbytes of make_caches(Llama 3.2 1B) after a 1,000-token prompt (bf16)", "bytes",
        "every layer's buffer grows 256 slots at a time; M_token × the slots", _measured_prompt_caches),
    _ex("04.4", "nbytes of a bf16 RotatingKVCache(4096) of Mistral 7B's layer after a 5,000-token prompt", "bytes",
        "the ring never holds more than W slots; a slot is 2 × 8 × 128 × 2 B", _measured_ring),
    _ex("05.4", "nbytes of make_caches(Jamba v0.1) after a 1,000-token prompt (bf16 K/V)", "bytes",
        "4 attention caches in 256-slot steps plus 28 fixed Mamba states", _measured_hybrid),
    _ex("07.4", "nbytes of a PagedKVCache for one Llama 3 8B layer after 100 + 50 tokens, blocks of 16 (float32)",
        "bytes", "whole blocks of 16 tokens; a token is 2 × 8 × 128 × 4 B", _measured_paged),
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


# lessons 03/06 (predict-then-measure: the learner predicts a real cache's nbytes, then measures it)

def _mla_layer():
    spec = load_model("deepseek-v3")
    return spec, next(layer for layer in spec.layers if layer.kind == "mla")


def _latent_nbytes(tokens=300):
    _, layer = _mla_layer()
    value = int(memory.layer_kv_bytes(layer, tokens, "bf16", view="allocated"))
    slots = value // ((layer.kv_lora_rank + layer.qk_rope_head_dim) * BF16)
    per = (layer.kv_lora_rank + layer.qk_rope_head_dim) * BF16
    return Solution(value, f"⌈{tokens}/{DEFAULT_STEP}⌉·{DEFAULT_STEP} = {slots} slots × ({layer.kv_lora_rank} + {layer.qk_rope_head_dim}) "
                           f"× {BF16} B = {value:,} B (memory.layer_kv_bytes, view='allocated')",
                    ((tokens * per, "that is used_bytes: the cache allocates its slots 256 at a time."),
                     (DEFAULT_STEP * per, f"{tokens} tokens do not fit in the first {DEFAULT_STEP} slots: a second step is allocated."),
                     (slots * 2 * 128 * 128 * BF16, "that is MHA's K and V for 128 heads of 128; MLA caches one "
                                                     "latent and one RoPE key for all heads.")))


def _rotated_nbytes(tokens=300, bits=4, group_size=64):
    from ..calc.quant_bytes import SIGN_BYTES, storage_mode_bytes
    _, layer = _attn("llama-3-8b")
    dt = memory.parse_kv_dtype(f"q{bits}", group_size=group_size, scale_dtype="bf16")
    uniform = int(memory.layer_kv_bytes(layer, tokens, dt, view="allocated"))
    signs = (layer.head_dim + layer.v_head_dim) * SIGN_BYTES
    value = uniform + signs
    H, d = layer.num_key_value_heads, layer.head_dim
    slots = uniform // storage_mode_bytes("uniform", 1, H, d, layer.v_head_dim, bits, group_size)["total"]
    used = storage_mode_bytes("rotated", tokens, H, d, layer.v_head_dim, bits, group_size)["total"]
    return Solution(value, f"{slots} slots × {H} heads × 2 × ({d}·{bits}/8 + 2·({d}/{group_size})·2) B = {uniform:,} B "
                           f"+ signs ({d} + {layer.v_head_dim}) × {SIGN_BYTES} B = {value:,} B "
                           "(memory.layer_kv_bytes allocated + quant_bytes.storage_mode_bytes' signs)",
                    ((uniform, "that is QuantizedKVCache's: the rotation adds its ±1 signs, one byte per element "
                               "of d_k + d_v."),
                     (used, "that is the filled slots; nbytes counts the allocated ones (steps of 256)."),
                     (used - signs, "that is the filled slots without the signs; nbytes counts 256-token steps "
                                    "and the rotation's signs.")))


EXERCISES.update(dict([
    _ex("03.4", "nbytes of a DeepSeek-V3 LatentCache (bf16) after a 300-token prefill", "bytes",
        "slots are allocated 256 at a time; each holds kv_lora_rank + qk_rope_head_dim elements", _latent_nbytes),
    _ex("06.3", "nbytes of TurboQuantKVCache(4, 64) after 300 bf16 tokens of one Llama 3 8B layer", "bytes",
        "QuantizedKVCache's allocated bytes, plus the rotation's sign vectors", _rotated_nbytes),
]))


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
