"""The model registry: named, real ``config.json`` excerpts shipped in ``data/``.

Contract
- ``model_names()`` lists the registry (sorted); ``load_model(name_or_path)`` returns the
  :class:`~kvsim.calc.config.ModelSpec` of a registry name, of a path to a ``config.json`` or of a
  model folder holding one (a folder without one, a FIFO or a device is a ConfigError saying so).
- An unknown name is a :class:`~kvsim.calc.config.ConfigError` that lists the known names.
- ``model_info(name)`` is the registry entry: file, Hugging Face repo id, sources, the fields
  that are not primary-verified, and published parameter counts.
- ``data_dir()`` finds the data in a source checkout (repo-root ``data/``) or in an installed
  wheel (``kvsim/_data``, where the build force-includes ``data/``).
- ``measured_machine("h200")``: (matmul FLOP/s, copy bytes/s) of a device measured by
  ``benchmarks/bench_roofline.py``, read from ``data/<name>/roofline_cuda.json``'s calibration.
- Parsed specs are cached; they are frozen dataclasses with a deeply frozen ``config``, so sharing
  them is safe.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from .config import ConfigError, ModelSpec
from .hf_config import load_config

_PACKAGE = Path(__file__).resolve().parents[1]  # the kvsim package folder


def data_dir() -> Path:
    """The directory holding ``registry.json``, ``models/`` and ``accelerators.json``."""
    for candidate in (_PACKAGE / "_data", _PACKAGE.parent / "data"):  # wheel, then checkout
        if (candidate / "registry.json").is_file():
            return candidate
    raise FileNotFoundError(
        f"kvsim data not found: looked for registry.json in {_PACKAGE / '_data'} and {_PACKAGE.parent / 'data'}")


@lru_cache(maxsize=None)
def measured_machine(name: str = "h200") -> tuple[float, float]:
    """(matmul FLOP/s, copy bytes/s) measured on device ``name`` (data/<name>/roofline_cuda.json)."""
    calibration = json.loads((data_dir() / name / "roofline_cuda.json").read_text())["calibration"]
    return float(calibration["matmul_flops_per_s"]), float(calibration["copy_bytes_per_s"])


@lru_cache(maxsize=1)
def _registry() -> dict:
    return json.loads((data_dir() / "registry.json").read_text())


def model_names() -> list[str]:
    """Registry names, sorted."""
    return sorted(_registry()["models"])


def model_info(name: str) -> dict:
    """The registry entry of ``name`` (a copy): file, hf_repo, sources, unverified, published_params."""
    models = _registry()["models"]
    if name not in models:
        raise ConfigError(f"unknown model {name!r}; registry models: {', '.join(model_names())}")
    return json.loads(json.dumps(models[name]))  # deep copy: callers cannot edit the cached registry


def source_keys() -> dict[str, str]:
    """What each source key (``LM1``, ``DS2`` ...) used in the registry stands for."""
    return dict(_registry()["sources"])


@lru_cache(maxsize=None)
def _load_name(name: str) -> ModelSpec:
    return load_config(data_dir() / model_info(name)["file"], name=name)


@lru_cache(maxsize=64)
def _load_path(path: str, mtime_ns: int) -> ModelSpec:
    return load_config(path)  # mtime in the key: an edited file is parsed again


def load_model(name_or_path) -> ModelSpec:
    """A registry name (``"llama-3-8b"``) or a path to a ``config.json`` -> :class:`ModelSpec`."""
    key = str(name_or_path)
    if key in _registry()["models"]:
        return _load_name(key)
    path = Path(key)
    looks_like_path = path.suffix == ".json" or "/" in key or "\\" in key
    if path.is_file():
        return _load_path(str(path.resolve()), path.stat().st_mtime_ns)
    if looks_like_path or path.is_dir():  # a model folder reads its config.json
        return load_config(path)  # raises the file's own ConfigError (missing, unreadable)
    raise ConfigError(f"unknown model {key!r}; registry models: {', '.join(model_names())} "
                      "(or give a path to a config.json)")
