"""Lesson 04 (sliding windows and chunks): pure numbers for this lesson's pictures (calc and serving only; no
MLX, no drawing).

Which keys a query may see: attention masks of full, sliding (with sink tokens) and chunked layers,
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

Each attention kind's share of a model's layers and of its KV bytes (lesson 04's bar).

Contract (pure, over :func:`kvsim.calc.window_bytes.bytes_by_kind`)
- :func:`kind_shares` returns ``{kind: {"layers": n, "layers %": ..., "bytes": b, "bytes %": ...}}``
  for the cache kinds of a model at T tokens; both percentages sum to 100 over the cache layers.
- :func:`windowed_models`, :func:`window_bytes_numbers`: the window-bytes view's model list and numbers
  (bytes by kind, the window-ignoring line, the saving at T).
- :func:`position_span` and :func:`padded_history_rows`: the slot-history view's title text and its
  grid, always the same number of rows (empty rows on top) while the step slider moves.
"""

from __future__ import annotations

import numpy as np

from ...calc import memory
from ...calc.config import Kind, ModelSpec
from ...calc.counterfactual import full_attention
from ...calc.registry import load_model, model_names
from ...calc.units import InputError, nonnegative_int, positive_int
from ...calc.window_bytes import bytes_by_kind, largest_window_tokens, pattern_period, window_savings


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


def kind_shares(spec: ModelSpec, tokens: int, kv_dtype="bf16") -> dict:
    """Per cache kind: layer count and bytes at ``tokens``, each also as % of the cache layers' total."""
    by_bytes = bytes_by_kind(spec, tokens, kv_dtype=kv_dtype)
    layers = {k: spec.count(k) for k in by_bytes}
    n, total = sum(layers.values()), sum(by_bytes.values())
    return {k: {"layers": layers[k], "layers %": 100 * layers[k] / n, "bytes": by_bytes[k],
                "bytes %": 100 * by_bytes[k] / total if total else 0.0} for k in by_bytes}


def windowed_models() -> list[str]:
    """Registry models with at least one sliding or chunked layer."""
    return [n for n in model_names() if largest_window_tokens(load_model(n)) is not None]


def window_bytes_numbers(model: str = "gemma-3-27b", tokens: int = 131_072, kv_dtype="bf16", points: int = 257) -> dict:
    """The window-bytes view's numbers: KV bytes by layer kind along 64..tokens (log-spaced)
    (:func:`kvsim.calc.window_bytes.bytes_by_kind`), the same model with every layer full (a window-ignoring
    calculator), the layer pattern, and at ``tokens`` the real bytes and ignored / real
    (:func:`kvsim.calc.window_bytes.window_savings`)."""
    spec = load_model(model)
    t = np.unique(np.geomspace(min(64, tokens), tokens, points).astype(np.int64))  # log axes: no T = 0
    s = window_savings(spec, tokens, kv_dtype=kv_dtype)
    return {"name": spec.name, "tokens": t, "by_kind": bytes_by_kind(spec, t, kv_dtype=kv_dtype),
            "ignored": memory.kv_bytes(full_attention(spec), t, kv_dtype=kv_dtype), "pattern": pattern_period(spec),
            "real_bytes": s["real_bytes"], "ratio": s["ratio"]}


def model_kind_shares(model: str, tokens: int, kv_dtype="bf16") -> tuple[str, dict]:
    """(the model's name, :func:`kind_shares` of the registry model ``model`` at ``tokens``)."""
    spec = load_model(model)
    return spec.name, kind_shares(spec, tokens, kv_dtype)


def position_span(positions) -> str:
    """'0–3, 7' style text: consecutive positions joined into runs, runs comma-separated."""
    runs, start = [], positions[0]
    for a, b in zip(positions, list(positions[1:]) + [None]):
        if b is None or b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}–{a}")
            start = b
    return ", ".join(runs)


def count_label(n: int, noun: str) -> str:
    """'1 key', '6 keys': n and the noun, plural unless n == 1."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def attended_label(positions) -> str:
    """'4–9 (6 keys)': the attended positions as runs (:func:`position_span`) and how many there are, len(positions)."""
    positions = list(positions)
    return f"{position_span(positions)} ({count_label(len(positions), 'key')})"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st: suffix 'th' when 10 <= n % 100 <= 20, else by n % 10."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def position_ordinal(position: int) -> str:
    """Which token of the sequence sits at 0-based ``position``: ordinal(position + 1) (position 0 is the 1st)."""
    return ordinal(position + 1)


MASK_TOKENS = 20  # positions shown in the mask panels
LAST_MASK_POSITION = MASK_TOKENS - 1  # the newest token the mask slider can pick (0-based)


def ring_link_numbers(token: int, window: int, sinks: int = 0) -> dict:
    """Token ``token``'s sliding + sinks mask row, the tokens written up to it (token + 1) and its keys, row.sum()."""
    written = token + 1
    row = attention_mask(written, "sliding", window=window, sinks=sinks)[token]
    return {"tokens_written": written, "row": row, "keys": int(row.sum())}


def padded_history_rows(positions, slots: np.ndarray, visible: np.ndarray, written, step: int, rows: int,
                        empty: int = -1) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """The last ``rows`` of steps 1..step, empty rows on top: missing = rows - len(steps max(0, step-rows)..step)."""
    keep = slice(max(0, step - rows), step)
    missing = rows - len(positions[keep])
    return ([None] * missing + list(positions[keep]),
            np.vstack([np.full((missing, slots.shape[1]), empty), slots[keep]]),
            np.vstack([np.zeros((missing, slots.shape[1]), dtype=bool), visible[keep]]),
            np.concatenate([np.full(missing, -1), written[keep]]))
