"""Bytes one decode step reads and copies over a paged cache, per read path, and when cascade pays.

Contract (pure: integers in, integers out)
- ``layer_block_bytes`` = block_size · n_kv_heads · (head_dim + v_head_dim) · dtype bytes: one
  block of one layer (K and V), as :class:`kvsim.cache.paged.PagedKVPool` allocates it.
- :func:`read_step_bytes` for one layer and one sequence over ``pages`` blocks:
  * ``gather``: the blocks are copied by block table into a contiguous (H, pages·bs, D) K and V
    (``copied_bytes`` = pages · layer_block_bytes written), and attention then reads the copy:
    ``read_bytes`` = 2 · pages · layer_block_bytes (the pool once to copy, the copy once to attend);
  * ``block_table``: attention reads each block where it lies (``mx.gather_mm`` on the pool, or one
    block at a time): read = pages · layer_block_bytes, copied = 0.
  Sparse page indirection is ``block_table`` over the kept pages only (:func:`sparse_read_bytes`);
  :func:`sparse_pays` is the seed's ``MLXCEL_SPARSE_PAGED_MIN_SPARSITY`` gate (the sparse path
  only when at least that fraction of pages is skipped; the seed gives no value, so the caller does).
- Cascade (:func:`cascade_step_bytes`): B sequences sharing P prefix tokens, suffixes S_b:
  dense reads Σ_b (P + S_b) tokens, cascade reads P + Σ_b S_b; ``token_bytes`` per layer.
- :func:`cascade_pays` is the seed's gate (``MLXCEL_CASCADE_MIN_MEMBERS``,
  ``MLXCEL_CASCADE_MIN_SHARED_PAGES``): a group takes the cascade path only with at least
  ``min_members`` sequences and ``min_shared_pages`` whole shared pages. The seed names these knobs
  but not their values; kvsim's defaults come from :func:`cascade_break_even_pages`: cascade saves
  (B − 1) · P · token_bytes per layer and costs one more partial per row, written and read back in
  float32 (2 · B · H_q · L · (D_v + 1) · 4 bytes: output and log-sum-exp), so it pays from
  P > that cost / ((B − 1) · token_bytes), rounded up to whole pages; one member never pays.
- Bad input: ValueError naming the field and the accepted range.
"""

from __future__ import annotations

from .units import positive_int, nonnegative_int

__all__ = ["READ_PATHS", "layer_block_bytes", "read_step_bytes", "sparse_read_bytes", "cascade_step_bytes",
           "cascade_pays", "cascade_break_even_pages", "sparse_pays", "CASCADE_MIN_MEMBERS", "CASCADE_MIN_SHARED_PAGES",
           "PARTIAL_BYTES"]

READ_PATHS = ("gather", "block_table")
CASCADE_MIN_MEMBERS = 2        # kvsim's default: a group of one shares nothing
CASCADE_MIN_SHARED_PAGES = 2   # kvsim's default: the break-even at Llama-3-8B sizes (bf16, 16-token pages), any B >= 2
PARTIAL_BYTES = 4              # a partial's output and log-sum-exp are float32


def layer_block_bytes(block_size: int, num_key_value_heads: int, head_dim: int, v_head_dim: int | None,
                      dtype_bytes: int) -> int:
    """Bytes of one block of one layer: block_size · n_kv · (d_k + d_v) · dtype bytes."""
    v = head_dim if v_head_dim is None else v_head_dim
    return (positive_int("block_size", block_size) * positive_int("num_key_value_heads", num_key_value_heads)
            * (positive_int("head_dim", head_dim) + positive_int("v_head_dim", v))
            * positive_int("dtype_bytes", dtype_bytes))


