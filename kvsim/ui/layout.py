"""Layout of a view's figure: computed by matplotlib's constrained layout once per structure, then frozen.

Contract
- :func:`fixed_titles`: a context in which Axes made or cleared, and titles set, keep their titles just above
  the Axes (``rcParams["axes.titley"] = 1.0``). Otherwise every draw measures both axes again to look for
  decorations above the Axes to dodge (a sixth of a render); a view's pictures have none (the no-overlap test
  checks every view, and the redraw test compares with titles placed automatically).
- :func:`wrap_titles` breaks an Axes title that would run off the figure into lines that fit (one text
  measurement per line, memoized; matplotlib's own ``wrap=True`` measures every prefix of every line on every
  draw, and constrained layout counts a title's height only, not its width).
- :func:`freeze` runs the constrained layout engine once (``fig.get_layout_engine().execute(fig)``) and then
  leaves the figure without a layout engine (``"none"``), so the renders that follow cost no layout pass.
- :class:`FrozenLayout` renders a figure and lays it out again only when it must: when its structure changed
  (:func:`structure`: which decorations each Axes has, not its data; :func:`reaching`: which of its legend and
  unclipped artists reach beyond it, measured when one was shown or hidden), or when what the render inked
  (:class:`kvsim.ui.render.FrameRenderer` records it) came closer than PAD_PX to an edge of the figure,
  nearer than the layout left it, or left SLACK_PX more room on a side than the layout left (labels grew or
  shrank with the data). Most slider moves keep the layout and cost one render.
- Before each render the axis labels are placed and pinned (:func:`kvsim.ui.labels.pin_labels`); when a placed
  axis label, or a tick label at an end of its axis, would already come closer than PAD_PX to an edge (and
  than the layout left it), the figure is laid out before the render instead of after it (one render, not
  two); so it is when an axis without a label has a tick label that far out (the widest category name of a
  bar chart), or a title wrapped into more lines than at the layout would. :func:`reaching` skips the layout
  of plain texts that lie well inside their Axes (:func:`surely_inside`).
"""

from __future__ import annotations

import math
import textwrap

import matplotlib as mpl
from matplotlib import cbook
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text

from .labels import pin_labels
from .render import FrameRenderer

PAD_IN = 4 / 72   # constrained layout's room around the decorations and between Axes (matplotlib's default: 3 pt)
PAD_PX = 2        # ink closer than this to an edge, and closer than the layout left it, makes a new layout
SLACK_PX = 32     # a side with this many more free pixels than the layout left makes a new layout
MAX_PASSES = 3    # layout passes per relayout at most (a pass that re-wraps a title asks for another)
TITLE_MARGIN_PX = 6  # a wrapped title keeps this much room from the figure's edge on either side


def fixed_titles():
    """Context in which new and cleared Axes, and titles set without ``y``, place their titles at y = 1."""
    return mpl.rc_context({"axes.titley": 1.0})


def titles(ax) -> list[Text]:
    """The Axes' titles (centre, left, right) that have text: the Text children that are not in ``ax.texts``."""
    texts = set(ax.texts)  # a set: a picture may hold hundreds of texts
    return [t for t in ax.get_children() if isinstance(t, Text) and t not in texts and t.get_text()]


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


_WIDTHS: dict = {}  # (string, font, dpi) -> width in pixels


def text_width(renderer, s: str, prop) -> float:
    """Width in pixels of one line of text, memoized (titles are measured again on every render)."""
    key = (s, prop.copy(), renderer.dpi)
    if key not in _WIDTHS:
        if len(_WIDTHS) > 4096:
            _WIDTHS.clear()
        _WIDTHS[key] = renderer.get_text_width_height_descent(s, prop, False)[0]
    return _WIDTHS[key]


def wrap_titles(fig: Figure, renderer) -> bool:
    """Break Axes titles wider than the figure allows around their anchor into lines that fit; True if any
    title changed."""
    changed = False
    width = fig.bbox.width
    for ax in fig.axes:
        for title in titles(ax):
            anchor = ax.bbox.x0 + title.get_position()[0] * ax.bbox.width
            ha = title.get_horizontalalignment()
            room = {"left": width - anchor, "right": anchor}.get(ha, 2 * min(anchor, width - anchor)) - 2 * TITLE_MARGIN_PX
            prop = title.get_fontproperties()
            text = _wrap(title.get_text(), room, lambda s: text_width(renderer, s, prop))
            if text != title.get_text():
                title.set_text(text)
                changed = True
    return changed


def all_titles(fig: Figure) -> list[Text]:
    """Every Axes title with text, Axes by Axes (see :func:`titles`)."""
    return [t for ax in fig.axes for t in titles(ax)]


def title_lines(fig: Figure) -> tuple[int, ...]:
    """The number of lines of each of :func:`all_titles`."""
    return tuple(t.get_text().count("\n") + 1 for t in all_titles(fig))


