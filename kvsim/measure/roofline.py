"""Decode steps on the roofline: the device, interleaved step timing, and each point's floor.

Contract
- :func:`device_summary`: the MLX default device: name, backend ('cuda', 'metal' or 'cpu'), total
  memory and the memory still available for new arrays (CUDA: NVML's free memory; Metal: the
  recommended working set minus MLX's active memory; CPU: MemAvailable from /proc/meminfo).
- :func:`interleaved_times`: after one warm-up call each, rounds that call every function once, in
  turn (odd rounds in reverse order), so slow phases of a shared machine hit all of them alike. Each time is
  one call plus the ``mx.eval`` of its result (``mx.eval`` returns when the device is done).
- :func:`decode_point`: one decode step of a kvsim model at context T and batch B, caches filled with
  random K/V (:func:`kvsim.measure.step_time.fill_caches`), interleaved with the same step of its
  mlx-lm twin (same weights, mlx-lm's own caches) when one is given. The point carries the bytes the
  step reads (weights: :func:`kvsim.measure.step_time.model_weights_read_bytes`; cache:
  :func:`kvsim.calc.memory.read_bytes_per_step` at the context after the last timed step), its FLOPs
  (:func:`kvsim.calc.roofline.step_flops`), best and median step times, kvsim / mlx-lm of the best,
  and the median over rounds of kvsim / mlx-lm within a round (the two steps ran back to back).
- :func:`mla_kernels`: MLA's absorbed decode attention over one layer's latent, kvsim's way (heads
  folded into the rows of one matmul) against mlx-lm's (``mx.fast.scaled_dot_product_attention``
  with the latent as a 512-wide key and value head and the RoPE scores as an additive mask, which
  no fused decode kernel covers), so each device shows which is faster at each context.
- :func:`on_roofline`: a point placed against the measured bandwidth and FLOP/s: arithmetic
  intensity, floor = bytes read / bandwidth, time / floor, achieved bytes/s and FLOP/s.
- :func:`point_bytes_needed`: memory a point allocates (both cache sets, allocated view, plus one
  layer's worth of transient copies), so a benchmark can skip what does not fit.
- :func:`fitted_model`: ``build_model`` with weights drawn on the device (:class:`DeviceWeightInit`)
  and as many of the wanted layers as fit in a share of the available memory (one layer is built
  first to weigh it).
- :func:`device_limits`: copy bandwidth and matmul FLOP/s of the device (kvsim.measure.bandwidth)
  and the machine balance, as one dict.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

import mlx.core as mx

from ..cache.base import mx_dtype
from ..cache.sdpa import dequantized_sdpa, quantized_sdpa, sdpa
from ..calc import memory, roofline
from ..calc.units import positive_int
from ..decode import kv_dtype_spec
from ..model import build_model
from ..model.layers import DeviceWeightInit
from .bandwidth import measure_device_bandwidth, measure_matmul_throughput
from .step_time import fill_caches, model_matmul_params, model_weights_read_bytes

__all__ = ["device_summary", "device_limits", "fitted_model", "interleaved_times", "decode_point",
           "batched_point", "mla_kernels", "quantized_kernels", "on_roofline", "point_bytes_needed"]


def _backend() -> str:
    if mx.default_device().type == mx.cpu:
        return "cpu"
    return "cuda" if mx.cuda.is_available() else "metal"


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_summary() -> dict:
    """Name, backend, total and available memory (bytes) of MLX's default device."""
    mx.clear_cache()                                          # MLX's buffer cache counts as free
    info, backend = mx.device_info(), _backend()
    total = int(info.get("total_memory") or info.get("memory_size") or 0)
    if backend == "cpu" or not total:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        available = _host_available_bytes()
    elif "free_memory" in info:                               # CUDA (NVML: every process's use)
        available = int(info["free_memory"])
    else:                                                     # Metal: what MLX may still allocate
        limit = int(info.get("max_recommended_working_set_size") or total)
        available = limit - mx.get_active_memory()
    return {"name": str(info.get("device_name", "unknown")), "backend": backend,
            "architecture": str(info.get("architecture", "")),
            "memory_total_bytes": total, "memory_available_bytes": available}


def interleaved_times(fns: dict[str, Callable], repeats: int) -> dict[str, list[float]]:
    """{name: seconds of each of ``repeats`` calls}; calls alternate between the functions (a b, b a, ...)."""
    positive_int("repeats", repeats)
    for name, fn in fns.items():                              # warm-up: compilation, first allocations
        try:
            mx.eval(fn())
        except RuntimeError as err:                           # say whose step failed (kvsim or the twin)
            raise RuntimeError(f"{name}: {err}") from err
    times, order = {name: [] for name in fns}, list(fns.items())
    for r in range(repeats):
        for name, fn in (order if r % 2 == 0 else order[::-1]):   # no one always runs first
            start = time.perf_counter()
            mx.eval(fn())
            times[name].append(time.perf_counter() - start)
    return times


