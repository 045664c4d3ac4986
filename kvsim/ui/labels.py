"""Axis labels placed once per render, where matplotlib would place them, then pinned there.

Contract
- Left alone, every ``Axis.draw`` (and every layout pass) places its label itself: it runs the tick locator
  and formatter twice more and measures every tick label again, beside the spine (a fifth of a render of a
  plot with ticks). :func:`pin_labels` computes the same place once, from public API only, and pins the label
  there with ``Axis.set_label_coords`` (on the transform matplotlib's own placement uses), so the render
  that follows does not place it again.
- The place is matplotlib's rule: the label sits ``labelpad`` points outside the union of the drawn tick
  labels on its side (of the ticks inside the view limits, visible and in the layout) and the spine's box.
  Only the extreme tick labels are measured (``Text.get_window_extent``): for plain one-line, unrotated tick
  labels of one font and alignment, the widest (a y axis) or those with the greatest ascent, descent and
  height (an x axis), picked by their text sizes (the renderer's, memoized by
  :class:`kvsim.ui.render.FrameRenderer`); otherwise every one. The spine's box (which makes the Axis place
  its ticks again) is measured only when no tick label is drawn, when a spine was moved or when tick labels
  sit inside their ticks (negative pad); otherwise the tick labels lie outside it.
- ``follow_axes=True`` pins each label relative to its Axes (the same offset in pixels), for a layout
  engine that moves the Axes; the render after it pins in display pixels again, exactly as matplotlib would.
- A figure whose labels were pinned must go through :func:`pin_labels` before each render (matplotlib has
  no public way to unpin): :class:`kvsim.ui.layout.FrozenLayout` does. Figures drawn elsewhere never are.
- tests/test_widgets.py compares every view, rendered with pinned labels, pixel by pixel with a fresh draw of
  the same values that matplotlib lays out itself.
"""

from __future__ import annotations

import numpy as np
from matplotlib import cbook
from matplotlib.transforms import Bbox, IdentityTransform, blended_transform_factory, offset_copy

EDGE = {"left": ("y", 1), "right": ("y", 2), "bottom": ("x", 1), "top": ("x", 2)}  # label side -> axis, label1|2


def _inside(axis, locs) -> np.ndarray:
    """Which of ``locs`` lie in the view limits, as ``Axis.draw`` picks its ticks (relative tolerance 1e-10)."""
    transform = axis.get_transform()
    lo, hi = sorted(transform.transform(np.asarray(axis.get_view_interval(), dtype=float)))
    slack = (hi - lo) * 1e-10
    at = transform.transform(np.asarray(locs, dtype=float))
    return (at >= lo - slack) & (at <= hi + slack)


def tick_labels(axis, which: int) -> tuple[list[list], bool]:
    """The tick labels (label1 or label2) a render of ``axis`` draws and measures, major and minor apart
    (their ticks differ in length, so their anchors do), as (Text, tick, location, string the formatter gives)
    (the Text gets its string and place from :func:`ready`); and whether every one sits outside its tick
    (pad ≥ 0)."""
    groups, outside = [], True
    for locs, formatter, get_ticks in (
            (axis.get_majorticklocs(), axis.get_major_formatter(), axis.get_major_ticks),
            (axis.get_minorticklocs(), axis.get_minor_formatter(), axis.get_minor_ticks)):
        if not len(locs):
            continue
        inside = _inside(axis, locs)
        if not inside.any():
            continue
        labels = []
        for tick, loc, label, keep in zip(get_ticks(len(locs)), locs, formatter.format_ticks(locs), inside):
            text = tick.label1 if which == 1 else tick.label2
            if keep and text.get_visible() and text.get_in_layout():
                outside = outside and tick.get_pad() >= 0
                labels.append((text, tick, loc, label))
        if labels:
            groups.append(labels)
    return groups, outside


def ready(label):
    """The tick label's Text with its string and place as the render sets them; returns the Text."""
    text, tick, loc, s = label
    tick.update_position(loc)
    text.set_text(s)
    return text


def _plain(labels) -> bool:
    """One-line, unrotated, non-math tick labels of one font and one alignment."""
    first = labels[0][0]
    shape = (first.get_fontproperties(), first.get_horizontalalignment(), first.get_verticalalignment())
    for t, _, _, s in labels:
        if ("\n" in s or t.get_rotation() != 0 or t.get_usetex() or cbook.is_math_text(s)
                or (t.get_fontproperties(), t.get_horizontalalignment(), t.get_verticalalignment()) != shape):
            return False
    return True


