"""Checking a learner's answer: a friendly verdict instead of an assert.

Contract (pure, no MLX / matplotlib / ipywidgets)
- An :class:`Exercise` has a key ("02.1"), a title, a unit, a hint and a ``solve()`` that asks kvsim
  for the expected value and returns a :class:`Solution`: the value, its derivation (one line with the
  config numbers plugged in) and known slips, each a wrong value with what it means
  ("you used num_attention_heads ...").
- :func:`verdict` compares an answer with the solution and returns a :class:`Verdict`; it never raises
  on a learner's input: None means "not answered yet" (the placeholder lessons ship with), a
  non-number is named, a wrong number gets the matching slip or else its factor or percentage off,
  and the hint. The expected value and its derivation are shown only when ``reveal`` is true (the
  caller's second miss, or the learner asks): a first miss diagnoses without giving the answer away.
- A number is right when it is within ``rel_tol`` of the expected value (exact for integers,
  0.1 % by default for fractions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Callable

_FACTORS = (2, 3, 4, 8, 10, 16, 32, 64, 100, 128, 1000, 1024, 2**20, 2**30)


@dataclass(frozen=True)
class Solution:
    """What kvsim computes for an exercise: value, derivation, and wrong values with their meaning."""

    value: float
    derivation: str
    slips: tuple[tuple[float, str], ...] = ()


@dataclass(frozen=True)
class Exercise:
    """One "your turn" question of a lesson; ``solve()`` asks kvsim for the answer."""

    key: str
    title: str
    unit: str
    hint: str
    solve: Callable[[], Solution]
    rel_tol: float | None = None  # None: exact for integer answers, 1e-3 otherwise


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: ok is None (not answered), True or False; message is what to print."""

    key: str
    ok: bool | None
    message: str
    expected: float = field(default=0.0, compare=False)


def _fmt(x: float) -> str:
    """1,234 for integers, 3 significant decimals otherwise."""
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.4g}" if abs(x) >= 1 else f"{x:.4g}"


def _close(a: float, b: float, rel_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12 if rel_tol else 1e-9)


def _tolerance(ex: Exercise, expected: float) -> float:
    if ex.rel_tol is not None:
        return ex.rel_tol
    return 0.0 if float(expected).is_integer() else 1e-3


def _what_is_off(answer: float, sol: Solution, tol: float) -> str:
    """The matching slip, else the factor or percentage by which the answer is off."""
    for wrong, meaning in sol.slips:
        if _close(answer, wrong, max(tol, 1e-9)):
            return meaning
    if answer <= 0 < sol.value:
        return "the answer should be a positive number."
    ratio = answer / sol.value if sol.value else math.inf
    for f in _FACTORS:
        for r, word in ((f, "too large"), (1 / f, "too small")):
            if math.isclose(ratio, r, rel_tol=1e-6):
                return f"{_fmt(f)}× {word}: look for a factor of {_fmt(f)} you added or left out."
    if abs(ratio - 1) < 0.1:
        return (f"close ({100 * (ratio - 1):+.1f} %): check rounding, and binary (GiB = 2**30 B) "
                "against decimal (GB = 10**9 B) units.")
    return f"{ratio:.3g}× the expected value: recompute step by step with the hint."


def verdict(ex: Exercise, answer, reveal: bool = False) -> Verdict:
    """Compare ``answer`` with what kvsim computes for ``ex``; never raises on the learner's input.

    A wrong answer gets the diagnosis and the hint; kvsim's value and derivation only with ``reveal``.
    """
    head = f"{ex.key} · {ex.title}"
    if answer is None:
        return Verdict(ex.key, None, f"{head}\n  not answered yet: put your number ({ex.unit}) in place of None "
                                     f"and run both cells again.\n  hint: {ex.hint}")
    if isinstance(answer, bool) or not isinstance(answer, Real):
        try:  # numpy scalars and 0-d arrays are numbers too
            answer = float(answer)
        except (TypeError, ValueError):
            return Verdict(ex.key, False, f"{head}\n  expected a number ({ex.unit}), got "
                                          f"{type(answer).__name__} {answer!r}.\n  hint: {ex.hint}")
    sol = ex.solve()
    answer, tol = float(answer), _tolerance(ex, sol.value)
    if not math.isfinite(answer):
        return Verdict(ex.key, False, f"{head}\n  expected a finite number ({ex.unit}), got {answer}.",
                       sol.value)
    if _close(answer, sol.value, tol):
        return Verdict(ex.key, True, f"{head}\n  correct: {_fmt(sol.value)} {ex.unit}\n  kvsim: {sol.derivation}",
                       sol.value)
    diagnosis = f"{head}\n  not yet: you have {_fmt(answer)} {ex.unit}.\n  what is off: {_what_is_off(answer, sol, tol)}"
    if reveal:
        return Verdict(ex.key, False, f"{diagnosis}\n  kvsim has {_fmt(sol.value)} {ex.unit}: {sol.derivation}",
                       sol.value)
    return Verdict(ex.key, False, f"{diagnosis}\n  hint: {ex.hint}\n  (try again; the answer shows after a second "
                                  "miss, or with reveal=True)", sol.value)
