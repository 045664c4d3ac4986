"""The one pattern behind every interactive view: a plain drawing function plus sliders.

Contract
- A view is ``draw(ax, **values)``, a plain function that draws from package computations on any Axes
  (it works without widgets). kvsim's plot functions update the artists an earlier call left on the same
  Axes in place (:func:`kvsim.plots.style.reuse`) and clear and rebuild only when the picture's structure
  changed, so a redraw after a slider move costs a few milliseconds of matplotlib.
- ``update(drawn, **values)`` (optional) gets what ``draw`` returned and changes its artists itself;
  returning False means "cannot", and ``draw`` runs instead.
- :func:`make_view` attaches one control per keyword; every change redraws into an ``Image`` widget: one
  render on a caching canvas (:mod:`kvsim.ui.render`) with the layout frozen per structure
  (:mod:`kvsim.ui.layout`: a second render only when labels outgrew it), one fast PNG.
- Every control is discrete, so the finished PNGs of the last FRAMES_KEPT states are kept, keyed by the
  controls' values: a state seen before is served from that cache without drawing. The figure then lags
  behind the image; :attr:`View.fig`, :attr:`View.ax`, :meth:`View.lines` and :meth:`View.png` draw the
  current state first (:meth:`View.sync`), so whoever looks at the figure sees what the image shows.
  Hence ``draw`` and ``update`` only draw: a side effect (say, text put into an ``extra`` widget) would be
  skipped for a revisited state.
- In a notebook a View displays as the live widget, plus a PNG of its default state and a one-line
  text, so static pages (GitHub, nbviewer) show the figure and nbval compares a stable text.
- ``View.lines()`` returns the plotted data, so a test can check that a slider changes the figure.
"""

from __future__ import annotations

import base64
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import ipywidgets as widgets
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from . import layout, render

MARGINS = dict(left=0.1, right=0.97, bottom=0.13, top=0.9)  # before the first layout (which replaces them)
FRAMES_KEPT = 32  # finished PNGs kept per view (each ~20-60 kB), least recently shown dropped first


@dataclass
class View:
    """Controls, figure and output area of one interactive view."""

    draw: Callable
    controls: dict[str, widgets.ValueWidget]
    figure: Figure  # as drawn last: may lag behind the controls (see ``fig``)
    axes: Axes | np.ndarray
    image: widgets.Image
    widget: widgets.Widget
    name: str = "view"
    update: Callable | None = None
    redraw_seconds: list[float] = field(default_factory=list)
    served_from_cache: list[bool] = field(default_factory=list)  # per redraw: the PNG came from the frame cache
    renders: list[int] = field(default_factory=list)  # renders per drawn state: 1, or 2 when laid out again
    static_png: bytes = b""  # the default state, for static pages
    static_text: str = ""
    frames: OrderedDict = field(default_factory=OrderedDict)  # state -> PNG, least recently shown first
    drawn: object = None  # what draw returned, for update
    drawn_state: tuple | None = None  # the state the figure shows
    frozen: layout.FrozenLayout | None = None  # the figure's layout, kept until its structure changes

    def __post_init__(self):
        self.frozen = layout.FrozenLayout(self.figure)

    def values(self) -> dict:
        return {name: c.value for name, c in self.controls.items()}

    def state(self) -> tuple:
        """The controls' values as a key of the frame cache."""
        return tuple(self.values().items())

    @property
    def fig(self) -> Figure:
        """The figure, drawn in the controls' current state."""
        self.sync()
        return self.figure

    @property
    def ax(self) -> Axes | np.ndarray:
        """The Axes (or array of Axes) passed to ``draw``, drawn in the controls' current state."""
        self.sync()
        return self.axes

    def sync(self):
        """Draw and render the figure in the controls' current state, unless it shows that state already."""
        state = self.state()
        if state == self.drawn_state:
            return
        values = dict(state)
        with layout.fixed_titles():
            if self.update is None or self.drawn is None or self.update(self.drawn, **values) is False:
                self.drawn = self.draw(self.axes, **values)
        self.renders.append(self.frozen.render())
        self.drawn_state = state

    def redraw(self, *_):
        """Put the PNG of the controls' current state into the image widget: from the frame cache if this
        state was shown before, else drawn, rendered and encoded (then cached)."""
        t0 = time.perf_counter()
        state = self.state()
        png = self.frames.get(state)
        hit = png is not None
        if hit:
            self.frames.move_to_end(state)
        else:
            png = self.png()
            self.frames[state] = png
            if len(self.frames) > FRAMES_KEPT:
                self.frames.popitem(last=False)
        self.image.value = png
        self.served_from_cache.append(hit)
        self.redraw_seconds.append(time.perf_counter() - t0)

    def png(self, level: int = 1) -> bytes:
        """The figure as PNG bytes in the controls' current state, as the browser receives it."""
        self.sync()
        return render.encode_png(np.asarray(self.figure.canvas.buffer_rgba()), level)

    def lines(self) -> list[np.ndarray]:
        """(x, y) data of every visible line, the rectangles of every bar, every image and colour-mapped mesh,
        the vertices of other collections, for tests."""
        data = []
        for ax in self.fig.axes:  # what is drawn: hidden artists (kept for a later redraw) are not
            data += [np.column_stack([ln.get_xdata(), ln.get_ydata()]).astype(float) for ln in ax.get_lines()
                     if ln.get_visible()]
            data += [np.array([(p.get_x(), p.get_y(), p.get_width(), p.get_height()) for p in c])
                     for c in ax.containers]
            data += [np.asarray(im.get_array()) for im in ax.get_images() if im.get_visible()]
            for c in ax.collections:
                if not c.get_visible():
                    continue
                if c.get_array() is not None:  # colour-mapped meshes
                    data.append(np.ma.filled(np.asarray(c.get_array(), dtype=float), np.nan))
                elif c.get_paths():  # line and polygon collections: their vertices
                    data.append(np.concatenate([p.vertices for p in c.get_paths()]).astype(float))
        return data

    def summary(self) -> str:
        """One stable line for text-only outputs: what the view is and its controls' default values."""
        shown = ", ".join(f"{k}={v!r}" for k, v in self.values().items())
        return f"kvsim view {self.name}({shown}): interactive when the notebook runs; the image is this state"

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        data = self.widget._repr_mimebundle_(**kwargs) or {}
        data["text/plain"] = self.static_text
        data["image/png"] = base64.b64encode(self.static_png).decode("ascii")
        return data


