"""PagedKVCache: per-sequence views onto a shared pool of fixed-size KV blocks (PagedAttention).

Contract
- :class:`PagedKVPool` is a :class:`~kvsim.cache.paged_store.PagedKVStore` (blocks, allocator,
  per-layer offsets, windows, sharing, pressure: see there) that hands out views: ``caches(seq_id)``
  gives one :class:`PagedKVCache` per layer, ``fork`` the child's.
- :class:`PagedKVCache` (pool, seq_id, layer) follows :mod:`kvsim.cache.base` for one layer of one
  sequence (B = 1), through the store's public per-layer methods only (offset, first_kept, write,
  rewind, start_at). ``update_and_fetch`` writes token t into block ``table[t // bs]``, row ``t % bs``, and
  returns the keys/values gathered by block table from the first held block to ``offset + S``
  (temporal order): attention over them equals the dense cache's. Masks hide older keys a kept
  block still holds.
  ``attend(queries)`` computes the same attention straight from the blocks (no gathered copy;
  MLX is lazy, so the arrays update_and_fetch returned are then never built). MLX 0.32's
  ``gather_mm`` runs float32 only on CPU; other dtypes attend over the gathered copy.
- Accounting: ``cache.nbytes`` = blocks this sequence holds × bytes of one block in one layer (a
  shared block counts in each holder; ``pool.nbytes`` counts every block once); ``capacity`` =
  held blocks × block_size; ``used_bytes`` = held tokens × bytes per token. ``trim`` rewinds one
  layer; blocks past the highest layer offset go back to the pool (paging gives memory back).
"""

from __future__ import annotations

import mlx.core as mx

from ..serving.block_pool import cdiv
from .base import BaseCache, deepcopy_object, dtype_from_name, dtype_name
from .paged_store import PagedKVStore
from .sdpa import sdpa


class PagedKVPool(PagedKVStore):
    """Blocks of K/V for ``num_layers`` layers of one kind, shared by many sequences, with views."""

    def __deepcopy__(self, memo):
        """An independent pool, every sequence's blocks copied (deep-copying a PagedKVCache copies its pool)."""
        return deepcopy_object(self, memo)

    def caches(self, seq_id) -> list[PagedKVCache]:
        """One cache view per layer of this pool for the sequence."""
        if seq_id not in self:
            raise KeyError(f"seq_id {seq_id!r} is not in this pool")
        return [PagedKVCache(self, seq_id, layer) for layer in range(self.num_layers)]

    def fork(self, parent_id, child_id) -> list[PagedKVCache]:
        """A child sharing every block of the parent (parallel sampling); returns its views."""
        super().fork(parent_id, child_id)
        return self.caches(child_id)


