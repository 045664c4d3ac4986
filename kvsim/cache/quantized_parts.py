"""What a QuantizedKVCache hands out and how it stores rows: the return type and the buffer helpers.

Contract
- :class:`QuantizedTensor`: what ``mx.quantize`` returns, named (data, scales, biases).
- :class:`QuantizedKV`: what :meth:`kvsim.cache.quantized.QuantizedKVCache.update_and_fetch` returns;
  it also unpacks as mlx-lm's two (data, scales, biases) triples.
- :func:`grow_rows` / :func:`append_rows`: buffers of token rows grown in place and written by slice
  assignment, the oldest rows dropped when a window is full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import mlx.core as mx


class QuantizedTensor(NamedTuple):
    """What ``mx.quantize`` returns, named: data uint32 (B, H, T, D·bits/32), scales/biases (B, H, T, D/g)."""

    data: mx.array
    scales: mx.array
    biases: mx.array


@dataclass(frozen=True, eq=False)
class QuantizedKV:
    """What :meth:`QuantizedKVCache.update_and_fetch` returns; temporal order = keys, then recent_keys.

    A part that holds no token is None (``keys`` before the first token is quantized;
    ``recent_keys`` when ``full_precision_tokens`` is 0). It also unpacks as mlx-lm's answer,
    ``keys, values = cache.update_and_fetch(...)`` with two (data, scales, biases) triples, which
    mlx-lm's quantized attention reads (with the cache's ``group_size`` and ``bits``). Unpacking
    raises ValueError when full-precision recent tokens are held: attention on the triples alone
    would silently miss them (use :func:`kvsim.cache.sdpa.quantized_sdpa`).
    """

    keys: QuantizedTensor | None           # oldest T_q tokens, quantized
    values: QuantizedTensor | None
    recent_keys: mx.array | None           # newest T_r tokens, (B, H, T_r, D) in the input dtype
    recent_values: mx.array | None
    group_size: int
    bits: int

    def __iter__(self):
        """Yield (keys, values), mlx-lm's pair of quantized triples."""
        if self.recent_keys is not None and self.recent_keys.shape[2]:
            raise ValueError(f"this QuantizedKV also holds {self.recent_keys.shape[2]} full-precision tokens; "
                             "mlx-lm's (keys, values) triples cannot carry them (full_precision_tokens must be 0)")
        return iter((self.keys, self.values))

    def __len__(self) -> int:
        return 2


def grow_rows(buf: mx.array | None, cap: int, row_shape: tuple, dtype) -> mx.array:
    """``buf`` with ``cap`` token slots (axis 2), old rows copied, new rows zero."""
    old = 0 if buf is None else buf.shape[2]
    if cap <= old:
        return buf
    B, H, width = row_shape
    extra = mx.zeros((B, H, cap - old, width), dtype=dtype)
    return extra if buf is None else mx.concatenate([buf, extra], axis=2)


def append_rows(bufs, n: int, parts, drop: int):
    """Write ``parts`` after the ``n`` filled rows of ``bufs``, then drop the ``drop`` oldest rows.

    Returns (views of all n + s rows, oldest first, taken before dropping; rows held after).
    Without a drop the new rows are written in place, O(s); with one, the kept rows are shifted
    to the front of the same buffers, O(n + s). ``parts`` None means no new rows.
    """
    s = 0 if parts is None else parts[0].shape[2]
    if n + s == 0:
        return None, 0
    if drop == 0:
        for buf, part in zip(bufs, parts or []):
            buf[:, :, n:n + s] = part
        return [b[:, :, :n + s] for b in bufs], n + s
    if n == 0:  # (no buffers at all when a window of W <= R leaves no quantized slot)
        views = list(parts)
    else:
        views = [b[:, :, :n] for b in bufs]
        if s:
            views = [mx.concatenate([v, p], axis=2) for v, p in zip(views, parts)]
    keep = n + s - drop
    for buf, view in zip(bufs, views):
        if keep:
            buf[:, :, :keep] = view[:, :, drop:]
    return views, keep
