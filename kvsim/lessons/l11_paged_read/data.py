"""Lesson 11 (how a paged cache is read): the numbers of every picture, from :mod:`kvsim.calc.paged_read`.

Contract (pure: integers and json in, rows out; no MLX)
- Every byte count is for ONE decode step (one query token per sequence) over every attention layer of
  a registry model whose attention layers are all ``full`` (a sliding layer would read only its window):
  per layer :func:`kvsim.calc.paged_read.read_step_bytes` / ``sparse_read_bytes`` /
  ``cascade_step_bytes``, times the layers.
- :func:`copy_rows`: gather vs block table against context: pages = ⌈T / bs⌉, gather copies
  pages · block bytes and reads twice that, the block table copies 0 and reads it once.
- :func:`sparse_rows`: bytes read when a fraction f of the pages is kept: kept = max(1, round(f · pages)).
- :func:`cascade_rows` / :func:`cascade_group`: B sequences sharing ``shared_pages`` whole pages, each
  with ``suffix_tokens`` of its own: dense reads B·(P + S) tokens, cascade P + B·S tokens plus its extra
  partial (output and log-sum-exp of the prefix product, written and read back in float32:
  2 · B · H_q · (D_v + 1) · 4 bytes per layer, the cost :func:`kvsim.calc.paged_read.cascade_break_even_pages`
  weighs). The gate is :func:`kvsim.calc.paged_read.cascade_pays` (the seed's
  ``MLXCEL_CASCADE_MIN_MEMBERS`` / ``MLXCEL_CASCADE_MIN_SHARED_PAGES``, kvsim's defaults).
- :func:`split_k_rows`: Flash-Decoding at batch 1: one block of GPU threads per (sequence, query head,
  chunk), so S chunks give B · H_q · S blocks of work over the same K/V bytes, plus S partials
  (H_q · (D_v + 1) float32 each) per layer; the share of the H200's streaming multiprocessors those
  blocks can occupy is min(1, blocks / SMs).
- :func:`load_gpu_runs` / :func:`gpu_rows`: the H200 cascade benchmark (``benchmarks/results/paged_read_gpu*.json``,
  written by ``benchmarks/bench_paged_read.py --gpu``), as measured; "/ fused" = step time over the
  fused dense SDPA's at the same group size.
- Bad input: ValueError naming the field and the accepted range.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...calc.paged_read import (CASCADE_MIN_MEMBERS, CASCADE_MIN_SHARED_PAGES, PARTIAL_BYTES, cascade_break_even_pages,
                                cascade_pays, cascade_step_bytes, layer_block_bytes, read_step_bytes,
                                sparse_read_bytes)
from ...calc.registry import data_dir, load_model
from ...calc.units import DEFAULT_BLOCK_SIZE, DTYPE_BYTES, InputError, positive_int
from ...serving.block_pool import cdiv

__all__ = ["MODEL", "KV_DTYPE", "CONTEXTS", "FRACTIONS", "SPLITS", "H200_SMS", "LESSON07_GROUP", "GPU_FILES",
           "Geometry", "geometry", "copy_rows", "sparse_rows", "cascade_group", "cascade_rows", "split_k_rows",
           "load_gpu_runs", "gpu_rows", "whole_pages", "lesson07_step", "splits_to_fill", "CASCADE_MIN_MEMBERS",
           "CASCADE_MIN_SHARED_PAGES"]

MODEL, KV_DTYPE = "llama-3-8b", "bf16"
CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)        # the 1K-32K
FRACTIONS = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1)
SPLITS = (1, 2, 4, 8, 16, 32)
H200_SMS = 132  # streaming multiprocessors of an H200 SXM (GH100 as shipped in H100/H200 SXM: 132 SMs)
# lesson 07's sharing example: 100 requests, a 500-token system prompt, 60 tokens of their own, 16-token blocks
LESSON07_GROUP = {"requests": 100, "prompt_tokens": 500, "own_tokens": 60, "block_size": DEFAULT_BLOCK_SIZE}
GPU_FILES = "paged_read_gpu*.json"


class Geometry(dict):
    """Attention geometry of a model: layers, n_kv, head_dim, v_head_dim, n_q, bytes per element."""


def geometry(model: str = MODEL, kv_dtype: str = KV_DTYPE) -> Geometry:
    """The model's attention layers (all ``full``, equal shapes) and its KV element size."""
    spec = load_model(model)
    layers = [layer for layer in spec.layers if layer.num_key_value_heads]
    if not layers or any(layer.kind != "full" for layer in layers) or len(set(layers)) != 1:
        raise InputError(f"model must have only full-attention layers of one shape (e.g. {MODEL}), got {model!r}")
    if kv_dtype not in DTYPE_BYTES:
        raise InputError(f"kv_dtype must be one of {', '.join(DTYPE_BYTES)}, got {kv_dtype!r}")
    layer = layers[0]
    return Geometry(layers=len(layers), n_kv=layer.num_key_value_heads, head_dim=layer.head_dim,
                    v_head_dim=layer.v_head_dim, n_q=spec.num_attention_heads, dtype_bytes=DTYPE_BYTES[kv_dtype])


