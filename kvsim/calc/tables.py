"""Plain-text tables for lessons and the CLI: deterministic, so nbval can compare them.

Contract: :func:`format_table` takes rows (dicts) and returns an aligned text table; numbers are
right-aligned, integers get thousands separators, floats are printed with ``digits`` decimals.
"""

from __future__ import annotations

from numbers import Integral, Real


def _cell(value, digits: int) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, Integral):
        return f"{int(value):,}"
    if isinstance(value, Real):
        return f"{float(value):,.{digits}f}"
    return str(value)


def format_table(rows: list[dict], columns: list[str] | None = None, digits: int = 2) -> str:
    """Rows of dicts as an aligned table with a header rule."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    cells = [[_cell(row.get(c), digits) for c in columns] for row in rows]
    numeric = [all(isinstance(row.get(c), Real) and not isinstance(row.get(c), bool) for row in rows if row.get(c) is not None)
               for c in columns]
    widths = [max(len(str(c)), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line([str(c) for c in columns]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])
