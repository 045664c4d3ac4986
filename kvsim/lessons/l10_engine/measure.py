"""Lesson 10 (the engine): this lesson's MLX runs on real kvsim caches and tiny random-weight models (fp32).

Contract
- :func:`pool_timeline`: a real :class:`~kvsim.cache.pool.CachePool` holding a mix of Llama-like (toy GQA)
  and Jamba-like (toy Jamba) sequences; each allocate is followed by a real prefill. One row per event
  (allocate, an allocate on a full pool, release, allocate again), with a short label for a plot: the
  id returned, the active ids, ``next_id``, ``memory_usage_bytes()``, Σ ``cache.nbytes`` and the
  calculator's allocated view (:func:`kvsim.calc.pool_bytes.pool_allocated_bytes`) for the active
  sequences, bytes per sequence, and the message of the PoolFullError on the refused allocate.
- :func:`race_rows`: :func:`kvsim.cache.pool.interleave_allocations` as table rows, and its result.
- :func:`continuous_run`: :func:`kvsim.decode.continuous.continuous_generate` on requests arriving over
  time, each sequence then decoded alone (:func:`kvsim.decode.generate`): tokens equal? and the largest
  |Δ logit|. Cached per arguments (the models are seeded, so a run is the same every time); the decodes
  alone (:func:`decoded_alone`) cached per model kind and requests, whatever the batch size.
- :func:`owned_vs_cache_rows`: the same Jamba-like prompt decoded with recurrent state in the cache list
  (kvsim, mlx-lm) and owned by the model per SequenceId (seed 000): tokens, and where the bytes live.
- :func:`dispatch_rows`: one model object run on dense caches and on paged caches (a
  :class:`~kvsim.cache.paged.PagedKVPool` per layer) for full, sliding and chunked layers: the read path
  each cache picked behind ``cache.attend`` and the largest |Δ logit| over a prefill past the window and
  chunk plus decode steps.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from ...cache import make_caches
from ...cache.paged import paged_caches
from ...cache.pool import CachePool, PoolFullError, interleave_allocations
from ...calc.pool_bytes import pool_allocated_bytes
from ...decode import generate
from ...decode.continuous import Request, continuous_generate
from ...decode.generate import prefill
from ...model import build_model, toy_spec
from ...model.owned_state import SequenceStateStore, supports_batching

STEP = 8            # slots grow in steps of 8 tokens (tiny models: small steps show the rounding)
SEEDS = {"gqa": 1, "jamba": 2, "rg_lru": 6, "sliding": 5, "chunked": 7}
NAMES = {"gqa": "Llama-like (toy GQA)", "jamba": "Jamba-like (toy Jamba)", "rg_lru": "RecurrentGemma-like",
         "sliding": "sliding window", "chunked": "chunked attention"}
POOL_PLAN = (("gqa", 5), ("jamba", 11), ("gqa", 17), ("jamba", 3))
POOL_SLOTS = 4      # max_sequences of pool_timeline's pool: the plan fills it
# prompt tokens, new tokens, arrival step: more requests than slots, arriving while others decode
REQUESTS = (((3, 14, 15, 92), 5, 0), ((65, 35), 3, 0), ((89, 79, 32, 38, 46), 4, 1),
            ((26, 43), 6, 2), ((38, 32, 79), 3, 3), ((50, 28, 84, 19), 4, 5))


@lru_cache(maxsize=None)
def toy_model(kind: str):
    """The lesson's tiny random-weight model of ``kind`` (seeded, fp32)."""
    return build_model(toy_spec(kind), seed=SEEDS[kind])


def _prompt(n: int, start: int = 1) -> list[int]:
    return [(start + 7 * i) % 120 + 1 for i in range(n)]


def pool_timeline(plan=POOL_PLAN, release=1, then=("jamba", 7), max_sequences: int = POOL_SLOTS) -> list[dict]:
    """Allocate + prefill each (kind, tokens) of ``plan``, try once more on the full pool, release, allocate."""
    pool = CachePool(toy_model("gqa").spec, max_sequences, step=STEP)
    held: dict[int, tuple] = {}   # id -> (spec, tokens)
    rows = []

    def row(event, seq_id, label, error=""):
        calc = pool_allocated_bytes(list(held.values()), "fp32", STEP, "fp32")["pool"]
        per = {sid: pool.sequence_bytes(sid) for sid in pool.active_ids()}
        rows.append({"event": event, "label": label, "id": seq_id, "active": list(pool.active_ids()), "next_id": pool.next_id,
                     "memory_usage_bytes": pool.memory_usage_bytes(),
                     "Σ nbytes": sum(c.nbytes for s in pool.active_ids() for c in pool.caches(s) if c is not None),
                     "calculator": calc, "per_sequence": per, "error": error})

    def allocate(kind, tokens):
        model = toy_model(kind)
        sid = pool.allocate(tokens, spec=model.spec)
        prefill(model, _prompt(tokens, sid), pool.caches(sid))    # a real forward pass fills the caches
        held[sid] = (model.spec, tokens)
        row(f"allocate {kind} {tokens}", sid, f"allocate → {sid}\n{kind} {tokens} tok")

    for kind, tokens in plan:
        allocate(kind, tokens)
    try:
        pool.allocate(1)
    except PoolFullError as err:
        row("allocate: PoolFullError", None, "allocate\nPoolFullError", str(err))
    pool.release(release)
    del held[release]
    row(f"release {release}", release, f"release {release}")
    allocate(*then)
    return rows


