"""The roofline of a decode step: the weight bytes it reads, the FLOPs it does, the floors they set.

Contract (pure arithmetic; no MLX)
- :func:`step_weight_bytes` is THE definition of the weight bytes one decode step reads, used by
  :mod:`kvsim.lessons.l08_decode_speed.data`, :mod:`kvsim.measure.step_time` and the benchmarks: every
  parameter except the input embedding table, of which the step reads one row (a lookup, not a
  matmul); with tied embeddings the table is also the output head and is read whole. A batch of B
  reads B rows; the extra (B-1)·hidden elements are left out (under 0.01 % of an 8B model at B=64).
- :func:`step_flops`: 2 FLOPs per multiply-add. Weights: 2·B·(matmul parameters). Attention, per
  layer and sequence, over the keys the layer reads (:func:`kvsim.calc.memory.kept_tokens`):
  2·H·(d_k + d_v)·keys; MLA decodes absorbed, over the latent: 2·H·(2·r + d_rope)·keys.
  Recurrent layers' state updates are not counted (they are O(state), not O(context)).
- :func:`arithmetic_intensity` = FLOPs / bytes read; :func:`machine_balance` = FLOP/s / (bytes/s),
  the intensity where a kernel stops being memory-bound; :func:`floor_seconds` = bytes read /
  bandwidth, the bandwidth floor of a memory-bound step; :func:`attainable_flops_per_s` =
  min(peak FLOP/s, intensity · bandwidth), the roofline itself.
"""

from __future__ import annotations

import numpy as np

from . import memory
from .config import ModelSpec
from .units import InputError, positive_int

__all__ = ["step_weight_bytes", "attention_flops", "step_flops", "arithmetic_intensity",
           "machine_balance", "floor_seconds", "attainable_flops_per_s"]


def step_weight_bytes(param_bytes: int, embedding_bytes: int, vocab_size: int, tied: bool = False) -> int:
    """Weight bytes a decode step reads: param_bytes − embedding_bytes + one row (embedding_bytes / V).

    ``tied``: the table is also the output head, read whole, so the step reads param_bytes.
    """
    positive_int("vocab_size", vocab_size)
    if not 0 <= embedding_bytes <= param_bytes:
        raise InputError(f"embedding_bytes must be in [0, param_bytes = {param_bytes}], got {embedding_bytes}")
    if tied:
        return int(param_bytes)
    return int(param_bytes - embedding_bytes + embedding_bytes // vocab_size)


def attention_flops(spec: ModelSpec, tokens, batch: int = 1):
    """Σ_layers B·2·H·(d_k + d_v)·keys read at context T (MLA absorbed: d_k = r + d_rope, d_v = r)."""
    positive_int("batch", batch)
    t = np.asarray(tokens)
    total = np.zeros(t.shape)
    for layer in spec.layers:
        if layer.has_kv_heads:
            width = layer.head_dim + layer.v_head_dim
        elif layer.kind == "mla":
            width = 2 * layer.kv_lora_rank + layer.qk_rope_head_dim
        else:
            continue
        total = total + 2.0 * spec.num_attention_heads * width * np.asarray(memory.kept_tokens(layer, t))
    return batch * (float(total) if t.ndim == 0 else total)


def step_flops(spec: ModelSpec, matmul_params: int, tokens, batch: int = 1):
    """FLOPs of one decode step of B sequences at context T: 2·B·matmul_params + attention_flops."""
    return 2.0 * batch * matmul_params + attention_flops(spec, tokens, batch)


def arithmetic_intensity(flops, read_bytes):
    """FLOPs per byte read."""
    return flops / read_bytes


def machine_balance(flops_per_s: float, bytes_per_s: float) -> float:
    """FLOPs per byte at the ridge: below it a kernel waits on memory, above it on arithmetic."""
    return flops_per_s / bytes_per_s


def floor_seconds(read_bytes, bytes_per_s: float):
    """The bandwidth floor of a step: every byte it reads, at the measured bandwidth."""
    return read_bytes / bytes_per_s


def attainable_flops_per_s(intensity, peak_flops_per_s: float, bytes_per_s: float):
    """The roofline: min(peak FLOP/s, intensity · bandwidth)."""
    return np.minimum(peak_flops_per_s, np.asarray(intensity, dtype=float) * bytes_per_s)
