"""The finishing touches every kvsim plot shares, and artists kept for the next call on the same Axes.

Contract
- :func:`decorate`: labels, limits (``None`` ends stay automatic, recomputed from the current data),
  a light grid, legend and title. Safe to call again on an Axes it decorated (a redraw).
- :func:`reuse` / :func:`keep`: a plot function builds its artists once per Axes and *shape* (how many
  curves, bars, labels ...) and afterwards only sets their data and texts, so an interactive view redraws
  without ``ax.clear()`` (which alone costs ~10 ms: it rebuilds ticks and spines). A different shape, or
  anything else having cleared the Axes, makes it build afresh. What a plot sets after building must not
  depend on the previous call: a redraw and a fresh draw give the same picture (tests/test_widgets.py).
  The kept artists live in a :class:`Kept` artist added to the Axes (invisible, outside the layout): it
  goes when the Axes is cleared, as the artists it names do.
- :func:`add_legend` / :class:`FrozenLegend`: every plot's legend (of an Axes or a Figure). It lays out its
  entries only when what places them changed (texts, visibility, anchor, the parent's box); otherwise it draws
  its frame and entries where the last layout put them: the same pixels without the offset-box layout, which
  measured every text again on every draw (a third of a render with a legend).
- :class:`Pool` / :class:`Sketch`: for pictures whose number of cells, labels or connectors follows the
  data, artists of one kind made on first need and re-styled on later calls; those a call does not use are
  hidden.
"""

from __future__ import annotations

import numpy as np
from matplotlib.artist import Artist
from matplotlib.legend import Legend
from matplotlib.offsetbox import DrawingArea, HPacker, OffsetBox, TextArea, VPacker
from matplotlib.ticker import LogLocator, NullFormatter
from matplotlib.transforms import ScaledTranslation

BELOW_X_LABEL_PT = 34  # tick labels (10 pt + 3.5 pt pad) and the x label (10 pt + 4 pt pad) take ~30 pt


class Pool:
    """Artists made by ``make()`` when a call needs more than before, reused (re-styled) by later calls.

    ``take(**props)`` returns the next artist, visible, with ``props`` set (pass every property that varies
    between uses: nothing is reset); ``hide_rest()`` hides the artists this call did not take and starts over.
    """

    def __init__(self, make):
        self.make, self.items, self.used = make, [], 0

    def __iter__(self):
        return iter(self.items)

    def take(self, **props):
        if self.used == len(self.items):
            self.items.append(self.make())
        artist = self.items[self.used]
        self.used += 1
        artist.set(visible=True, **props)
        return artist

    def hide_rest(self):
        for artist in self.items[self.used:]:
            artist.set_visible(False)
        self.used = 0


class Sketch(dict):
    """Named :class:`Pool` s for a picture whose parts follow the data: draw by taking artists from the pools
    in a fixed order (the same data then gives the same artists the same roles), then call :meth:`finish`."""

    def __init__(self, **makers):
        super().__init__({name: Pool(make) for name, make in makers.items()})

    def finish(self):
        for pool in self.values():
            pool.hide_rest()


def _artists(held):
    if isinstance(held, Pool):
        held = held.items
    if isinstance(held, dict):
        held = list(held.values())
    if isinstance(held, (list, tuple)):
        for item in held:
            yield from _artists(item)
    elif held is not None:
        yield held


class Kept(Artist):
    """An invisible artist that holds what :func:`keep` remembers for one plot on its Axes: ``key``, ``shape``
    and the plot's artists. It draws nothing and takes no room in a layout."""

    def __init__(self, key: str, shape, artists: dict):
        super().__init__()
        self.key, self.shape, self.artists = key, shape, artists
        self.set_visible(False)
        self.set_in_layout(False)

    def draw(self, renderer):
        pass


def _kept(ax) -> Kept | None:
    return next((a for a in ax.get_children() if isinstance(a, Kept)), None)


def reuse(ax, key: str, shape) -> dict | None:
    """The artists an earlier call on ``ax`` kept under ``key`` for the same ``shape``, if all still on ``ax``."""
    held = _kept(ax)
    if held is None or (held.key, held.shape) != (key, shape):
        return None
    for artist in _artists(held.artists):
        if (ax.get_legend() is not artist) if isinstance(artist, Legend) else (artist.axes is not ax):
            return None  # cleared (ax.clear() detaches every artist) or removed since
    return held.artists


def _plotted(ax) -> list:
    """Every artist plotted on ``ax`` (not its spines, axes, titles, background or legend)."""
    return [*ax.artists, *ax.collections, *ax.images, *ax.lines, *ax.patches, *ax.tables, *ax.texts]


