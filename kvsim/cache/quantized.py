"""QuantizedKVCache: K and V stored as ``mx.quantize`` output, optionally with the newest tokens kept exact.

Contract
- Each token's key (and value) vector of D elements is stored, per KV head, as packed uint32 data
  (D·bits/32 words) plus one scale and one bias per group of ``group_size`` elements in the input
  dtype: D·bits/8 + 2·(D/group_size)·b bytes, the calculator's quantized rate
  (:func:`kvsim.calc.memory.layer_kv_bytes` with a ``q<bits>`` kv dtype and ``scale_dtype`` = input dtype).
- ``full_precision_tokens=R``: the R newest tokens stay in the input dtype; a token is quantized
  when it becomes the (R+1)-th newest. Both parts are kept in temporal order: quantized (oldest)
  first, then full precision.
- ``max_size=W`` (optional): a sliding window; the cache keeps the W newest tokens, dropping the
  oldest by shifting them out (an O(W) copy per step, bounded memory). No ``keep`` sink tokens.
- Capacity (T = highest offset reached; trim frees nothing), the calculator's allocated view:
  quantized slots = allocated_slots(max(T-R, 0), step, limit=max(W-R, 0)),
  full-precision slots = min(allocated_slots(T, step, limit=W), R).
- ``update_and_fetch(keys, values) -> QuantizedKV``: every token the new queries may attend to
  (the held tokens some new query can see, then the S new ones; oldest first; with a window the
  oldest held token is left out once W are held), in the explicit type below; attention runs
  on it with :func:`kvsim.cache.sdpa.quantized_sdpa` (``mx.quantized_matmul``, no dequantization).
  It also unpacks as mlx-lm's two (data, scales, biases) triples, and the cache has mlx-lm's
  ``bits`` / ``group_size`` attributes, so mlx-lm's models attend over it with their own quantized
  attention (with ``full_precision_tokens=0``, the only layout mlx-lm has).
- ``trim(n)`` rewinds exactly; tokens rewound out of the full-precision part are not replaced by
  older ones (those are already quantized), so after a trim the full-precision part may hold
  fewer than R tokens until new tokens arrive. With a window, once tokens were dropped only
  ``held - W + 1`` tokens can be rewound exactly (``trimmable_tokens``).
"""

from __future__ import annotations

import numbers

import mlx.core as mx

from ..calc.memory import allocated_slots
from ..calc.units import BITS, DEFAULT_STEP, GROUP_SIZES
from .base import BaseCache, check_kv, check_queries, check_step, dtype_from_name, dtype_name
from .quantized_parts import QuantizedKV, QuantizedTensor, append_rows, grow_rows
from .sdpa import quantized_sdpa


