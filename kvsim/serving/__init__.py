"""Pure serving arithmetic: the block allocator, the serving simulator, capacity tables, fragmentation.

Block allocator, one layer per module: block_pool (block states, reference counts, LRU eviction)
-> prefix_cache (block hashes) -> block_tables (sequences) -> blocks (BlockAllocator: preemption).
Admission: admission (the queue in front of the pool: wait or busy; PoolFullError).
Simulator: workload (requests) and sim (the loop), with contiguous (reservations, placed by buddy,
the paper's buddy allocator, or first fit), closed_form (sums over growth iterations) and ledger
(totals, SimResult); fragmentation compares it with Kwon et al. (2023).
No MLX, matplotlib or ipywidgets (a test checks): paged caches on MLX live in :mod:`kvsim.cache`.
"""
