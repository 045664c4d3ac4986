"""Fast PNG frames for the views: an Agg canvas that caches text, records where it inked, and a plain PNG writer.

Contract
- :func:`new_figure` makes a Figure on a :class:`FrameCanvas` (no pyplot: nothing else ever shows it).
- :class:`FrameCanvas` draws with :class:`FrameRenderer`, which rasterizes each distinct string once and
  afterwards stamps the cached bitmap (matplotlib 3.11 lays out and renders every glyph from Python on
  every draw: about 1 ms per label), and records ``ink``: the box of everything drawn (texts as their
  layout boxes; paths, markers, collections and quad meshes as their extent, or their clip box when
  clipped; images as their extent cut to their clip box), in display pixels with y upwards.
- :func:`encode_png` writes the canvas as an RGB PNG: filter "none" and zlib level 1 (PIL's encoder, with
  its per-row filter search, takes 4× as long for a file of the same size); :func:`encode_static_png` a
  palette PNG a third that size, for what a notebook stores.
Drawing differs from stock Agg only by text snapped to whole pixels (at most half a pixel).
"""

from __future__ import annotations

import io
import math
import struct
import zlib

import numpy as np
from matplotlib.backends.backend_agg import (
    FigureCanvasAgg,
    RendererAgg,
    get_hinting_flag,
)
from matplotlib.figure import Figure
from matplotlib.font_manager import fontManager, get_font
from matplotlib.ft2font import RenderMode
from matplotlib.path import Path, get_path_collection_extents
from matplotlib.text import _get_text_metrics_with_cache
from matplotlib.transforms import Bbox
from PIL import Image

_MAX_CACHED_TEXTS = 4096
_UNCACHED = object()  # a text this renderer leaves to RendererAgg


