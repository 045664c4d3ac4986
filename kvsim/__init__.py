"""kvsim: an educational simulator and calculator of the LLM KV cache.

Layers flow one way: config -> memory (pure arithmetic) -> cache (MLX) -> model/decode
-> sim -> plots / widgets -> notebooks. Shapes use B (batch), H (KV heads), T (tokens),
D (head_dim). Importing ``kvsim`` itself loads no MLX.
"""

__version__ = "0.1.0"
