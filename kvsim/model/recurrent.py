"""Recurrent mixers: a fixed-size state per sequence instead of a growing K/V cache.

Contract
- Four families, one class each, built from a ``recurrent`` :class:`~kvsim.calc.config.LayerSpec`;
  every dimension is read back from ``layer.state_shapes`` so the state the layer keeps has
  exactly the calculator's shapes (plus a leading batch axis):
  * ``mamba``  (Mamba-1 selective SSM): conv (K-1, d_inner), ssm (d_inner, d_state);
  * ``mamba2`` (Mamba-2, scalar decay per head): conv (K-1, d_inner + 2·n_groups·d_state),
    ssm (n_heads, head_dim, d_state);
  * ``gated_deltanet`` (Qwen3-Next linear attention): conv (K-1, 2·n_k·d_k + n_v·d_v),
    ssm (n_v, d_v, d_k) as mlx-lm lays it out: S ← αS + β (v − S k) kᵀ, o = S q;
  * ``rg_lru`` (RecurrentGemma / Griffin): conv (K-1, width), ssm (width,): h ← a⊙h + √(1−a²)⊙(i⊙x).
- Every family starts with a causal depthwise convolution of width K whose last K-1 inputs are the
  ``conv`` state, then a scan over the tokens that carries the ``ssm`` state.
- State lives in a RecurrentStateCache, by name (``cache["conv"]``, ``cache["ssm"]``); with
  ``cache=None`` the layer starts from zeros (the no-cache baseline re-runs the whole sequence),
  each tensor in the dtype :meth:`LayerSpec.state_dtypes` gives for the activations' dtype.
- The scan runs in the SSM state's dtype (fp32 where the reference keeps it so, whatever the
  activations' dtype); the conv runs in the activations' dtype; outputs are cast back to it.
  With :class:`~kvsim.model.layers.Rows` the per-row states are stacked, scanned together and
  written back row by row.
- Besides the state shapes a mixer reads only typed fields of its ModelSpec: ``hidden_size``,
  ``rms_norm_eps``, ``time_step_rank`` (Mamba; None = ⌈hidden/16⌉), ``linear_num_key_heads``
  (Gated DeltaNet; 0 = as many as value heads).
- The scans are plain Python loops over tokens: short, readable, exact (no chunked parallel scan).
"""

from __future__ import annotations

import math
import operator

import mlx.core as mx
import mlx.nn as nn

from ..cache.base import dtype_name, mx_dtype
from ..calc.config import LayerSpec, ModelSpec
from .layers import WeightInit, rms_norm, transposed
from .state import load_states, save_states

__all__ = ["Mamba", "Mamba2", "GatedDeltaNet", "RGLRU", "MIXERS"]

# the projections each mixer multiplies by, read through layers.transposed (w.T of each, made once per weights)
_MAMBA_WEIGHTS = operator.itemgetter("w_in", "w_x", "w_dt", "w_out")
_MAMBA2_WEIGHTS = operator.itemgetter("w_in", "w_out")
_DELTANET_WEIGHTS = operator.itemgetter("w_qkv", "w_b", "w_a", "w_z", "w_out")
_RGLRU_WEIGHTS = operator.itemgetter("w_y", "w_x", "w_gate_x", "w_gate_a", "w_out")


def causal_conv(x: mx.array, state: mx.array, weight: mx.array, bias: mx.array):
    """Depthwise causal conv: out_t = Σ_k w_k ⊙ x_{t-K+1+k} + b, with the K-1 previous inputs in ``state``.

    x (B, L, C), state (B, K-1, C), weight (K, C) -> out (B, L, C), new state (B, K-1, C).
    """
    K, L = weight.shape[0], x.shape[1]
    padded = mx.concatenate([state.astype(x.dtype), x], axis=1)        # (B, K-1+L, C)
    out = sum(padded[:, k:k + L] * weight[k] for k in range(K)) + bias
    return out, padded[:, L:]


