"""Lesson 08 (decode is memory-bound): pure numbers for this lesson's pictures (calc and serving only; no MLX,
no drawing).

Attention techniques against the cache formula: what each changes in bytes STORED and bytes READ per step.

Contract
- Pure arithmetic over :mod:`kvsim.calc.memory` (no MLX), vectorized over ``tokens`` where it says so.
- :func:`technique_table`: the seeds' table, one row per technique, every number computed from
  real configs: which term of ``M_token = 2·n_layers·n_kv·d_h·b`` it changes, what stays in the
  cache, and the bytes stored and read per decode step relative to the baseline it is compared with.
- Sparse attention keeps every token but reads a few per step:
  * NSA (Yuan et al., 2025): a query reads ⌊T/d⌋ compressed blocks, n selected blocks of l' tokens
    and a window of w tokens: ``min(T, ⌊T/d⌋ + n·l' + w)`` token equivalents (d=16, n=16, l'=64,
    w=512: 2,048 at 8K and 5,632 at 64K, the paper's Table 4);
  * DSA (DeepSeek-V3.2): a lightning indexer scores all T tokens on its own small key
    (``index_head_dim`` = 128 fp8 elements + one fp32 scale per 128 = 132 B per token per layer,
    as serving engines store it), then attention reads the top ``index_topk`` = 2048 tokens.
    Stored: latent + indexer key (more than MLA alone); read: T indexer keys + 2048 latents.
- :func:`cache_read_intensity`: FLOPs a decode step does per byte of cache it reads (a multiply-add
  is 2 FLOPs): 2·g/b for K/V heads shared by g query heads, 2·H·(2r + r_rope)/((r + r_rope)·b) for
  absorbed MLA; :func:`weight_read_intensity`: 2·B/b per weight byte for a batch of B.

The H200 dataset (``data/h200/``): decode measured on an NVIDIA H200, read without MLX.

Contract (pure: json and arithmetic)
- :func:`load_run` reads ``roofline_cuda.json``, written by ``benchmarks/bench_roofline.py``: the
  device, the software, the calibration (copy bandwidth in bytes/s, read + written; matmul FLOP/s),
  and decode points per variant, each with its bytes read, FLOPs, and kvsim's and mlx-lm's best
  step times (ms). A file without one of those parts is a ValueError naming what is missing.
- :func:`provenance` is the dataset's where, what and how, as printable lines.
- :func:`decode_point_rows` / :func:`comparison_rows`: the points of a variant, and one row per variant
  with kvsim / mlx-lm (geometric mean and worst of the best-of ratios) and time / floor, where
  floor = bytes read / copy bandwidth (:func:`kvsim.calc.roofline.floor_seconds`, recomputed here).
- :func:`load_fused_check` reads ``check_fused.json``; :func:`quantized_probe_rows` lists which
  quantized attention products MLX's CUDA backend ran there; :func:`quantized_kernel_rows` the quantized
  attention kernels timed against bf16 (``quantized_kernels``).
- :func:`dataset_from_results` makes ``roofline_cuda.json`` from a benchmark run plus an earlier run's
  one-tensor batch sweep (``benchmarks/refresh_h200_dataset.py`` writes it); :func:`batch_sweep_rows` and
  :func:`dataset_findings` print what the sweeps and points show, from the data.
- :func:`load_breakdown` reads ``step_breakdown_cuda.json``; :func:`step_segments` splits one measured
  eager step into :data:`SEGMENTS` (weights' floor, matrix-vector kernels, cache's floor, launch and host
  overhead, rest) that sum to it; :func:`breakdown_rows` one row per context.

The floor on decode speed, and stored vs read bytes, from the calculator alone (no measurement).

Contract (pure arithmetic over :mod:`kvsim.calc.memory`, the sparse reads above and the accelerator table)
- :func:`speed_floor`: the minimum decode step time of a served model on an accelerator,
  (weights read + B · cache read per step) / memory bandwidth, against context. Weights read:
  :func:`kvsim.calc.phases.weights_read_bytes` in bf16 (all active parameters but the input
  embedding table, of which one row: :func:`kvsim.calc.roofline.step_weight_bytes`).
- :func:`stored_vs_read`: what a cache stores and what one decode step reads, dense vs NSA vs DSA
  (:func:`sparse_bytes`).
- :func:`decode_speed_limit`: the floor plus tokens/s at T and "fits", judged by the bytes HELD
  (:func:`kvsim.calc.capacity.held_bytes`: all weights + B · (KV + state)), never by the bytes read.

The roofline pictures' numbers (no drawing): :func:`roofline_marks` (intensities, ridge, sides),
:func:`achieved`, :func:`time_and_floors`, :func:`h200_time_vs_bytes`, :func:`batch_floors` (floors
against B and "memory full", again from the bytes held) and :func:`h200_variant_series`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...calc import hybrid, memory, phases, units
from ...calc.capacity import held_bytes, max_concurrent_sequences
from ...calc.config import Kind, LayerSpec, ModelSpec
from ...calc.counterfactual import as_mha, attention_variants, full_attention
from ...calc.hardware import get_accelerator
from ...calc.phases import weights_read_bytes
from ...calc.registry import data_dir, load_model, model_names
from ...calc.roofline import floor_seconds
from ...calc.units import InputError
from ...calc.weights import weights_bytes


NSA = {"compress_stride": 16, "selected_blocks": 16, "block_tokens": 64, "window": 512}
DSA = {"index_topk": 2048, "index_head_dim": 128, "scale_block": 128, "scale_bytes": 4}


# ---------------------------------------------------------------- sparse reads


def nsa_read_tokens(tokens, compress_stride: int = 16, selected_blocks: int = 16, block_tokens: int = 64,
                    window: int = 512):
    """Token equivalents one NSA query reads: min(T, ⌊T/d⌋ + n·l' + w)."""
    t = np.asarray(tokens, dtype=np.int64)
    read = np.minimum(t, t // compress_stride + selected_blocks * block_tokens + window)
    return int(read) if np.ndim(tokens) == 0 else read


def dsa_indexer_key_bytes(index_head_dim: int = 128, scale_block: int = 128, scale_bytes: int = 4) -> int:
    """Bytes of one token's indexer key in one layer: d_I fp8 bytes + one scale per block."""
    return index_head_dim + (index_head_dim // scale_block) * scale_bytes


def sparse_bytes(spec: ModelSpec, tokens, method: str, kv_dtype="bf16") -> dict:
    """{'stored', 'read'} bytes of one sequence at T under ``method`` (dense, nsa, dsa), summed over layers.

    Windowed layers keep and read min(T, W) whatever the method; full and MLA layers keep all T
    and read T (dense), the NSA budget, or T indexer keys + top-k tokens (DSA, which also stores the keys).
    """
    if method not in ("dense", "nsa", "dsa"):
        raise InputError(f"method {method!r} is not one of dense, nsa, dsa")
    t = np.asarray(tokens, dtype=np.int64)
    stored = np.zeros_like(t)
    read = np.zeros_like(t)
    idx = dsa_indexer_key_bytes()
    for layer, count in memory.layer_groups(spec):
        if not layer.caches_tokens:
            continue
        kept = np.asarray(memory.layer_kv_bytes(layer, t, kv_dtype), dtype=np.int64)
        per_token = memory.layer_token_bytes(layer, kv_dtype)
        sparse = not layer.is_windowed and method != "dense"
        if not sparse:
            s, r = kept, kept
        elif method == "nsa":
            s, r = kept, nsa_read_tokens(t, **NSA) * per_token
        else:
            s = kept + t * idx
            r = t * idx + np.minimum(t, DSA["index_topk"]) * per_token
        stored, read = stored + count * s, read + count * np.asarray(r, dtype=np.int64)
    if np.ndim(tokens) == 0:
        return {"stored": int(stored), "read": int(read)}
    return {"stored": stored, "read": read}


# ---------------------------------------------------------------- arithmetic per byte read


def cache_read_intensity(layer: LayerSpec, num_attention_heads: int, kv_dtype="bf16") -> float:
    """FLOPs per cache byte read when one new query attends (decode), for one layer.

    K/V heads: each of the g = H / n_kv query heads sharing a KV head does d_k + d_v multiply-adds
    per cached token, so FLOPs = 2·H·(d_k + d_v) per token against n_kv·(d_k + d_v)·b bytes:
    2·g / b (MHA in bf16: 1 FLOP per byte). MLA, absorbed: every head scores the latent and the
    RoPE key (r + r_rope) and sums the latent (r): 2·H·(2r + r_rope) FLOPs per (r + r_rope)·b bytes.
    """
    per_token = memory.layer_token_bytes(layer, kv_dtype)
    if layer.has_kv_heads:
        flops = 2 * num_attention_heads * (layer.head_dim + layer.v_head_dim)
    elif layer.kind == "mla":
        flops = 2 * num_attention_heads * (2 * layer.kv_lora_rank + layer.qk_rope_head_dim)
    else:
        raise InputError(f"layer kind {layer.kind!r} reads no K/V cache; accepted: {', '.join(Kind.CACHED)}")
    return flops / per_token


def weight_read_intensity(batch: int = 1, weights_dtype: str = "bf16") -> float:
    """FLOPs per weight byte read in one decode step: 2 per parameter per sequence, B sequences per read: 2B / b."""
    if not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch must be a positive integer, got {batch!r}")
    return 2 * batch / units.DTYPE_BYTES[weights_dtype]


# ---------------------------------------------------------------- the seed's table


def _pct(part, whole) -> float:
    return round(100 * float(part) / float(whole), 2)


def _row(name, term, stays, example, stored, read) -> dict:
    return {"technique": name, "term changed": term, "what stays in the cache": stays,
            "example": example, "stored %": stored, "read/step %": read}


def _fewer_heads_rows(llama, t: int = 8192) -> list[dict]:
    """MQA/GQA (Llama 3 8B vs its MHA twin) and MLA (DeepSeek-V3 sizes vs MHA)."""
    v = attention_variants()
    gqa, mha = memory.kv_bytes(llama, t), memory.kv_bytes(as_mha(llama), t)
    mla, full = memory.bytes_per_token(v["MLA"]), memory.bytes_per_token(v["MHA"])
    latent = v["MLA"].layers[0]
    return [
        _row("MQA, GQA", "n_kv", "one K/V pair per group", f"Llama 3 8B vs its MHA: {mha / gqa:.0f}x smaller",
             _pct(gqa, mha), _pct(memory.read_bytes_per_step(llama, t), memory.read_bytes_per_step(as_mha(llama), t))),
        _row("MLA", "2·n_kv·d_h", f"latent {latent.kv_lora_rank} + RoPE key {latent.qk_rope_head_dim} per layer",
             "DeepSeek-V3 sizes vs MHA", _pct(mla, full), _pct(mla, full)),
    ]


def _quantization_rows(llama) -> list[dict]:
    """fp8 and 2-bit K/V on Llama 3 8B against bf16, the 2-bit one with and without its scales/biases."""
    bf16, fp8 = memory.bytes_per_token(llama, "bf16"), memory.bytes_per_token(llama, "fp8")
    q2 = memory.parse_kv_dtype("q2")
    q2_data = sum(n * 2 * layer.num_key_value_heads * q2.vector_bytes(layer.head_dim, metadata=False)
                  for layer, n in memory.layer_groups(llama))
    q2_all = memory.bytes_per_token(llama, "q2")
    return [
        _row("KV quantization (fp8)", "b", "the same K/V, 1 byte each", "Llama 3 8B, fp8 vs bf16",
             _pct(fp8, bf16), _pct(fp8, bf16)),
        _row("KV quantization (2-bit)", "b", "2-bit K/V (+ scales, biases)", "Llama 3 8B, data only vs bf16",
             _pct(q2_data, bf16), _pct(q2_data, bf16)),
        _row("  same, with metadata", "b", "+ bf16 scale and bias per 64", "group_size 64",
             _pct(q2_all, bf16), _pct(q2_all, bf16)),
    ]


def _fewer_tokens_rows(mistral, jamba, mixtral) -> list[dict]:
    """Sliding windows (Mistral 7B at 32K) and a Mamba hybrid (Jamba vs Mixtral at 256K)."""
    t = 32_768
    sw, nosw = memory.kv_bytes(mistral, t), memory.kv_bytes(full_attention(mistral), t)
    window = _row("sliding window", "T -> min(T, W) per layer", "the last W tokens, in a ring",
                  f"Mistral 7B (W=4096) at 32K: {nosw / sw:.0f}x smaller", _pct(sw, nosw),
                  _pct(memory.read_bytes_per_step(mistral, t), memory.read_bytes_per_step(full_attention(mistral), t)))
    t = 262_144
    j, m = hybrid.cache_split(jamba, t)["total"], hybrid.cache_split(mixtral, t)["total"]
    n_rec = jamba.count("recurrent")
    mamba = _row("hybrid (Mamba + attention)", "n_layers -> attention layers",
                 f"K/V of {jamba.num_hidden_layers - n_rec} layers + {n_rec} fixed states",
                 f"Jamba {units.format_bytes(j)} vs Mixtral {units.format_bytes(m)} at 256K", _pct(j, m),
                 _pct(memory.read_bytes_per_step(jamba, t), memory.read_bytes_per_step(mixtral, t)))
    return [window, mamba]


def _same_bytes_rows(llama, dsv3, nsa_tokens: int, dsa_tokens: int) -> list[dict]:
    """Techniques that keep every token: sparse reads (NSA, DSA), paged storage, faster kernels."""
    dense, nsa = sparse_bytes(llama, nsa_tokens, "dense"), sparse_bytes(llama, nsa_tokens, "nsa")
    dense_v3, dsa = sparse_bytes(dsv3, dsa_tokens, "dense"), sparse_bytes(dsv3, dsa_tokens, "dsa")
    held, reserved = 500, 2048
    paged = memory.allocated_bytes(llama, held, block_size=units.DEFAULT_BLOCK_SIZE)
    read_held = memory.read_bytes_per_step(llama, held)
    return [
        _row("NSA", "none", "every token's K/V", f"NSA budget on Llama 3 8B at {nsa_tokens // 1024}K",
             _pct(nsa["stored"], dense["stored"]), _pct(nsa["read"], dense["read"])),
        _row("DSA", "none", "every token's latent + indexer key",
             f"DeepSeek-V3 sizes at {dsa_tokens // 1024}K, top-2048",
             _pct(dsa["stored"], dense_v3["stored"]), _pct(dsa["read"], dense_v3["read"])),
        _row("PagedAttention", "none", f"the same K/V in {units.DEFAULT_BLOCK_SIZE}-token blocks",
             f"{held} tokens held, {reserved} reserved: allocated", _pct(paged, memory.kv_bytes(llama, reserved)),
             _pct(read_held, read_held)),
        _row("FlashAttention, Flash-Decoding", "none", "the same K/V", "a faster kernel reading the same bytes",
             100.0, 100.0),
    ]


def technique_table(nsa_tokens: int = 65_536, dsa_tokens: int = 131_072) -> list[dict]:
    """One row per technique: term changed, what stays cached, example, stored % and read-per-step % of baseline."""
    llama, mistral = load_model("llama-3-8b"), load_model("mistral-7b-v0.1")
    jamba, mixtral, dsv3 = load_model("jamba-v0.1"), load_model("mixtral-8x7b"), load_model("deepseek-v3")
    return (_fewer_heads_rows(llama) + _quantization_rows(llama) + _fewer_tokens_rows(mistral, jamba, mixtral)
            + _same_bytes_rows(llama, dsv3, nsa_tokens, dsa_tokens))


__all__ = ["Run", "load_run", "provenance", "decode_point_rows", "comparison_rows", "load_fused_check",
           "quantized_probe_rows", "RUN_FILE", "CHECK_FILE", "BREAKDOWN_FILE", "dataset_from_results",
           "load_breakdown", "step_segments", "breakdown_rows", "quantized_kernel_rows", "batch_sweep_rows",
           "dataset_findings"]

RUN_FILE, CHECK_FILE, BREAKDOWN_FILE = "roofline_cuda.json", "check_fused.json", "step_breakdown_cuda.json"
ONE_TENSOR = ("kvsim: one KVCache per layer holding all B sequences (a (B, n_kv, T, d_h) tensor); "
              "mlx-lm: its KVCache with B rows")
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
    batch_sweep_one_tensor: dict | None = None   # an earlier run's sweep whose batch shared one cache tensor
    quantized_kernels: tuple = ()                # quantized attention kernels against bf16, per context

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
               raw.get("mla_kernels", []), raw.get("errors", []), path, raw.get("batch_sweep_one_tensor"),
               tuple(raw.get("quantized_kernels", ())))


def dataset_from_results(roofline: dict, one_tensor_run: dict, one_tensor_file: str) -> dict:
    """The dataset's ``roofline_cuda.json``: a ``bench_roofline.py`` run, plus ``batch_sweep_one_tensor``, the
    batch sweep of an earlier run whose B sequences shared one cache tensor, with that run's commit, date and
    calibration (its floors use its own copy bandwidth). Pure: a new dict, the inputs untouched."""
    for name, raw in (("roofline", roofline), ("one_tensor_run", one_tensor_run)):
        if missing := [p for p in _PARTS if p not in raw]:
            raise ValueError(f"{name}: missing {', '.join(missing)}")
    out = json.loads(json.dumps(roofline))
    sweep = json.loads(json.dumps(one_tensor_run["batch_sweep"]))
    sweep["what"] = ONE_TENSOR
    sweep["source"] = {"file": one_tensor_file, "kvsim_commit": one_tensor_run["meta"]["kvsim_commit"],
                       "date": one_tensor_run["meta"]["date"], **{k: one_tensor_run["calibration"][k] for k in
                                                                   ("copy_bytes_per_s", "matmul_flops_per_s")}}
    out["batch_sweep_one_tensor"] = sweep
    return out


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


def decode_point_rows(run: Run, variant: str) -> list[dict]:
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
        compiled = [p["step_ms"]["kvsim-compiled"] / p["step_ms"]["mlx-lm"] for p in pts
                    if "kvsim-compiled" in p["step_ms"]]
        if compiled:                                       # runs with the compiled step (mx.compile) as a third side
            rows[-1]["compiled / mlx-lm (geo. mean)"] = round(math.exp(sum(map(math.log, compiled)) / len(compiled)), 3)
    return rows


def dataset_findings(run: Run) -> list[str]:
    """What the single-sequence points show, as sentences written from the data: how far above their floor
    (time / floor, floor = bytes read / copy bandwidth) and the largest read."""
    points = [(v, p) for v in run.measured_variants() for p in run.points(v)]
    ratios = [_ratio(p, run.bytes_per_s) for _, p in points]
    v, big = max(points, key=lambda vp: vp[1]["read_bytes"])
    return [f"{len(points)} single-sequence points: each step took {min(ratios):.2f} to {max(ratios):.2f} times its "
            f"floor; {sum(r < 2 for r in ratios)} of them under twice it.",
            f"the largest read: {run.label(v)} at {big['context_tokens']:,} tokens, {big['read_bytes'] / 1e9:.1f} GB "
            f"in {big['step_ms']['kvsim']:.1f} ms, {_ratio(big, run.bytes_per_s):.2f} times its floor."]


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


def stored_vs_read(model: str = "deepseek-v3", tokens: int = 131_072, points: int = 129, first: int = 1024):
    """Tokens (``first`` to ``tokens``, spaced evenly on a log axis), {method: stored bytes}, {method: bytes
    read per step} for dense, NSA and DSA attention."""
    spec = load_model(model)
    t = np.unique(np.geomspace(first, tokens, points).round().astype(np.int64))
    parts = {m: sparse_bytes(spec, t, m) for m in ("dense", "nsa", "dsa")}
    names = {"dense": "dense / FlashAttention", "nsa": "NSA", "dsa": "DSA"}
    return (t, {names[m]: p["stored"] for m, p in parts.items()},
            {names[m]: p["read"] for m, p in parts.items()})


def speed_floor(model: str, accelerator: str, batch: int = 1, kv_dtype: str = "bf16", tokens: int = 131_072,
                points: int = 129):
    """Context tokens, and the minimum step time (s) = (weights read + B · cache read) / bandwidth.

    Weights read: the active parameters in bf16 (what one token uses; for a mixture of experts a
    batch touches more experts, so there this is a lower bound too) but the embedding table, of
    which one row (:func:`kvsim.calc.phases.weights_read_bytes`).
    """
    spec, acc = load_model(model), get_accelerator(accelerator)
    bw = acc.memory_bandwidth_bytes_per_s
    w = weights_read_bytes(spec, "bf16")
    t = np.linspace(0, tokens, points).astype(np.int64)
    read = memory.read_bytes_per_step(spec, t, batch, kv_dtype_that_fits(spec, kv_dtype))
    return t, w / bw, (w + np.asarray(read, dtype=float)) / bw


def kv_dtype_that_fits(spec, name: str):
    """``name`` with group size 64, or 32 when 64 does not divide a cached vector (head_dim 96)."""
    for group in (64, 32):
        dt = memory.parse_kv_dtype(name, group_size=group)
        try:
            memory.bytes_per_token(spec, dt)
            return dt
        except InputError:  # this group size does not divide a cached vector
            continue
    return memory.parse_kv_dtype(name)


def decode_speed_limit(model: str, accelerator: str, batch: int = 1, kv_dtype: str = "bf16",
                       tokens: int = 131_072, points: int = 129) -> dict:
    """The decode-speed view's numbers: :func:`speed_floor` plus the ceiling at ``tokens`` and whether it fits.

    tokens/s per sequence = 1 / step floor at T; in all = B · that. "fits" compares the bytes HELD
    (all weights + B · (KV + state), :func:`kvsim.calc.capacity.held_bytes`) with the device memory,
    not the bytes one step reads (a mixture of experts reads a few experts but holds them all).
    """
    t, weights_s, step_s = speed_floor(model, accelerator, batch, kv_dtype, tokens, points)
    spec, acc = load_model(model), get_accelerator(accelerator)
    held = int(held_bytes(spec, tokens, batch, kv_dtype_that_fits(spec, kv_dtype)))
    per_sequence = 1 / float(step_s[-1])
    return {"tokens": t, "weights_s": weights_s, "step_s": step_s, "weights_ms": MS_PER_S * weights_s,
            "step_ms": MS_PER_S * step_s, "per_sequence_tokens_per_s": per_sequence,
            "all_tokens_per_s": batch * per_sequence, "held_bytes": held, "memory_bytes": acc.memory_bytes,
            "fits": held <= acc.memory_bytes}


MS_PER_S = 1e3  # the step-time pictures are in milliseconds
GIGA, TERA = 1e9, 1e12  # decimal prefixes of rates: GB/s, GFLOP/s, TB/s


def decode_speed_title(model: str, accelerator: str, fits: bool, held_bytes: int) -> str:
    """The decode-speed title; when the held bytes exceed the device it adds '(holds 1.2 TiB: does not fit)'."""
    misfit = "" if fits else f" (holds {units.format_bytes(held_bytes)}: does not fit)"
    return f"{model} on {accelerator}: memory-bandwidth floor{misfit}"


def floor_labels(bytes_per_s: float, flops_per_s: float) -> tuple[str, str]:
    """The two floors' legend labels, rates in decimal units: bytes_per_s / 1e9 GB/s, flops_per_s / 1e9 GFLOP/s."""
    return (f"bandwidth floor: bytes / {bytes_per_s / GIGA:,.1f} GB/s",
            f"compute floor: FLOPs / {flops_per_s / GIGA:,.1f} GFLOP/s")


def copy_floor_label(bytes_per_s: float) -> str:
    """The measured-copy floor's label: bytes_per_s / 1e12 TB/s, 2 decimals."""
    return f"floor: bytes / {bytes_per_s / TERA:.2f} TB/s (measured copy)"


# ---------------------------------------------------------------- roofline pictures


def side(intensity: float, ridge: float) -> str:
    """"memory-bound" below the ridge (FLOP/B of the machine), "compute-bound" at or above it."""
    return "memory-bound" if intensity < ridge else "compute-bound"


def h200_roof(run: Run) -> dict:
    """{label: (bytes/s, FLOP/s)} of the H200 as measured in the dataset."""
    return {f"{run.device['name']} ({run.meta['dtype']}, measured)": (run.bytes_per_s, run.flops_per_s)}


def roofline_marks(model: str, batch: int, tokens: int, prompt_tokens: int, bytes_per_s: float,
                   flops_per_s: float) -> dict:
    """Arithmetic intensity (FLOP/B) of decode at B = 1 and at B, and of a prefill, with each one's side.

    intensity = FLOPs / bytes read (:func:`kvsim.calc.phases.decode_cost`, ``prefill_cost``); the ridge
    = FLOP/s / (bytes/s) of the machine."""
    spec = load_model(model)
    one, many = phases.decode_cost(spec, tokens, 1), phases.decode_cost(spec, tokens, batch)
    prefill = phases.prefill_cost(spec, prompt_tokens)
    ridge = flops_per_s / bytes_per_s
    return {"decode_1": one.intensity, "decode_b": many.intensity, "prefill": prefill.intensity, "ridge": ridge,
            "decode_b_side": side(many.intensity, ridge), "prefill_side": side(prefill.intensity, ridge)}


def achieved(points: list[dict]):
    """(intensities, achieved FLOP/s) of measured decode points: flops / read_bytes, flops / kvsim step."""
    return (np.array([p["flops"] / p["read_bytes"] for p in points]),
            np.array([p["flops"] / (p["step_ms"]["kvsim"] / 1e3) for p in points]))


def time_and_floors(points: list[dict], bytes_per_s: float, flops_per_s: float, x: str = "context_tokens"):
    """x, measured kvsim step ms, bandwidth floor ms (1e3 · bytes / bytes_per_s) and compute floor ms
    (1e3 · FLOPs / flops_per_s) of each measured point."""
    xs = np.array([p[x] for p in points], dtype=float)
    return (xs, [p["step_ms"]["kvsim"] for p in points], [1e3 * p["read_bytes"] / bytes_per_s for p in points],
            [1e3 * p["flops"] / flops_per_s for p in points])


def h200_time_vs_bytes(run: Run) -> dict:
    """{series label: (bytes read, kvsim step ms)} for every measured variant and the one-tensor batch sweep (the
    batch in one cache tensor per layer, an earlier run: its label names the commit), else the batch sweep."""
    series = {run.label(v): ([p["read_bytes"] for p in run.points(v)], [p["step_ms"]["kvsim"] for p in run.points(v)])
              for v in run.measured_variants()}
    sweep = run.batch_sweep_one_tensor or run.batch_sweep
    how = f", one tensor ({sweep['source']['kvsim_commit']})" if run.batch_sweep_one_tensor else ""
    series[f"batch sweep B = 1-64{how}, {sweep['variant'].split(' (')[0]} at {sweep['context_tokens'] // 1024}K"] = (
        [p["read_bytes"] for p in sweep["points"]], [p["step_ms"]["kvsim"] for p in sweep["points"]])
    return series


def batch_floors(run: Run, tokens: int = 8192) -> dict:
    """The batch-sweep model on the run's device at ``tokens``: floors against B, the measured sweeps
    (``measured``: {label: (B, ms)}: kvsim and mlx-lm with a cache per sequence, kvsim with one tensor for
    the batch from an earlier run; empty at a context not measured), and where memory is full.

    bandwidth floor = 1e3 · read bytes / bytes_per_s, compute floor = 1e3 · FLOPs / flops_per_s (ms) for
    B = 1, 2, 4, ..., 4096; memory full at B = ⌊(device memory − all weights) / (KV + state of one sequence)⌋
    (:func:`kvsim.calc.capacity.max_concurrent_sequences` at utilization 1: the bytes held, every weight);
    ridge batch from :func:`kvsim.calc.phases.ridge_batch` (None: memory-bound at any B, with the
    intensity as B → ∞, here B = 2^20)."""
    sweep = run.batch_sweep
    spec = load_model(run.variants[sweep["variant"]]["geometry"]["source"])
    batches = 2 ** np.arange(0, 13)
    costs = [phases.decode_cost(spec, tokens, int(b)) for b in batches]
    points = sweep["points"] if tokens == sweep["context_tokens"] else []  # measured at one context only
    one = run.batch_sweep_one_tensor
    one_points = one["points"] if one and tokens == one["context_tokens"] else []
    measured = {"kvsim, a cache per sequence": points, "mlx-lm, BatchKVCache": points,
                f"kvsim, one tensor for all B ({one['source']['kvsim_commit']})" if one else "": one_points}
    sides = ("kvsim", "mlx-lm", "kvsim")
    memory_full = max_concurrent_sequences(spec, tokens, run.device["memory_total_bytes"], utilization=1.0,
                                           weights_bytes=weights_bytes(spec, "bf16"))
    return {"model": spec.name, "batches": batches, "sweep_tokens": sweep["context_tokens"],
            "bandwidth_ms": [1e3 * c.read_bytes / run.bytes_per_s for c in costs],
            "compute_ms": [1e3 * c.flops / run.flops_per_s for c in costs],
            "measured_batches": [p["batch"] for p in points], "measured_ms": [p["step_ms"]["kvsim"] for p in points],
            "measured": {label: ([p["batch"] for p in pts], [p["step_ms"][side] for p in pts])
                         for (label, pts), side in zip(measured.items(), sides) if label},
            "memory_full_batch": int(memory_full),
            "ridge_batch": phases.ridge_batch(spec, tokens, run.bytes_per_s, run.flops_per_s),
            "limit_intensity": phases.decode_cost(spec, tokens, 2**20).intensity,
            "ridge": run.flops_per_s / run.bytes_per_s}


def h200_variant_series(run: Run, variant: str) -> dict:
    """Every measured variant's (context, kvsim ms); ``variant``'s mlx-lm ms and its bandwidth floor ms."""
    series = {run.label(v): ([p["context_tokens"] for p in run.points(v)],
                             [p["step_ms"]["kvsim"] for p in run.points(v)])
              for v in run.measured_variants()}
    pts = run.points(variant)
    x = [p["context_tokens"] for p in pts]
    return {"series": series, "label": run.label(variant), "mlx_lm": (x, [p["step_ms"]["mlx-lm"] for p in pts]),
            "floor": (x, [1e3 * p["read_bytes"] / run.bytes_per_s for p in pts])}


# ---------------------------------------------------------------- where a step's time goes (issue 21)

SEGMENTS = ("weights' floor", "matrix-vector kernels", "cache's floor", "launch and host overhead", "rest")


def load_breakdown(folder=None, name: str = BREAKDOWN_FILE) -> dict:
    """``step_breakdown_cuda.json`` (``benchmarks/bench_step_breakdown.py``), checked for what the bars need."""
    path = _folder(folder) / name
    raw = json.loads(path.read_text(encoding="utf-8"))
    if missing := [p for p in ("meta", "device", "copy_bytes_per_s", "geometry", "points") if p not in raw]:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    for p in raw["points"]:
        if lost := [k for k in ("step_eager", "step_compiled", "step_mlx_lm", "gemv_eager", "gemv_compiled")
                    if k not in p["ms"]]:
            raise ValueError(f"{path}: the point at {p.get('context_tokens')} lacks {', '.join(lost)}")
    return raw


def step_segments(point: dict) -> dict:
    """One measured eager step split into :data:`SEGMENTS` (ms), summing to the step; and what was clipped.

    weights' floor = W / copy bandwidth and cache's floor = cache bytes read / copy bandwidth (the
    benchmark's floors, same process); matrix-vector kernels = the compiled chain of every layer's weight
    products (no attention, no norms) minus that chain's own floor (its bytes / bandwidth): what MLX's
    GEMV kernels lose to the bandwidth (the compiled chain, so that host time the compile removes is
    counted once, below); launch and host overhead = eager step − compiled step; rest = the step minus
    the four (attention and the output head above their floors, norms, RoPE, the cache write, and host
    time the compile does not remove). A part measured below zero (run-to-run noise) is drawn as 0 and
    listed in ``clipped``; the rest absorbs it, so the parts still sum to the step.
    """
    ms, floors = point["ms"], point["breakdown_ms"]
    raw = {SEGMENTS[0]: floors["weights_floor"],
           SEGMENTS[1]: ms["gemv_compiled"] - point["gemv_floor_ms"],
           SEGMENTS[2]: floors["cache_floor"],
           SEGMENTS[3]: ms["step_eager"] - ms["step_compiled"]}
    parts = {k: max(0.0, v) for k, v in raw.items()}
    parts[SEGMENTS[4]] = ms["step_eager"] - sum(parts.values())
    if parts[SEGMENTS[4]] < 0:
        raise ValueError(f"the step at {point['context_tokens']:,} tokens is shorter than its floors and "
                         "overheads: the measurement is inconsistent")
    return {"context_tokens": point["context_tokens"], "step_ms": ms["step_eager"], "segments": parts,
            "clipped": {k: v for k, v in raw.items() if v < 0}, "compiled_ms": ms["step_compiled"],
            "mlx_lm_ms": ms["step_mlx_lm"]}


def breakdown_rows(breakdown: dict) -> list[dict]:
    """One row per context: the eager step, its five parts (ms), and the compiled and mlx-lm steps."""
    rows = []
    for p in breakdown["points"]:
        s = step_segments(p)
        rows.append({"context": p["context_tokens"], "eager step ms": s["step_ms"],
                     **{f"{k} ms": v for k, v in s["segments"].items()},
                     "compiled ms": s["compiled_ms"], "mlx-lm ms": s["mlx_lm_ms"]})
    return rows


def quantized_kernel_rows(run: Run) -> list[dict]:
    """One row per way of one layer's attention over 32 heads' K/V (bf16 first): at each measured context its ms
    and its time × the bf16 attention's, or "no kernel" where MLX's CUDA backend has none for the shape."""
    ways = list(dict.fromkeys(w for k in run.quantized_kernels for w in [*k["step_ms"], *k.get("errors", {})]))
    rows = []
    for way in ways:
        row = {"attention of one layer": "dense, bf16" if way == "dense" else way}
        for k in run.quantized_kernels:
            t = f"{k['context_tokens'] // 1024}K"
            ms = k["step_ms"].get(way)
            row[f"{t} ms"] = round(ms, 3) if ms is not None else "no kernel"
            row[f"{t} × bf16"] = round(ms / k["step_ms"]["dense"], 2) if ms is not None else ""
        rows.append(row)
    return rows


def batch_sweep_rows(run: Run) -> list[dict]:
    """Per batch: floor ms, and kvsim's, compiled kvsim's and mlx-lm's step / floor in the Rows sweep
    (``batch_sweep``) and kvsim's in the one-tensor sweep (floor from that run's own bandwidth)."""
    one = {p["batch"]: p for p in (run.batch_sweep_one_tensor or {"points": []})["points"]}
    one_bw = (run.batch_sweep_one_tensor or {}).get("source", {}).get("copy_bytes_per_s")
    rows = []
    for p in run.batch_sweep["points"]:
        floor_ms = 1e3 * floor_seconds(p["read_bytes"], run.bytes_per_s)
        row = {"B": p["batch"], "floor ms": round(floor_ms, 2)}
        row.update({f"{side} / floor": round(ms / floor_ms, 2) for side, ms in p["step_ms"].items()})
        if p["batch"] in one and one_bw:
            q = one[p["batch"]]
            row["one tensor: kvsim / floor"] = round(q["step_ms"]["kvsim"] / 1e3 /
                                                    floor_seconds(q["read_bytes"], one_bw), 2)
        rows.append(row)
    return rows
