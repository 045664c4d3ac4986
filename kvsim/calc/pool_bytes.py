"""What a CachePool of mixed sequences should hold, from the calculator alone (pure).

Contract
- :func:`pool_allocated_bytes`: for sequences given as (spec, tokens) pairs, the calculator's
  allocated view summed over them: K/V slots grown in steps of ``step``
  (:func:`kvsim.calc.memory.allocated_bytes`) plus each sequence's fixed recurrent state
  (:func:`kvsim.calc.memory.fixed_state_bytes`). Split by owner: with ``state_owner="cache"``
  (kvsim, mlx-lm) the pool holds both; with ``"model"`` (seed 000's Jamba/Mamba/RWKV) the pool
  holds the K/V and the model holds the state. ``total`` is the same either way.
  :meth:`kvsim.cache.pool.CachePool.memory_usage_bytes` equals ``pool`` (tests/test_pool_seed.py).
"""

from __future__ import annotations

from .config import ModelSpec
from .memory import allocated_bytes, fixed_state_bytes
from .units import DEFAULT_STEP

STATE_OWNERS = ("cache", "model")


def pool_allocated_bytes(sequences, kv_dtype: str = "bf16", step: int = DEFAULT_STEP, model_dtype: str = "bf16",
                         state_owner: str = "cache") -> dict:
    """{kv, state, pool, model, total} bytes: Σ_seq allocated_bytes(spec, T) and Σ_seq fixed_state_bytes(spec)."""
    if state_owner not in STATE_OWNERS:
        raise ValueError(f"state_owner must be one of {', '.join(STATE_OWNERS)}, got {state_owner!r}")
    kv = state = 0
    for spec, tokens in sequences:
        if not isinstance(spec, ModelSpec):
            raise ValueError(f"each sequence must be (ModelSpec, tokens), got {type(spec).__name__}")
        kv += int(allocated_bytes(spec, tokens, 1, kv_dtype, step=step))
        state += fixed_state_bytes(spec, 1, model_dtype=model_dtype)
    in_pool = kv + state if state_owner == "cache" else kv
    return {"kv": kv, "state": state, "pool": in_pool, "model": kv + state - in_pool, "total": kv + state}