def clear_for(ax, key: str):
    """Make ``ax`` empty for a new build of plot ``key``: if only an earlier build of the same plot drew on it,
    remove that build's artists and legend (the plot sets every Axes property it uses again, which costs far
    less than ``ax.clear()`` rebuilding ticks and spines); otherwise clear the Axes."""
    held = _kept(ax)
    if held is not None and held.key == key:
        artists = [a for a in _artists(held.artists) if not isinstance(a, Legend)]
        if all(a.axes is ax for a in artists) and set(_plotted(ax)) == {*artists, held}:
            legend = ax.get_legend()
            for artist in artists + [held] + ([legend] if legend is not None else []):
                artist.remove()
            gone = set(artists)
            ax.containers = [c for c in ax.containers if not gone.issuperset(c)]  # bars: their containers too
            ax.set_prop_cycle(None)  # the next line gets C0 again, as after ax.clear()
            return
    ax.clear()


def keep(ax, key: str, shape, artists: dict) -> dict:
    """Remember ``artists`` (a dict of artists, lists or tuples of them) on ``ax`` for :func:`reuse`."""
    held = _kept(ax)
    if held is not None:
        held.remove()
    ax.add_artist(Kept(key, shape, artists))
    return artists


def set_fill_between(area, x, y1, y2):
    """Move the polygon ``ax.fill_between`` returned to the band between ``y1`` and ``y2`` over ``x``: the
    vertices fill_between makes (from (x[0], y2[0]) along y1, then back along y2), set through the public
    ``PolyCollection.set_verts`` (``FillBetweenPolyCollection.set_data`` exists only from matplotlib 3.10)."""
    x, y1, y2 = (np.broadcast_to(np.asarray(v, dtype=float), np.shape(x)) for v in (x, y1, y2))
    n = len(x)
    verts = np.empty((2 * n + 2, 2))
    verts[0], verts[n + 1] = (x[0], y2[0]), (x[-1], y2[-1])
    verts[1:n + 1, 0], verts[1:n + 1, 1] = x, y1
    verts[n + 2:, 0], verts[n + 2:, 1] = x[::-1], y2[::-1]
    area.set_verts([verts])


def log_scale(ax, *which: str):
    """Log scales on the axes named in ``which`` ("x", "y") with unlabelled minor ticks at 2 and 5 of each
    decade: matplotlib's 8 per decade (each a Tick of marks, label and grid line) cost a third of a render."""
    for name in which:
        getattr(ax, f"set_{name}scale")("log")
        axis = getattr(ax, f"{name}axis")
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())


def relimit(ax, xlim=(0, None), ylim=(0, None)):
    """Limits from the current data (lines, patches, collections, images), then pin the given ends.

    An axis passed as ``None`` keeps what the caller set (or autoscales if nobody set it).
    """
    ax.relim()  # set_data does not update the data limits
    if xlim is not None:
        ax.set_autoscalex_on(True)
    if ylim is not None:
        ax.set_autoscaley_on(True)
    ax.autoscale_view()
    if xlim is not None:
        ax.set_xlim(*xlim)
    if ylim is not None:
        ax.set_ylim(*ylim)


def label_inward(note, x: float, lo: float, hi: float, dx: float = 6, dy: float = 6):
    """Put an annotation's text beside its point on the side towards the middle of [lo, hi] (points)."""
    right_half = x > (lo + hi) / 2
    note.set_horizontalalignment("right" if right_half else "left")
    note.xyann = (-dx if right_half else dx, dy)


def label_level(note, level: float, curves=()):
    """Label the horizontal line at ``level`` where no curve runs through the text: at the right end under
    the line, above it, or at the left end above or under it, the first spot clear of ``curves`` ([(x, y)],
    data units). Call it once the limits are set."""
    ax = note.axes
    to_axes = ax.transData + ax.transAxes.inverted()  # data -> fraction of the Axes (any scale)
    points = [to_axes.transform(np.column_stack([np.asarray(x, float), np.asarray(y, float)])) for x, y in curves]
    points = np.concatenate(points) if points else np.zeros((0, 2))
    px = note.get_fontsize() * ax.figure.dpi / 72
    w = (0.6 * px * len(note.get_text()) + 8) / ax.bbox.width  # about 0.6 em per character
    h = (px + 6) / ax.bbox.height
    y = to_axes.transform((ax.get_xlim()[0], level))[1]
    spots = [("right", "top"), ("right", "bottom"), ("left", "bottom"), ("left", "top")]
    for ha, va in spots:
        x0, x1 = (1 - w, 1) if ha == "right" else (0, w)
        y0, y1 = (y - h, y) if va == "top" else (y, y + h)
        inside = (points[:, 0] > x0) & (points[:, 0] < x1) & (points[:, 1] > y0) & (points[:, 1] < y1)
        if y0 >= 0 and y1 <= 1 and not inside.any():
            break
    else:
        ha, va = spots[0]
    note.xy = (ax.get_xlim()[1 if ha == "right" else 0], level)
    note.set_horizontalalignment(ha)
    note.set_verticalalignment(va)
    note.xyann = (-4 if ha == "right" else 4, -4 if va == "top" else 4)


