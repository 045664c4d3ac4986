"""Save and load caches as safetensors: arrays plus string metadata, never pickle.

Contract
- ``save_caches(path, caches, metadata)`` writes a list of caches (one per layer, None allowed for
  layers without a cache) to one ``.safetensors`` file with :func:`mx.save_safetensors`:
  arrays ``"<layer>.<i>"`` (the cache's ``state``, nested tuples flattened as ``"<layer>.<i>.<j>"``)
  and string metadata ``"kvsim.layers"``, ``"<layer>.class"`` (class name or ``"None"``),
  ``"<layer>.meta_state"`` (a JSON list of the cache's meta_state strings) and ``"user.<key>"``.
- ``load_caches(path, spec=None) -> (caches, metadata)`` validates the whole file from its header
  first (safetensors header and byte spans, every array's dtype and shape against its layer's
  meta_state, metadata ranges, no stray or missing arrays, buffer sizes the metadata asks for bounded
  by 64 x the file (at least 1 GiB); with ``spec``: the layer count and each cache's class and
  geometry against the model's layers), then rebuilds each cache with ``cls.from_state(state,
  meta_state)``; the class is looked up by name in :data:`CACHE_CLASSES`, an explicit table, so
  only kvsim cache classes can ever be constructed. Loaded caches have the same offset, held tokens,
  capacity and nbytes as the saved ones (``state`` holds only the filled rows; ``from_state``
  re-allocates the slack).
- ``save_cache`` / ``load_cache``: the same for a single cache.
- Errors: ValueError with the file, the layer and the bad field (a truncated, empty or tampered file
  included); writing goes to ``path`` directly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from ..calc.units import BITS, GROUP_SIZES
from ..calc.validate import MAX_LAYERS, MAX_TOKENS, read_safetensors_header, show
from .base import BaseCache
from .checks import ACCEPTED, check_layer_cache
from .chunked import ChunkedKVCache
from .latent import LatentCache
from .paged import PagedKVCache
from .quantized import QuantizedKVCache
from .recurrent import RecurrentStateCache
from .rotating import RotatingKVCache
from .standard import KVCache

FORMAT = "kvsim-cache-1"
# class name as written in a file -> the class that rebuilds it; nothing else can be loaded
CACHE_CLASSES = {cls.__name__: cls for cls in (KVCache, RotatingKVCache, ChunkedKVCache, QuantizedKVCache,
                                               LatentCache, RecurrentStateCache, PagedKVCache)}


def _path(path) -> str:
    p = str(path)
    if not p.endswith(".safetensors"):
        raise ValueError(f"path must end with .safetensors, got {p!r}")
    return p


def save_caches(path, caches, metadata: dict | None = None) -> None:
    """Write ``caches`` (list of kvsim caches or None) and string ``metadata`` to ``path``."""
    path = _path(path)
    arrays: dict[str, mx.array] = {}
    meta = {"kvsim.format": FORMAT, "kvsim.layers": str(len(caches))}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"metadata must map str to str, got {key!r}: {type(value).__name__}")
        meta[f"user.{key}"] = value
    for i, cache in enumerate(caches):
        if cache is None:
            meta[f"{i}.class"] = "None"
            continue
        if not isinstance(cache, BaseCache):
            raise ValueError(f"caches[{i}] must be a kvsim cache or None, got {type(cache).__name__}")
        meta[f"{i}.class"] = type(cache).__name__
        meta[f"{i}.meta_state"] = json.dumps([str(m) for m in cache.meta_state])
        state = list(cache.state)
        meta[f"{i}.n_state"] = str(len(state))
        arrays.update((f"{i}.{k.lstrip('.')}", a) for k, a in tree_flatten(state))
    mx.save_safetensors(path, arrays, metadata=meta)


def _layer_state(arrays: dict, i: int, n: int) -> list:
    """The state list of layer i: arrays "<i>.0" ... "<i>.<n-1>" (names checked by :func:`_check_names`)."""
    return [arrays[f"{i}.{j}"] for j in range(n)]


# ---------------------------------------------------------------- validation before anything is built

_FLOAT_TENSORS = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
_NAME = re.compile(r"(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,2})")
MAX_STATE_ARRAYS = 64
MAX_META_ENTRIES = 64
# what the metadata may make load_caches allocate (capacity slack, paged blocks): 64 x the file, >= 1 GiB
MIN_ALLOC_LIMIT_BYTES = 2**30


class _Layer:
    """One layer's entries in a file: class name, meta_state strings, and its arrays' (dtype, shape)."""

    def __init__(self, path, i, name, meta, tensors):
        self.path, self.i, self.name, self.meta, self.tensors = path, i, name, meta, tensors
        self.alloc_bytes = 0

    def fail(self, what: str):
        raise ValueError(f"{self.path}: layer {self.i} ({self.name}): {what}")

    def int_at(self, k: int, field: str, low: int = 0, high: int = MAX_TOKENS, empty_ok: bool = False):
        text = self.meta[k]
        if empty_ok and text == "":
            return None
        if not re.fullmatch(r"-?[0-9]{1,20}", text) or not low <= int(text) <= high:
            self.fail(f"meta_state {field} must be an integer in [{low}, {high}], got {show(text)}")
        return int(text)

    def length(self, *allowed):
        if len(self.meta) not in allowed:
            self.fail(f"meta_state must have {' or '.join(map(str, allowed))} entries, got {len(self.meta)}")

    def arrays(self, *allowed):
        if len(self.tensors) not in allowed:
            self.fail(f"state must hold {' or '.join(map(str, allowed))} arrays, got {len(self.tensors)}")
        return self.tensors

    def float_dtype(self, j: int, field: str) -> str:
        dtype = self.tensors[j][0]
        if dtype not in _FLOAT_TENSORS:
            self.fail(f"{field} dtype must be one of F32, F16, BF16, got {dtype}")
        return _FLOAT_TENSORS[dtype]

    def shape(self, j: int, field: str, want: tuple):
        got = tuple(self.tensors[j][1])
        if got != tuple(want):
            self.fail(f"{field} shape must be {tuple(want)}, got {got}")

    def kv_pair(self, tokens: int | None, capacity: int):
        """Two float arrays (B, H, T, D_k) / (B, H, T, D_v), same dtype and (B, H, T); T = tokens when given."""
        if not self.arrays(0, 2):
            return None
        (kd, ks), (vd, vs) = self.tensors
        dtype = self.float_dtype(0, "keys")
        if len(ks) != 4 or len(vs) != 4 or min(ks[:2] + vs[:2] + ks[3:] + vs[3:]) < 1:
            self.fail(f"keys and values must be 4-D (B, H, T, D) with B, H, D >= 1, got {tuple(ks)} and {tuple(vs)}")
        if vd != kd or ks[:3] != vs[:3]:
            self.fail(f"values {vd} {tuple(vs)} must match keys {kd} {tuple(ks)} in dtype and (B, H, T)")
        if tokens is not None and ks[2] != tokens:
            self.fail(f"keys hold {ks[2]} tokens; meta_state implies {tokens}")
        if ks[2] > capacity:
            self.fail(f"keys hold {ks[2]} tokens, more than the capacity {capacity}")
        item = 2 if dtype != "float32" else 4
        self.alloc_bytes = capacity * ks[0] * ks[1] * (ks[3] + vs[3]) * item
        return ks, vs, dtype


def _check_kvcache(L: _Layer):
    L.length(4)
    offset, _, _, capacity = (L.int_at(0, "offset"), L.int_at(1, "step", 1), L.int_at(2, "inplace", 0, 1),
                              L.int_at(3, "capacity"))
    if L.tensors and capacity < offset:
        L.fail(f"meta_state capacity {capacity} must be >= offset {offset}")
    return L.kv_pair(offset, max(capacity, offset))


def _check_latent(L: _Layer):
    L.length(6)
    pair = _check_kvcache(_Layer(L.path, L.i, L.name, L.meta[:4], L.tensors))
    r, rope = L.int_at(4, "kv_lora_rank", 1, empty_ok=True), L.int_at(5, "qk_rope_head_dim", 1, empty_ok=True)
    if pair:
        ks, vs, _ = pair
        for field, want, got in (("kv_lora_rank", r, ks[3]), ("qk_rope_head_dim", rope, vs[3])):
            if want is not None and got != want:
                L.fail(f"latent width {got} must equal meta_state {field} {want}")
        L.kv_pair(None, L.int_at(3, "capacity"))


def _check_rotating(L: _Layer):
    L.length(8)
    offset, start = L.int_at(0, "offset"), L.int_at(1, "start")
    max_size, keep = L.int_at(2, "max_size", 1), L.int_at(3, "keep")
    rewind, capacity = L.int_at(4, "rewind_tokens"), L.int_at(6, "capacity")
    L.int_at(5, "step", 1), L.int_at(7, "ordered", 0, 1)
    if keep >= max_size or capacity > max_size + rewind or start > max(offset, keep):
        L.fail(f"meta_state must have keep < max_size, capacity <= max_size + rewind_tokens, "
               f"start <= max(offset, keep); "
               f"got keep {keep}, max_size {max_size}, capacity {capacity}, rewind_tokens {rewind}, "
               f"start {start}, offset {offset}")
    L.kv_pair(None, capacity)


def _check_chunked(L: _Layer):
    L.length(5)
    offset, start, chunk = L.int_at(0, "offset"), L.int_at(1, "held_start"), L.int_at(2, "chunk_size", 1)
    L.int_at(3, "step", 1)
    capacity = L.int_at(4, "capacity")
    if start > offset or capacity > chunk:
        L.fail(f"meta_state must have held_start <= offset and capacity <= chunk_size {chunk}, got "
               f"held_start {start}, offset {offset}, capacity {capacity}")
    L.kv_pair(offset - start if L.tensors else None, capacity)


def _check_quantized(L: _Layer):
    L.length(15)
    L.int_at(0, "offset")
    bits, gs = L.int_at(1, "bits", 1, 8), L.int_at(2, "group_size", 1, 1024)
    if bits not in BITS or gs not in GROUP_SIZES:
        L.fail(f"meta_state bits {bits} / group_size {gs} must be in {BITS} / {GROUP_SIZES}")
    L.int_at(3, "step", 1), L.int_at(4, "full_precision_tokens"), L.int_at(5, "max_size", 1, empty_ok=True)
    if L.meta[14] == "":  # never updated: no arrays
        L.arrays(0)
        return
    if L.meta[14] not in _FLOAT_TENSORS.values():
        L.fail(f"meta_state dtype must be one of {', '.join(_FLOAT_TENSORS.values())}, got {show(L.meta[14])}")
    n_q, n_r, q_cap, r_cap = (L.int_at(k, f) for k, f in zip(range(6, 10), ("n_q", "n_r", "q_cap", "r_cap")))
    B, H, k_dim, v_dim = (L.int_at(k, f, 1, 2**31) for k, f in zip(range(10, 14), ("B", "H", "k_dim", "v_dim")))
    if n_q > q_cap or n_r > r_cap or k_dim % gs or v_dim % gs or k_dim * bits % 32 or v_dim * bits % 32:
        L.fail("meta_state must have n_q <= q_cap, n_r <= r_cap and widths divisible by group_size and packable")
    L.arrays(6 * (q_cap > 0) + 2 * (r_cap > 0))
    j = 0
    if q_cap:
        for part, dim in (("keys", k_dim), ("values", v_dim)):
            if L.tensors[j][0] != "U32":
                L.fail(f"{part} data dtype must be U32 (packed), got {L.tensors[j][0]}")
            L.shape(j, f"{part} data", (B, H, n_q, dim * bits // 32))
            for k, field in ((j + 1, "scales"), (j + 2, "biases")):
                if L.float_dtype(k, f"{part} {field}") != L.meta[14]:
                    L.fail(f"{part} {field} dtype must be {L.meta[14]} (meta_state)")
                L.shape(k, f"{part} {field}", (B, H, n_q, dim // gs))
            j += 3
    if r_cap:
        for part, dim in (("recent keys", k_dim), ("recent values", v_dim)):
            if L.float_dtype(j, part) != L.meta[14]:
                L.fail(f"{part} dtype must be {L.meta[14]} (meta_state)")
            L.shape(j, part, (B, H, n_r, dim))
            j += 1
    L.alloc_bytes = B * H * (q_cap * (k_dim + v_dim) * (bits / 8 + 8 / gs) + r_cap * (k_dim + v_dim) * 4)


def _check_recurrent(L: _Layer):
    if not 4 <= len(L.meta) <= MAX_META_ENTRIES:
        L.fail(f"meta_state must have offset, batch, dtype and 1 to {MAX_META_ENTRIES - 3} state shapes, "
               f"got {len(L.meta)} entries")
    L.int_at(0, "offset")
    batch = L.int_at(1, "batch", 1, 2**31)
    L.arrays(len(L.meta) - 3)
    for j, item in enumerate(L.meta[3:]):
        m = re.fullmatch(r"([^:]+):([0-9]{1,10}(?:x[0-9]{1,10}){0,7}):(float32|float16|bfloat16)", item)
        if not m:
            L.fail(f"meta_state shape entry {show(item)} must be name:AxB:dtype")
        dims = tuple(int(d) for d in m.group(2).split("x"))
        if min(dims) < 1:
            L.fail(f"state {m.group(1)!r} dims must be positive, got {dims}")
        if L.float_dtype(j, f"state {m.group(1)!r}") != m.group(3):
            L.fail(f"state {m.group(1)!r} dtype must be {m.group(3)} (meta_state), got {L.tensors[j][0]}")
        L.shape(j, f"state {m.group(1)!r}", (batch, *dims))


def _check_paged(L: _Layer):
    L.length(9)
    offset, first, bs = L.int_at(0, "offset"), L.int_at(1, "first"), L.int_at(2, "block_size", 1, 2**20)
    L.int_at(4, "window")
    H, D, Dv = (L.int_at(k, f, 1, 2**31) for k, f in zip(range(6, 9), ("H", "k_dim", "v_dim")))
    if L.meta[5] not in _FLOAT_TENSORS.values() or first > offset:
        L.fail(f"meta_state dtype must be a float dtype and first <= offset, got {show(L.meta[5])}, {first}, {offset}")
    blocks = max(1, -(-offset // bs))
    pair = L.kv_pair(offset - first if L.tensors else None, blocks * bs)
    if pair:
        ks, vs, dtype = pair
        if (ks[0], ks[1], ks[3], vs[3]) != (1, H, D, Dv) or dtype != L.meta[5]:
            L.fail(f"keys/values must be (1, {H}, T, {D}) / (1, {H}, T, {Dv}) of {L.meta[5]}, "
                   f"got {tuple(ks)} / {tuple(vs)} of {dtype}")
    L.alloc_bytes = blocks * bs * H * (D + Dv) * 4


_CHECKS = {"KVCache": _check_kvcache, "LatentCache": _check_latent, "RotatingKVCache": _check_rotating,
           "ChunkedKVCache": _check_chunked, "QuantizedKVCache": _check_quantized,
           "RecurrentStateCache": _check_recurrent, "PagedKVCache": _check_paged}


def _meta_int(path, meta: dict, key: str, high: int) -> int:
    text = meta.get(key)
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,9}", text) or int(text) > high:
        raise ValueError(f"{path}: metadata {key} must be an integer in [0, {high}], got {show(text)}")
    return int(text)


def _validate(path: str, header: dict, spec) -> list[tuple[str, list, int]]:
    """Check the whole file from its header; returns (class name, meta_state, n_state) per layer."""
    meta = header.get("__metadata__") or {}
    if meta.get("kvsim.format") != FORMAT:
        raise ValueError(f"{path} is not a kvsim cache file (kvsim.format is {show(meta.get('kvsim.format'))})")
    n_layers = _meta_int(path, meta, "kvsim.layers", MAX_LAYERS)
    if spec is not None and n_layers != len(spec.layers):
        raise ValueError(f"{path} holds {n_layers} layers; the model {spec.name!r} has {len(spec.layers)}")
    for i in range(n_layers):  # classes first: only kvsim's table can be named
        name = meta.get(f"{i}.class")
        if name != "None" and name not in CACHE_CLASSES:
            raise ValueError(f"{path}: layer {i} class {show(name)} is not a kvsim cache "
                             f"({', '.join(sorted(CACHE_CLASSES))})")
    tensors: dict[int, dict[int, tuple]] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        m = _NAME.fullmatch(key)
        if not m or int(m.group(1)) >= n_layers:
            raise ValueError(f"{path}: array {show(key)} is not '<layer>.<index>' of a layer in [0, {n_layers})")
        tensors.setdefault(int(m.group(1)), {})[int(m.group(2))] = (info["dtype"], info["shape"])
    layers, alloc = [], 0
    for i in range(n_layers):
        name = meta.get(f"{i}.class")
        if name == "None":
            if i in tensors:
                raise ValueError(f"{path}: layer {i} is None but the file holds arrays for it")
            layers.append((name, [], 0))
            continue
        if spec is not None and not issubclass(CACHE_CLASSES[name], ACCEPTED[spec.layers[i].kind]):
            accepted = ", ".join(c.__name__ for c in ACCEPTED[spec.layers[i].kind]) or "None"
            raise ValueError(f"{path}: layer {i} holds a {name}; its {spec.layers[i].kind} layer takes {accepted}")
        n_state = _meta_int(path, meta, f"{i}.n_state", MAX_STATE_ARRAYS)
        layer_arrays = tensors.get(i, {})
        if sorted(layer_arrays) != list(range(n_state)):
            raise ValueError(f"{path}: layer {i} must hold arrays {i}.0 ... {i}.{n_state - 1} (n_state {n_state}), "
                             f"got indices {sorted(layer_arrays)[:8]}")
        try:
            meta_state = json.loads(meta.get(f"{i}.meta_state", ""))
        except ValueError:
            meta_state = None
        if (not isinstance(meta_state, list) or len(meta_state) > MAX_META_ENTRIES
                or not all(isinstance(x, str) and len(x) <= 256 for x in meta_state)):
            raise ValueError(f"{path}: layer {i} meta_state must be a JSON list of at most {MAX_META_ENTRIES} strings")
        L = _Layer(path, i, name, meta_state, [layer_arrays[j] for j in range(n_state)])
        _CHECKS[name](L)
        alloc += L.alloc_bytes
        layers.append((name, meta_state, n_state))
    limit = max(MIN_ALLOC_LIMIT_BYTES, 64 * Path(path).stat().st_size)
    if alloc > limit:
        raise ValueError(f"{path}: the metadata asks for {alloc:.3g} bytes of cache buffers; accepted: at most "
                         f"{limit:,} (64 x the file, at least 1 GiB)")
    return layers


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def load_caches(path, spec=None) -> tuple[list, dict]:
    """Read a file written by :func:`save_caches`; returns (caches, user metadata).

    The whole file is validated from its header before any tensor is read or any cache built (header,
    every array's dtype and shape against its layer's meta_state, metadata ranges, and with ``spec`` the
    layer count and each cache class against the model's layers); ValueError names the layer and field.
    """
    path = _path(path)
    if not Path(path).exists():
        raise ValueError(f"cache file {path!r} does not exist")
    header = read_safetensors_header(path, ValueError)
    layers = _validate(path, header, spec)
    try:
        arrays, meta = mx.load(path, return_metadata=True)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{path}: MLX cannot read it ({_first_line(e)})") from None
    caches = []
    for i, (name, meta_state, n_state) in enumerate(layers):
        if name == "None":
            caches.append(None)
            continue
        try:
            cache = CACHE_CLASSES[name].from_state(_layer_state(arrays, i, n_state), meta_state)
        except (ValueError, TypeError, KeyError, IndexError) as e:  # from_state's own consistency checks
            raise ValueError(f"{path}: layer {i} ({name}): {_first_line(e)}") from None
        if spec is not None:
            check_layer_cache(i, spec.layers[i], cache)
        caches.append(cache)
    user = {k[len("user."):]: v for k, v in meta.items() if k.startswith("user.")}
    return caches, user


def save_cache(path, cache, metadata: dict | None = None) -> None:
    """Write one cache (see :func:`save_caches`)."""
    if not isinstance(cache, BaseCache):
        raise ValueError(f"cache must be a kvsim cache, got {type(cache).__name__}")
    save_caches(path, [cache], metadata)


def load_cache(path, cls: type | None = None):
    """Read a file holding exactly one cache; ValueError if it is not a ``cls`` (when given)."""
    caches, _ = load_caches(path)
    if len(caches) != 1 or caches[0] is None:
        raise ValueError(f"{path} holds {len(caches)} layers; use load_caches for a list")
    if cls is not None and not isinstance(caches[0], cls):
        raise ValueError(f"{path} holds a {type(caches[0]).__name__}, not a {cls.__name__}")
    return caches[0]
