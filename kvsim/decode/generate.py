"""Decoding with and without a KV cache: generate, trace, count token positions, pad the prefill.

Contract
- ``generate(model, prompt, max_new_tokens, caches="auto" | None | list, ...)`` -> :class:`Generation`.
  With caches: prefill the prompt in one forward pass (optionally padded, see below), then feed
  one token per step. ``caches=None`` is the no-cache baseline: every step re-feeds the whole
  sequence. Greedy by default; ``temperature > 0`` samples by Gumbel-max with noise drawn from
  ``mx.random.key(seed)`` per step, so cached and uncached runs draw the same noise.
- Token positions fed (the seeds' count): cached P + (A - 1), uncached Σ_{k=1..A} (P + k - 1),
  i.e. 1,999 vs 1,499,500 for P = A = 1,000 (:func:`positions_fed`); every run counts them too.
- Per-step trace (:class:`StepTrace`): positions fed, tokens in context, per-layer ``nbytes`` and
  ``used_bytes`` of the caches, wall time (forward + ``mx.eval``).
- ``kv_dtype``: fp32 / bf16 / fp16 (K/V written in that dtype; attention math stays in the model's
  dtype) or q8 q6 q4 q3 q2 (QuantizedKVCache; scales in ``scale_dtype``, default the model's dtype).
  Recurrent state is kept in the float kv dtype, or the model's dtype for quantized caches.
- Padded prefill (seed 000): the prompt is padded at the end to a multiple of ``pad_multiple``, run
  in one pass, and every cache is trimmed back to the true prompt length. Causal attention makes
  the result identical to an unpadded prefill. Refused up front (ValueError, nothing run) for
  recurrent layers (a state cannot be un-mixed), chunked layers (a chunk boundary may drop live
  tokens; Llama 4 does not pad either), sliding layers whose window the padding would overflow,
  quantized caches with a full-precision window, and caches that already hold tokens.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field

import mlx.core as mx

from ..cache import QuantizedKVCache, make_caches
from ..cache.base import MX_DTYPES, mx_dtype
from ..calc.memory import parse_kv_dtype
from ..calc.tokens_fed import tokens_fed
from ..calc.units import DEFAULT_STEP, QUANT_BITS, dtype_key

__all__ = ["Generation", "StepTrace", "generate", "positions_fed", "prefill", "check_padded_prefill",
           "cache_dtypes", "kv_dtype_spec", "pick_token", "snapshot_bytes", "prompt_list"]


@dataclass(frozen=True)
class StepTrace:
    """One forward pass. Step 0 is the prefill; ``context_tokens`` = tokens in the context after the
    step (the caches' offset; for the no-cache baseline, the length of the sequence just fed)."""

    step: int
    positions_fed: int
    context_tokens: int
    nbytes: tuple[int, ...]          # per layer, allocated (0 for no cache)
    used_bytes: tuple[int, ...]      # per layer, bytes of the tokens/state actually held
    seconds: float

    @property
    def offset(self) -> int:
        """The caches' offset after the step (= context_tokens)."""
        return self.context_tokens

    @property
    def cache_nbytes(self) -> int:
        return sum(self.nbytes)

    @property
    def cache_used_bytes(self) -> int:
        return sum(self.used_bytes)


@dataclass
class Generation:
    """What :func:`generate` returns: the answer, the logits behind each token, counts and trace."""

    prompt: list[int]
    tokens: list[int]
    logits: mx.array                 # (A, vocab): the logits each answer token was picked from
    positions_fed: int
    cached: bool
    trace: list[StepTrace] = field(default_factory=list)
    caches: list | None = None

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.trace)

    @property
    def decode_seconds(self) -> float:
        """Time of the steps after the prefill."""
        return sum(s.seconds for s in self.trace[1:])


def positions_fed(prompt, answer, cached: bool) -> int:
    """Token positions fed to produce ``answer`` tokens: P + A - 1 cached, Σ_{k=1..A}(P + k - 1) not."""
    p = prompt if isinstance(prompt, int) else len(prompt)
    a = answer if isinstance(answer, int) else len(answer)
    return tokens_fed(p, a, cached)


