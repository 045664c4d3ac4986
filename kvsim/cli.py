"""The ``kvsim`` command line: list models, size a KV cache, compare models.

Contract
- ``kvsim models`` lists the registry; ``kvsim calc MODEL|config.json`` sizes one model;
  ``kvsim compare MODEL MODEL ...`` prints a side-by-side table (:func:`kvsim.calc.tables.format_table`).
- ``kvsim calc MODEL --engine mlx-lm --prompt-tokens P --prefill-step S --decode-steps D`` adds what
  an engine's caches hold after that prompt and decode (:func:`kvsim.calc.engines.engine_bytes`;
  ``--engine kvsim`` is kvsim's own caches; ``--engine transformers`` what ``generate``'s DynamicCache, or with
  ``--cache static --max-cache-len N`` its StaticCache, holds); in ``--json`` ``allocated_bytes`` is then the
  engine's. A config whose model_type kvsim does not know is read as full attention with a one-line note.
- ``--engine vllm`` prints vLLM 0.33's plan for one request (:func:`kvsim.calc.engines_all.vllm_summary`:
  block size, KV-cache groups, blocks held, and with ``--kv-cache-memory`` GiB its maximum concurrency);
  ``--engine all`` prints every registered engine per layer kind (:mod:`kvsim.calc.engines_all`).
- ``kvsim measure MODEL`` (an MLX model folder or a config.json) runs the tokens through mlx-lm with
  its own caches and prints measured bytes per layer beside the prediction
  (:mod:`kvsim.measure.mlx_lm_bytes`, imported inside that command; without mlx-lm: exit 2).
- ``--json`` prints one JSON object (``kv_bytes``, ``bytes_per_token``, ``fixed_state_bytes``,
  ``total_bytes``, ``allocated_bytes`` with its ``allocated_step_tokens``, ``paged_bytes`` with its
  ``paged_block_tokens``, ``layers`` ...), all computed by :mod:`kvsim.calc.memory` /
  :mod:`kvsim.calc.capacity` (:func:`summary`). ``--step`` / ``--block-size`` default to
  ``DEFAULT_STEP`` / ``DEFAULT_BLOCK_SIZE`` of :mod:`kvsim.calc.units`.
- Bad input (a usage error, or kvsim's own :class:`~kvsim.calc.units.InputError`): one line on
  stderr naming the problem, exit status 2, no traceback. Any other exception is a bug and raises
  with its traceback.
- ``python -m kvsim`` (:mod:`kvsim.__main__`) and the installed ``kvsim`` script both call :func:`main`.
  :func:`run_cli` runs ``kvsim <args>`` as ``python -m kvsim`` in a child process with the caller's
  own Python, so a notebook can use it whether or not the ``kvsim`` script is on ``PATH``; it returns
  what a terminal would show (stdout, then stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

from .calc import engines, memory, report, units
from .calc.config import ModelSpec
from .calc.families import SUPPORTED_MODEL_TYPES, spec_notes
from .calc.units import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_STEP,
    MLX_LM_PREFILL_STEP,
    MLX_LM_QUANTIZED_KV_START,
    InputError,
)
from .calc.validate import MAX_TOKENS, show

DEFAULT_TOKENS = 8192

_ROOT = Path(__file__).resolve().parents[1]  # the directory holding the kvsim package


class UsageError(Exception):
    """Bad command-line input; reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise UsageError(message)


def _at_least(name, low, kind=int, inclusive=True, high=MAX_TOKENS):
    """argparse type: a finite ``kind`` number >= low (or > low) and <= high, with a one-line message
    naming ``name`` and the accepted range (:mod:`kvsim.calc.validate`'s limits)."""
    if kind is int:
        what = f"an integer in [{low}, {high}]"
    elif name == "--gpu-memory":
        what = "a finite number of GiB in [2^-30, 2^20] (one byte to 1 PiB)"
    else:
        what = f"a finite number in {'[' if inclusive else '('}{low:g}, {high:g}]"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {show(text)}") from None
        if not (math.isfinite(value) and (value >= low if inclusive else value > low) and value <= high):
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {show(text)}")
        return value
    return parse


def _nonneg_int(name):
    return _at_least(name, 0)


def _pos_int(name):
    return _at_least(name, 1)


def _pos_float(name, high=1.0):
    return _at_least(name, 0, float, inclusive=False, high=high)


# --gpu-memory in GiB: at least one byte, at most 1 PiB per device
GPU_MEMORY_GIB = (2.0**-30, 2.0**20)


