"""The numbers a lesson's prose may type without printing them: seed and paper figures, each recomputed.

Contract (pure: no MLX, matplotlib or ipywidgets)
- Every number with a unit in a lesson's markdown comes from code in that notebook (tests/test_prose_numbers.py),
  except the :class:`Literal` entries listed here: a figure a seed or a paper states, which the lesson quotes.
- Each entry names its lesson ("02"), the text exactly as the prose writes it ("26 GB"), its source, and
  ``shown()``: kvsim's own computation of that figure, formatted as the prose writes it. The test checks that
  ``shown() == text`` and that the text is in the lesson, so a quoted figure that kvsim disagrees with fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Literal:
    """A figure a lesson quotes from a seed or a paper, with kvsim's computation of it."""

    lesson: str
    text: str
    source: str
    shown: Callable[[], str]


LITERALS: tuple[Literal, ...] = ()
