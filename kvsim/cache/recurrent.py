"""RecurrentStateCache: the fixed-size state of a Mamba / Mamba2 / Gated DeltaNet / RG-LRU layer.

Contract
- One zero-initialised array per ``(name, shape)`` of :attr:`kvsim.calc.config.LayerSpec.state_shapes`,
  with a leading batch axis: ``cache["conv"]`` is (B, K-1, channels), ``cache["ssm"]`` e.g.
  (B, d_inner, d_state). The size never depends on the number of tokens:
  ``nbytes = B · Σ_tensors prod(shape) · itemsize`` = :func:`kvsim.calc.memory.state_bytes` · B.
- Each tensor has its own dtype: ``dtype`` (the model's) unless ``state_dtypes`` names another;
  :meth:`for_layer` (and ``make_caches``) take them from :meth:`LayerSpec.state_dtypes`, i.e. as the
  family's reference implementation keeps them (Mamba-2 / Gated DeltaNet / RG-LRU state in fp32).
- The layer reads ``cache[name]`` and writes ``cache[name] = new`` (shape and dtype are checked;
  a bad write raises ValueError and changes nothing), then calls ``advance(n)`` for the n tokens
  it consumed; ``offset`` counts them.
- Drop-in for mlx-lm's ``ArraysCache``: ``cache[i]`` reads and writes the i-th declared tensor
  (``cache[0]`` the conv window, ``cache[1]`` the SSM state, mlx-lm's order and layouts), ``lengths``
  and ``left_padding`` are None (one unpadded batch), ``make_mask(N)`` is None and
  ``is_trimmable()`` False. (mlx-lm's jamba never calls ``advance``; offset then stays 0.)
- No keys or values: ``update_and_fetch`` raises TypeError, ``make_mask(N)`` is None (nothing to
  mask, as mlx-lm's SSM layers expect) and ``visibility_mask(N)`` is (N, 0).
- Not trimmable (a state cannot be un-mixed): ``trim(n)`` rewinds nothing and returns 0.
  Rewinding goes through ``snap = cache.snapshot()`` ... ``cache.restore(snap)``, which brings back
  every array and the offset exactly, so a hybrid model can undo rejected speculative tokens
  (mlx-lm's ArraysCache cannot: mlx-lm issue #1446).
- Persistence: ``state`` = the arrays in declared order; ``meta_state`` = offset, batch, dtype and
  ``name:dim x dim:dtype`` strings; save/load via :mod:`kvsim.cache.io`.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from .base import MX_DTYPES, BaseCache, dtype_from_name, dtype_name

_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def as_float_dtype(dtype):
    """An mx float dtype from an mx dtype or a name (fp32/bf16/fp16/float32/bfloat16/float16)."""
    if dtype in MX_DTYPES.values():
        return dtype
    if isinstance(dtype, str):
        return dtype_from_name(_DTYPE_ALIASES.get(dtype, dtype))
    raise ValueError(f"dtype {dtype!r} is not one of float32, float16, bfloat16")


def _check_shapes(state_shapes) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for entry in state_shapes or ():
        name, shape = entry
        if not isinstance(name, str) or not name or name in shapes:
            raise ValueError(f"state name {name!r} must be a non-empty string, unique per layer")
        shape = tuple(shape)
        if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            raise ValueError(f"state {name!r} shape {shape} must be a tuple of positive integers")
        shapes[name] = shape
    if not shapes:
        raise ValueError("state_shapes must list at least one (name, shape) pair")
    return shapes


@dataclass(frozen=True)
class RecurrentSnapshot:
    """An opaque copy of a RecurrentStateCache (arrays + offset); only ``restore`` reads it."""

    signature: tuple
    arrays: tuple
    offset: int


class RecurrentStateCache(BaseCache):
    """Fixed recurrent state per sequence, addressed by name or index; rewound by snapshot/restore."""

    lengths = None       # mlx-lm ArraysCache's batching fields: kvsim holds one unpadded batch
    left_padding = None

    def __init__(self, state_shapes, batch: int = 1, dtype=mx.float32, state_dtypes=None):
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        self.shapes = _check_shapes(state_shapes)
        self.batch, self.dtype = batch, as_float_dtype(dtype)
        self.dtypes = {n: self.dtype for n in self.shapes}  # name -> mx dtype of that tensor
        for name, dt in dict(state_dtypes or {}).items():
            self.dtypes[self._name(name)] = as_float_dtype(dt)
        self.offset = 0
        self._arrays = {n: mx.zeros((batch, *s), dtype=self.dtypes[n]) for n, s in self.shapes.items()}

    @classmethod
    def for_layer(cls, layer, batch: int = 1, dtype=mx.float32, state_dtype=None) -> "RecurrentStateCache":
        """The cache a recurrent :class:`~kvsim.calc.config.LayerSpec` needs; ``dtype`` is the model's.

        ``state_dtype`` None: each tensor as the reference implementation keeps it; else all in it.
        """
        dtypes = layer.state_dtypes(dtype_name(as_float_dtype(dtype)), state_dtype)
        return cls(layer.state_shapes, batch, dtype, dict(dtypes))

    # ------------------------------------------------------------ access by name or index
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.shapes)

    def _name(self, name) -> str:
        if isinstance(name, int) and not isinstance(name, bool):
            if not 0 <= name < len(self.shapes):
                raise IndexError(f"state index {name} is not in [0, {len(self.shapes)})")
            return self.names[name]
        if name not in self.shapes:
            raise ValueError(f"state name {name!r} is not one of {', '.join(self.shapes)}")
        return name

    def __getitem__(self, name) -> mx.array:
        return self._arrays[self._name(name)]

    def __setitem__(self, name, value: mx.array) -> None:
        name = self._name(name)
        want, dtype = (self.batch, *self.shapes[name]), self.dtypes[name]
        if not isinstance(value, mx.array):
            raise ValueError(f"state {name!r} must be an mx.array, got {type(value).__name__}")
        if tuple(value.shape) != want:
            raise ValueError(f"state {name!r} must have shape {want}, got {tuple(value.shape)}")
        if value.dtype != dtype:
            raise ValueError(f"state {name!r} dtype must be {dtype_name(dtype)}, "
                             f"got {dtype_name(value.dtype)}")
        self._arrays[name] = value

    def advance(self, n: int) -> None:
        """Record that the layer consumed n more tokens (offset += n)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        self.offset += n

    def update_and_fetch(self, keys, values):
        raise TypeError("RecurrentStateCache holds no keys/values: write cache[name] = state, "
                        "then call advance(n)")

    # ------------------------------------------------------------ sizes
    @property
    def capacity(self) -> int:
        """Token slots: none, the state does not grow with tokens."""
        return 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values())

    @property
    def used_bytes(self) -> int:
        """Every element of the state is in use."""
        return self.nbytes

    def size(self) -> int:
        return 0

    def empty(self) -> bool:
        return self.offset == 0

    def all_visible(self, n: int) -> bool:
        return True  # no keys: nothing to hide

    def key_positions(self, n: int) -> mx.array:
        return mx.zeros((0,), dtype=mx.int32)

    # ------------------------------------------------------------ rewinding
    def is_trimmable(self) -> bool:
        return False  # a state cannot be un-mixed (mlx-lm's ArraysCache: False as well)

    def _signature(self) -> tuple:
        return (self.batch, tuple((n, s, dtype_name(self.dtypes[n])) for n, s in self.shapes.items()))

    def snapshot(self) -> RecurrentSnapshot:
        """A copy of every array and the offset; later writes to this cache do not touch it."""
        arrays = tuple(mx.array(self._arrays[n]) for n in self.shapes)
        mx.eval(*arrays)
        return RecurrentSnapshot(self._signature(), arrays, self.offset)

    def restore(self, snap: RecurrentSnapshot) -> None:
        """Bring back the arrays and offset of ``snap`` (which must come from a cache of this layout)."""
        if not isinstance(snap, RecurrentSnapshot):
            raise ValueError(f"snap must be a RecurrentSnapshot, got {type(snap).__name__}")
        if snap.signature != self._signature():
            raise ValueError(f"snapshot layout {snap.signature} does not match this cache "
                             f"{self._signature()}")
        # copy again, so writing into a restored array cannot alter the snapshot
        self._arrays = {n: mx.array(a) for n, a in zip(self.shapes, snap.arrays)}
        self.offset = snap.offset

    # ------------------------------------------------------------ persistence
    @property
    def state(self) -> tuple:
        return tuple(self._arrays[n] for n in self.shapes)

    @property
    def meta_state(self) -> tuple:
        shapes = tuple(f"{n}:{'x'.join(map(str, s))}:{dtype_name(self.dtypes[n])}" for n, s in self.shapes.items())
        return (str(self.offset), str(self.batch), dtype_name(self.dtype), *shapes)

    @classmethod
    def from_state(cls, state, meta_state):
        m = list(meta_state)
        if len(m) < 4:
            raise ValueError(f"meta_state must have offset, batch, dtype and >= 1 shape, got {m}")
        shapes, dtypes = [], {}
        for item in m[3:]:
            name, dims, dt = item.rsplit(":", 2)
            shapes.append((name, tuple(int(d) for d in dims.split("x"))))
            dtypes[name] = dtype_from_name(dt)
        cache = cls(shapes, int(m[1]), dtype_from_name(m[2]), dtypes)
        state = list(state)
        if len(state) != len(shapes):
            raise ValueError(f"state has {len(state)} arrays; meta_state lists {len(shapes)}")
        for (name, _), array in zip(shapes, state):
            cache[name] = array
        cache.offset = int(m[0])
        return cache
