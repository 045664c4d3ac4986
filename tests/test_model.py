"""The MLX model: toy and real-geometry builds, attention variants, MLA paths, recurrent state shapes."""

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cache import LatentCache, RecurrentStateCache, make_caches
from kvsim.calc.registry import load_model, model_names
from kvsim.model import (
    TOY_KINDS,
    Rows,
    build_model,
    perturbed,
    reference_mask,
    select_layers,
    toy_spec,
)

TOKENS = mx.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]])


def _split_feed(model, tokens, sizes, caches):
    """Feed ``tokens`` in consecutive chunks of ``sizes`` through ``caches``; logits concatenated."""
    out, start = [], 0
    for n in sizes:
        out.append(model(tokens[:, start:start + n], caches))
        start += n
    return mx.concatenate(out, axis=1)


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_toy_runs_and_is_causal(toys, kind):
    model = toys[kind]
    logits = model(TOKENS)
    assert logits.shape == (1, 20, model.spec.vocab_size)
    # causality: the first 13 positions do not depend on what follows
    assert np.array_equal(np.array(logits[:, :13]), np.array(model(TOKENS[:, :13])))


def test_weights_are_deterministic_in_seed():
    spec = toy_spec("gqa")
    a, b, c = build_model(spec, seed=3), build_model(spec, seed=3), build_model(spec, seed=4)
    assert mx.array_equal(a(TOKENS), b(TOKENS))
    assert not mx.array_equal(a(TOKENS), c(TOKENS))


@pytest.mark.parametrize("kind,variant", [("mha", "MHA"), ("gqa", "GQA"), ("mqa", "MQA")])
def test_head_sharing_variant(toys, kind, variant):
    model = toys[kind]
    attn = model.blocks[0].mixer
    assert attn.variant == variant and attn.n_heads == 4
    caches = make_caches(model.spec)
    model(TOKENS[:, :5], caches)
    keys, values = caches[0].state
    assert keys.shape == (1, attn.n_kv_heads, 5, 32)   # the cache holds KV heads, not query heads


