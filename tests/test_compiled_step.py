"""The compiled decode step (kvsim.model.compiled) equals the eager model: logits allclose, greedy tokens identical."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.model.compiled import compiled_step
from kvsim.model import TOY_KINDS, build_model, toy_spec

PROMPT = [3, 17, 42, 5, 99, 7, 11, 64, 2, 8, 31]


def greedy(forward, model, steps: int, **cache_kw):
    """Prefill PROMPT, then ``steps`` one-token steps through ``forward``; tokens and every step's logits."""
    caches = model.make_caches(**cache_kw)
    logits = forward(mx.array([PROMPT]), caches)[0, -1]
    tokens, seen = [], [logits]
    for _ in range(steps):
        tokens.append(int(mx.argmax(logits).item()))
        logits = forward(mx.array([[tokens[-1]]]), caches)[0, -1]
        seen.append(logits)
    return tokens, np.array(mx.stack(seen))


CASES = [(kind, True) for kind in TOY_KINDS] + [("gqa", False), ("mla", False)]


@pytest.mark.parametrize("kind", ["gqa", "mla", "jamba"])
def test_unchained_step_equals_eager(kind):
    eager_model = build_model(toy_spec(kind), seed=3)
    want_tokens, want = greedy(lambda t, c: eager_model(t, c), eager_model, 6)
    model = build_model(toy_spec(kind), seed=3)
    got_tokens, got = greedy(compiled_step(model, chain=False), model, 6)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind, fuse", CASES)
def test_compiled_step_equals_eager(kind, fuse):
    eager_model = build_model(toy_spec(kind), seed=3)
    want_tokens, want = greedy(lambda t, c: eager_model(t, c), eager_model, 8)
    model = build_model(toy_spec(kind), seed=3)
    step = compiled_step(model, fuse_projections=fuse)
    got_tokens, got = greedy(step, model, 8)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # fused weights are views of the same values: the eager forward of the same model is unchanged
    again_tokens, again = greedy(lambda t, c: model(t, c), model, 8)
    assert again_tokens == want_tokens
    np.testing.assert_allclose(again, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_dtype", ["q8", "fp16"])
def test_compiled_step_with_stored_dtypes(kv_dtype):
    eager_model = build_model(toy_spec("gqa"), seed=5)
    want_tokens, want = greedy(lambda t, c: eager_model(t, c, mx.float16 if kv_dtype == "fp16" else None),
                               eager_model, 6, kv_dtype=kv_dtype, group_size=32)
    model = build_model(toy_spec("gqa"), seed=5)
    step = compiled_step(model)
    got_tokens, got = greedy(lambda t, c: step(t, c, mx.float16 if kv_dtype == "fp16" else None),
                             model, 6, kv_dtype=kv_dtype, group_size=32)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_mla_paths_compiled():
    for path in ("absorbed", "materialized"):
        eager_model = build_model(toy_spec("mla"), seed=2)
        eager_model.mla_path = path
        want_tokens, want = greedy(lambda t, c: eager_model(t, c), eager_model, 5)
        model = build_model(toy_spec("mla"), seed=2)
        model.mla_path = path
        got_tokens, got = greedy(compiled_step(model), model, 5)
        assert got_tokens == want_tokens
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_wrong_cache_count_is_refused():
    model = build_model(toy_spec("gqa"))
    with pytest.raises(ValueError, match="one entry per layer"):
        compiled_step(model)(mx.array([[1]]), [])


@pytest.mark.parametrize("bits, group, recent", [(8, 32, 0), (4, 64, 3), (8, 64, 5)])
def test_dequantized_sdpa_equals_quantized_sdpa(bits, group, recent):
    from kvsim.cache.sdpa import dequantized_sdpa, quantized_sdpa
    draw = [mx.random.uniform(-1, 1, s, key=mx.random.key(i)) for i, s in
            enumerate([(1, 4, 2, 64), (1, 2, 40, 64), (1, 2, 40, 64), (1, 2, recent, 64), (1, 2, recent, 64)])]
    q, k, v, rk, rv = draw
    kq, vq = mx.quantize(k, group_size=group, bits=bits), mx.quantize(v, group_size=group, bits=bits)
    kw = dict(group_size=group, bits=bits, recent_keys=rk if recent else None, recent_values=rv if recent else None)
    want = quantized_sdpa(q, kq, vq, None, 0.125, **kw)
    got = dequantized_sdpa(q, kq, vq, None, 0.125, **kw)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)


