"""Write docs/engines.md from kvsim.calc.engines_all.RULES (the same rules ``kvsim calc --engine all`` prints).

Usage: python tools/write_engines_doc.py   (tests/test_engines_all.py checks the committed page equals it)
"""

from pathlib import Path

from kvsim.calc.engines_all import engines_markdown

if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
    path.write_text(engines_markdown(), encoding="utf-8")
    print(f"wrote {path}")