def kv_dtype_spec(kv_dtype, model, group_size: int = 64, full_precision_tokens: int = 0,
                  scale_dtype: str | None = None):
    """The calculator's :class:`~kvsim.calc.memory.KVDtype` for what :func:`generate` stores."""
    scale = scale_dtype or dtype_key(model.dtype)
    return parse_kv_dtype(kv_dtype or dtype_key(model.dtype), group_size=group_size,
                          scale_dtype=scale, full_precision_tokens=full_precision_tokens)


def cache_dtypes(model, kv_dtype, scale_dtype: str | None = None):
    """(dtype K/V are written in, recurrent state dtype) for a kv_dtype name (None = model dtype)."""
    if kv_dtype is None:
        return model.dtype, model.dtype
    dt = parse_kv_dtype(kv_dtype)
    if dt.quantized:
        written = mx_dtype(scale_dtype) if scale_dtype else model.dtype
        return written, model.dtype
    if dt.name not in MX_DTYPES:
        raise ValueError(f"kv_dtype {kv_dtype!r} cannot be stored by MLX; accepted: "
                         f"{', '.join([*MX_DTYPES, *QUANT_BITS])}")
    return MX_DTYPES[dt.name], MX_DTYPES[dt.name]


def pick_token(logits: mx.array, temperature: float = 0.0, key=None) -> int:
    """argmax(logits) if temperature == 0, else argmax(logits / T + Gumbel noise from ``key``)."""
    if temperature == 0:
        return int(mx.argmax(logits).item())
    noise = mx.random.gumbel(logits.shape, key=key)
    return int(mx.argmax(logits.astype(mx.float32) / temperature + noise).item())


def prompt_list(prompt, vocab_size: int) -> list[int]:
    """The prompt as a list of ints; ValueError unless non-empty ids in [0, vocab_size)."""
    try:
        tokens = [operator.index(t) for t in (prompt.tolist() if isinstance(prompt, mx.array) else prompt)]
    except TypeError:
        tokens = None
    if not tokens or not all(0 <= t < vocab_size for t in tokens):
        raise ValueError(f"prompt must be a non-empty sequence of token ids in [0, {vocab_size})")
    return tokens


def snapshot_bytes(caches, n_layers) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if caches is None:
        return (0,) * n_layers, (0,) * n_layers
    return (tuple(0 if c is None else c.nbytes for c in caches),
            tuple(0 if c is None else c.used_bytes for c in caches))


def check_padded_prefill(spec, prompt_tokens: int, padded_tokens: int, rewind_tokens: int = 0) -> None:
    """ValueError (naming the layer) if padding a prompt to ``padded_tokens`` cannot be trimmed away exactly."""
    for i, layer in enumerate(spec.layers):
        if layer.kind == "recurrent":
            raise ValueError(f"padded prefill is not supported: layer {i} is recurrent "
                             f"(its state cannot be un-mixed); use pad_multiple=None")
        if layer.kind == "chunked":
            raise ValueError(f"padded prefill is not supported: layer {i} is chunked "
                             f"(trimming across a chunk boundary loses live tokens); use pad_multiple=None")
        if layer.kind == "sliding" and padded_tokens > layer.sliding_window + rewind_tokens:
            raise ValueError(f"pad_multiple: padded prompt of {padded_tokens} tokens exceeds layer {i}'s "
                             f"sliding_window {layer.sliding_window}; pad less or use pad_multiple=None")


def _check_padding_caches(caches, pad: int) -> None:
    """Padding needs fresh caches, and no full-precision window that the pads would push tokens out of."""
    for i, c in enumerate(caches):
        if c is not None and c.offset:
            raise ValueError(f"padded prefill needs empty caches; layer {i}'s holds {c.offset} tokens")
        if pad and isinstance(c, QuantizedKVCache) and c.full_precision_tokens:
            raise ValueError(f"padded prefill is not supported with full_precision_tokens "
                             f"{c.full_precision_tokens} (layer {i}): the pads would push prompt tokens "
                             f"into the quantized part; use pad_multiple=None")


