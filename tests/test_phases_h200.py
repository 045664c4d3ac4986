"""Lesson 08's arithmetic and data: prefill and decode on the roofline (kvsim.calc.phases), the H200 dataset
(kvsim.lessons.l08_decode_speed.data), numpy's matrix product, the roofline views and the lesson's exercises.
"""

import json

import numpy as np
import pytest

from kvsim.calc import memory, phases
from kvsim.calc.registry import load_model
from kvsim.calc.units import InputError
from kvsim.calc.weights import param_count
from kvsim.measure.bandwidth import measure_host_matmul_throughput


TINY = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16, "vocab_size": 10,
        "max_position_embeddings": 64, "tie_word_embeddings": False}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return load_model(path)


def test_weights_read_is_the_one_definition():
    llama = load_model("llama-3.1-8b")
    count = param_count(llama)
    assert phases.weights_read_bytes(llama) == (count.active - count.embedding + 4096) * 2 == 15_009_857_536
    assert phases.matmul_params(llama) == count.active - count.embedding
    gemma = load_model("gemma-3-4b")                       # tied: the table is the output head, read whole
    assert phases.weights_read_bytes(gemma, "fp32") == param_count(gemma).active * 4
    assert phases.matmul_params(gemma) == param_count(gemma).active
    with pytest.raises(InputError, match="weights dtype"):
        phases.weights_read_bytes(llama, "fp9")


def test_prefill_counts_every_causal_key(tiny):
    cost = phases.prefill_cost(tiny, 3)
    # 2 layers x 2 query heads x (4 + 4) x 2 FLOPs = 64 per key; queries 1, 2, 3 see 1 + 2 + 3 keys
    assert cost.flops == 2 * 3 * phases.matmul_params(tiny) + 64 * 6
    assert cost.read_bytes == phases.weights_read_bytes(tiny) + 3 * (2 * 2 * 1 * 4 * 2)   # the cache written once
    with pytest.raises(InputError, match="prompt_tokens"):
        phases.prefill_cost(tiny, 0)


def test_decode_batch_shares_the_weights_but_not_the_caches(tiny):
    one, four = phases.decode_cost(tiny, 5, 1), phases.decode_cost(tiny, 5, 4)
    w = phases.weights_read_bytes(tiny)
    assert one.read_bytes == w + memory.read_bytes_per_step(tiny, 5)
    assert four.read_bytes - w == 4 * (one.read_bytes - w)
    assert four.flops == pytest.approx(4 * one.flops)
    over = phases.decode_cost(tiny, np.array([0, 5]), 1)
    assert over.read_bytes.tolist() == [w, one.read_bytes] and over.intensity[1] == pytest.approx(one.intensity)


def test_llama_intensities_decode_and_prefill():
    llama = load_model("llama-3-8b")
    assert phases.decode_cost(llama, 0, 64).intensity == pytest.approx(64, rel=1e-3)    # weights: 2B FLOPs / 2 B
    assert phases.decode_cost(llama, 8192, 64).intensity == pytest.approx(14.76, abs=0.01)
    assert phases.prefill_cost(llama, 2048).intensity > 2000


def test_floors_say_which_binds():
    cost = phases.Cost(flops=100.0, read_bytes=10.0)
    memory_side = phases.floors(cost, bytes_per_s=1.0, flops_per_s=100.0, seconds=20.0)
    assert memory_side == {"bandwidth_floor_s": 10.0, "compute_floor_s": 1.0, "bound": "memory",
                           "over_bandwidth_floor": 2.0, "over_compute_floor": 20.0}
    assert phases.floors(cost, bytes_per_s=100.0, flops_per_s=1.0)["bound"] == "compute"
    with pytest.raises(InputError, match="bytes_per_s"):
        phases.floors(cost, 0, 1.0)


def test_ridge_batch_is_where_the_floors_meet():
    llama = load_model("llama-3-8b")
    bw, peak = 3.66e12, 7.5e14
    b = phases.ridge_batch(llama, 128, bw, peak)
    at = phases.decode_cost(llama, 128, 1)
    w = phases.weights_read_bytes(llama)
    assert b * at.flops / peak == pytest.approx((w + b * (at.read_bytes - w)) / bw)
    assert phases.ridge_batch(llama, 0, bw, peak) == pytest.approx(peak / bw, rel=1e-3)   # weights only: balance
    assert phases.ridge_batch(llama, 8192, bw, peak) is None                                # FLOP/B tends to 18


def test_host_matmul_counts_two_n_cubed():
    t = measure_host_matmul_throughput(32, repeats=2)
    assert t.work == 2 * 32**3 and len(t.seconds) == 2 and t.rate == t.work / min(t.seconds)
    with pytest.raises(InputError, match="n must"):
        measure_host_matmul_throughput(8)
