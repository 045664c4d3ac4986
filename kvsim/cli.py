"""The ``kvsim`` command line: list models, size a KV cache, compare models.

Contract
- ``kvsim models`` lists the registry; ``kvsim calc MODEL|config.json`` sizes one model;
  ``kvsim compare MODEL MODEL ...`` prints a side-by-side table.
- ``--json`` prints one JSON object (``kv_bytes``, ``bytes_per_token``, ``fixed_state_bytes``,
  ``total_bytes``, ``layers`` ...), all computed by :mod:`kvsim.memory` / :mod:`kvsim.capacity`.
- Bad input: one line on stderr naming the problem, exit status 2, never a traceback.
- :func:`run_cli` runs ``kvsim <args>`` in a child process with the caller's own Python
  (``python -m kvsim``), so a notebook can use it whether or not the ``kvsim`` script is on
  ``PATH``; it returns what a terminal would show (stdout, then stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from .calc import capacity, memory, units
from .calc.config import ConfigError, ModelSpec
from .calc.units import DEFAULT_BLOCK_SIZE, DEFAULT_STEP

_ROOT = Path(__file__).resolve().parents[1]  # the directory holding the kvsim package


class UsageError(Exception):
    """Bad command-line input; reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise UsageError(message)


def _at_least(name, low, kind=int, inclusive=True):
    """argparse type: a ``kind`` number >= low (or > low), with a one-line message naming ``name``."""
    what = f"{'an integer' if kind is int else 'a number'} {'>=' if inclusive else '>'} {low}"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text!r}") from None
        if not (value >= low if inclusive else value > low):
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text}")
        return value
    return parse


def _nonneg_int(name):
    return _at_least(name, 0)


def _pos_int(name):
    return _at_least(name, 1)


def _pos_float(name):
    return _at_least(name, 0, float, inclusive=False)