class _Mixer(nn.Module):
    """Shared plumbing: read the state, run :meth:`mix`, write the state back."""

    def __init__(self, layer: LayerSpec, spec: ModelSpec):
        super().__init__()
        if layer.kind != "recurrent" or layer.recurrent_family != self.family:
            raise ValueError(f"{type(self).__name__} needs a recurrent layer of family "
                             f"{self.family!r}, got {layer.kind!r}/{layer.recurrent_family!r}")
        self.layer = layer                 # a frozen dataclass: a plain attribute, not a parameter
        self.eps = spec.rms_norm_eps

    @property
    def state_shapes(self) -> dict:
        """State name -> shape per sequence, exactly ``LayerSpec.state_shapes``."""
        return dict(self.layer.state_shapes)

    def __call__(self, x: mx.array, cache=None, kv_dtype=None) -> mx.array:
        # kv_dtype is for K/V caches; the state keeps the RecurrentStateCache's own dtypes
        dtypes = {n: mx_dtype(d) for n, d in self.layer.state_dtypes(dtype_name(x.dtype))}
        states = load_states(cache, self.state_shapes, x.shape[0], dtypes)
        y, new_states = self.mix(x, states)
        save_states(cache, new_states, x.shape[1])
        return y.astype(x.dtype)


class Mamba(_Mixer):
    """Mamba-1: h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t x_t, y_t = C_t·h_t + D x_t, gated by silu(z)."""

    family = "mamba"

    def __init__(self, layer: LayerSpec, spec: ModelSpec, init: WeightInit):
        super().__init__(layer, spec)
        hidden_size = spec.hidden_size
        k1, d_inner = self.state_shapes["conv"]
        d_state = self.state_shapes["ssm"][1]
        dt_rank = spec.time_step_rank or math.ceil(hidden_size / 16)  # None: "auto"
        self.d_inner, self.d_state, self.dt_rank = d_inner, d_state, dt_rank
        self.w_in = init.linear(2 * d_inner, hidden_size)
        self.conv_w = init.normal((k1 + 1, d_inner), (k1 + 1) ** -0.5)
        self.conv_b = mx.zeros((d_inner,))
        self.w_x = init.linear(dt_rank + 2 * d_state, d_inner)
        self.w_dt = init.linear(d_inner, dt_rank)
        # softplus(dt_bias) spread over [1e-3, 1e-1] as in Mamba's initialisation
        dt = mx.exp(init.uniform((d_inner,), math.log(1e-3), math.log(1e-1)))
        self.dt_bias = dt + mx.log(-mx.expm1(-dt))
        self.A_log = mx.log(mx.broadcast_to(mx.arange(1, d_state + 1, dtype=mx.float32), (d_inner, d_state)))
        self.D = mx.ones((d_inner,))
        self.w_out = init.linear(hidden_size, d_inner)

    def mix(self, x, states):
        w_in_t, w_x_t, w_dt_t, w_out_t = transposed(self, _MAMBA_WEIGHTS)
        xs, z = mx.split(x @ w_in_t, 2, axis=-1)
        xs, conv = causal_conv(xs, states["conv"], self.conv_w, self.conv_b)
        xs = nn.silu(xs)
        dbc = xs @ w_x_t
        dt, Bm, Cm = mx.split(dbc, [self.dt_rank, self.dt_rank + self.d_state], axis=-1)
        dt = nn.softplus(dt @ w_dt_t + self.dt_bias)           # (B, L, d_inner)
        A = -mx.exp(self.A_log)                                       # (d_inner, d_state)
        h, ys = states["ssm"], []                                      # scan in the state's dtype
        for t in range(x.shape[1]):
            h = mx.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * xs[:, t])[..., None] * Bm[:, t, None, :]
            ys.append((h @ Cm[:, t, :, None])[..., 0] + self.D * xs[:, t])   # (B, d_inner)
        y = mx.stack(ys, axis=1).astype(x.dtype) * nn.silu(z)
        return y @ w_out_t, {"conv": conv, "ssm": h}