class FrozenLegend(Legend):
    """A Legend that lays out its entries (offset boxes: every text measured again) only when something that
    places them changed since its last draw; otherwise it draws its frame and its entries' artists where the
    last layout put them, which is what a full draw would do again (tests/test_widgets.py compares a redrawn
    view with a fresh one pixel by pixel).

    What places the entries, the key: each entry text's string, size and visibility, the visibility of every
    box and handle, the anchor box, the parent's box and the dpi. Legends placed "best" (a search over the
    data), in "expand" mode or with a shadow always lay out, as do boxes of kinds other than packers, text
    areas and drawing areas.
    """

    frozen_key = None    # the key of the last full draw
    frozen_parts = None  # [frame, leaf artists in drawing order] of that draw

    def __init__(self, parent, handles, labels, **kwargs):
        super().__init__(parent, handles, labels, **kwargs)
        self.fixed_place = kwargs.get("loc") not in (None, "best", 0) and kwargs.get("mode") != "expand"

    def parts(self) -> list | None:
        """The frame and the artists the entry boxes draw, in drawing order, and every node's visibility; None
        if a box is of a kind this legend does not know to draw."""
        leaves, seen = [], []

        def walk(box):
            for child in box.get_children():
                seen.append(child.get_visible())
                if not child.get_visible():
                    continue
                if isinstance(child, (HPacker, VPacker)):
                    if not walk(child):
                        return False
                elif isinstance(child, (TextArea, DrawingArea)):
                    leaves.extend(child.get_children())
                    seen.extend(a.get_visible() for a in child.get_children())
                else:
                    return False
            return True

        boxes = [c for c in self.get_children() if isinstance(c, OffsetBox)]
        if len(boxes) != 1 or not walk(boxes[0]) or not boxes[0].get_visible():
            return None
        return [self.get_frame(), *leaves], tuple(seen)

    def key(self, renderer, seen) -> tuple:
        parent = self.axes if self.axes is not None else self.get_figure()
        return (seen, tuple((t.get_text(), t.get_fontsize()) for t in self.get_texts()),
                tuple(self.get_bbox_to_anchor().bounds), tuple(parent.bbox.bounds), renderer.points_to_pixels(1.0),
                renderer)

    def draw(self, renderer):
        if not self.get_visible():
            return
        parts = self.parts() if self.fixed_place and not self.shadow else None
        key = None if parts is None else self.key(renderer, parts[1])
        if key is None or key != self.frozen_key:
            super().draw(renderer)  # lays the entries out and places the frame
            self.frozen_key, self.frozen_parts = key, None if parts is None else parts[0]
            return
        renderer.open_group("legend", gid=self.get_gid())
        for artist in self.frozen_parts:
            artist.draw(renderer)
        renderer.close_group("legend")
        self.stale = False

    def remove(self):
        parent = self.axes
        if parent is not None and parent.get_legend() is self:
            parent.legend_ = None  # what Axes.legend's remover does
        elif self.get_figure() is not None and self in self.get_figure().legends:
            self.get_figure().legends.remove(self)
        else:
            raise ValueError("this legend is not on its parent")
        (parent or self.get_figure()).stale = True


def add_legend(parent, handles=None, labels=None, **kwargs) -> FrozenLegend:
    """``parent.legend(...)`` (an Axes' or a Figure's) as a :class:`FrozenLegend`: of ``handles`` with
    ``labels`` (default: the handles' own labels), or of the parent's labelled artists."""
    if handles is None:
        handles, found = (parent.get_legend_handles_labels() if hasattr(parent, "get_legend_handles_labels")
                          else ([], []))
        labels = found if labels is None else labels
    handles = list(handles)
    labels = [h.get_label() for h in handles] if labels is None else list(labels)
    if hasattr(parent, "legend_"):  # an Axes: its one legend
        made = parent.legend_ = FrozenLegend(parent, handles, labels, **kwargs)
    else:  # a Figure: one of its legends, anchored in figure coordinates unless told (as Figure.legend does)
        kwargs.setdefault("bbox_transform", parent.transSubfigure)
        made = FrozenLegend(parent, handles, labels, **kwargs)
        parent.legends.append(made)
    parent.stale = True
    return made


def legend(ax, **kwargs):
    """A legend of the labelled artists; on a redraw with as many entries only its texts change."""
    _, labels = ax.get_legend_handles_labels()
    old = ax.get_legend()
    if old is not None and len(old.texts) == len(labels):
        for text, label in zip(old.texts, labels):
            text.set_text(label)
        return old
    return add_legend(ax, **kwargs)


def legend_below(ax, **kwargs):
    """A legend centred under the x label (a fixed distance in points below the Axes, whatever their height)."""
    below = ax.transAxes + ScaledTranslation(0, -BELOW_X_LABEL_PT / 72, ax.figure.dpi_scale_trans)
    return legend(ax, loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=below, frameon=False, **kwargs)


def decorate(ax, xlabel: str | None = None, ylabel: str | None = None, title: str | None = None,
             xlim=(0, None), ylim=(0, None), legend_loc: str | None = "upper left", legend_fontsize: int = 9):
    """Label the axes, set limits (``None`` ends stay automatic), add a light grid, legend and title."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    relimit(ax, xlim, ylim)
    ax.grid(alpha=0.3)
    if legend_loc is not None:
        legend(ax, loc=legend_loc, fontsize=legend_fontsize)
    ax.set_title(title or "", fontsize=11)
    return ax
