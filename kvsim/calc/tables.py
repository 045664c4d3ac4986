"""kvsim's one table renderer: rows of dicts as plain text or markdown, deterministic (nbval compares them).

Contract: :func:`format_table` takes rows (dicts) and returns a table in one of ``STYLES``:
- ``"text"``: columns padded to a common width under a rule of dashes (what lessons and the CLI print);
- ``"markdown"``: a GitHub-flavoured table (``| a | b |``, a ``---:`` rule under numeric columns).
A column is numeric (right-aligned) when every value it holds, ``None`` aside, is a number (a bool is not).
Cells: integers get thousands separators, floats ``digits`` decimals, ``None`` an empty cell;
``formats={column: function}`` renders that column's values (not ``None``) with ``function(value) -> str``.
No rows give ``"(no rows)"``.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Callable

from .units import InputError

STYLES = ("text", "markdown")


def _cell(value, digits: int, fmt=None) -> str:
    if value is None:
        return ""
    if fmt is not None:
        return fmt(value)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Integral):
        return f"{int(value):,}"
    if isinstance(value, Real):
        return f"{float(value):,.{digits}f}"
    return str(value)


def _is_numeric(rows: list[dict], column) -> bool:
    values = [row.get(column) for row in rows if row.get(column) is not None]
    return all(isinstance(v, Real) and not isinstance(v, bool) for v in values)


def _text(columns, cells, numeric) -> str:
    widths = [max(len(str(c)), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line([str(c) for c in columns]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells])


def _markdown(columns, cells, numeric) -> str:
    def line(values):  # a "|" inside a cell would end it: escape it
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    rule = "|" + "|".join("---:" if num else "---" for num in numeric) + "|"
    return "\n".join([line(columns), rule] + [line(r) for r in cells])


def format_table(rows: list[dict], columns: list[str] | None = None, digits: int = 2, style: str = "text",
                 formats: dict[str, Callable[[object], str]] | None = None) -> str:
    """Rows of dicts as a ``style`` table (see the module docstring); ``columns`` default to the first row's keys."""
    if style not in STYLES:
        raise InputError(f"style {style!r} is not one of {', '.join(STYLES)}")
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0])
    formats = formats or {}
    cells = [[_cell(row.get(c), digits, formats.get(c)) for c in columns] for row in rows]
    numeric = [_is_numeric(rows, c) for c in columns]
    return (_text if style == "text" else _markdown)(columns, cells, numeric)
