"""Accelerators: memory size and memory bandwidth of GPUs and Apple-silicon Macs.

Contract
- Data: ``data/accelerators.json`` (see ``kvsim.calc.registry.data_dir``), one entry per device.
- ``memory_bytes`` is the marketed capacity read as GiB (marketed "GB" × 2**30; an A100 40GB
  shows 40960 MiB in nvidia-smi). ``memory_bandwidth_bytes_per_s`` is decimal (GB/s × 10**9).
- ``accelerator_names()`` lists the names; ``get_accelerator(name)`` matches case-insensitively,
  ignoring spaces, hyphens and underscores (``"a100-80gb"`` finds ``"A100 80GB"``); an unknown
  name is an InputError (a ValueError) listing the known ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from .registry import data_dir
from .units import InputError


@dataclass(frozen=True)
class Accelerator:
    """One device: its memory (bytes, binary) and memory bandwidth (bytes/s, decimal)."""

    name: str
    kind: str  # "gpu" or "apple-silicon"
    memory_bytes: int
    memory_bandwidth_bytes_per_s: int
    memory_marketed: str = ""
    source: str = ""
    notes: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    @property
    def bandwidth_gb_per_s(self) -> float:
        return self.memory_bandwidth_bytes_per_s / 1e9

    def seconds_to_read(self, nbytes: float) -> float:
        """Time to stream ``nbytes`` once from memory at full bandwidth: bytes / (bytes/s)."""
        return nbytes / self.memory_bandwidth_bytes_per_s


def _key(name: str) -> str:
    return "".join(c for c in str(name).lower() if c not in " -_")


@lru_cache(maxsize=1)
def _table() -> dict[str, Accelerator]:
    rows = json.loads((data_dir() / "accelerators.json").read_text())["accelerators"]
    return {_key(r["name"]): Accelerator(**r) for r in rows}


def accelerators(kind: str | None = None) -> list[Accelerator]:
    """All accelerators in table order, optionally only one kind ("gpu", "apple-silicon")."""
    return [a for a in _table().values() if kind is None or a.kind == kind]


def accelerator_names() -> list[str]:
    """Names in table order: GPUs first, then Macs by chip and unified memory size."""
    return [a.name for a in accelerators()]


def get_accelerator(name: str) -> Accelerator:
    """The accelerator called ``name`` (case, spaces, hyphens and underscores ignored)."""
    acc = _table().get(_key(name))
    if acc is None:
        raise InputError(f"unknown accelerator {name!r}; known: {', '.join(accelerator_names())}")
    return acc
