"""Decode step time on this machine: real decode steps of an MLX model at growing context.

Contract
- :func:`measure_step_times` times real decode steps of an MLX model (:mod:`kvsim.model`) at
  growing context T. The caches are filled with T tokens of seeded random keys/values written
  straight into them (``update_and_fetch``), not by a prefill: a prefill of T tokens costs O(T²)
  and minutes at these sizes, while a decode step reads the same bytes whatever the values are.
  Each point is the fastest of ``steps`` timed steps after one warm-up step (the one least
  disturbed by other work on the machine, as for the copy bandwidth).
- Bytes one step reads = the weights it touches (:func:`weights_read_bytes`: every weight except
  the embedding table, of which one row, :func:`kvsim.calc.roofline.step_weight_bytes`) + the cache,
  :func:`kvsim.calc.memory.read_bytes_per_step` at the step's context. ``cache_used_bytes`` is the
  caches' own ``used_bytes`` after the step, measured.
- :func:`fill_caches` only calls ``update_and_fetch`` (and ``advance`` on recurrent states), so it
  fills mlx-lm's caches as well as kvsim's. A sliding layer is written in chunks of at most its
  window: no cache, whatever its layout, holds more than twice the window while being filled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..calc import memory
from ..calc.progress import Progress
from ..calc.roofline import step_weight_bytes
from ..calc.units import dtype_key
from ..decode import cache_dtypes, kv_dtype_spec


@dataclass(frozen=True)
class StepTime:
    """One measured point: a decode step at ``context_tokens`` tokens already cached."""

    label: str
    context_tokens: int
    seconds: float                  # fastest wall time of the timed steps (forward + mx.eval)
    weights_read_bytes: int
    cache_read_bytes: int           # calculator: read_bytes_per_step after the last timed step
    cache_used_bytes: int           # measured: Σ cache.used_bytes after the step

    @property
    def read_bytes(self) -> int:
        return self.weights_read_bytes + self.cache_read_bytes

    @property
    def bytes_per_s(self) -> float:
        """Achieved read rate: bytes read per step / step time."""
        return self.read_bytes / self.seconds


def weights_read_bytes(model) -> int:
    """Weight bytes one decode step reads: all parameters but the embedding table, plus one of its rows."""
    return step_weight_bytes(model.weight_bytes, model.embed.nbytes, model.spec.vocab_size)


def matmul_params(model) -> int:
    """Parameters a decode step multiplies by (all but the embedding table): 2 FLOPs each per sequence."""
    return sum(p.size for _, p in nn.utils.tree_flatten(model.parameters())) - model.embed.size


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
        k, v = (mx.random.uniform(-1, 1, s, dtype=written, key=mx.random.key(seed + 2 * i + j))
                for j, s in enumerate(shapes))
        for start in range(0, tokens, chunk):                 # one write unless the layer is a window
            n = min(chunk, tokens - start)
            cache.update_and_fetch(k[:, :, :n], v[:, :, :n])
            mx.eval([a for a in vars(cache).values() if isinstance(a, mx.array)])


def _one_step(model, caches, written) -> float:
    start = time.perf_counter()
    mx.eval(model(mx.array([[1]]), caches, written))
    return time.perf_counter() - start


def measure_step_times(model, contexts, steps: int = 3, label: str | None = None, kv_dtype=None,
                       seed: int = 0, progress: bool = True) -> list[StepTime]:
    """Fastest decode-step time at each context length (caches filled by :func:`fill_caches`)."""
    contexts = [int(t) for t in contexts]
    if not contexts or min(contexts) < 0:
        raise ValueError(f"contexts must be a non-empty list of token counts >= 0, got {contexts!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    written, state = cache_dtypes(model, kv_dtype)
    kv_spec = kv_dtype_spec(kv_dtype, model)
    state_name = dtype_key(state)
    label = label or model.info.source_name
    w = weights_read_bytes(model)
    out = []
    for t in Progress(contexts, desc=label, unit="contexts", enabled=progress):
        caches = model.make_caches(kv_dtype=kv_dtype, dtype=state)
        fill_caches(model, caches, t, kv_dtype, seed)
        _one_step(model, caches, written)                           # warm-up, context t + 1
        seconds = [_one_step(model, caches, written) for _ in range(steps)]
        held = t + 1 + steps                                         # one more token per step
        read = memory.read_bytes_per_step(model.spec, held, kv_dtype=kv_spec, model_dtype=state_name)
        used = sum(c.used_bytes for c in caches if c is not None)
        out.append(StepTime(label, t, min(seconds), w, int(read), int(used)))
        del caches
    return out


def measure_variants(models: dict, contexts, steps: int = 3, progress: bool = True) -> list[StepTime]:
    """:func:`measure_step_times` for each {label: model}, all points in one list."""
    out = []
    for label, model in models.items():
        out += measure_step_times(model, contexts, steps, label=label, progress=progress)
    return out


def step_rows(results: list[StepTime]) -> list[dict]:
    """A table of the measurements: context, MB read (weights, cache), ms per step, achieved GB/s."""
    return [{"model": r.label, "context": r.context_tokens, "weights MB": round(r.weights_read_bytes / 1e6, 1),
             "cache MB": round(r.cache_read_bytes / 1e6, 1), "step ms": round(1e3 * r.seconds, 1),
             "achieved GB/s": round(r.bytes_per_s / 1e9, 2)} for r in results]


def by_label(results: list[StepTime]) -> dict[str, list[StepTime]]:
    """Measurements grouped by model label, in order of first appearance."""
    groups: dict[str, list[StepTime]] = {}
    for r in results:
        groups.setdefault(r.label, []).append(r)
    return groups