def _add_sizing(p):
    p.add_argument("--tokens", type=_nonneg_int("--tokens"), default=8192, help="tokens per sequence (default 8192)")
    p.add_argument("--batch", type=_pos_int("--batch"), default=1, help="concurrent sequences (default 1)")
    p.add_argument("--kv-dtype", default="bf16", help=f"one of {', '.join(units.KV_DTYPES)} (default bf16)")
    p.add_argument("--group-size", type=int, default=64, help="quantization group size: 32, 64, 128 (default 64)")
    p.add_argument("--scale-dtype", default="bf16", help="dtype of quantization scales/biases (default bf16)")
    p.add_argument("--full-precision-tokens", type=_nonneg_int("--full-precision-tokens"), default=0,
                   help="most recent tokens kept unquantized (default 0)")
    p.add_argument("--state-dtype", default="bf16", help="dtype of recurrent state: fp32, bf16, fp16 (default bf16)")
    p.add_argument("--tp", type=_pos_int("--tp"), default=1, help="tensor-parallel ranks (default 1)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kvsim", description="Size the KV cache of real LLMs.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("models", help="list the registry models")
    sub.add_parser("gpus", help="list the accelerators")
    calc = sub.add_parser("calc", help="size the KV cache of one model")
    calc.add_argument("model", help="registry name (see `kvsim models`) or path to a config.json")
    _add_sizing(calc)
    gpu = calc.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", help="accelerator name (see `kvsim gpus`)")
    gpu.add_argument("--gpu-memory", type=_pos_float("--gpu-memory"), help="memory per device in GiB")
    calc.add_argument("--utilization", type=_pos_float("--utilization"), default=0.9,
                      help="share of device memory usable for weights + KV (default 0.9)")
    calc.add_argument("--weights-dtype", default="bf16", help="weights dtype (default bf16)")
    calc.add_argument("--explain", action="store_true", help="show the formula with the numbers plugged in")
    calc.add_argument("--json", action="store_true", help="print one JSON object")
    comp = sub.add_parser("compare", help="compare models side by side")
    comp.add_argument("models", nargs="+", help="registry names or config.json paths")
    _add_sizing(comp)
    comp.add_argument("--json", action="store_true", help="print a JSON list")
    return parser


def _kv_dtype(args):
    return memory.parse_kv_dtype(args.kv_dtype, args.group_size, args.scale_dtype, args.full_precision_tokens)


def _load(name) -> ModelSpec:
    from .calc.registry import load_model
    return load_model(name)


def summary(spec: ModelSpec, args) -> dict:
    """The numbers ``calc`` and ``compare`` print, as a JSON-able dict."""
    dt, t, b, tp = _kv_dtype(args), args.tokens, args.batch, args.tp
    kv = memory.kv_bytes(spec, t, b, dt, tp)
    state = memory.fixed_state_bytes(spec, b, args.state_dtype)
    out = {
        "model": spec.name, "model_type": spec.model_type, "tokens": t, "batch": b,
        "kv_dtype": dt.name, "tp": tp, "layer_kinds": spec.kinds,
        "kv_bytes": kv,
        "bytes_per_token": memory.bytes_per_token(spec, dt, tp),
        "fixed_state_bytes": state,
        "total_bytes": kv + state,
        "allocated_bytes_step256": memory.allocated_bytes(spec, t, b, dt, step=DEFAULT_STEP, tp=tp),
        "allocated_bytes_paged16": memory.allocated_bytes(spec, t, b, dt, block_size=DEFAULT_BLOCK_SIZE, tp=tp),
        "read_bytes_per_step": memory.read_bytes_per_step(spec, t, b, dt, tp, args.state_dtype),
        "layers": [{k: row[k] for k in ("index", "kind", "window_tokens", "kept_tokens", "kv_bytes", "state_bytes")}
                   for row in memory.layer_table(spec, t, b, dt, tp, args.state_dtype)],
    }
    if dt.quantized:
        out.update(group_size=dt.group_size, scale_dtype=dt.scale_dtype,
                   full_precision_tokens=dt.full_precision_tokens)
    return out


def _capacity(spec, args) -> dict | None:
    if args.gpu is None and args.gpu_memory is None:
        return None
    from .calc.weights import weights_bytes
    if args.gpu is not None:
        from .calc.hardware import get_accelerator
        acc = get_accelerator(args.gpu)
        name, mem = acc.name, acc.memory_bytes
    else:
        name, mem = f"{args.gpu_memory:g} GiB", int(args.gpu_memory * 2**30)
    if args.utilization > 1:
        raise ValueError(f"--utilization must be in (0, 1], got {args.utilization}")
    w = weights_bytes(spec, args.weights_dtype) // args.tp
    kw = dict(utilization=args.utilization, kv_dtype=_kv_dtype(args), tp=args.tp, weights_bytes=w,
              state_dtype=args.state_dtype)
    return {
        "accelerator": name, "memory_bytes": mem, "utilization": args.utilization, "weights_bytes_per_rank": w,
        "kv_budget_bytes": capacity.kv_budget_bytes(mem, args.utilization, w),
        "max_concurrent_sequences": capacity.max_concurrent_sequences(spec, args.tokens, mem, **kw),
        "max_context_tokens": capacity.max_context_tokens(spec, args.batch, mem, **kw),
    }


def _print_calc(s: dict, cap: dict | None):
    fb = units.format_bytes
    print(f"{s['model']} ({s['model_type']}): {s['layer_kinds']}")
    print(f"  tokens {s['tokens']:,} × batch {s['batch']}, KV dtype {s['kv_dtype']}" + (f", tp {s['tp']}" if s["tp"] > 1 else ""))
    print(f"  bytes per token     {s['bytes_per_token']:>18,} B  ({fb(s['bytes_per_token'])})")
    print(f"  KV cache            {s['kv_bytes']:>18,} B  ({fb(s['kv_bytes'])})")
    if s["fixed_state_bytes"]:
        print(f"  recurrent state     {s['fixed_state_bytes']:>18,} B  ({fb(s['fixed_state_bytes'])})")
    print(f"  total               {s['total_bytes']:>18,} B  ({fb(s['total_bytes'])})")
    print(f"  allocated, step 256 {s['allocated_bytes_step256']:>18,} B  ({fb(s['allocated_bytes_step256'])})")
    print(f"  allocated, paged 16 {s['allocated_bytes_paged16']:>18,} B  ({fb(s['allocated_bytes_paged16'])})")
    print(f"  read per decode step{s['read_bytes_per_step']:>18,} B  ({fb(s['read_bytes_per_step'])})")
    if cap:
        ctx = cap["max_context_tokens"]
        print(f"  on {cap['accelerator']} at {cap['utilization']:.0%}: KV budget {fb(cap['kv_budget_bytes'])}, "
              f"{cap['max_concurrent_sequences']:,} sequences of {s['tokens']:,} tokens, "
              f"max context {'unbounded' if ctx is None else f'{ctx:,}'} tokens at batch {s['batch']}")


def _print_compare(rows: list[dict]):
    fb = units.format_bytes
    name_w = max(len(r["model"]) for r in rows) + 2
    head = f"{'model':<{name_w}}{'layers':>8}{'bytes/token':>14}{'KV cache':>12}{'state':>12}{'total':>12}"
    print(head)
    print("-" * len(head))
    for r in rows:
        n = sum(r["layer_kinds"].values())
        print(f"{r['model']:<{name_w}}{n:>8}{fb(r['bytes_per_token']):>14}{fb(r['kv_bytes']):>12}"
              f"{fb(r['fixed_state_bytes']):>12}{fb(r['total_bytes']):>12}")
    r = rows[0]
    print(f"(tokens {r['tokens']:,}, batch {r['batch']}, KV dtype {r['kv_dtype']})")


def run(argv) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "models":
        from .calc.registry import model_names
        print("\n".join(model_names()))
    elif args.command == "gpus":
        from .calc.hardware import accelerator_names
        print("\n".join(accelerator_names()))
    elif args.command == "calc":
        spec = _load(args.model)
        s = summary(spec, args)
        cap = _capacity(spec, args)
        if args.json:
            print(json.dumps({**s, **({"capacity": cap} if cap else {})}, indent=2))
        else:
            _print_calc(s, cap)
            if args.explain:
                from .calc.explain import explain
                print(explain(spec, args.tokens, args.batch, _kv_dtype(args), args.tp, args.state_dtype).text)
    else:
        rows = [summary(_load(m), args) for m in args.models]
        print(json.dumps(rows, indent=2)) if args.json else _print_compare(rows)
    return 0


def run_cli(command: str, timeout_seconds: float = 60) -> str:
    """Output of ``kvsim <command>`` run in a subprocess (a leading ``kvsim`` word is optional)."""
    args = shlex.split(command)
    if args[:1] == ["kvsim"]:
        args = args[1:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "kvsim", *args], capture_output=True, text=True,
                          env=env, timeout=timeout_seconds)
    return (proc.stdout + proc.stderr).rstrip("\n")


def main(argv=None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except (UsageError, ConfigError, ValueError, KeyError) as e:
        msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        print(f"kvsim: error: {msg.splitlines()[0] if msg else type(e).__name__}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
