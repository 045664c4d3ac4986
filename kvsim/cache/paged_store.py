"""PagedKVStore: the K/V blocks of one layer group, their allocator, and per-layer offsets of each sequence.

Contract
- Stores one layer group (layers of one kind and shape): per layer, K and V arrays of shape
  ``(num_blocks, n_kv_heads, block_size, head_dim)`` and ONE
  :class:`~kvsim.serving.blocks.BlockAllocator` for the group, so a sequence has one block table
  for all its layers (as in vLLM) and each layer its own offset. ``num_blocks = ⌊budget_bytes /
  block_bytes⌋`` with ``block_bytes = layers · block_size · n_kv · (d_k + d_v) · dtype bytes``.
  Heads come before tokens inside a block (the layout of vLLM's original PagedAttention kernel):
  each (block, head) is then a contiguous (block_size, head_dim) matrix that ``mx.gather_mm`` can
  multiply in place; with tokens first, every decode step would copy the blocks first.
- Per sequence and layer: :meth:`~PagedKVStore.offset` (positions written), :meth:`~PagedKVStore.write`
  (store rows at the offset, return the positions the layer can read), :meth:`~PagedKVStore.rewind`
  (move the offset back) and :meth:`~PagedKVStore.start_at` (an empty sequence restored past a
  window). :class:`~kvsim.cache.paged.PagedKVCache` is a view that uses only these and the
  allocator's read-only methods.
- Windows: a ``sliding`` store (W) releases, before each write, the blocks whose positions all lie
  before ``o_min − W + 1``; a ``chunked`` store (C) those before the chunk start of ``o_min``
  (o_min = lowest layer offset, so no layer loses a key it still needs). Steady state: ⌈W / bs⌉ + 1
  blocks (the +1 of a window that does not start on a block boundary), one more for a moment
  while a new block is taken.
- Sharing: ``add_sequence(seq_id, token_ids)`` reuses published prompt blocks; layers start at the
  hit offset. A block is published once every layer has written it. Writes never touch a block
  another table lists: copy-on-write copies it in every layer.
- Pressure: the allocator evicts cached prefix blocks (LRU); if a write is still short, the store
  preempts the most recently admitted other sequence (``preemption`` = "recompute", or "swap" into
  host blocks) and appends its id to ``preempted``. A write that could never fit raises
  RequestTooLarge. Bad input raises a one-line ValueError (unknown ids: KeyError) before any change.
"""

from __future__ import annotations

import mlx.core as mx

from ..calc.config import Kind
from ..calc.units import DEFAULT_BLOCK_SIZE
from ..serving.block_pool import OutOfBlocks, checked_count
from ..serving.blocks import PREEMPTION_MODES, BlockAllocator
from .base import check_kv


def _check_layout(kind, window, preemption):
    if kind not in Kind.KV_HEADS:
        raise ValueError(f"kind must be one of {', '.join(Kind.KV_HEADS)}, got {kind!r}")
    if (kind == "full") != (window is None):
        raise ValueError(f"window must be None for kind 'full' and a positive integer for "
                         f"sliding/chunked, got {window!r} for {kind!r}")
    if preemption not in PREEMPTION_MODES:
        raise ValueError(f"preemption must be 'recompute' or 'swap', got {preemption!r}")


