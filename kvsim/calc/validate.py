"""One validation layer for every value a file, a flag or a caller gives kvsim (pure Python).

Contract
- Every refusal is one line naming the field, the value (shortened when long) and the accepted range,
  raised as ``error`` (:class:`ConfigError` for config.json fields, :class:`~kvsim.calc.units.InputError`
  otherwise; both are ValueErrors). Anything else that raises is a bug.
- Counts (:func:`config_count`): a JSON integer in [low, high]; bools are not integers; a float is read as
  an integer only when it is integral and within the range (so ``1e308`` is refused, not turned into a
  loop of 10^308 layers). :data:`MAX_LAYERS` bounds anything kvsim makes one object per item of (layers,
  layer patterns); :data:`MAX_COUNT` every other config count (int32, as engines' shape tensors are).
- Numbers (:func:`finite_number`): finite, in an open or closed range.
- Files (:func:`read_config_text`): only a regular file, at most :data:`MAX_CONFIG_BYTES`, is read (a FIFO,
  a device such as /dev/zero or a directory is refused before it is opened); JSON nested deeper than
  :data:`MAX_JSON_DEPTH` is refused before the parser recurses (:func:`check_json_depth`,
  :func:`check_depth` for objects a caller built).
- Safetensors files (:func:`read_safetensors_header`): header length, JSON, every tensor's dtype, shape and
  byte span checked against the file before MLX reads it (a truncated or tampered file is one line).
- Sizes: :data:`MAX_BYTES` (2^63 - 1) is the most bytes kvsim reports; :func:`check_bytes` refuses more,
  so fixed-width (int64) arithmetic downstream never wraps.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from .units import InputError

MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is kilobytes; 16 MiB is a generous cap
MAX_JSON_DEPTH = 64  # real configs nest 3 levels (rope_scaling, text_config, quantization)
MAX_LAYERS = 4096  # decoder layers (and entries of a per-layer pattern); real models have <= 128
MAX_COUNT = 2**31 - 1  # any other count or dimension in a config.json
MAX_FLOAT_INT = 2**53  # an integral float is exact up to here
MAX_BYTES = 2**63 - 1  # the most bytes kvsim sizes (int64); more is refused, never wrapped
MAX_TOKENS = 2**53  # the most tokens (or token slots) any argument may give


class ConfigError(InputError):
    """A config field is missing or invalid; the message names it and the accepted values."""


def show(value, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a 10^400 or a 1 MB string stays one short line)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _range_text(low, high) -> str:
    if high is None:
        return f"an integer >= {low}"
    return f"an integer in [{low}, {high}]"


def as_int(name: str, value, low: int = 0, high: int | None = None, error=InputError) -> int:
    """``value`` as a Python int in [low, high]: ints and numpy integers; not bools, not floats."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
        if value >= low and (high is None or value <= high):
            return value
    raise error(f"{name} must be {_range_text(low, high)}, got {show(value)}")


def config_count(name: str, value, low: int = 1, high: int = MAX_COUNT, error=ConfigError) -> int:
    """A config.json count: a JSON integer in [low, high], or an integral float within that range."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= MAX_FLOAT_INT:
        value = int(value)
    return as_int(name, value, low, high, error)


def finite_number(name: str, value, low: float = 0.0, high: float = math.inf, low_open: bool = True,
                  error=InputError) -> float:
    """A finite real number in (low, high] (or [low, high] when ``low_open`` is False)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        try:
            value = float(value)
        except OverflowError:  # an int beyond float range
            ok = False
    if ok:
        ok = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        lo = "(" if low_open else "["
        hi = "" if high == math.inf else f", {high:g}]"
        if not hi and low_open:
            accepted = f"a finite number > {low:g}"
        else:
            accepted = f"a finite number in {lo}{low:g}{hi or ', inf)'}"
        raise error(f"{name} must be {accepted}, got {show(value)}")
    return value


def check_bytes(name: str, value: int, error=InputError) -> int:
    """``value`` (a byte count, Python int) if it is at most :data:`MAX_BYTES`; else one line saying so."""
    if value > MAX_BYTES:
        raise error(f"{name} would take {float(value):.3e} bytes; accepted: at most 2^63 - 1 bytes "
                    "(use fewer tokens or a smaller batch)")
    return value


