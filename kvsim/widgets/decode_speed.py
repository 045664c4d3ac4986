"""Lesson 08: decode is memory-bound. Measured step time against bytes read, and the calculator's floor.

Contract
- :func:`measure_step_times` times real decode steps of an MLX model (:mod:`kvsim.model`) at
  growing context T. The caches are filled with T tokens of seeded random keys/values written
  straight into them (``update_and_fetch``), not by a prefill: a prefill of T tokens costs O(T²)
  and minutes at these sizes, while a decode step reads the same bytes whatever the values are.
  Each point is the fastest of ``steps`` timed steps after one warm-up step (the one least
  disturbed by other work on the machine, as for the copy bandwidth).
- Bytes one step reads = the weights it touches (every weight except the embedding table, of which
  one row: :func:`weights_read_bytes`) + the cache, :func:`kvsim.memory.read_bytes_per_step` at the
  step's context. ``cache_used_bytes`` is the caches' own ``used_bytes`` after the step, measured.
- :func:`draw_step_time_vs_context` / :func:`draw_step_time_vs_bytes`: the measurements, the latter
  with the limit line time = bytes / copy bandwidth (:func:`kvsim.bandwidth.measure_copy_bandwidth`).
- :func:`draw_stored_vs_read`: what a cache stores and what one step reads, dense vs NSA vs DSA
  (:func:`kvsim.techniques.sparse_bytes`).
- :func:`draw_decode_speed_limit` / :func:`decode_speed_view`: the floor on step time of a served
  model on an accelerator, (weights + B·cache read) / memory bandwidth, with sliders.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .. import memory
from ..decode import cache_dtypes, kv_dtype_spec
from ..hardware import accelerator_names, get_accelerator
from ..model import MX_DTYPES
from ..plots.decode_speed import plot_measured, plot_step_floor, plot_stored_vs_read
from ..registry import load_model, model_names
from ..techniques import sparse_bytes
from ..weights import param_count
from .base import dropdown, log_slider, make_view

KV_DTYPES = ("bf16", "fp8", "q8", "q4", "q2", "fp32")


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
    return model.weight_bytes - model.embed.nbytes + model.embed[0].nbytes


def fill_caches(model, caches, tokens: int, kv_dtype=None, seed: int = 0) -> None:
    """Write ``tokens`` seeded random K/V rows into every attention cache (recurrent: advance only)."""
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
        if layer.kind == "mla":
            shapes = [(1, 1, tokens, layer.kv_lora_rank), (1, 1, tokens, layer.qk_rope_head_dim)]
        else:
            h = layer.num_key_value_heads
            shapes = [(1, h, tokens, layer.head_dim), (1, h, tokens, layer.v_head_dim)]
        k, v = (mx.random.uniform(-1, 1, s, key=mx.random.key(seed + 2 * i + j)).astype(written)
                for j, s in enumerate(shapes))
        cache.update_and_fetch(k, v)
        mx.eval([a for a in vars(cache).values() if isinstance(a, mx.array)])


def _one_step(model, caches, written) -> float:
    import time

    start = time.perf_counter()
    mx.eval(model(mx.array([[1]]), caches, written))
    return time.perf_counter() - start


def measure_step_times(model, contexts, steps: int = 3, label: str | None = None, kv_dtype=None,
                       seed: int = 0, progress: bool = True) -> list[StepTime]:
    """Fastest decode-step time at each context length (caches filled by :func:`fill_caches`)."""
    from tqdm.auto import tqdm

    contexts = [int(t) for t in contexts]
    if not contexts or min(contexts) < 0:
        raise ValueError(f"contexts must be a non-empty list of token counts >= 0, got {contexts!r}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    written, state = cache_dtypes(model, kv_dtype)
    kv_spec = kv_dtype_spec(kv_dtype, model)
    state_name = {v: k for k, v in MX_DTYPES.items()}[state]
    label = label or model.info.source_name
    w = weights_read_bytes(model)
    out = []
    for t in tqdm(contexts, desc=label, unit="context", disable=not progress):
        caches = model.make_caches(kv_dtype=kv_dtype, dtype=state)
        fill_caches(model, caches, t, kv_dtype, seed)
        _one_step(model, caches, written)                           # warm-up, context t + 1
        seconds = [_one_step(model, caches, written) for _ in range(steps)]
        held = t + 1 + steps                                         # one more token per step
        read = memory.read_bytes_per_step(model.spec, held, kv_dtype=kv_spec, state_dtype=state_name)
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


def _by_label(results):
    groups: dict[str, list[StepTime]] = {}
    for r in results:
        groups.setdefault(r.label, []).append(r)
    return groups


def draw_step_time_vs_context(ax, results: list[StepTime]):
    """Measured step time (ms) against tokens already cached, one line per model."""
    series = {k: ([r.context_tokens for r in v], [r.seconds for r in v]) for k, v in _by_label(results).items()}
    return plot_measured(ax, series, xlabel="tokens already in the cache", ylabel="decode step time (ms)",
                         title="measured on this machine: one token per step", y_scale=1e-3)


def draw_step_time_vs_bytes(ax, results: list[StepTime], copy_bytes_per_s: float):
    """Measured step time against bytes read per step, with time = bytes / copy bandwidth as the limit."""
    series = {k: ([r.read_bytes for r in v], [r.seconds for r in v]) for k, v in _by_label(results).items()}
    top = max(r.read_bytes for r in results) * 1.05
    x = np.array([0.0, top])
    limits = {f"bytes / copy bandwidth ({copy_bytes_per_s / 1e9:.1f} GB/s)": (x, x / copy_bytes_per_s)}
    return plot_measured(ax, series, limits, xlabel="bytes read per step: weights + cache (MB)",
                         ylabel="decode step time (ms)", title="step time grows with the bytes it reads",
                         x_scale=1e6, y_scale=1e-3)


# ---------------------------------------------------------------- stored vs read (calculator)


def stored_vs_read(model: str = "deepseek-v3", tokens: int = 131_072, points: int = 129):
    """Tokens, {method: stored bytes}, {method: bytes read per step} for dense, NSA and DSA attention."""
    spec = load_model(model)
    t = np.linspace(0, tokens, points).astype(np.int64)
    parts = {m: sparse_bytes(spec, t, m) for m in ("dense", "nsa", "dsa")}
    names = {"dense": "dense (also FlashAttention)", "nsa": "NSA", "dsa": "DSA"}
    return (t, {names[m]: p["stored"] for m, p in parts.items()},
            {names[m]: p["read"] for m, p in parts.items()})


def draw_stored_vs_read(ax, model: str = "deepseek-v3", tokens: int = 131_072):
    """Stored (solid) and read-per-step (dashed) bytes of one sequence: sparse attention cuts only the reads."""
    t, stored, read = stored_vs_read(model, tokens)
    return plot_stored_vs_read(ax, t, stored, read, unit="GiB",
                               title=f"{model}, bf16: what is stored vs what one step reads")


# ---------------------------------------------------------------- the floor on a served model


def speed_floor(model: str, accelerator: str, batch: int = 1, kv_dtype: str = "bf16", tokens: int = 131_072,
                points: int = 129):
    """Context tokens, and the minimum step time (s) = (weights + B · cache read) / bandwidth.

    Weights: the active parameters in bf16 (what one token uses; for a mixture of experts a batch
    touches more experts, so there this is a lower bound too).
    """
    spec, acc = load_model(model), get_accelerator(accelerator)
    bw = acc.memory_bandwidth_bytes_per_s
    w = param_count(spec).active * memory.DTYPE_BYTES["bf16"]
    t = np.linspace(0, tokens, points).astype(np.int64)
    read = memory.read_bytes_per_step(spec, t, batch, _kv_dtype(spec, kv_dtype))
    return t, w / bw, (w + np.asarray(read, dtype=float)) / bw


def _kv_dtype(spec, name: str):
    """``name`` with group size 64, or 32 when 64 does not divide a cached vector (head_dim 96)."""
    for group in (64, 32):
        dt = memory.parse_kv_dtype(name, group_size=group)
        try:
            memory.bytes_per_token(spec, dt)
            return dt
        except ValueError:
            continue
    return memory.parse_kv_dtype(name)


def draw_decode_speed_limit(ax, model="llama-3.1-8b", accelerator="H100 80GB", batch=1, kv_dtype="bf16",
                            tokens=131_072):
    """Minimum decode step time against context for a batch, and the tokens/s ceiling at ``tokens``."""
    t, w_s, step_s = speed_floor(model, accelerator, batch, kv_dtype, tokens)
    per_seq = 1 / step_s[-1]
    label = f"{per_seq:,.0f} tok/s per sequence, {batch * per_seq:,.0f} in all"
    # bytes read at the last point = what must sit in memory (weights + B caches + states)
    needed = step_s[-1] * get_accelerator(accelerator).memory_bandwidth_bytes_per_s
    fits = needed <= get_accelerator(accelerator).memory_bytes
    plot_step_floor(ax, t, {f"weights + KV of {batch} sequence(s), {kv_dtype}": 1e3 * step_s},
                    hlines={f"weights only: {1e3 * w_s:.2f} ms": 1e3 * w_s},
                    point=(t[-1], 1e3 * step_s[-1], label),
                    title=f"{model} on {accelerator}: memory-bandwidth floor"
                          + ("" if fits else f" (needs {memory.format_bytes(needed)}: does not fit)"))
    return ax


def decode_speed_view(model="llama-3.1-8b", accelerator="H100 80GB", batch=1, kv_dtype="bf16", tokens=131_072):
    """Sliders for model, accelerator, batch, KV dtype and context over :func:`draw_decode_speed_limit`."""
    return make_view(draw_decode_speed_limit, {
        "model": dropdown("model", model_names(), model),
        "accelerator": dropdown("accelerator", accelerator_names(), accelerator),
        "batch": log_slider("batch", batch, 1, 256),
        "kv_dtype": dropdown("KV dtype", KV_DTYPES, kv_dtype),
        "tokens": log_slider("tokens", tokens, 1024, 1_048_576),
    })
