"""Keys quantized per channel (KIVI) beside per token, on the same real MLX tensors.

Contract
- :func:`fake_quantize`: ``mx.quantize`` then ``mx.dequantize`` of a (B, H, T, D) array, with groups
  of ``group_size`` consecutive elements either along D (``axis="token"``: one scale and bias per token
  and group of channels, what :class:`~kvsim.cache.QuantizedKVCache` stores) or along T
  (``axis="channel"``: one scale and bias per channel and group of tokens, KIVI's choice for keys).
  Per-channel groups need T divisible by the group size (KIVI keeps the remainder exact).
- :func:`scheme_errors`: relative attention error ‖O_q − O‖_F / ‖O‖_F of the queries of a
  :class:`~kvsim.measure.quant_error.QKV` over dequantized keys and values, for per-token keys and for
  per-channel keys (values per token in both, as KIVI does). Both cost the same metadata per element.
- :func:`key_error_map`: |K̂ − K| of one KV head under both schemes, and |K|, for a picture.
- :func:`per_head_errors`: lesson 06's error (real QuantizedKVCache) computed on each KV head alone.
- :func:`lesson_scheme_errors` / :func:`lesson_key_error_map`: the two on lesson 06's sample, memoized
  (what the view redraws).
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

from ..cache.sdpa import sdpa
from ..model.layers import reference_mask
from .quant_error import QKV, attention_error, exact_attention, synthetic_qkv

AXES = ("token", "channel")


def fake_quantize(x: mx.array, bits: int, group_size: int, axis: str = "token") -> mx.array:
    """x after a round trip through mx.quantize: groups along D (axis='token') or along T ('channel')."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    if axis == "channel":
        if x.shape[-2] % group_size:
            raise ValueError(f"tokens ({x.shape[-2]}) must be a multiple of group_size ({group_size}) "
                             "for per-channel groups")
        return fake_quantize(x.swapaxes(-1, -2), bits, group_size).swapaxes(-1, -2)  # (B, H, D, T) grouped on T
    return mx.dequantize(*mx.quantize(x, group_size=group_size, bits=bits), group_size=group_size, bits=bits)


def _error(qkv: QKV, k_hat: mx.array, v_hat: mx.array, exact: mx.array) -> float:
    q, k, _ = qkv
    T, L = k.shape[2], q.shape[2]
    out = sdpa(q, k_hat, v_hat, reference_mask(L, T, offset=T - L))
    return float(mx.linalg.norm((out - exact).flatten()) / mx.linalg.norm(exact.flatten()))


def scheme_errors(qkv: QKV, bits: int = 2, group_size: int = 64) -> dict:
    """{"keys per token": error, "keys per channel (KIVI)": error}; values per token in both."""
    exact = exact_attention(qkv)
    v_hat = fake_quantize(qkv.v, bits, group_size, "token")
    return {"keys per token": _error(qkv, fake_quantize(qkv.k, bits, group_size, "token"), v_hat, exact),
            "keys per channel (KIVI)": _error(qkv, fake_quantize(qkv.k, bits, group_size, "channel"), v_hat, exact)}


def key_error_map(qkv: QKV, bits: int = 2, group_size: int = 64, head: int = 0, tokens: int = 64) -> dict:
    """(tokens, D) maps of |K| and of |K̂ − K| per scheme, for KV head ``head`` and the first ``tokens``."""
    k = qkv.k
    out = {"|K|": np.abs(np.array(k[0, head, :tokens]))}
    for axis in AXES:
        err = mx.abs(fake_quantize(k, bits, group_size, axis) - k)[0, head, :tokens]
        out[f"error, per {axis}"] = np.array(err)
    return out


def per_head_errors(qkv: QKV, bits: int = 4, group_size: int = 64, full_precision_tokens: int = 0) -> list[float]:
    """:func:`~kvsim.measure.quant_error.attention_error` on each KV head (with its query heads) alone."""
    q, k, v = qkv
    rep = q.shape[1] // k.shape[1]
    return [attention_error(QKV(q[:, h * rep:(h + 1) * rep], k[:, h:h + 1], v[:, h:h + 1]), bits, group_size,
                            full_precision_tokens).relative_error for h in range(k.shape[1])]


@lru_cache(maxsize=64)
def lesson_scheme_errors(bits: int, group_size: int) -> dict:
    """:func:`scheme_errors` on lesson 06's sample (``synthetic_qkv(1024, 8)``), memoized per setting."""
    return scheme_errors(synthetic_qkv(tokens=1024, queries=8), bits, group_size)


@lru_cache(maxsize=64)
def lesson_key_error_map(bits: int, group_size: int) -> dict:
    """:func:`key_error_map` of lesson 06's sample, memoized per setting."""
    return key_error_map(synthetic_qkv(tokens=1024, queries=8), bits, group_size)