class PagedKVStore:
    """Blocks of K/V for ``num_layers`` layers of one kind, shared by many sequences."""

    def __init__(self, num_layers: int, num_key_value_heads: int, head_dim: int,
                 v_head_dim: int | None = None, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 num_blocks: int | None = None, budget_bytes: int | None = None,
                 dtype=mx.float16, kind: str = "full", window: int | None = None,
                 enable_prefix_caching: bool = True, num_host_blocks: int = 0,
                 preemption: str = "recompute"):
        self.num_layers = checked_count("num_layers", num_layers)
        H, D = checked_count("num_key_value_heads", num_key_value_heads), checked_count("head_dim", head_dim)
        Dv = D if v_head_dim is None else checked_count("v_head_dim", v_head_dim)
        self.block_size = checked_count("block_size", block_size)
        _check_layout(kind, window, preemption)
        num_host_blocks = checked_count("num_host_blocks", num_host_blocks, 0)
        self.kind, self.window, self.preemption, self.dtype = kind, window, preemption, dtype
        self.token_bytes = H * (D + Dv) * dtype.size          # one token, one layer
        self.layer_block_bytes = self.block_size * self.token_bytes
        self.block_bytes = self.num_layers * self.layer_block_bytes
        self.num_blocks = self._count_blocks(num_blocks, budget_bytes)
        self.geometry = {"B": 1, "H": H, "S": 0, "k_dim": D, "v_dim": Dv, "dtype": dtype}
        self.keys, self.values = self._zeros(self.num_blocks, D), self._zeros(self.num_blocks, Dv)
        self.host_keys, self.host_values = self._zeros(num_host_blocks, D), self._zeros(num_host_blocks, Dv)
        self.allocator = BlockAllocator(self.num_blocks, self.block_size, enable_prefix_caching,
                                        num_host_blocks)
        self._offsets: dict = {}   # seq -> per-layer offset
        self._written: dict = {}   # seq -> per-layer end of the last write (rewind detection)
        self.preempted: list = []  # ids preempted to make room, oldest first

    def _count_blocks(self, num_blocks, budget_bytes) -> int:
        if (num_blocks is None) == (budget_bytes is None):
            raise ValueError("give exactly one of num_blocks or budget_bytes")
        if num_blocks is None:
            num_blocks = int(budget_bytes) // self.block_bytes
            if num_blocks < 1:
                raise ValueError(f"budget_bytes {budget_bytes} is smaller than one block "
                                 f"({self.block_bytes} bytes over {self.num_layers} layers)")
        return checked_count("num_blocks", num_blocks)

    def _zeros(self, blocks: int, dim: int) -> list:
        """One (blocks, H, block_size, dim) array per layer; none when there are no blocks (host)."""
        shape = (blocks, self.geometry["H"], self.block_size, dim)
        return [mx.zeros(shape, self.dtype) for _ in range(self.num_layers)] if blocks else []

    @classmethod
    def for_layer(cls, layer, num_layers: int, **kwargs):
        """A store for ``num_layers`` layers shaped like ``layer`` (a config.LayerSpec)."""
        if not layer.has_kv_heads:
            raise ValueError(f"layer kind {layer.kind!r} has no paged layout; accepted: {', '.join(Kind.KV_HEADS)}")
        return cls(num_layers, layer.num_key_value_heads, layer.head_dim, layer.v_head_dim,
                   kind=layer.kind, window=layer.window_tokens, **kwargs)

    # ------------------------------------------------------------ sequences
    def __contains__(self, seq_id) -> bool:
        """Whether the sequence is registered (running or preempted)."""
        return seq_id in self._offsets

    def add_sequence(self, seq_id, token_ids=None) -> int:
        """Register a sequence (its prompt tokens, if known); return the tokens reused from cache."""
        hit = self.allocator.add_sequence(seq_id, token_ids)
        self._offsets[seq_id], self._written[seq_id] = [hit] * self.num_layers, [hit] * self.num_layers
        return hit

    def fork(self, parent_id, child_id):
        """A child sharing every block of the parent (parallel sampling), each layer at its offset."""
        self.allocator.fork(parent_id, child_id)
        self._offsets[child_id] = list(self._offsets[parent_id])
        self._written[child_id] = list(self._written[parent_id])

    def free(self, seq_id):
        self.allocator.free(seq_id)
        del self._offsets[seq_id], self._written[seq_id]

    def preempt(self, seq_id, mode: str | None = None):
        """Free a sequence's blocks (recompute) or copy them to host blocks first (swap)."""
        pairs = self.allocator.preempt(seq_id, mode or self.preemption)
        if pairs:
            self._copy_blocks(pairs, (self.keys, self.values), (self.host_keys, self.host_values))
            mx.eval(self.host_keys, self.host_values)  # copy before freed blocks are reused

    def resume(self, seq_id) -> int:
        """Re-admit a preempted sequence; return the offset its layers restart from.

        Swap: the blocks come back and the offsets are unchanged. Recompute: the offsets drop to
        the tokens prefix hits cover; the caller feeds the rest again.
        """
        mode = self.allocator.preemption_mode(seq_id)
        pairs = self.allocator.resume(seq_id)
        if mode == "swap":  # a sequence whose window released every block has nothing to copy
            self._copy_blocks(pairs, (self.host_keys, self.host_values), (self.keys, self.values))
        else:
            hit = self.allocator.num_computed(seq_id)
            self._offsets[seq_id] = [hit] * self.num_layers
            self._written[seq_id] = [hit] * self.num_layers
        return min(self._offsets[seq_id])

    def _copy_blocks(self, pairs, sources, targets):
        """target[layer][dst] = source[layer][src] for each (src, dst) pair, array pair and layer."""
        if not pairs:
            return
        src, dst = (mx.array(list(x)) for x in zip(*pairs))
        for source, target in zip(sources, targets):
            for layer in range(self.num_layers):
                target[layer][dst] = source[layer][src]

    # ------------------------------------------------------------ one layer of one sequence
    def _layer_offsets(self, seq_id) -> list:
        if seq_id not in self._offsets:
            raise KeyError(f"seq_id {seq_id!r} is not in this pool")
        return self._offsets[seq_id]

    def _check_layer(self, layer):
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers - 1}], got {layer!r}")

    def offset(self, seq_id, layer: int) -> int:
        """Positions this layer of the sequence has written: the position its next row takes."""
        self._check_layer(layer)
        return self._layer_offsets(seq_id)[layer]

    def first_kept(self, seq_id) -> int:
        """First position a write returns now: the first held block after the window's release."""
        r = self.release_point(seq_id)
        return max(self.allocator.first_live_token(seq_id), r - r % self.block_size)

    def release_point(self, seq_id) -> int:
        """Positions before this are never read again: o_min − W + 1 (sliding), chunk start (chunked)."""
        o_min = min(self._layer_offsets(seq_id))
        if self.kind == "sliding":
            return max(0, o_min - self.window + 1)
        if self.kind == "chunked":
            return o_min - o_min % self.window
        return 0

    def write(self, seq_id, layer: int, keys, values) -> tuple[int, int]:
        """Store (1, H, S, D) rows at positions [o, o + S) of one layer; return (first, o + S) it can read.

        o = offset(seq_id, layer). Blocks wholly before ``first`` (:meth:`first_kept`) go back to
        the pool; writing below the layer's last write end rewinds the known tokens from o.
        """
        self._check_layer(layer)
        start = self._layer_offsets(seq_id)[layer]
        if isinstance(keys, mx.array) and keys.ndim == 4 and keys.shape[0] != 1:
            raise ValueError(f"keys.shape[0] (batch) must be 1: a PagedKVCache holds one sequence, "
                             f"got {keys.shape[0]}")
        end = start + check_kv(keys, values, self.geometry)["S"]
        first = self.first_kept(seq_id)
        self._prepare(seq_id, start, end, rewrite=start < self._written[seq_id][layer])  # may raise: no change yet
        self.allocator.release_before(seq_id, first)
        slots = self.allocator.slots(seq_id, start, end)                # (S,) flat slot ids
        blk, row = mx.array(slots // self.block_size), mx.array(slots % self.block_size)
        for arrays, new in ((self.keys, keys), (self.values, values)):
            arrays[layer][blk, :, row] = new[0].swapaxes(0, 1)         # (S, H, D) into (blocks, H, bs, D)
        self._offsets[seq_id][layer] = self._written[seq_id][layer] = end
        self.allocator.mark_computed(seq_id, min(self._offsets[seq_id]))  # publish when all layers wrote
        return first, end

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
        self._copy_blocks(copies, (self.keys, self.values), (self.keys, self.values))

    def rewind(self, seq_id, layer: int, tokens: int) -> int:
        """Move one layer's offset back by ``tokens``; blocks past every layer's offset return to the pool."""
        self._check_layer(layer)
        offsets = self._layer_offsets(seq_id)
        first = self.allocator.first_live_token(seq_id)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 <= tokens <= offsets[layer] - first:
            raise ValueError(f"tokens must be an integer in [0, {offsets[layer] - first}] (positions from "
                             f"{first} are held), got {tokens!r}")
        offsets[layer] -= tokens
        held = self.allocator.num_tokens(seq_id)
        # blocks go back once no layer is past them; a registered prompt not yet written stays
        if max(self._written[seq_id]) >= held > max(offsets):
            self.allocator.trim(seq_id, held - max(offsets))
        return tokens

    def start_at(self, seq_id, position: int):
        """Put every layer of a sequence that holds no tokens yet at ``position``, earlier blocks released.

        A window cache restored from a file holds only its last positions: they start here.
        """
        offsets = self._layer_offsets(seq_id)
        position = checked_count("position", position, 0)
        if self.allocator.num_tokens(seq_id) or max(offsets):
            raise ValueError(f"start_at needs a sequence that holds no tokens yet; {seq_id!r} holds "
                             f"{self.allocator.num_tokens(seq_id)}")
        self.allocator.prepare_write(seq_id, 0, position)  # raises before any change
        self.allocator.release_before(seq_id, position)
        self._offsets[seq_id] = [position] * self.num_layers
        self._written[seq_id] = [position] * self.num_layers

    # ------------------------------------------------------------ accounting
    @property
    def nbytes(self) -> int:
        """Every block of every layer (allocated once, whatever the sequences)."""
        return self.num_blocks * self.block_bytes

    @property
    def used_blocks(self) -> int:
        return self.allocator.num_used_blocks
