"""The seeds' technique table computed from real configs; sparse reads (NSA, DSA); FLOPs per byte read."""

import numpy as np
import pytest

from kvsim.calc import memory
from kvsim.calc.config import LayerSpec
from kvsim.calc.registry import load_model
from kvsim.calc.techniques import (
    cache_read_intensity,
    dsa_indexer_key_bytes,
    nsa_read_tokens,
    sparse_bytes,
    technique_table,
    weight_read_intensity,
)


@pytest.fixture(scope="module")
def table():
    return {row["technique"]: row for row in technique_table()}


def test_seed_numbers(table):
    assert table["MQA, GQA"]["stored %"] == 25.0 and "4x" in table["MQA, GQA"]["example"]
    assert table["MLA"]["stored %"] == 1.76
    assert table["KV quantization (fp8)"]["stored %"] == 50.0
    assert table["KV quantization (2-bit)"]["stored %"] == 12.5            # an eighth, before metadata
    assert table["  same, with metadata"]["stored %"] > 12.5
    assert table["sliding window"]["stored %"] == 12.5 and "8x" in table["sliding window"]["example"]
    jamba = table["hybrid (Mamba + attention)"]
    assert "4.01 GiB" in jamba["example"] and "32 GiB" in jamba["example"]
    assert "K/V of 4 layers + 28 fixed states" == jamba["what stays in the cache"]


def test_read_only_techniques_keep_what_is_stored(table):
    for name in ("NSA", "FlashAttention, Flash-Decoding"):
        assert table[name]["stored %"] == 100.0
    assert table["NSA"]["read/step %"] < 10
    assert table["DSA"]["stored %"] > 100 and table["DSA"]["read/step %"] < 15    # stores more, reads less
    assert table["PagedAttention"]["read/step %"] == 100.0 and table["PagedAttention"]["stored %"] == 25.0
    for row in table.values():
        assert row["term changed"] != "none" or row["stored %"] >= 25.0


def test_nsa_reproduces_the_papers_table_4():
    assert nsa_read_tokens(np.array([8192, 16384, 32768, 65536])).tolist() == [2048, 2560, 3584, 5632]
    assert nsa_read_tokens(1000) == 1000                   # never more than the tokens there are


def test_sparse_bytes_dense_is_the_calculator_and_dsa_adds_indexer_keys():
    spec = load_model("deepseek-v3")
    t = np.array([0, 100, 4096, 131_072])
    dense, dsa = sparse_bytes(spec, t, "dense"), sparse_bytes(spec, t, "dsa")
    assert np.array_equal(dense["stored"], memory.kv_bytes(spec, t))
    assert np.array_equal(dense["read"], memory.read_bytes_per_step(spec, t))
    assert dsa_indexer_key_bytes() == 132
    assert np.array_equal(dsa["stored"] - dense["stored"], t * 132 * 61)
    assert dsa["read"][1] == dsa["stored"][1]              # below top-k every token is read
    assert dsa["read"][-1] == 61 * (131_072 * 132 + 2048 * 1152)
    assert sparse_bytes(spec, 4096, "nsa") == {"stored": dense["stored"][2], "read": 61 * (256 + 1024 + 512) * 1152}


def test_sparse_bytes_leave_windows_alone():
    mistral = load_model("mistral-7b-v0.1")
    for method in ("dense", "nsa", "dsa"):
        assert sparse_bytes(mistral, 65_536, method) == {"stored": memory.kv_bytes(mistral, 65_536),
                                                         "read": memory.kv_bytes(mistral, 65_536)}
    with pytest.raises(ValueError, match="method"):
        sparse_bytes(mistral, 10, "sparse")


def test_flops_per_byte_read():
    llama, dsv3 = load_model("llama-3-8b"), load_model("deepseek-v3")
    mha = LayerSpec("full", num_key_value_heads=32, head_dim=128)
    assert cache_read_intensity(mha, 32, "bf16") == 1.0                 # 2·g/b with g = 1
    assert cache_read_intensity(llama.layers[0], 32, "bf16") == 4.0     # 4 query heads per KV head
    assert cache_read_intensity(llama.layers[0], 32, "fp32") == 2.0
    assert cache_read_intensity(dsv3.layers[0], 128) == pytest.approx(2 * 128 * (1024 + 64) / 1152)
    with pytest.raises(ValueError, match="kind"):
        cache_read_intensity(load_model("jamba-v0.1").layers[0], 32)
    assert weight_read_intensity(1, "bf16") == 1.0 and weight_read_intensity(8, "fp32") == 4.0
    with pytest.raises(ValueError, match="batch"):
        weight_read_intensity(0)