def _block_bytes(g: Geometry, block_size: int) -> int:
    return layer_block_bytes(block_size, g["n_kv"], g["head_dim"], g["v_head_dim"], g["dtype_bytes"])


def _token_bytes(g: Geometry) -> int:
    return g["n_kv"] * (g["head_dim"] + g["v_head_dim"]) * g["dtype_bytes"]


def copy_rows(contexts=CONTEXTS, model: str = MODEL, block_size: int = DEFAULT_BLOCK_SIZE,
              kv_dtype: str = KV_DTYPE) -> list[dict]:
    """Per context and path: pages, read_bytes and copied_bytes of one decode step, all layers.

    gather: copied = layers · ⌈T/bs⌉ · block bytes, read = 2 · copied;
    block_table: copied 0, read = layers · pages · block bytes.
    """
    g = geometry(model, kv_dtype)
    block = _block_bytes(g, positive_int("block_size", block_size))
    rows = []
    for T in contexts:
        pages = cdiv(positive_int("context", T), block_size)
        for path in ("gather", "block_table"):
            per_layer = read_step_bytes(path, pages, block)
            rows.append({"context": T, "path": path, "pages": pages,
                         **{k: g["layers"] * v for k, v in per_layer.items()}})
    return rows


def sparse_rows(context: int = CONTEXTS[-1], fractions=FRACTIONS, model: str = MODEL,
                block_size: int = DEFAULT_BLOCK_SIZE, kv_dtype: str = KV_DTYPE) -> list[dict]:
    """Bytes one step reads through the block table over a kept fraction f of the pages, all layers.

    kept = max(1, round(f · ⌈T/bs⌉)); read = layers · kept · block bytes (copied 0).
    """
    g = geometry(model, kv_dtype)
    block = _block_bytes(g, positive_int("block_size", block_size))
    total = cdiv(positive_int("context", context), block_size)
    rows = []
    for f in fractions:
        if not 0 < f <= 1:
            raise InputError(f"fractions must be in (0, 1], got {f!r}")
        kept = max(1, round(f * total))
        r = sparse_read_bytes(kept, total, block)
        rows.append({"fraction": f, "kept_pages": kept, "total_pages": total,
                     "read_bytes": g["layers"] * r["read_bytes"], "dense_bytes": g["layers"] * total * block})
    return rows


def cascade_group(members: int, shared_pages: int, suffix_tokens: int, model: str = MODEL,
                  block_size: int = DEFAULT_BLOCK_SIZE, kv_dtype: str = KV_DTYPE) -> dict:
    """One decode step of a cascade group, all layers: dense and cascade K/V bytes, the extra partial, the gate.

    dense = layers·B·(P + S)·tb; cascade = layers·(P + B·S)·tb + layers·2·B·H_q·(D_v + 1)·4 (P = pages·bs).
    """
    g = geometry(model, kv_dtype)
    B = positive_int("members", members)
    tb, P = _token_bytes(g), positive_int("block_size", block_size) * shared_pages
    step = cascade_step_bytes(P, [suffix_tokens] * B, tb)
    partial = 2 * B * g["n_q"] * (g["v_head_dim"] + 1) * PARTIAL_BYTES
    L = g["layers"]
    return {"members": B, "shared_pages": shared_pages, "prefix_tokens": P, "suffix_tokens": suffix_tokens,
            "dense_bytes": L * step["dense_bytes"], "cascade_kv_bytes": L * step["cascade_bytes"],
            "partial_bytes": L * partial, "cascade_bytes": L * (step["cascade_bytes"] + partial),
            "break_even_pages": cascade_break_even_pages(B, block_size, tb, g["n_q"], g["v_head_dim"]),
            "gate_open": cascade_pays(B, shared_pages)}