# ---------------------------------------------------------------- files and JSON

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def check_json_depth(text: str, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """ConfigError when JSON ``text`` nests arrays/objects deeper than ``limit`` (strings skipped)."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > limit:
            raise ConfigError(f"{what} nests JSON deeper than {limit} levels (accepted: at most {limit})")


def check_depth(obj, what: str = "config", limit: int = MAX_JSON_DEPTH) -> None:
    """The same bound for a dict/list a caller built (iterative: no recursion to overflow)."""
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            raise ConfigError(f"{what} nests deeper than {limit} levels (accepted: at most {limit})")
        stack.extend((child, depth + 1) for child in children)


def read_config_text(path, limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of a config file (or of a folder's config.json): only a regular file of at most ``limit``
    bytes, valid UTF-8."""
    path = Path(path)
    shown = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {shown!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"config file {shown!r} cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):  # a model folder: its config.json
        if not (path / "config.json").exists():
            raise ConfigError(f"{shown!r} is a directory with no config.json; accepted: a config.json "
                              "or a model folder holding one")
        return read_config_text(path / "config.json", limit)
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"config file {shown!r} is not a regular file (a FIFO, socket or device); "
                          "accepted: a regular JSON file")
    if st.st_size > limit:
        raise ConfigError(f"config file {shown!r} is {st.st_size:,} bytes; accepted: at most {limit:,} bytes")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)  # a file that grew since stat is still capped
    except OSError as e:
        raise ConfigError(f"config file {shown!r} cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise ConfigError(f"config file {shown!r} is over {limit:,} bytes; accepted: at most {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {shown!r} is not valid JSON "
                          f"(not UTF-8: {e.reason} at byte {e.start})") from None


# ---------------------------------------------------------------- safetensors files

SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2,
                      "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}
MAX_SAFETENSORS_HEADER_BYTES = 100 * 2**20  # the format's own limit on the JSON header


def read_safetensors_header(path, error=InputError) -> dict:
    """The parsed header of a safetensors file, checked before any tensor is read.

    A regular file; 8-byte little-endian header length within the file and the format's 100 MB limit; a
    JSON object of tensors, each ``{"dtype", "shape", "data_offsets": [begin, end]}`` with a known dtype,
    non-negative integer dims, ``end - begin`` = prod(shape) · itemsize, and ``end`` within the file;
    an optional (or null) ``__metadata__`` of str → str. Any violation: ``error`` naming the file and the field.
    """
    path = Path(path)
    shown = str(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise error(f"{shown!r} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{shown!r} is not a regular file; accepted: a safetensors file")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise error(f"{shown!r} is truncated: {len(head)} bytes, a safetensors file starts with an "
                            "8-byte header length")
            n = int.from_bytes(head, "little")
            most = min(MAX_SAFETENSORS_HEADER_BYTES, st.st_size - 8)
            if n < 2 or n > most:
                raise error(f"{shown!r}: header length {n} is outside [2, {most}] "
                            f"(file of {st.st_size} bytes): truncated or not safetensors")
            text = f.read(n)
    except OSError as e:
        raise error(f"{shown!r} cannot be read ({e.strerror or e})") from None
    try:
        decoded = text.decode("utf-8")
        check_json_depth(decoded, shown, 8)
        header = json.loads(decoded)
    except (ValueError, ConfigError) as e:
        raise error(f"{shown!r}: the safetensors header is not valid JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(header, dict):
        raise error(f"{shown!r}: the safetensors header must be a JSON object")
    data_bytes = st.st_size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            if info is not None and not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                raise error(f"{shown!r}: __metadata__ must map strings to strings")
            continue
        where = f"{shown!r}: tensor {show(name)}"
        if not isinstance(info, dict):
            raise error(f"{where} must be an object with dtype, shape, data_offsets")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in SAFETENSORS_DTYPES:
            raise error(f"{where}: dtype {show(dtype)} is not one of {', '.join(SAFETENSORS_DTYPES)}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise error(f"{where}: shape must be a list of integers >= 0, got {show(shape)}")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise error(f"{where}: data_offsets {show(offsets)} must be [begin, end] within the "
                        f"{data_bytes} data bytes")
        if offsets[1] - offsets[0] != math.prod(shape) * SAFETENSORS_DTYPES[dtype]:
            raise error(f"{where}: data_offsets span {offsets[1] - offsets[0]} bytes, shape {shape} of {dtype} "
                        f"needs {math.prod(shape) * SAFETENSORS_DTYPES[dtype]}")
    return header