def prefill(model, prompt: list[int], caches, kv_dtype=None, pad_multiple: int | None = None,
            pad_token: int = 0) -> mx.array:
    """Feed the prompt in one pass; return the logits (vocab,) at the prompt's last true position.

    With ``pad_multiple`` the prompt is padded at the end to a multiple of it and the caches are
    trimmed by the padding afterwards (checked up front by :func:`check_padded_prefill`).
    """
    n = len(prompt)
    pad = 0
    if pad_multiple is not None:
        if not isinstance(pad_multiple, int) or pad_multiple < 1:
            raise ValueError(f"pad_multiple must be a positive integer or None, got {pad_multiple!r}")
        pad = -n % pad_multiple
        _check_padding_caches(caches, pad)
        rewind = min((getattr(c, "rewind_tokens", 0) for c in caches if c is not None), default=0)
        check_padded_prefill(model.spec, n, n + pad, rewind)
    logits = model(mx.array([prompt + [pad_token] * pad]), caches, kv_dtype)
    for c in caches:
        if c is not None and pad:
            c.trim(pad)
    return logits[0, n - 1]


def generate(model, prompt, max_new_tokens: int, caches="auto", *, temperature: float = 0.0,
             seed: int = 0, kv_dtype: str | None = None, group_size: int = 64,
             full_precision_tokens: int = 0, scale_dtype: str | None = None, step: int = DEFAULT_STEP,
             pad_multiple: int | None = None, trace: bool = True, compiled: bool | None = None) -> Generation:
    """Prefill + decode (``caches="auto"`` or a list) or the no-cache baseline (``caches=None``).

    ``compiled``: decode steps through ``model.compiled_step()`` (same logits); None = on a GPU only, where it
    is measured faster (benchmarks/results/roofline_cuda.md: 0.93 x mlx-lm's step, geometric mean of 40 points).
    On a CPU the eager step stays the default: no clean CPU measurement shows compile helping there.
    """
    prompt = prompt_list(prompt, model.spec.vocab_size)
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    written, state_dtype = cache_dtypes(model, kv_dtype, scale_dtype)
    if isinstance(caches, str):
        if caches != "auto":
            raise ValueError(f"caches must be 'auto', None or a list of caches, got {caches!r}")
        caches = make_caches(model.spec, kv_dtype=kv_dtype, step=step, dtype=state_dtype,
                             group_size=group_size, full_precision_tokens=full_precision_tokens)
    if compiled is None:
        compiled = mx.default_device() == mx.gpu
    forward = model.compiled_step() if compiled and caches is not None else model
    keys = mx.random.split(mx.random.key(seed), max_new_tokens) if temperature else [None] * max_new_tokens
    out, logits_seen, steps, fed = [], [], [], 0
    for i in range(max_new_tokens):
        start = time.perf_counter()
        logits, n_fed = _step_logits(model, prompt, out, caches, written, pad_multiple, forward)
        mx.eval(logits)
        out.append(pick_token(logits, temperature, keys[i]))
        seconds = time.perf_counter() - start
        fed += n_fed
        logits_seen.append(logits)
        if trace:
            nb, used = snapshot_bytes(caches, len(model.blocks))
            steps.append(StepTrace(i, n_fed, len(prompt) + i, nb, used, seconds))
    return Generation(prompt, out, mx.stack(logits_seen), fed, caches is not None, steps, caches)


def _step_logits(model, prompt: list[int], out: list[int], caches, written, pad_multiple, forward=None):
    """Logits (vocab,) for the next token and the positions fed to get them.

    No cache: the whole sequence again. With caches: the prompt first (prefill), then the last token
    through ``forward`` (the model, or its compiled step).
    """
    if caches is None:
        seq = prompt + out
        return model(mx.array([seq]))[0, -1], len(seq)
    if not out:
        return prefill(model, prompt, caches, written, pad_multiple), len(prompt)
    return (forward or model)(mx.array([[out[-1]]]), caches, written)[0, -1], 1