class Mamba2(_Mixer):
    """Mamba-2: per-head scalar decay, h_t = exp(Δ_t a) h_{t-1} + Δ_t x_t B_tᵀ, y_t = h_t C_t + D x_t."""

    family = "mamba2"

    def __init__(self, layer: LayerSpec, spec: ModelSpec, init: WeightInit):
        super().__init__(layer, spec)
        hidden_size = spec.hidden_size
        k1, conv_dim = self.state_shapes["conv"]
        n_heads, head_dim, d_state = self.state_shapes["ssm"]
        d_inner = n_heads * head_dim
        groups = (conv_dim - d_inner) // (2 * d_state)
        if groups < 1 or d_inner + 2 * groups * d_state != conv_dim or n_heads % groups:
            raise ValueError(f"mamba2 state shapes are inconsistent: conv width {conv_dim} != "
                             f"d_inner {d_inner} + 2·n_groups·d_state {d_state}")
        self.n_heads, self.head_dim, self.d_state, self.groups = n_heads, head_dim, d_state, groups
        self.d_inner = d_inner
        self.w_in = init.linear(d_inner + conv_dim + n_heads, hidden_size)   # z, xBC, dt
        self.conv_w = init.normal((k1 + 1, conv_dim), (k1 + 1) ** -0.5)
        self.conv_b = mx.zeros((conv_dim,))
        dt = mx.exp(init.uniform((n_heads,), math.log(1e-3), math.log(1e-1)))
        self.dt_bias = dt + mx.log(-mx.expm1(-dt))
        self.A_log = mx.log(init.uniform((n_heads,), 1.0, 16.0))
        self.D = mx.ones((n_heads,))
        self.norm = mx.ones((d_inner,))
        self.w_out = init.linear(hidden_size, d_inner)

    def mix(self, x, states):
        B, L, _ = x.shape
        conv_width = self.d_inner + 2 * self.groups * self.d_state      # x, B, C go through the conv
        w_in_t, w_out_t = transposed(self, _MAMBA2_WEIGHTS)
        z, xbc, dt = mx.split(x @ w_in_t, [self.d_inner, self.d_inner + conv_width], axis=-1)
        xbc, conv = causal_conv(xbc, states["conv"], self.conv_w, self.conv_b)
        xbc = nn.silu(xbc)
        xs, Bm, Cm = mx.split(xbc, [self.d_inner, self.d_inner + self.groups * self.d_state], axis=-1)
        xs = xs.reshape(B, L, self.n_heads, self.head_dim)
        rep = self.n_heads // self.groups                              # heads sharing one B/C group
        Bm = mx.repeat(Bm.reshape(B, L, self.groups, self.d_state), rep, axis=2)
        Cm = mx.repeat(Cm.reshape(B, L, self.groups, self.d_state), rep, axis=2)
        dt = nn.softplus(dt + self.dt_bias)                            # (B, L, n_heads)
        decay = mx.exp(dt * -mx.exp(self.A_log))
        h, ys = states["ssm"], []                                      # scan in the state's dtype
        for t in range(L):
            h = decay[:, t, :, None, None] * h + (dt[:, t, :, None] * xs[:, t])[..., None] * Bm[:, t, :, None, :]
            ys.append((h @ Cm[:, t, :, :, None])[..., 0] + self.D[:, None] * xs[:, t])
        y = mx.stack(ys, axis=1).reshape(B, L, self.d_inner).astype(x.dtype)
        y = rms_norm(y * nn.silu(z), self.norm, self.eps)
        return y @ w_out_t, {"conv": conv, "ssm": h}


