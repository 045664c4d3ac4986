"""Every constant, table and unit kvsim uses, in one place (pure Python).

Contract
- Cache geometry defaults: a growing cache adds ``DEFAULT_STEP`` = 256 token slots at a time (mlx-lm's
  ``KVCache.step``); a paged cache holds ``DEFAULT_BLOCK_SIZE`` = 16 tokens per block (vLLM's default).
  mlx-lm's generation defaults: ``MLX_LM_PREFILL_STEP`` = 2048 prompt tokens per prefill call,
  ``MLX_LM_QUANTIZED_KV_START`` = 5000 (its cache is quantized from that length on), and the bit
  widths ``mx.quantize`` packs (``MLX_QUANTIZE_BITS``).
- Dtypes by kvsim's short names: ``DTYPE_BYTES`` (fp32 bf16 fp16 fp8), the float dtypes MLX arrays are
  kept in (``FLOAT_DTYPES``), grouped integer quantization ``QUANT_BITS`` (q8 … q2) with
  ``GROUP_SIZES``, and the long names they also go by (:func:`dtype_key`). The MLX dtype lookup is
  built from these names in :mod:`kvsim.cache.base`.
- Bad input: :class:`InputError` (a ValueError) is kvsim's own "the caller asked for something
  outside the accepted range" - one line naming the field and what is accepted. Anything else that
  raises is a bug and is left to raise. :func:`positive_int` / :func:`nonnegative_int` raise ``error``
  (InputError by default).
- Bytes for people: :func:`format_bytes` (binary units, 3 significant digits) and ``UNIT_BYTES`` for
  plot axes (binary KiB/MiB/GiB and decimal KB/MB/GB: always say which).
"""

from __future__ import annotations

import numbers

DEFAULT_STEP = 256
DEFAULT_BLOCK_SIZE = 16
# mlx-lm 0.32's generate_step defaults: prompt tokens per prefill call, and the cache length at which
# kv_bits quantization starts (:mod:`kvsim.calc.engines`)
MLX_LM_PREFILL_STEP = 2048
MLX_LM_QUANTIZED_KV_START = 5000
MLX_QUANTIZE_BITS = (2, 3, 4, 5, 6, 8)  # what mx.quantize packs

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
FLOAT_DTYPES = ("fp32", "bf16", "fp16")
QUANT_BITS = {"q8": 8, "q6": 6, "q4": 4, "q3": 3, "q2": 2}
BITS = tuple(sorted(QUANT_BITS.values()))
GROUP_SIZES = (32, 64, 128)
KV_DTYPES = tuple(DTYPE_BYTES) + tuple(QUANT_BITS)
DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                 "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "int8": "q8", "int4": "q4"}

UNIT_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 1e3, "MB": 1e6, "GB": 1e9}
_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


class InputError(ValueError):
    """Bad input to kvsim (an argument or a config field outside its accepted range), not a bug."""


def dtype_key(name) -> str:
    """kvsim's short name of a dtype: 'bfloat16', 'BF16' and mlx's ``mx.bfloat16`` all give 'bf16'."""
    text = str(name).split(".")[-1].lower()
    return DTYPE_ALIASES.get(text, text)


def positive_int(name: str, value, error: type[Exception] = InputError) -> int:
    """``value`` if it is an integer >= 1 (bools are not); else ``error`` naming ``name``."""
    if type(value) is int and value >= 1:  # the common case, without the slower ABC check below
        return value
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise error(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def nonnegative_int(name: str, value, error: type[Exception] = InputError) -> int:
    """``value`` if it is an integer >= 0 (bools are not); else ``error`` naming ``name``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise error(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


def format_bytes(n, digits: int = 3) -> str:
    """Binary units with ``digits`` significant digits: 131072 -> '128 KiB', 70272 -> '68.6 KiB'."""
    n = float(n)
    i = 0
    while abs(n) >= 1024 and i < len(_BINARY_UNITS) - 1:
        n /= 1024
        i += 1
    if i == 0:
        return f"{int(n):,} B"
    text = f"{n:.{digits}g}"
    if "e" in text:
        text = f"{n:.0f}"
    return f"{text} {_BINARY_UNITS[i]}"


def gib(n) -> float:
    """Bytes to GiB (2**30)."""
    return n / 2**30