def _add_sizing(p):
    p.add_argument("--tokens", type=_nonneg_int("--tokens"), help=f"tokens per sequence (default {DEFAULT_TOKENS})")
    p.add_argument("--batch", type=_pos_int("--batch"), default=1, help="concurrent sequences (default 1)")
    p.add_argument("--kv-dtype", default="bf16", help=f"one of {', '.join(units.KV_DTYPES)} (default bf16)")
    p.add_argument("--group-size", type=int, default=64, help="quantization group size: 32, 64, 128 (default 64)")
    p.add_argument("--scale-dtype", default="bf16", help="dtype of quantization scales/biases (default bf16)")
    p.add_argument("--full-precision-tokens", type=_nonneg_int("--full-precision-tokens"), default=0,
                   help="most recent tokens kept unquantized (default 0)")
    p.add_argument("--state-dtype", default=None,
                   help="dtype of all recurrent state: fp32, bf16, fp16 (default: as the reference implementation "
                        "keeps it: SSM / delta-rule / RG-LRU state fp32, conv window bf16)")
    p.add_argument("--tp", type=_pos_int("--tp"), default=1, help="tensor-parallel ranks (default 1)")
    p.add_argument("--step", type=_pos_int("--step"), default=DEFAULT_STEP,
                   help=f"token slots a growing cache adds at a time (default {DEFAULT_STEP})")
    p.add_argument("--block-size", type=_pos_int("--block-size"), default=DEFAULT_BLOCK_SIZE,
                   help=f"tokens per block of a paged cache (default {DEFAULT_BLOCK_SIZE})")


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
    gpu.add_argument("--gpu-memory", type=_at_least("--gpu-memory", GPU_MEMORY_GIB[0], float, high=GPU_MEMORY_GIB[1]),
                     help="memory per device in GiB")
    calc.add_argument("--utilization", type=_pos_float("--utilization"), default=0.9,
                      help="share of device memory usable for weights + KV (default 0.9)")
    calc.add_argument("--weights-dtype", default="bf16", help="weights dtype (default bf16)")
    calc.add_argument("--explain", action="store_true", help="show the formula with the numbers plugged in")
    calc.add_argument("--json", action="store_true", help="print one JSON object")
    _add_engine(calc)
    comp = sub.add_parser("compare", help="compare models side by side")
    comp.add_argument("models", nargs="+", help="registry names or config.json paths")
    _add_sizing(comp)
    comp.add_argument("--json", action="store_true", help="print a JSON list")
    meas = sub.add_parser("measure", help="measure mlx-lm's own caches on a model (needs mlx-lm)")
    meas.add_argument("model", help="a local MLX model folder (config.json + safetensors) or a config.json")
    meas.add_argument("--prompt-tokens", type=_pos_int("--prompt-tokens"), default=300, help="default 300")
    meas.add_argument("--prefill-step", type=_pos_int("--prefill-step"), default=MLX_LM_PREFILL_STEP,
                      help=f"prompt tokens per model call (mlx-lm's prefill_step_size, default {MLX_LM_PREFILL_STEP})")
    meas.add_argument("--decode-steps", type=_nonneg_int("--decode-steps"), default=20, help="default 20")
    meas.add_argument("--dtype", help="model dtype for random weights: fp32, bf16, fp16 (default: the config's)")
    meas.add_argument("--kv-bits", type=_pos_int("--kv-bits"), help="quantize the KV cache (mlx-lm's kv_bits)")
    meas.add_argument("--kv-group-size", type=_pos_int("--kv-group-size"), default=64, help="default 64")
    meas.add_argument("--quantized-kv-start", type=_nonneg_int("--quantized-kv-start"),
                      default=MLX_LM_QUANTIZED_KV_START, help=f"default {MLX_LM_QUANTIZED_KV_START} (mlx-lm's)")
    meas.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _add_engine(p):
    p.add_argument("--engine", choices=(*engines.ENGINES, "all"), default="kvsim",
                   help="whose caches: kvsim's (default), mlx-lm 0.32's (generate_step), transformers 5.24's "
                        "(generate), vLLM 0.33's (one request), or all of them side by side")
    p.add_argument("--prompt-tokens", type=_pos_int("--prompt-tokens"),
                   help="prompt length P (then tokens = P + decode steps)")
    p.add_argument("--prefill-step", type=_pos_int("--prefill-step"),
                   help=f"mlx-lm: prompt tokens per model call (prefill_step_size, default {MLX_LM_PREFILL_STEP})")
    p.add_argument("--decode-steps", type=_nonneg_int("--decode-steps"), help="decode steps D after the prompt")
    p.add_argument("--kv-cache-memory", type=_pos_float("--kv-cache-memory", high=GPU_MEMORY_GIB[1]),
                   help="vllm: KV cache budget in GiB (vLLM's --kv-cache-memory-bytes); prints its maximum concurrency")
    p.add_argument("--max-num-batched-tokens", type=_pos_int("--max-num-batched-tokens"),
                   help="vllm: tokens per scheduler step (default 8192, vLLM's API server on an H100/H200)")
    p.add_argument("--max-model-len", type=_pos_int("--max-model-len"),
                   help="vllm: max_model_len (default prompt + decode steps)")
    p.add_argument("--quantized-kv-start", type=_nonneg_int("--quantized-kv-start"),
                   help="mlx-lm with a qN --kv-dtype: quantize from this cache length "
                        f"(default {MLX_LM_QUANTIZED_KV_START})")
    p.add_argument("--cache", choices=("dynamic", "static"), help="transformers: DynamicCache (default) or StaticCache")
    p.add_argument("--max-cache-len", type=_pos_int("--max-cache-len"),
                   help="transformers --cache static: slots per full layer (default prompt + decode steps)")