class GatedDeltaNet(_Mixer):
    """Gated delta rule: S ← exp(g)·S; S ← S + β (v − S k) kᵀ; o = S q (per value head, S is d_v × d_k)."""

    family = "gated_deltanet"

    def __init__(self, layer: LayerSpec, spec: ModelSpec, init: WeightInit):
        super().__init__(layer, spec)
        hidden_size = spec.hidden_size
        k1, conv_dim = self.state_shapes["conv"]
        n_v, d_v, d_k = self.state_shapes["ssm"]                       # mlx-lm's (Hv, Dv, Dk)
        n_k = spec.linear_num_key_heads or n_v
        if 2 * n_k * d_k + n_v * d_v != conv_dim or n_v % n_k:
            raise ValueError(f"gated_deltanet conv width {conv_dim} != 2·linear_num_key_heads·d_k + n_v·d_v")
        self.n_k, self.n_v, self.d_k, self.d_v = n_k, n_v, d_k, d_v
        self.w_qkv = init.linear(conv_dim, hidden_size)
        self.w_z = init.linear(n_v * d_v, hidden_size)
        self.w_b = init.linear(n_v, hidden_size)
        self.w_a = init.linear(n_v, hidden_size)
        self.conv_w = init.normal((k1 + 1, conv_dim), (k1 + 1) ** -0.5)
        self.conv_b = mx.zeros((conv_dim,))
        self.A_log = mx.log(init.uniform((n_v,), 1.0, 16.0))
        self.dt_bias = mx.zeros((n_v,))
        self.norm = mx.ones((d_v,))
        self.w_out = init.linear(hidden_size, n_v * d_v)

    def mix(self, x, states):
        B, L, _ = x.shape
        w_qkv_t, w_b_t, w_a_t, w_z_t, w_out_t = transposed(self, _DELTANET_WEIGHTS)
        qkv, conv = causal_conv(x @ w_qkv_t, states["conv"], self.conv_w, self.conv_b)
        qkv = nn.silu(qkv)
        nk = self.n_k * self.d_k
        q = qkv[..., :nk].reshape(B, L, self.n_k, self.d_k)
        k = qkv[..., nk:2 * nk].reshape(B, L, self.n_k, self.d_k)
        v = qkv[..., 2 * nk:].reshape(B, L, self.n_v, self.d_v)
        rep = self.n_v // self.n_k                                      # value heads per key head
        q = mx.repeat(q * mx.rsqrt((q * q).sum(-1, keepdims=True) + 1e-6), rep, axis=2) * self.d_k ** -0.5
        k = mx.repeat(k * mx.rsqrt((k * k).sum(-1, keepdims=True) + 1e-6), rep, axis=2)
        beta = mx.sigmoid(x @ w_b_t)                               # (B, L, n_v) write strength
        g = -mx.exp(self.A_log) * nn.softplus(x @ w_a_t + self.dt_bias)   # log decay
        S, outs = states["ssm"], []                                     # scan in the state's dtype
        for t in range(L):
            S = mx.exp(g[:, t])[..., None, None] * S                      # (B, n_v, d_v, d_k)
            kt = k[:, t][:, :, None, :]                                 # (B, n_v, 1, d_k)
            predicted = (S * kt).sum(axis=-1)                           # S k: (B, n_v, d_v)
            delta = (v[:, t] - predicted) * beta[:, t, :, None]
            S = S + delta[..., None] * kt
            outs.append((S * q[:, t][:, :, None, :]).sum(axis=-1))      # S q: (B, n_v, d_v)
        o = rms_norm(mx.stack(outs, axis=1).astype(x.dtype), self.norm, self.eps)  # (B, L, n_v, d_v)
        o = o * nn.silu((x @ w_z_t).reshape(B, L, self.n_v, self.d_v))
        return o.reshape(B, L, -1) @ w_out_t, {"conv": conv, "ssm": S}


class RGLRU(_Mixer):
    """Griffin's recurrent block: gelu(W_y x) ⊙ RG-LRU(conv(W_x x)), then W_out."""

    family = "rg_lru"

    def __init__(self, layer: LayerSpec, spec: ModelSpec, init: WeightInit):
        super().__init__(layer, spec)
        hidden_size = spec.hidden_size
        k1, width = self.state_shapes["conv"]
        if self.state_shapes["ssm"] != (width,):
            raise ValueError(f"rg_lru ssm state must be (width,) = ({width},), got {self.state_shapes['ssm']}")
        self.w_y = init.linear(width, hidden_size)
        self.w_x = init.linear(width, hidden_size)
        self.conv_w = init.normal((k1 + 1, width), (k1 + 1) ** -0.5)
        self.conv_b = mx.zeros((width,))
        self.w_gate_x = init.linear(width, width)
        self.w_gate_a = init.linear(width, width)
        # softplus(a_param) chosen so a = exp(-8·softplus) lies in [0.9, 0.999] at gate 1
        a = init.uniform((width,), 0.9, 0.999)
        c = -mx.log(a) / 8
        self.a_param = c + mx.log(-mx.expm1(-c))
        self.w_out = init.linear(hidden_size, width)

    def mix(self, x, states):
        w_y_t, w_x_t, w_gate_x_t, w_gate_a_t, w_out_t = transposed(self, _RGLRU_WEIGHTS)
        y = nn.gelu_approx(x @ w_y_t)
        xs, conv = causal_conv(x @ w_x_t, states["conv"], self.conv_w, self.conv_b)
        gate_x = mx.sigmoid(xs @ w_gate_x_t)
        log_a = -8.0 * mx.sigmoid(xs @ w_gate_a_t) * nn.softplus(self.a_param)
        a = mx.exp(log_a)
        inp = xs * gate_x * mx.sqrt(1 - mx.exp(2 * log_a))             # normalised input
        h, hs = states["ssm"], []                                      # scan in the state's dtype
        for t in range(x.shape[1]):
            h = a[:, t] * h + inp[:, t]                                 # (B, width)
            hs.append(h)
        return (mx.stack(hs, axis=1).astype(x.dtype) * y) @ w_out_t, {"conv": conv, "ssm": h}


MIXERS = {cls.family: cls for cls in (Mamba, Mamba2, GatedDeltaNet, RGLRU)}
