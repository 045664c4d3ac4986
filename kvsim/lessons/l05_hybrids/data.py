"""Where a hybrid's fixed state stops being a cost: the short-context crossover.

Contract (pure, over :mod:`kvsim.calc.hybrid`)
- A hybrid pays its recurrent state from the first token; the same-depth all-attention transformer
  (:func:`kvsim.calc.hybrid.all_attention`) pays K/V in every layer instead. Below the crossover
  the hybrid holds MORE bytes per sequence; from it on, less.
- :func:`hybrid_crossover_tokens` = the first T with all-attention KV(T) ≥ hybrid KV(T) + state,
  with kvsim's default state dtype (:func:`kvsim.calc.hybrid.cache_split`).
- :func:`short_context_curves`: both per-sequence sizes against T, for the lesson 05 plot.
- :func:`layer_crossover`: the same in one layer: one recurrent layer's state bytes against one attention
  layer's K/V bytes per token, and the first T at which that attention layer holds at least as much.
- The views' numbers: :func:`hybrid_models`, :func:`hybrid_cache_numbers`, :func:`state_vs_kv_curves`,
  :func:`recurrent_layer` and :func:`short_context_numbers` (memoized per model: a redraw recomputes nothing).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ...calc import hybrid, memory
from ...calc.config import ModelSpec
from ...calc.registry import load_model, model_names
from ...calc.search import first_tokens
from ...calc.units import InputError


def _gap(spec: ModelSpec, twin: ModelSpec, t, kv_dtype):
    """all-attention bytes − hybrid bytes at T (negative: the hybrid holds more)."""
    return (np.asarray(memory.kv_bytes(twin, t, 1, kv_dtype), dtype=np.int64)
            - np.asarray(hybrid.cache_split(spec, t, 1, kv_dtype)["total"], dtype=np.int64))


def hybrid_crossover_tokens(spec: ModelSpec, kv_dtype="bf16") -> int | None:
    """First T at which the all-attention counterfactual holds at least the hybrid's KV + state."""
    if "recurrent" not in spec.kinds:
        raise InputError(f"{spec.name} has no recurrent layer: there is no state to amortize")
    twin = hybrid.all_attention(spec)
    # the gap never shrinks as T grows; None e.g. for windowed attention (the counterfactual stops growing too)
    return first_tokens(lambda t: _gap(spec, twin, t, kv_dtype) >= 0)


def short_context_curves(spec: ModelSpec, tokens, kv_dtype="bf16") -> dict:
    """{"hybrid": KV + state, "all-attention": KV} bytes per sequence at each T of ``tokens``."""
    t = np.asarray(tokens, dtype=np.int64)
    return {"hybrid": np.asarray(hybrid.cache_split(spec, t, 1, kv_dtype)["total"], dtype=np.int64),
            "all-attention": np.asarray(memory.kv_bytes(hybrid.all_attention(spec), t, 1, kv_dtype),
                                        dtype=np.int64)}


def layer_crossover(spec: ModelSpec, kv_dtype="bf16") -> dict:
    """{"state_bytes": one recurrent layer's state, "kv_token_bytes": one attention layer's K/V per token,
    "tokens": ⌈state / per-token⌉, the first T at which that layer holds at least the state}."""
    recurrent = [layer for layer in spec.layers if layer.kind == "recurrent"]
    attention = [layer for layer in spec.layers if layer.caches_tokens]
    if not recurrent or not attention:
        raise InputError(f"{spec.name} needs a recurrent and an attention layer to compare")
    state = memory.state_bytes(recurrent[0])  # kvsim's default state dtype
    per_token = memory.layer_token_bytes(attention[0], kv_dtype)
    return {"state_bytes": state, "kv_token_bytes": per_token, "tokens": math.ceil(state / per_token)}


CACHE_UNIT = "MiB"  # the y unit of the lesson's cache pictures: a recurrent state is MiB, a long KV a few thousand MiB


def mixers_text(mixers: dict) -> str:
    """'28 mamba, 4 full': each mixer family with its layer count, in the order given."""
    return ", ".join(f"{n} {kind}" for kind, n in mixers.items())


def state_shapes_text(state_shapes) -> str:
    """'conv 3×8192 + ssm 8192×16': each state part and its shape (dimensions joined by ×), parts joined by +."""
    return " + ".join(f"{part} {'×'.join(map(str, shape))}" for part, shape in state_shapes)


def hybrid_models() -> list[str]:
    """Registry models with at least one recurrent layer."""
    return [n for n in model_names() if "recurrent" in load_model(n).kinds]


def hybrid_cache_numbers(model: str = "jamba-v0.1", tokens: int = 262_144, batch: int = 1, kv_dtype="bf16",
                         points: int = 257) -> dict:
    """The hybrid-cache view's numbers along 16..tokens, log-spaced: :func:`kvsim.calc.hybrid.cache_split` (KV of the
    attention layers, fixed recurrent state, total), the all-attention counterfactual's KV (None for a purely
    recurrent model: it has no attention layer to copy), the layer counts per mixer and the total at ``tokens``."""
    spec = load_model(model)
    t = np.unique(np.geomspace(min(16, tokens), tokens, points).astype(np.int64))
    split = hybrid.cache_split(spec, t, batch, kv_dtype)
    n_rec = spec.count("recurrent")
    n_att = spec.num_hidden_layers - n_rec
    return {"name": spec.name, "tokens": t, "split": split, "mixers": hybrid.mixers(spec), "recurrent_layers": n_rec,
            "attention_layers": n_att, "num_hidden_layers": spec.num_hidden_layers,
            "all_attention": memory.kv_bytes(hybrid.all_attention(spec), t, batch, kv_dtype) if n_att else None,
            "end_bytes": int(split["total"][-1])}


def state_vs_kv_curves(models, tokens: int = 262_144, kv_dtype="bf16", points: int = 65):
    """256..tokens log-spaced, and {model: (its mixer counts, per-sequence cache total)} for each model."""
    t = np.unique(np.geomspace(256, tokens, points).astype(np.int64))
    out = {}
    for name in models:
        spec = load_model(name)
        out[name] = (hybrid.mixers(spec), hybrid.cache_split(spec, t, 1, kv_dtype)["total"])
    return t, out


@lru_cache(maxsize=16)
def recurrent_layer(model: str):
    """(name, the first recurrent layer, :func:`layer_crossover`) of a registry model (memoized per model)."""
    spec = load_model(model)
    return spec.name, next(x for x in spec.layers if x.kind == "recurrent"), layer_crossover(spec)


def short_context_lengths(max_tokens: int) -> np.ndarray:
    """160 log-spaced token counts from 1 to ``max_tokens`` (duplicates dropped)."""
    return np.unique(np.geomspace(1, max_tokens, 160).astype(np.int64))


@lru_cache(maxsize=16)
def short_context_numbers(model: str, max_tokens: int):
    """(:func:`short_context_curves` on 160 log-spaced lengths up to ``max_tokens``, (crossover T, bytes
    there)) of a registry model, memoized: a redraw recomputes nothing it computed before."""
    spec = load_model(model)
    at = hybrid_crossover_tokens(spec)
    return short_context_curves(spec, short_context_lengths(max_tokens)), (at, int(hybrid.cache_split(spec, at)["total"]))
