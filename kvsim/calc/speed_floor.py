"""The floor on decode speed, and stored vs read bytes, from the calculator alone (no measurement).

Contract (pure arithmetic over :mod:`kvsim.calc.memory`, :mod:`kvsim.calc.techniques` and the accelerator table)
- :func:`speed_floor`: the minimum decode step time of a served model on an accelerator,
  (weights read + B · cache read per step) / memory bandwidth, against context. Weights read:
  :func:`kvsim.calc.phases.weights_read_bytes` in bf16 (all active parameters but the input
  embedding table, of which one row: :func:`kvsim.calc.roofline.step_weight_bytes`).
- :func:`stored_vs_read`: what a cache stores and what one decode step reads, dense vs NSA vs DSA
  (:func:`kvsim.calc.techniques.sparse_bytes`).
"""

from __future__ import annotations

import numpy as np

from . import memory
from .hardware import get_accelerator
from .phases import weights_read_bytes
from .registry import load_model
from .techniques import sparse_bytes
from .units import InputError


def stored_vs_read(model: str = "deepseek-v3", tokens: int = 131_072, points: int = 129):
    """Tokens, {method: stored bytes}, {method: bytes read per step} for dense, NSA and DSA attention."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    parts = {m: sparse_bytes(spec, t, m) for m in ("dense", "nsa", "dsa")}
    names = {"dense": "dense / FlashAttention", "nsa": "NSA", "dsa": "DSA"}
    return (t, {names[m]: p["stored"] for m, p in parts.items()},
            {names[m]: p["read"] for m, p in parts.items()})


def speed_floor(model: str, accelerator: str, batch: int = 1, kv_dtype: str = "bf16", tokens: int = 131_072,
                points: int = 129):
    """Context tokens, and the minimum step time (s) = (weights read + B · cache read) / bandwidth.

    Weights read: the active parameters in bf16 (what one token uses; for a mixture of experts a
    batch touches more experts, so there this is a lower bound too) but the embedding table, of
    which one row (:func:`kvsim.calc.phases.weights_read_bytes`).
    """
    spec, acc = load_model(model), get_accelerator(accelerator)
    bw = acc.memory_bandwidth_bytes_per_s
    w = weights_read_bytes(spec, "bf16")
    t = np.linspace(0, tokens, points).astype(np.int64)
    read = memory.read_bytes_per_step(spec, t, batch, kv_dtype_that_fits(spec, kv_dtype))
    return t, w / bw, (w + np.asarray(read, dtype=float)) / bw


def kv_dtype_that_fits(spec, name: str):
    """``name`` with group size 64, or 32 when 64 does not divide a cached vector (head_dim 96)."""
    for group in (64, 32):
        dt = memory.parse_kv_dtype(name, group_size=group)
        try:
            memory.bytes_per_token(spec, dt)
            return dt
        except InputError:  # this group size does not divide a cached vector
            continue
    return memory.parse_kv_dtype(name)
