"""The one pattern behind every interactive view: a plain drawing function plus sliders.

Contract
- A view is ``draw(ax, **values)``, a plain function that clears ``ax`` and draws from package
  computations; it works without widgets (call it on any Axes).
- :func:`make_view` attaches one control per keyword, redraws on every change into an ``Image``
  widget (one PNG render, updated in place: no output clearing, no second layout pass), and returns
  a :class:`View` whose ``controls`` can be set programmatically (tests do).
- ``View.lines()`` returns the plotted data, so a test can check that a slider changes the figure.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from typing import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display


@dataclass
class View:
    """Controls, figure and output area of one interactive view."""

    draw: Callable
    controls: dict[str, widgets.ValueWidget]
    fig: plt.Figure
    ax: plt.Axes
    image: widgets.Image
    widget: widgets.Widget
    redraw_seconds: list[float] = field(default_factory=list)

    def values(self) -> dict:
        return {name: c.value for name, c in self.controls.items()}

    def redraw(self, *_):
        """Draw with the current control values and put the new PNG into the image widget."""
        t0 = time.perf_counter()
        self.draw(self.ax, **self.values())
        self.image.value = self.png()
        self.redraw_seconds.append(time.perf_counter() - t0)

    def png(self) -> bytes:
        """The figure as PNG bytes, as the browser receives it."""
        buf = io.BytesIO()
        # fast zlib level: a few KB larger, about a third less encoding time
        self.fig.savefig(buf, format="png", pil_kwargs={"compress_level": 1})
        return buf.getvalue()

    def lines(self) -> list[np.ndarray]:
        """(x, y) data of every line, the rectangles of every bar and every image, for tests."""
        data = [np.column_stack([ln.get_xdata(), ln.get_ydata()]).astype(float) for ln in self.ax.get_lines()]
        data += [np.array([(p.get_x(), p.get_y(), p.get_width(), p.get_height()) for p in c]) for c in self.ax.containers]
        data += [np.asarray(im.get_array()) for im in self.ax.get_images()]
        return data

    def _ipython_display_(self):
        display(self.widget)


MARGINS = dict(left=0.1, right=0.97, bottom=0.13, top=0.92)


def make_view(draw: Callable, controls: dict[str, widgets.ValueWidget], figsize=(7.5, 4.2),
              extra: widgets.Widget | None = None, margins: dict | None = None) -> View:
    """Wrap ``draw(ax, **values)`` with ``controls``; every value change redraws the figure.

    Fixed margins instead of constrained layout: the layout pass doubled the redraw time.
    """
    with plt.ioff():
        fig, ax = plt.subplots(figsize=figsize)
    plt.close(fig)  # shown only through the image widget, never again by a later plt.show()
    fig.subplots_adjust(**(margins or MARGINS))
    image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
    box = [widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))]
    if extra is not None:
        box.append(extra)
    view = View(draw, controls, fig, ax, image, widgets.VBox(box + [image]))
    for c in controls.values():
        c.style = {"description_width": "initial"}
        c.observe(view.redraw, names="value")
    view.redraw()
    return view


def int_slider(description: str, value: int, lo: int, hi: int, step: int = 1) -> widgets.IntSlider:
    """An IntSlider whose default lies inside its range (checked)."""
    if not lo <= value <= hi:
        raise ValueError(f"slider {description!r}: default {value} is outside [{lo}, {hi}]")
    return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=description,
                             continuous_update=False)


def log_slider(description: str, value: int, lo: int, hi: int) -> widgets.SelectionSlider:
    """A slider over powers of two between lo and hi (token counts, batch sizes)."""
    options = [2**k for k in range(int(np.log2(lo)), int(np.log2(hi)) + 1)]
    if value not in options:
        raise ValueError(f"slider {description!r}: default {value} is not a power of two in [{lo}, {hi}]")
    return widgets.SelectionSlider(options=options, value=value, description=description,
                                   continuous_update=False)


def dropdown(description: str, options, value) -> widgets.Dropdown:
    """A dropdown whose default is one of its options (checked)."""
    options = list(options)
    if value not in options:
        raise ValueError(f"dropdown {description!r}: default {value!r} is not an option")
    return widgets.Dropdown(options=options, value=value, description=description)
