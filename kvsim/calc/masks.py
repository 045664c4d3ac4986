"""Which keys a query may see: attention masks of full, sliding (with sink tokens) and chunked layers,
and where a ring buffer keeps each token.

Contract (pure numpy, the same rules as kvsim's caches)
- Positions are 0-based: token t sits at position t and is the (t+1)-th token of the sequence.
- :func:`attention_mask` is the query × key matrix, True where query q may attend to key k:
  full ``k <= q``; sliding ``k <= q and (k < sinks or k > q - window)`` (``window`` recent tokens,
  the query's own included, as ``RotatingKVCache(max_size=window + sinks, keep=sinks)``);
  chunked ``C·⌊q/C⌋ <= k <= q`` (``ChunkedKVCache(C)``).
- :func:`ring_slot`: the slot of position t in such a ring, t for a sink, else
  ``keep + (t - keep) mod (window + rewind_tokens)``; :func:`ring_contents` lists what every slot
  holds after the token at ``newest`` was written (-1: never written).
"""

from __future__ import annotations

import numpy as np

from .config import Kind
from .units import InputError, nonnegative_int, positive_int

MASK_KINDS = Kind.KV_HEADS  # the three attention patterns: full, sliding, chunked


def attention_mask(tokens: int, kind: str = "full", window: int | None = None, chunk: int | None = None,
                   sinks: int = 0) -> np.ndarray:
    """(tokens, tokens) bool: row q = query position, column k = key position, True = may attend."""
    positive_int("tokens", tokens)
    nonnegative_int("sinks", sinks)
    q, k = np.arange(tokens)[:, None], np.arange(tokens)[None, :]
    causal = k <= q
    if kind == "full":
        return causal
    if kind == "sliding":
        positive_int("window", window)
        return causal & ((k < sinks) | (k > q - window))
    if kind == "chunked":
        positive_int("chunk", chunk)
        return causal & (k >= (q // chunk) * chunk)
    raise InputError(f"kind {kind!r} is not one of {', '.join(MASK_KINDS)}")


def ring_slot(position: int, window: int, keep: int = 0, rewind_tokens: int = 0) -> int:
    """Slot of ``position`` in a ring with ``keep`` sinks: t if t < keep, else keep + (t − keep) mod ring."""
    nonnegative_int("position", position)
    positive_int("window", window)
    nonnegative_int("keep", keep)
    if position < keep:
        return position
    return keep + (position - keep) % (window + nonnegative_int("rewind_tokens", rewind_tokens))


def ring_contents(newest: int, window: int, keep: int = 0) -> np.ndarray:
    """Position held by each of the keep + window slots once position ``newest`` is written (-1: empty)."""
    slots = np.full(keep + window, -1, dtype=np.int64)
    for t in range(nonnegative_int("newest", newest) + 1):
        slots[ring_slot(t, window, keep)] = t
    return slots
