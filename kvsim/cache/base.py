"""The cache protocol every kvsim cache follows (mlx-lm compatible), and its shared helpers.

Contract
- Layout ``(B, n_kv_heads, T, head_dim)``: batch, KV heads, tokens (axis 2), head dim.
  Keys and values may have different head dims (MLA stores latent + RoPE key in those slots).
- A model applies RoPE at ``cache.offset`` and then calls
  ``keys, values = cache.update_and_fetch(keys, values)``: the cache stores the S new tokens and
  returns every key/value the S queries may attend to, in temporal order (oldest first; only
  ``RotatingKVCache(ordered=False)`` may answer in storage order, described by its mask).
- ``offset``: tokens seen so far (the RoPE position of the next token). ``capacity``: token slots
  allocated. ``nbytes``: bytes of every array held (allocated, slack included), as mlx-lm reports.
  ``used_bytes``: bytes of the tokens actually held. ``size()``: tokens actually held.
- ``trim(n)`` rewinds exactly ``min(n, trimmable_tokens)`` tokens (speculative decoding) and
  returns that count, mlx-lm's contract (its ``trim_prompt_cache`` reports what was trimmed): it
  never rewinds further than the layout can do exactly, so a cache is never corrupted, and asking
  for more is not an error (only a bad ``n``, not a non-negative int, raises ValueError). It frees
  nothing; the next update overwrites the rewound rows. ``trimmable_tokens`` says how far it can go
  now (``offset`` for unbounded layouts; less once a ring or chunk has overwritten older rows; 0 for
  recurrent state). ``is_trimmable()`` is mlx-lm's capability test: True when ``trim(n)`` would
  rewind all ``min(n, offset)`` tokens for every n (``trimmable_tokens == offset``), so a fresh
  KVCache is trimmable; a recurrent state never is. mlx-lm's prompt-cache reuse and speculative
  decoding trim only when every cache is trimmable, so they never see a partial trim.
- ``copy.deepcopy(cache)`` gives an independent cache (mlx-lm's prompt-cache reuse deep-copies).
- Masks are asked for BEFORE ``update_and_fetch`` of N new tokens. ``visibility_mask(N)`` is the
  whole truth, always a boolean ``mx.array`` of shape ``(N, L)``, L = number of keys that update
  will return: ``mask[i, j]`` is True when query i (absolute position ``offset + i``) may attend
  to key j. Each layout only says which absolute positions its keys have (:meth:`key_positions`)
  and which of them a query may see (:meth:`visible`).
- ``make_mask(N)`` is what attention is given (mlx-lm's protocol): None when every returned key is
  visible to every query (:meth:`all_visible`: a decode step over a full cache, a ring holding
  exactly its window, the current chunk, a recurrent state), else ``visibility_mask(N)``. No mask
  is what lets a fused attention kernel run its fast decode path; kvsim never returns
  ``"causal"``.
- Attention dispatch: a model calls ``cache.attend(queries, keys, values, scale)`` (several rows, one
  cache each: :func:`kvsim.cache.dispatch.attend_batched`) and the cache picks how to read what it
  stores (``attention_path`` names it): dense K/V -> SDPA with the mask from :meth:`make_mask`
  (KVCache, RotatingKVCache, ChunkedKVCache keep their window semantics that way); quantized ->
  ``mx.quantized_matmul`` attention; paged -> the block-table read. The model never changes.
- Decode fast path: ``cache.attend_step(queries, keys, values, scale)`` is ``attend`` through
  ``update_step(keys, values) -> (keys, values, mask)``, whose reference here is ``make_mask`` then
  ``update_and_fetch``. KVCache (LatentCache) and RotatingKVCache override ``update_step`` for a
  one-token update of the first update's geometry (:func:`step_geometry`, check_kv's verdict in one
  call): the mask answered from integers, one slot written; anything else takes the reference.
  Same arrays, same mask, same cache afterwards (tests/test_step_build_fast_paths.py).
- Bad input: ``update_and_fetch`` validates everything first and raises ValueError naming the field
  and what is expected; the cache is unchanged. Shapes and dtype are fixed by the first update.
- Persistence: ``state`` is a tuple of arrays (only filled tokens), ``meta_state`` a tuple of
  strings; ``from_state(state, meta_state)`` rebuilds the cache with the same offset, capacity
  and nbytes. :mod:`kvsim.cache.io` writes and reads them as safetensors (``save_cache`` /
  ``load_cache``), through an explicit table of cache classes, so loading never unpickles anything.
"""

from __future__ import annotations

import copy
import numbers

import mlx.core as mx

from ..calc.units import DEFAULT_STEP, dtype_key, positive_int
from .sdpa import sdpa

