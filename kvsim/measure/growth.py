"""Measured cache growth: feed a real MLX cache real-geometry K/V and record its ``nbytes``.

Contract
- :func:`layer_cache` builds the cache one layer of a :class:`~kvsim.calc.config.ModelSpec` gets from
  :func:`kvsim.cache.make_caches` (KVCache for full, RotatingKVCache for sliding, ChunkedKVCache
  for chunked, RecurrentStateCache for recurrent layers ...).
- :func:`measure_nbytes` appends tokens in updates of at most ``chunk_tokens`` (random K/V of
  shape (B, num_key_value_heads, S, head_dim) in ``dtype``, seeded, drawn once and written by every
  update: the cache copies what it is given) and reads ``cache.nbytes``
  whenever the token count reaches one of ``token_counts``. What it returns is measured, never
  computed: compare it with :func:`kvsim.calc.memory.layer_kv_bytes` (``view="allocated"``).
- :func:`kvsim_cache_classes` counts the cache classes ``make_caches`` picks for a model (the seeds'
  architecture table: Gemma 3 -> RotatingKVCache + KVCache, Jamba -> RecurrentStateCache + KVCache ...).
- Recurrent layers hold no K/V; their state is allocated when the cache is built and is read as is.
- :func:`decode_layer_bytes` runs a real decode (:func:`kvsim.decode.generate`) of each model and
  returns every layer's measured ``nbytes`` after every step beside
  :func:`kvsim.calc.hybrid.allocated_layer_bytes` for the same token counts (:class:`DecodeBytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx
import numpy as np

from ..cache import make_caches
from ..cache.base import mx_dtype
from ..calc.config import ModelSpec
from ..calc.hybrid import allocated_layer_bytes
from ..calc.progress import Progress
from ..calc.units import DEFAULT_STEP


def layer_cache(spec: ModelSpec, layer_index: int, batch: int = 1, dtype: str = "bf16", step: int = DEFAULT_STEP):
    """The cache ``make_caches`` gives layer ``layer_index`` of ``spec`` (None for a cache-less layer)."""
    if not isinstance(layer_index, int) or not 0 <= layer_index < spec.num_hidden_layers:
        raise ValueError(f"layer_index must be in [0, {spec.num_hidden_layers - 1}], got {layer_index!r}")
    one = replace(spec, layers=(spec.layers[layer_index],))
    return make_caches(one, batch=batch, step=step, dtype=mx_dtype(dtype))[0]


def kvsim_cache_classes(spec: ModelSpec) -> dict[str, int]:
    """{cache class name: layers} of ``make_caches(spec)``, in first-layer order (arrays are lazy zeros)."""
    out: dict[str, int] = {}
    for cache in make_caches(spec):
        name = "none" if cache is None else type(cache).__name__
        out[name] = out.get(name, 0) + 1
    return out


def measure_nbytes(spec: ModelSpec, layer_index: int, token_counts, batch: int = 1, dtype: str = "bf16",
                   chunk_tokens: int = 512, step: int = DEFAULT_STEP, seed: int = 0,
                   progress: bool = False) -> np.ndarray:
    """``cache.nbytes`` of layer ``layer_index``'s real cache after each of ``token_counts`` tokens (ascending)."""
    counts = np.asarray(token_counts, dtype=np.int64)
    if counts.ndim != 1 or len(counts) == 0 or np.any(counts < 0) or np.any(np.diff(counts) < 0):
        raise ValueError("token_counts must be a non-empty ascending list of integers >= 0")
    if not isinstance(chunk_tokens, int) or chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be a positive integer, got {chunk_tokens!r}")
    layer = spec.layers[layer_index] if 0 <= layer_index < spec.num_hidden_layers else None
    cache = layer_cache(spec, layer_index, batch, dtype, step)
    dt = mx_dtype(dtype)
    out, fed = [], 0
    if layer.has_kv_heads and counts[-1]:
        # one seeded random chunk, drawn once: each update copies (a prefix of) it into the cache, and nbytes
        # does not depend on the values (drawing fresh K/V per update cost more than the updates themselves)
        kk, kv = mx.random.split(mx.random.key(seed), 2)
        size = int(min(chunk_tokens, counts[-1]))
        k_all = mx.random.normal((batch, layer.num_key_value_heads, size, layer.head_dim), dtype=dt, key=kk)
        v_all = mx.random.normal((batch, layer.num_key_value_heads, size, layer.v_head_dim), dtype=dt, key=kv)
    bar = Progress(total=int(counts[-1]), desc=f"layer {layer_index} ({layer.kind})", unit="tokens",
                   enabled=progress)
    for target in counts:
        while fed < target and layer.has_kv_heads:
            s = int(min(chunk_tokens, target - fed))
            cache.update_and_fetch(k_all[:, :, :s], v_all[:, :, :s])
            mx.eval(cache.keys, cache.values)
            fed += s
            bar.update(s)
        out.append(0 if cache is None else cache.nbytes)
    bar.close()
    return np.array(out, dtype=np.int64)


@dataclass(frozen=True)
class DecodeBytes:
    """Per-layer cache bytes of one real decode: measured after every step, and the formula."""

    labels: tuple[str, ...]  # "mamba (layer 0)": mixer and index in the full model
    tokens: np.ndarray  # (steps,) tokens held after each step (prompt after the prefill, then +1)
    measured: np.ndarray  # (layers, steps) cache.nbytes read after each step
    formula: np.ndarray  # (layers, steps) allocated K/V or fixed state from kvsim.calc.memory
    caches: list  # the caches after the last step


def decode_layer_bytes(models: dict, prompt_tokens: int = 64, new_tokens: int = 48, kv_dtype: str = "bf16",
                       step: int = DEFAULT_STEP, progress: bool = False) -> dict[str, DecodeBytes]:
    """Greedy-decode ``new_tokens`` after a ``prompt_tokens`` prompt with each model; measure every layer's nbytes."""
    from ..decode import generate

    if not isinstance(prompt_tokens, int) or prompt_tokens < 1 or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ValueError("prompt_tokens and new_tokens must be positive integers, "
                         f"got {prompt_tokens!r}, {new_tokens!r}")
    mx_dtype(kv_dtype)  # float K/V; the state follows kv_dtype where the reference keeps it in the model dtype
    out = {}
    for name, model in Progress(models.items(), desc="decode", unit="models", enabled=progress):
        vocab = model.spec.vocab_size
        prompt = [1 + i % (vocab - 1) for i in range(prompt_tokens)]  # any fixed ids: weights are random
        run = generate(model, prompt, new_tokens, kv_dtype=kv_dtype, step=step)
        tokens = np.array([s.context_tokens for s in run.trace], dtype=np.int64)
        labels = tuple(f"{layer.recurrent_family or layer.kind} (layer {i})"
                       for layer, i in zip(model.spec.layers, model.info.source_layers))
        out[name] = DecodeBytes(labels, tokens, np.array([s.nbytes for s in run.trace], dtype=np.int64).T,
                                allocated_layer_bytes(model.spec, tokens, kv_dtype, None, step, model_dtype=kv_dtype),
                                run.caches)
    return out
