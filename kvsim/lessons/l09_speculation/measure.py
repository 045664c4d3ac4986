"""Lesson 09 (speculative decoding and rewind): this lesson's MLX runs on real kvsim caches and models.

Rewinding real caches: trim, its limits on a ring, recurrent snapshots, padded prefill (lesson 09).

Contract
- :func:`trim_walkthrough`: a real KVCache with one layer's real geometry; every element of a
  token's key holds that token's id, so the slots can be read back. Rows after each action (write,
  trim, write): offset, capacity, nbytes, used_bytes and what the first slots hold ('|' marks the
  offset; slots after it are stale rows that the next write overwrites).
- :func:`rewind_limits`: a RotatingKVCache written one token at a time; how far ``trim`` can go
  (``trimmable_tokens``) before and after the ring wraps, with and without ``rewind_tokens`` slots.
- :func:`try_trim`: trims and returns what happened as text: how many of the n tokens the layout
  could rewind exactly (trim's return value), or the ValueError message for a bad n (lesson cells
  must not raise).
- :func:`snapshot_restore`: a hybrid's RecurrentStateCache trims nothing; snapshot, feed, restore.
- :func:`padded_prefill_rows`: a prompt prefilled padded to a multiple and trimmed back vs unpadded.

- :func:`lookahead_cache_bytes`: one sliding layer of a registry model (its window, KV heads, head_dim, bf16) in
  a real :class:`~kvsim.cache.lookahead.OverwriteLogRotatingCache` (Gemma 3's decode lookahead) and a real
  ``RotatingKVCache(rewind_tokens=k − 1)`` (kvsim's spare slots), each fed a prompt past the window and then k
  speculative one-token appends: both caches' nbytes, the rows each holds, and that undoing the appends restores
  the state (the log: bitwise the buffers before them; the spare slots: every key a later query sees).

- :func:`refusal_rows`: seed 000's refusal list (:data:`kvsim.calc.padded_prefill.PADDED_PREFILL_REFUSALS`),
  each row with what :func:`kvsim.decode.generate.check_padded_prefill` says for the config kvsim ships of that
  ``model_type`` (or that none is shipped).

Speculative decoding measured: real draft and target models, every draft length, checked against greedy.

Contract
- :func:`speculation_sweep`: :func:`kvsim.decode.speculative_generate` for every draft model and
  draft length k, each compared with plain greedy decoding of the target (:class:`SpeculationRun`).
- :func:`tokens_per_pass_series`: the measured tokens per target pass of those runs against k, and the
  i.i.d. expectation at the acceptance measured at k = 1 (what lesson 09's picture draws).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ...cache import KVCache, RecurrentStateCache, RotatingKVCache, make_caches
from ...cache.base import mx_dtype
from ...cache.lookahead import OverwriteLogRotatingCache
from ...calc.progress import Progress
from ...calc.padded_prefill import PADDED_PREFILL_REFUSALS
from ...calc.registry import load_model, model_names
from ...calc.units import DEFAULT_STEP
from ...decode import Speculation, generate, prefill, speculative_generate
from ...decode.generate import check_padded_prefill
from .data import expected_tokens_per_pass


def _rows_of(cache, tokens, dtype, H, D):
    """(1, H, len, D) keys and values whose every element is the token id."""
    x = mx.broadcast_to(mx.array(tokens, dtype=dtype)[None, None, :, None], (1, H, len(tokens), D))
    return x, x


def slots(cache, show: int) -> str:
    """Token ids held in the first ``show`` slots of a KVCache's buffer, '|' at the offset, '.' unwritten."""
    held = [] if cache.keys is None else cache.keys[0, 0, :show, 0].astype(mx.float32).tolist()
    cells = [str(int(v)) if v else "." for v in held] + ["."] * (show - len(held))
    cells.insert(min(cache.offset, show), "|")
    return " ".join(cells)


def trim_walkthrough(model: str = "llama-3-8b", dtype: str = "bf16", written=(11, 12, 13, 14, 15, 16),
                     rejected: int = 2, replacement=(42,), step: int = DEFAULT_STEP, show: int = 8) -> list[dict]:
    """Write tokens, ``trim(rejected)``, write the replacement: one row per state of a real KVCache."""
    layer = load_model(model).layers[0]
    H, D, dt = layer.num_key_value_heads, layer.head_dim, mx_dtype(dtype)
    cache = KVCache(step=step)
    rows = []

    def record(action):
        rows.append({"action": action, "offset": cache.offset, "capacity": cache.capacity, "nbytes": cache.nbytes,
                     "used_bytes": cache.used_bytes, f"slots 0-{show - 1}": slots(cache, show)})

    record("empty cache")
    cache.update_and_fetch(*_rows_of(cache, list(written), dt, H, D))
    record(f"write {len(written)} tokens")
    cache.trim(rejected)
    record(f"trim({rejected})")
    cache.update_and_fetch(*_rows_of(cache, list(replacement), dt, H, D))
    record(f"write {len(replacement)} token")
    return rows


