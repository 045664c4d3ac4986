"""Measured bytes of mlx-lm's own caches: run P + D tokens through an mlx-lm model and read ``nbytes``.

Contract
- :func:`load_mlx_lm_model` builds mlx-lm's model from a local MLX model folder (``config.json`` + safetensors,
  as mlx-lm downloads or saves it: ``mlx_lm.utils.load_model``) or from a ``config.json`` alone (the
  architecture with mlx-lm's random initial weights), cast to ``dtype`` (default: the config's
  ``torch_dtype``, else bf16; a folder keeps the dtype of its weights). It returns the model, the
  config and the model dtype.
- :func:`build_mlx_lm_model` is the one way kvsim and its tests build an mlx-lm model from a config dict
  (mlx-lm's public ``mlx_lm.models.<type>.Model`` / ``ModelArgs.from_dict``).
- :func:`run_feeds` makes mlx-lm's caches (``make_prompt_cache``) and calls the model once per feed, as
  ``generate_step`` does (with kv_bits: its ``maybe_quantize_kv_cache`` after every call); it returns
  the caches. :func:`cache_bytes` reads each cache's (K/V bytes, state bytes) from ``nbytes``.
- :func:`measure` puts every cache-holding layer's measured bytes beside
  :func:`kvsim.calc.engines.mlx_lm_bytes` (and kvsim's own caches, :func:`kvsim.calc.engines.kvsim_bytes`)
  for the same feeds (:class:`Measured`); :func:`format_measured` / ``Measured.as_dict`` are what
  ``kvsim measure`` prints.
- mlx-lm is imported inside these functions: a missing mlx-lm raises ImportError when one is called.
  What this module returns is measured, never computed (the prediction is the calc's).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map

from ..cache.base import mx_dtype
from ..calc.config import ConfigError, ModelSpec
from ..calc.engines import EngineBytes, LayerBytes, kvsim_bytes, mlx_lm_bytes
from ..calc.hf_config import from_hf_config
from ..calc.memory import parse_kv_dtype
from ..calc.tables import format_table
from ..calc.mlx_lm_rules import as_feeds
from ..calc.units import FLOAT_DTYPES, MLX_LM_QUANTIZED_KV_START, QUANT_BITS, InputError, dtype_key
from ..calc.validate import check_json_depth, read_config_text, read_safetensors_header


def _read_config(path: Path) -> dict:
    """A config.json as a dict, read as kvsim reads every config (:mod:`kvsim.calc.validate`) and parsed by
    :func:`from_hf_config` first, so a bad field is kvsim's one-line ConfigError, not mlx-lm's traceback."""
    text = read_config_text(path)
    check_json_depth(text, f"config file {str(path)!r}")
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"cannot read {str(path)!r} as a config.json ({str(e).splitlines()[0]})") from None
    from_hf_config(config)  # validates every field kvsim reads
    return config


def build_mlx_lm_model(config: dict):
    """mlx-lm's model for ``config`` with mlx-lm's random initial weights (lazy, in mlx-lm's dtypes), through
    mlx-lm's public API: ``mlx_lm.models.<type>.Model(ModelArgs.from_dict(config))``.

    ``<type>`` is ``model_type`` after mlx-lm's public remapping tables (``MODEL_ARCHITECTURE_REMAPPING`` by
    (model_type, architecture), else ``MODEL_REMAPPING``), as ``mlx_lm.utils.load_model`` picks its module.
    A model_type mlx-lm has no module for raises ValueError; mlx-lm's own refusals of a field propagate.
    """
    from mlx_lm.utils import MODEL_ARCHITECTURE_REMAPPING, MODEL_REMAPPING
    model_type = config["model_type"]
    architectures = config.get("architectures") or ()
    remapped = [MODEL_ARCHITECTURE_REMAPPING[model_type, a]
                for a in ([architectures] if isinstance(architectures, str) else architectures)
                if (model_type, a) in MODEL_ARCHITECTURE_REMAPPING]
    module_name = remapped[0] if remapped else MODEL_REMAPPING.get(model_type, model_type)
    try:
        module = importlib.import_module(f"mlx_lm.models.{module_name}")
    except ImportError:
        raise ValueError(f"model_type {model_type!r} is not one of mlx-lm's models") from None
    return module.Model(module.ModelArgs.from_dict(config))


def _mlx_lm_model(path: Path, config: dict, build):
    """``build()`` (mlx-lm making the model), with mlx-lm's refusals of a config as one-line ConfigErrors."""
    try:
        return build()
    except (ValueError, TypeError, KeyError, RuntimeError) as e:  # unsupported model_type, a missing field ...
        raise ConfigError(f"mlx-lm cannot build {config.get('model_type')!r} from {str(path)!r} "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


_FLOATS = (mx.float32, mx.float16, mx.bfloat16)
# stated limits of a measurement: random weights built from a config alone, model calls, tokens fed
MAX_RANDOM_WEIGHT_BYTES = 4 * 2**30
MAX_MODEL_CALLS = 100_000
MAX_MEASURED_TOKENS = 1_000_000


def _weights_dtype(model) -> str:
    """The float dtype most of a loaded model's parameters have (quantized weights: their scales')."""
    counts: dict = {}
    for _, p in tree_flatten(model.parameters()):
        if p.dtype in _FLOATS:
            counts[p.dtype] = counts.get(p.dtype, 0) + p.size
    return dtype_key(max(counts, key=counts.get))


def load_mlx_lm_model(path, dtype: str | None = None):
    """(mlx-lm model, config dict, model dtype name) from an MLX model folder or a config.json."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("model*.safetensors"))
        if not files:
            raise ConfigError(f"{str(path)!r} has no model*.safetensors; give its config.json for random weights")
        config = _read_config(path / "config.json")
        for f in files:  # header, dtypes, shapes and byte spans, before mlx-lm reads a tensor
            read_safetensors_header(f, ConfigError)
        from mlx_lm.utils import load_model as mlx_lm_load  # after the checks: a refusal is instant
        model, config = _mlx_lm_model(path, config, lambda: mlx_lm_load(path))
        return model, config, _weights_dtype(model)
    config = _read_config(path)
    if "model_type" not in config:
        raise ConfigError(f"{str(path)!r} has no model_type")
    key = dtype_key(dtype or config.get("torch_dtype") or config.get("dtype") or "bf16")
    if key not in FLOAT_DTYPES:
        raise ConfigError(f"dtype {key!r} is not one of {', '.join(FLOAT_DTYPES)}")
    model = _mlx_lm_model(path, config, lambda: build_mlx_lm_model(config))
    # MLX is lazy: the random weights exist only at mx.eval below, so their size is checked first
    weight_bytes = sum(p.size * mx_dtype(key).size if p.dtype in _FLOATS else p.nbytes
                       for _, p in tree_flatten(model.parameters()))
    if weight_bytes > MAX_RANDOM_WEIGHT_BYTES:
        raise ConfigError(f"random weights of {str(path)!r} would take {weight_bytes / 2**30:.1f} GiB; accepted: at "
                          f"most {MAX_RANDOM_WEIGHT_BYTES / 2**30:g} GiB (a smaller config, or a model folder)")
    model.update(tree_map(lambda p: p.astype(mx_dtype(key)) if p.dtype in _FLOATS else p, model.parameters()))
    mx.eval(model.parameters())
    return model, config, key


def run_feeds(model, feeds, kv_bits: int | None = None, kv_group_size: int = 64,
              quantized_kv_start: int = MLX_LM_QUANTIZED_KV_START, vocab_size: int = 2) -> list:
    """mlx-lm's caches after one model call per feed (token ids cycle below ``vocab_size``)."""
    from mlx_lm.generate import maybe_quantize_kv_cache
    from mlx_lm.models.cache import make_prompt_cache
    cache = make_prompt_cache(model)
    fed = 0
    for n in feeds:
        tokens = (mx.arange(fed, fed + n) % vocab_size)[None]
        model(tokens, cache=cache)
        maybe_quantize_kv_cache(cache, quantized_kv_start, kv_group_size, kv_bits)
        mx.eval([c.state for c in cache])
        fed += n
    return cache


def cache_bytes(c) -> tuple[int, int]:
    """(K/V bytes, state bytes) of one mlx-lm cache, from ``nbytes``: ArraysCache is state, a CacheList both."""
    from mlx_lm.models.cache import ArraysCache, CacheList
    if isinstance(c, CacheList):
        parts = [cache_bytes(x) for x in c.caches]
        return sum(kv for kv, _ in parts), sum(st for _, st in parts)
    return (0, c.nbytes) if isinstance(c, ArraysCache) else (c.nbytes, 0)


@dataclass(frozen=True)
class Measured:
    """Measured mlx-lm caches beside kvsim's mlx-lm prediction, one row per layer of the spec."""

    spec: ModelSpec
    dtype: str
    predicted: EngineBytes
    measured: tuple[LayerBytes, ...]
    kvsim: EngineBytes | None = None

    @property
    def measured_bytes(self) -> int:
        return sum(x.total_bytes for x in self.measured)

    def rows(self) -> list[dict]:
        """One dict per layer: kind, mlx-lm's cache class, measured and predicted bytes."""
        own = self.kvsim.layers if self.kvsim else [None] * len(self.measured)
        return [{"layer": m.index, "kind": m.kind, "mlx-lm cache": m.cache, "measured B": m.total_bytes,
                 "predicted mlx-lm B": p.total_bytes, "kvsim caches B": k.total_bytes if k else None}
                for m, p, k in zip(self.measured, self.predicted.layers, own)]

    def as_dict(self, prompt_tokens: int, prefill_step: int, decode_steps: int) -> dict:
        """What ``kvsim measure --json`` prints."""
        import mlx_lm
        return {"model": self.spec.name, "model_type": self.spec.model_type, "dtype": self.dtype,
                "mlx_lm_version": mlx_lm.__version__, "prompt_tokens": prompt_tokens,
                "prefill_step": prefill_step, "decode_steps": decode_steps,
                "measured_bytes": self.measured_bytes, "predicted_bytes": self.predicted.total_bytes,
                "kvsim_bytes": self.kvsim.total_bytes if self.kvsim else None,
                "layers": [{"index": r["layer"], "kind": r["kind"], "cache": r["mlx-lm cache"],
                            "measured_bytes": r["measured B"], "predicted_bytes": r["predicted mlx-lm B"],
                            "kvsim_bytes": r["kvsim caches B"]} for r in self.rows()]}


def format_measured(m: Measured, prompt_tokens: int, prefill_step: int, decode_steps: int) -> str:
    """A per-layer table of measured and predicted bytes, with a total line."""
    import mlx_lm
    rows = m.rows()
    rows.append({"layer": None, "kind": "total", "mlx-lm cache": "", "measured B": m.measured_bytes,
                 "predicted mlx-lm B": m.predicted.total_bytes,
                 "kvsim caches B": m.kvsim.total_bytes if m.kvsim else None})
    verdict = "equal" if m.measured_bytes == m.predicted.total_bytes else "DIFFERENT"
    return (f"{m.spec.model_type} ({m.dtype}) in mlx-lm {mlx_lm.__version__}: {prompt_tokens:,}-token prompt in steps "
            f"of {prefill_step:,} + {decode_steps:,} decode steps\n{format_table(rows)}\n"
            f"measured and predicted (engine mlx-lm) are {verdict}")


def measure(path, feeds, dtype: str | None = None, kv_bits: int | None = None, kv_group_size: int = 64,
            quantized_kv_start: int = MLX_LM_QUANTIZED_KV_START) -> Measured:
    """Run ``feeds`` through mlx-lm's model of ``path`` and return its caches' bytes beside the prediction.

    At most MAX_MODEL_CALLS calls and MAX_MEASURED_TOKENS tokens (each call really runs the model)."""
    feeds = as_feeds(feeds)
    if len(feeds) > MAX_MODEL_CALLS or feeds.tokens > MAX_MEASURED_TOKENS:
        raise InputError(f"measure runs one model call per feed: {len(feeds)} calls of {feeds.tokens} tokens; "
                         f"accepted: at most {MAX_MODEL_CALLS} calls (decode steps + prefill calls) and "
                         f"{MAX_MEASURED_TOKENS} tokens")
    model, config, key = load_mlx_lm_model(path, dtype)
    spec = from_hf_config(config)
    predicted = mlx_lm_bytes(spec, feeds, key, kv_bits, kv_group_size, quantized_kv_start)
    cache = run_feeds(model, feeds, kv_bits, kv_group_size, quantized_kv_start, spec.vocab_size)
    holders = [row for row in predicted.layers if row.cache]
    if len(holders) != len(cache):
        raise ValueError(f"mlx-lm made {len(cache)} caches; kvsim expects {len(holders)} for {spec.model_type}")
    measured = {row.index: LayerBytes(row.index, row.kind, type(c).__name__, *cache_bytes(c))
                for row, c in zip(holders, cache)}
    rows = tuple(measured.get(r.index, LayerBytes(r.index, r.kind, "", 0, 0)) for r in predicted.layers)
    return Measured(spec, key, predicted, rows, _kvsim_caches(spec, feeds, key, kv_bits, kv_group_size))


def _kvsim_caches(spec, feeds, dtype, kv_bits, group_size) -> EngineBytes | None:
    """kvsim's own caches for the same feeds (K/V and state in the model dtype; None for bits kvsim lacks)."""
    kv = dtype if kv_bits is None else f"q{kv_bits}"
    if kv_bits is not None and kv not in QUANT_BITS:
        return None
    return kvsim_bytes(spec, feeds, parse_kv_dtype(kv, group_size, dtype), dtype)
