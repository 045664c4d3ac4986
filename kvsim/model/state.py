"""Reading and writing a recurrent layer's state in its RecurrentStateCache (or in none).

Contract
- :func:`load_states` returns ``{name: (B, *shape)}`` for every state of the layer: zeros when there
  is no cache (the no-cache baseline) or the cache holds nothing yet, the cached arrays otherwise.
  For :class:`~kvsim.model.layers.Rows` the per-row states (each (1, *shape)) are stacked.
- :func:`save_states` stores the new states after ``tokens`` tokens were mixed in (and advances the
  cache's offset by that many tokens); for Rows, row r goes back to ``caches[r]``.
"""

from __future__ import annotations

import mlx.core as mx

from .layers import Rows

__all__ = ["load_states", "save_states"]


def load_states(cache, shapes: dict, batch: int, dtype) -> dict:
    """{name: (B, *shape)} from ``cache`` (zeros where nothing is stored yet)."""
    if isinstance(cache, Rows):
        if len(cache) != batch:
            raise ValueError(f"Rows holds {len(cache)} caches but the batch has {batch} rows")
        per_row = [load_states(c, shapes, 1, dtype) for c in cache.caches]
        return {name: mx.concatenate([s[name] for s in per_row], axis=0) for name in shapes}
    out = {}
    for name, shape in shapes.items():
        held = None if cache is None else cache[name]
        out[name] = mx.zeros((batch, *shape), dtype=dtype) if held is None else held
    return out


def save_states(cache, states: dict, tokens: int) -> None:
    """Write ``states`` back (cast to the cache's dtype) and advance the offset by ``tokens``."""
    if cache is None:
        return
    if isinstance(cache, Rows):
        for r, c in enumerate(cache.caches):
            save_states(c, {name: s[r:r + 1] for name, s in states.items()}, tokens)
        return
    cache.update(states, tokens)
