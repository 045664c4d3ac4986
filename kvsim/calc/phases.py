"""Prefill and decode of a registry model on the roofline: FLOPs, bytes, arithmetic intensity, floors.

Contract (pure arithmetic over :mod:`kvsim.calc.roofline`, :mod:`kvsim.calc.memory` and
:mod:`kvsim.calc.weights`; no MLX)
- :func:`weights_read_bytes`: the weight bytes one step reads, THE definition
  (:func:`kvsim.calc.roofline.step_weight_bytes`) applied to the model's active parameters: all but
  the input embedding table, of which one row (Llama 3.1 8B in bf16: 15.01 GB, not the 16.06 GB of
  all its parameters). For a mixture of experts a batch touches more experts: a lower bound there.
- :func:`matmul_params`: parameters a token is multiplied by, 2 FLOPs each: the active parameters
  without the input table (untied), or with it (tied: the table is also the output head).
- :func:`decode_cost` (B sequences, one token each, T tokens cached): FLOPs =
  :func:`kvsim.calc.roofline.step_flops`; bytes = weights + :func:`kvsim.calc.memory.read_bytes_per_step`.
- :func:`prefill_cost` (one prompt of P tokens): FLOPs = 2·P·matmul params + causal attention,
  query i attending to the keys a layer keeps at i (Σ_i :func:`kvsim.calc.roofline.attention_flops`
  at i); bytes = the least a prefill must move: the weights once and the P tokens' cache written once.
- :func:`floors`: the bandwidth floor (bytes / bytes per s), the compute floor (FLOPs / FLOP per s),
  which of the two is higher (the roofline's verdict: "memory" or "compute"), and for a measured
  time how far above each floor it ran. :func:`point_rows` / :func:`roofline_verdict`: the same for measured
  decode points (:func:`kvsim.measure.roofline.decode_point` dicts), as table rows and one sentence.
- :func:`ridge_batch`: the batch at which decode's two floors meet (weights only: the machine
  balance × b / 2), or None when the caches keep the intensity below the ridge at any batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import memory, roofline
from .config import ModelSpec
from .units import InputError, positive_int
from .weights import param_count, weights_dtype_bytes

__all__ = ["Cost", "weights_read_bytes", "matmul_params", "decode_cost", "prefill_cost", "floors", "point_rows",
           "roofline_verdict"]


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes read of one step (numbers, or arrays over tokens)."""

    flops: object
    read_bytes: object

    @property
    def intensity(self):
        """FLOPs per byte read."""
        return roofline.arithmetic_intensity(self.flops, self.read_bytes)


def weights_read_bytes(spec: ModelSpec, weights_dtype: str = "bf16") -> int:
    """Weight bytes a step reads: step_weight_bytes(active · b, embedding · b, V, tied)."""
    b, count = weights_dtype_bytes(weights_dtype), param_count(spec)
    return roofline.step_weight_bytes(count.active * b, count.embedding * b, spec.vocab_size,
                                      spec.tie_word_embeddings)


def matmul_params(spec: ModelSpec) -> int:
    """Active parameters a token is multiplied by: all but the input table (tied: the table is the head)."""
    count = param_count(spec)
    return count.active if spec.tie_word_embeddings else count.active - count.embedding


def decode_cost(spec: ModelSpec, tokens, batch: int = 1, kv_dtype="bf16", weights_dtype: str = "bf16") -> Cost:
    """One decode step of B sequences at context T: step_flops, and weights + B · cache read."""
    positive_int("batch", batch)
    w = weights_read_bytes(spec, weights_dtype)
    cache = np.asarray(memory.read_bytes_per_step(spec, tokens, batch, kv_dtype, model_dtype=weights_dtype),
                       dtype=float)
    flops = roofline.step_flops(spec, matmul_params(spec), tokens, batch)
    read = w + cache
    return Cost(flops, float(read) if np.ndim(tokens) == 0 else read)