class PagedKVCache(BaseCache):
    """One layer of one sequence: a view onto a :class:`PagedKVPool` (see module docstring)."""

    def __init__(self, pool: PagedKVPool, seq_id, layer: int):
        if not 0 <= layer < pool.num_layers:
            raise ValueError(f"layer must be in [0, {pool.num_layers - 1}], got {layer!r}")
        self.pool, self.seq_id, self.layer = pool, seq_id, layer
        self.block_size = pool.block_size

    @property
    def offset(self) -> int:
        return self.pool.offset(self.seq_id, self.layer)

    def update_and_fetch(self, keys, values):
        """Write S rows into their slots; return (1, H, L, D) keys/values gathered by block table."""
        first, end = self.pool.write(self.seq_id, self.layer, keys, values)  # may raise: no change yet
        return self._gather(first, end)

    def _gather(self, first: int, end: int):
        """Rows of positions [first, end) in temporal order, shape (1, H, end − first, D)."""
        bs = self.block_size
        table = self.pool.allocator.block_table(self.seq_id)[first // bs: cdiv(end, bs)]
        ids = mx.array(table)
        out = []
        for arrays in (self.pool.keys, self.pool.values):
            blocks = arrays[self.layer][ids].swapaxes(0, 1)             # (H, nb, bs, D)
            rows = blocks.reshape(blocks.shape[0], -1, blocks.shape[3])  # (H, nb·bs, D): a copy
            out.append(rows[None, :, first % bs: first % bs + end - first])  # (1, H, L, D)
        return out[0], out[1]

    def attend(self, queries: mx.array, scale: float | None = None) -> mx.array:
        """Attention of the N queries of the last update, computed block by block.

        queries (1, H_q, N, D) at positions [offset − N, offset). Per held block n and KV head h:
        scores_nh = (scale·q_h) K_nhᵀ via ``mx.gather_mm`` on the pool (no copy of K or V), one
        softmax over every held slot (masked: not visible, or not written yet), out = Σ_n P_nh V_nh.
        """
        pool, bs = self.pool, self.block_size
        H = pool.geometry["H"]
        if queries.ndim != 4 or queries.shape[0] != 1 or queries.shape[1] % H \
                or not 1 <= queries.shape[2] <= self.offset:
            raise ValueError(f"queries must be (1, a multiple of {H} heads, 1..{self.offset} tokens, "
                             f"head_dim), got {tuple(queries.shape)}")
        _, Hq, N, D = queries.shape
        first, end = self.pool.allocator.first_live_token(self.seq_id), self.offset
        table = self.pool.allocator.block_table(self.seq_id)[first // bs: cdiv(end, bs)]
        n, rep = len(table), Hq // H
        scale = D ** -0.5 if scale is None else scale
        k_pos = mx.arange(first - first % bs, first - first % bs + n * bs, dtype=mx.int32)
        q_pos = mx.arange(end - N, end, dtype=mx.int32)[:, None]
        mask = self.visible(q_pos, k_pos[None]) & (k_pos[None] >= first)  # (N, n·bs); k <= q < end
        if pool.dtype != mx.float32:  # MLX 0.32 gather_mm on CPU takes float32 only: gather instead
            keys, values = self._gather(first, end)
            return sdpa(queries, keys, values, mask[:, first % bs: first % bs + end - first], scale)
        heads = mx.arange(H, dtype=mx.uint32)
        rhs = mx.array(table, dtype=mx.uint32)[:, None] * H + heads     # (n, H): pool matrix ids
        q = (queries[0] * scale).reshape(H, rep * N, D)                 # GQA: rep query heads per KV head
        K = pool.keys[self.layer].reshape(-1, bs, D)                    # (blocks·H, bs, D), a view
        s = mx.gather_mm(q, K.swapaxes(-1, -2), mx.broadcast_to(heads, (n, H)), rhs)  # (n, H, rep·N, bs)
        s = s.transpose(1, 2, 0, 3).reshape(H, rep, N, n * bs)          # one row per query over all slots
        s = mx.where(mask, s, mx.finfo(s.dtype).min)
        p = mx.softmax(s, axis=-1, precise=True).reshape(H, rep * N, n, bs).transpose(2, 0, 1, 3)
        V = pool.values[self.layer].reshape(-1, bs, pool.geometry["v_dim"])
        lhs = mx.arange(n * H, dtype=mx.uint32).reshape(n, H)
        out = mx.gather_mm(p.reshape(n * H, rep * N, bs), V, lhs, rhs).sum(axis=0)  # (H, rep·N, Dv)
        return out.reshape(1, Hq, N, -1)

    # ------------------------------------------------------------ accounting
    def _held_blocks(self) -> int:
        try:
            table = self.pool.allocator.block_table(self.seq_id)
        except KeyError:  # preempted: holds nothing right now
            return 0
        return sum(1 for b in table if b >= 0)

    @property
    def capacity(self) -> int:
        return self._held_blocks() * self.block_size

    @property
    def nbytes(self) -> int:
        return self._held_blocks() * self.pool.layer_block_bytes

    def size(self) -> int:
        if not self._held_blocks():
            return 0
        return max(0, self.offset - self.pool.allocator.first_live_token(self.seq_id))

    @property
    def used_bytes(self) -> int:
        return self.size() * self.pool.token_bytes

    # ------------------------------------------------------------ rewinding and masks
    @property
    def trimmable_tokens(self) -> int:
        """How far the next query can move back and still find every key it may see."""
        first = self.pool.allocator.first_live_token(self.seq_id)
        if first == 0:
            return self.offset
        W = self.pool.window
        if self.pool.kind == "sliding":  # query m needs m − W + 1 ≥ first
            return max(0, self.offset - (first + W - 1))
        return max(0, self.offset - cdiv(first, W) * W)  # chunked: chunk start of m ≥ first

    def trim(self, n: int) -> int:
        """Rewind this layer; blocks past the highest layer offset return to the pool."""
        return self.pool.rewind(self.seq_id, self.layer, self._check_trim(n))

    def key_positions(self, n: int) -> mx.array:
        return mx.arange(self.pool.first_kept(self.seq_id), self.offset + n, dtype=mx.int32)

    def visible(self, q_pos, k_pos):
        causal = k_pos <= q_pos
        W = self.pool.window
        if self.pool.kind == "sliding":
            return causal & (k_pos > q_pos - W)
        if self.pool.kind == "chunked":
            return causal & ((k_pos // W) == (q_pos // W))
        return causal

    # ------------------------------------------------------------ persistence
    @property
    def state(self) -> tuple:
        first = self.pool.allocator.first_live_token(self.seq_id)
        if self.offset <= first:
            return ()
        return self._gather(first, self.offset)

    @property
    def meta_state(self) -> tuple:
        first = self.pool.allocator.first_live_token(self.seq_id)
        p = self.pool
        return tuple(str(x) for x in (self.offset, first, p.block_size, p.kind, p.window or 0,
                                      dtype_name(p.dtype), p.geometry["H"], p.geometry["k_dim"],
                                      p.geometry["v_dim"]))

    @classmethod
    def from_state(cls, state, meta_state):
        """A cache in its own pool, just large enough for the saved blocks."""
        offset, first, bs = (int(x) for x in meta_state[:3])
        kind, window, dtype = meta_state[3], int(meta_state[4]) or None, dtype_from_name(meta_state[5])
        H, D, Dv = (int(x) for x in meta_state[6:9])
        pool = PagedKVPool(1, H, D, Dv, block_size=bs, num_blocks=max(1, cdiv(offset, bs)),
                           dtype=dtype, kind=kind, window=window, enable_prefix_caching=False)
        pool.add_sequence(0)
        pool.start_at(0, first)  # positions before `first` had left the window when it was saved
        cache = pool.caches(0)[0]
        if state:
            keys, values = state
            if keys.shape[2] != offset - first:
                raise ValueError(f"state holds {keys.shape[2]} tokens, meta_state implies {offset - first}")
            cache.update_and_fetch(keys, values)
        return cache
