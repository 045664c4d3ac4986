"""MLA absorbed vs materialized per call: calc's FLOPs and bytes (checked against a brute-force count), the
crossover at DeepSeek-V3 sizes, the decision the MLA layer takes from it (both paths equal), and split-KV
over the latent through the split-K merge (fp32 within 1e-5)."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.cache import make_caches
from kvsim.calc.mla_paths import (MlaDims, crossover_query_tokens, h200_machine, mla_call_costs, mla_point_rows,
                                  use_absorbed_mla)
from kvsim.calc.registry import load_model
from kvsim.model import build_model, toy_spec

V3 = MlaDims.from_spec(load_model("deepseek-v3"))


def brute_force_costs(d: MlaDims, L: int, C: int, b: int) -> dict:
    """FLOPs counted product by product over an explicit causal mask (numpy), bytes from array shapes."""
    H, r, R, N, V = d.num_attention_heads, d.kv_lora_rank, d.qk_rope_head_dim, d.qk_nope_head_dim, d.v_head_dim
    T = C + L
    pairs = int(np.tril(np.ones((L, T), dtype=bool), k=C).sum())      # query i (position C+i) sees keys <= C+i
    mm = lambda m, k, n: 2 * m * k * n                                  # FLOPs of an (m,k)@(k,n) product
    weights = H * (N + V) * r * b
    absorbed = {"flops": H * mm(L, N, r) + H * pairs * 2 * (r + R) + H * pairs * 2 * r + H * mm(L, r, V),
                "bytes": T * (r + R) * b + weights}
    per_head_kv = np.zeros((T, H, N + R + V), dtype=np.uint8).nbytes * b     # K (nope + rope) and V per head
    materialized = {"flops": H * mm(T, r, N + V) + H * pairs * 2 * (N + R) + H * pairs * 2 * V,
                    "bytes": T * (r + R) * b + 2 * per_head_kv + weights}
    return {"absorbed": absorbed, "materialized": materialized}


@pytest.mark.parametrize("L,C", [(1, 0), (1, 37), (5, 100), (64, 0), (33, 513)])
def test_costs_equal_a_brute_force_count(L, C):
    d = MlaDims(4, 32, 8, 16, 12)
    assert mla_call_costs(d, L, C, 2) == brute_force_costs(d, L, C, 2)


def test_deepseek_v3_crossover_and_the_seed_points():
    assert (V3.num_attention_heads, V3.kv_lora_rank, V3.qk_rope_head_dim, V3.qk_nope_head_dim,
            V3.v_head_dim) == (128, 512, 64, 128, 128)
    x = crossover_query_tokens(V3, 32768)
    assert 160 <= x <= 180                                  # ≈ r(N+V)/(2r+R−N−R−V) = 171 once C ≫ L
    assert use_absorbed_mla(V3, x - 1, 32768) and not use_absorbed_mla(V3, x, 32768)
    for L in (1, 2, 5, 17, 64, x - 1):
        assert use_absorbed_mla(V3, L, 32768)
    for L in (x, 256, 512, 4096):
        assert not use_absorbed_mla(V3, L, 32768)
    paths = {r["label"]: r["path"] for r in mla_point_rows(V3)}
    assert paths["decode after 32K"] == paths["k = 4 verify block after 32K"] == "absorbed"
    assert paths["cold prefill"] == "materialized"
    # bytes: the absorbed path always reads less; at decode it is the latent plus the kv_b weights
    c = mla_call_costs(V3, 1, 32768)
    assert c["absorbed"]["bytes"] == 32769 * 576 * 2 + 128 * 256 * 512 * 2 < c["materialized"]["bytes"]
    flops_per_s, bytes_per_s = h200_machine()
    assert 1e14 < flops_per_s < 2e15 and 1e12 < bytes_per_s < 5e12        # the measured H200, not a datasheet
    with pytest.raises(ValueError, match="query_tokens"):
        mla_call_costs(V3, 0, 5)


COMPUTE_BOUND = (1e12, 1e18)   # FLOP/s, bytes/s: a machine where only FLOPs count


def _wide_latent_toy():
    """An MLA toy whose latent is wide against its heads: on a compute-bound machine its crossover is a
    few tokens, so both paths occur (at toy sizes the H200 is bandwidth-bound and always absorbs)."""
    model = build_model(toy_spec("mla", kv_lora_rank=64, qk_nope_head_dim=8, v_head_dim=8, qk_rope_head_dim=8))
    mla = model.blocks[0].mixer
    assert mla.choose_path(18, 0, 4) == "absorbed"          # the default machine: the measured H200
    mla.machine = COMPUTE_BOUND
    assert crossover_query_tokens(mla.dims, 0, 4, COMPUTE_BOUND) < 18
    return model, mla


def test_the_layer_takes_the_path_calc_decides_and_both_agree():
    model, mla = _wide_latent_toy()
    tokens = mx.array([[5, 9, 1, 7, 3, 3, 8, 2, 6, 4, 1, 9, 2, 8, 5, 7, 3, 1, 4, 6, 2, 9, 8, 7]])
    sizes = [18, 1, 1, 3, 1]
    outs, taken = {}, []
    for path in ("auto", "absorbed", "materialized"):
        model.mla_path = path
        caches, start, logits = make_caches(model.spec), 0, []
        for n in sizes:
            logits.append(model(tokens[:, start:start + n], caches))
            if path == "auto":
                taken.append((mla.last_path, mla.choose_path(n, start, 4)))
            start += n
        outs[path] = mx.concatenate(logits, axis=1)
    model.mla_path = "auto"
    assert all(a == b for a, b in taken) and {a for a, _ in taken} == {"absorbed", "materialized"}, taken
    assert taken[0][0] == "materialized" and taken[1][0] == "absorbed"    # prefill 18 vs a decode step
    for path in ("absorbed", "materialized"):
        np.testing.assert_allclose(np.array(outs["auto"]), np.array(outs[path]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("splits", [2, 3, 7])
def test_split_kv_over_the_latent_equals_the_unsplit_absorbed_path(splits):
    model = build_model(toy_spec("mla"))
    mla = model.blocks[0].mixer
    tokens = mx.array([[5, 9, 1, 7, 3, 3, 8, 2, 6, 4, 1, 9, 2, 8, 5, 7]])
    model.mla_path = "absorbed"
    outs = {}
    for s in (1, splits):
        for b in model.blocks:
            if b.mixer.__class__.__name__ == "MLA":
                b.mixer.split_kv = s
        caches = make_caches(model.spec)
        outs[s] = mx.concatenate([model(tokens[:, :9], caches)] +
                                 [model(tokens[:, i:i + 1], caches) for i in range(9, 16)], axis=1)
    assert mla.split_kv == splits
    np.testing.assert_allclose(np.array(outs[splits]), np.array(outs[1]), rtol=1e-5, atol=1e-5)


def _step_inputs(mla, seed: int, r=None):
    """One decode token's (q_nope, q_pe, latent, k_pe) for ``mla``, RoPE already applied (random, fp32)."""
    H, r = mla.n_heads, r or mla.kv_lora_rank
    shapes = [(1, H, 1, mla.nope_dim), (1, H, 1, mla.rope_dim), (1, 1, 1, r), (1, 1, 1, mla.rope_dim)]
    return [mx.random.normal(s, key=mx.random.key(seed + i)) for i, s in enumerate(shapes)]


