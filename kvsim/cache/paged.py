"""PagedKVCache: per-sequence views onto a shared pool of fixed-size KV blocks (PagedAttention).

Contract
- :class:`PagedKVPool` stores one layer group (layers of one kind and shape): per layer, K and V
  arrays of shape ``(num_blocks, n_kv_heads, block_size, head_dim)`` and ONE
  :class:`~kvsim.serving.blocks.BlockAllocator` for the group, so a sequence has one block table for all
  its layers (as in vLLM) and each layer its own offset. ``num_blocks = ⌊budget_bytes /
  block_bytes⌋`` with ``block_bytes = layers · block_size · n_kv · (d_k + d_v) · dtype bytes``.
  Heads come before tokens inside a block (the layout of vLLM's original PagedAttention kernel):
  each (block, head) is then a contiguous (block_size, head_dim) matrix that ``mx.gather_mm`` can
  multiply in place; with tokens first, every decode step would copy the blocks first.
- :class:`PagedKVCache` (pool, seq_id, layer) follows :mod:`kvsim.cache.base` for one layer of one
  sequence (B = 1). ``update_and_fetch`` writes token t into block ``table[t // bs]``, row
  ``t % bs``, and returns the keys/values gathered by block table from the first held block to
  ``offset + S`` (temporal order): attention over them equals the dense cache's.
  ``attend(queries)`` computes the same attention straight from the blocks (no gathered copy;
  MLX is lazy, so the arrays update_and_fetch returned are then never built). MLX 0.32's
  ``gather_mm`` runs float32 only on CPU; other dtypes attend over the gathered copy.
- Windows: a ``sliding`` pool (W) releases, before each write, the blocks whose positions all lie
  before ``o_min − W + 1``; a ``chunked`` pool (C) those before the chunk start of ``o_min``
  (o_min = lowest layer offset, so no layer loses a key it still needs). Masks hide older keys a
  kept block still holds. Steady state: ⌈W / bs⌉ + 1 blocks (the +1 of a window that does not
  start on a block boundary), one more for a moment while a new block is taken.
- Sharing: ``add_sequence(seq_id, token_ids)`` reuses published prompt blocks; views start at the
  hit offset. A block is published once every layer has written it. ``fork`` shares all blocks.
  Writes never touch a block another table lists: copy-on-write copies it in every layer.
- Pressure: the allocator evicts cached prefix blocks (LRU); if a write is still short, the pool
  preempts the most recently admitted other sequence (``preemption`` = "recompute", or "swap" into
  host blocks) and appends its id to ``pool.preempted``. A write that could never fit raises
  RequestTooLarge; a failed write changes nothing.
- Accounting: ``cache.nbytes`` = blocks this sequence holds × bytes of one block in one layer (a
  shared block counts in each holder; ``pool.nbytes`` counts every block once); ``capacity`` =
  held blocks × block_size; ``used_bytes`` = held tokens × bytes per token. ``trim`` rewinds one
  layer; blocks past the highest layer offset go back to the pool (paging gives memory back).
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.units import DEFAULT_BLOCK_SIZE
from ..serving.blocks import BlockAllocator, OutOfBlocks, cdiv
from .base import BaseCache, check_kv, deepcopy_object, dtype_from_name, dtype_name
from .sdpa import sdpa

KINDS = ("full", "sliding", "chunked")


def _count(name, value, low=1):
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


class PagedKVPool:
    """Blocks of K/V for ``num_layers`` layers of one kind, shared by many sequences."""

    def __init__(self, num_layers: int, num_key_value_heads: int, head_dim: int,
                 v_head_dim: int | None = None, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 num_blocks: int | None = None, budget_bytes: int | None = None,
                 dtype=mx.float16, kind: str = "full", window: int | None = None,
                 enable_prefix_caching: bool = True, num_host_blocks: int = 0,
                 preemption: str = "recompute"):
        self.num_layers = _count("num_layers", num_layers)
        H, D = _count("num_key_value_heads", num_key_value_heads), _count("head_dim", head_dim)
        Dv = D if v_head_dim is None else _count("v_head_dim", v_head_dim)
        self.block_size = _count("block_size", block_size)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if (kind == "full") != (window is None):
            raise ValueError(f"window must be None for kind 'full' and a positive integer for "
                             f"sliding/chunked, got {window!r} for {kind!r}")
        if preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', got {preemption!r}")
        self.kind, self.window, self.preemption, self.dtype = kind, window, preemption, dtype
        self.token_bytes = H * (D + Dv) * dtype.size          # one token, one layer
        self.layer_block_bytes = self.block_size * self.token_bytes
        self.block_bytes = self.num_layers * self.layer_block_bytes
        if (num_blocks is None) == (budget_bytes is None):
            raise ValueError("give exactly one of num_blocks or budget_bytes")
        if num_blocks is None:
            num_blocks = int(budget_bytes) // self.block_bytes
            if num_blocks < 1:
                raise ValueError(f"budget_bytes {budget_bytes} is smaller than one block "
                                 f"({self.block_bytes} bytes over {self.num_layers} layers)")
        self.num_blocks = _count("num_blocks", num_blocks)
        self.geometry = {"B": 1, "H": H, "S": 0, "k_dim": D, "v_dim": Dv, "dtype": dtype}
        bs = self.block_size
        self.keys = [mx.zeros((num_blocks, H, bs, D), dtype) for _ in range(num_layers)]
        self.values = [mx.zeros((num_blocks, H, bs, Dv), dtype) for _ in range(num_layers)]
        self.host_keys = [mx.zeros((num_host_blocks, H, bs, D), dtype)
                          for _ in range(num_layers)] if num_host_blocks else []
        self.host_values = [mx.zeros((num_host_blocks, H, bs, Dv), dtype)
                            for _ in range(num_layers)] if num_host_blocks else []
        self.allocator = BlockAllocator(self.num_blocks, self.block_size, enable_prefix_caching,
                                        num_host_blocks)
        self._offsets: dict = {}   # seq -> per-layer offset
        self._written: dict = {}   # seq -> per-layer end of the last write (rewind detection)
        self.preempted: list = []  # ids preempted to make room, oldest first

    def __deepcopy__(self, memo):
        """An independent pool, every sequence's blocks copied (deep-copying a PagedKVCache copies its pool)."""
        return deepcopy_object(self, memo)

    @classmethod
    def for_layer(cls, layer, num_layers: int, **kwargs) -> "PagedKVPool":
        """A pool for ``num_layers`` layers shaped like ``layer`` (a config.LayerSpec)."""
        if layer.kind not in KINDS:
            raise ValueError(f"layer kind {layer.kind!r} has no paged layout; accepted: {', '.join(KINDS)}")
        return cls(num_layers, layer.num_key_value_heads, layer.head_dim, layer.v_head_dim,
                   kind=layer.kind, window=layer.window_tokens, **kwargs)

    # ------------------------------------------------------------ sequences
    def add_sequence(self, seq_id, token_ids=None) -> int:
        """Register a sequence (its prompt tokens, if known); return the tokens reused from cache."""
        hit = self.allocator.add_sequence(seq_id, token_ids)
        self._offsets[seq_id], self._written[seq_id] = [hit] * self.num_layers, [hit] * self.num_layers
        return hit

    def caches(self, seq_id) -> list["PagedKVCache"]:
        """One cache view per layer of this pool for the sequence."""
        if seq_id not in self._offsets:
            raise KeyError(f"seq_id {seq_id!r} is not in this pool")
        return [PagedKVCache(self, seq_id, layer) for layer in range(self.num_layers)]

    def fork(self, parent_id, child_id) -> list["PagedKVCache"]:
        """A child sharing every block of the parent (parallel sampling); returns its views."""
        self.allocator.fork(parent_id, child_id)
        self._offsets[child_id] = list(self._offsets[parent_id])
        self._written[child_id] = list(self._written[parent_id])
        return self.caches(child_id)

    def free(self, seq_id):
        self.allocator.free(seq_id)
        del self._offsets[seq_id], self._written[seq_id]

    def preempt(self, seq_id, mode: str | None = None):
        """Free a sequence's blocks (recompute) or copy them to host blocks first (swap)."""
        pairs = self.allocator.preempt(seq_id, mode or self.preemption)
        if pairs:
            gpu, host = (mx.array(list(x)) for x in zip(*pairs))
            for dst, src in ((self.host_keys, self.keys), (self.host_values, self.values)):
                for layer in range(self.num_layers):
                    dst[layer][host] = src[layer][gpu]
            mx.eval(self.host_keys, self.host_values)  # copy before freed blocks are reused

    def resume(self, seq_id) -> int:
        """Re-admit a preempted sequence; return the offset its layers restart from.

        Swap: the blocks come back and the offsets are unchanged. Recompute: the offsets drop to
        the tokens prefix hits cover; the caller feeds the rest again.
        """
        mode = self.allocator.preemption_mode(seq_id)
        pairs = self.allocator.resume(seq_id)
        if mode == "swap":
            if pairs:  # a sequence whose window released every block has nothing to copy
                host, gpu = (mx.array(list(x)) for x in zip(*pairs))
                for dst, src in ((self.keys, self.host_keys), (self.values, self.host_values)):
                    for layer in range(self.num_layers):
                        dst[layer][gpu] = src[layer][host]
        else:
            hit = self.allocator.num_computed(seq_id)
            self._offsets[seq_id] = [hit] * self.num_layers
            self._written[seq_id] = [hit] * self.num_layers
        return min(self._offsets[seq_id])

    # ------------------------------------------------------------ storage
    def _prepare(self, seq_id, start, stop, rewrite):
        """Make [start, stop) writable (grow, copy-on-write), preempting others if blocks run out."""
        while True:
            try:
                copies = self.allocator.prepare_write(seq_id, start, stop, rewrite=rewrite)
                break
            except OutOfBlocks:
                victim = self.allocator.pick_victim(exclude={seq_id})
                if victim is None:
                    raise
                try:
                    self.preempt(victim)
                except OutOfBlocks:  # no host room to swap into: drop the KV instead
                    self.preempt(victim, "recompute")
                self.preempted.append(victim)
        if copies:
            src, dst = (mx.array(list(x)) for x in zip(*copies))
            for arrays in (self.keys, self.values):
                for layer in range(self.num_layers):
                    arrays[layer][dst] = arrays[layer][src]

    def release_point(self, seq_id) -> int:
        """Positions before this are never read again: o_min − W + 1 (sliding), chunk start (chunked)."""
        o_min = min(self._offsets[seq_id])
        if self.kind == "sliding":
            return max(0, o_min - self.window + 1)
        if self.kind == "chunked":
            return o_min - o_min % self.window
        return 0

    @property
    def nbytes(self) -> int:
        """Every block of every layer (allocated once, whatever the sequences)."""
        return self.num_blocks * self.block_bytes

    @property
    def used_blocks(self) -> int:
        return self.allocator.num_used_blocks


