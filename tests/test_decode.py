"""Decoding: cached vs no-cache, positions fed, trace bytes vs the calculator, padded prefill,
speculative vs greedy, batched vs alone."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.cache import make_caches
from kvsim.cache.pool import CachePool
from kvsim.calc import memory
from kvsim.decode import (
    batched_generate,
    cache_dtypes,
    generate,
    kv_dtype_spec,
    positions_fed,
    speculative_generate,
)
from kvsim.model import TOY_KINDS, build_model, perturbed, toy_spec

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
DTYPE_NAMES = {mx.float32: "fp32", mx.bfloat16: "bf16", mx.float16: "fp16"}


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_cached_equals_no_cache(toys, kind):
    model = toys[kind]
    cached = generate(model, PROMPT, 12)
    baseline = generate(model, PROMPT, 12, caches=None)
    assert cached.tokens == baseline.tokens
    np.testing.assert_allclose(np.array(cached.logits), np.array(baseline.logits), rtol=1e-5, atol=1e-5)
    assert cached.positions_fed == positions_fed(PROMPT, 12, cached=True) == 11 + 11
    assert baseline.positions_fed == positions_fed(11, 12, cached=False) == sum(11 + k for k in range(12))


@pytest.mark.parametrize("kind", ["gqa", "jamba"])
def test_sampling_is_seeded_and_cache_independent(toys, kind):
    model = toys[kind]
    a = generate(model, PROMPT, 10, temperature=1.0, seed=7)
    b = generate(model, PROMPT, 10, caches=None, temperature=1.0, seed=7)
    c = generate(model, PROMPT, 10, temperature=1.0, seed=8)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens
    assert a.tokens != generate(model, PROMPT, 10).tokens  # sampling is not greedy


def test_positions_fed_reproduces_the_seed_count():
    assert positions_fed(1000, 1000, cached=False) == 1_499_500
    assert positions_fed(1000, 1000, cached=True) == 1_999


def test_trace_counts_positions_and_context(toys):
    g = generate(toys["gqa"], PROMPT, 5)
    assert [s.positions_fed for s in g.trace] == [11, 1, 1, 1, 1]
    assert [s.context_tokens for s in g.trace] == [11, 12, 13, 14, 15]
    assert g.trace[-1].offset == g.caches[0].offset == 15
    assert sum(s.positions_fed for s in g.trace) == g.positions_fed
    assert all(s.seconds > 0 for s in g.trace)


def _expected_bytes(model, layer, context, kvd, state_dtype, step):
    if layer.kind == "recurrent":
        b = memory.state_bytes(layer, model_dtype=state_dtype)  # each tensor as the reference keeps it
        return b, b
    return (memory.layer_kv_bytes(layer, context, kvd, view="allocated", step=step),
            memory.layer_kv_bytes(layer, context, kvd, view="theoretical"))


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_measured_bytes_equal_the_calculator(toys, kind):
    """Every step, every layer: cache nbytes = allocated view, used_bytes = theoretical view."""
    model = toys[kind]
    options = [("fp32", 0), ("bf16", 0), ("fp16", 0), ("q8", 0), ("q4", 3)]
    for kv_dtype, fp_tokens in options:
        if kv_dtype.startswith("q") and "chunked" in model.spec.kinds:
            continue                                      # no quantized chunked layout
        g = generate(model, PROMPT, 14, kv_dtype=kv_dtype, step=16, group_size=32,
                     full_precision_tokens=fp_tokens)
        kvd = kv_dtype_spec(kv_dtype, model, group_size=32, full_precision_tokens=fp_tokens)
        state_dtype = DTYPE_NAMES[cache_dtypes(model, kv_dtype)[1]]
        for s in g.trace:
            for layer, nb, used in zip(model.spec.layers, s.nbytes, s.used_bytes):
                assert (nb, used) == _expected_bytes(model, layer, s.context_tokens, kvd, state_dtype, 16), \
                    (kv_dtype, s.step, layer.kind)


@pytest.mark.parametrize("kind,kv_dtype", [("gqa", "bf16"), ("mla", "fp16"), ("mqa", "q8"), ("jamba", "fp32")])
def test_bytes_per_token_equal_the_calculator(toys, kind, kv_dtype):
    g = generate(toys[kind], PROMPT, 6, kv_dtype=kv_dtype, group_size=32)
    used = [s.cache_used_bytes for s in g.trace]
    per_token = memory.bytes_per_token(toys[kind].spec, kv_dtype_spec(kv_dtype, toys[kind], group_size=32))
    assert per_token > 0 and set(np.diff(used).tolist()) == {per_token}


def test_bad_prompts_are_refused(toys):
    for bad in ([], [1, 128], [-1], ["a"]):
        with pytest.raises(ValueError, match=r"token ids in \[0, 128\)"):
            generate(toys["gqa"], bad, 2)
    assert generate(toys["gqa"], np.array([1, 2, 3]), 2).tokens == generate(toys["gqa"], [1, 2, 3], 2).tokens


def test_fp8_and_unknown_kv_dtypes_are_refused(toys):
    with pytest.raises(ValueError, match="kv_dtype"):
        generate(toys["gqa"], PROMPT, 2, kv_dtype="fp8")
    with pytest.raises(ValueError):
        generate(toys["gqa"], PROMPT, 2, kv_dtype="int2")


@pytest.mark.parametrize("kind", ["mha", "gqa", "mqa", "mla", "sliding", "sliding_global"])
@pytest.mark.parametrize("prompt_len", [3, 5, 8])
def test_padded_prefill_equals_unpadded(toys, kind, prompt_len):
    model, prompt = toys[kind], PROMPT[:prompt_len]
    padded = generate(model, prompt, 8, pad_multiple=8)
    plain = generate(model, prompt, 8)
    assert padded.tokens == plain.tokens
    np.testing.assert_allclose(np.array(padded.logits), np.array(plain.logits), rtol=1e-5, atol=1e-5)
    assert [c.offset for c in padded.caches] == [c.offset for c in plain.caches]


@pytest.mark.parametrize("kind,why", [("jamba", "recurrent"), ("chunked", "chunked"),
                                      ("sliding", "sliding_window")])
def test_padded_prefill_refused_up_front(toys, kind, why):
    model = toys[kind]
    caches = make_caches(model.spec)
    with pytest.raises(ValueError, match=why):
        generate(model, PROMPT, 3, caches=caches, pad_multiple=16)
    assert all(c.offset == 0 for c in caches)          # nothing was run


def test_padded_prefill_refuses_full_precision_window_and_used_caches(toys):
    model = toys["gqa"]
    q = make_caches(model.spec, kv_dtype="q8", group_size=32, full_precision_tokens=4)
    with pytest.raises(ValueError, match="full_precision_tokens"):
        generate(model, PROMPT, 2, caches=q, pad_multiple=16)
    used = make_caches(model.spec)
    model(mx.array([PROMPT[:3]]), used)
    with pytest.raises(ValueError, match="empty caches"):
        generate(model, PROMPT, 2, caches=used, pad_multiple=16)
    assert [c.offset for c in used] == [3, 3] and all(c.offset == 0 for c in q)


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_speculative_output_equals_greedy(toys, kind):
    target = toys[kind]
    greedy = generate(target, PROMPT, 12).tokens
    drafts = {"self": target, "close": perturbed(target, 0.03, seed=5),
              "unrelated": build_model(toy_spec(kind), seed=11)}
    rates = {}
    for name, draft in drafts.items():
        spec = speculative_generate(target, draft, PROMPT, 12, num_draft=3)
        assert spec.tokens == greedy, name
        rates[name] = spec.acceptance_rate
    assert rates["self"] == 1.0
    assert rates["unrelated"] < rates["self"]


def test_speculative_acceptance_rate_and_counts(toys):
    target = toys["gqa"]
    spec = speculative_generate(target, perturbed(target, 0.05, seed=5), PROMPT, 24, num_draft=4)
    assert 0 < spec.acceptance_rate < 1
    assert spec.accepted <= spec.proposed and spec.rounds >= 24 / 5
    # target positions: prefill P-1, then k+1 per round (attention-only model: nothing re-fed)
    assert spec.target_positions_fed == len(PROMPT) - 1 + spec.proposed + spec.rounds


def test_speculative_rejects_mismatched_vocab(toys):
    other = build_model(toy_spec("gqa", vocab_size=64))
    with pytest.raises(ValueError, match="vocab_size"):
        speculative_generate(toys["gqa"], other, PROMPT, 4)


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_batched_equals_alone(toys, kind):
    model = toys[kind]
    prompts = [PROMPT[:3], PROMPT, PROMPT[4:5], PROMPT[2:9]]
    lengths = [6, 9, 4, 1]
    batched = batched_generate(model, prompts, lengths)
    for res, prompt, n in zip(batched, prompts, lengths):
        alone = generate(model, prompt, n)
        assert res.tokens == alone.tokens
        np.testing.assert_allclose(np.array(res.logits), np.array(alone.logits), rtol=1e-5, atol=1e-5)
        assert res.positions_fed == alone.positions_fed


def test_batched_uses_and_releases_the_pool(toys):
    model = toys["jamba"]
    pool = CachePool(model.spec, max_sequences=3)
    pool.allocate(2)                                      # someone else's sequence stays put
    out = batched_generate(model, [PROMPT[:4], PROMPT], 5, pool=pool)
    assert len(out) == 2 and pool.active_ids() == (0,) and pool.next_id == 3
    assert out[0].trace[-1].cache_nbytes > 0
