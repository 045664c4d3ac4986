"""Model-owned recurrent state (seed 000's Jamba / Mamba / RWKV) beside kvsim's cache-owned state.

Contract
- Two designs, the same numbers. kvsim (like mlx-lm) keeps a recurrent layer's state in the cache
  list (a :class:`~kvsim.cache.RecurrentStateCache` per layer per sequence). Seed 000's engine
  keeps it in the model, per SequenceId, and the pool holds only a placeholder for the scheduler
  (:class:`~kvsim.cache.pool.StatePlaceholder`, ``CachePool(..., state_owner="model")``).
- :func:`sequence_state_layout` (the seed's ``sequence_state_layout``): what one sequence's state
  is, per recurrent layer: name, shape, dtype (exactly :attr:`LayerSpec.state_shapes` and
  :meth:`LayerSpec.state_dtypes` for the model's dtype, as ``make_caches`` would build them).
- :class:`SequenceStateStore`: ``prepare_sequence_state(seq_id)`` allocates zeros for a new
  sequence, ``release_sequence_state(seq_id)`` drops them, ``caches_for(seq_id, pool_caches)``
  gives the per-layer list the model runs on: the pool's K/V caches, and for each recurrent layer
  a view that reads and writes the store (and advances the pool's placeholder, so the scheduler
  still sees the offset). Tokens equal the cache-list design (tests/test_continuous_batching.py).
- :func:`supports_batching` (the seed's ``supports_batching()``): an attention-only model batches
  through its caches; a model that owns recurrent state batches only if its family reports it:
  Mamba, Mamba2, Jamba, RWKV7 in the seed. Others (RecurrentGemma, NemotronH, Qwen3-Next here)
  run one sequence at a time, a single-slot worker. kvsim's mixers could batch every family
  (:class:`~kvsim.model.layers.Rows`); the flag is the seed's policy, and the scheduler honours it.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ..cache.base import mx_dtype
from ..cache.pool import StatePlaceholder
from ..calc.config import ModelSpec
from ..calc.units import dtype_key

__all__ = ["StateTensor", "SequenceStateStore", "sequence_state_layout", "supports_batching",
           "BATCHING_STATE_FAMILIES"]

# model_type of the families whose model-owned state the seed's scheduler batches natively
BATCHING_STATE_FAMILIES = ("mamba", "mamba2", "jamba", "rwkv7")


def supports_batching(spec: ModelSpec) -> bool:
    """True unless the model keeps recurrent state and its family is not in BATCHING_STATE_FAMILIES."""
    return "recurrent" not in spec.kinds or spec.model_type in BATCHING_STATE_FAMILIES


@dataclass(frozen=True)
class StateTensor:
    """One tensor of one sequence's model-owned state."""

    layer: int
    name: str
    shape: tuple[int, ...]
    dtype: str          # 'fp32' / 'bf16' / 'fp16'

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * mx_dtype(self.dtype).size


def sequence_state_layout(spec: ModelSpec, model_dtype="fp32") -> tuple[StateTensor, ...]:
    """Every state tensor one sequence needs: (layer, name, shape (1, *state_shape), dtype)."""
    out = []
    for i, layer in enumerate(spec.layers):
        if layer.kind != "recurrent":
            continue
        dtypes = dict(layer.state_dtypes(dtype_key(model_dtype)))
        out += [StateTensor(i, name, (1, *shape), dtypes[name]) for name, shape in layer.state_shapes]
    return tuple(out)


class _OwnedSlot:
    """What a recurrent mixer sees for one (sequence, layer): the store's arrays, by name."""

    rewind_tokens = 0

    def __init__(self, store: "SequenceStateStore", seq_id: int, layer: int, placeholder: StatePlaceholder):
        self._arrays = store._states[seq_id][layer]
        self.dtypes = {name: a.dtype for name, a in self._arrays.items()}
        self._placeholder = placeholder

    def __getitem__(self, name):
        return self._arrays[name]

    def __setitem__(self, name, value):
        old = self._arrays[name]
        if value.shape != old.shape or value.dtype != old.dtype:
            raise ValueError(f"state {name!r} must be {tuple(old.shape)} {old.dtype}, "
                             f"got {tuple(value.shape)} {value.dtype}")
        self._arrays[name] = value

    def advance(self, tokens: int) -> None:
        self._placeholder.advance(tokens)

    @property
    def offset(self) -> int:
        return self._placeholder.offset

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values())

    used_bytes = nbytes

    def trim(self, n: int) -> int:
        return 0


class SequenceStateStore:
    """The model's own per-SequenceId recurrent state (the pool keeps placeholders)."""

    def __init__(self, spec: ModelSpec, model_dtype="fp32"):
        self.spec = spec
        self.layout = sequence_state_layout(spec, model_dtype)
        self._states: dict[int, dict[int, dict[str, mx.array]]] = {}

    @property
    def supports_batching(self) -> bool:
        return supports_batching(self.spec)

    def prepare_sequence_state(self, seq_id: int) -> None:
        """Zeros for every tensor of :func:`sequence_state_layout`; ValueError if already prepared."""
        if seq_id in self._states:
            raise ValueError(f"sequence id {seq_id!r} already has model-owned state")
        state: dict[int, dict[str, mx.array]] = {}
        for t in self.layout:
            state.setdefault(t.layer, {})[t.name] = mx.zeros(t.shape, dtype=mx_dtype(t.dtype))
        self._states[seq_id] = state

    def release_sequence_state(self, seq_id: int) -> None:
        if self._states.pop(seq_id, None) is None:
            raise ValueError(f"sequence id {seq_id!r} has no model-owned state")

    def caches_for(self, seq_id: int, pool_caches: list) -> list:
        """The pool's caches with each StatePlaceholder replaced by a view of this store."""
        if seq_id not in self._states:
            raise ValueError(f"sequence id {seq_id!r} has no model-owned state; prepare_sequence_state first")
        return [_OwnedSlot(self, seq_id, i, c) if isinstance(c, StatePlaceholder) else c
                for i, c in enumerate(pool_caches)]

    def sequence_bytes(self, seq_id: int) -> int:
        return sum(a.nbytes for layer in self._states[seq_id].values() for a in layer.values())

    def memory_usage_bytes(self) -> int:
        """Σ nbytes of every state tensor held (= sequences · Σ layout nbytes)."""
        return sum(self.sequence_bytes(s) for s in self._states)

    def __contains__(self, seq_id) -> bool:
        return seq_id in self._states
