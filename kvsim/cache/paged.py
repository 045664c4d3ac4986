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
  ``attend(queries, keys, values)`` (the model's call, :meth:`kvsim.cache.base.BaseCache.attend`)
  writes the rows and reads them straight from the blocks, never gathering them; ``attend(queries)``
  after an ``update_and_fetch`` reads only (MLX is lazy: the gathered arrays are then never built).
- Read paths (:meth:`PagedKVCache.read`): ``gather`` (copy the pages into contiguous K/V, then dense
  attention), ``block_table`` (one partial per block read in place with ``mx.gather_mm``, merged by
  log-sum-exp; float32 on a CPU, as MLX 0.32's ``gather_mm``) and ``online`` (its readable reference:
  a loop over the block table with an online softmax). ``pages=`` reads a listed subset of pages
  (sparse page indirection). All equal dense attention over the same keys (fp32 within 1e-5);
  bytes read and copied per read: :meth:`PagedKVCache.read_bytes`.
- :func:`paged_caches`: one PagedKVCache per layer of a model spec, each layer in its own pool of its kind
  (the paged counterpart of ``make_caches`` for one sequence).
- :func:`cascade_read`: a group of sequences sharing whole prefix blocks (a fork, a prefix-cache hit)
  attends to the shared prefix once for the group and to each suffix per row (cascade attention).
- Accounting: ``cache.nbytes`` = blocks this sequence holds × bytes of one block in one layer (a
  shared block counts in each holder; ``pool.nbytes`` counts every block once); ``capacity`` =
  held blocks × block_size; ``used_bytes`` = held tokens × bytes per token. ``trim`` rewinds one
  layer; blocks past the highest layer offset go back to the pool (paging gives memory back).
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.paged_read import read_step_bytes
from ..serving.block_pool import cdiv
from .base import BaseCache, check_queries, deepcopy_object, dtype_from_name, dtype_name
from .paged_store import PagedKVStore
from .cascade import cascade_attention
from .partials import finish_partial, merge_stacked, softmax_stats
from .sdpa import sdpa

READ_PATHS = ("gather", "block_table", "online")


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

    def shared_prefix_pages(self, seq_ids) -> int:
        """Leading pages every listed sequence's block table points at the same physical block: the
        pages a cascade group shares (forks and prefix-cache hits share whole blocks)."""
        tables = [self.allocator.block_table(s) for s in seq_ids]
        n = 0
        for col in zip(*tables):
            if col[0] < 0 or any(b != col[0] for b in col):
                break
            n += 1
        return n

    def fork(self, parent_id, child_id) -> list[PagedKVCache]:
        """A child sharing every block of the parent (parallel sampling); returns its views."""
        super().fork(parent_id, child_id)
        return self.caches(child_id)


def paged_caches(spec, block_size: int, num_blocks: int = 32, dtype=mx.float32) -> list[PagedKVCache]:
    """One PagedKVCache per layer of ``spec`` for sequence 0, each layer in its own :class:`PagedKVPool` of its
    kind (full / sliding / chunked; no prefix caching).

    Layer i's pool holds K (num_blocks, num_key_value_heads, block_size, head_dim) and V (num_blocks,
    num_key_value_heads, block_size, v_head_dim) in ``dtype``; each view takes (B=1, heads, S, dim) rows.
    """
    out = []
    for layer in spec.layers:
        pool = PagedKVPool.for_layer(layer, 1, block_size=block_size, num_blocks=num_blocks, dtype=dtype,
                                     enable_prefix_caching=False)
        pool.add_sequence(0)
        out.append(pool.caches(0)[0])
    return out


class PagedKVCache(BaseCache):
    """One layer of one sequence: a view onto a :class:`PagedKVPool` (see module docstring)."""

    attention_path = "paged block table"

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

    # ------------------------------------------------------------ reading (attention)
    def attend(self, queries: mx.array, keys: mx.array | None = None, values: mx.array | None = None,
               scale: float | None = None, path: str = "block_table", pages=None) -> mx.array:
        """The cache's attention (see :meth:`kvsim.cache.base.BaseCache.attend`): store ``keys``/``values``
        (if given; nothing is gathered), then :meth:`read` for the queries of that update."""
        if path not in READ_PATHS:
            raise ValueError(f"path must be one of {', '.join(READ_PATHS)}, got {path!r}")
        if keys is not None or values is not None:
            check_queries(queries, keys)                              # nothing stored yet
            if pages is not None:
                raise ValueError("pages must be None when attend stores new keys (read sparse pages with read())")
            self.pool.write(self.seq_id, self.layer, keys, values)   # validates first; no change on error
        return self.read(queries, scale, path, pages)

    def read(self, queries: mx.array, scale: float | None = None, path: str = "block_table",
             pages=None) -> mx.array:
        """Attention of the N queries of the last update over this sequence's blocks.

        queries (1, H_q, N, D) at positions [offset − N, offset); returns (1, H_q, N, D_v) in the
        queries' dtype. ``path``:
        - ``"gather"``: copy the pages by block table into contiguous K/V, then dense attention
          (what ``update_and_fetch`` hands a model; the yardstick);
        - ``"block_table"``: read each block where it lies: one partial (out, log-sum-exp) per block,
          all blocks at once with ``mx.gather_mm`` on the pool, merged by
          :func:`kvsim.cache.partials.merge_stacked` (no copy of K or V). MLX 0.32's ``gather_mm``
          takes float32 only on a CPU; other dtypes take ``"online"``;
        - ``"online"``: the readable reference of the same: a loop over the block table, one block at
          a time, with a running max m, normaliser l and accumulator (online softmax):
          m' = max(m, max s), l' = l·e^{m−m'} + Σ e^{s−m'}, acc' = acc·e^{m−m'} + e^{s−m'} V.
        ``pages``: sparse page indirection, the logical page numbers p (positions [p·bs, (p+1)·bs))
        to read, a subset of the pages held; None = every held page. Keys a query may not see
        (causal, window, chunk, or not yet written) are masked as in :meth:`visible`.
        """
        if path not in READ_PATHS:
            raise ValueError(f"path must be one of {', '.join(READ_PATHS)}, got {path!r}")
        q, N, logical, mask = self._read_plan(queries, pages)
        scale = queries.shape[3] ** -0.5 if scale is None else scale
        table = self.pool.allocator.block_table(self.seq_id)
        blocks = [table[p] for p in logical]
        if path == "gather":
            out = self._read_gathered(queries, blocks, mask, scale)
        elif path == "block_table" and self.pool.dtype == mx.float32:
            out = self._read_block_table(q, blocks, mask, scale)
        else:
            out = self._read_online(q, blocks, mask, scale)
        return out.reshape(1, queries.shape[1], N, -1).astype(queries.dtype)

    def _read_plan(self, queries, pages):
        """Validated queries, their count N, the logical pages read and the (N, pages, bs) mask."""
        bs, H = self.block_size, self.pool.geometry["H"]
        if queries.ndim != 4 or queries.shape[0] != 1 or queries.shape[1] % H \
                or not 1 <= queries.shape[2] <= self.offset:
            raise ValueError(f"queries must be (1, a multiple of {H} heads, 1..{self.offset} tokens, "
                             f"head_dim), got {tuple(queries.shape)}")
        first, end = self.pool.allocator.first_live_token(self.seq_id), self.offset
        held = range(first // bs, cdiv(end, bs))
        logical = list(held) if pages is None else [int(p) for p in pages]
        if not logical or any(p not in held for p in logical) or len(set(logical)) != len(logical):
            raise ValueError(f"pages must be distinct page numbers in [{held.start}, {held.stop - 1}] "
                             f"(the pages this sequence holds), got {pages!r}")
        N = queries.shape[2]
        k_pos = (mx.array(logical, dtype=mx.int32)[:, None] * bs + mx.arange(bs, dtype=mx.int32))  # (n, bs)
        q_pos = mx.arange(end - N, end, dtype=mx.int32)[:, None, None]                             # (N, 1, 1)
        mask = self.visible(q_pos, k_pos[None]) & (k_pos[None] >= first)                          # (N, n, bs)
        rep = queries.shape[1] // H
        q = queries[0].reshape(H, rep * N, -1)               # GQA: row r·N + i = query i of head group r
        return q, N, logical, mask

    def _read_gathered(self, queries, blocks, mask, scale):
        """Copy the blocks into contiguous (1, H, n·bs, D) K/V, then dense attention (the copy path)."""
        keys, values = self.gather_pages(blocks)
        N = queries.shape[2]
        return sdpa(queries, keys.astype(queries.dtype), values.astype(queries.dtype),
                    mask.reshape(N, -1), scale)

    def gather_pages(self, blocks):
        """K and V of these physical blocks copied into contiguous (1, H, n·bs, D) arrays: the copy a
        gather path makes (its nbytes = n · layer_block_bytes, :func:`kvsim.calc.paged_read.read_step_bytes`)."""
        ids = mx.array(blocks)
        out = []
        for arrays in (self.pool.keys, self.pool.values):
            b = arrays[self.layer][ids].swapaxes(0, 1)                     # (H, n, bs, D): a copy
            out.append(b.reshape(1, b.shape[0], -1, b.shape[3]))
        return out[0], out[1]

    def _read_block_table(self, q, blocks, mask, scale):
        """One partial per block via ``mx.gather_mm`` on the pool (no copy), merged by log-sum-exp."""
        pool, bs = self.pool, self.block_size
        H, (rN, D), n = q.shape[0], q.shape[1:], len(blocks)
        N = mask.shape[0]
        heads = mx.arange(H, dtype=mx.uint32)
        rhs = mx.array(blocks, dtype=mx.uint32)[:, None] * H + heads        # (n, H): (block, head) matrices
        K = pool.keys[self.layer].reshape(-1, bs, D)                        # (blocks·H, bs, D), a view
        s = mx.gather_mm((q * scale).astype(mx.float32), K.swapaxes(-1, -2),
                         mx.broadcast_to(heads, (n, H)), rhs)               # (n, H, rep·N, bs)
        s = s.reshape(n, H, rN // N, N, bs)
        m, p, l, empty = softmax_stats(s, mask.transpose(1, 0, 2)[:, None, None])   # mask (n, 1, 1, N, bs)
        V = pool.values[self.layer].reshape(-1, bs, pool.geometry["v_dim"])
        lhs = mx.arange(n * H, dtype=mx.uint32).reshape(n, H)
        acc = mx.gather_mm(p.reshape(n * H, rN, bs), V, lhs, rhs)          # (n, H, rep·N, D_v)
        out, lse = finish_partial(acc, m.reshape(n, H, rN, 1), l.reshape(n, H, rN, 1),
                                  empty.reshape(n, H, rN, 1))
        return merge_stacked(out, lse)[0]                                   # (H, rep·N, D_v)

    def _read_online(self, q, blocks, mask, scale):
        """The block-table read written as a loop: online softmax over one block at a time."""
        pool = self.pool
        H, rN = q.shape[:2]
        N = mask.shape[0]
        q = (q * scale).astype(mx.float32).reshape(H, rN // N, N, -1)       # (H, rep, N, D)
        m = mx.full((H, rN // N, N, 1), float("-inf"))                      # running max
        l = mx.zeros((H, rN // N, N, 1))                                    # running normaliser
        acc = mx.zeros((H, rN // N, N, pool.geometry["v_dim"]))             # running Σ e^{s−m} v
        for i, b in enumerate(blocks):
            K = pool.keys[self.layer][b].astype(mx.float32)                 # (H, bs, D): this block only
            V = pool.values[self.layer][b].astype(mx.float32)
            s = q @ K[:, None].swapaxes(-1, -2)                             # (H, rep, N, bs)
            s = mx.where(mask[:, i], s, float("-inf"))
            m_new = mx.maximum(m, s.max(axis=-1, keepdims=True))
            m_safe = mx.where(mx.isinf(m_new), 0.0, m_new)                  # nothing seen yet: no rescale
            p = mx.exp(s - m_safe)
            correction = mx.exp(m - m_safe)
            l = l * correction + p.sum(axis=-1, keepdims=True)
            acc = acc * correction + p @ V[:, None]
            m = m_new
        return mx.where(l > 0, acc / mx.where(l > 0, l, 1.0), 0.0).reshape(H, rN, -1)

    def read_bytes(self, path: str = "block_table", pages=None) -> dict:
        """{'read_bytes', 'copied_bytes'} of one read by ``path`` over ``pages`` (None = every held page),
        :func:`kvsim.calc.paged_read.read_step_bytes` (``online`` reads what ``block_table`` reads)."""
        bs = self.block_size
        n = len(pages) if pages is not None else \
            cdiv(self.offset, bs) - self.pool.allocator.first_live_token(self.seq_id) // bs
        return read_step_bytes("gather" if path == "gather" else "block_table", n, self.pool.layer_block_bytes)

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


def cascade_read(caches, queries: mx.array, scale: float | None = None) -> mx.array:
    """Cascade attention for a group of paged sequences that share whole prefix blocks (one layer).

    ``caches``: PagedKVCache views of B sequences of one ``full`` pool and layer; queries (B, H_q, N, D)
    are the N newest positions of each row. The shared prefix = the leading pages all block tables
    share (:meth:`PagedKVPool.shared_prefix_pages`), cut so every query comes after it; its blocks
    are gathered ONCE for the group, each row's remaining pages once for that row, and
    :func:`kvsim.cache.cascade.cascade_attention` merges the two partials (causal mask on the
    suffix). Equals ``caches[b].read(queries[b])`` for every row (tests: fp32 within 1e-5).
    """
    caches = list(caches)
    pool, layer = caches[0].pool, caches[0].layer
    if any(c.pool is not pool or c.layer != layer for c in caches) or pool.kind != "full":
        raise ValueError("caches must be views of one layer of one 'full' PagedKVPool")
    if queries.ndim != 4 or queries.shape[0] != len(caches):
        raise ValueError(f"queries must be (B = {len(caches)}, H_q, N, D), got {tuple(queries.shape)}")
    bs, N = pool.block_size, queries.shape[2]
    ids = [c.seq_id for c in caches]
    offsets = [c.offset for c in caches]
    if min(offsets) < N or any(pool.allocator.first_live_token(s) for s in ids):
        raise ValueError(f"every sequence must hold all its tokens and at least N = {N} of them")
    pages = min(pool.shared_prefix_pages(ids), (min(offsets) - N) // bs)   # every query after the prefix
    P = pages * bs
    table = pool.allocator.block_table(ids[0])
    if pages:
        pk, pv = caches[0].gather_pages(table[:pages])                      # the prefix, copied once
    else:
        pk = pool.keys[layer][:0].reshape(1, pool.geometry["H"], 0, pool.geometry["k_dim"])
        pv = pool.values[layer][:0].reshape(1, pool.geometry["H"], 0, pool.geometry["v_dim"])
    sk, sv, masks = [], [], []
    for c, end in zip(caches, offsets):
        own = pool.allocator.block_table(c.seq_id)[pages:cdiv(end, bs)]
        k, v = c.gather_pages(own)
        sk.append(k[:, :, :end - P])
        sv.append(v[:, :, :end - P])
        masks.append(mx.arange(end - P)[None] <= mx.arange(end - P - N, end - P)[:, None])   # (N, S_b) causal
    out = cascade_attention(queries, pk, pv, sk, sv, scale, masks)
    return out.astype(queries.dtype)
