"""Lesson 01 measured: the same prompt decoded by a real MLX model with a cache and without one.

Contract
- :func:`decode_with_and_without_cache` runs :func:`kvsim.decode.generate` twice on one real MLX
  model and prompt, once with caches and once re-feeding the whole sequence every step
  (``caches=None``), and returns a :class:`DecodeComparison` holding both runs: tokens, logits,
  counted positions and the per-step trace (wall time, cache bytes). Nothing in it is computed
  from a formula; compare it with :mod:`kvsim.calc.tokens_fed`.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ...calc import memory
from ...calc.config import ModelSpec
from ...calc.progress import Progress
from ...calc.tokens_fed import CACHED, UNCACHED, tokens_fed
from ...decode import Generation, generate, kv_dtype_spec


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

    def slowdown(self) -> float:
        """Measured cumulative time ratio at the last answer token: uncached / max(cached, 1e-12)."""
        _, seconds = self.cumulative_seconds()
        return float(seconds[UNCACHED][-1] / max(seconds[CACHED][-1], 1e-12))

    def rows(self) -> list[dict]:
        """Positions fed as counted during each run, beside :func:`kvsim.calc.tokens_fed.tokens_fed`."""
        return [{"mode": label, "positions fed (counted)": g.positions_fed,
                 "tokens_fed (formula)": tokens_fed(self.prompt_tokens, self.answer_tokens, g.cached)}
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
    for name, v in (("prompt_tokens", prompt_tokens), ("answer_tokens", answer_tokens)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    vocab = model.spec.vocab_size
    prompt = mx.random.randint(0, vocab, (prompt_tokens,), key=mx.random.key(seed)).tolist()
    mx.eval(model(mx.array([prompt[:1]])))  # warm-up, so neither timed run pays for first-call setup
    runs = {}
    bar = Progress(total=2 * answer_tokens, desc="decode", unit="tokens", enabled=progress)
    for label, caches in ((CACHED, "auto"), (UNCACHED, None)):
        bar.set_postfix_str(label)
        runs[label] = generate(model, prompt, answer_tokens, caches=caches, kv_dtype=kv_dtype)
        bar.update(answer_tokens)
    bar.close()
    return DecodeComparison(runs[CACHED], runs[UNCACHED], model.spec, kv_dtype_spec(kv_dtype, model))
