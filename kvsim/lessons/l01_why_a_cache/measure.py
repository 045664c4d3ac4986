"""Lesson 01 measured: the same prompt decoded by a real MLX model with a cache and without one.

Contract
- :func:`decode_with_and_without_cache` runs :func:`kvsim.decode.generate` twice on one real MLX
  model and prompt, once with caches and once re-feeding the whole sequence every step
  (``caches=None``), and returns a :class:`DecodeComparison` holding both runs: tokens, logits,
  counted positions and the per-step trace (wall time, cache bytes). Nothing in it is computed
  from a formula; compare it with :mod:`kvsim.calc.tokens_fed`.
- :func:`keys_without_cache`: one layer's keys (B, n_kv_heads, S, head_dim) after a forward over ``tokens`` with no
  cache at all (the earlier blocks run uncached; the layer's own norm, key projection and RoPE at offset 0):
  the premise of seed 001 is that position t's key is the same whatever comes after t.
- :func:`attention_seams`: one decode step of one real attention layer, both ways, as rows: what is fed, the RoPE
  offset, the mask, the keys attended, and the largest difference of the newest token's output.
- :func:`cached_run_bytes`: a real cached greedy decode of lesson 01's toy model (``toy_spec("gqa")``, seed 0,
  float32, 256-slot steps); the summed ``nbytes`` and ``used_bytes`` of its caches at the end.
- :func:`inplace_step_seconds`: measured seconds of one decode write to a ``KVCache(inplace=True)`` (slice write
  into a buffer) and ``KVCache(inplace=False)`` (concatenation: copies the whole cache) holding ``context_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

import time

from ...cache import KVCache, make_caches
from ...cache.base import mx_dtype
from ...calc import memory
from ...calc.config import ModelSpec
from ...calc.progress import Progress
from ...calc.tokens_fed import CACHED, UNCACHED, tokens_fed
from ...decode import Generation, generate, kv_dtype_spec
from ...model.layers import reference_mask, rms_norm, rope


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


def _project_keys(block, x: mx.array, offset: int) -> mx.array:
    """The block's attention keys for hidden states x (B, S, hidden): norm, W_k, heads, RoPE at ``offset``."""
    a = block.mixer
    xn = rms_norm(x, block.mixer_norm, block.eps)
    B, S, _ = xn.shape
    k = (xn @ a.wk.T).reshape(B, S, a.n_kv_heads, a.head_dim).transpose(0, 2, 1, 3)   # (B, n_kv, S, D)
    return rope(k, a.rope_dims, a.rope_base, offset)


def keys_without_cache(model, tokens, layer: int = -1) -> mx.array:
    """Layer ``layer``'s keys (1, n_kv_heads, S, head_dim) for ``tokens``, computed with no cache anywhere."""
    layer = range(len(model.blocks))[layer]
    x = model.embed[mx.array([list(tokens)])]
    for block in model.blocks[:layer]:
        x = block(x, None)                              # the uncached path: every position again
    return _project_keys(model.blocks[layer], x, 0)


def attention_seams(model, tokens, layer: int = 0) -> list[dict]:
    """The newest token's attention in layer ``layer``, uncached (all S tokens) and cached (1 token), side by side."""
    seq = list(tokens)
    S = len(seq)
    if S < 2:
        raise ValueError(f"tokens must hold at least 2 tokens, got {S}")
    attn = model.blocks[layer].mixer
    x = model.embed[mx.array([seq])]                    # (1, S, hidden): any input shows the seam
    full = attn(x)                                      # no cache: RoPE from 0, causal (S, S) mask
    cache = KVCache()
    attn(x[:, :-1], cache)                              # the earlier tokens, as prefill and decode left them
    offset = cache.offset
    one = attn(x[:, -1:], cache)                        # one token: RoPE at offset, no mask, update_and_fetch
    diff = float(mx.max(mx.abs(full[:, -1] - one[:, 0])).item())
    mask = reference_mask(S, S, 0)
    return [
        {"": "tokens fed to the layer", "without a cache": S, "with a cache": 1},
        {"": "RoPE offset of the first token fed", "without a cache": 0, "with a cache": offset},
        {"": "keys written by update_and_fetch", "without a cache": 0, "with a cache": 1},
        {"": "keys attended by the newest query", "without a cache": S, "with a cache": cache.offset},
        {"": "mask", "without a cache": f"causal {tuple(mask.shape)}",
         "with a cache": "none (one query sees all)"},
        {"": "newest token's output: max |difference|", "without a cache": "", "with a cache": f"{diff:.1e}"},
    ]


def inplace_step_seconds(context_tokens: int = 2048, steps: int = 32, num_key_value_heads: int = 8,
                         head_dim: int = 128, dtype: str = "bf16") -> dict:
    """{inplace: median seconds of one one-token update_and_fetch (+ eval)} at ``context_tokens`` cached."""
    dt = mx_dtype(dtype)
    out = {}
    for inplace in (True, False):
        cache = KVCache(inplace=inplace)
        prefix = mx.zeros((1, num_key_value_heads, context_tokens, head_dim), dtype=dt)
        mx.eval(cache.update_and_fetch(prefix, prefix))
        one = mx.ones((1, num_key_value_heads, 1, head_dim), dtype=dt)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            mx.eval(cache.update_and_fetch(one, one))
            times.append(time.perf_counter() - t0)
        out[inplace] = float(np.median(times))
    return out


def cached_run_bytes(prompt_tokens: int = 100, answer_tokens: int = 200, seed: int = 0) -> dict:
    """{"nbytes", "used_bytes", "offset"} summed over the caches after a real cached decode of the toy model."""
    from ...model import build_model, toy_spec
    model = build_model(toy_spec("gqa"), seed=0)
    prompt = mx.random.randint(0, model.spec.vocab_size, (prompt_tokens,), key=mx.random.key(seed)).tolist()
    caches = generate(model, prompt, answer_tokens, trace=False).caches
    return {"nbytes": sum(c.nbytes for c in caches), "used_bytes": sum(c.used_bytes for c in caches),
            "offset": caches[0].offset}
