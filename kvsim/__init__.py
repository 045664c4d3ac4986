"""kvsim: an educational simulator and calculator of the LLM KV cache.

The folder list is the architecture. Layers import downward only (tests/test_layering.py checks it,
and that nothing imports in a circle)::

    widgets   sliders: a computation from calc/measure + a drawing from plots (no MLX here)
       |  \\
       |   plots      drawing only (matplotlib): takes computed numbers and an Axes
    measure   the MLX measurements lessons show: real caches, models and decode runs
       |
    decode    generate, speculative, batched
       |
    model     the MLX transformer: attention, MLA, recurrent mixers
       |
    cache     MLX caches, one module per layout; the pool; save/load; attention kernels (sdpa)
       |
    serving   pure: block allocator, serving simulator, capacity tables
       |
    calc      pure sizing: config parsing, the memory formula and its views, units, weights, hardware

``cli`` (``python -m kvsim``) uses calc and serving. calc and serving load no MLX, matplotlib or
ipywidgets, so ``import kvsim`` and the calculator stay light.

Shapes use B (batch), H (KV heads), T (tokens), D (head_dim); a cache holds (B, H, T, D).
"""

__version__ = "0.1.0"
