"""Lesson 04 and 06 measurements on real MLX tensors: ring order and per-channel key quantization."""

import mlx.core as mx
import numpy as np
import pytest

from kvsim.measure import quant_error
from kvsim.measure.channel_quant import (
    fake_quantize,
    key_error_map,
    per_head_errors,
    scheme_errors,
)
from kvsim.measure.ring_order import ring_order_check


@pytest.mark.parametrize("sinks", [0, 2])
def test_storage_order_ring_gives_the_same_attention(sinks):
    r = ring_order_check(steps=20, window=5, sinks=sinks)
    assert r.reordered_steps() > 0                      # the stored order really differed
    assert r.max_abs_difference.max() < 1e-5
    assert all(sorted(a) == sorted(b) for a, b in zip(r.ordered_positions, r.stored_positions))


def test_fake_quantize_groups_along_the_chosen_axis():
    x = mx.random.normal((1, 2, 64, 32), key=mx.random.key(0))
    per_token = fake_quantize(x, 4, 32, "token")
    assert mx.allclose(per_token, mx.dequantize(*mx.quantize(x, group_size=32, bits=4), group_size=32, bits=4))
    x_outlier = x * mx.where(mx.arange(32) == 3, 20.0, 1.0)  # one large channel
    err_token = mx.abs(fake_quantize(x_outlier, 4, 32, "token") - x_outlier)
    err_channel = mx.abs(fake_quantize(x_outlier, 4, 32, "channel") - x_outlier)
    normal = np.arange(32) != 3
    assert np.array(err_channel)[..., normal].mean() < np.array(err_token)[..., normal].mean() / 3
    with pytest.raises(ValueError, match="multiple of group_size"):
        fake_quantize(x[:, :, :40], 4, 32, "channel")
    with pytest.raises(ValueError, match="axis"):
        fake_quantize(x, 4, 32, "head")


def test_per_channel_keys_beat_per_token_with_outlier_channels():
    qkv = quant_error.synthetic_qkv(tokens=256, queries=4)
    errs = {b: scheme_errors(qkv, b, 64) for b in (2, 4, 8)}
    assert all(e["keys per channel (KIVI)"] < e["keys per token"] for e in errs.values())
    assert errs[8]["keys per token"] < errs[4]["keys per token"] < errs[2]["keys per token"]
    maps = key_error_map(qkv, 2, 64, tokens=16)
    assert set(maps) == {"|K|", "error, per token", "error, per channel"} and maps["|K|"].shape == (16, 128)


def test_the_whole_sample_error_lies_within_the_per_head_errors():
    qkv = quant_error.synthetic_qkv(tokens=256, queries=4)
    heads = per_head_errors(qkv, 4, 64, 32)
    whole = quant_error.attention_error(qkv, 4, 64, 32).relative_error
    assert len(heads) == qkv.k.shape[1] and min(heads) <= whole <= max(heads)
    assert np.ptp(heads) > 0.01  # heads differ: a sample with other heads gives another number