def make_view(draw: Callable, controls: dict[str, widgets.ValueWidget], figsize=(7.5, 4.2),
              extra: widgets.Widget | None = None, margins: dict | None = None, update: Callable | None = None,
              subplots: tuple[int, int] | None = None, name: str | None = None) -> View:
    """Wrap ``draw(ax, **values)`` with ``controls``; every value change redraws the figure.

    ``subplots=(rows, cols)`` passes a (rows, cols) array of Axes as ``ax``; ``margins`` places them before
    the first layout, which replaces it (see :mod:`kvsim.ui.layout`).
    """
    fig = render.new_figure(figsize)
    with layout.fixed_titles():
        ax = fig.subplots(*subplots, squeeze=False) if subplots else fig.add_subplot()
    fig.subplots_adjust(**(margins or MARGINS))
    name = name or draw.__name__.removeprefix("draw_")
    # natural size (1 figure pixel = 1 CSS pixel, like inline matplotlib), narrower only in a narrow column:
    # a flex column would otherwise stretch the image to the full width and blur it
    image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", align_self="flex-start"))
    # the controls wrap within the figure's width: one compact block, sliders right above what they change
    box = [widgets.HBox(list(controls.values()), layout=widgets.Layout(
        flex_flow="row wrap", max_width=f"{round(fig.bbox.width)}px"))]
    if extra is not None:
        box.append(extra)
    view = View(draw, controls, fig, ax, image, widgets.VBox(box + [image]), name=name, update=update)
    view.widget.add_class("kvsim-view")
    view.widget.add_class(f"kvsim-view-{name}")  # the browser test names its screenshots after it
    for c in controls.values():
        c.style = {"description_width": "initial"}
        c.observe(view.redraw, names="value")
    view.redraw()
    view.static_png = render.encode_static_png(np.asarray(fig.canvas.buffer_rgba()))
    view.static_text = view.summary()
    return view


def int_slider(description: str, value: int, lo: int, hi: int, step: int = 1) -> widgets.IntSlider:
    """An IntSlider whose default lies inside its range (checked)."""
    if not lo <= value <= hi:
        raise ValueError(f"slider {description!r}: default {value} is outside [{lo}, {hi}]")
    return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=description,
                             continuous_update=False)


def log_slider(description: str, value: int, lo: int, hi: int) -> widgets.SelectionSlider:
    """A slider over powers of two between lo and hi (token counts, batch sizes), read out as "131,072"."""
    values = [2**k for k in range(int(np.log2(lo)), int(np.log2(hi)) + 1)]
    if value not in values:
        raise ValueError(f"slider {description!r}: default {value} is not a power of two in [{lo}, {hi}]")
    return widgets.SelectionSlider(options=[(f"{v:,}", v) for v in values], value=value, description=description,
                                   continuous_update=False)


def dropdown(description: str, options, value) -> widgets.Dropdown:
    """A dropdown whose default is one of its options (checked)."""
    options = list(options)
    if value not in options:
        raise ValueError(f"dropdown {description!r}: default {value!r} is not an option")
    return widgets.Dropdown(options=options, value=value, description=description)
