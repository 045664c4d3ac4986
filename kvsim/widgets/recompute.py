"""Lesson 01: recompute vs cache. Token positions fed (analytic) and a real decode with and without a cache.

Contract
- :func:`fed_curves` / :func:`fed_rows`: token positions fed to produce an answer, from
  :func:`kvsim.memory.tokens_fed` (uncached Σ_{k=1..A}(P + k - 1), cached P + A - 1).
- :func:`decode_with_and_without_cache` runs :func:`kvsim.decode.generate` twice on one real MLX
  model and prompt, once with caches and once re-feeding the whole sequence every step
  (``caches=None``), and returns a :class:`DecodeComparison` holding both runs: tokens, logits,
  counted positions and the per-step trace (wall time, cache bytes). Nothing in it is computed
  from a formula; compare it with the functions above.
- :func:`draw_tokens_fed` / :func:`recompute_view`: the quadratic and the linear curve with sliders
  for prompt and answer length. :func:`draw_decode_time` draws a comparison's measured time.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .. import memory
from ..config import ModelSpec
from ..decode import Generation, generate, kv_dtype_spec
from ..plots.recompute import plot_cumulative_time, plot_tokens_fed
from .base import int_slider, make_view

UNCACHED, CACHED = "without a cache", "with a cache"


def fed_curves(prompt_tokens: int, answer_tokens: int, points: int = 201):
    """Answer lengths 0..A and the token positions fed for each, without and with a cache."""
    a = np.unique(np.linspace(0, answer_tokens, points).round().astype(np.int64))
    return a, {UNCACHED: np.array([memory.tokens_fed(prompt_tokens, int(x), False) for x in a]),
               CACHED: np.array([memory.tokens_fed(prompt_tokens, int(x), True) for x in a])}


def fed_rows(prompt_tokens: int = 1000, answer_tokens: int = 1000) -> list[dict]:
    """The seed's table: positions fed at step k and their sum over A steps, per mode."""
    p, a = prompt_tokens, answer_tokens
    return [
        {"mode": UNCACHED, "fed at step k": f"the whole sequence, {p:,} + (k - 1)",
         f"sum over {a:,} steps": memory.tokens_fed(p, a, cached=False)},
        {"mode": CACHED, "fed at step k": f"{p:,} at step 1 (prefill), then 1",
         f"sum over {a:,} steps": memory.tokens_fed(p, a, cached=True)},
    ]


def draw_tokens_fed(ax, prompt_tokens=1000, answer_tokens=1000):
    """Positions fed against answer length: quadratic without a cache, linear with one."""
    a, curves = fed_curves(prompt_tokens, answer_tokens)
    un, ca = (memory.tokens_fed(prompt_tokens, answer_tokens, c) for c in (False, True))
    plot_tokens_fed(ax, a, curves, points={f"{un:,}": (answer_tokens, un), f"{ca:,}": (answer_tokens, ca)},
                    title=f"prompt {prompt_tokens:,} tokens: {un / ca:,.0f}× more positions without a cache")
    return ax


def recompute_view(prompt_tokens=1000, answer_tokens=1000):
    """Sliders for prompt and answer length over :func:`draw_tokens_fed`."""
    return make_view(draw_tokens_fed, {
        "prompt_tokens": int_slider("prompt tokens", prompt_tokens, 100, 8000, step=100),
        "answer_tokens": int_slider("answer tokens", answer_tokens, 100, 8000, step=100),
    }, figsize=(7, 4))


# ---------------------------------------------------------------- measured decode


