"""What one decode step touches, for the roofline measurements: caches filled without a prefill, weight bytes read.

Contract
- :func:`fill_caches` writes T tokens of seeded random keys/values straight into a model's caches
  (``update_and_fetch``; ``advance`` on recurrent states), not by a prefill: a prefill of T tokens costs
  O(T²) and minutes at these sizes, while a decode step reads the same bytes whatever the values are (so each
  layer draws ``FILL_PERIOD_TOKENS`` random rows and repeats them along T: drawing every row cost more than
  the steps timed after it). It
  fills mlx-lm's caches as well as kvsim's. A sliding layer is written in chunks of at most its window: no
  cache, whatever its layout, holds more than twice the window while being filled.
- :func:`model_weights_read_bytes`: the weights one step reads (every weight except the embedding table, of
  which one row, :func:`kvsim.calc.roofline.step_weight_bytes`); :func:`model_matmul_params`: the parameters it
  multiplies by. :mod:`kvsim.measure.roofline` times the steps.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ..calc.roofline import step_weight_bytes
from ..decode import cache_dtypes


def model_weights_read_bytes(model) -> int:
    """Weight bytes one decode step reads: all parameters but the embedding table, plus one of its rows."""
    return step_weight_bytes(model.weight_bytes, model.embed.nbytes, model.spec.vocab_size)


def model_matmul_params(model) -> int:
    """Parameters a decode step multiplies by (all but the embedding table): 2 FLOPs each per sequence."""
    return sum(p.size for _, p in nn.utils.tree_flatten(model.parameters())) - model.embed.size


FILL_PERIOD_TOKENS = 256   # fill_caches draws this many random rows per layer and repeats them


def _random_rows(shape, dtype, key) -> mx.array:
    """(B, H, T, D) uniform in [-1, 1): ``FILL_PERIOD_TOKENS`` rows drawn, repeated along T.

    A step reads the same bytes whatever the values are; drawing every row cost more than the step being timed.
    """
    batch, heads, tokens, dim = shape
    period = min(tokens, FILL_PERIOD_TOKENS)
    rows = mx.random.uniform(-1, 1, (batch, heads, period, dim), dtype=dtype, key=key)
    if period == tokens:
        return rows
    return mx.tile(rows, (1, 1, -(-tokens // period), 1))[:, :, :tokens]


def fill_caches(model, caches, tokens: int, kv_dtype=None, seed: int = 0, batch: int = 1) -> None:
    """Write ``tokens`` seeded random K/V rows for ``batch`` sequences into every attention cache.

    Recurrent states only advance. ``caches`` may be kvsim's or mlx-lm's (one per layer of ``model``).
    """
    if not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be an integer >= 0, got {tokens!r}")
    if tokens == 0:
        return
    written, _ = cache_dtypes(model, kv_dtype)
    for i, (layer, cache) in enumerate(zip(model.spec.layers, caches)):
        if cache is None:
            continue
        if layer.kind == "recurrent":
            cache.advance(tokens)            # the state's size does not depend on T
            continue
        chunk = min(tokens, layer.sliding_window or tokens)
        if layer.kind == "mla":
            shapes = [(batch, 1, chunk, layer.kv_lora_rank), (batch, 1, chunk, layer.qk_rope_head_dim)]
        else:
            h = layer.num_key_value_heads
            shapes = [(batch, h, chunk, layer.head_dim), (batch, h, chunk, layer.v_head_dim)]
        k, v = (_random_rows(s, written, mx.random.key(seed + 2 * i + j)) for j, s in enumerate(shapes))
        for start in range(0, tokens, chunk):                 # one write unless the layer is a window
            n = min(chunk, tokens - start)
            cache.update_and_fetch(k[:, :, :n], v[:, :, :n])
            mx.eval([a for a in vars(cache).values() if isinstance(a, mx.array)])