def _kv_dtype(args):
    return memory.parse_kv_dtype(args.kv_dtype, args.group_size, args.scale_dtype, args.full_precision_tokens)


def _load(name) -> ModelSpec:
    from .calc.registry import load_model
    return load_model(name)


def _tokens(args) -> int:
    """--tokens, or P + D when the prompt is given (--prompt-tokens and --tokens exclude each other).
    Call once: :func:`_resolve` stores the result in ``args.tokens``."""
    prompt = getattr(args, "prompt_tokens", None)
    if prompt is None:
        return DEFAULT_TOKENS if args.tokens is None else args.tokens
    if args.tokens is not None:
        raise UsageError("give --tokens or --prompt-tokens (with --decode-steps), not both")
    return prompt + (args.decode_steps or 0)


def _resolve(args):
    """Fill the default that depends on other options: the token count (state dtype None = the reference's)."""
    args.tokens = _tokens(args)


def _sizing(args) -> dict:
    """The keyword arguments of :func:`summary` given on the command line (after :func:`_resolve`)."""
    return dict(tokens=args.tokens, batch=args.batch, kv_dtype=_kv_dtype(args), tp=args.tp,
                state_dtype=args.state_dtype, step=args.step, block_size=args.block_size)


def _engine_options(args) -> dict | None:
    """The engine_bytes keywords of ``calc``, or None when no engine option was given (then T is the tokens)."""
    mlx = args.engine == "mlx-lm"
    if args.engine != "transformers" and (args.cache is not None or args.max_cache_len is not None):
        raise UsageError("--cache and --max-cache-len apply to --engine transformers")
    if args.max_cache_len is not None and args.cache != "static":
        raise UsageError("--max-cache-len needs --cache static (a DynamicCache grows)")
    vllm_flags = [f for f in ("kv_cache_memory", "max_num_batched_tokens", "max_model_len")
                  if getattr(args, f) is not None]
    if vllm_flags and args.engine not in ("vllm", "all"):
        raise UsageError(f"--{vllm_flags[0].replace('_', '-')} needs --engine vllm")
    if args.engine in ("vllm", "all") and args.prompt_tokens is None:
        raise UsageError(f"--engine {args.engine} needs --prompt-tokens")
    if args.engine == "vllm" and (args.state_dtype is not None or args.step != DEFAULT_STEP):
        raise UsageError("--state-dtype and --step apply to --engine kvsim: vLLM keeps Mamba state in the model "
                         "dtype (NemotronH's SSM in fp32) and allocates whole blocks")
    if args.decode_steps is not None and args.prompt_tokens is None:
        raise UsageError("--decode-steps needs --prompt-tokens (tokens = prompt + decode steps)")
    if not mlx and args.prompt_tokens is None:
        for flag in ("prefill_step", "quantized_kv_start"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} needs --engine mlx-lm")
        return None
    if not mlx and (args.prefill_step is not None or args.quantized_kv_start is not None):
        raise UsageError("--prefill-step and --quantized-kv-start apply to --engine mlx-lm")
    if mlx and args.state_dtype is not None:
        raise UsageError("--state-dtype applies to --engine kvsim: mlx-lm keeps Mamba-2 / Gated DeltaNet "
                         "state in fp32 and other states in the model dtype")
    if mlx and args.step != DEFAULT_STEP:
        raise UsageError(f"--step applies to --engine kvsim: mlx-lm's caches grow by {DEFAULT_STEP} slots")
    prompt = args.prompt_tokens if args.prompt_tokens is not None else _tokens(args)
    return dict(engine=args.engine, prompt_tokens=prompt, decode_steps=args.decode_steps or 0,
                prefill_step=args.prefill_step or MLX_LM_PREFILL_STEP, kv_dtype=_kv_dtype(args),
                state_dtype=args.state_dtype, batch=args.batch, tp=args.tp,
                quantized_kv_start=(MLX_LM_QUANTIZED_KV_START if args.quantized_kv_start is None
                                    else args.quantized_kv_start),
                cache=args.cache or "dynamic", max_cache_len=args.max_cache_len,
                max_num_batched_tokens=args.max_num_batched_tokens or engines_vllm_default(),
                max_model_len=args.max_model_len,
                kv_cache_memory=None if args.kv_cache_memory is None else int(args.kv_cache_memory * 2**30))