def structure(fig: Figure) -> tuple:
    """What a layout depends on besides the sizes of texts: per Axes, whether it and its frame show, which of
    its labels and titles have text, and its tick positions; the numbers of figure texts and legends. What
    may reach beyond an Axes (its legend, artists not clipped to it) is in :func:`reaching`."""
    def axes(ax):
        return (ax.get_visible(), ax.axison, bool(ax.get_xlabel()), bool(ax.get_ylabel()),
                tuple(bool(t.get_text()) for t in (ax.title, *titles(ax))),
                ax.xaxis.get_ticks_position(), ax.yaxis.get_ticks_position())
    return tuple(axes(ax) for ax in fig.axes) + (len(fig.texts), len(fig.legends))


def _loose(ax) -> list:
    """The Axes' legend and the artists not clipped to it, that take part in a layout."""
    legend, fixed = ax.get_legend(), {ax.patch, ax.title, *titles(ax)}  # titles: in structure()
    return ([legend] if legend is not None else []) + [
        a for a in ax.get_children()
        if not a.get_clip_on() and a.get_in_layout() and a is not legend and a not in fixed]


def shown(fig: Figure) -> tuple:
    """Per Axes, the type and visibility of each of its :func:`_loose` artists and its legend's number of
    entries: when this is unchanged, so is :func:`reaching` (cheap to compare on every render)."""
    def axes(ax):
        legend = ax.get_legend()
        return (None if legend is None else (legend.get_visible(), len(legend.texts)),
                tuple((type(a).__name__, a.get_visible()) for a in _loose(ax)))
    return tuple(axes(ax) for ax in fig.axes)


MEASURED = (Text, Patch, Line2D, Legend)  # artists whose extent is measured; of others only visibility counts


def surely_inside(text, box, renderer) -> bool:
    """Whether a plain Text (one line, unrotated, no math, wrap or box) lies inside ``box`` whatever its
    alignment: its anchor at least its width (plus 2 px) from the box's sides and twice its line height
    (at least 1.5 × its font size, plus 2 px) from the top and bottom; by its text size, which
    :class:`~kvsim.ui.render.FrameRenderer` memoizes, instead of a layout of the Text. False means: measure it."""
    if type(text) is not Text or not isinstance(renderer, FrameRenderer):
        return False
    s = text.get_text()
    if ("\n" in s or text.get_rotation() != 0 or text.get_wrap() or text.get_usetex() or cbook.is_math_text(s)
            or text.get_bbox_patch() is not None):
        return False
    prop = text.get_fontproperties()
    x, y = text.get_transform().transform(text.get_unitless_position())
    w, h, _ = renderer.get_text_width_height_descent(s, prop, False) if s else (0, 0, 0)
    dx, dy = w + 2, 2 * max(h, 1.5 * prop.get_size_in_points() * renderer.dpi / 72) + 2
    return box.x0 <= x - dx and x + dx <= box.x1 and box.y0 <= y - dy and y + dy <= box.y1


def reaching(fig: Figure, renderer) -> tuple:
    """Per Axes, the visible :func:`_loose` artists that reach beyond the Axes' box (by more than half a
    pixel), as (type, index among the loose artists, and the legend's entries); artists other than texts,
    patches, lines and legends count when visible. Artists within the box leave a constrained layout as it is
    (it places each Axes by the union of its box and what sticks out), so showing or hiding them needs none."""
    def out(a, box):
        if not isinstance(a, MEASURED):
            return True
        if surely_inside(a, box, renderer):
            return False
        e = a.get_window_extent(renderer)
        return not (e.x0 >= box.x0 - 0.5 and e.y0 >= box.y0 - 0.5 and e.x1 <= box.x1 + 0.5 and e.y1 <= box.y1 + 0.5)

    def axes(ax):
        return tuple((type(a).__name__, i, len(a.texts) if isinstance(a, Legend) else None)
                     for i, a in enumerate(_loose(ax)) if a.get_visible() and out(a, ax.bbox))
    return tuple(axes(ax) for ax in fig.axes)


def freeze(fig: Figure):
    """Lay the figure out once with constrained layout, then keep that layout (no layout engine)."""
    fig.set_layout_engine("constrained", w_pad=PAD_IN, h_pad=PAD_IN)
    fig.get_layout_engine().execute(fig)
    fig.set_layout_engine("none")


def gaps(fig: Figure) -> tuple[float, float, float, float] | None:
    """Free pixels between what the last render inked and the figure's left, bottom, right and top edges
    (negative: cut off); None if the canvas did not record it (not a FrameCanvas) or nothing was drawn."""
    renderer = fig.canvas.get_renderer()
    ink = renderer.inked() if isinstance(renderer, FrameRenderer) else None
    if ink is None:
        return None
    return ink.x0, ink.y0, fig.bbox.width - ink.x1, fig.bbox.height - ink.y1