def test_quantized_kernels_probe_runs_on_this_device():
    from kvsim.measure.roofline import quantized_kernels
    res = quantized_kernels(256, repeats=2, heads=4, kv_heads=2, head_dim=64, dtype=mx.float32,
                            layouts=((8, 64), (4, 32)))
    assert {"dense", "dequantize q8 g64", "dequantize q4 g32"} <= set(res["step_ms"])
    assert all(ms > 0 for ms in res["step_ms"].values())


@pytest.mark.parametrize("kind", ["gqa", "sliding", "jamba"])
def test_compiled_step_over_rows_equals_eager(kind):
    """Separate sequences at different offsets (Rows): same logits as the eager model."""
    from kvsim.model.layers import Rows
    model = build_model(toy_spec(kind), seed=4)
    rows_e = [model.make_caches() for _ in range(3)]
    rows_c = [model.make_caches() for _ in range(3)]
    step = compiled_step(model)
    for r, n in enumerate((3, 7, 12)):                       # prefill each row alone, different lengths
        prompt = mx.array([PROMPT[:n]])
        model(prompt, rows_e[r])
        step(prompt, rows_c[r])
    per_layer = lambda rows: [Rows([rows[r][i] for r in range(3)]) for i in range(len(model.blocks))]
    tokens = mx.array([[5], [9], [13]])
    for _ in range(3):
        want = model(tokens, per_layer(rows_e))
        got = step(tokens, per_layer(rows_c))
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)
        tokens = mx.argmax(want[:, -1:], axis=-1)


@pytest.mark.parametrize("kind", ["gqa", "mla", "sliding"])
def test_generate_compiled_equals_eager(kind):
    from kvsim.decode import generate
    model = build_model(toy_spec(kind), seed=6)
    eager = generate(model, PROMPT, 10, compiled=False)
    comp = generate(model, PROMPT, 10, compiled=True)
    assert comp.tokens == eager.tokens
    np.testing.assert_allclose(np.array(comp.logits), np.array(eager.logits), rtol=1e-5, atol=1e-5)
    assert model.compiled_step() is model.compiled_step()           # built once, kept


@pytest.mark.parametrize("kind", ["gqa", "mqa", "sliding", "mla"])
def test_compiled_step_equals_the_eager_reference_path(kind):
    """Against the readable path (``fast_decode = False``), not only the eager fast path both share."""
    eager_model = build_model(toy_spec(kind), seed=3)
    eager_model.fast_decode = False
    want_tokens, want = greedy(lambda t, c: eager_model(t, c), eager_model, 10)
    model = build_model(toy_spec(kind), seed=3)
    got_tokens, got = greedy(compiled_step(model), model, 10)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split_kv", [1, 3])
def test_compiled_mla_absorbed_pieces_equal_eager(split_kv):
    """The compiled MLA step does W_uk and W_uv in its compiled pieces on the absorbed path (split_kv 1) and
    falls back to the eager attention code otherwise (split_kv 3): both equal the eager model."""
    def built():
        m = build_model(toy_spec("mla"), seed=8)
        m.mla_path = "absorbed"
        for b in m.blocks:
            b.mixer.split_kv = split_kv
        return m
    eager_model = built()
    want_tokens, want = greedy(lambda t, c: eager_model(t, c), eager_model, 6)
    model = built()
    step = compiled_step(model)
    got_tokens, got = greedy(step, model, 6)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    caches = model.make_caches()
    step(mx.array([PROMPT]), caches)
    assert all(step.mixers[i].absorbs_step(c, 1, 4) == (split_kv == 1) for i, c in enumerate(caches))


def test_compiled_mla_absorbed_pieces_with_a_stored_dtype():
    """kv_dtype fp16 on the absorbed MLA path: the latent is stored as fp16 by both steps alike."""
    eager_model, model = (build_model(toy_spec("mla"), seed=9) for _ in range(2))
    want_tokens, want = greedy(lambda t, c: eager_model(t, c, mx.float16), eager_model, 5)
    step = compiled_step(model)
    got_tokens, got = greedy(lambda t, c: step(t, c, mx.float16), model, 5)
    assert got_tokens == want_tokens
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