def race_rows(schedule: str = "ABABAB", locked: bool = False):
    """(rows, result) of two callers allocating on one CachePool in ``schedule`` order."""
    result = interleave_allocations(CachePool(toy_model("gqa").spec, 4), schedule, locked=locked)
    rows = [{"tick": s.tick, "caller": s.caller, "action": s.action, "next_id": s.next_id,
             "active ids": list(s.active)} for s in result.steps]
    return rows, result


@lru_cache(maxsize=8)
def decoded_alone(kind: str = "gqa", requests=REQUESTS) -> list:
    """Each of ``requests`` decoded alone on the toy ``kind`` (no batch): what a batched run must reproduce.
    Memoized: the same for every batch size."""
    model = toy_model(kind)
    return [generate(model, list(prompt), new) for prompt, new, _ in requests]


@lru_cache(maxsize=16)
def continuous_run(kind: str = "gqa", max_batch: int = 2, requests=REQUESTS, state_owner: str = "cache") -> dict:
    """Continuous batching of ``requests`` on the toy ``kind``; every sequence checked against decoding it alone."""
    model = toy_model(kind)
    store = SequenceStateStore(model.spec) if state_owner == "model" else None
    gens, schedule = continuous_generate(model, requests, max_batch=max_batch, state_store=store)
    equal, diffs = [], []
    for ref, gen in zip(decoded_alone(kind, requests), gens):
        equal.append(gen.tokens == ref.tokens)
        diffs.append(mx.abs(gen.logits - ref.logits).max().item())
    return {"kind": kind, "schedule": schedule, "tokens": [g.tokens for g in gens], "equal_alone": equal,
            "all_equal": all(equal),
            "max_abs_diff": max(diffs), "supports_batching": supports_batching(model.spec)}


def owned_vs_cache_rows(prompt=(4, 8, 15, 16, 23, 42), new_tokens: int = 6) -> list[dict]:
    """The Jamba-like toy decoded twice: state in the cache list vs state owned by the model per SequenceId."""
    model = toy_model("jamba")
    rows = []
    for owner in ("cache", "model"):
        pool = CachePool(model.spec, 2, step=STEP, state_owner=owner)
        sid = pool.allocate(len(prompt))
        caches = pool.caches(sid)
        store = None
        if owner == "model":
            store = SequenceStateStore(model.spec)
            store.prepare_sequence_state(sid)
            caches = store.caches_for(sid, caches)
        gen = generate(model, list(prompt), new_tokens, caches=caches)
        model_bytes = store.memory_usage_bytes() if store else 0
        rows.append({"state owner": owner, "tokens": gen.tokens, "pool offset": pool.info(sid).offset,
                     "pool bytes": pool.memory_usage_bytes(), "model bytes": model_bytes,
                     "total bytes": pool.memory_usage_bytes() + model_bytes})
    return rows


BLOCK_SIZE = 4  # tokens per page of the paged caches in dispatch_rows


def dispatch_rows(kinds=("gqa", "sliding", "chunked"), prompt_tokens: int = 20, decode_steps: int = 11) -> list[dict]:
    """Same model object, dense vs paged storage: read paths and the largest |Δ logit| over every step."""
    rows = []
    for kind in kinds:
        model = toy_model(kind)
        dense, paged = make_caches(model.spec, step=STEP), paged_caches(model.spec, BLOCK_SIZE)
        tokens = _prompt(prompt_tokens, 3)
        steps = [mx.array([tokens])] + [mx.array([[t]]) for t in _prompt(decode_steps, 40)]
        diff = 0.0
        for x in steps:                                  # prefill past the window / chunk, then decode
            diff = max(diff, mx.abs(model(x, dense) - model(x, paged)).max().item())
        layer = model.spec.layers[0]
        rows.append({"layer kind": kind, "window / chunk": layer.sliding_window or layer.attention_chunk_size or "-",
                     "dense cache": type(dense[0]).__name__, "dense path": dense[0].attention_path,
                     "paged cache": type(paged[0]).__name__, "paged path": paged[0].attention_path,
                     "block size": BLOCK_SIZE, "prefill tokens": prompt_tokens, "decode steps": decode_steps,
                     "max |Δ logit|": diff})
    return rows