class FrozenLayout:
    """Renders one figure, laying it out anew only when its structure changed or its ink drifted."""

    def __init__(self, fig: Figure):
        self.fig = fig
        self.structure = None  # structure() the current layout was made for
        self.shown = None      # shown() at the last render
        self.reaching = None   # reaching() when the current layout was made
        self.keeping = False   # the render under way keeps the layout through a shown() change
        self.gaps = None       # gaps() of the first render after it
        self.title_lines = ()  # title_lines() when the current layout was made
        self.kept_score = 0    # renders that kept the layout through a shown() change without drifting, minus
        #                        those that drifted: below 0, such a change lays out first (a picture that
        #                        moves wholesale with its controls would otherwise render twice)

    def relayout(self, renderer):
        for _ in range(MAX_PASSES):
            wrap_titles(self.fig, renderer)  # at the Axes' current width, which the layout needs
            pin_labels(self.fig, renderer, follow_axes=True)  # labels placed for this state, moving with their Axes
            freeze(self.fig)
            if not wrap_titles(self.fig, renderer):  # the new width needs no other wrap: done
                break
        self.structure, self.shown = structure(self.fig), shown(self.fig)
        self.reaching = reaching(self.fig, renderer)
        self.title_lines = title_lines(self.fig)

    def changed(self, renderer) -> bool:
        """Whether the figure's structure changed since the layout was made: its decorations, or which of its
        loose artists reach beyond their Axes (measured only when some were shown or hidden)."""
        if structure(self.fig) != self.structure:
            return True
        now = shown(self.fig)
        if now == self.shown:
            return False
        self.shown = now
        if self.kept_score < 0:
            return True
        self.keeping = reaching(self.fig, renderer) == self.reaching
        return not self.keeping

    def drifted(self, now) -> bool:
        """Whether the ink came closer to an edge than PAD_PX and than the layout left it, or has SLACK_PX more
        room than the layout left on some side."""
        if now is None or self.gaps is None:
            return False
        return any((g < PAD_PX and g < g0 - 0.5) or g > g0 + SLACK_PX for g, g0 in zip(now, self.gaps))

    def cut(self, texts, renderer) -> bool:
        """Whether one of ``texts`` (axis labels placed for this state by :func:`kvsim.ui.labels.pin_labels`,
        the tick labels at the ends of their axes or reaching furthest out, titles with more lines than at the
        layout) would come closer than PAD_PX to an edge and than the layout left the ink there: the render
        would drift, so lay out first (the commonest drifts: tick labels that grew push the axis label, or the
        last tick label, off the figure)."""
        if self.gaps is None:
            return False
        width, height = self.fig.bbox.width, self.fig.bbox.height
        for text in texts:
            if text.get_text():
                b = text.get_window_extent(renderer)
                now = (b.x0, b.y0, width - b.x1, height - b.y1)
                if any(g < PAD_PX and g < g0 - 0.5 for g, g0 in zip(now, self.gaps)):
                    return True
        return False

    def taller_titles(self) -> list[Text]:
        """The titles with more lines than when the layout was made (the structure, and so the number of titles
        per Axes, is the same): :meth:`cut` measures them, as a title that grew would only show in the ink."""
        return [t for t, n, n0 in zip(all_titles(self.fig), title_lines(self.fig), self.title_lines) if n > n0]

    def render(self) -> int:
        """Draw the figure on its canvas, laid out; returns the number of renders (1, or 2 after a late relayout)."""
        canvas = self.fig.canvas
        renderer = canvas.get_renderer()
        self.keeping = False  # set by changed(): the layout is kept through a shown() change
        fresh = self.structure is None or self.changed(renderer)
        if fresh:
            self.relayout(renderer)
        else:
            wrap_titles(self.fig, renderer)  # titles follow the data
        drawn = pin_labels(self.fig, renderer)  # the render does not place the axis labels again
        drawn += [] if fresh else self.taller_titles()  # a title that wrapped into more lines may reach an edge
        if not fresh and self.cut(drawn, renderer):  # lay out now rather than render twice
            if self.keeping:
                self.kept_score -= 1
            self.keeping, fresh = False, True
            self.relayout(renderer)
            pin_labels(self.fig, renderer)
        canvas.draw()
        now = gaps(self.fig)
        renders = 1
        drifted = not fresh and self.drifted(now)
        if self.keeping:
            self.kept_score += -1 if drifted else 1
        if drifted:
            self.relayout(renderer)
            pin_labels(self.fig, renderer)
            canvas.draw()
            now = gaps(self.fig)
            renders = 2
        if fresh or renders == 2:
            self.gaps = now
        return renders
