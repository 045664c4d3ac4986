"""Batched decode through a CachePool: several sequences, one forward pass per step.

Contract
- :func:`batched_generate` allocates one cache set per prompt in a
  :class:`~kvsim.cache.pool.CachePool`, prefills each prompt alone (prompts differ in length),
  then decodes all unfinished sequences together: per step ONE forward pass over a (B, 1) batch,
  projections and FFN batched, each row reading and writing only its own caches
  (:class:`~kvsim.model.Rows`: RoPE at the row's own offset, its own mask and state).
- Row isolation: every sequence's tokens equal, and its logits are allclose to, decoding it alone.
- Sequences are released from the pool when done; each gets a :class:`~.generate.Generation`
  whose trace shares the batched step times.
"""

from __future__ import annotations

import time

import mlx.core as mx

from ..cache.pool import CachePool
from ..calc.units import DEFAULT_STEP
from ..model import Rows
from .generate import (
    Generation,
    StepTrace,
    cache_dtypes,
    pick_token,
    prefill,
    prompt_list,
    snapshot_bytes,
)

__all__ = ["batched_generate"]


def batched_generate(model, prompts, max_new_tokens, pool=None, *, kv_dtype: str | None = None,
                     step: int = DEFAULT_STEP) -> list[Generation]:
    """Decode several sequences of different lengths together through a CachePool.

    Each prompt gets its own cache set (``pool.allocate``) and is prefilled alone; every later step
    is ONE forward pass over all unfinished sequences, each row reading and writing only its own
    caches (:class:`~kvsim.model.Rows`). ``max_new_tokens`` is an int or one int per prompt.
    Sequences are released from the pool when done.
    """
    prompts = [prompt_list(p, model.spec.vocab_size) for p in prompts]
    wants = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    if len(wants) != len(prompts) or not all(isinstance(w, int) and w >= 1 for w in wants):
        raise ValueError("max_new_tokens must be a positive int or one positive int per prompt")
    written, state_dtype = cache_dtypes(model, kv_dtype)
    if pool is None:
        pool = CachePool(model.spec, len(prompts), kv_dtype=kv_dtype, step=step, dtype=state_dtype)
    ids = [pool.allocate(len(p)) for p in prompts]
    results = [_prefill_alone(model, p, pool.caches(sid), written) for p, sid in zip(prompts, ids)]
    for step_i in range(1, max(wants)):
        active = [i for i, w in enumerate(wants) if len(results[i].tokens) < w]
        if not active:
            break
        _decode_together(model, [results[i] for i in active], [pool.caches(ids[i]) for i in active],
                         written, step_i)
    for res, sid in zip(results, ids):
        res.logits = mx.stack(res.logits)
        pool.release(sid)
    return results


def _prefill_alone(model, prompt: list[int], caches, written) -> Generation:
    """One sequence's prefill on its own caches; the Generation holds its first token."""
    start = time.perf_counter()
    logits = prefill(model, prompt, caches, written)
    mx.eval(logits)
    res = Generation(prompt, [pick_token(logits)], [logits], len(prompt), True, [], caches)
    _trace(res, caches, 0, len(prompt), time.perf_counter() - start)
    return res


def _decode_together(model, results: list[Generation], cache_sets: list, written, step_i: int) -> None:
    """ONE forward pass over the last token of every sequence, row r on its own caches.

    ``step_i`` is the batch's step; each sequence's trace records its own step (continuous batching
    lets sequences join later).
    """
    start = time.perf_counter()
    tokens = mx.array([[res.tokens[-1]] for res in results])                    # (B, 1)
    rows = [Rows([caches[layer] for caches in cache_sets]) for layer in range(len(model.blocks))]
    logits = model(tokens, rows, written)[:, -1]                                 # (B, vocab)
    mx.eval(logits)
    seconds = time.perf_counter() - start
    for r, (res, caches) in enumerate(zip(results, cache_sets)):
        res.tokens.append(pick_token(logits[r]))
        res.logits.append(logits[r])
        res.positions_fed += 1
        own = len(res.tokens) - 1   # this sequence's own step (= step_i when all started together)
        _trace(res, caches, own, len(res.prompt) + own, seconds)


def _trace(res: Generation, caches, step: int, context: int, seconds: float) -> None:
    nb, used = snapshot_bytes(caches, len(caches))
    res.trace.append(StepTrace(step, 1 if step else len(res.prompt), context, nb, used, seconds))
