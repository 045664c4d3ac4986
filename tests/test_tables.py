"""The one table renderer: plain text for lessons and the CLI, markdown for capacity tables."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvsim.calc.tables import format_table
from kvsim.calc.units import InputError, format_bytes

ROWS = [{"name": "a", "tokens": 8192, "share": 0.5, "ok": True, "note": None},
        {"name": "long name", "tokens": 16, "share": 12.25, "ok": False, "note": "x|y"}]


def test_text_aligns_numbers_right_and_words_left():
    assert format_table(ROWS).splitlines() == [
        "name       tokens  share  ok     note",
        "---------  ------  -----  -----  ----",
        "a           8,192   0.50  True",
        "long name      16  12.25  False  x|y",
    ]


def test_markdown_marks_numeric_columns_and_escapes_pipes():
    assert format_table(ROWS, columns=["name", "tokens", "note"], digits=1, style="markdown").splitlines() == [
        "| name | tokens | note |",
        "|---|---:|---|",
        "| a | 8,192 |  |",
        "| long name | 16 | x\\|y |",
    ]


def test_formats_render_one_column_and_skip_missing_values():
    rows = [{"model": "m", "kv": 2**30}, {"model": "n", "kv": None}]
    text = format_table(rows, formats={"kv": format_bytes}).splitlines()
    assert text[2].endswith("1 GiB") and text[3] == "n"


def test_no_rows_and_unknown_style():
    assert format_table([]) == format_table([], style="markdown") == "(no rows)"
    with pytest.raises(InputError, match="style 'html'"):
        format_table(ROWS, style="html")


@given(st.lists(st.fixed_dictionaries({"k": st.integers(-10**9, 10**9), "s": st.text("abc xyz", max_size=6)}),
                min_size=1, max_size=6))
def test_text_and_markdown_hold_the_same_cells(rows):
    text = format_table(rows, columns=["k", "s"]).splitlines()[2:]
    md = format_table(rows, columns=["k", "s"], style="markdown").splitlines()[2:]
    assert len(text) == len(md) == len(rows)
    for t, m, row in zip(text, md, rows):
        k, s = m[2:-2].split(" | ")
        assert k == f"{row['k']:,}" and s == row["s"] and t.strip().startswith(k)
        assert t.endswith(s.rstrip())  # text pads and strips the line end; markdown keeps the cell as is