# kvsim's float dtype names -> MLX dtypes, built once: {"fp32": mx.float32, "bf16": ..., "fp16": ...}
MX_DTYPES = {dtype_key(d): d for d in (mx.float32, mx.bfloat16, mx.float16)}


def mx_dtype(name) -> mx.Dtype:
    """The MLX dtype for ``fp32``, ``bf16`` or ``fp16`` (or a long name such as 'bfloat16')."""
    key = dtype_key(name)
    if key not in MX_DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {', '.join(MX_DTYPES)}")
    return MX_DTYPES[key]


def dtype_name(dtype) -> str:
    """'float16' for mx.float16 (for metadata strings)."""
    return str(dtype).split(".")[-1]


def dtype_from_name(name: str):
    """Inverse of :func:`dtype_name`; ValueError for anything but a float dtype."""
    for d in MX_DTYPES.values():
        if dtype_name(d) == name:
            return d
    raise ValueError(f"dtype {name!r} is not one of float32, float16, bfloat16")


def deepcopy_object(obj, memo):
    """``copy.deepcopy(obj)`` for an object whose attributes may hold mx.Dtype objects (shared, not copied)."""
    new = type(obj).__new__(type(obj))
    memo[id(obj)] = new
    new.__dict__.update(_deepcopy(obj.__dict__, memo))
    return new


def _deepcopy(value, memo):
    """copy.deepcopy that shares mx.Dtype objects (each array's .dtype is a new one, so memo cannot)."""
    if isinstance(value, mx.Dtype):
        return value
    if isinstance(value, dict):
        return {k: _deepcopy(v, memo) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_deepcopy(v, memo) for v in value)
    return copy.deepcopy(value, memo)


def check_step(step) -> int:
    return positive_int("step", step)


def _same_geometry(keys, values, expected: dict) -> bool:
    """Are keys and values valid and shaped like the first update (one comparison per field)?"""
    if type(keys) is not mx.array or type(values) is not mx.array:
        return False
    ks, vs = keys.shape, values.shape
    return (len(ks) == 4 and len(vs) == 4 and ks[0] == vs[0] == expected["B"] and ks[1] == vs[1] == expected["H"]
            and ks[2] == vs[2] >= 1 and ks[3] == expected["k_dim"] and vs[3] == expected["v_dim"]
            and keys.dtype == values.dtype == expected["dtype"])


def check_kv(keys, values, expected: dict | None = None) -> dict:
    """Validate one update; return its geometry ``{B, H, S, k_dim, v_dim, dtype}``.

    ``expected`` holds the geometry fixed by the first update (all but S must match).
    Every message names the field and what is accepted; nothing is modified here.
    """
    if expected is not None and _same_geometry(keys, values, expected):  # the decode hot path
        S = keys.shape[2]
        # geometry dicts are never mutated, so a step of the last step's S shares it (no new dict per layer)
        return expected if expected.get("S") == S else {**expected, "S": S}
    for name, a in (("keys", keys), ("values", values)):
        if not isinstance(a, mx.array):
            raise ValueError(f"{name} must be an mx.array, got {type(a).__name__}")
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D (B, n_kv_heads, T, head_dim), got shape {tuple(a.shape)}")
        if a.dtype not in MX_DTYPES.values():
            raise ValueError(f"{name}.dtype must be float32, float16 or bfloat16, got {dtype_name(a.dtype)}")
    if keys.shape[:3] != values.shape[:3]:
        raise ValueError(f"values.shape[:3] (B, n_kv_heads, T) must equal keys.shape[:3] "
                         f"{tuple(keys.shape[:3])}, got {tuple(values.shape[:3])}")
    if keys.dtype != values.dtype:
        raise ValueError(f"values.dtype must equal keys.dtype {dtype_name(keys.dtype)}, "
                         f"got {dtype_name(values.dtype)}")
    B, H, S, k_dim = keys.shape
    got = {"B": B, "H": H, "S": S, "k_dim": k_dim, "v_dim": values.shape[3], "dtype": keys.dtype}
    if S < 1:
        raise ValueError("keys.shape[2] (new tokens) must be at least 1, got 0")
    if expected is not None:
        fields = {"B": "keys.shape[0] (batch)", "H": "keys.shape[1] (n_kv_heads)",
                  "k_dim": "keys.shape[3] (head_dim)", "v_dim": "values.shape[3] (head_dim)",
                  "dtype": "keys.dtype"}
        for f, label in fields.items():
            if got[f] != expected[f]:
                want, have = expected[f], got[f]
                if f == "dtype":
                    want, have = dtype_name(want), dtype_name(have)
                raise ValueError(f"{label} must be {want} as in earlier updates, got {have}")
    return got


