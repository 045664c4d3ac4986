"""What ``kvsim calc`` and ``kvsim compare`` report, computed and rendered (pure Python).

Contract
- :func:`summary`: one model's numbers as a JSON-able dict (what ``--json`` prints): KV bytes, bytes per
  token, recurrent state, the allocated (step growth) and paged views, bytes read per decode step, and
  one row per layer; every number from :mod:`kvsim.calc.memory`. Bytes are per tensor-parallel rank;
  ``tp_split`` / ``tp_note`` say how ``tp`` ranks split or replicate the KV heads (:func:`memory.tp_split`).
- :func:`capacity_summary`: the same model served on one device: KV budget, sequences that fit,
  longest context (:mod:`kvsim.calc.capacity`).
- :func:`calc_text` / :func:`compare_text`: the human-readable renderings the CLI prints.
"""

from __future__ import annotations

from . import capacity, memory, units
from .config import ModelSpec
from .tables import format_table
from .units import DEFAULT_BLOCK_SIZE, DEFAULT_STEP, InputError
from .weights import weights_bytes


def summary(spec: ModelSpec, *, tokens: int, batch: int = 1, kv_dtype="bf16", tp: int = 1,
            state_dtype: str | None = None, step: int = DEFAULT_STEP, block_size: int = DEFAULT_BLOCK_SIZE) -> dict:
    """The numbers ``calc`` and ``compare`` print, as a JSON-able dict.

    kv_bytes = Σ_layers kept(T)·token_bytes·B; total_bytes = kv_bytes + fixed_state_bytes; allocated_bytes
    grows by ``step`` slots, paged_bytes by blocks of ``block_size`` tokens (:mod:`kvsim.calc.memory`).
    """
    dt, t, b = memory.parse_kv_dtype(kv_dtype), tokens, batch
    kv = memory.kv_bytes(spec, t, b, dt, tp)
    state = memory.fixed_state_bytes(spec, b, state_dtype)
    out = {
        "model": spec.name, "model_type": spec.model_type, "tokens": t, "batch": b,
        "kv_dtype": dt.name, "tp": tp, "layer_kinds": spec.kinds,
        "tp_split": memory.tp_split(spec, tp), "tp_note": memory.tp_note(spec, tp),
        "kv_bytes": kv,
        "bytes_per_token": memory.bytes_per_token(spec, dt, tp),
        "fixed_state_bytes": state,
        "total_bytes": kv + state,
        "allocated_bytes": memory.allocated_bytes(spec, t, b, dt, step=step, tp=tp),
        "allocated_step_tokens": step,
        "paged_bytes": memory.allocated_bytes(spec, t, b, dt, block_size=block_size, tp=tp),
        "paged_block_tokens": block_size,
        "read_bytes_per_step": memory.read_bytes_per_step(spec, t, b, dt, tp, state_dtype),
        "layers": [{k: row[k] for k in ("index", "kind", "window_tokens", "kept_tokens", "kv_bytes", "state_bytes")}
                   for row in memory.layer_table(spec, t, b, dt, tp, state_dtype)],
    }
    if dt.quantized:
        out.update(group_size=dt.group_size, scale_dtype=dt.scale_dtype,
                   full_precision_tokens=dt.full_precision_tokens)
    return out


def capacity_summary(spec: ModelSpec, *, tokens: int, batch: int, memory_bytes: int, accelerator: str,
                     utilization: float = 0.9, weights_dtype: str = "bf16", kv_dtype="bf16", tp: int = 1,
                     state_dtype: str | None = None) -> dict:
    """KV budget per rank = memory · utilization − weights / tp; sequences of T tokens that fit; longest context."""
    if not 0 < utilization <= 1:
        raise InputError(f"utilization must be in (0, 1], got {utilization}")
    w = weights_bytes(spec, weights_dtype) // tp
    kw = dict(utilization=utilization, kv_dtype=kv_dtype, tp=tp, weights_bytes=w, state_dtype=state_dtype)
    return {
        "accelerator": accelerator, "memory_bytes": memory_bytes, "utilization": utilization,
        "weights_bytes_per_rank": w,
        "kv_budget_bytes": capacity.kv_budget_bytes(memory_bytes, utilization, w),
        "max_concurrent_sequences": capacity.max_concurrent_sequences(spec, tokens, memory_bytes, **kw),
        "max_context_tokens": capacity.max_context_tokens(spec, batch, memory_bytes, **kw),
    }


def calc_text(s: dict, cap: dict | None = None) -> str:
    """The lines ``kvsim calc`` prints for a :func:`summary` (and a :func:`capacity_summary`)."""
    out = []
    fb = units.format_bytes
    out.append(f"{s['model']} ({s['model_type']}): {s['layer_kinds']}")
    tp = f", tp {s['tp']}" if s["tp"] > 1 else ""
    out.append(f"  tokens {s['tokens']:,} × batch {s['batch']}, KV dtype {s['kv_dtype']}{tp}")
    if s["tp_note"]:
        out.append(f"  per rank: {s['tp_note']}")
    lines = [("bytes per token", s["bytes_per_token"]), ("KV cache", s["kv_bytes"])]
    if s["fixed_state_bytes"]:
        lines.append(("recurrent state", s["fixed_state_bytes"]))
    lines += [("total", s["total_bytes"]),
              (f"allocated, {s['allocated_step_tokens']}-token steps", s["allocated_bytes"]),
              (f"paged, {s['paged_block_tokens']}-token blocks", s["paged_bytes"]),
              ("read per decode step", s["read_bytes_per_step"])]
    width = max(len(label) for label, _ in lines)
    for label, n in lines:
        out.append(f"  {label:<{width}} {n:>17,} B  ({fb(n)})")
    if cap:
        ctx = cap["max_context_tokens"]
        out.append(f"  on {cap['accelerator']} at {cap['utilization']:.0%}: KV budget {fb(cap['kv_budget_bytes'])}, "
              f"{cap['max_concurrent_sequences']:,} sequences of {s['tokens']:,} tokens, "
              f"max context {'unbounded' if ctx is None else f'{ctx:,}'} tokens at batch {s['batch']}")
    return "\n".join(out)


_COMPARE_BYTES = {"bytes/token": "bytes_per_token", "KV cache": "kv_bytes", "state": "fixed_state_bytes",
                  "total": "total_bytes", "allocated": "allocated_bytes", "paged": "paged_bytes"}


def compare_text(rows: list[dict]) -> str:
    """The table ``kvsim compare`` prints for several :func:`summary` dicts, with a footer line."""
    table = [{"model": r["model"], "layers": sum(r["layer_kinds"].values()),
              **{column: r[key] for column, key in _COMPARE_BYTES.items()}} for r in rows]
    text = format_table(table, formats=dict.fromkeys(_COMPARE_BYTES, units.format_bytes))
    r = rows[0]
    tp = f", tp {r['tp']}" if r["tp"] > 1 else ""
    notes = "".join(f"\n  {row['model']} per rank: {row['tp_note']}" for row in rows if row["tp_note"])
    return text + "\n" + (f"(tokens {r['tokens']:,}, batch {r['batch']}, KV dtype {r['kv_dtype']}{tp}; allocated in "
          f"{r['allocated_step_tokens']}-token steps, paged in {r['paged_block_tokens']}-token blocks)") + notes