def prefill_cost(spec: ModelSpec, prompt_tokens: int, kv_dtype="bf16", weights_dtype: str = "bf16") -> Cost:
    """A prefill of P tokens: 2·P·matmul params + Σ_(i=1..P) attention over i keys; weights + P tokens' cache."""
    p = positive_int("prompt_tokens", prompt_tokens)
    attention = float(np.sum(roofline.attention_flops(spec, np.arange(1, p + 1))))
    flops = 2.0 * p * matmul_params(spec) + attention
    written = float(memory.kv_bytes(spec, p, 1, kv_dtype)) + memory.fixed_state_bytes(spec, 1, None, weights_dtype)
    return Cost(flops, weights_read_bytes(spec, weights_dtype) + written)


def floors(cost: Cost, bytes_per_s: float, flops_per_s: float, seconds=None) -> dict:
    """Bandwidth and compute floors (s) of a step, the higher one's name, and measured time / each floor."""
    if not (bytes_per_s > 0 and flops_per_s > 0):
        raise InputError(f"bytes_per_s and flops_per_s must be > 0, got {bytes_per_s!r}, {flops_per_s!r}")
    bandwidth = roofline.floor_seconds(float(cost.read_bytes), bytes_per_s)
    compute = float(cost.flops) / flops_per_s
    out = {"bandwidth_floor_s": bandwidth, "compute_floor_s": compute,
           "bound": "memory" if bandwidth >= compute else "compute"}
    if seconds is not None:
        out |= {"over_bandwidth_floor": seconds / bandwidth, "over_compute_floor": seconds / compute}
    return out


def point_rows(points: list[dict], bytes_per_s: float, flops_per_s: float) -> list[dict]:
    """Measured decode points (``read_bytes``, ``flops``, ``step_ms["kvsim"]``) against both floors, one row each."""
    rows = []
    for p in points:
        seconds = p["step_ms"]["kvsim"] / 1e3
        f = floors(Cost(p["flops"], p["read_bytes"]), bytes_per_s, flops_per_s, seconds)
        rows.append({"context": p["context_tokens"], "batch": p["batch"], "read MB": round(p["read_bytes"] / 1e6, 1),
                     "FLOP/B": round(p["flops"] / p["read_bytes"], 2), "step ms": round(1e3 * seconds, 2),
                     "bandwidth floor ms": round(1e3 * f["bandwidth_floor_s"], 2),
                     "compute floor ms": round(1e3 * f["compute_floor_s"], 2), "bound by": f["bound"],
                     "× bandwidth floor": round(f["over_bandwidth_floor"], 1),
                     "× compute floor": round(f["over_compute_floor"], 1)})
    return rows


def roofline_verdict(rows: list[dict]) -> str:
    """One sentence on where measured points sit: which floor binds and how far above each they ran."""
    compute = sum(r["bound by"] == "compute" for r in rows)
    bw = [r["× bandwidth floor"] for r in rows]
    cf = [r["× compute floor"] for r in rows]
    side = ("right of the ridge (compute-bound)" if compute == len(rows) else
            "left of the ridge (memory-bound)" if compute == 0 else
            f"on both sides of the ridge ({compute} compute-bound)")
    return (f"{len(rows)} points, all {side}" if compute in (0, len(rows)) else f"{len(rows)} points {side}") + (
        f"; they ran at {min(bw):.1f}-{max(bw):.1f}× the bandwidth floor and {min(cf):.1f}-{max(cf):.1f}× "
        "the compute floor")


def ridge_batch(spec: ModelSpec, tokens: int, bytes_per_s: float, flops_per_s: float, kv_dtype="bf16"):
    """The batch B at which decode's compute floor meets its bandwidth floor, or None if it never does.

    Per sequence a step does f FLOPs and reads c cache bytes; the weights W are read once for all:
    B·f / FLOP/s = (W + B·c) / bytes/s  ⇒  B = (W / bytes/s) / (f / FLOP/s − c / bytes/s).
    """
    one = decode_cost(spec, tokens, 1, kv_dtype)
    w = weights_read_bytes(spec)
    per_seq = one.flops / flops_per_s - (one.read_bytes - w) / bytes_per_s
    return (w / bytes_per_s) / per_seq if per_seq > 0 else None
