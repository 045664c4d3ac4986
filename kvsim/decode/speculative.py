"""Greedy speculative decoding: a draft proposes k tokens, the target verifies them in one pass.

Contract
- :func:`speculative_generate(target, draft, prompt, max_new_tokens, num_draft=4)`: per round the
  draft proposes d_1..d_k one token at a time; the target is fed [last, d_1..d_k] in ONE forward
  pass and accepts the longest prefix where d_{i+1} equals its own greedy token t_i, then emits
  t_n (correction or bonus token). The output is token-for-token plain greedy decoding of the target.
- Rewinding past the first rejection, per cache: KVCache / LatentCache / QuantizedKVCache (no
  window) and RotatingKVCache (built with ``rewind_tokens = k + 1``) are trimmed. A recurrent state
  cannot be trimmed: it is snapshotted before the round and restored (mlx-lm cannot, issue #1446).
  A windowed cache about to overwrite rows a rewind would need (a ChunkedKVCache crossing a chunk
  boundary, a windowed QuantizedKVCache) is copied before the round and put back. After a restore
  the other caches are trimmed back to the round's start and the accepted tokens are fed again.
- :class:`Speculation` reports proposed / accepted tokens (acceptance rate), rounds (target
  verification passes) and the target's token positions fed.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ..cache import ChunkedKVCache, QuantizedKVCache, RecurrentStateCache, make_caches
from ..calc.units import DEFAULT_STEP
from .generate import cache_dtypes, prompt_list

__all__ = ["Speculation", "speculative_generate"]


@dataclass
class Speculation:
    """What :func:`speculative_generate` returns."""

    tokens: list[int]
    proposed: int                    # draft tokens proposed
    accepted: int                    # of those, tokens the target agreed with
    rounds: int                      # target verification passes
    target_positions_fed: int        # incl. positions re-fed after a recurrent restore

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def _copy(cache):
    """An independent copy of a cache (through its state, arrays copied)."""
    def dup(a):
        return tuple(dup(x) for x in a) if isinstance(a, (tuple, list)) else mx.array(a)
    state = dup(cache.state)
    mx.eval(state)
    return type(cache).from_state(state, cache.meta_state)


def _may_overwrite(cache, m: int) -> bool:
    """Would storing m more tokens overwrite rows that rewinding those m tokens needs back?"""
    if isinstance(cache, ChunkedKVCache):                  # the buffer keeps only the newest chunk
        return cache.chunk_start(cache.offset + m - 1) > cache.offset
    if isinstance(cache, QuantizedKVCache):
        return cache.max_size is not None
    return False


def _snapshot(caches, m: int) -> list:
    """Before feeding m tokens: recurrent snapshots, copies of caches that may overwrite, else None."""
    snaps = []
    for c in caches:
        if isinstance(c, RecurrentStateCache):
            snaps.append(c.snapshot())
        else:
            snaps.append(_copy(c) if c is not None and _may_overwrite(c, m) else None)
    return snaps


def _rewind(model, caches: list, snaps: list, fed: list[int], keep: int, kv_dtype) -> int:
    """Caches saw ``fed`` since ``snaps``; keep its first ``keep`` tokens. Returns positions re-fed.

    Without snapshots every cache is trimmed by ``len(fed) - keep``. Otherwise the snapshots are
    restored, the other caches trimmed back to the round's start, and the kept tokens fed again.
    """
    drop = len(fed) - keep
    if drop == 0:
        return 0
    restore = any(s is not None for s in snaps)
    need = len(fed) if restore else drop
    for i, (c, snap) in enumerate(zip(caches, snaps)):    # check first: fail before changing anything
        if c is not None and snap is None and c.trimmable_tokens < need:
            raise ValueError(f"layer {i}'s cache can rewind only {c.trimmable_tokens} tokens, "
                             f"speculation needs {need}; build caches with rewind_tokens >= {need}")
    for i, (c, snap) in enumerate(zip(caches, snaps)):
        if isinstance(c, RecurrentStateCache):
            c.restore(snap)
        elif snap is not None:
            caches[i] = snap                                # the copy taken before the round
        elif c is not None:
            c.trim(need)
    if restore and keep:
        model(mx.array([fed[:keep]]), caches, kv_dtype)
        return keep
    return 0


def _greedy(model, tokens: list[int], caches, kv_dtype) -> list[int]:
    """Feed tokens (one pass); the greedy next token after each position."""
    logits = model(mx.array([tokens]), caches, kv_dtype)[0]
    return mx.argmax(logits, axis=-1).tolist()


def speculative_generate(target, draft, prompt, max_new_tokens: int, num_draft: int = 4,
                         kv_dtype: str | None = None, step: int = DEFAULT_STEP) -> Speculation:
    """Draft proposes ``num_draft`` tokens per round, the target verifies them in one pass.

    Invariant per round: both models' caches hold the context minus its last token ``last``.
    Output = greedy decoding of the target, whatever the draft proposes.
    """
    prompt = prompt_list(prompt, target.spec.vocab_size)
    if target.spec.vocab_size != draft.spec.vocab_size:
        raise ValueError(f"draft vocab_size {draft.spec.vocab_size} must equal the target's "
                         f"{target.spec.vocab_size}")
    if not isinstance(num_draft, int) or num_draft < 1:
        raise ValueError(f"num_draft must be a positive integer, got {num_draft!r}")
    models = (target, draft)
    dtypes = [cache_dtypes(m, kv_dtype) for m in models]
    caches = [make_caches(m.spec, kv_dtype=kv_dtype, step=step, dtype=d[1], rewind_tokens=num_draft + 1)
              for m, d in zip(models, dtypes)]
    if len(prompt) > 1:
        for m, c, d in zip(models, caches, dtypes):
            m(mx.array([prompt[:-1]]), c, d[0])
    out, last = [], prompt[-1]
    proposed = accepted = rounds = 0
    fed = len(prompt) - 1
    while len(out) < max_new_tokens:
        k = min(num_draft, max_new_tokens - len(out) - 1)
        tokens, n, round_fed = _round(models, caches, [d[0] for d in dtypes], last, k)
        out, last, fed = out + tokens, tokens[-1], fed + round_fed
        proposed, accepted, rounds = proposed + k, accepted + n, rounds + 1
    return Speculation(out[:max_new_tokens], proposed, accepted, rounds, fed)


def _round(models, caches, written, last: int, k: int) -> tuple[list[int], int, int]:
    """One round: the draft proposes k tokens after ``last``, the target verifies them in one pass.

    Returns (the accepted drafts plus the target's own next token, drafts accepted n, positions
    the target was fed); both models' caches end holding the context minus its new last token.
    """
    (target, draft), (t_caches, d_caches), (t_dtype, d_dtype) = models, caches, written
    d_snaps, drafts = _snapshot(d_caches, k), []
    for _ in range(k):                                       # draft: one token at a time
        drafts.append(_greedy(draft, [drafts[-1] if drafts else last], d_caches, d_dtype)[-1])
    t_snaps, verify = _snapshot(t_caches, k + 1), [last] + drafts
    t_tokens = _greedy(target, verify, t_caches, t_dtype)    # k+1 positions, one pass
    n = 0
    while n < k and drafts[n] == t_tokens[n]:
        n += 1
    fed = len(verify) + _rewind(target, t_caches, t_snaps, verify, n + 1, t_dtype)
    _rewind(draft, d_caches, d_snaps, verify[:k], min(n + 1, k), d_dtype)
    if n == k and k:                                         # draft never saw its last proposal
        draft(mx.array([[drafts[-1]]]), d_caches, d_dtype)
    return drafts[:n] + [t_tokens[n]], n, fed