def step_geometry(keys, values, expected: dict | None) -> dict | None:
    """check_kv's answer for a one-token update (S = 1) shaped like the first update, else None (then
    the caller takes its reference path, where check_kv names what is wrong). The decode fast path's
    test: :func:`_same_geometry`'s comparisons, written out in one call."""
    if expected is None or type(keys) is not mx.array or type(values) is not mx.array:
        return None
    ks, vs = keys.shape, values.shape
    if not (len(ks) == 4 and len(vs) == 4 and ks[2] == vs[2] == 1 and ks[0] == vs[0] == expected["B"]
            and ks[1] == vs[1] == expected["H"] and ks[3] == expected["k_dim"] and vs[3] == expected["v_dim"]
            and keys.dtype == values.dtype == expected["dtype"]):
        return None
    return expected if expected.get("S") == 1 else {**expected, "S": 1}


def check_queries(queries, keys) -> None:
    """Queries (B, H_q, S, D) that fit keys (B, H_kv, S, D): checked before a cache stores anything."""
    if type(queries) is mx.array and type(keys) is mx.array:  # the hot path: the same test, fewer calls
        qs, ks = queries.shape, keys.shape
        if (len(qs) == 4 and len(ks) == 4 and qs[0] == ks[0] and qs[2] == ks[2] and qs[3] == ks[3]
                and ks[1] and not qs[1] % ks[1]):
            return
    if not isinstance(queries, mx.array) or not isinstance(keys, mx.array) or queries.ndim != 4 or keys.ndim != 4:
        raise ValueError(f"queries and keys must be 4-D mx.arrays (B, H, S, D), got "
                         f"{getattr(queries, 'shape', type(queries).__name__)} and {getattr(keys, 'shape', type(keys).__name__)}")
    B, Hq, S, D = queries.shape
    if (B, S, D) != (keys.shape[0], keys.shape[2], keys.shape[3]) or Hq % keys.shape[1]:
        raise ValueError(f"queries must be (B, a multiple of {keys.shape[1]} heads, S, D) with B, S, D of the keys "
                         f"{tuple(keys.shape)}, got {tuple(queries.shape)}")


def grow_buffer(buf, slots: int, like=None):
    """``buf`` with ``slots`` zero token slots appended on axis 2 (a fresh buffer if buf is None).

    This is the only reallocation a step-growing cache makes; ``like`` (B, H, ·, D) gives the
    shape and dtype of a fresh buffer.
    """
    ref = buf if buf is not None else like
    B, H, _, D = ref.shape
    pad = mx.zeros((B, H, slots, D), dtype=ref.dtype)
    return pad if buf is None else mx.concatenate([buf, pad], axis=2)


