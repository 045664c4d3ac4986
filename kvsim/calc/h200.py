"""The H200 dataset (``data/h200/``): decode measured on an NVIDIA H200, read without MLX.

Contract (pure: json and arithmetic)
- :func:`load_run` reads ``roofline_cuda.json``, written by ``benchmarks/bench_roofline.py``: the
  device, the software, the calibration (copy bandwidth in bytes/s, read + written; matmul FLOP/s),
  and decode points per variant, each with its bytes read, FLOPs, and kvsim's and mlx-lm's best
  step times (ms). A file without one of those parts is a ValueError naming what is missing.
- :func:`provenance` is the dataset's where, what and how, as printable lines.
- :func:`variant_rows` / :func:`comparison_rows`: the points of a variant, and one row per variant
  with kvsim / mlx-lm (geometric mean and worst of the best-of ratios) and time / floor, where
  floor = bytes read / copy bandwidth (:func:`kvsim.calc.roofline.floor_seconds`, recomputed here).
- :func:`load_fused_check` reads ``check_fused.json``; :func:`quantized_probe_rows` lists which
  quantized attention products MLX's CUDA backend ran there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .registry import data_dir, load_model, model_names
from .roofline import floor_seconds

__all__ = ["Run", "load_run", "provenance", "variant_rows", "comparison_rows", "load_fused_check",
           "quantized_probe_rows", "RUN_FILE", "CHECK_FILE"]

RUN_FILE, CHECK_FILE = "roofline_cuda.json", "check_fused.json"
_PARTS = ("meta", "device", "calibration", "variants", "batch_sweep")
_POINT = ("context_tokens", "batch", "read_bytes", "flops", "step_ms")


@dataclass(frozen=True)
class Run:
    """One benchmark run: where and how it was measured, and its decode points."""

    meta: dict
    device: dict
    calibration: dict
    variants: dict          # {variant: {"geometry": {...}, "points": [point, ...]}}
    batch_sweep: dict       # {"variant", "context_tokens", "points"}
    mla_kernels: list
    errors: list
    path: Path

    @property
    def bytes_per_s(self) -> float:
        return float(self.calibration["copy_bytes_per_s"])

    @property
    def flops_per_s(self) -> float:
        return float(self.calibration["matmul_flops_per_s"])

    def points(self, variant: str) -> list[dict]:
        """The measured points of ``variant`` (those that ran), in context order."""
        if variant not in self.variants:
            raise ValueError(f"variant {variant!r} is not one of {', '.join(self.variants)}")
        return self.variants[variant]["points"]

    def label(self, variant: str) -> str:
        """The variant's name, with "n of N layers" when the run built fewer layers than the model has."""
        geometry = self.variants[variant]["geometry"]
        if geometry["source"] in model_names():
            total = load_model(geometry["source"]).num_hidden_layers
            if geometry["num_layers"] < total:
                return f"{variant[:-1]}, {geometry['num_layers']} of {total} layers)" if variant.endswith(")") \
                    else f"{variant} ({geometry['num_layers']} of {total} layers)"
        return variant

    def measured_variants(self) -> list[str]:
        """Variants with at least one measured point (a variant whose every step failed has none)."""
        return [v for v, d in self.variants.items() if d["points"]]


def _folder(folder) -> Path:
    return Path(folder) if folder is not None else data_dir() / "h200"


def load_run(folder=None) -> Run:
    """The run in ``folder`` (default: kvsim's ``data/h200``), checked for the parts lesson 08 reads."""
    path = _folder(folder) / RUN_FILE
    raw = json.loads(path.read_text(encoding="utf-8"))
    missing = [p for p in _PARTS if p not in raw]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    groups = {**{name: v.get("points", []) for name, v in raw["variants"].items()},
              "batch sweep": raw["batch_sweep"].get("points", [])}
    for name, points in groups.items():
        for point in points:
            if lost := [k for k in _POINT if k not in point]:
                raise ValueError(f"{path}: a point of {name!r} lacks {', '.join(lost)}")
    return Run(raw["meta"], raw["device"], raw["calibration"], raw["variants"], raw["batch_sweep"],
               raw.get("mla_kernels", []), raw.get("errors", []), path)