def point_bytes_needed(model, context: int, batch: int, steps: int, sets: int, kv_dtype=None) -> int:
    """Bytes ``sets`` filled cache sets allocate (+ one layer's transient copies, + 1 GiB headroom)."""
    kv = memory.allocated_bytes(model.spec, context + steps + 2, batch, kv_dtype=kv_dtype_spec(kv_dtype, model))
    return int(sets * kv + 3 * kv / max(1, len(model.spec.layers)) + 2**30)


def decode_point(model, context: int, batch: int = 1, repeats: int = 8, twin=None, seed: int = 0,
                 interleave: bool = True, kv_dtype: str | None = None, compiled=None) -> dict:
    """Best/median decode step of ``model`` (and its mlx-lm ``twin``) at ``context`` cached tokens.

    ``interleave=False`` (when two cache sets do not fit in memory) times kvsim, frees its caches,
    then times the twin. ``kv_dtype`` 'q8', 'q4', ...: quantized caches on both sides (group 64).
    ``compiled``: a :func:`kvsim.model.compiled.compiled_step` of ``model``, timed as a third side
    ("kvsim-compiled", its own caches).
    """
    tokens = mx.array([[1]] * batch)
    spec = kv_dtype_spec(kv_dtype, model)

    def kvsim_step():
        caches = model.make_caches(kv_dtype=kv_dtype)
        fill_caches(model, caches, context, kv_dtype=kv_dtype, seed=seed, batch=batch)
        return lambda: model(tokens, caches)

    def twin_step():
        caches = twin.make_caches(spec.bits if spec.quantized else None)
        fill_caches(model, caches, context, kv_dtype=kv_dtype, seed=seed, batch=batch)
        return lambda: twin.model(tokens, cache=caches)

    def compiled_setup():
        caches = model.make_caches(kv_dtype=kv_dtype)
        fill_caches(model, caches, context, kv_dtype=kv_dtype, seed=seed, batch=batch)
        return lambda: compiled(tokens, caches)

    setups = {"kvsim": kvsim_step, **({"kvsim-compiled": compiled_setup} if compiled is not None else {}),
              **({"mlx-lm": twin_step} if twin is not None else {})}
    times = _time_setups(setups, repeats, interleave)
    return _point(model, spec, context, batch, repeats, interleave, times)


def batched_point(model, context: int, batch: int, repeats: int = 8, twin=None, compiled=None, seed: int = 0,
                  interleave: bool = True) -> dict:
    """One step of ``batch`` separate sequences at ``context`` tokens each, kvsim's way beside mlx-lm's.

    kvsim: one cache per sequence, one :class:`~kvsim.model.layers.Rows` per layer (what
    :func:`kvsim.decode.batched_generate` feeds the model; attention row by row), eager and, if given,
    ``compiled``. mlx-lm: its ``BatchKVCache`` (what its ``BatchGenerator`` decodes with: one (B, H, T, D)
    buffer per layer, left padding 0, an explicit mask). Returns :func:`decode_point`'s fields plus
    tokens per second per side.
    """
    from ..model.layers import Rows
    tokens = mx.array([[1]] * batch)

    def rows_setup(fn):
        def setup():
            per_seq = [model.make_caches() for _ in range(batch)]
            for r, caches in enumerate(per_seq):
                fill_caches(model, caches, context, seed=seed + r)
            layers = [Rows([per_seq[r][i] for r in range(batch)]) for i in range(len(model.blocks))]
            return lambda: fn(tokens, layers)
        return setup

    def twin_setup():
        batch_cache = mlx_lm_batch_cache()
        caches = [batch_cache([0] * batch) for _ in model.blocks]
        fill_caches(model, caches, context, seed=seed, batch=batch)
        return lambda: twin.model(tokens, cache=caches)

    setups = {"kvsim": rows_setup(model), **({"kvsim-compiled": rows_setup(compiled)} if compiled else {}),
              **({"mlx-lm": twin_setup} if twin is not None else {})}
    times = _time_setups(setups, repeats, interleave)
    point = _point(model, kv_dtype_spec(None, model), context, batch, repeats, interleave, times)
    point["tokens_per_s"] = {k: batch / (ms / 1e3) for k, ms in point["step_ms"].items()}
    return point