def _extremes(labels, name: str, renderer) -> list:
    """The tick labels (of one group) whose boxes can reach furthest out: all of them, or for plain ones those
    picked by their text sizes (they share one anchor line and alignment, so a box grows with its text's
    width on a y axis, with its ascent, descent or height on an x axis)."""
    if not _plain(labels):
        return labels
    prop = labels[0][0].get_fontproperties()
    sizes = [renderer.get_text_width_height_descent(s, prop, False) if s else (0, 0, 0) for _, _, _, s in labels]
    keys = [lambda z: z[0]] if name == "y" else [lambda z: z[1] - z[2], lambda z: z[2], lambda z: z[1]]
    picked = {max(range(len(labels)), key=lambda i: key(sizes[i])) for key in keys}
    return [labels[i] for i in sorted(picked)]


def label_place(ax, name: str, renderer, drawn: list | None = None) -> float | None:
    """Where matplotlib puts the label of ``ax``'s ``name`` ("x", "y") axis: its x (a y axis) or y (an x
    axis) in display pixels; None if the axis is not drawn. The first and last tick label of each group
    (those at the ends of the axis, with ascending locations) go into ``drawn``, ready to measure."""
    axis = ax.yaxis if name == "y" else ax.xaxis
    if not (ax.get_visible() and ax.axison and axis.get_visible()):
        return None
    side = axis.get_label_position()
    groups, outside = tick_labels(axis, EDGE[side][1])
    boxes = [ready(label).get_window_extent(renderer)
             for labels in groups for label in _extremes(labels, name, renderer)]
    if drawn is not None:
        drawn += [ready(label) for labels in groups for label in (labels[0], labels[-1])]
    spine = ax.spines.get(side)
    if not boxes or not outside or (spine is not None and tuple(spine.get_position()) != ("outward", 0)):
        # no tick label drawn, a spine moved off the Axes' edge, or a label inside its tick: the spine's box
        # (or the Axes' without one) may reach further out than the tick labels
        boxes.append((spine if spine is not None else ax).get_window_extent())
    box = Bbox.union(boxes)
    pad = axis.labelpad * ax.figure.dpi / 72
    return {"left": box.x0 - pad, "right": box.x1 + pad, "bottom": box.y0 - pad, "top": box.y1 + pad}[side]


def edge_tick_labels(ax, name: str, renderer) -> list:
    """The tick labels of ``ax``'s ``name`` axis that can come nearest the figure's edges, ready to measure:
    of each group, those at the ends of the axis and those reaching furthest across it (:func:`_extremes`);
    [] if the axis is not drawn."""
    axis = ax.yaxis if name == "y" else ax.xaxis
    if not (ax.get_visible() and ax.axison and axis.get_visible()):
        return []
    groups, _ = tick_labels(axis, EDGE[axis.get_label_position()][1])
    picked = [[labels[0], *_extremes(labels, name, renderer), labels[-1]] for labels in groups]
    return list({id(label[0]): ready(label) for labels in picked for label in labels}.values())


def pin_labels(fig, renderer, follow_axes: bool = False) -> list:
    """Place every axis label of ``fig`` where matplotlib would, and pin it there (see the module contract);
    an empty label stays where it is (it is neither drawn nor measured). Returns the labels placed and the
    tick labels at the ends of their axes, and of an axis without a label also those reaching furthest across
    it (:func:`edge_tick_labels`), as the render will draw them."""
    drawn = []
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            x, y = axis.label.get_position()
            place = label_place(ax, name, renderer, drawn) if axis.label.get_text() else None
            if not axis.label.get_text():  # no label outside them: the tick labels themselves reach furthest
                drawn += edge_tick_labels(ax, name, renderer)
            if place is not None:
                drawn.append(axis.label)
            # the transform matplotlib gives each label: display pixels across the axis, Axes fraction along it
            if name == "y":
                transform = blended_transform_factory(IdentityTransform(), ax.transAxes)
                if place is not None:
                    x = place
                    if follow_axes:
                        transform, x = offset_copy(ax.transAxes, x=place - ax.bbox.x0, units="dots"), 0.0
            else:
                transform = blended_transform_factory(ax.transAxes, IdentityTransform())
                if place is not None:
                    y = place
                    if follow_axes:
                        transform, y = offset_copy(ax.transAxes, y=place - ax.bbox.y0, units="dots"), 0.0
            if place is None:
                transform = axis.label.get_transform()  # not drawn or empty: left where it is
            axis.set_label_coords(x, y, transform=transform)
    return drawn