@dataclass
class DecodeComparison:
    """The same prompt decoded by the same model with a cache and without one."""

    cached: Generation
    uncached: Generation
    spec: ModelSpec                  # the (reduced) spec the model implements
    kv_dtype: memory.KVDtype         # what the caches stored

    @property
    def prompt_tokens(self) -> int:
        return len(self.cached.prompt)

    @property
    def answer_tokens(self) -> int:
        return len(self.cached.tokens)

    def same_tokens(self) -> bool:
        return self.cached.tokens == self.uncached.tokens

    def max_logit_difference(self) -> float:
        """Largest |logit_cached - logit_uncached| over every answer step."""
        return float(mx.max(mx.abs(self.cached.logits - self.uncached.logits)).item())

    def cumulative_seconds(self) -> tuple[np.ndarray, dict]:
        """Answer tokens 0..A and the measured wall time spent until each, per mode."""
        a = np.arange(self.answer_tokens + 1)
        return a, {label: np.concatenate([[0.0], np.cumsum([s.seconds for s in g.trace])])
                   for label, g in ((UNCACHED, self.uncached), (CACHED, self.cached))}

    def rows(self) -> list[dict]:
        """Positions fed as counted during each run, beside :func:`kvsim.memory.tokens_fed`."""
        return [{"mode": label, "positions fed (counted)": g.positions_fed,
                 "tokens_fed (formula)": memory.tokens_fed(self.prompt_tokens, self.answer_tokens, g.cached)}
                for label, g in ((UNCACHED, self.uncached), (CACHED, self.cached))]

    def seconds(self) -> dict:
        """Measured wall time of each whole run (prefill and every step), per mode."""
        return {UNCACHED: self.uncached.seconds, CACHED: self.cached.seconds}

    def trace_rows(self, steps=(0, 1, 2, 3)) -> list[dict]:
        """The cached run's first steps: prefill writes the prompt, each decode step adds one token."""
        rows, held = [], 0
        for s in self.cached.trace:
            held += s.positions_fed                      # tokens written to the cache so far
            if s.step in steps or s.step == self.answer_tokens - 1:
                rows.append({"step": s.step, "phase": "prefill" if s.step == 0 else "decode",
                             "positions fed": s.positions_fed, "tokens in cache": held,
                             "used_bytes (measured)": s.cache_used_bytes,
                             "kv_bytes (formula)": memory.kv_bytes(self.spec, held, kv_dtype=self.kv_dtype)})
        return rows


def decode_with_and_without_cache(model, prompt_tokens: int = 32, answer_tokens: int = 96, seed: int = 0,
                                  kv_dtype: str | None = None, progress: bool = True) -> DecodeComparison:
    """Greedy-decode one random prompt twice: with caches (prefill + 1 token/step) and re-feeding everything."""
    from tqdm.auto import tqdm

    for name, v in (("prompt_tokens", prompt_tokens), ("answer_tokens", answer_tokens)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    vocab = model.spec.vocab_size
    prompt = mx.random.randint(0, vocab, (prompt_tokens,), key=mx.random.key(seed)).tolist()
    mx.eval(model(mx.array([prompt[:1]])))  # warm-up, so neither timed run pays for first-call setup
    runs = {}
    bar = tqdm(total=2 * answer_tokens, desc="decode", unit="token", disable=not progress)
    for label, caches in ((CACHED, "auto"), (UNCACHED, None)):
        bar.set_postfix_str(label)
        runs[label] = generate(model, prompt, answer_tokens, caches=caches, kv_dtype=kv_dtype)
        bar.update(answer_tokens)
    bar.close()
    return DecodeComparison(runs[CACHED], runs[UNCACHED], model.spec, kv_dtype_spec(kv_dtype, model))


def draw_decode_time(ax, comparison: DecodeComparison):
    """Measured cumulative decode time against answer tokens, with and without a cache."""
    a, seconds = comparison.cumulative_seconds()
    ratio = seconds[UNCACHED][-1] / max(seconds[CACHED][-1], 1e-12)
    return plot_cumulative_time(ax, a, seconds, title=(
        f"prompt {comparison.prompt_tokens}, answer {comparison.answer_tokens} tokens: "
        f"{ratio:.0f}× slower without a cache (measured)"))