def mlx_lm_batch_cache():
    """mlx-lm's ``BatchKVCache`` class (its batched generation's cache)."""
    from .twins import mlx_lm_module
    return mlx_lm_module("models.cache").BatchKVCache


def _time_setups(setups: dict, repeats: int, interleave: bool) -> dict[str, list[float]]:
    """Both sides' caches built, then their steps interleaved; or one side at a time (memory)."""
    if interleave:
        return interleaved_times({name: setup() for name, setup in setups.items()}, repeats)
    times = {}
    for name, setup in setups.items():                         # one cache set alive at a time
        times.update(interleaved_times({name: setup()}, repeats))
        mx.clear_cache()
    return times


def _point(model, spec, context, batch, repeats, interleave, times) -> dict:
    """One measured point: bytes read, FLOPs, best and median step times, kvsim / mlx-lm."""
    held = context + 2 + repeats                               # warm-up + timed steps, one token each
    w = model_weights_read_bytes(model)
    cache = int(memory.read_bytes_per_step(model.spec, held, batch, kv_dtype=spec))
    point = {"context_tokens": context, "batch": batch, "kv_dtype": spec.name, "repeats": repeats,
             "interleaved": interleave,
             "weights_read_bytes": w, "cache_read_bytes": cache, "read_bytes": w + cache,
             "flops": roofline.step_flops(model.spec, model_matmul_params(model), held, batch),
             "step_ms": {k: 1e3 * min(v) for k, v in times.items()},
             "median_step_ms": {k: 1e3 * statistics.median(v) for k, v in times.items()}}
    if "mlx-lm" in times:
        point["kvsim_over_mlx_lm"] = point["step_ms"]["kvsim"] / point["step_ms"]["mlx-lm"]
        # each round's two steps ran back to back: the median of their ratios shrugs off slow phases
        point["kvsim_over_mlx_lm_paired"] = statistics.median(
            k / m for k, m in zip(times["kvsim"], times["mlx-lm"]))
        if "kvsim-compiled" in times:
            point["compiled_over_mlx_lm"] = point["step_ms"]["kvsim-compiled"] / point["step_ms"]["mlx-lm"]
            point["compiled_over_mlx_lm_paired"] = statistics.median(
                k / m for k, m in zip(times["kvsim-compiled"], times["mlx-lm"]))
    return point


def mla_kernels(mixer, context: int, repeats: int = 8, seed: int = 0) -> dict:
    """Absorbed MLA decode attention of one layer, two ways, interleaved: {way: best ms}.

    'kvsim (heads folded, explicit)': :meth:`kvsim.model.mla.MLA.absorbed_explicit`; 'mx.fast (rope scores
    as additive mask)': mlx-lm's way, ``mx.fast.scaled_dot_product_attention`` with the latent as
    keys and values (head dim kv_lora_rank) and q_pe·k_peᵀ as the mask, which kvsim's
    :meth:`~kvsim.model.mla.MLA.absorbed` uses for one dense piece since this measurement.
    """
    H, r, R, nope = mixer.n_heads, mixer.kv_lora_rank, mixer.rope_dim, mixer.nope_dim
    dtype = mixer.wkv_b.dtype
    draw = [mx.random.uniform(-1, 1, s, key=mx.random.key(seed + i)).astype(dtype) for i, s in
            enumerate([(1, 1, context, r), (1, 1, context, R), (1, H, 1, nope), (1, H, 1, R)])]
    latent, k_pe, q_nope, q_pe = draw
    w_uk, w_uv = mixer._w_uk_uv()

    def fused():
        pe_scores = (q_pe * mixer.scale) @ k_pe.swapaxes(-1, -2)
        out = mx.fast.scaled_dot_product_attention(q_nope @ w_uk, latent, latent, scale=mixer.scale,
                                                   mask=pe_scores)
        return out @ w_uv.swapaxes(-1, -2)

    times = interleaved_times({"kvsim (heads folded, explicit)":
                               lambda: mixer.absorbed_explicit(q_nope, q_pe, [(latent, k_pe, None)], None),
                               "mx.fast (rope scores as additive mask)": fused}, repeats)
    return {"context_tokens": context, "step_ms": {k: 1e3 * min(v) for k, v in times.items()}}


QUANT_LAYOUTS = ((8, 32), (8, 64), (8, 128), (4, 32), (4, 64), (4, 128))


