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
from ..calc.validate import as_int, finite_number, show

MAX_REQUESTS = 10_000_000  # requests one workload may hold (arrays of that length)
MAX_LENGTH = 2**31 - 1  # tokens per request

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


def check_length_spec(field: str, spec) -> tuple:
    """A length spec, checked: ("lognormal", mean > 0, 0 <= sigma <= 10), ("uniform", low, high) with
    1 <= low <= high <= MAX_LENGTH, or ("fixed", n) with 1 <= n <= MAX_LENGTH; one line naming ``field``."""
    arity = {"lognormal": 3, "uniform": 3, "fixed": 2}
    if not isinstance(spec, (tuple, list)) or not spec or spec[0] not in arity or len(spec) != arity[spec[0]]:
        raise InputError(f"lengths[{field!r}] must be ('lognormal', mean, sigma), ('uniform', low, high) or "
                         f"('fixed', n), got {show(spec)}")
    kind, *args = spec
    name = f"lengths[{field!r}] {kind}"
    if kind == "lognormal":
        finite_number(f"{name} mean", args[0], 0.0, MAX_LENGTH)
        finite_number(f"{name} sigma", args[1], 0.0, 10.0, low_open=False)
    elif kind == "uniform":
        low = as_int(f"{name} low", args[0], 1, MAX_LENGTH)
        as_int(f"{name} high", args[1], low, MAX_LENGTH)
    else:
        as_int(f"{name} n", args[0], 1, MAX_LENGTH)
    return tuple(spec)


def _sample_lengths(rng, spec, n):
    """n lengths (floats or ints, not yet rounded) from a spec such as ("lognormal", mean, sigma)."""
    kind, *args = spec
    if kind == "lognormal":  # mean m: mu = ln m − σ²/2
        mean, sigma = args
        return rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)
    if kind == "uniform":
        return rng.integers(args[0], args[1] + 1, n)
    return np.full(n, args[0])  # fixed (check_length_spec allows nothing else)


def _check_workload_args(num_requests, lengths, max_len, shared_prefix_tokens):
    if isinstance(lengths, dict):  # a dict is unhashable: test it before looking it up in LENGTHS
        if set(lengths) != {"prompt", "output"}:
            raise InputError(f"lengths dict must have the keys 'prompt' and 'output', got {sorted(map(str, lengths))}")
        for field in ("prompt", "output"):
            check_length_spec(field, lengths[field])
    elif not isinstance(lengths, str) or lengths not in LENGTHS:
        raise InputError(f"lengths {show(lengths)} is not one of {', '.join(LENGTHS)} or a dict")
    as_int("num_requests", num_requests, 1, MAX_REQUESTS)
    max_len = as_int("max_len", max_len, 2, MAX_LENGTH)
    as_int("shared_prefix_tokens", shared_prefix_tokens, 0, max_len - 2)


def make_workload(num_requests: int, lengths="chat", rate: float | None = None, max_len: int = 2048,
                  seed: int = 0, shared_prefix_tokens: int = 0, num_prefixes: int = 1) -> Workload:
    """Seeded requests: Poisson arrivals at ``rate`` per iteration (None = all at 0), lengths clipped
    so that prefix + prompt + output ≤ max_len (output ≥ 1).

    ``lengths``: a name in LENGTHS or a dict like them, {"prompt": spec, "output": spec}, each spec
    ("lognormal", mean, sigma), ("uniform", low, high) or ("fixed", n).
    """
    _check_workload_args(num_requests, lengths, max_len, shared_prefix_tokens)
    num_prefixes = as_int("num_prefixes", num_prefixes, 1, MAX_REQUESTS)
    seed = as_int("seed", seed, 0)
    if rate is not None:
        rate = finite_number("rate", rate, 0.0)  # requests per iteration
    spec = LENGTHS.get(lengths) if isinstance(lengths, str) else lengths
    rng = np.random.default_rng(seed)  # draw order: prompts, outputs, arrivals, prefix ids
    prompt = np.clip(np.rint(_sample_lengths(rng, spec["prompt"], num_requests)), 1,
                     max_len - 1 - shared_prefix_tokens).astype(np.int64) + shared_prefix_tokens
    output = np.clip(np.rint(_sample_lengths(rng, spec["output"], num_requests)), 1, max_len - prompt)
    if rate is None:
        arrival = np.zeros(num_requests, dtype=np.int64)
    else:
        arrival = np.floor(np.cumsum(rng.exponential(1 / rate, num_requests))).astype(np.int64)
    prefix = rng.integers(0, num_prefixes, num_requests) if shared_prefix_tokens else \
        np.full(num_requests, -1)
    return Workload(arrival, prompt, output.astype(np.int64), prefix, shared_prefix_tokens, max_len)


def check_workload(workload) -> None:
    """InputError unless ``workload`` is a non-empty Workload of consistent arrays: arrivals >= 0 and
    sorted, prompts in [1 + prefix_tokens, max_len - 1], outputs >= 1, prompt + output <= max_len."""
    if not isinstance(workload, Workload):
        raise InputError(f"workload must be a kvsim.serving.workload.Workload, got {type(workload).__name__}")
    n = len(workload.arrival)
    if n == 0:
        raise InputError("workload must hold at least 1 request, got 0")
    max_len = as_int("workload.max_len", workload.max_len, 2, MAX_LENGTH)
    prefix = as_int("workload.prefix_tokens", workload.prefix_tokens, 0, max_len - 2)
    for name in ("arrival", "prompt_tokens", "output_tokens", "prefix_id"):
        a = getattr(workload, name)
        if not isinstance(a, np.ndarray) or a.shape != (n,) or a.dtype.kind not in "iu":
            raise InputError(f"workload.{name} must be an integer array of {n} entries, got {show(a)}")
    a, p, o = workload.arrival, workload.prompt_tokens, workload.output_tokens
    if a.min() < 0 or np.any(np.diff(a) < 0):
        raise InputError("workload.arrival must be >= 0 and sorted")
    if p.min() < 1 + prefix or o.min() < 1 or np.any(p + o > max_len):
        raise InputError(f"workload requests need prompt_tokens in [{1 + prefix}, {max_len - 1}], output_tokens "
                         f">= 1 and prompt + output <= max_len {max_len}; got prompt {p.min()}..{p.max()}, "
                         f"output {o.min()}..{o.max()}")


def prefix_token_ids(workload: Workload) -> dict[int, list[int]]:
    """{prefix id: its made-up token ids}: k · PREFIX_TOKEN_ID_STRIDE + i for i < prefix_tokens."""
    return {k: [k * PREFIX_TOKEN_ID_STRIDE + i for i in range(workload.prefix_tokens)]
            for k in set(workload.prefix_id.tolist())}