def try_trim(cache, n: int) -> str:
    """``cache.trim(n)`` as text: 'trimmed k of n: offset a -> b' (k: what the layout could rewind
    exactly, trim's return value) or the error message for a bad n (cache unchanged)."""
    before = cache.offset
    try:
        done = cache.trim(n)
    except ValueError as err:
        return f"refused: {err}"
    return f"trimmed {done} of {n}: offset {before} -> {cache.offset}"


def rewind_limits(max_size: int = 8, rewind_tokens=(0, 4), offsets=(3, 8, 9, 10, 12, 20), step: int = 4,
                  head_dim: int = 4) -> list[dict]:
    """trimmable_tokens of a RotatingKVCache(max_size, rewind_tokens=R) after each offset, one token per write."""
    rows = []
    for r in rewind_tokens:
        cache = RotatingKVCache(max_size, rewind_tokens=r, step=step)
        for t in range(max(offsets)):
            cache.update_and_fetch(*_rows_of(cache, [t + 1], mx.float32, 1, head_dim))
            if t + 1 in offsets:
                rows.append({"rewind_tokens": r, "offset": cache.offset, "slots": cache.capacity,
                             "tokens held": cache.size(), "trimmable_tokens": cache.trimmable_tokens})
    return rows


def snapshot_restore(model, prompt, extra=(1, 2, 3)) -> list[dict]:
    """A recurrent layer's cache: trim rewinds nothing; snapshot, feed ``extra`` tokens, restore: the state is back."""
    caches = make_caches(model.spec)
    model(mx.array([list(prompt)]), caches)
    layer = next(i for i, c in enumerate(caches) if isinstance(c, RecurrentStateCache))
    cache = caches[layer]
    before = [mx.array(cache[n]) for n in cache.names]
    rows = [{"action": f"prefill {len(prompt)} tokens", "offset": cache.offset, "nbytes": cache.nbytes,
             "state = after prefill": True}]

    def same():
        return all(bool(mx.array_equal(a, cache[n]).item()) for a, n in zip(before, cache.names))

    done = cache.trim(len(extra))
    rows.append({"action": f"trim({len(extra)}) rewinds {done}", "offset": cache.offset,
                 "nbytes": cache.nbytes, "state = after prefill": same()})
    snap = cache.snapshot()
    model(mx.array([list(extra)]), caches)
    rows.append({"action": f"snapshot, feed {len(extra)} tokens", "offset": cache.offset, "nbytes": cache.nbytes,
                 "state = after prefill": same()})
    cache.restore(snap)
    rows.append({"action": "restore(snapshot)", "offset": cache.offset, "nbytes": cache.nbytes,
                 "state = after prefill": same()})
    return rows


def padded_prefill_rows(model, prompt, pad_multiples=(None, 8, 16), answer_tokens: int = 8) -> list[dict]:
    """Prefill unpadded and padded (then trimmed back): tokens written, offset after, same answer as unpadded."""
    prompt = list(prompt)
    plain = generate(model, prompt, answer_tokens, trace=False)
    rows = []
    for m in pad_multiples:
        caches = make_caches(model.spec)
        prefill(model, prompt, caches, pad_multiple=m)
        offsets = sorted({c.offset for c in caches if c is not None})
        run = generate(model, prompt, answer_tokens, pad_multiple=m, trace=False)
        diff = float(mx.max(mx.abs(run.logits - plain.logits)).item())
        rows.append({"pad_multiple": "none" if m is None else m,
                     "tokens in the prefill pass": len(prompt) + (0 if m is None else -len(prompt) % m),
                     "offset after trim": ", ".join(map(str, offsets)), "same tokens": run.tokens == plain.tokens,
                     "logits within 1e-5": diff < 1e-5})
    return rows


def padded_prefill_refusal(model, prompt, pad_multiple: int = 16) -> str:
    """Why a padded prefill is refused for this model (the ValueError message), or 'accepted'."""
    try:
        prefill(model, list(prompt), make_caches(model.spec), pad_multiple=pad_multiple)
    except ValueError as err:
        return f"refused: {err}"
    return "accepted"


@dataclass(frozen=True)
class SpeculationRun:
    """One speculative decode: which draft, how many tokens it proposed per round, the result."""

    draft: str
    num_draft: int
    result: Speculation
    same_as_greedy: bool

    def row(self) -> dict:
        r = self.result
        return {"draft": self.draft, "k": self.num_draft, "proposed": r.proposed, "accepted": r.accepted,
                "acceptance rate": round(r.acceptance_rate, 3), "target passes": r.rounds,
                "tokens per pass": round(len(r.tokens) / r.rounds, 2),
                "target positions fed": r.target_positions_fed, "= greedy": self.same_as_greedy}


