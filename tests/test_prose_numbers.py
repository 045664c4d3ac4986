"""No hand-typed number in a lesson's prose: each comes from code in that notebook, or from the table of literals.

A *prose number* is a number with a unit in a markdown cell of a lesson: bytes (B, KiB, MiB, GiB, TiB, KB, MB,
GB, TB, bytes, 바이트), tokens (tokens, 토큰, and computed thousands such as 15.7K), time (ms, µs), bandwidth
(GB/s, TB/s), a factor written against its number (5.3×; "2 × L" is a formula, not a claim) or a share (%).
Context lengths written as round thousands (8K, 128K) are settings, not results, and are not prose numbers.

Each prose number must, as written (commas and decimals included),
- appear in an output of a code cell of the same notebook (the code printed it; a whole number below 100 with
  its unit, since a bare "4" is printed somewhere in any notebook), or
- appear in that notebook's code (an input the learner sees set, such as ``window = 1024``), or
- be listed for that lesson in :data:`kvsim.lessons.literals.LITERALS` with its source (a seed's or a paper's
  figure), where this test recomputes it from the package.
"""

import json
import re
from pathlib import Path

import pytest

from kvsim.lessons.literals import LITERALS

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

NUMBER = r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
UNIT = (r"(?:[ \u00a0]?(?:KiB|MiB|GiB|TiB|KB|MB|GB/s|TB/s|GB|TB|bytes?|바이트|tokens?|토큰|ms|µs|%|B)(?![\w/])"
        r"|×|(?<=\.\d)K\b|(?<=\.\d\d)K\b)")
PROSE_NUMBER = re.compile(NUMBER + "(" + UNIT + ")")


def prose_numbers(markdown: str) -> list[str]:
    """The prose numbers of one markdown text, as written ("3.81 MiB", "5.3×", "15.7K")."""
    return [m.group(0) for m in PROSE_NUMBER.finditer(markdown)]


def _texts(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts += ["".join(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]
    return "\n".join(parts)


def _contains_number(haystack: str, number: str) -> bool:
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)", haystack) is not None


# units that name the same quantity: a prose "1,000 tokens" is explained by a printed "1,000 토큰"
SAME_UNIT = {"token": "tokens", "토큰": "tokens", "byte": "bytes", "바이트": "bytes", "B": "bytes", "x": "×"}


def _unit(text: str) -> str:
    unit = text.strip().rstrip("s") if text.strip() not in ("ms", "µs", "GB/s", "TB/s") else text.strip()
    return SAME_UNIT.get(unit, unit)


def _printed_with_unit(printed: str, number: str, unit: str) -> bool:
    """The number followed by the same unit (or a K for thousands) somewhere in the printed outputs."""
    for m in re.finditer(rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)\s?(\S*)", printed):
        after = m.group(1)
        if unit == "K" and after.startswith("K"):
            return True
        head = re.match(r"(KiB|MiB|GiB|TiB|KB|MB|GB/s|TB/s|GB|TB|bytes?|바이트|tokens?|토큰|ms|µs|%|×|x|B)", after)
        if head and _unit(head.group(1)) == unit:
            return True
    return False


def unexplained(path: Path) -> list[str]:
    """Prose numbers of a lesson that no code cell prints or sets and LITERALS does not list."""
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    printed = "\n".join(_texts(c) for c in code)
    typed = "\n".join("".join(c["source"]) for c in code)
    listed = {lit.text for lit in LITERALS if lit.lesson == path.name[:2]}
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for text in prose_numbers("".join(cell["source"])):
            m = PROSE_NUMBER.match(text)
            number, unit = m.group(1), _unit(m.group(2))
            # a distinctive number (three or more digits, or a decimal) printed anywhere explains it, as in a table
            # whose column names the unit; a small whole number must be printed with its unit
            distinctive = "." in number or len(number.replace(",", "")) >= 3
            if text in listed or (_contains_number(printed, number) if distinctive else
                                  _printed_with_unit(printed, number, unit)) or _contains_number(typed, number):
                continue
            found.append(f"cell {i}: {text}")
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_prose_number_comes_from_code_or_the_literal_table(path):
    assert unexplained(path) == [], (
        f"{path.name}: numbers typed into the prose; print them from code, or list them with their source in "
        "kvsim/lessons/literals.py")


@pytest.mark.parametrize("literal", LITERALS, ids=lambda lit: f"{lit.lesson}:{lit.text}")
def test_each_literal_is_in_its_lesson_and_equals_the_package(literal):
    lesson = next(p for p in LESSONS if p.name.startswith(literal.lesson + "_"))
    markdown = "\n".join("".join(c["source"]) for c in json.loads(lesson.read_text())["cells"]
                         if c["cell_type"] == "markdown")
    assert literal.text in prose_numbers(markdown), f"{literal.text!r} is not a prose number of {lesson.name}"
    assert literal.shown() == literal.text, f"{literal.source}: kvsim gives {literal.shown()!r}"
    assert literal.source.strip()


def test_the_extraction_finds_what_it_should():
    text = ("32 layers hold 3.81 MiB, 1,499,500 토큰, 5.3× less, 2 × L × H, 65 %, 23.8 ms at 3.35 TB/s; "
            "a 128K context, 15.7K tokens, v0.92, 4 KV heads")
    assert prose_numbers(text) == ["3.81 MiB", "1,499,500 토큰", "5.3×", "65 %", "23.8 ms", "3.35 TB/s",
                                   "15.7K"]
    assert _contains_number("held 3.81 MiB", "3.81") and not _contains_number("13.812", "3.81")
    assert not _contains_number("1,499,5000", "1,499,500")
