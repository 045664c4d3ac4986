"""Seeded request streams for the serving simulator: lengths, arrivals, shared system prompts.

Contract (pure numpy; the same arguments give the same requests)
- A :class:`Workload` is one array entry per request, sorted by arrival iteration: prompt tokens
  (shared prefix included), output tokens, and the id of the shared system prompt (−1 = none).
- Lengths: long-tailed lognormal by default (mean m, sigma σ: μ = ln m − σ²/2), clipped so that
  prefix + prompt + output ≤ max_len with output ≥ 1. Arrivals: a Poisson process of ``rate``
  requests per iteration (exponential gaps, cumulated and floored), or all at iteration 0.
- :func:`prefix_token_ids` gives each shared system prompt made-up token ids, distinct between
  prompts, so that a prefix cache can recognise the shared blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..calc.units import InputError

# Long-tailed lognormal lengths (mean, sigma); "chat" uses means near ShareGPT's as reported in
# Kwon et al. 2023 (161 prompt / 338 output tokens), "short" near Alpaca's (19 / 58).
LENGTHS = {
    "chat": {"prompt": ("lognormal", 161, 1.0), "output": ("lognormal", 338, 1.0)},
    "short": {"prompt": ("lognormal", 19, 0.6), "output": ("lognormal", 58, 0.8)},
    "long_prompt": {"prompt": ("lognormal", 1500, 0.5), "output": ("lognormal", 120, 0.8)},
    "uniform": {"prompt": ("uniform", 16, 512), "output": ("uniform", 16, 512)},
    "fixed": {"prompt": ("fixed", 128), "output": ("fixed", 128)},
}
# Made-up token ids of shared prompt k are k · PREFIX_TOKEN_ID_STRIDE + i for position i: a
# stride larger than any prefix (prefix_tokens < max_len) keeps the prompts' ids apart.
PREFIX_TOKEN_ID_STRIDE = 1_000_003


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival iteration; ``prefix_id`` −1 = no shared system prompt."""

    arrival: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_id: np.ndarray
    prefix_tokens: int = 0
    max_len: int = 2048

    def __len__(self):
        return len(self.arrival)


def _sample_lengths(rng, spec, n):
    """n lengths (floats or ints, not yet rounded) from a spec such as ("lognormal", mean, sigma)."""
    kind, *args = spec
    if kind == "lognormal":  # mean m: mu = ln m − σ²/2
        mean, sigma = args
        return rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)
    if kind == "uniform":
        return rng.integers(args[0], args[1] + 1, n)
    if kind == "fixed":
        return np.full(n, args[0])
    raise InputError(f"length distribution {kind!r} is not one of lognormal, uniform, fixed")


def _check_workload_args(num_requests, lengths, max_len, shared_prefix_tokens):
    if isinstance(lengths, dict):  # a dict is unhashable: test it before looking it up in LENGTHS
        if set(lengths) != {"prompt", "output"}:
            raise InputError(f"lengths dict must have the keys 'prompt' and 'output', got {sorted(lengths)}")
    elif lengths not in LENGTHS:
        raise InputError(f"lengths {lengths!r} is not one of {', '.join(LENGTHS)} or a dict")
    if not isinstance(num_requests, int) or num_requests < 1:
        raise InputError(f"num_requests must be a positive integer, got {num_requests!r}")
    if not 0 <= shared_prefix_tokens <= max_len - 2:
        raise InputError(f"shared_prefix_tokens must be in [0, {max_len - 2}], got {shared_prefix_tokens}")


def make_workload(num_requests: int, lengths="chat", rate: float | None = None, max_len: int = 2048,
                  seed: int = 0, shared_prefix_tokens: int = 0, num_prefixes: int = 1) -> Workload:
    """Seeded requests: Poisson arrivals at ``rate`` per iteration (None = all at 0), lengths clipped
    so that prefix + prompt + output ≤ max_len (output ≥ 1).

    ``lengths``: a name in LENGTHS or a dict like them, {"prompt": spec, "output": spec}, each spec
    ("lognormal", mean, sigma), ("uniform", low, high) or ("fixed", n).
    """
    _check_workload_args(num_requests, lengths, max_len, shared_prefix_tokens)
    spec = LENGTHS.get(lengths) if isinstance(lengths, str) else lengths
    rng = np.random.default_rng(seed)  # draw order: prompts, outputs, arrivals, prefix ids
    prompt = np.clip(np.rint(_sample_lengths(rng, spec["prompt"], num_requests)), 1,
                     max_len - 1 - shared_prefix_tokens).astype(np.int64) + shared_prefix_tokens
    output = np.clip(np.rint(_sample_lengths(rng, spec["output"], num_requests)), 1, max_len - prompt)
    if rate is None:
        arrival = np.zeros(num_requests, dtype=np.int64)
    elif rate > 0:
        arrival = np.floor(np.cumsum(rng.exponential(1 / rate, num_requests))).astype(np.int64)
    else:
        raise InputError(f"rate must be > 0 requests per iteration (or None), got {rate!r}")
    prefix = rng.integers(0, num_prefixes, num_requests) if shared_prefix_tokens else \
        np.full(num_requests, -1)
    return Workload(arrival, prompt, output.astype(np.int64), prefix, shared_prefix_tokens, max_len)


def prefix_token_ids(workload: Workload) -> dict[int, list[int]]:
    """{prefix id: its made-up token ids}: k · PREFIX_TOKEN_ID_STRIDE + i for i < prefix_tokens."""
    return {k: [k * PREFIX_TOKEN_ID_STRIDE + i for i in range(workload.prefix_tokens)]
            for k in set(workload.prefix_id.tolist())}
