"""Capacity tables: how many sequences fit per model, accelerator and context length.

Contract (pure arithmetic over kvsim.calc.memory / capacity / hardware / registry / weights; no MLX)
- KV budget per rank = memory · utilization − weights / tp (:func:`kvsim.calc.capacity.kv_budget_bytes`);
  utilization defaults to 0.9 on GPUs (vLLM 0.33's own gpu_memory_utilization is 0.92) and 0.75 on
  Macs (macOS lets the GPU wire about that much unified memory by default). Tensor parallelism splits KV heads, replicates the MLA
  latent (:mod:`kvsim.calc.memory`).
- Columns, each ⌊budget / bytes of one sequence⌋:
  ``dense``: every sequence reserves the whole context T up front (contiguous max-length
  reservation, 256-token steps; window layers reserve their window);
  ``paged``: blocks of ``block_size`` when every sequence really reaches T (what sequences hold,
  window layers ⌈W/bs⌉ + 1 blocks). Not vLLM's logged "Maximum concurrency", which divides by
  reservation bounds (a window layer reserves W − 1 + 2 × max_num_batched_tokens tokens):
  :mod:`kvsim.calc.engines_vllm`;
  ``paged_chat``: blocks for sequences whose final lengths follow the simulator's long-tailed
  ``chat`` distribution capped at T (mean over 4,096 seeded samples) - what paging gains when
  requests are shorter than the maximum;
  ``quantized``: ``paged`` with a quantized KV dtype (default q8: 8-bit + bf16 scale and bias per 64).
- ``tp`` on GPUs is the smallest power of two with weights / tp ≤ 70 % of usable memory (Macs: 1).
  Rows whose weights leave no KV budget hold 0 sequences and say so in ``note``.
- :func:`capacity_table` returns plain rows (list of dicts); :func:`to_markdown` renders them
  through the one table renderer, :func:`kvsim.calc.tables.format_table`.
"""

from __future__ import annotations

import numpy as np

from ..calc import capacity, hardware, registry, weights
from ..calc.tables import format_table
from ..calc.units import DEFAULT_BLOCK_SIZE, DEFAULT_STEP
from .workload import make_workload

MODELS = ("llama-3-8b", "llama-3-70b", "deepseek-v3", "gemma-3-27b")
ACCELERATORS = ("A100 40GB", "A100 80GB", "H100 80GB", "H200 141GB",
                "M4 Pro 48GB", "M4 Max 128GB", "M2 Ultra 192GB", "M3 Ultra 512GB")
CONTEXTS = (4096, 8192, 32768, 131072)
WEIGHTS_DTYPE = {"deepseek-v3": "fp8"}  # released as FP8 weights; the others as bf16
UTILIZATION = {"gpu": 0.9, "apple-silicon": 0.75}
TP_CHOICES = (1, 2, 4, 8, 16, 32)
COLUMNS = ("model", "accelerator", "tp", "context_tokens", "kv_budget_gib", "dense", "paged",
           "paged_chat", "quantized", "note")


def plan_tp(weights_bytes: int, acc, utilization: float) -> int:
    """Smallest power of two tp with weights / tp ≤ 0.7 · memory · utilization (Macs: 1)."""
    if acc.kind != "gpu":
        return 1
    usable = acc.memory_bytes * utilization
    return next((tp for tp in TP_CHOICES if weights_bytes / tp <= 0.7 * usable), TP_CHOICES[-1])


def _chat_lengths(context: int, samples: int = 4096) -> np.ndarray:
    w = make_workload(samples, "chat", max_len=context, seed=0)
    return w.prompt_tokens + w.output_tokens


def capacity_rows(model: str, accelerator: str, contexts=CONTEXTS, kv_dtype: str = "bf16",
                  quantized_kv: str = "q8", block_size: int = DEFAULT_BLOCK_SIZE,
                  utilization: float | None = None, tp: int | None = None) -> list[dict]:
    """One row per context length for one model on one accelerator (see module docstring)."""
    spec = registry.load_model(model)
    acc = hardware.get_accelerator(accelerator)
    util = UTILIZATION[acc.kind] if utilization is None else utilization
    w_dtype = WEIGHTS_DTYPE.get(model, "bf16")
    w_bytes = weights.weights_bytes(spec, w_dtype)
    tp = plan_tp(w_bytes, acc, util) if tp is None else tp
    budget = capacity.kv_budget_bytes(acc.memory_bytes, util, w_bytes / tp)

    def fit(tokens, dtype=kv_dtype, **view):
        per_seq = capacity.per_sequence_bytes(spec, tokens, dtype, tp, "allocated", **view)
        return int(budget // max(int(np.mean(per_seq)), 1))

    rows = []
    for T in contexts:
        note = []
        if budget == 0:
            note.append(f"{w_dtype} weights ({w_bytes / tp / 2**30:.0f} GiB per rank) leave no KV budget")
        if spec.max_position_embeddings and T > spec.max_position_embeddings:
            note.append(f"beyond the model's {spec.max_position_embeddings:,} positions")
        rows.append({
            "model": model, "accelerator": acc.name, "kind": acc.kind, "tp": tp,
            "weights_dtype": w_dtype, "utilization": util, "context_tokens": T,
            "kv_budget_gib": round(budget / 2**30, 1),
            "dense": fit(T, step=DEFAULT_STEP),
            "paged": fit(T, block_size=block_size),
            "paged_chat": fit(_chat_lengths(T), block_size=block_size),
            "quantized": fit(T, quantized_kv, block_size=block_size),
            "quantized_kv": quantized_kv, "block_size": block_size, "note": "; ".join(note),
        })
    return rows


def capacity_table(models=MODELS, accelerators=ACCELERATORS, contexts=CONTEXTS, **kwargs) -> list[dict]:
    """Rows for every model × accelerator × context (keyword arguments go to capacity_rows)."""
    return [row for m in models for a in accelerators
            for row in capacity_rows(m, a, contexts, **kwargs)]


def to_markdown(rows: list[dict], columns=COLUMNS) -> str:
    """A GitHub-flavoured markdown table of ``rows`` (:func:`kvsim.calc.tables.format_table`, floats to 0.1)."""
    return format_table(rows, columns=list(columns), digits=1, style="markdown")