def cascade_rows(members: int, suffix_tokens: int, max_pages: int = 40, model: str = MODEL,
                 block_size: int = DEFAULT_BLOCK_SIZE, kv_dtype: str = KV_DTYPE) -> list[dict]:
    """:func:`cascade_group` for shared pages 0..max_pages."""
    return [cascade_group(members, p, suffix_tokens, model, block_size, kv_dtype)
            for p in range(positive_int("max_pages", max_pages) + 1)]


def whole_pages(tokens: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Whole pages a shared prompt fills: ⌊tokens / bs⌋ (the rest shares a page with each request's own tokens)."""
    return positive_int("tokens", tokens) // positive_int("block_size", block_size)


def lesson07_step(generated: int = 1, model: str = MODEL, kv_dtype: str = KV_DTYPE, group=None) -> dict:
    """Lesson 07's group at its ``generated``-th decode step: whole prompt pages shared, the rest own.

    shared pages = ⌊prompt / bs⌋ (31 of 500 tokens at bs 16); suffix = prompt + own + generated − shared·bs.
    """
    g = dict(LESSON07_GROUP if group is None else group)
    bs = g["block_size"]
    pages = whole_pages(g["prompt_tokens"], bs)
    suffix = g["prompt_tokens"] + g["own_tokens"] + positive_int("generated", generated) - pages * bs
    return cascade_group(g["requests"], pages, suffix, model, bs, kv_dtype)


def split_k_rows(context: int = 8192, splits=SPLITS, batch: int = 1, model: str = MODEL,
                 kv_dtype: str = KV_DTYPE, sms: int = H200_SMS) -> list[dict]:
    """Per number of chunks S: blocks of work B·H_q·S, SM share min(1, blocks/SMs), K/V bytes (the same for
    every S: layers·B·T·tb) and the partials S·B·H_q·(D_v + 1)·4 per layer written for the merge."""
    g = geometry(model, kv_dtype)
    T, B = positive_int("context", context), positive_int("batch", batch)
    rows = []
    for S in splits:
        if not 1 <= S <= T:
            raise InputError(f"splits must be in [1, context = {T}], got {S!r}")
        blocks = B * g["n_q"] * S
        rows.append({"splits": S, "work_blocks": blocks, "sm_share": min(1.0, blocks / sms),
                     "kv_bytes": g["layers"] * B * T * _token_bytes(g),
                     "partial_bytes": g["layers"] * S * B * g["n_q"] * (g["v_head_dim"] + 1) * PARTIAL_BYTES})
    return rows


def splits_to_fill(batch: int = 1, model: str = MODEL, sms: int = H200_SMS) -> int:
    """Fewest chunks S with at least one block of work per SM: ⌈SMs / (B · H_q)⌉."""
    blocks = positive_int("batch", batch) * geometry(model)["n_q"]
    return cdiv(positive_int("sms", sms), blocks)


def _results_dir() -> Path:
    return data_dir().parent / "benchmarks" / "results"


def load_gpu_runs(folder=None) -> list[dict]:
    """Every ``paged_read_gpu*.json`` in ``folder`` (default: the checkout's benchmarks/results), sorted by name:
    {'file', 'device', 'mlx', 'steps', 'rows'} as the benchmark wrote them."""
    folder = Path(folder) if folder is not None else _results_dir()
    paths = sorted(folder.glob(GPU_FILES))
    if not paths:
        raise FileNotFoundError(f"no {GPU_FILES} in {folder}: run benchmarks/bench_paged_read.py --gpu on an H200")
    runs = []
    for path in paths:
        raw = json.loads(path.read_text(encoding="utf-8"))
        runs.append({"file": path.name, "device": raw["device"], "mlx": raw["mlx"], "steps": raw["steps"],
                     "rows": raw["rows"]})
    return runs


def gpu_rows(runs) -> list[dict]:
    """One row per run, group size and case: step µs, K/V bytes read, step / fused dense step, and the
    bandwidth that would be if the step did nothing but read its K/V: read_bytes / step time (GB/s, 10⁹)."""
    out = []
    for run in runs:
        fused = {r["sequences"]: r["step_us"] for r in run["rows"] if r["case"] == "dense (mx.fast sdpa)"}
        for r in run["rows"]:
            out.append({"run": run["file"], "sequences": r["sequences"], "case": r["case"],
                        "prefix_tokens": r["prefix_tokens"], "step_us": r["step_us"], "read_bytes": r["read_bytes"],
                        "over_fused": r["step_us"] / fused[r["sequences"]],
                        "read_GB_per_s": r["read_bytes"] / r["step_us"] / 1e3})
    return out
