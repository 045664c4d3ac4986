"""Every figure a notebook stores (cell outputs included, not only views): nothing cut off, nothing shown twice.

- Cut off: a figure whose drawing touches the image's edge lost what lay beyond it (a panel, a label, a
  legend). Every stored PNG must have a background-only band ``EDGE_PX`` wide on all four sides; a pixel counts
  as drawn when it differs from the corner pixel (the background) by more than ``INK`` in the sum of R, G, B.
- Shown twice: a static figure followed by a view's fallback of the same figure at the same defaults. Two
  stored PNGs of one notebook are the same figure when, trimmed to their drawing and scaled to 96 × 48 grey
  levels, they differ by less than ``SAME_FIGURE`` on average (0 = identical, 1 = black on white); different
  figures of these lessons differ by 0.03 or more, the same one redrawn by under 0.02.
"""

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
EDGE_PX = 2
INK = 30
SAME_FIGURE = 0.02


def stored_pngs(path: Path) -> list[tuple[int, np.ndarray]]:
    """[(cell index, RGB array (H, W, 3))] for every image/png output of the notebook, in order."""
    found = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                image = Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB")
                found.append((i, np.asarray(image, dtype=np.int32)))
    return found


def ink(rgb: np.ndarray) -> np.ndarray:
    """(H, W) bool: pixels that differ from the background (the top-left pixel)."""
    return np.abs(rgb - rgb[0, 0]).sum(axis=-1) > INK


def edges_drawn(rgb: np.ndarray) -> list[str]:
    """The sides whose outer EDGE_PX band holds drawing."""
    drawn = ink(rgb)
    bands = {"top": drawn[:EDGE_PX], "bottom": drawn[-EDGE_PX:], "left": drawn[:, :EDGE_PX],
             "right": drawn[:, -EDGE_PX:]}
    return [side for side, band in bands.items() if band.any()]


def signature(rgb: np.ndarray) -> np.ndarray:
    """(48, 96) grey levels in [0, 1] of the drawing's bounding box: the figure, whatever its margins."""
    drawn = ink(rgb)
    rows, cols = np.flatnonzero(drawn.any(axis=1)), np.flatnonzero(drawn.any(axis=0))
    if rows.size:
        rgb = rgb[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
    grey = Image.fromarray(rgb.astype(np.uint8)).convert("L").resize((96, 48))
    return np.asarray(grey, dtype=float) / 255


def same_figures(pngs) -> list[tuple[int, int, float]]:
    """[(cell a, cell b, distance)] for the pairs of stored PNGs that are the same figure."""
    sigs = [(cell, signature(rgb)) for cell, rgb in pngs]
    pairs = []
    for k, (a, sa) in enumerate(sigs):
        for b, sb in sigs[k + 1:]:
            distance = float(np.abs(sa - sb).mean())
            if distance < SAME_FIGURE:
                pairs.append((a, b, round(distance, 4)))
    return pairs


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_no_stored_figure_is_cut_off(path):
    cut = [(cell, sides) for cell, rgb in stored_pngs(path) if (sides := edges_drawn(rgb))]
    assert cut == [], f"{path.name}: figures drawn up to the image's edge (cell, sides): {cut}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_no_figure_is_shown_twice(path):
    twice = same_figures(stored_pngs(path))
    assert twice == [], f"{path.name}: the same figure stored twice (cell, cell, distance): {twice}"


def _figure(draw_right_edge=False, shift=0):
    rgb = np.full((60, 120, 3), 255, dtype=np.int32)
    rgb[20:40, 30 + shift:80 + shift] = 0  # a black box
    rgb[10:50, 50 + shift] = (200, 0, 0)
    if draw_right_edge:
        rgb[25:35, 100:] = 0  # a panel running off the right side
    return rgb


def test_the_checks_catch_what_they_are_for():
    assert edges_drawn(_figure()) == []
    assert edges_drawn(_figure(draw_right_edge=True)) == ["right"]
    # the same drawing with other margins is the same figure; another drawing is not
    assert same_figures([(1, _figure()), (2, _figure(shift=15))]) == [(1, 2, 0.0)]
    other = _figure()
    other[20:40, 30:80] = 255
    other[5:55, 10:20] = 0
    assert same_figures([(1, _figure()), (2, other)]) == []