def _is_int(value) -> bool:
    """An integer (Python or numpy), not a bool, not a float with an integral value."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class QuantizedKVCache(BaseCache):
    """K/V quantized with ``mx.quantize`` (bits, group_size); optional exact recent tokens and window."""

    attention_path = "quantized sdpa"

    def attend(self, queries: mx.array, keys: mx.array, values: mx.array, scale: float | None = None) -> mx.array:
        """Store the new rows quantized, then attend with ``mx.quantized_matmul`` straight from the packed
        data (:func:`kvsim.cache.sdpa.quantized_sdpa`; scales in the dtype written)."""
        check_queries(queries, keys)                     # before anything is stored
        mask = self.make_mask(queries.shape[2], window_size=None, return_array=False)
        fetched = self.update_and_fetch(keys, values)
        return quantized_sdpa(queries, fetched.keys, fetched.values, mask, scale,
                              group_size=fetched.group_size, bits=fetched.bits,
                              recent_keys=fetched.recent_keys, recent_values=fetched.recent_values)

    def __init__(self, bits: int = 8, group_size: int = 64, step: int = DEFAULT_STEP,
                 full_precision_tokens: int = 0, max_size: int | None = None):
        # integers only: 4.0 == 4 would pass a membership test and fail later inside MLX
        if not _is_int(bits) or bits not in BITS:
            raise ValueError(f"bits must be one of {', '.join(map(str, BITS))}, got {bits!r}")
        if not _is_int(group_size) or group_size not in GROUP_SIZES:
            raise ValueError(f"group_size must be one of {', '.join(map(str, GROUP_SIZES))}, got {group_size!r}")
        r = full_precision_tokens
        if not _is_int(r) or r < 0:
            raise ValueError(f"full_precision_tokens must be an integer >= 0, got {r!r}")
        if max_size is not None and (not _is_int(max_size) or max_size < 1):
            raise ValueError(f"max_size must be a positive integer or None, got {max_size!r}")
        self.bits, self.group_size, self.step = int(bits), int(group_size), check_step(step)
        self.full_precision_tokens, self.max_size = int(r), None if max_size is None else int(max_size)
        self.offset = 0
        self._geom: dict | None = None     # B, H, k_dim, v_dim, dtype: fixed by the first update
        self._k: list[mx.array] | None = None  # [data, scales, biases] buffers, (B, H, cap_q, ..)
        self._v: list[mx.array] | None = None
        self._rk: mx.array | None = None   # full-precision buffers, (B, H, cap_r, D)
        self._rv: mx.array | None = None
        self._n_q = 0                      # quantized tokens held
        self._n_r = 0                      # full-precision tokens held

    # ------------------------------------------------------------ sizes
    @property
    def quantized_capacity(self) -> int:
        return 0 if self._k is None else self._k[0].shape[2]

    @property
    def full_precision_capacity(self) -> int:
        return 0 if self._rk is None else self._rk.shape[2]

    @property
    def capacity(self) -> int:
        """Token slots allocated: quantized slots + full-precision slots."""
        return self.quantized_capacity + self.full_precision_capacity

    def size(self) -> int:
        return self._n_q + self._n_r

    def _buffers(self) -> list[mx.array]:
        bufs = (self._k or []) + (self._v or [])
        return bufs + [b for b in (self._rk, self._rv) if b is not None]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers())

    def _row_bytes(self, bufs) -> int:
        """Bytes of one token slot across ``bufs`` (each (B, H, cap, width))."""
        return sum(b.nbytes // b.shape[2] for b in bufs if b.shape[2])

    @property
    def used_bytes(self) -> int:
        q = self._n_q * self._row_bytes((self._k or []) + (self._v or []))
        r = self._n_r * self._row_bytes([b for b in (self._rk, self._rv) if b is not None])
        return q + r

    # ------------------------------------------------------------ update
    def _check(self, keys, values) -> dict:
        g = check_kv(keys, values, self._geom)
        for label, dim in (("keys.shape[3] (head_dim)", g["k_dim"]),
                           ("values.shape[3] (head_dim)", g["v_dim"])):
            if dim % self.group_size:
                raise ValueError(f"{label} {dim} must be a multiple of group_size {self.group_size}")
        return g

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> QuantizedKV:
        """Store S new tokens (quantizing those older than the R newest); return every visible token."""
        g = self._check(keys, values)
        S, R, W = g["S"], self.full_precision_tokens, self.max_size
        if self._geom is None:
            self._geom = {k: g[k] for k in ("B", "H", "k_dim", "v_dim", "dtype")}
        n_q, n_r = self._n_q, self._n_r
        held = n_q + n_r
        drop = 0 if W is None else max(held + S - W, 0)  # oldest tokens leaving the window
        skip = 0 if W is None else max(held - (W - 1), 0)  # held tokens no new query can see
        self._reserve(self.offset + S)
        if R:
            # full-precision part: held recent tokens then the new ones; the oldest `spill`
            # of them are now older than the R newest and move to the quantized part
            spill = max(n_r + S - R, 0)
            drop_r = max(drop - (n_q + spill), 0)
            cand, self._n_r = append_rows([self._rk, self._rv], n_r, [keys, values], spill + drop_r)
            to_quantize, fp_view = [c[:, :, :spill] for c in cand], [c[:, :, spill:] for c in cand]
        else:
            spill, to_quantize, fp_view = S, [keys, values], None
        new = None
        if spill:  # (data, scales, biases) of keys, then of values
            new = [a for x in to_quantize
                   for a in mx.quantize(x, group_size=self.group_size, bits=self.bits)]
        q_view, self._n_q = append_rows((self._k or []) + (self._v or []), n_q, new, min(drop, n_q + spill))
        self.offset += S
        # the returned view starts at the first position some new query can see
        skip_q = min(skip, n_q + spill)
        qk = qv = rk = rv = None
        if n_q + spill > skip_q:
            q_view = [v[:, :, skip_q:] for v in q_view]
            qk, qv = QuantizedTensor(*q_view[:3]), QuantizedTensor(*q_view[3:])
        if fp_view is not None:
            rk, rv = (v[:, :, skip - skip_q:] for v in fp_view)
        return QuantizedKV(qk, qv, rk, rv, self.group_size, self.bits)

    def _reserve(self, tokens: int) -> None:
        """Grow buffers to the capacity rule for a peak of ``tokens`` (never shrinks)."""
        g, R, W = self._geom, self.full_precision_tokens, self.max_size
        B, H, dt = g["B"], g["H"], g["dtype"]
        q_cap = allocated_slots(max(tokens - R, 0), self.step, None if W is None else max(W - R, 0))
        if q_cap > self.quantized_capacity:
            self._k = self._grow_quantized(self._k, q_cap, g["k_dim"])
            self._v = self._grow_quantized(self._v, q_cap, g["v_dim"])
        r_cap = min(allocated_slots(tokens, self.step, W), R)
        if r_cap > self.full_precision_capacity:
            self._rk = grow_rows(self._rk, r_cap, (B, H, g["k_dim"]), dt)
            self._rv = grow_rows(self._rv, r_cap, (B, H, g["v_dim"]), dt)

    def _grow_quantized(self, bufs, cap, dim):
        """[data, scales, biases] buffers with ``cap`` slots for vectors of ``dim`` elements."""
        g = self._geom
        widths = (dim * self.bits // 32, dim // self.group_size, dim // self.group_size)
        dtypes = (mx.uint32, g["dtype"], g["dtype"])
        old = bufs or [None] * 3
        return [grow_rows(b, cap, (g["B"], g["H"], w), d) for b, w, d in zip(old, widths, dtypes)]

    # ------------------------------------------------------------ rewinding
    @property
    def trimmable_tokens(self) -> int:
        held = self.size()
        if held == self.offset:          # nothing dropped: every token can be rewound
            return self.offset
        # window W: after rewinding n the next query needs positions > offset-n-W
        return max(0, held - self.max_size + 1)

    def trim(self, n: int) -> int:
        """Rewind ``min(n, offset)`` tokens: newest first, from the full-precision part, then the quantized."""
        n = self._check_trim(n)
        from_recent = min(n, self._n_r)
        self._n_r -= from_recent
        self._n_q -= n - from_recent
        self.offset -= n
        return n

    # ------------------------------------------------------------ masks
    def all_visible(self, n: int) -> bool:
        return n == 1  # one query at the newest position sees every key returned (causal)

    def key_positions(self, n: int) -> mx.array:
        """Held tokens some new query can see, plus the n new ones (window: from offset-W+1)."""
        start = self.offset - self.size()
        if self.max_size is not None:
            start = max(start, self.offset - self.max_size + 1)
        return mx.arange(start, self.offset + n, dtype=mx.int32)

    def visible(self, q_pos, k_pos):
        causal = k_pos <= q_pos
        return causal if self.max_size is None else causal & (k_pos > q_pos - self.max_size)

    # ------------------------------------------------------------ persistence
    @property
    def state(self) -> tuple:
        """Filled rows only: k data/scales/biases, v data/scales/biases (if that part is
        allocated), then recent k, recent v (if full_precision_tokens > 0)."""
        out = [b[:, :, :self._n_q] for b in (self._k or []) + (self._v or [])]
        if self._rk is not None:
            out += [self._rk[:, :, :self._n_r], self._rv[:, :, :self._n_r]]
        return tuple(out)

    @property
    def meta_state(self) -> tuple:
        g = self._geom or {}
        fields = (self.offset, self.bits, self.group_size, self.step, self.full_precision_tokens,
                  "" if self.max_size is None else self.max_size, self._n_q, self._n_r,
                  self.quantized_capacity, self.full_precision_capacity,
                  *(g.get(k, "") for k in ("B", "H", "k_dim", "v_dim")),
                  dtype_name(g["dtype"]) if g else "")
        return tuple(str(f) for f in fields)

    @classmethod
    def from_state(cls, state, meta_state):
        """Rebuild with the same offset, held tokens, capacities (hence nbytes) and settings."""
        m = list(meta_state)
        if len(m) != 15:
            raise ValueError(f"meta_state must have 15 entries for QuantizedKVCache, got {len(m)}")
        offset, bits, gs, step, r = (int(x) for x in m[:5])
        cache = cls(bits, gs, step, r, None if m[5] == "" else int(m[5]))
        if m[14] == "":  # never updated
            return cache
        n_q, n_r, q_cap, r_cap, B, H, k_dim, v_dim = (int(x) for x in m[6:14])
        state = list(state)
        want = 6 * (q_cap > 0) + 2 * (r_cap > 0)
        if len(state) != want:
            raise ValueError(f"state has {len(state)} arrays; meta_state implies {want}")
        cache._geom = {"B": B, "H": H, "k_dim": k_dim, "v_dim": v_dim, "dtype": dtype_from_name(m[14])}
        if q_cap:
            cache._k = cache._grow_quantized(None, q_cap, k_dim)
            cache._v = cache._grow_quantized(None, q_cap, v_dim)
            append_rows(cache._k + cache._v, 0, state[:6] if n_q else None, 0)
        if r_cap:
            cache._rk = grow_rows(None, r_cap, (B, H, k_dim), cache._geom["dtype"])
            cache._rv = grow_rows(None, r_cap, (B, H, v_dim), cache._geom["dtype"])
            append_rows([cache._rk, cache._rv], 0, state[-2:] if n_r else None, 0)
        cache.offset, cache._n_q, cache._n_r = offset, n_q, n_r
        return cache
