"""The one bisection, and the one bound on token counts every "first T at which ..." search uses.

Contract (pure; the predicates are monotone: false up to some point, true from it on, or the reverse)
- :data:`T_MAX` = 2**40 tokens: the search bound, far beyond any real context. A predicate still unmet at
  ``T_MAX`` is never met (e.g. a cache whose every layer is windowed stops growing).
- :func:`first_true` (predicate false at ``low``, true at ``high``): the smallest j in (low, high] with
  predicate(j), in ⌈log2(high − low)⌉ calls; the bounds themselves are never called.
- :func:`last_true` (predicate true at ``low``, false at ``high``): the largest j in [low, high) with
  predicate(j); ``first_true`` of the negation, minus one.
- :func:`first_tokens`: the smallest T in [0, T_MAX] with predicate(T), None when predicate(T_MAX) is false.
"""

from __future__ import annotations

from collections.abc import Callable

T_MAX = 2**40  # tokens: the search bound for contexts


def first_true(predicate: Callable[[int], bool], low: int, high: int) -> int:
    """Smallest j in (low, high] with predicate(j); predicate(low) is taken as false, predicate(high) as true.

    Bisection: keep predicate(low) false and predicate(high) true, halve (low, high] until high = low + 1.
    """
    while high - low > 1:
        mid = (low + high) // 2
        if predicate(mid):
            high = mid
        else:
            low = mid
    return high


def last_true(predicate: Callable[[int], bool], low: int, high: int) -> int:
    """Largest j in [low, high) with predicate(j); predicate(low) is taken as true, predicate(high) as false
    (high may be out of range: it is never called). = first_true(not predicate, low, high) − 1."""
    return first_true(lambda j: not predicate(j), low, high) - 1


def first_tokens(predicate: Callable[[int], bool]) -> int | None:
    """Smallest T in [0, T_MAX] with predicate(T) (0 when it holds at once), or None when even T_MAX fails."""
    if predicate(0):
        return 0
    if not predicate(T_MAX):
        return None
    return first_true(predicate, 0, T_MAX)
