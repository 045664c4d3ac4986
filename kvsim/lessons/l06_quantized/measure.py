"""Lesson 06 (quantized KV): this lesson's MLX runs on real kvsim caches and models.

Quantized KV in numbers and on real tensors: bytes with metadata, measured bytes, attention error.

Contract
- :func:`token_bytes_split` (pure): the bytes one token adds to one sequence across a model's cache
  layers, split into packed data (d·bits/8 per vector) and metadata (one scale and one bias per
  group: 2·(d/g)·b_scale); ``total`` equals :func:`kvsim.calc.memory.bytes_per_token`.
- :func:`measure_quantized_nbytes`: a real :class:`~kvsim.cache.QuantizedKVCache` fed real-geometry
  K/V (seeded normal, ``dtype``) one layer at a time; returns ``cache.nbytes`` (allocated) and
  ``cache.used_bytes`` (filled) as measured, to compare with :func:`kvsim.calc.memory.layer_kv_bytes`.
- :func:`synthetic_qkv`: seeded MLX queries/keys/values with two properties of real attention,
  documented so a learner can switch them off: a few key channels much larger than the rest
  (outlier channels, as KIVI reports for key caches) and a direction shared by queries and keys
  that RoPE turns into a preference for nearby tokens (``recency``). Not a trained model's K/V.
- :func:`attention_error`: the L queries attend to T cached tokens (causal; queries are the last L
  positions) once through dense :func:`~kvsim.cache.sdpa.sdpa` on the exact K/V and once through
  :func:`~kvsim.cache.sdpa.quantized_sdpa` on what a real QuantizedKVCache returns (prefill T−L
  tokens, then the last L); relative error = ‖O_q − O‖_F / ‖O‖_F.

Keys quantized per channel (KIVI) beside per token, on the same real MLX tensors.

Contract
- :func:`fake_quantize`: ``mx.quantize`` then ``mx.dequantize`` of a (B, H, T, D) array, with groups
  of ``group_size`` consecutive elements either along D (``axis="token"``: one scale and bias per token
  and group of channels, what :class:`~kvsim.cache.QuantizedKVCache` stores) or along T
  (``axis="channel"``: one scale and bias per channel and group of tokens, KIVI's choice for keys).
  Per-channel groups need T divisible by the group size (KIVI keeps the remainder exact).
- :func:`scheme_errors`: relative attention error ‖O_q − O‖_F / ‖O‖_F of the queries of a
  :class:`~kvsim.lessons.l06_quantized.measure.QKV` over dequantized keys and values, for per-token keys and for
  per-channel keys (values per token in both, as KIVI does). Both cost the same metadata per element.
- :func:`key_error_map`: |K̂ − K| of one KV head under both schemes, and |K|, for a picture.
- :func:`per_head_errors`: lesson 06's error (real QuantizedKVCache) computed on each KV head alone.
- :func:`lesson_scheme_errors` / :func:`lesson_key_error_map`: the two on lesson 06's sample, memoized
  (what the view redraws).
- :func:`kivi_recipe_error`: KIVI's whole recipe as one setting: the newest R tokens exact, the older
  tokens' keys per channel in groups of g tokens (an incomplete oldest-to-newest remainder group stays
  exact, as KIVI keeps it until it fills), their values per token; beside it the real
  QuantizedKVCache with the same R (keys and values per token). Same bits, same g.
- :func:`storage_mode_rows`: the seed's three storage modes (fp16, uniform, rotated = TurboQuant-style) on
  lesson 06's sample: :func:`kvsim.cache.turboquant.storage_mode_errors` with the causal mask, each row
  with its exact data and metadata bytes and the real cache's nbytes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from ...cache.base import mx_dtype
from ...cache.quantized import QuantizedKVCache
from ...cache.sdpa import quantized_sdpa, sdpa
from ...cache.turboquant import storage_mode_errors
from ...calc.config import LayerSpec, ModelSpec
from ...calc.memory import kv_bytes, parse_kv_dtype
from ...calc.progress import Progress
from ...calc.quant_bytes import token_bytes_split
from ...calc.units import BITS, DEFAULT_STEP, GROUP_SIZES
from ...model.layers import reference_mask, rope


class MeasuredNbytes(NamedTuple):
    """Per token count: cache.nbytes (allocated slots) and cache.used_bytes (filled slots)."""

    tokens: np.ndarray
    nbytes: np.ndarray
    used_bytes: np.ndarray


def measure_quantized_nbytes(layer: LayerSpec, token_counts, bits: int = 4, group_size: int = 64,
                             full_precision_tokens: int = 0, dtype: str = "bf16", step: int = DEFAULT_STEP,
                             chunk_tokens: int = 512, seed: int = 0) -> MeasuredNbytes:
    """Feed a real QuantizedKVCache (B=1, one layer's K/V heads) and read its bytes at each count."""
    if layer.kind != "full":
        raise ValueError(f"layer.kind must be 'full' for a quantized K/V measurement, got {layer.kind!r}")
    dt = mx_dtype(dtype)
    counts = np.asarray(token_counts, dtype=np.int64)
    if counts.ndim != 1 or len(counts) == 0 or np.any(counts < 0) or np.any(np.diff(counts) < 0):
        raise ValueError("token_counts must be a non-empty ascending list of integers >= 0")
    cache = QuantizedKVCache(bits, group_size, step=step, full_precision_tokens=full_precision_tokens)
    H = layer.num_key_value_heads
    key, fed, nbytes, used = mx.random.key(seed), 0, [], []
    for target in counts.tolist():
        while fed < target:
            s = min(chunk_tokens, target - fed)
            key, kk, kv = mx.random.split(key, 3)
            k = mx.random.normal((1, H, s, layer.head_dim), key=kk).astype(dt)
            v = mx.random.normal((1, H, s, layer.v_head_dim), key=kv).astype(dt)
            mx.eval(cache.update_and_fetch(k, v))
            fed += s
        nbytes.append(cache.nbytes)
        used.append(cache.used_bytes)
    return MeasuredNbytes(counts, np.array(nbytes, dtype=np.int64), np.array(used, dtype=np.int64))


# ---------------------------------------------------------------- attention error (MLX)


class QKV(NamedTuple):
    """q (B, H_q, L, D) at positions T−L..T−1; k, v (B, H_kv, T, D) at positions 0..T−1."""

    q: mx.array
    k: mx.array
    v: mx.array


@lru_cache(maxsize=8)
def synthetic_qkv(tokens: int = 1024, queries: int = 8, num_attention_heads: int = 16,
                  num_key_value_heads: int = 4, head_dim: int = 128, outlier_channels: int = 4,
                  outlier_scale: float = 8.0, recency: float = 1.0, rope_theta: float = 500_000.0,
                  seed: int = 0) -> QKV:
    """Seeded float32 q, k, v: Llama 3 8B's head_dim, 4 query heads per KV head and rope_theta
    (4 of its 8 KV heads, to keep CPU runs short).

    k = RoPE((recency·m + N(0,1)) ⊙ c), q = RoPE(recency·m + N(0,1)), v = N(0,1) + per-head mean;
    m is one direction per KV head, c is 1 except every (D/outlier_channels)-th channel = outlier_scale.
    """
    if not 1 <= queries <= tokens:
        raise ValueError(f"queries must be in [1, tokens={tokens}], got {queries!r}")
    if num_attention_heads % num_key_value_heads:
        raise ValueError(f"num_attention_heads {num_attention_heads} must be a multiple of "
                         f"num_key_value_heads {num_key_value_heads}")
    H, Hq, D = num_key_value_heads, num_attention_heads, head_dim
    kk, kv, kq, km, kvm = mx.random.split(mx.random.key(seed), 5)
    mean = mx.random.normal((1, H, 1, D), key=km)                       # shared q/k direction per KV head
    channel = mx.ones((D,))
    if outlier_channels:
        channel = mx.where(mx.arange(D) % max(D // outlier_channels, 1) == 0, outlier_scale, 1.0)
    k = (recency * mean + mx.random.normal((1, H, tokens, D), key=kk)) * channel
    q = recency * mx.repeat(mean, Hq // H, axis=1) + mx.random.normal((1, Hq, queries, D), key=kq)
    v = mx.random.normal((1, H, tokens, D), key=kv) + mx.random.normal((1, H, 1, D), key=kvm)
    k, q = rope(k, D, rope_theta, 0), rope(q, D, rope_theta, tokens - queries)
    mx.eval(q, k, v)
    return QKV(q, k, v)


class ErrorResult(NamedTuple):
    """Relative attention error and the bytes of the real cache that produced it."""

    relative_error: float
    nbytes: int           # cache.nbytes: allocated slots
    used_bytes: int       # cache.used_bytes: filled slots (the theoretical view)


def exact_attention(qkv: QKV) -> mx.array:
    """Dense causal attention of the L queries (positions T−L..T−1) over the exact K/V: (B, H_q, L, D)."""
    q, k, v = qkv
    T, L = k.shape[2], q.shape[2]
    return sdpa(q, k, v, reference_mask(L, T, offset=T - L))


def attention_error(qkv: QKV, bits: int = 4, group_size: int = 64, full_precision_tokens: int = 0,
                    step: int = DEFAULT_STEP, exact: mx.array | None = None) -> ErrorResult:
    """‖quantized_sdpa(q, cache) − sdpa(q, k, v)‖_F / ‖sdpa(q, k, v)‖_F on a real QuantizedKVCache.

    ``exact``: :func:`exact_attention` of ``qkv`` if already computed (sweeps reuse it).
    """
    q, k, v = qkv
    T, L = k.shape[2], q.shape[2]
    mask = reference_mask(L, T, offset=T - L)
    exact = exact_attention(qkv) if exact is None else exact
    cache = QuantizedKVCache(bits, group_size, step=step, full_precision_tokens=full_precision_tokens)
    if T > L:
        cache.update_and_fetch(k[:, :, :T - L], v[:, :, :T - L])         # prefill
    kv = cache.update_and_fetch(k[:, :, T - L:], v[:, :, T - L:])       # the L query tokens
    out = quantized_sdpa(q, kv.keys, kv.values, mask, group_size=group_size, bits=bits,
                         recent_keys=kv.recent_keys, recent_values=kv.recent_values)
    err = mx.linalg.norm((out - exact).flatten()) / mx.linalg.norm(exact.flatten())
    return ErrorResult(float(err), cache.nbytes, cache.used_bytes)


def recent_attention_share(qkv: QKV, recent_tokens: int) -> float:
    """Share of the exact attention probability mass on the ``recent_tokens`` newest positions.

    Mean over heads and queries of Σ_{j ≥ T−R} softmax(q·k_j/√D) (causal); explains why keeping
    those tokens exact helps.
    """
    q, k, _ = qkv
    T, L, D = k.shape[2], q.shape[2], k.shape[3]
    B, Hq, H = q.shape[0], q.shape[1], k.shape[1]
    qg = (q * D ** -0.5).reshape(B, H, Hq // H, L, D)
    scores = qg @ k[:, :, None].swapaxes(-1, -2)                        # (B, H, rep, L, T)
    mask = reference_mask(L, T, offset=T - L)
    probs = mx.softmax(mx.where(mask, scores, mx.finfo(scores.dtype).min), axis=-1, precise=True)
    r = min(max(int(recent_tokens), 0), T)
    return float(probs[..., T - r:].sum(axis=-1).mean()) if r else 0.0


def error_sweep(qkv: QKV, bits=BITS, group_sizes=GROUP_SIZES, full_precision_tokens=(0,),
                progress: bool = False) -> list[dict]:
    """:func:`attention_error` for every (R, group size, bits); one row each, bits ascending."""
    combos = [(r, g, b) for r in full_precision_tokens for g in group_sizes for b in sorted(bits)]
    it = Progress(combos, desc="quantized attention", unit="caches", enabled=progress)
    rows, exact = [], exact_attention(qkv)
    for r, g, b in it:
        res = attention_error(qkv, b, g, r, exact=exact)
        rows.append({"bits": b, "group": g, "recent R": r, "relative error": res.relative_error,
                     "nbytes": res.nbytes, "used bytes": res.used_bytes})
    return rows


def errors_by(rows: list[dict], key: str = "group", x: str = "bits") -> dict:
    """{value of ``key``: (x array, relative error array)} from :func:`error_sweep` rows."""
    out: dict = {}
    for row in rows:
        xs, ys = out.setdefault(row[key], ([], []))
        xs.append(row[x])
        ys.append(row["relative error"])
    return {k: (np.array(xs), np.array(ys)) for k, (xs, ys) in out.items()}


def error_pivot(rows: list[dict], recent_tokens: int = 0) -> list[dict]:
    """:func:`error_sweep` rows at one R as a table: one row per bits, one column per group (error in %)."""
    table: dict = {}
    for row in rows:
        if row["recent R"] == recent_tokens:
            table.setdefault(row["bits"], {"bits": row["bits"]})[f"g{row['group']} error %"] = \
                round(100 * row["relative error"], 2)
    return [table[b] for b in sorted(table)]


def tradeoff_points(spec: ModelSpec, rows: list[dict], recent_tokens: int = 0,
                    scale_dtype: str = "bf16") -> dict:
    """{"g<group>": (bytes per token of ``spec``, relative error, "q<bits>" labels)} for a bytes-vs-error plot."""
    out: dict = {}
    for row in sorted(rows, key=lambda r: (r["group"], r["bits"])):
        if row["recent R"] != recent_tokens:
            continue
        dt = parse_kv_dtype(f"q{row['bits']}", group_size=row["group"], scale_dtype=scale_dtype)
        b, e, names = out.setdefault(f"g{row['group']}", ([], [], []))
        b.append(token_bytes_split(spec, dt)["total"])
        e.append(row["relative error"])
        names.append(f"q{row['bits']}")
    return out


def recent_window_table(spec: ModelSpec, qkv: QKV, bits: int = 4, group_size: int = 64,
                        recent=(0, 32, 64, 128, 256), long_tokens: int = 32_768,
                        progress: bool = False) -> list[dict]:
    """Per R: attention share on the R newest tokens, measured error, and ``spec``'s KV bytes at the
    sample's T and at ``long_tokens`` (bf16 scales and recent tokens)."""
    T, exact = qkv.k.shape[2], exact_attention(qkv)
    it = Progress(recent, desc="recent window", unit="caches", enabled=progress)
    rows = []
    for r in it:
        dt = parse_kv_dtype(f"q{bits}", group_size=group_size, full_precision_tokens=r)
        rows.append({"R": r, "attention on newest R %": round(100 * recent_attention_share(qkv, r), 1),
                     "error %": round(100 * attention_error(qkv, bits, group_size, r, exact=exact).relative_error, 2),
                     f"MiB at {T:,}": round(kv_bytes(spec, T, kv_dtype=dt) / 2**20, 1),
                     f"MiB at {long_tokens:,}": round(kv_bytes(spec, long_tokens, kv_dtype=dt) / 2**20, 1)})
    return rows


@lru_cache(maxsize=8)
def _view_sample(tokens: int):
    qkv = synthetic_qkv(tokens, queries=8)       # the lesson's own sample (4 KV heads, 8 queries) at T tokens
    return qkv, exact_attention(qkv)


@lru_cache(maxsize=256)
def view_error(bits: int, group_size: int, recent_tokens: int, tokens: int) -> float:
    """:func:`attention_error` on lesson 06's sample (``synthetic_qkv(tokens, queries=8)``, the tables' sample at
    1,024 tokens), memoized per setting."""
    qkv, exact = _view_sample(tokens)
    return attention_error(qkv, bits, group_size, recent_tokens, exact=exact).relative_error


AXES = ("token", "channel")


def fake_quantize(x: mx.array, bits: int, group_size: int, axis: str = "token") -> mx.array:
    """x after a round trip through mx.quantize: groups along D (axis='token') or along T ('channel')."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    if axis == "channel":
        if x.shape[-2] % group_size:
            raise ValueError(f"tokens ({x.shape[-2]}) must be a multiple of group_size ({group_size}) "
                             "for per-channel groups")
        return fake_quantize(x.swapaxes(-1, -2), bits, group_size).swapaxes(-1, -2)  # (B, H, D, T) grouped on T
    return mx.dequantize(*mx.quantize(x, group_size=group_size, bits=bits), group_size=group_size, bits=bits)


def _error(qkv: QKV, k_hat: mx.array, v_hat: mx.array, exact: mx.array) -> float:
    q, k, _ = qkv
    T, L = k.shape[2], q.shape[2]
    out = sdpa(q, k_hat, v_hat, reference_mask(L, T, offset=T - L))
    return float(mx.linalg.norm((out - exact).flatten()) / mx.linalg.norm(exact.flatten()))


def scheme_errors(qkv: QKV, bits: int = 2, group_size: int = 64, exact: mx.array | None = None) -> dict:
    """{"keys per token": error, "keys per channel (KIVI)": error}; values per token in both.

    ``exact``: :func:`exact_attention` of ``qkv`` if already computed (the view's sample keeps it).
    """
    exact = exact_attention(qkv) if exact is None else exact
    v_hat = fake_quantize(qkv.v, bits, group_size, "token")
    return {"keys per token": _error(qkv, fake_quantize(qkv.k, bits, group_size, "token"), v_hat, exact),
            "keys per channel (KIVI)": _error(qkv, fake_quantize(qkv.k, bits, group_size, "channel"), v_hat, exact)}


def key_error_map(qkv: QKV, bits: int = 2, group_size: int = 64, head: int = 0, tokens: int = 64) -> dict:
    """(tokens, D) maps of |K| and of |K̂ − K| per scheme, for KV head ``head`` and the first ``tokens``."""
    k = qkv.k[:, head:head + 1]  # groups never span heads: quantizing this head alone gives the same K̂
    out = {"|K|": np.abs(np.array(k[0, 0, :tokens]))}
    for axis in AXES:
        # per token: groups within a token; per channel: groups of group_size tokens from token 0, so the
        # groups that hold the first `tokens` tokens (a whole number of groups) give the same K̂ there
        rows = tokens if axis == "token" else min(k.shape[2], -(-tokens // group_size) * group_size)
        part = k[:, :, :rows]
        err = mx.abs(fake_quantize(part, bits, group_size, axis) - part)[0, 0, :tokens]
        out[f"error, per {axis}"] = np.array(err)
    return out


def per_head_errors(qkv: QKV, bits: int = 4, group_size: int = 64, full_precision_tokens: int = 0) -> list[float]:
    """:func:`~kvsim.lessons.l06_quantized.measure.attention_error` on each KV head (with its query heads) alone."""
    q, k, v = qkv
    rep = q.shape[1] // k.shape[1]
    return [attention_error(QKV(q[:, h * rep:(h + 1) * rep], k[:, h:h + 1], v[:, h:h + 1]), bits, group_size,
                            full_precision_tokens).relative_error for h in range(k.shape[1])]


@lru_cache(maxsize=64)
def lesson_scheme_errors(bits: int, group_size: int) -> dict:
    """:func:`scheme_errors` on lesson 06's sample (``synthetic_qkv(1024, 8)``), memoized per setting."""
    qkv, exact = _view_sample(1024)  # synthetic_qkv(1024, queries=8) and its dense attention, kept
    return scheme_errors(qkv, bits, group_size, exact)


@lru_cache(maxsize=64)
def lesson_key_error_map(bits: int, group_size: int) -> dict:
    """:func:`key_error_map` of lesson 06's sample, memoized per setting."""
    return key_error_map(synthetic_qkv(tokens=1024, queries=8), bits, group_size)


def kivi_recipe_error(qkv: QKV, bits: int = 2, group_size: int = 32, recent_tokens: int = 128) -> dict:
    """Relative attention error of KIVI's recipe and of kvsim's cache at the same bits, g and R.

    KIVI: of T tokens the newest R are exact; of the older n = T − R, the first ⌊n/g⌋·g have keys
    quantized per channel (groups of g tokens) and the rest stay exact; all n values per token.
    kvsim: :func:`attention_error` (a real QuantizedKVCache, keys and values per token, R exact).
    Returns {"KIVI recipe": error, "per token (kvsim cache)": error, "exact tokens": R + n mod g}.
    """
    q, k, v = qkv
    T, L = k.shape[2], q.shape[2]
    n = max(T - recent_tokens, 0)
    full = n - n % group_size                                          # tokens in complete per-channel groups
    k_hat = mx.concatenate([fake_quantize(k[:, :, :full], bits, group_size, "channel"), k[:, :, full:]], axis=2)
    v_hat = mx.concatenate([fake_quantize(v[:, :, :n], bits, group_size, "token"), v[:, :, n:]], axis=2)
    exact = exact_attention(qkv)
    return {"KIVI recipe": _error(qkv, k_hat, v_hat, exact),
            "per token (kvsim cache)": attention_error(qkv, bits, group_size, recent_tokens, exact=exact).relative_error,
            "exact tokens": T - full}


def storage_mode_rows(qkv: QKV, bits=(2, 3, 4, 6, 8), group_size: int = 64, seed: int = 0) -> list[dict]:
    """fp16 / uniform / rotated on lesson 06's sample: error and exact bytes per row (see module contract)."""
    q, k, v = qkv
    T, L = k.shape[2], q.shape[2]
    return storage_mode_errors(q, k, v, reference_mask(L, T, offset=T - L), bits=bits, group_size=group_size,
                               seed=seed)
