"""PNG frames for the views, on matplotlib's public API: an Agg canvas that rasterizes each distinct text once,
records where it inked, and a plain PNG writer.

Contract
- :func:`new_figure` makes a Figure on a :class:`FrameCanvas` (no pyplot: nothing else ever shows it).
- :class:`FrameCanvas` draws with one :class:`FrameRenderer` per canvas size (kept across draws, so its caches
  persist). The renderer overrides public renderer methods only: ``draw_text`` rasterizes a text once with
  stock ``RendererAgg.draw_text`` on a scratch renderer and afterwards composites that bitmap with
  ``draw_image`` (matplotlib 3.11 lays out and renders every glyph from Python on every draw: about 1 ms per
  label); ``get_text_width_height_descent`` is memoized; ``draw_path`` and ``clear`` keep ``ink``: the box of
  every text (its bitmap and its layout box, width × line height at the baseline) and every unclipped path
  drawn since the last clear, in display pixels with y upwards, which :mod:`kvsim.ui.layout` checks
  against the figure's edges.
- Drawing differs from stock Agg only by each text's origin snapped to whole pixels (at most half a pixel);
  at whole-pixel origins it is identical (tests/test_widgets.py compares both on every matplotlib tested).
- :func:`encode_png` writes the canvas as an RGB PNG: filter "none" and zlib level 1 (PIL's encoder, with
  its per-row filter search, takes 4× as long for a file of the same size); :func:`encode_static_png` a
  palette PNG a third that size, for what a notebook stores.
"""

from __future__ import annotations

import io
import math
import struct
import zlib

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.path import Path
from matplotlib.transforms import Bbox
from PIL import Image

MAX_CACHED_TEXTS = 4096  # distinct (string, font, angle, colour) bitmaps per renderer; then it starts over
MARGIN_EM = 0.5  # scratch room around a text's layout box, in font sizes (glyphs may overhang their advance)


def _text_options(mtext) -> tuple:
    """What else of the Text artist shapes its glyphs (font features and language, where matplotlib has them)."""
    if mtext is None:
        return ()
    options = []
    for getter in ("get_fontfeatures", "get_language"):  # public Text methods since matplotlib 3.11
        value = getattr(mtext, getter, lambda: None)()
        options.append(tuple(value) if isinstance(value, list) else value)
    return tuple(options)