def test_the_absorbed_step_with_the_queries_absorbed_outside_equals_the_fast_path():
    """What the compiled step does (q_nope·W_uk and q_pe·scale in its input part, W_uv in its output part,
    :meth:`MLA.attend_absorbed_step` between) equals :meth:`MLA.attend_roped_step`: outputs, caches, path;
    a latent of the wrong width is refused alike by both, and neither cache changes."""
    model = build_model(toy_spec("mla"), seed=7)
    mla = model.blocks[0].mixer
    fast, split = make_caches(model.spec)[0], make_caches(model.spec)[0]
    prompt = _step_inputs(mla, 0)
    for c in (fast, split):                                   # a few cached tokens first, the reference way
        mla.attend_roped(*prompt, c)
    w_uk, w_uv = mla._w_uk_uv()
    for step in range(4):
        q_nope, q_pe, latent, k_pe = _step_inputs(mla, 10 * (step + 1))
        assert mla.absorbs_step(split, 1, 4) and not mla.absorbs_step(split, 2, 4)
        want = mla.attend_roped_step(q_nope, q_pe, latent, k_pe, fast)
        mla.last_path = None
        got = mla.attend_absorbed_step(q_nope @ w_uk, q_pe * mla.scale, latent, k_pe, split) @ w_uv.swapaxes(-1, -2)
        assert mla.last_path == "absorbed"
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-6)
        assert split.offset == fast.offset
        np.testing.assert_array_equal(np.array(split.latent), np.array(fast.latent))
    q_nope, q_pe, latent, k_pe = _step_inputs(mla, 99, r=mla.kv_lora_rank + 1)   # one element too wide
    errors = []
    for fn, c in ((lambda c: mla.attend_roped_step(q_nope, q_pe, latent, k_pe, c), fast),
                  (lambda c: mla.attend_absorbed_step(q_nope @ w_uk, q_pe * mla.scale, latent, k_pe, c), split)):
        before = c.offset
        with pytest.raises(ValueError, match="kv_lora_rank") as err:
            fn(c)
        errors.append(str(err.value))
        assert c.offset == before
    assert errors[0] == errors[1]


def test_absorbs_step_follows_the_path_split_kv_and_the_cache_class():
    model = build_model(toy_spec("mla"))
    mla, cache = model.blocks[0].mixer, make_caches(model.spec)[0]
    assert mla.absorbs_step(cache, 1, 4) == (mla.choose_path(1, cache.offset, 4) == "absorbed")
    mla.path = "materialized"
    assert not mla.absorbs_step(cache, 1, 4)
    mla.path, mla.split_kv = "absorbed", 2
    assert not mla.absorbs_step(cache, 1, 4)                  # split-KV: attend_roped_step's reference path
    mla.split_kv = 1
    assert mla.absorbs_step(cache, 1, 4) and not mla.absorbs_step(None, 1, 4)
    assert not mla.absorbs_step(make_caches(model.spec, kv_dtype="q8")[0], 1, 4)   # not the fast cache class
