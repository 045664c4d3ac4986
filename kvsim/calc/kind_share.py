"""Each attention kind's share of a model's layers and of its KV bytes (lesson 04's bar).

Contract (pure, over :func:`kvsim.calc.window_bytes.bytes_by_kind`)
- :func:`kind_shares` returns ``{kind: {"layers": n, "layers %": ..., "bytes": b, "bytes %": ...}}``
  for the cache kinds of a model at T tokens; both percentages sum to 100 over the cache layers.
"""

from __future__ import annotations

from .config import ModelSpec
from .window_bytes import bytes_by_kind


def kind_shares(spec: ModelSpec, tokens: int, kv_dtype="bf16") -> dict:
    """Per cache kind: layer count and bytes at ``tokens``, each also as % of the cache layers' total."""
    by_bytes = bytes_by_kind(spec, tokens, kv_dtype=kv_dtype)
    layers = {k: spec.count(k) for k in by_bytes}
    n, total = sum(layers.values()), sum(by_bytes.values())
    return {k: {"layers": layers[k], "layers %": 100 * layers[k] / n, "bytes": by_bytes[k],
                "bytes %": 100 * by_bytes[k] / total if total else 0.0} for k in by_bytes}
