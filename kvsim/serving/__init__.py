"""Pure serving arithmetic: the block allocator, the serving simulator, capacity tables, fragmentation.

No MLX, matplotlib or ipywidgets (a test checks): paged caches on MLX live in :mod:`kvsim.cache`.
"""
