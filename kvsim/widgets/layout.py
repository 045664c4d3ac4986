"""Layout of a view's figure, computed from what the last render inked: nothing cropped, little wasted.

Contract
- :func:`wrap_titles` lets every Axes title wrap at the figure's edges (a long title becomes two lines
  instead of running off the canvas).
- :func:`fit` takes the box of everything drawn outside the Axes clip (tick labels, axis labels, titles,
  legends, annotations; :class:`kvsim.widgets.render.FrameRenderer` records it) and moves the Axes so that
  box lies inside the figure with PAD_PX to spare. It only moves them when something pokes past the pad or
  a side wastes more than SLACK_PX, so most slider moves keep the layout and cost one render; no layout
  engine pass (constrained layout doubled the redraw time).
- Several Axes move together: their bounding rectangle is mapped onto the fitted one.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.transforms import Bbox, BboxTransform

PAD_PX = 6        # free pixels kept between the ink and each edge of the figure (a frameless legend pads ~4)
SLACK_PX = 16     # a side with more free pixels than this is tightened
MIN_FRACTION = 0.3  # the Axes keep at least this share of the figure in each direction


def wrap_titles(fig: Figure):
    """Wrap Axes titles at the figure edges (matplotlib measures and breaks them when drawing)."""
    for ax in fig.axes:
        for title in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None)):
            if title is not None and title.get_text():
                title.set_wrap(True)


def _excess(ink: Bbox, width: float, height: float) -> tuple[float, float, float, float]:
    """Pixels by which the ink passes the padded figure edge (left, bottom, right, top); negative = room."""
    return PAD_PX - ink.x0, PAD_PX - ink.y0, ink.x1 - (width - PAD_PX), ink.y1 - (height - PAD_PX)


def fit(fig: Figure, ink: Bbox | None) -> bool:
    """Move the Axes so ``ink`` (display pixels) fits in the figure; True if they moved (render again)."""
    axes = [ax for ax in fig.axes if ax.get_visible()]
    if ink is None or not axes:
        return False
    width, height = fig.bbox.width, fig.bbox.height
    excess = _excess(ink, width, height)
    if all(-SLACK_PX <= e <= 0.5 for e in excess):
        return False
    old = Bbox.union([ax.get_position() for ax in axes])
    left, bottom, right, top = excess
    x0, x1 = old.x0 + left / width, old.x1 - right / width
    y0, y1 = old.y0 + bottom / height, old.y1 - top / height
    if x1 - x0 < MIN_FRACTION or y1 - y0 < MIN_FRACTION:
        return False  # cannot fit by moving the Axes (e.g. a legend wider than the figure): the tests catch it
    new = Bbox([[x0, y0], [x1, y1]])
    if all(abs(a - b) < 1e-4 for a, b in zip(old.extents, new.extents)):
        return False
    move = BboxTransform(old, new)
    for ax in axes:
        ax.set_position(Bbox(move.transform(ax.get_position().get_points())))
    return True
