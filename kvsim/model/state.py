"""Reading and writing a recurrent layer's state in its RecurrentStateCache (or in none).

Contract
- :func:`load_states` returns ``{name: (B, *shape)}`` for every state of the layer: zeros in the
  dtype ``dtypes[name]`` when there is no cache (the no-cache baseline keeps each tensor as the
  reference implementation does, as a cache from ``make_caches`` would), else ``cache[name]`` (zeros
  until the first write, in the cache's dtype for that tensor).
  For :class:`~kvsim.model.layers.Rows` the per-row states (each (1, *shape)) are stacked.
- :func:`save_states` stores the new states after ``tokens`` tokens were mixed in, each cast to the
  cache's dtype for it, and advances the cache's offset by that many tokens
  (``cache[name] = new``, then ``cache.advance(tokens)``);
  for Rows, row r goes back to ``caches[r]``.
"""

from __future__ import annotations

import mlx.core as mx

from .layers import Rows

__all__ = ["load_states", "save_states"]


def load_states(cache, shapes: dict, batch: int, dtypes: dict) -> dict:
    """{name: (B, *shape)} from ``cache`` (zeros in ``dtypes[name]`` without a cache)."""
    if isinstance(cache, Rows):
        if len(cache) != batch:
            raise ValueError(f"Rows holds {len(cache)} caches but the batch has {batch} rows")
        per_row = [load_states(c, shapes, 1, dtypes) for c in cache.caches]
        return {name: mx.concatenate([s[name] for s in per_row], axis=0) for name in shapes}
    if cache is None:
        return {name: mx.zeros((batch, *shape), dtype=dtypes[name]) for name, shape in shapes.items()}
    return {name: cache[name] for name in shapes}      # zeros until the first write


def save_states(cache, states: dict, tokens: int) -> None:
    """Write ``states`` back (cast to the cache's dtype) and advance the offset by ``tokens``."""
    if cache is None:
        return
    if isinstance(cache, Rows):
        for r, c in enumerate(cache.caches):
            save_states(c, {name: s[r:r + 1] for name, s in states.items()}, tokens)
        return
    for name, value in states.items():
        cache[name] = value.astype(cache.dtypes[name])  # shape and dtype checked by the cache
    cache.advance(tokens)