def quantized_kernels(context: int, repeats: int = 8, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                      dtype=mx.bfloat16, layouts=QUANT_LAYOUTS, seed: int = 0) -> dict:
    """One layer's decode attention over ``context`` tokens: dense K/V beside quantized K/V read two ways.

    Ways: 'dense' (:func:`kvsim.cache.sdpa.sdpa` on ``dtype`` K/V), and per (bits, group) layout
    'matmul q{bits} g{group}' (:func:`~kvsim.cache.sdpa.quantized_sdpa`, ``mx.quantized_matmul`` on the
    packed data) and 'dequantize q{bits} g{group}' (:func:`~kvsim.cache.sdpa.dequantized_sdpa`). A way that
    fails on this device is recorded under 'errors' with MLX's message. Returns best ms per way.
    """
    keys = [mx.random.uniform(-1, 1, (1, kv_heads, context, head_dim), key=mx.random.key(seed + i)).astype(dtype)
            for i in range(2)]
    q = mx.random.uniform(-1, 1, (1, heads, 1, head_dim), key=mx.random.key(seed + 2)).astype(dtype)
    ways, errors = {"dense": lambda: sdpa(q, keys[0], keys[1], None, head_dim ** -0.5)}, {}
    for bits, group in layouts:
        kq, vq = (mx.quantize(x, group_size=group, bits=bits) for x in keys)
        kw = dict(group_size=group, bits=bits)
        for name, fn in ((f"matmul q{bits} g{group}", quantized_sdpa), (f"dequantize q{bits} g{group}",
                                                                         dequantized_sdpa)):
            way = (lambda fn=fn, kq=kq, vq=vq, kw=kw: fn(q, kq, vq, None, head_dim ** -0.5, **kw))
            try:
                mx.eval(way())
                ways[name] = way
            except (RuntimeError, ValueError) as err:            # no kernel for this shape on this device
                errors[name] = f"{type(err).__name__}: {err}"[:300]
    times = interleaved_times(ways, repeats)
    return {"context_tokens": context, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "dtype": str(dtype), "step_ms": {k: 1e3 * min(v) for k, v in times.items()}, "errors": errors}


def on_roofline(point: dict, bytes_per_s: float, flops_per_s: float) -> dict:
    """The point's intensity, floor (bytes read / bandwidth), time / floor and achieved rates."""
    seconds = point["step_ms"]["kvsim"] / 1e3
    floor = roofline.floor_seconds(point["read_bytes"], bytes_per_s)
    out = {"intensity_flop_per_byte": roofline.arithmetic_intensity(point["flops"], point["read_bytes"]),
           "floor_ms": 1e3 * floor, "kvsim_over_floor": seconds / floor,
           "achieved_bytes_per_s": point["read_bytes"] / seconds,
           "achieved_flops_per_s": point["flops"] / seconds,
           "compute_floor_ms": 1e3 * point["flops"] / flops_per_s}
    if "mlx-lm" in point["step_ms"]:
        out["mlx_lm_over_floor"] = point["step_ms"]["mlx-lm"] / 1e3 / floor
    return out


def fitted_model(spec, dtype: str, available_bytes: int, share: float = 0.6, seed: int = 0, **build):
    """``build_model(spec, **build)`` with at most as many layers as fit in ``share`` of the memory.

    The fewest layers a model can have (one per distinct layer kind) are built first to weigh a layer.
    """
    wanted, fewest = build.pop("num_layers", spec.num_hidden_layers), len(set(spec.layers))
    init = lambda: DeviceWeightInit(seed, mx_dtype(dtype))          # noqa: E731
    probe = build_model(spec, num_layers=fewest, vocab_size=2, dtype=dtype, init=init(),
                        **{k: x for k, x in build.items() if k != "vocab_size"})
    per_layer = probe.weight_bytes / fewest
    table = 2 * build.get("vocab_size", spec.vocab_size) * spec.hidden_size * probe.embed.itemsize  # embed + head
    fit = int((share * available_bytes - table) // per_layer)
    if fit < fewest:
        raise MemoryError(f"{spec.name}: {fewest} layer(s) and the embedding table do not fit in "
                          f"{share:.0%} of {available_bytes / 2**30:.1f} GiB")
    return build_model(spec, num_layers=min(wanted, fit), dtype=dtype, init=init(), seed=seed, **build)


def device_limits(copy_bytes: int, matmul_n: int, dtype: str, repeats: int = 10) -> dict:
    """The device's copy bandwidth (bytes/s), matmul FLOP/s and their ratio, the machine balance."""
    copy = measure_device_bandwidth(copy_bytes, repeats=repeats, dtype=dtype)
    mm = measure_matmul_throughput(matmul_n, repeats=repeats, dtype=dtype)
    return {"copy_bytes": copy.work // 2, "copy_bytes_per_s": copy.rate, "matmul_n": matmul_n,
            "matmul_flops_per_s": mm.rate,
            "machine_balance_flop_per_byte": roofline.machine_balance(mm.rate, copy.rate)}