def tokens_per_pass_series(runs: list[SpeculationRun]) -> tuple[dict, dict]:
    """Per draft: (k, measured len(tokens) / target passes), and E = (1 − α^(k+1)) / (1 − α) with α measured at k = 1."""
    series, expected = {}, {}
    for label in dict.fromkeys(r.draft for r in runs):
        mine = [r for r in runs if r.draft == label]
        k = [r.num_draft for r in mine]
        series[label] = (k, [len(r.result.tokens) / r.result.rounds for r in mine])
        alpha = next((r.result.acceptance_rate for r in mine if r.num_draft == 1), None)
        if alpha is not None:
            expected[f"i.i.d. α = {alpha:.2f}"] = (k, expected_tokens_per_pass(alpha, k))
    return series, expected


def speculation_sweep(target, drafts: dict, prompt, max_new_tokens: int = 48, ks=(1, 2, 3, 4, 6, 8),
                      progress: bool = True) -> list[SpeculationRun]:
    """Speculative decoding for every {label: draft model} and k, each compared with greedy decoding."""
    greedy = generate(target, prompt, max_new_tokens, trace=False).tokens
    runs = []
    with Progress(total=len(drafts) * len(ks), desc="speculative decode", unit="runs", enabled=progress) as bar:
        for label, draft in drafts.items():
            for k in ks:
                res = speculative_generate(target, draft, prompt, max_new_tokens, num_draft=k)
                runs.append(SpeculationRun(label, k, res, res.tokens == greedy))
                bar.update(1)
    return runs


def lookahead_cache_bytes(model: str = "gemma-3-27b", lookahead_tokens: int = 3, prompt_tokens: int = 2000,
                          dtype: str = "bf16") -> dict:
    """Both designs on one real sliding layer after a prompt and k speculative appends: nbytes, rows, restored."""
    layer = next(x for x in load_model(model).layers if x.kind == "sliding")
    W, H, D, dt = layer.sliding_window, layer.num_key_value_heads, layer.head_dim, mx_dtype(dtype)
    k = lookahead_tokens
    log = OverwriteLogRotatingCache(W, max_saved=k)
    spare = RotatingKVCache(W, rewind_tokens=k - 1)
    plain = RotatingKVCache(W)                     # never makes the speculative appends
    prompt = mx.random.normal((1, H, prompt_tokens, D), key=mx.random.key(0)).astype(dt)
    for c in (log, spare, plain):
        c.update_and_fetch(prompt, prompt)
    before = (log.keys * 1, log.values * 1, log.offset)
    row_bytes = 2 * H * D * prompt.itemsize
    for i in range(k):                             # k speculative one-token appends
        one = mx.full((1, H, 1, D), i + 1.0, dtype=dt)
        log.update_and_fetch(one, one)
        spare.update_and_fetch(one, one)
    out = {"window": W, "lookahead_tokens": k, "row_bytes": row_bytes,
           "overwrite_log_nbytes": log.nbytes, "spare_slots_nbytes": spare.nbytes,
           "overwrite_log_rows": log.nbytes // row_bytes, "spare_slots_rows": spare.nbytes // row_bytes}
    log.undo(k)
    out["overwrite_log_restored"] = (log.offset == before[2] and bool(mx.array_equal(log.keys, before[0]).item())
                                     and bool(mx.array_equal(log.values, before[1]).item()))
    out["spare_slots_trimmed"] = spare.trim(k)
    nxt = mx.full((1, H, 1, D), -1.0, dtype=dt)
    a, b = spare.update_and_fetch(nxt, nxt), plain.update_and_fetch(nxt, nxt)
    out["spare_slots_restored"] = bool(mx.array_equal(a[0], b[0]).item() and mx.array_equal(a[1], b[1]).item())
    return out


def refusal_rows(prompt_tokens: int = 100, padded_tokens: int = 128) -> list[dict]:
    """The seed's refusal list with kvsim's own check on the shipped config of each model_type."""
    shipped = {}
    for name in model_names():
        shipped.setdefault(load_model(name).model_type, name)
    rows = []
    for r in PADDED_PREFILL_REFUSALS:
        name = shipped.get(r["model_type"])
        if name is None:
            said = "no config shipped"
        else:
            try:
                check_padded_prefill(load_model(name), prompt_tokens, padded_tokens)
                said = f"{name}: accepted"
            except ValueError as err:
                said = f"{name}: refused, {str(err).split(': ', 1)[1].split(';')[0]}"
        rows.append({"model": r["model"], "model_type": r["model_type"], "layer kind": r["kind"],
                     "why it cannot pad": r["reason"], "kvsim's check": said})
    return rows
