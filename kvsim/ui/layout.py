"""Layout of a view's figure, computed from what the last render inked: nothing cropped, little wasted.

Contract
- :func:`wrap_titles` breaks an Axes title that would run off the figure into lines that fit (one text
  measurement per line; matplotlib's own ``wrap=True`` measures every prefix of every line on every draw).
- :func:`fit` takes the box of everything drawn outside the Axes clip (tick labels, axis labels, titles,
  legends, annotations; :class:`kvsim.widgets.render.FrameRenderer` records it) and moves the Axes so that
  box lies TARGET_PX inside the figure's edges. It only moves them when something comes closer than PAD_PX
  to an edge or a side wastes more than SLACK_PX, so most slider moves keep the layout and cost one render;
  no layout engine pass (constrained layout doubled the redraw time).
- Several Axes move together: their bounding rectangle is mapped onto the fitted one.
- An Axes with a fixed aspect (a picture drawn with ``set_aspect("equal")``) fills its box in one direction
  only; the room it leaves in the other is not counted as waste, else every render would refit in vain.
"""

from __future__ import annotations

import math
import textwrap

from matplotlib.figure import Figure
from matplotlib.text import _get_text_metrics_with_cache
from matplotlib.transforms import Bbox, BboxTransform

PAD_PX = 6        # at least this many free pixels between the ink and each edge (a frameless legend pads ~4)
SLACK_PX = 32     # a side with more free pixels than this is tightened
TARGET_PX = 10    # a refit puts the ink this far from each edge: labels may grow 4 px or shrink 22 px before the next
MIN_FRACTION = 0.3  # the Axes keep at least this share of the figure in each direction


def _titles(ax):
    return [t for t in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None))
            if t is not None and t.get_text()]


def _wrap(text: str, room: float, width) -> str:
    """``text`` with every line wider than ``room`` pixels broken at spaces into the fewest lines of about
    equal length that fit (no one-word orphan line)."""
    out = []
    for line in text.split("\n"):
        parts = [line]
        lines = math.ceil(width(line) / room)
        while lines > 1 and any(width(p) > room for p in parts) and lines <= len(line.split()):
            chars = math.ceil(len(line) / lines)
            while len(parts := textwrap.wrap(line, chars, break_long_words=False)) > lines:
                chars += 1  # the narrowest wrap into `lines` lines
            lines += 1  # in case one of them is still too wide
        out += parts
    return "\n".join(out)


def wrap_titles(fig: Figure, renderer):
    """Break Axes titles wider than the figure allows around their anchor into lines that fit.

    With nothing above the Axes (x ticks and label at the bottom, no y offset text in the last render) the
    title stays at its place on top of the Axes, without matplotlib measuring both axes again on every
    render to look for something to dodge (a fifth of a render).
    """
    dpi, width = fig.dpi, fig.bbox.width
    for ax in fig.axes:
        for title in _titles(ax):
            anchor = ax.bbox.x0 + title.get_position()[0] * ax.bbox.width
            ha = title.get_horizontalalignment()
            room = {"left": width - anchor, "right": anchor}.get(ha, 2 * min(anchor, width - anchor)) - 2 * PAD_PX
            prop = title.get_fontproperties()
            text = _wrap(title.get_text(), room,
                         lambda s: _get_text_metrics_with_cache(renderer, s, prop, False, dpi)[0])
            if text != title.get_text():
                title.set_text(text)
        nothing_above = (ax.xaxis.get_ticks_position() == "bottom" and ax.xaxis.get_label_position() == "bottom"
                         and not ax.yaxis.offsetText.get_text())
        ax._autotitlepos = not nothing_above  # matplotlib's own switch (set_title(y=...) turns it off)
        if nothing_above:
            for title in _titles(ax):
                title.set_y(1.0)


def _excess(ink: Bbox, width: float, height: float, pad: float) -> tuple[float, float, float, float]:
    """Pixels by which the ink passes ``pad`` from each figure edge (left, bottom, right, top); negative = room."""
    return pad - ink.x0, pad - ink.y0, ink.x1 - (width - pad), ink.y1 - (height - pad)


def _aspect_room(axes, width: float, height: float) -> tuple[bool, bool]:
    """(x, y): whether every Axes is narrower (x) or lower (y) than its box by more than a pixel, which a
    fixed aspect does (matplotlib shrinks the Axes inside the box it was given and centres it)."""
    room = [True, True]
    for ax in axes:
        box, active = ax.get_position(original=True), ax.get_position()
        room[0] &= (box.width - active.width) * width > 1
        room[1] &= (box.height - active.height) * height > 1
    return room[0], room[1]


def fit(fig: Figure, ink: Bbox | None) -> bool:
    """Move the Axes so ``ink`` (display pixels) fits in the figure; True if they moved (render again)."""
    axes = [ax for ax in fig.axes if ax.get_visible()]
    if ink is None or not axes:
        return False
    width, height = fig.bbox.width, fig.bbox.height
    x_room, y_room = _aspect_room(axes, width, height)
    free = (x_room, y_room, x_room, y_room)  # left, bottom, right, top: room there is the aspect's, not waste
    if all((f or -(SLACK_PX - PAD_PX) <= e) and e <= 0 for e, f in zip(_excess(ink, width, height, PAD_PX), free)):
        return False
    old = Bbox.union([ax.get_position() for ax in axes])
    left, bottom, right, top = _excess(ink, width, height, TARGET_PX)
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