class FrameRenderer(RendererAgg):
    """RendererAgg with cached text bitmaps and font metrics, recording the inked box of each frame."""

    def __init__(self, width, height, dpi):
        super().__init__(width, height, dpi)
        self._texts: dict = {}    # (string, font, angle, ...) -> (coverage uint8 [rows, cols], dx, dy) or None
        self._heights: dict = {}  # font -> (min ascent, min descent, line gap) in pixels
        self.ink: list[tuple[float, float, float, float]] = []  # (x0, y0, x1, y1) display pixels, y up

    # --- text -------------------------------------------------------------------------------------------
    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        self._record_text(gc, x, y, s, prop, angle, ismath)
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        aa = bool(gc.get_antialiased())
        key = (s, prop.copy(), angle, aa, ismath, features if features is None else tuple(features), language)
        x0, y0 = round(x), round(y)  # y downwards, as Text.draw passes it
        if key not in self._texts:
            if len(self._texts) > _MAX_CACHED_TEXTS:
                self._texts.clear()
            glyphs = self._glyphs(s, prop, ismath, aa, features, language)
            self._texts[key] = _UNCACHED if glyphs is None else self._rasterize(x0, y0, angle, aa, glyphs)
        cached = self._texts[key]
        if cached is _UNCACHED:
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        if cached is not None:  # None: nothing visible (spaces)
            image, dx, dtop = cached
            top = self.height - y0 + dtop  # FreeType's y is upwards
            self._renderer.draw_text_image(image, x0 + dx, int(self.height) - top + image.shape[0], 0, gc)

    def _glyphs(self, s, prop, ismath, aa, features, language):
        """(font, size, glyph index, slant, extend, dx, dy) per glyph as RendererAgg lays them out, or None
        for what this cache does not handle (TeX, mathtext with rules such as fraction bars)."""
        if ismath == "TeX" or not hasattr(self._prepare_font(prop), "_layout"):  # older matplotlib: stock path
            return None
        if ismath:
            parse = self.mathtext_parser.parse(s, self.dpi, prop, antialiased=aa)
            return None if parse.rects else [(f, size, i, 0, 1, dx, dy) for f, size, _, i, dx, dy in parse.glyphs]
        items = self._prepare_font(prop)._layout(s, flags=get_hinting_flag(), features=features, language=language)
        return [(it.ft_object, prop.get_size_in_points(), it.glyph_index, 0, 1, it.x, it.y) for it in items]

    def _rasterize(self, x, y, angle, aa, glyphs):
        """Render glyphs once at integer origin (x, y); return their coverage image and offset from the origin."""
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        tiles = []  # (coverage, left, top) in FreeType pixels, y upwards
        for font, size, index, slant, extend, dx, dy in glyphs:  # as RendererAgg._draw_text_glyphs_and_boxes
            font.set_size(size, self.dpi)
            font._set_transform((0x10000 * np.array([[cos, -sin], [sin, cos]]) @ [[extend, extend * slant], [0, 1]]
                                 ).round().astype(int),
                                [round(0x40 * (x + dx * cos - dy * sin)),
                                 round(0x40 * (self.height - y + dx * sin + dy * cos))])
            bitmap = font._render_glyph(index, get_hinting_flag(), RenderMode.NORMAL if aa else RenderMode.MONO)
            cover = np.array(bitmap.buffer, dtype=np.uint8) * (1 if aa else 0xFF)
            if cover.size:
                tiles.append((cover, bitmap.left, bitmap.top))
        if not tiles:
            return None
        left = min(t[1] for t in tiles)
        top = max(t[2] for t in tiles)
        right = max(t[1] + t[0].shape[1] for t in tiles)
        bottom = min(t[2] - t[0].shape[0] for t in tiles)
        image = np.zeros((top - bottom, right - left), dtype=np.uint16)
        for cover, gl, gt in tiles:  # overlapping edges combine as 1 - (1 - a)(1 - b), as drawing twice does
            tile = image[top - gt:top - gt + cover.shape[0], gl - left:gl - left + cover.shape[1]]
            tile[...] = 255 - (255 - tile) * (255 - cover.astype(np.uint16)) // 255
        return image.astype(np.uint8), left - x, top - (self.height - y)

    def _get_font_height_metrics(self, prop):
        """Font ascent, descent and line gap in pixels (Text._get_layout asks this of the renderer, per label)."""
        key = prop.copy()
        if key not in self._heights:
            font = get_font(fontManager._find_fonts_by_props(prop))
            found = (None, None, None)
            for table_name, gap, ascent, descent in (("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                                                     ("hhea", "lineGap", "ascent", "descent")):
                table = font.get_sfnt_table(table_name)
                if table is not None:
                    scale = prop.get_size_in_points() * self.dpi / 72 / font.get_sfnt_table("head")["unitsPerEm"]
                    found = (table[ascent] * scale, -table[descent] * scale, table[gap] * scale)
                    break
            self._heights[key] = found
        return self._heights[key]

    # --- ink --------------------------------------------------------------------------------------------
    def _record_text(self, gc, x, y, s, prop, angle, ismath):
        """The layout box of one line of text (width × font ascent + descent), rotated about its origin."""
        w, h, d = _get_text_metrics_with_cache(self, s, prop, ismath, self.dpi)
        ascent, descent, _ = self._get_font_height_metrics(prop)
        up, down = max(h - d, ascent or 0), max(d, descent or 0)
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        xs, ys = [], []
        for u, v in ((0, -down), (w, -down), (w, up), (0, up)):
            xs.append(x + u * cos - v * sin)
            ys.append(self.height - y + u * sin + v * cos)
        self._record(gc, (min(xs), min(ys), max(xs), max(ys)))

    def _record(self, gc, box):
        clip = gc.get_clip_rectangle()
        if clip is not None:
            box = (max(box[0], clip.x0), max(box[1], clip.y0), min(box[2], clip.x1), min(box[3], clip.y1))
            if box[0] >= box[2] or box[1] >= box[3]:
                return  # clipped away entirely
        self.ink.append(box)

    def _record_shape(self, gc, points):
        """Record a path's box; a clipped one is bounded by its clip box (no need to measure the path)."""
        clip = gc.get_clip_rectangle()
        if clip is not None:
            box = tuple(clip.extents)
            if not self.ink or self.ink[-1] != box:
                self.ink.append(box)
            return
        xy = points()
        if len(xy):
            (x0, y0), (x1, y1) = np.nanmin(xy, axis=0), np.nanmax(xy, axis=0)
            if not (x0 <= 0.5 and y0 <= 0.5 and x1 >= self.width - 0.5 and y1 >= self.height - 0.5):  # background
                pad = gc.get_linewidth() * self.dpi / 144  # half the line width, points -> pixels
                self.ink.append((x0 - pad, y0 - pad, x1 + pad, y1 + pad))

    def draw_path(self, gc, path, transform, rgbFace=None):
        self._record_shape(gc, lambda: _points(path, transform))
        super().draw_path(gc, path, transform, rgbFace)

    def _update_methods(self):
        # RendererAgg binds these straight to its C renderer per instance; wrap them to record their ink
        super()._update_methods()
        agg_markers, agg_collection = self._renderer.draw_markers, self._renderer.draw_path_collection

        def draw_markers(gc, marker_path, marker_trans, path, trans, *args):
            def points():  # every marker position plus the marker's own extent
                at, mark = _points(path, trans), _points(marker_path, marker_trans)
                if not len(at) or not len(mark):
                    return at
                return np.concatenate([at + np.nanmin(mark, axis=0), at + np.nanmax(mark, axis=0)])
            self._record_shape(gc, points)
            return agg_markers(gc, marker_path, marker_trans, path, trans, *args)

        def draw_path_collection(gc, master_transform, paths, transforms, offsets, offset_trans, *args, **kw):
            if len(paths):
                self._record_shape(gc, lambda: get_path_collection_extents(
                    master_transform, paths, transforms, offsets, offset_trans).get_points())
            return agg_collection(gc, master_transform, paths, transforms, offsets, offset_trans, *args, **kw)

        agg_image, agg_mesh = self._renderer.draw_image, self._renderer.draw_quad_mesh

        def draw_image(gc, x, y, im, *args):  # (x, y): lower left corner in pixels, y up; im: (rows, cols, 4)
            self._record(gc, (x, y, x + im.shape[1], y + im.shape[0]))
            return agg_image(gc, x, y, im, *args)

        def draw_quad_mesh(gc, master_transform, width, height, coordinates, *args, **kw):
            self._record_shape(gc, lambda: master_transform.transform(np.reshape(coordinates, (-1, 2))))
            return agg_mesh(gc, master_transform, width, height, coordinates, *args, **kw)

        self.draw_markers, self.draw_path_collection = draw_markers, draw_path_collection
        self.draw_image, self.draw_quad_mesh = draw_image, draw_quad_mesh

    def inked(self) -> Bbox | None:
        """Union of everything recorded since the last clear."""
        if not self.ink:
            return None
        a = np.array(self.ink)
        return Bbox([[a[:, 0].min(), a[:, 1].min()], [a[:, 2].max(), a[:, 3].max()]])

    def clear(self):
        super().clear()
        self.ink = []


def _points(path, transform) -> np.ndarray:
    """Display coordinates of a path's vertices (curve control points bound the curve; CLOSEPOLY skipped)."""
    xy = transform.transform(path.vertices)
    if path.codes is not None:
        xy = xy[(path.codes != Path.CLOSEPOLY) & (path.codes != Path.STOP)]
    return xy


class FrameCanvas(FigureCanvasAgg):
    """An Agg canvas drawing with :class:`FrameRenderer` (kept across draws, so its caches persist)."""

    def get_renderer(self):
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = FrameRenderer(w, h, self.figure.dpi)
            self._lastKey = key
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
    raw = np.zeros((rows, 1 + 3 * cols), dtype=np.uint8)  # a leading 0 per row = filter type "none"
    raw[:, 1:] = rgba[:, :, :3].reshape(rows, 3 * cols)
    header = struct.pack(">IIBBBBB", cols, rows, 8, 2, 0, 0, 0)  # 8 bits, colour type 2 (RGB)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw.tobytes(), level))
            + _chunk(b"IEND", b""))


def encode_static_png(rgba: np.ndarray) -> bytes:
    """A small PNG for storing in a notebook: 256-colour palette, optimized (a third of :func:`encode_png`'s
    size, ~100 ms instead of 5: made once per view, for the page a reader sees without a kernel)."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba[:, :, :3])).quantize(256, method=Image.Quantize.MEDIANCUT).save(
        buffer, format="png", optimize=True)
    return buffer.getvalue()