class PagedKVCache(BaseCache):
    """One layer of one sequence: a view onto a :class:`PagedKVPool` (see module docstring)."""

    def __init__(self, pool: PagedKVPool, seq_id, layer: int):
        if not 0 <= layer < pool.num_layers:
            raise ValueError(f"layer must be in [0, {pool.num_layers - 1}], got {layer!r}")
        self.pool, self.seq_id, self.layer = pool, seq_id, layer
        self.block_size = pool.block_size

    @property
    def offset(self) -> int:
        return self.pool._offsets[self.seq_id][self.layer]

    def _first_kept(self) -> int:
        """First position the next update returns: the first held block after its release."""
        alloc, bs = self.pool.allocator, self.block_size
        r = self.pool.release_point(self.seq_id)
        return max(alloc.first_live_token(self.seq_id), r - r % bs)

    def update_and_fetch(self, keys, values):
        """Write S rows into their slots; return (1, H, L, D) keys/values gathered by block table."""
        if isinstance(keys, mx.array) and keys.ndim == 4 and keys.shape[0] != 1:
            raise ValueError(f"keys.shape[0] (batch) must be 1: a PagedKVCache holds one sequence, "
                             f"got {keys.shape[0]}")
        g = check_kv(keys, values, self.pool.geometry)
        pool, seq, alloc, bs = self.pool, self.seq_id, self.pool.allocator, self.block_size
        o, end = self.offset, self.offset + g["S"]
        first = self._first_kept()
        pool._prepare(seq, o, end, rewrite=o < pool._written[seq][self.layer])  # may raise: no change yet
        alloc.release_before(seq, first)
        slots = alloc.slots(seq, o, end)                                # (S,) flat slot ids
        blk, row = mx.array(slots // bs), mx.array(slots % bs)
        for arrays, new in ((pool.keys, keys), (pool.values, values)):
            arrays[self.layer][blk, :, row] = new[0].swapaxes(0, 1)    # (S, H, D) into (blocks, H, bs, D)
        pool._offsets[seq][self.layer] = pool._written[seq][self.layer] = end
        alloc.mark_computed(seq, min(pool._offsets[seq]))               # publish when all layers wrote
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
        n = self._check_trim(n)
        pool, seq = self.pool, self.seq_id
        pool._offsets[seq][self.layer] -= n
        held = pool.allocator.num_tokens(seq)
        # blocks go back once no layer is past them; a registered prompt not yet written stays
        if max(pool._written[seq]) >= held > max(pool._offsets[seq]):
            pool.allocator.trim(seq, held - max(pool._offsets[seq]))
        return n

    def key_positions(self, n: int) -> mx.array:
        return mx.arange(self._first_kept(), self.offset + n, dtype=mx.int32)

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
        pool.allocator.prepare_write(0, 0, first)
        pool.allocator.release_before(0, first)
        pool._offsets[0], pool._written[0] = [first], [first]
        cache = pool.caches(0)[0]
        if state:
            keys, values = state
            if keys.shape[2] != offset - first:
                raise ValueError(f"state holds {keys.shape[2]} tokens, meta_state implies {offset - first}")
            cache.update_and_fetch(keys, values)
        return cache