def read_step_bytes(path: str, pages: int, block_bytes: int) -> dict:
    """{'read_bytes', 'copied_bytes'} of one layer's attention over ``pages`` blocks by ``path``.

    gather: read 2·pages·block_bytes, copied pages·block_bytes; block_table: read pages·block_bytes, copied 0.
    """
    if path not in READ_PATHS:
        raise ValueError(f"path must be one of {', '.join(READ_PATHS)}, got {path!r}")
    pages, block_bytes = nonnegative_int("pages", pages), positive_int("block_bytes", block_bytes)
    if path == "gather":
        return {"read_bytes": 2 * pages * block_bytes, "copied_bytes": pages * block_bytes}
    return {"read_bytes": pages * block_bytes, "copied_bytes": 0}


def sparse_read_bytes(kept_pages: int, total_pages: int, block_bytes: int) -> dict:
    """Bytes read through the block table over ``kept_pages`` of ``total_pages``: kept · block_bytes."""
    total = nonnegative_int("total_pages", total_pages)
    kept = nonnegative_int("kept_pages", kept_pages)
    if kept > total:
        raise ValueError(f"kept_pages must be in [0, total_pages = {total}], got {kept}")
    return {"read_bytes": kept * positive_int("block_bytes", block_bytes), "copied_bytes": 0,
            "kept_fraction": kept / total if total else 0.0}


def sparse_pays(kept_pages: int, total_pages: int, min_sparsity: float) -> bool:
    """The sparse gate: sparsity = 1 − kept / total ≥ min_sparsity (min_sparsity in [0, 1])."""
    total = positive_int("total_pages", total_pages)
    kept = nonnegative_int("kept_pages", kept_pages)
    if kept > total:
        raise ValueError(f"kept_pages must be in [0, total_pages = {total}], got {kept}")
    if not isinstance(min_sparsity, (int, float)) or isinstance(min_sparsity, bool) or not 0 <= min_sparsity <= 1:
        raise ValueError(f"min_sparsity must be a number in [0, 1], got {min_sparsity!r}")
    return 1 - kept / total >= min_sparsity


def cascade_step_bytes(prefix_tokens: int, suffix_tokens, token_bytes: int) -> dict:
    """{'dense_bytes': Σ_b (P + S_b)·tb, 'cascade_bytes': (P + Σ_b S_b)·tb} for one layer's K/V reads."""
    P, tb = nonnegative_int("prefix_tokens", prefix_tokens), positive_int("token_bytes", token_bytes)
    S = [nonnegative_int("suffix_tokens[b]", s) for s in suffix_tokens]
    if not S:
        raise ValueError("suffix_tokens must list one length per sequence (at least one), got none")
    return {"dense_bytes": sum(P + s for s in S) * tb, "cascade_bytes": (P + sum(S)) * tb}


def cascade_break_even_pages(members: int, block_size: int, token_bytes: int, num_attention_heads: int,
                             v_head_dim: int, query_tokens: int = 1) -> int | None:
    """Fewest whole shared pages for which cascade reads fewer bytes than dense (None: never, B = 1).

    Saved (B − 1)·P·tb must exceed the extra partial 2·B·H_q·L·(D_v + 1)·4 bytes: P > cost / ((B − 1)·tb).
    """
    B = positive_int("members", members)
    if B == 1:
        return None
    cost = 2 * B * positive_int("num_attention_heads", num_attention_heads) * positive_int(
        "query_tokens", query_tokens) * (positive_int("v_head_dim", v_head_dim) + 1) * PARTIAL_BYTES
    tokens = cost // ((B - 1) * positive_int("token_bytes", token_bytes)) + 1      # strictly more saved
    bs = positive_int("block_size", block_size)
    return -(-tokens // bs)


def cascade_pays(members: int, shared_pages: int, min_members: int = CASCADE_MIN_MEMBERS,
                 min_shared_pages: int = CASCADE_MIN_SHARED_PAGES) -> bool:
    """The seed's gate: members ≥ min_members and whole shared pages ≥ min_shared_pages."""
    return (positive_int("members", members) >= positive_int("min_members", min_members)
            and nonnegative_int("shared_pages", shared_pages) >= positive_int("min_shared_pages", min_shared_pages))