def engines_vllm_default() -> int:
    from .calc.engines_vllm import VLLM_MAX_NUM_BATCHED_TOKENS
    return VLLM_MAX_NUM_BATCHED_TOKENS


def _engine_block(spec, options) -> dict:
    if options["engine"] in ("vllm", "all"):
        from .calc import engines_all
        vllm = dict(max_num_batched_tokens=options.pop("max_num_batched_tokens"),
                    max_model_len=options.pop("max_model_len"), kv_cache_memory_bytes=options.pop("kv_cache_memory"))
        if options["engine"] == "all":
            return engines_all.engine_table(spec, options["prompt_tokens"], options["decode_steps"],
                                            options["kv_dtype"].name, options["tp"], vllm)
        return engines_all.vllm_summary(spec, options["prompt_tokens"], options["decode_steps"],
                                        options["kv_dtype"].name, options["tp"], **vllm)
    for key in ("max_num_batched_tokens", "max_model_len", "kv_cache_memory"):
        options.pop(key)
    eb = engines.engine_bytes(spec, **options)
    return engines.engine_summary(eb, options["prompt_tokens"], options["prefill_step"], options["decode_steps"])


def _capacity(spec, args) -> dict | None:
    """--gpu or --gpu-memory given: the capacity on that device (kvsim.calc.report.capacity_summary)."""
    if args.gpu is None and args.gpu_memory is None:
        return None
    if args.gpu is not None:
        from .calc.hardware import get_accelerator
        acc = get_accelerator(args.gpu)
        name, mem = acc.name, acc.memory_bytes
    else:
        name, mem = f"{args.gpu_memory:g} GiB", int(args.gpu_memory * 2**30)
    return report.capacity_summary(spec, tokens=args.tokens, batch=args.batch, memory_bytes=mem, accelerator=name,
                                   utilization=args.utilization, weights_dtype=args.weights_dtype,
                                   kv_dtype=_kv_dtype(args), tp=args.tp, state_dtype=args.state_dtype)


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
        options = _engine_options(args)  # before _resolve: it tells given options from defaults
        _resolve(args)
        s = report.summary(spec, **_sizing(args))
        e = _engine_block(spec, options) if options else None
        cap = _capacity(spec, args)
        if args.json:
            print(json.dumps({**s, **(e or {}), **({"capacity": cap} if cap else {})}, indent=2))
        else:
            print(report.calc_text(s, cap))
            if spec.model_type not in SUPPORTED_MODEL_TYPES:  # the one-line assumption for an unknown model_type
                print(f"  note: {spec_notes(spec)[0]}")
            if e and args.engine == "all":
                from .calc.engines_all import format_engine_table
                print(format_engine_table(e))
            elif e and args.engine == "vllm":
                from .calc.engines_vllm import format_vllm_summary
                print(format_vllm_summary(e))
            elif e:
                print(engines.format_engine_summary(e, s["kv_dtype"] in units.QUANT_BITS))
            if args.explain:
                from .calc.explain import explain
                print(explain(spec, args.tokens, args.batch, _kv_dtype(args), args.tp, args.state_dtype).text)
    elif args.command == "measure":
        _measure(args)
    else:
        _resolve(args)
        rows = [report.summary(_load(m), **_sizing(args)) for m in args.models]
        print(json.dumps(rows, indent=2)) if args.json else print(report.compare_text(rows))
    return 0


def _measure(args):
    try:
        import mlx_lm  # noqa: F401  (kvsim measure runs mlx-lm's own model and caches)
    except ImportError as e:
        raise UsageError(f"kvsim measure needs mlx-lm: pip install 'mlx-lm>=0.32,<0.33' ({e})") from None
    from .measure.mlx_lm_bytes import format_measured, measure
    feeds = engines.generate_step_feeds(args.prompt_tokens, args.prefill_step, args.decode_steps)
    m = measure(args.model, feeds, args.dtype, args.kv_bits, args.kv_group_size, args.quantized_kv_start)
    if args.json:
        print(json.dumps(m.as_dict(args.prompt_tokens, args.prefill_step, args.decode_steps), indent=2))
    else:
        print(format_measured(m, args.prompt_tokens, args.prefill_step, args.decode_steps))


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
    except (UsageError, InputError) as e:  # ConfigError is an InputError
        msg = str(e)
        print(f"kvsim: error: {msg.splitlines()[0] if msg else type(e).__name__}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