class BaseCache:
    """Shared protocol; subclasses implement the storage layout.

    Subclasses must provide: ``update_and_fetch``, ``offset``, ``capacity``, ``nbytes``,
    ``size``, ``state``, ``meta_state``, ``from_state`` and :meth:`key_positions`; they override
    :meth:`visible` for windows/chunks and ``trimmable_tokens`` / ``trim`` when trimmable.
    """

    step: int = DEFAULT_STEP
    offset: int = 0
    attention_path: str = "dense sdpa"  # how attend() reads this layout (subclasses name theirs)

    # ------------------------------------------------------------ storage
    def update_and_fetch(self, keys, values):
        raise NotImplementedError

    def attend(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float | None = None) -> mx.array:
        """Store the S new keys/values and return the S queries' attention over what they may see.

        softmax(scale · q kᵀ | mask) v with mask = :meth:`make_mask` (asked before the update: None
        for a decode step that sees every key returned, the fused kernel's fast path) over what
        ``update_and_fetch`` returns. queries (B, H_q, S, D) -> (B, H_q, S, D_v).
        """
        check_queries(queries, keys)                     # before anything is stored
        mask = self.make_mask(queries.shape[2], window_size=None, return_array=False)
        k, v = self.update_and_fetch(keys, values)
        return sdpa(queries, k, v, mask, scale)

    def attend_step(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float | None = None) -> mx.array:
        """:meth:`attend` for a decode step (S = 1 new token per row): the same result, through
        :meth:`update_step`, which the dense layouts make cheaper on the host (fewer checks and calls).
        A layout that reads its storage its own way (it overrides :meth:`attend`: quantized, paged) is
        read through its :meth:`attend`."""
        if type(self).attend is not BaseCache.attend:
            return self.attend(queries, keys, values, scale)
        check_queries(queries, keys)                     # before anything is stored
        k, v, mask = self.update_step(keys, values)
        return sdpa(queries, k, v, mask, scale)

    def update_step(self, keys: mx.array, values: mx.array):
        """(keys, values, mask) for attention after storing ``keys``/``values``: the mask asked before the
        update (:meth:`make_mask`), then :meth:`update_and_fetch`. The readable reference; KVCache and
        RotatingKVCache override it with a one-token fast path that gives the same three answers."""
        mask = self.make_mask(keys.shape[2], window_size=None, return_array=False)
        k, v = self.update_and_fetch(keys, values)
        return k, v, mask

    @property
    def capacity(self) -> int:
        """Token slots allocated."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes of every array held (allocated view)."""
        raise NotImplementedError

    def size(self) -> int:
        """Tokens actually held (mlx-lm's ``size()``).

        Deliberately no ``__len__``: mlx-lm tests ``if cache`` before asking it for a mask, and an
        empty cache must not look false there.
        """
        raise NotImplementedError

    def empty(self) -> bool:
        return self.capacity == 0

    @property
    def used_bytes(self) -> int:
        """Bytes of the tokens held: nbytes · size / capacity (uniform slots; override otherwise)."""
        cap = self.capacity
        return self.nbytes * self.size() // cap if cap else 0

    # ------------------------------------------------------------ rewinding
    @property
    def trimmable_tokens(self) -> int:
        """How many tokens ``trim`` can rewind exactly right now (<= offset)."""
        return 0

    def is_trimmable(self) -> bool:
        """mlx-lm's capability test: does ``trim(n)`` rewind all min(n, offset) tokens, for any n?"""
        return self.trimmable_tokens == self.offset

    def trim(self, n: int) -> int:
        """Rewind min(n, trimmable_tokens) tokens exactly; return that count (0 here: nothing to rewind)."""
        self._check_trim(n)
        return 0

    def _check_trim(self, n) -> int:
        """The count ``trim(n)`` rewinds: min(n, trimmable_tokens); ValueError for a bad n."""
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:  # numpy ints are ints
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        return min(int(n), self.trimmable_tokens)

    def __deepcopy__(self, memo):
        """An independent copy: arrays copied, MLX dtypes (immutable, and not picklable) shared."""
        return deepcopy_object(self, memo)

    # ------------------------------------------------------------ masks
    def key_positions(self, n: int) -> mx.array:
        """Absolute positions (int32, temporal order) of the keys ``update_and_fetch`` of n tokens returns."""
        raise NotImplementedError

    def visible(self, q_pos: mx.array, k_pos: mx.array) -> mx.array:
        """May a query at absolute position q see a key at position k? Causal by default."""
        return k_pos <= q_pos

    def all_visible(self, n: int) -> bool:
        """Does each of the next n queries see every key ``update_and_fetch`` of n tokens returns?

        Python integers only (no MLX work): it decides whether attention needs a mask at all.
        The default is the safe answer; layouts override it.
        """
        return False

    def visibility_mask(self, N: int, window_size: int | None = None) -> mx.array:
        """Boolean (N, L) mask for the next ``update_and_fetch`` of N tokens (True = may attend).

        mask[i, j] = visible(offset + i, key_positions(N)[j]), and also k > q - window_size when a
        window is given (mlx-lm's argument).
        """
        positive_int("N", N)
        q = mx.arange(self.offset, self.offset + N, dtype=mx.int32)[:, None]  # (N, 1)
        k = self.key_positions(N)[None, :]  # (1, L)
        mask = self.visible(q, k)
        if window_size is not None:
            mask = mask & (k > q - window_size)
        return mask

    def make_mask(self, N: int, window_size: int | None = None, return_array: bool = False):
        """The mask attention needs: None when every key is visible to every query, else the bool mask.

        ``return_array`` is accepted for mlx-lm's callers; as in mlx-lm, a single query that sees
        every key still gets None.
        """
        if window_size is None and self.all_visible(positive_int("N", N)):
            return None
        return self.visibility_mask(N, window_size)

    # ------------------------------------------------------------ persistence
    @property
    def state(self) -> tuple:
        raise NotImplementedError

    @property
    def meta_state(self) -> tuple:
        raise NotImplementedError

    @classmethod
    def from_state(cls, state, meta_state):
        """Rebuild a cache from ``state`` (arrays; tuples may come back as lists) and ``meta_state``."""
        raise NotImplementedError

    def __repr__(self):
        return (f"{type(self).__name__}(offset={self.offset}, size={self.size()}, "
                f"capacity={self.capacity}, nbytes={self.nbytes})")


class BufferedCache(BaseCache):
    """A cache whose K and V live in two dense buffers ``keys`` / ``values`` of shape (B, H, slots, D)."""

    keys = None
    values = None

    @property
    def capacity(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    @property
    def nbytes(self) -> int:
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes
