"""TurboQuant-style KV storage: a random orthogonal rotation before scalar quantization, undone on read.

Contract
- :class:`RandomizedHadamard`: R = H·diag(s)/√d, H the d×d Sylvester Hadamard matrix (d a power of
  two), s a seeded vector of ±1. R is orthogonal, so R⁻¹ = Rᵀ = diag(s)·H/√d. ``rotate(x)`` applies
  R to the last axis with ``mx.hadamard_transform`` (O(d log d)); ``inverse`` undoes it; the signs
  are kept as int8 (d bytes). :meth:`RandomizedHadamard.matrix` is the plain d×d reference. In fp32
  rotate-then-inverse is the identity within 1e-6 (tests/test_turboquant.py).
- Why it helps: a key vector with a few outlier channels puts a large range into every group that
  holds one; after the rotation each coordinate is a ±-weighted mix of all channels, so the
  energy is spread evenly and one scale per group fits every coordinate about as well.
- :class:`TurboQuantKVCache` stores R·k and R·v with :class:`~kvsim.cache.QuantizedKVCache`'s
  scalar quantization (``bits``, one scale and bias per ``group_size`` elements; group_size =
  head_dim gives one scale per vector). ``update_and_fetch`` returns dense keys/values (dequantized,
  rotated back: the readable reference path, a drop-in for any model); ``attend`` is the fast
  path: attention is invariant under a rotation shared by q and k, and the output is linear in v,
  so ``attend`` runs :func:`~kvsim.cache.sdpa.quantized_sdpa` on R·q over the stored codes and
  applies Rᵀ once to the output (no dequantized copy of the cache). Both are tested equal.
- Bytes, exactly: :func:`storage_bytes` (= :func:`kvsim.calc.quant_bytes.storage_mode_bytes`, pure) per mode ``fp16`` / ``uniform`` / ``rotated`` for
  T tokens, H KV heads, head dims d_k, d_v: packed data T·H·(d_k + d_v)·bits/8, metadata
  T·H·2·((d_k + d_v)/g)·b_scale, plus, rotated only, the sign vectors d_k + d_v bytes per layer.
  Equal to the real arrays' nbytes when the token count fills the allocated slots.
- :func:`storage_mode_errors`: attention-output error ‖O − O_exact‖_F/‖O_exact‖_F against bits for
  each mode on the same q, k, v, each row with its exact byte counts (``bits_per_element`` counts
  metadata), so uniform and rotated are compared at equal bytes.
- Persistence (``state``/``from_state``) is QuantizedKVCache's and does not carry the rotation:
  save/load is not supported for this cache.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from ..calc.quant_bytes import SIGN_BYTES, STORAGE_MODES, storage_mode_bytes  # noqa: F401
from ..calc.units import DEFAULT_STEP
from .base import check_queries
from .quantized import QuantizedKVCache
from .sdpa import quantized_sdpa, sdpa

__all__ = ["RandomizedHadamard", "TurboQuantKVCache", "storage_bytes", "storage_mode_errors", "MODES"]

MODES = STORAGE_MODES
storage_bytes = storage_mode_bytes   # the pure count lives in calc (one source for the lesson and the checker)


class RandomizedHadamard:
    """x -> H·(s ⊙ x)/√d on the last axis; inverse y -> s ⊙ (H·y)/√d."""

    def __init__(self, dim: int, seed: int = 0):
        if not isinstance(dim, int) or dim < 1 or dim & (dim - 1) or dim > 8192:
            raise ValueError(f"dim must be a power of two in [1, 8192] (a Sylvester Hadamard size), got {dim!r}")
        self.dim = dim
        rng = np.random.default_rng(seed)
        self.signs = mx.array(rng.choice(np.array([-1, 1], dtype=np.int8), dim))   # (d,) int8

    def rotate(self, x: mx.array) -> mx.array:
        """R·x over the last axis (x (..., d)), in x's dtype."""
        return mx.hadamard_transform(x * self.signs.astype(x.dtype))

    def inverse(self, y: mx.array) -> mx.array:
        """Rᵀ·y over the last axis."""
        return mx.hadamard_transform(y) * self.signs.astype(y.dtype)

    def matrix(self) -> np.ndarray:
        """The plain reference: R = H·diag(s)/√d as a float64 (d, d) array (Sylvester construction)."""
        h = np.ones((1, 1))
        while h.shape[0] < self.dim:
            h = np.block([[h, h], [h, -h]])
        return h * np.array(self.signs, dtype=np.float64)[None, :] / math.sqrt(self.dim)

    @property
    def nbytes(self) -> int:
        return self.signs.nbytes


class TurboQuantKVCache(QuantizedKVCache):
    """QuantizedKVCache of R·k and R·v; dense reads rotate back, ``attend`` rotates the query instead."""

    def __init__(self, bits: int = 4, group_size: int = 64, step: int = DEFAULT_STEP,
                 full_precision_tokens: int = 0, max_size: int | None = None, seed: int = 0):
        super().__init__(bits, group_size, step, full_precision_tokens, max_size)
        self.seed = seed
        self.key_rotation: RandomizedHadamard | None = None     # built at the first update (d_k, d_v)
        self.value_rotation: RandomizedHadamard | None = None

    def _rotations(self, keys, values):
        if self.key_rotation is None:
            k = RandomizedHadamard(keys.shape[-1], self.seed)   # validates d before anything is stored
            v = RandomizedHadamard(values.shape[-1], self.seed + 1)
            self.key_rotation, self.value_rotation = k, v
        return self.key_rotation, self.value_rotation

    def update_and_fetch_quantized(self, keys: mx.array, values: mx.array):
        """Store S new tokens rotated; return the QuantizedKV of the visible tokens, in the rotated basis."""
        self._check(keys, values)            # bad input raises before the rotation is fixed
        rk, rv = self._rotations(keys, values)
        return super().update_and_fetch(rk.rotate(keys), rv.rotate(values))

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        """The reference read: store, then dequantize and rotate back; returns dense (keys, values)."""
        fetched = self.update_and_fetch_quantized(keys, values)
        dtype = keys.dtype
        out = []
        for part, recent, rot in ((fetched.keys, fetched.recent_keys, self.key_rotation),
                                  (fetched.values, fetched.recent_values, self.value_rotation)):
            pieces = []
            if part is not None:
                pieces.append(mx.dequantize(*part, group_size=self.group_size, bits=self.bits).astype(dtype))
            if recent is not None and recent.shape[2]:
                pieces.append(recent)
            out.append(rot.inverse(pieces[0] if len(pieces) == 1 else mx.concatenate(pieces, axis=2)))
        return out[0], out[1]

    def attend(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float | None = None) -> mx.array:
        """``cache.attend`` (the model's call, :mod:`kvsim.cache.dispatch`): store the new rows rotated and
        quantized, then :meth:`attend_codes` over everything stored."""
        check_queries(queries, keys)                     # before anything is stored
        mask = self.make_mask(queries.shape[2], window_size=None, return_array=False)
        return self.attend_codes(queries, self.update_and_fetch_quantized(keys, values), mask, scale)

    def attend_codes(self, q: mx.array, fetched, mask=None, scale: float | None = None) -> mx.array:
        """softmax((R q)·(R k)ᵀ)·(R v), rotated back once: attention over the codes, no dequantized copy."""
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        out = quantized_sdpa(self.key_rotation.rotate(q), fetched.keys, fetched.values, mask, scale,
                             group_size=self.group_size, bits=self.bits,
                             recent_keys=fetched.recent_keys, recent_values=fetched.recent_values)
        return self.value_rotation.inverse(out)

    @property
    def nbytes(self) -> int:
        signs = 0 if self.key_rotation is None else self.key_rotation.nbytes + self.value_rotation.nbytes
        return super().nbytes + signs


def _relative_error(out: mx.array, exact: mx.array) -> float:
    return float(mx.linalg.norm((out - exact).flatten()) / mx.linalg.norm(exact.flatten()))


def storage_mode_errors(q: mx.array, k: mx.array, v: mx.array, mask=None, bits=(2, 3, 4, 6, 8),
                        group_size: int = 64, seed: int = 0) -> list[dict]:
    """One row per (mode, bits): attention-output relative error and exact bytes of that storage.

    q (B, H_q, L, D), k/v (B, H_kv, T, D) float32; mask as :func:`~kvsim.cache.sdpa.sdpa` takes it.
    Each quantized mode runs a real cache (one update of all T tokens; step = T so every allocated
    slot is filled and the byte count is the arrays' nbytes); scales and biases in k's dtype.
    """
    B, H, T, dk = k.shape
    exact = sdpa(q, k, v, mask)
    rows = []
    half = sdpa(q, k.astype(mx.float16), v.astype(mx.float16), mask).astype(mx.float32)
    fp16 = storage_bytes("fp16", T * B, H, dk, v.shape[-1])
    rows.append({"mode": "fp16", "bits": 16, **fp16, "bits_per_element": 8 * fp16["total"] / (k.size + v.size),
                 "relative_error": _relative_error(half, exact)})
    for b in bits:
        uniform = QuantizedKVCache(b, group_size, step=T)
        fetched = uniform.update_and_fetch(k, v)
        out_u = quantized_sdpa(q, fetched.keys, fetched.values, mask, group_size=group_size, bits=b)
        rotated = TurboQuantKVCache(b, group_size, step=T, seed=seed)
        out_r = rotated.attend_codes(q, rotated.update_and_fetch_quantized(k, v), mask)
        for mode, cache, out in (("uniform", uniform, out_u), ("rotated", rotated, out_r)):
            counted = storage_bytes(mode, T * B, H, dk, v.shape[-1], b, group_size, scale_bytes=k.dtype.size)
            rows.append({"mode": mode, "bits": b, **counted, "nbytes": cache.nbytes,
                         "bits_per_element": 8 * counted["total"] / (k.size + v.size),
                         "relative_error": _relative_error(out, exact)})
    return rows