class FrameRenderer(RendererAgg):
    """RendererAgg drawing each distinct text from a cached bitmap, recording the inked box of each frame."""

    def __init__(self, width, height, dpi):
        super().__init__(width, height, dpi)
        # (string, font, angle, math, antialiased, colour, alpha, options) -> (rgba rows × cols × 4, dx, dy) | None
        self.text_bitmaps: dict = {}
        self.text_sizes: dict = {}  # (string, font, math) -> (width, height, descent) in pixels
        self.ink: list[tuple[float, float, float, float]] = []  # (x0, y0, x1, y1) display pixels, y up

    # --- text -------------------------------------------------------------------------------------------
    def get_text_width_height_descent(self, s, prop, ismath):
        # memoized: Text measures its lines through matplotlib's own cache, but legends, title wrapping and
        # rasterize ask the renderer directly (one font layout each, the slowest step of a new label)
        key = (s, prop.copy(), ismath)
        if key not in self.text_sizes:
            if len(self.text_sizes) >= MAX_CACHED_TEXTS:
                self.text_sizes.clear()
            self.text_sizes[key] = super().get_text_width_height_descent(s, prop, ismath)
        return self.text_sizes[key]

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        # x, y: the text's origin, y downwards (as Text.draw passes it to a renderer that flips y)
        key = (s, prop.copy(), angle, ismath, bool(gc.get_antialiased()), tuple(gc.get_rgb()), gc.get_alpha(),
               _text_options(mtext))
        if key not in self.text_bitmaps:
            if len(self.text_bitmaps) >= MAX_CACHED_TEXTS:
                self.text_bitmaps.clear()
            self.text_bitmaps[key] = self.rasterize(gc, s, prop, angle, ismath, mtext)
        bitmap, (bx0, by0, bx1, by1) = self.text_bitmaps[key]
        x0, y1 = round(x), self.height - round(y)  # the origin snapped to a pixel, y upwards
        self.record(gc, (x0 + bx0, y1 + by0, x0 + bx1, y1 + by1))
        if bitmap is None:  # nothing visible (spaces)
            return
        rgba, dx, dy = bitmap  # dx, dy: the bitmap's top left corner from the origin, y downwards
        rows, cols = rgba.shape[:2]
        left, bottom = x0 + dx, y1 - dy - rows
        self.record(gc, (left, bottom, left + cols, bottom + rows))
        opaque = self.new_gc()  # the bitmap carries the text's colour and alpha already
        opaque.copy_properties(gc)
        opaque.set_alpha(1.0)
        self.draw_image(opaque, left, bottom, rgba[::-1])  # draw_image takes the bottom row first
        opaque.restore()

    def rasterize(self, gc, s, prop, angle, ismath, mtext):
        """The text drawn once by stock Agg at a whole-pixel origin on a transparent scratch canvas.

        Returns (bitmap, box): bitmap = (RGBA pixels, top row first; column and row of their top left corner
        from the origin, y downwards), None if nothing is visible; box = the text's layout box (its width by
        the height of a line of this font, or its own if taller, rotated about the origin) as (x0, y0, x1, y1)
        from the origin, y upwards.
        """
        w, h, d = self.get_text_width_height_descent(s, prop, ismath)
        _, lp_h, lp_d = self.get_text_width_height_descent("lp", prop, False)  # a line's height, as Text counts it
        up, down = max(h - d, lp_h - lp_d), max(d, lp_d)
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        corners = [(u * cos - v * sin, u * sin + v * cos) for u in (0, w) for v in (-down, up)]  # y up
        xs, ys = [c[0] for c in corners], [c[1] for c in corners]
        box = (min(xs), min(ys), max(xs), max(ys))
        for attempt in range(1, 4):
            margin = math.ceil(attempt * MARGIN_EM * prop.get_size_in_points() * self.dpi / 72) + 2
            x0, y0 = margin - math.floor(box[0]), margin + math.ceil(box[3])  # origin: column, row (y down)
            cols, rows = x0 + math.ceil(box[2]) + margin, y0 - math.floor(box[1]) + margin
            scratch = RendererAgg(cols, rows, self.dpi)
            pen = scratch.new_gc()
            pen.copy_properties(gc)
            pen.set_clip_rectangle(None)  # the canvas clips when the bitmap is composited
            pen.set_clip_path(None)
            scratch.draw_text(pen, x0, y0, s, prop, angle, ismath, mtext)
            pen.restore()
            alpha = np.asarray(scratch.buffer_rgba())[:, :, 3]
            used_rows, used_cols = np.nonzero(alpha.any(axis=1))[0], np.nonzero(alpha.any(axis=0))[0]
            if not len(used_rows):
                return None, box
            r0, r1, c0, c1 = used_rows[0], used_rows[-1] + 1, used_cols[0], used_cols[-1] + 1
            if r0 > 0 and c0 > 0 and r1 < rows and c1 < cols:  # nothing reached the edge: nothing was cut off
                break
        rgba = np.asarray(scratch.buffer_rgba())[r0:r1, c0:c1].copy()
        return (rgba, int(c0 - x0), int(r0 - y0)), box

    # --- ink --------------------------------------------------------------------------------------------
    def record(self, gc, box):
        """Record ``box`` (x0, y0, x1, y1) cut to the clip rectangle, if anything of it is left."""
        clip = gc.get_clip_rectangle()
        if clip is not None:
            box = (max(box[0], clip.x0), max(box[1], clip.y0), min(box[2], clip.x1), min(box[3], clip.y1))
            if box[0] >= box[2] or box[1] >= box[3]:
                return
        self.ink.append(box)

    def draw_path(self, gc, path, transform, rgbFace=None):
        # a clipped path lies inside its clip box (inside an Axes): only unclipped ones can reach an edge
        if gc.get_clip_rectangle() is None and gc.get_clip_path() == (None, None):
            xy = transform.transform(path.vertices)
            if path.codes is not None:
                xy = xy[(path.codes != Path.CLOSEPOLY) & (path.codes != Path.STOP)]
            if len(xy):
                (x0, y0), (x1, y1) = np.nanmin(xy, axis=0), np.nanmax(xy, axis=0)
                if not (x0 <= 0.5 and y0 <= 0.5 and x1 >= self.width - 0.5 and y1 >= self.height - 0.5):  # background
                    pad = gc.get_linewidth() * self.dpi / 144  # half the line width, points -> pixels
                    self.ink.append((x0 - pad, y0 - pad, x1 + pad, y1 + pad))
        super().draw_path(gc, path, transform, rgbFace)

    def inked(self) -> Bbox | None:
        """Union of everything recorded since the last clear."""
        if not self.ink:
            return None
        a = np.array(self.ink)
        return Bbox([[a[:, 0].min(), a[:, 1].min()], [a[:, 2].max(), a[:, 3].max()]])

    def clear(self):
        super().clear()
        self.ink = []


class FrameCanvas(FigureCanvasAgg):
    """An Agg canvas drawing with :class:`FrameRenderer`, one kept per canvas size and dpi."""

    frame_renderer_key = None  # (width, height, dpi) of self.renderer

    def get_renderer(self):
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self.frame_renderer_key != key:
            self.renderer = FrameRenderer(w, h, self.figure.dpi)
            self.frame_renderer_key = key
        return self.renderer


def new_figure(figsize, dpi: float = 100) -> Figure:
    """A white Figure on a FrameCanvas, outside pyplot."""
    fig = Figure(figsize=figsize, dpi=dpi, facecolor="white")
    FrameCanvas(fig)
    return fig


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(rgba: np.ndarray, level: int = 1) -> bytes:
    """An 8-bit RGB PNG of an opaque (rows, cols, 4) image: every row unfiltered, zlib at ``level``."""
    rows, cols = rgba.shape[:2]
    raw = np.empty((rows, 1 + 3 * cols), dtype=np.uint8)
    raw[:, 0] = 0  # a leading 0 per row = filter type "none"
    pixels = raw[:, 1:]
    for channel in range(3):  # one strided copy per channel: twice as fast as copying rgba[:, :, :3] at once
        pixels[:, channel::3] = rgba[:, :, channel]
    header = struct.pack(">IIBBBBB", cols, rows, 8, 2, 0, 0, 0)  # 8 bits, colour type 2 (RGB)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, level))
            + _chunk(b"IEND", b""))


def encode_static_png(rgba: np.ndarray) -> bytes:
    """A small PNG for storing in a notebook: 256-colour palette, optimized (a third of :func:`encode_png`'s
    size, ~100 ms instead of 5: made once per view, for the page a reader sees without a kernel)."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba[:, :, :3])).quantize(256, method=Image.Quantize.MEDIANCUT).save(
        buffer, format="png", optimize=True)
    return buffer.getvalue()