def provenance(run: Run) -> list[str]:
    """Device, software, commit, date, method and calibration of the run, one line each."""
    m, d, c = run.meta, run.device, run.calibration
    return [f"device: {d['name']} ({d['backend']}, {d.get('architecture', '')}), "
            f"{d['memory_total_bytes'] / 2**30:.0f} GiB",
            f"software: MLX {m['mlx']}, mlx-lm {m['mlx_lm']}, Python {m['python']}; kvsim commit {m['kvsim_commit']}",
            f"date: {m['date']}",
            f"method: {m['dtype']} weights and caches, best of {m['repeats']} decode steps, kvsim and mlx-lm "
            "interleaved; caches filled with random K/V",
            f"calibration: copy {run.bytes_per_s / 1e12:.2f} TB/s (read + write), matmul "
            f"{run.flops_per_s / 1e12:.0f} TFLOP/s; balance {c['machine_balance_flop_per_byte']:.0f} FLOP/B",
            f"source: {run.path.parent.name}/{run.path.name} (how it was made: README.md beside it)"]


def _ratio(point: dict, bytes_per_s: float) -> float:
    return point["step_ms"]["kvsim"] / 1e3 / floor_seconds(point["read_bytes"], bytes_per_s)


def variant_rows(run: Run, variant: str) -> list[dict]:
    """One row per point: context, batch, GB read, kvsim and mlx-lm ms, their ratio, floor ms, kvsim / floor."""
    rows = []
    for p in run.points(variant):
        ms = p["step_ms"]
        rows.append({"context": p["context_tokens"], "batch": p["batch"], "read GB": round(p["read_bytes"] / 1e9, 3),
                     "kvsim ms": round(ms["kvsim"], 2), "mlx-lm ms": round(ms.get("mlx-lm", math.nan), 2),
                     "kvsim / mlx-lm": round(ms["kvsim"] / ms.get("mlx-lm", math.nan), 2),
                     "floor ms": round(1e3 * floor_seconds(p["read_bytes"], run.bytes_per_s), 2),
                     "kvsim / floor": round(_ratio(p, run.bytes_per_s), 2)})
    return rows


def comparison_rows(run: Run) -> list[dict]:
    """Per measured variant: contexts, kvsim / mlx-lm (geometric mean, worst), kvsim / floor (least, most)."""
    rows = []
    for v in run.measured_variants():
        pts = run.points(v)
        ratios = [p["step_ms"]["kvsim"] / p["step_ms"]["mlx-lm"] for p in pts]
        floors = [_ratio(p, run.bytes_per_s) for p in pts]
        rows.append({"variant": v, "contexts": f"{pts[0]['context_tokens']:,}-{pts[-1]['context_tokens']:,}",
                     "points": len(pts),
                     "kvsim / mlx-lm (geo. mean)": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3),
                     "worst": round(max(ratios), 2),
                     "kvsim / floor": f"{min(floors):.2f}-{max(floors):.2f}"})
    return rows


def load_fused_check(folder=None) -> dict:
    """``check_fused.json``: fused attention against the reference, and the quantized-product probes."""
    path = _folder(folder) / CHECK_FILE
    raw = json.loads(path.read_text(encoding="utf-8"))
    if "quantized_slices" not in raw or "cases" not in raw:
        raise ValueError(f"{path}: missing cases or quantized_slices")
    return raw


def quantized_probe_rows(check: dict) -> list[dict]:
    """Which quantized one-query products ran: over fresh arrays (by bits) and over sliced cache buffers."""
    rows = []
    for bits in sorted({r["bits"] for r in check.get("quantized_matmul", [])}, reverse=True):
        tried = [r for r in check["quantized_matmul"] if r["bits"] == bits]
        rows.append({"product": f"{bits}-bit keys, a freshly quantized array",
                     "keys tried": f"{min(r['keys'] for r in tried):,}-{max(r['keys'] for r in tried):,}",
                     "ran": f"{sum(r['runs'] for r in tried)} of {len(tried)}"})
    for r in check["quantized_slices"]:
        rows.append({"product": r["case"], "keys tried": "", "ran": "yes" if r["runs"] else
                     "no: " + r["error"].split(":")[0].strip("[] ")})
    return rows
