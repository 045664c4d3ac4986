"""MLA attention per call: absorbed (read the latent) vs materialized (expand per-head K/V), FLOPs, bytes, choice.

Contract (pure arithmetic)
- One MLA layer, one sequence, one call of L query tokens after C cached tokens (T = C + L keys).
  Widths from the config: H = num_attention_heads, r = kv_lora_rank, R = qk_rope_head_dim,
  N = qk_nope_head_dim, V = v_head_dim; b = bytes per cached/activation element. Causal pairs
  (query, visible key): pairs = L·C + L(L+1)/2. 2 FLOPs per multiply-add.
- Absorbed (W_uk folded into the query, attention over the latent, W_uv after):
  FLOPs = 2·L·H·N·r + 2·pairs·H·(r + R) + 2·pairs·H·r + 2·L·H·r·V;
  bytes = T·(r + R)·b (the latent and RoPE key, read once for all heads) + kv_b weights.
- Materialized (expand every key of the window per head, then ordinary attention):
  FLOPs = 2·T·r·H·(N + V) + 2·pairs·H·(N + R) + 2·pairs·H·V;
  bytes = T·(r + R)·b + 2·T·H·(N + R + V)·b (per-head K/V written, then read) + kv_b weights.
  kv_b weights = H·(N + V)·r·b, read by both.
- Time on a machine = max(FLOPs / FLOP/s, bytes / (bytes/s)) (a roofline); the default machine is
  the H200 measured by ``benchmarks/bench_roofline.py`` (``data/h200``: matmul FLOP/s and copy
  bandwidth, :func:`kvsim.calc.h200.load_run`).
- :func:`use_absorbed_mla` decides like the seed's ``mlxcel_core::mla::use_absorbed_mla``: per call,
  absorbed when its time is not above the materialized time. :func:`crossover_query_tokens` is the
  fewest query tokens per call from which materializing is cheaper, after C cached tokens.
  At DeepSeek-V3 sizes the per-pair work is 2·H·(2r + R) = 2·128·1088 vs 2·H·(N + R + V) = 2·128·320
  FLOPs, and expanding costs 2·H·r·(N + V) per key: materializing pays its expansion back from about
  r·(N + V) / (2r + R − N − R − V) = 512·256 / 768 ≈ 171 query tokens when C ≫ L.
- Bad input: ValueError naming the field and the accepted range.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .registry import measured_machine
from .units import nonnegative_int, positive_int

__all__ = ["MlaDims", "mla_call_costs", "use_absorbed_mla", "crossover_query_tokens", "h200_machine",
           "MLA_CALL_POINTS", "mla_point_rows"]

# the calls the seed names: (label, query tokens L, cached tokens C before the call)
MLA_CALL_POINTS = (("cold prefill", 4096, 0), ("512-token chunk after a 32K cache", 512, 32768),
                   ("k = 4 verify block after 32K", 5, 32768), ("decode after 32K", 1, 32768))


@dataclass(frozen=True)
class MlaDims:
    """The widths of one MLA layer (config.json names)."""

    num_attention_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @classmethod
    def from_spec(cls, spec) -> "MlaDims":
        """The widths of a ModelSpec's MLA layers (ValueError when it has none)."""
        layer = next((l for l in spec.layers if l.kind == "mla"), None)
        if layer is None:
            raise ValueError(f"spec {spec.name!r} has no mla layer")
        return cls(spec.num_attention_heads, layer.kv_lora_rank, layer.qk_rope_head_dim,
                   spec.qk_nope_head_dim, spec.v_head_dim)


def _pairs(L: int, C: int) -> int:
    """Visible (query, key) pairs of L causal queries after C cached keys: L·C + L(L+1)/2."""
    return L * C + L * (L + 1) // 2


def mla_call_costs(dims: MlaDims, query_tokens: int, cached_tokens: int, dtype_bytes: int = 2) -> dict:
    """{'absorbed': {'flops', 'bytes'}, 'materialized': {'flops', 'bytes'}} of one call (module formulas)."""
    L, C = positive_int("query_tokens", query_tokens), nonnegative_int("cached_tokens", cached_tokens)
    b = positive_int("dtype_bytes", dtype_bytes)
    H, r, R, N, V = (dims.num_attention_heads, dims.kv_lora_rank, dims.qk_rope_head_dim,
                     dims.qk_nope_head_dim, dims.v_head_dim)
    T, pairs = C + L, _pairs(L, C)
    weights = H * (N + V) * r * b
    latent = T * (r + R) * b
    absorbed = {"flops": 2 * L * H * N * r + 2 * pairs * H * (2 * r + R) + 2 * L * H * r * V,
                "bytes": latent + weights}
    materialized = {"flops": 2 * T * r * H * (N + V) + 2 * pairs * H * (N + R + V),
                    "bytes": latent + 2 * T * H * (N + R + V) * b + weights}
    return {"absorbed": absorbed, "materialized": materialized}


def h200_machine() -> tuple[float, float]:
    """(matmul FLOP/s, copy bytes/s) measured on the H200 (data/h200/roofline_cuda.json)."""
    return measured_machine("h200")


def _seconds(cost: dict, machine) -> float:
    flops_per_s, bytes_per_s = machine
    return max(cost["flops"] / flops_per_s, cost["bytes"] / bytes_per_s)


def use_absorbed_mla(dims: MlaDims, query_tokens: int, cached_tokens: int, dtype_bytes: int = 2,
                     machine: tuple[float, float] | None = None) -> bool:
    """Absorbed iff max(F_abs/FLOPs, B_abs/bw) <= max(F_mat/FLOPs, B_mat/bw) for this call."""
    costs = mla_call_costs(dims, query_tokens, cached_tokens, dtype_bytes)
    machine = machine or h200_machine()
    return _seconds(costs["absorbed"], machine) <= _seconds(costs["materialized"], machine)


def crossover_query_tokens(dims: MlaDims, cached_tokens: int, dtype_bytes: int = 2,
                           machine: tuple[float, float] | None = None, max_tokens: int = 1 << 20) -> int | None:
    """Fewest query tokens per call (after ``cached_tokens``) for which materializing is cheaper; None if
    absorbed wins up to ``max_tokens`` (bisection: absorbed wins below the crossover, not from it on)."""
    machine = machine or h200_machine()
    if use_absorbed_mla(dims, max_tokens, cached_tokens, dtype_bytes, machine):
        return None
    lo, hi = 1, max_tokens          # invariant: materialized wins at hi
    if not use_absorbed_mla(dims, lo, cached_tokens, dtype_bytes, machine):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if use_absorbed_mla(dims, mid, cached_tokens, dtype_bytes, machine):
            lo = mid
        else:
            hi = mid
    return hi


def mla_point_rows(dims: MlaDims, points=MLA_CALL_POINTS, dtype_bytes: int = 2, machine=None) -> list[dict]:
    """One row per named call: its costs, each path's roofline seconds and the path chosen."""
    machine = machine or h200_machine()
    rows = []
    for label, L, C in points:
        costs = mla_call_costs(dims, L, C, dtype_bytes)
        rows.append({"label": label, "query_tokens": L, "cached_tokens": C, **{
            f"{path}_{k}": v for path, c in costs.items() for k, v in c.items()},
            "absorbed_s": _seconds(costs["absorbed"], machine),
            "materialized_s": _seconds(costs["materialized"], machine),
            "path": "absorbed" if use_absorbed_mla(dims, L, C, dtype_bytes, machine) else "materialized"})
    return rows
