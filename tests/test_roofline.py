"""The roofline: weight bytes a step reads (one definition), FLOPs, intensity and floors; the MLX
measurements behind them (device copy, matmul, interleaved steps); mlx-lm twins with kvsim's weights."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.calc import roofline
from kvsim.calc.memory import read_bytes_per_step
from kvsim.calc.units import InputError
from kvsim.measure.bandwidth import (
    MiB,
    measure_device_bandwidth,
    measure_matmul_throughput,
)
from kvsim.measure.roofline import (
    decode_point,
    device_limits,
    device_summary,
    fitted_model,
    interleaved_times,
    mla_kernels,
    on_roofline,
    point_bytes_needed,
)
from kvsim.measure.step_time import fill_caches, model_matmul_params, model_weights_read_bytes
from kvsim.measure.twins import twin
from kvsim.model import build_model, toy_spec
from kvsim.model.layers import DeviceWeightInit

# ---------------------------------------------------------------- arithmetic


def test_weight_bytes_read_are_all_but_the_table_plus_one_row():
    assert roofline.step_weight_bytes(1000, 400, 10) == 1000 - 400 + 40
    assert roofline.step_weight_bytes(1000, 400, 10, tied=True) == 1000   # the table is the head too
    with pytest.raises(InputError, match="embedding_bytes"):
        roofline.step_weight_bytes(100, 400, 10)
    with pytest.raises(ValueError, match="vocab_size"):
        roofline.step_weight_bytes(1000, 400, 0)


def test_attention_flops_count_the_keys_each_layer_reads():
    gqa, sliding, mla = toy_spec("gqa"), toy_spec("sliding"), toy_spec("mla")
    # 2 layers x 2 FLOPs x 4 heads x (32 + 32) x T keys
    assert roofline.attention_flops(gqa, 10) == 2 * 2 * 4 * 64 * 10
    assert roofline.attention_flops(gqa, 10, batch=3) == 3 * 2 * 2 * 4 * 64 * 10
    assert roofline.attention_flops(sliding, 100) == roofline.attention_flops(sliding, 8)   # window 8
    # MLA absorbed: 2·H·(2·r + rope) per key, r = 32, rope = 32
    assert roofline.attention_flops(mla, 5) == 2 * 2 * 4 * (2 * 32 + 32) * 5
    assert np.array_equal(roofline.attention_flops(gqa, np.array([1, 2])), [1024, 2048])
    assert roofline.attention_flops(toy_spec("mamba"), 50) == 0


def test_step_flops_intensity_floor_and_the_roofline():
    spec = toy_spec("gqa")
    assert roofline.step_flops(spec, 1000, 10, batch=2) == 2 * 2 * 1000 + roofline.attention_flops(spec, 10, 2)
    assert roofline.arithmetic_intensity(600, 300) == 2
    assert roofline.machine_balance(1e12, 1e9) == 1000
    assert roofline.floor_seconds(2e9, 4e9) == 0.5
    # below the ridge the bandwidth caps FLOP/s, above it the peak does
    assert np.array_equal(roofline.attainable_flops_per_s(np.array([1, 1000, 5000]), 1e12, 1e9),
                          [1e9, 1e12, 1e12])


def test_on_roofline_places_a_point():
    point = {"step_ms": {"kvsim": 500.0, "mlx-lm": 250.0}, "read_bytes": 10**9, "flops": 4 * 10**9}
    r = on_roofline(point, bytes_per_s=4e9, flops_per_s=1e12)
    assert r["floor_ms"] == 250 and r["kvsim_over_floor"] == 2 and r["mlx_lm_over_floor"] == 1
    assert r["intensity_flop_per_byte"] == 4 and r["achieved_bytes_per_s"] == 2e9
    assert r["achieved_flops_per_s"] == 8e9 and r["compute_floor_ms"] == 4


def test_weights_read_and_matmul_params_of_a_model(toys):
    m = toys["gqa"]
    table, row = m.embed.nbytes, m.embed[0].nbytes
    assert model_weights_read_bytes(m) == m.weight_bytes - table + row
    assert model_matmul_params(m) * 4 == m.weight_bytes - table          # fp32: 4 bytes a parameter


# ---------------------------------------------------------------- measurements


def test_device_bandwidth_and_matmul_count_their_work():
    copy = measure_device_bandwidth(MiB, repeats=2)
    assert copy.work == 2 * MiB and len(copy.seconds) == 2 and copy.rate > 0
    assert measure_device_bandwidth(MiB, repeats=1, dtype="bf16").work == 2 * MiB
    mm = measure_matmul_throughput(64, repeats=2)
    assert mm.work == 2 * 64**3 and mm.rate == mm.work / min(mm.seconds)
    with pytest.raises(ValueError, match="n must"):
        measure_matmul_throughput(8)


def test_device_limits_and_machine_balance():
    lim = device_limits(MiB, 64, "fp32", repeats=1)
    assert lim["copy_bytes"] == MiB and lim["matmul_n"] == 64
    assert lim["machine_balance_flop_per_byte"] == lim["matmul_flops_per_s"] / lim["copy_bytes_per_s"]


def test_fitted_model_keeps_the_layers_that_fit():
    spec = toy_spec("jamba")                                  # 2 layers of different kinds
    full = fitted_model(spec, "fp32", 2**30)
    assert len(full.blocks) == 2 and full.embed.dtype == mx.float32
    with pytest.raises(MemoryError, match="2 layer"):        # both kinds, or nothing
        fitted_model(spec, "fp32", int(full.weight_bytes * 0.9 / 0.6))
    gqa = toy_spec("gqa")
    small = fitted_model(gqa, "fp32", 2**30, num_layers=1)
    assert len(small.blocks) == 1
    table = 2 * small.embed.nbytes
    per_layer = small.weight_bytes - table
    assert len(fitted_model(gqa, "fp32", int((table + 1.5 * per_layer) / 0.6)).blocks) == 1
    with pytest.raises(MemoryError, match="do not fit"):
        fitted_model(gqa, "fp32", int(table / 0.6))


def test_device_summary_names_the_device_and_its_memory():
    d = device_summary()
    assert d["backend"] in ("cpu", "metal", "cuda") and d["name"]
    assert 0 < d["memory_available_bytes"] <= d["memory_total_bytes"]


def test_interleaved_times_alternate_after_one_warm_up_each():
    calls = []
    fns = {name: (lambda name=name: calls.append(name) or mx.array(1)) for name in "ab"}
    times = interleaved_times(fns, repeats=3)
    assert calls == ["a", "b"] + ["a", "b", "b", "a", "a", "b"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}


def test_device_weight_init_is_deterministic_and_in_the_model_dtype():
    a = build_model(toy_spec("gqa"), dtype="bf16", init=DeviceWeightInit(3, mx.bfloat16))
    b = build_model(toy_spec("gqa"), dtype="bf16", init=DeviceWeightInit(3, mx.bfloat16))
    assert a.embed.dtype == mx.bfloat16 and mx.array_equal(a.blocks[0].mixer.wq, b.blocks[0].mixer.wq)
    w = a.blocks[0].ffn.up.astype(mx.float32)                # U(-a, a) with std 1/sqrt(64)
    assert float(mx.abs(w).max()) <= 3**0.5 / 8 + 1e-2 and abs(float(w.std()) - 1 / 8) < 0.02


def test_decode_point_reads_what_the_calculator_says(toys):
    m = toys["gqa"]
    p = decode_point(m, context=40, batch=2, repeats=2)
    held = 40 + 2 + 2
    assert p["cache_read_bytes"] == read_bytes_per_step(m.spec, held, 2, kv_dtype="fp32")
    assert p["read_bytes"] == p["weights_read_bytes"] + p["cache_read_bytes"] and p["step_ms"]["kvsim"] > 0
    assert "kvsim_over_mlx_lm" not in p
    assert point_bytes_needed(m, 40, 2, 2, sets=2) > point_bytes_needed(m, 40, 2, 2, sets=1) > 2**30


def test_mla_kernels_time_both_ways(toys):
    k = mla_kernels(toys["mla"].blocks[0].mixer, context=16, repeats=1)
    assert k["context_tokens"] == 16 and len(k["step_ms"]) == 2


# ---------------------------------------------------------------- mlx-lm twins


@pytest.mark.parametrize("kind", ["gqa", "mqa", "mha", "sliding", "mla"])
def test_twin_decodes_like_kvsim(toys, kind):
    """Same weights, mlx-lm's model and caches: every decode step gives kvsim's logits."""
    model = toys[kind]
    t = twin(model)
    ours, theirs = model.make_caches(), t.make_caches()
    fill_caches(model, ours, 20)                            # past the window (8): rings wrap
    fill_caches(model, theirs, 20)
    assert [c.offset for c in theirs] == [20] * len(theirs)
    for token in (5, 9, 2, 7):
        x = mx.array([[token]])
        np.testing.assert_allclose(np.array(model(x, ours)), np.array(t.model(x, cache=theirs)),
                                   rtol=1e-5, atol=1e-5)


def test_twin_shares_the_weights_and_rejects_other_layers(toys):
    model = toys["gqa"]
    t = twin(model)
    assert t.family == "llama" and t.model.lm_head.weight is model.lm_head
    with pytest.raises(ValueError, match="no mlx-lm twin"):
        twin(toys["jamba"])


def test_decode_point_with_a_twin_compares_both(toys):
    p = decode_point(toys["gqa"], context=16, repeats=2, twin=twin(toys["gqa"]))
    assert set(p["step_ms"]) == {"kvsim", "mlx-lm"}
    assert p["kvsim_over_mlx_lm"] == p["step_ms"]["kvsim"] / p["step_ms"]["mlx-lm"]
    assert p["kvsim_over_mlx_lm_paired"] > 0
    q = decode_point(toys["gqa"], context=16, repeats=2, twin=twin(toys["gqa"]), interleave=False)
    assert set(q["step_ms"]) == {"kvsim", "mlx-lm"} and not q["interleaved"]


def test_quantized_twin_decodes_like_kvsim():
    """8-bit caches on both sides: kvsim's quantized_sdpa gives mlx-lm's quantized attention."""
    model = build_model(toy_spec("gqa", head_dim=64))       # group size 64 divides head_dim
    t = twin(model)
    ours, theirs = model.make_caches(kv_dtype="q8"), t.make_caches(bits=8)
    fill_caches(model, ours, 20, kv_dtype="q8")
    fill_caches(model, theirs, 20, kv_dtype="q8")
    for token in (5, 9, 2):
        x = mx.array([[token]])
        np.testing.assert_allclose(np.array(model(x, ours)), np.array(t.model(x, cache=theirs)),
                                   rtol=1e-5, atol=1e-5)
    p = decode_point(model, context=16, repeats=1, twin=t, kv_dtype="q8")
    assert p["kv_dtype"] == "q8" and set(p["step_ms"]) == {"kvsim", "mlx-lm"}
    with pytest.raises(ValueError, match="quantized sliding"):
        twin(build_model(toy_spec("sliding"))).make_caches(bits=8)


@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_kvsim_model_runs_on_mlx_lm_caches(toys, kind):
    """mlx-lm's caches answer make_mask(N, return_array=, window_size=) with None or "causal"."""
    model = toys[kind]
    ours, theirs = model.make_caches(), twin(model).make_caches()
    tokens = mx.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    for chunk in (tokens[:, :5], tokens[:, 5:6], tokens[:, 6:]):
        np.testing.assert_allclose(np.array(model(chunk, ours)), np.array(model(chunk, theirs)),
                                   rtol=1e-5, atol=1e-5)