@pytest.mark.parametrize("kind", TOY_KINDS)
@settings(max_examples=6)
@given(sizes=st.lists(st.integers(1, 7), min_size=1, max_size=8))
def test_any_chunking_of_the_sequence_matches_no_cache(toys, kind, sizes):
    """Prefill and decode in arbitrary chunk sizes (multi-token chunks included) = one cache-free pass."""
    total = min(sum(sizes), 20)
    sizes = [s for s in np.diff([0, *np.minimum(np.cumsum(sizes), total)]).tolist() if s]
    model = toys[kind]
    ref = model(TOKENS[:, :total])
    got = _split_feed(model, TOKENS, sizes, make_caches(model.spec))
    np.testing.assert_allclose(np.array(got), np.array(ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cached", [False, True])
def test_mla_absorbed_equals_materialized(toys, cached):
    model = toys["mla"]
    outs = {}
    try:
        for path in ("absorbed", "materialized"):
            model.mla_path = path
            caches = make_caches(model.spec) if cached else None
            outs[path] = _split_feed(model, TOKENS, [7] + [1] * 13, caches) if cached else model(TOKENS)
    finally:
        model.mla_path = "auto"  # the toys are shared by the session
    np.testing.assert_allclose(np.array(outs["absorbed"]), np.array(outs["materialized"]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_dtype", ["q8", "q4"])
def test_mla_paths_agree_on_a_quantized_latent(toys, kv_dtype):
    model, outs = toys["mla"], {}
    try:
        for path in ("absorbed", "materialized"):
            model.mla_path = path
            caches = make_caches(model.spec, kv_dtype=kv_dtype, group_size=32, full_precision_tokens=3)
            outs[path] = _split_feed(model, TOKENS, [7] + [1] * 13, caches)
    finally:
        model.mla_path = "auto"  # the toys are shared by the session
    np.testing.assert_allclose(np.array(outs["absorbed"]), np.array(outs["materialized"]),
                               rtol=1e-4, atol=1e-4)


def test_mla_caches_only_the_latent(toys):
    model = toys["mla"]
    caches = make_caches(model.spec)
    model(TOKENS[:, :9], caches)
    assert isinstance(caches[0], LatentCache)
    assert caches[0].latent.shape == (1, 1, 9, 32) and caches[0].k_pe.shape == (1, 1, 9, 32)


def test_mla_path_is_validated(toys):
    with pytest.raises(ValueError, match="mla_path"):
        toys["mla"].mla_path = "fast"


def test_reference_mask_rules():
    m = np.array(reference_mask(6, 6, window=3))
    assert m[5].tolist() == [False, False, False, True, True, True]
    c = np.array(reference_mask(6, 6, chunk=4))
    assert c[5].tolist() == [False, False, False, False, True, True]
    assert not np.triu(np.array(reference_mask(4, 4)), 1).any()


def test_llama4_toy_has_nope_global_layer(toys):
    model = toys["chunked"]
    kinds = [(b.layer.kind, b.layer.use_rope, b.mixer.rope_dims) for b in model.blocks]
    assert kinds == [("chunked", True, 32), ("full", False, 0)]


# ---------------------------------------------------------------- real geometry


@pytest.mark.parametrize("name", model_names())
def test_select_layers_keeps_every_kind(name):
    spec = load_model(name)
    distinct = set(spec.layers)
    idx = select_layers(spec, max(2, len(distinct)))
    assert set(spec.layers[i] for i in idx) == distinct
    assert list(idx) == sorted(idx)


def test_select_layers_rejects_too_few():
    spec = load_model("jamba-v0.1")
    with pytest.raises(ValueError, match=r"num_layers must be an integer in \[2, 32\]"):
        select_layers(spec, 1)


@pytest.mark.parametrize("name,hidden", [("llama-3.2-1b", None), ("deepseek-v2-lite", 256),
                                         ("llama-4-scout", 256), ("qwen3-next-80b-a3b", 256),
                                         ("recurrentgemma-2b", 256), ("mamba2-2.7b", 256),
                                         ("gemma-3-4b", 256), ("jamba-v0.1", 256)])
def test_real_geometry_keeps_cache_dimensions(name, hidden):
    spec = load_model(name)
    n = max(2, len(set(spec.layers)))
    model = build_model(spec, num_layers=n, vocab_size=64, intermediate_size=64, hidden_size=hidden)
    assert set(model.spec.layers) == set(spec.layers)          # identical LayerSpecs, only fewer
    caches = make_caches(model.spec)
    tokens = mx.array([[1, 2, 3, 4, 5]])
    cached = _split_feed(model, tokens, [3, 1, 1], caches)
    np.testing.assert_allclose(np.array(cached), np.array(model(tokens)), rtol=1e-4, atol=1e-4)
    for layer, cache in zip(model.spec.layers, caches):
        if layer.kind == "recurrent":
            assert isinstance(cache, RecurrentStateCache)
            for state_name, shape in layer.state_shapes:
                assert cache[state_name].shape == (1, *shape)
        elif layer.kind == "mla":
            assert cache.latent.shape == (1, 1, 5, layer.kv_lora_rank)
            assert cache.k_pe.shape == (1, 1, 5, layer.qk_rope_head_dim)
        else:
            keys, values = cache.state
            assert keys.shape[1] == layer.num_key_value_heads and keys.shape[3] == layer.head_dim
    attn = [b.mixer for b in model.blocks if b.layer.has_kv_heads]
    for a in attn:
        assert a.n_heads == spec.num_attention_heads


def test_real_mla_keeps_deepseek_ranks():
    model = build_model(load_model("deepseek-v2-lite"), num_layers=2, vocab_size=64,
                        intermediate_size=64, hidden_size=128)
    mla = model.blocks[0].mixer
    assert (mla.n_heads, mla.kv_lora_rank, mla.rope_dim, mla.nope_dim, mla.v_head_dim,
            mla.q_lora_rank) == (16, 512, 64, 128, 128, 0)


@pytest.mark.parametrize("kind", TOY_KINDS)
def test_the_model_reads_typed_fields_never_the_raw_config(toys, kind):
    bare = build_model(replace(toy_spec(kind), config={}), seed=0)
    assert mx.array_equal(bare(TOKENS), toys[kind](TOKENS))


def test_typed_fields_reach_the_layers():
    model = build_model(toy_spec("gqa", rope_theta=500000, rms_norm_eps=1e-5, partial_rotary_factor=0.5))
    attn = model.blocks[0].mixer
    assert (attn.rope_base, attn.rope_dims, model.blocks[0].eps) == (500000.0, 16, 1e-5)
    mla = build_model(toy_spec("mla", q_lora_rank=None)).blocks[0].mixer
    assert (mla.q_lora_rank, mla.nope_dim, mla.v_head_dim) == (0, 32, 32) and not hasattr(mla, "wq_a")
    assert build_model(toy_spec("mamba", time_step_rank=3)).blocks[0].mixer.dt_rank == 3
    assert build_model(toy_spec("mamba")).blocks[0].mixer.dt_rank == 4  # auto: ceil(64 / 16)


def test_mla_without_its_widths_is_an_error():
    spec = replace(toy_spec("mla"), qk_nope_head_dim=0)
    with pytest.raises(ValueError, match="qk_nope_head_dim"):
        build_model(spec)


def test_build_model_errors():
    spec = toy_spec("gqa")
    with pytest.raises(ValueError, match="dtype"):
        build_model(spec, dtype="int8")
    with pytest.raises(ValueError, match="vocab_size"):
        build_model(spec, vocab_size=-3)
    with pytest.raises(ValueError, match="kind"):
        toy_spec("rwkv")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_models_run(dtype):
    model = build_model(toy_spec("jamba"), dtype=dtype)
    caches = make_caches(model.spec, dtype=model.dtype)
    logits = _split_feed(model, TOKENS, [8, 1, 1], caches)
    assert logits.dtype == model.dtype and bool(mx.isfinite(logits).all())
    ref = build_model(toy_spec("jamba"))(TOKENS[:, :10])
    assert np.abs(np.array(logits.astype(mx.float32)) - np.array(ref)).max() < 0.5


def test_perturbed_zero_is_a_copy_and_noise_changes_logits(toys):
    model = toys["gqa"]
    assert mx.array_equal(perturbed(model, 0.0)(TOKENS), model(TOKENS))
    assert not mx.array_equal(perturbed(model, 0.05)(TOKENS), model(TOKENS))


def test_rows_must_match_the_batch(toys):
    model = toys["gqa"]
    rows = [Rows(make_caches(model.spec)[i:i + 1]) for i in range(2)]
    with pytest.raises(ValueError, match="Rows holds 1 caches but the batch has 2 rows"):
        model(mx.array([[1], [2]]), rows)


def test_caches_must_cover_every_layer(toys):
    with pytest.raises(ValueError, match="one entry per layer"):
        toys["gqa"](TOKENS, make_caches(toys["gqa"].spec)[:1])


def test_a_layer_with_attention_and_a_state_is_refused():
    with pytest.raises(ValueError, match="attention beside a mamba2 mixer"):
        build_model(load_model("falcon-h1-0.5b"), num_layers=1, vocab_size=16, hidden_size=64,
                    intermediate_size=64)


@pytest.mark.parametrize("dtype, atol", [(mx.float32, 1e-5), (mx.bfloat16, 3e-2)])
@pytest.mark.parametrize("queries", [1, 3])
def test_mla_fused_absorbed_equals_the_explicit_matmuls(toys, dtype, atol, queries):
    mixer = next(b.mixer for b in toys["mla"].blocks if b.mixer.__class__.__name__ == "MLA")
    H, r, R, nope, T = mixer.n_heads, mixer.kv_lora_rank, mixer.rope_dim, mixer.nope_dim, 17
    keys = mx.random.split(mx.random.key(7), 4)
    latent, k_pe, q_nope, q_pe = (mx.random.normal(s, key=k).astype(dtype) for s, k in
                                  zip([(2, 1, T, r), (2, 1, T, R), (2, H, queries, nope), (2, H, queries, R)], keys))
    mask = None if queries == 1 else reference_mask(queries, T, T - queries)
    parts = [(latent, k_pe, None)]
    fused = mixer.absorbed(q_nope, q_pe, parts, mask)
    explicit = mixer.absorbed_explicit(q_nope, q_pe, parts, mask)
    np.testing.assert_allclose(np.array(fused.astype(mx.float32)), np.array(explicit.astype(mx.float32)),
                               atol=atol, rtol=atol)
