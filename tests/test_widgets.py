"""Every interactive view: each control at its minimum, maximum and default redraws the figure, and nothing
is drawn outside the canvas or over another label; the view's static output (PNG + text) is right."""

import base64
import inspect
import io
import itertools

import ipywidgets as widgets
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter
from matplotlib.transforms import IdentityTransform
from PIL import Image

from kvsim.lessons import VIEWS
from kvsim.ui import layout
from kvsim.ui.base import int_slider, make_view
from kvsim.ui.layout import wrap_titles
from kvsim.ui.render import FrameRenderer, encode_png, new_figure
from kvsim.ui.style import keep, legend_below, reuse

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOLERANCE_PX = 0.5


def _extremes(control):
    if isinstance(control, (widgets.SelectionSlider, widgets.Dropdown, widgets.ToggleButtons)):
        options = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return options[0], options[-1]
    return control.min, control.max


def _same(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.allclose(x, y, equal_nan=True) for x, y in zip(a, b))


def _states(view):
    """Yield (description, view) at the defaults, then with each control at its minimum and its maximum."""
    yield "defaults", view
    for key, control in view.controls.items():
        default = control.value
        for value in _extremes(control):
            control.value = value
            yield f"{key}={value!r}", view
        control.value = default


def _text_box(text, renderer):
    """Display box of a visible, non-empty Text as drawn (clipped to its clip box), or None.

    ``get_tightbbox`` is public: the window extent cut to the clip box, and for an annotation whose point
    lies outside the Axes (which is not drawn) an empty box."""
    if not text.get_visible() or not text.get_text().strip():
        return None
    box = text.get_tightbbox(renderer)
    if box is None or box.width <= 0 or box.height <= 0:
        return None
    return box


def _drawing(ax):
    return [a for a in [*ax.images, *ax.patches, *ax.lines, *ax.collections] if a.get_visible()]


def _clipped_extent(artist, renderer):
    """Display box of an image, patch, line or collection as drawn (cut to its clip box), or None if empty."""
    box = artist.get_tightbbox(renderer)
    return box if box is not None and box.width > 0 and box.height > 0 else None


def _drawn_ticks(axis):
    """The major and minor ticks a render draws: those inside the view interval (a minor tick where a major
    one is, is not drawn), as Axis.draw picks them."""
    lo, hi = sorted(axis.get_transform().transform(axis.get_view_interval()))
    tolerance = 1e-10 * (hi - lo)  # what matplotlib allows for a tick at the very end

    def inside(ticks):
        locs = axis.get_transform().transform([t.get_loc() for t in ticks]) if ticks else []
        return [t for t, x in zip(ticks, locs) if lo - tolerance <= x <= hi + tolerance]

    major = axis.get_major_ticks(len(axis.get_majorticklocs()))
    minor = axis.get_minor_ticks(len(axis.get_minorticklocs()))  # without those at a major location
    return inside(major) + inside(minor)


def drawn_boxes(fig):
    """{what: display box} of every label, title, legend and Axes a render of ``fig`` draws; of an Axes
    without a frame (a picture), every image, patch, line and collection.

    Tick labels only of the ticks matplotlib draws (inside the view limits), texts clipped as drawn; every
    box from public bounding boxes (``get_tightbbox``, ``get_window_extent``).
    """
    if not hasattr(fig.canvas, "get_renderer"):  # a figure closed through pyplot has lost its Agg canvas
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = {}
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        if ax.axison:
            boxes[f"axes {i} frame"] = ax.get_window_extent(renderer)
        else:  # a picture without a frame: each image, patch, line and collection as drawn (clipped)
            boxes.update({f"axes {i} drawing {type(a).__name__} {n}": box for n, a in enumerate(_drawing(ax))
                          if (box := _clipped_extent(a, renderer)) is not None})
        tick_labels = set()
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for tick in itertools.chain(axis.get_major_ticks(), axis.get_minor_ticks()):
                tick_labels |= {tick.label1, tick.label2}
            if not (ax.axison and axis.get_visible()):
                continue
            for tick in _drawn_ticks(axis):
                for label in (tick.label1, tick.label2):
                    if label.get_visible() and (box := _text_box(label, renderer)) is not None:
                        boxes[f"axes {i} {name} tick label {label.get_text()!r}"] = box
            for text, what in ((axis.label, "label"), (axis.offsetText, "offset text")):
                if (box := _text_box(text, renderer)) is not None:
                    boxes[f"axes {i} {name}{what} {text.get_text()!r}"] = box
        titles = set(layout.titles(ax))
        for text in ax.findobj(Text):
            if text not in tick_labels and text.axes is ax and text not in (ax.xaxis.label, ax.yaxis.label,
                                                                            ax.xaxis.offsetText, ax.yaxis.offsetText):
                if (box := _text_box(text, renderer)) is not None and not _in_legend(text, ax):
                    kind = "title" if text in titles else "text"
                    boxes[f"axes {i} {kind} {text.get_text()!r}"] = box
        if (legend := ax.get_legend()) is not None and legend.get_visible():
            boxes[f"axes {i} legend"] = legend.get_window_extent(renderer)
    for text in fig.texts:
        if (box := _text_box(text, renderer)) is not None:
            boxes[f"figure text {text.get_text()!r}"] = box
    for legend in fig.legends:
        boxes["figure legend"] = legend.get_window_extent(renderer)
    return boxes


def _in_legend(text, ax):
    legend = ax.get_legend()
    return legend is not None and (text in legend.texts or text is legend.get_title())


def outside_the_canvas(fig, boxes=None) -> list[str]:
    """What a render draws outside the figure, with by how many pixels (``boxes``: drawn_boxes(fig), if known)."""
    w, h = fig.bbox.width, fig.bbox.height
    bad = []
    for what, b in (drawn_boxes(fig) if boxes is None else boxes).items():
        over = max(-b.x0, -b.y0, b.x1 - w, b.y1 - h)
        if over > TOLERANCE_PX:
            bad.append(f"{what}: {over:.1f} px outside the {w:.0f}×{h:.0f} canvas")
    return bad


def overlapping_labels(fig, boxes=None) -> list[str]:
    """Overlapping pairs among titles, axis labels, tick labels, legends outside the Axes and texts in the
    Axes (texts and annotations against all the others, not against each other: a plot may nest them;
    ``boxes``: drawn_boxes(fig), if known)."""
    boxes = {k: b for k, b in (drawn_boxes(fig) if boxes is None else boxes).items()
             if "frame" not in k and " drawing " not in k}
    axes_boxes = [ax.get_window_extent() for ax in fig.axes if ax.get_visible()]
    # legends inside an Axes sit over the data by design; only those outside it could cover a label
    boxes = {k: b for k, b in boxes.items()
             if "legend" not in k or not any(a.contains(*b.p0) and a.contains(*b.p1) for a in axes_boxes)}
    bad = []
    for (a, ba), (b, bb) in itertools.combinations(boxes.items(), 2):
        if " text " in a and " text " in b:
            continue
        dx = min(ba.x1, bb.x1) - max(ba.x0, bb.x0)
        dy = min(ba.y1, bb.y1) - max(ba.y0, bb.y0)
        if dx > 1 and dy > 1:
            bad.append(f"{a} overlaps {b} by {dx:.0f}×{dy:.0f} px")
    return bad


def fit_problems(fig) -> list[str]:
    """outside_the_canvas and overlapping_labels of one render (the render and the boxes are the costly part)."""
    boxes = drawn_boxes(fig)
    return outside_the_canvas(fig, boxes) + overlapping_labels(fig, boxes)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_each_control_at_min_and_max_changes_the_figure_fits_and_redraws_as_new(name):
    # One walk (a redraw per state is the costly part): the defaults, then each control to its minimum and
    # maximum and back, the others at their defaults. At each state nothing may be drawn outside the canvas or
    # over another label; min and max must draw different data; back at its default a control draws the default
    # figure again. After the walk, the view's figure must equal a fresh draw of the same values: plot functions
    # update the previous call's artists in place, and that must leave no trace.
    view = VIEWS[name]()
    at_default = view.lines()
    problems = [f"defaults: {p}" for p in fit_problems(view.fig)]
    for key, control in view.controls.items():
        default, drawn = control.value, []
        for value in _extremes(control):
            control.value = value
            drawn.append(view.lines())
            problems += [f"{key}={value!r}: {p}" for p in fit_problems(view.fig)]
        control.value = default
        assert drawn[0] and drawn[1], f"{name}: nothing drawn"
        assert not _same(*drawn), f"{name}: control {key} at min and max draws the same data"
        assert _same(view.lines(), at_default), f"{name}: {key} back at its default draws another figure"
    assert problems == [], f"{name}:\n" + "\n".join(problems)
    assert len(view.redraw_seconds) >= 1 + 2 * len(view.controls)  # min and max always differ

    fresh = new_figure(view.fig.get_size_inches())
    axes = [fresh.add_axes(ax.get_position()) for ax in view.fig.axes]
    view.draw(axes[0] if len(axes) == 1 else np.array(axes).reshape(np.shape(view.ax)), **view.values())
    pictures = []
    for fig in (view.fig, fresh):
        wrap_titles(fig, fig.canvas.get_renderer())
        fig.canvas.draw()
        pictures.append(np.asarray(fig.canvas.buffer_rgba()).copy())
    differ = np.any(pictures[0] != pictures[1], axis=-1)
    assert not differ.any(), f"{name}: {differ.sum()} pixels differ, e.g. rows {np.unique(np.nonzero(differ)[0])[:10]}"


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_a_view_starts_at_its_defaults_and_a_static_page_gets_that_figure_and_a_stable_text(name):
    # One build per view for what a fresh view must be (a build is the costly part).
    # The controls start at the factory's defaults: ipywidgets clamps a value outside a slider's range without a
    # word, and the control would then show (and draw) something other than what the lesson asked for.
    factory = VIEWS[name]
    asked = {k: p.default for k, p in inspect.signature(factory).parameters.items()}
    view = factory()
    assert view.values() == {k: asked[k] for k in view.controls}
    # It lives in its own lesson's views.py, draws data (not an empty Axes) under a title or a text, and its
    # figure is not one flat colour.
    assert factory.__module__.startswith("kvsim.lessons.l") and factory.__module__.endswith(".views")
    assert view.lines() and any(np.size(d) for d in view.lines())
    assert any(ax.get_title() or ax.texts for ax in view.fig.axes)
    default = np.asarray(view.fig.canvas.buffer_rgba())[:, :, :3].copy()
    width, height = view.fig.canvas.get_width_height()
    assert default.shape == (height, width, 3) and len(np.unique(default.reshape(-1, 3), axis=0)) > 2
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"}
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(PNG_MAGIC) and png == view.static_png
    shown = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    assert shown.shape == default.shape and np.abs(shown.astype(int) - default).mean() < 0.1  # a palette image: nearly every pixel exact
    text = bundle["text/plain"]
    assert "VBox" not in text and "\n" not in text and view.name in text
    first = next(iter(view.controls.values()))
    first.value = next(v for v in _extremes(first) if v != first.value)
    # moving a control changes the live figure, not what a static page shows of the default state
    assert not np.array_equal(np.asarray(view.fig.canvas.buffer_rgba())[:, :, :3], default)
    assert base64.b64decode(view._repr_mimebundle_()["image/png"]) == png
    # the same on every run (nbval compares it): the view's name and the factory's defaults, nothing else
    shown = ", ".join(f"{k}={asked[k]!r}" for k in view.controls)
    assert text == f"kvsim view {view.name}({shown}): interactive when the notebook runs; the image is this state"


def test_a_view_cell_stores_a_png_beside_the_widget_in_a_real_notebook():
    # what an executed lesson keeps: GitHub shows the PNG, JupyterLab the live widget, nbval compares the text
    import nbformat  # here, not at the top: ~3 CPU-s per worker that never runs this test
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from kvsim.lessons.l00_start.views import slider_demo_view\nslider_demo_view()")])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    (out,) = nb.cells[0].outputs
    assert out.output_type == "execute_result"
    assert set(out.data) == {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"}
    assert base64.b64decode(out.data["image/png"]).startswith(PNG_MAGIC)
    assert out.data["text/plain"] == VIEWS["slider_demo"]().static_text


# ---------------------------------------------------------------- the mechanism, for views written later


def _plain_draw(ax, n=3, words=8):
    """Drawn the plain way (ax.clear() and rebuild), with wide tick labels, a long title and a legend under
    the x label (kvsim.ui.style.legend_below keeps it clear of the label whatever the Axes' height)."""
    ax.clear()
    ax.plot(range(n), [10**6 * i * i for i in range(n)], label="n² × 1,000,000")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("a plain draw function's long y label")
    ax.set_xlabel("n")
    ax.set_title(" ".join(["a title longer than the figure is wide"] * words))
    legend_below(ax)
    return ax


def test_a_plain_draw_function_is_fitted_without_cropping():
    view = make_view(_plain_draw, {"n": int_slider("n", 3, 2, 60), "words": int_slider("words", 8, 1, 12)})
    problems = []
    for state, _ in _states(view):
        problems += [f"{state}: {p}" for p in fit_problems(view.fig)]
    assert problems == []
    assert "\n" in view.ax.get_title()  # wrapped to fit


def test_an_update_function_runs_after_the_first_draw_and_draw_when_it_cannot():
    calls = []

    def draw(ax, height=1):
        calls.append("draw")
        ax.clear()
        return ax.bar([0], [height])  # what update gets back

    def update(bars, height=1):
        calls.append("update")
        if height > 5:
            return False  # say it cannot: draw again
        bars[0].set_height(height)

    view = make_view(draw, {"height": int_slider("height", 1, 1, 9)}, update=update)
    view.controls["height"].value = 3
    assert calls == ["draw", "update"] and view.lines()[0][0, 3] == 3
    view.controls["height"].value = 7
    assert calls == ["draw", "update", "update", "draw"] and view.lines()[0][0, 3] == 7


def test_a_view_of_several_axes_fits_them_together():
    def draw(axes, k=1):
        for i, ax in enumerate(axes.flat):
            ax.clear()
            ax.plot([0, 1], [0, k * 10**(i + 4)])
            ax.set_title(f"panel {i}")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        return axes

    view = make_view(draw, {"k": int_slider("k", 1, 1, 9)}, subplots=(1, 2), figsize=(8, 3))
    assert view.ax.shape == (1, 2) and len(view.lines()) == 2
    for state, _ in _states(view):
        assert outside_the_canvas(view.fig) == [], state
    left, right = (ax.get_position() for ax in view.ax.flat)
    assert left.x1 < right.x0  # still side by side, in order


def _category_bars(ax, n=1, words=1):
    """Horizontal bars whose widest category name grows with ``n`` (no y label outside it), under a title of
    ``words`` phrases that wraps into more lines as it grows."""
    art = reuse(ax, "bars", 3) or keep(ax, "bars", 3, {"bars": ax.barh(range(3), [1, 2, 3])})
    ax.set_yticks(range(3), ["bf16", "q8", "q4 " + "g128 " * n])
    ax.set_xlim(0, 4)
    ax.set_title(" ".join(["a title that wraps"] * words))
    return art


def test_a_wider_tick_label_or_a_title_of_more_lines_is_laid_out_before_its_one_render():
    # the widest category name of an axis without a label, and a title wrapped into more lines, would reach the
    # figure's edge on the kept layout: the view lays out first and renders once (it used to render, see the
    # ink cut off, lay out and render again), and the figure fits
    view = make_view(_category_bars, {"n": int_slider("n", 1, 1, 6), "words": int_slider("words", 1, 1, 12)})
    for key, value in (("n", 6), ("words", 12)):
        view.controls[key].value = value
        assert view.renders[-1] == 1, f"{key}={value}: {view.renders[-1]} renders"
        assert fit_problems(view.fig) == [], f"{key}={value}"
    assert view.ax.get_title().count("\n") >= 2


# ---------------------------------------------------------------- the renderer against stock Agg


def _background(renderer, width, height):
    """White canvas with a coloured band across it, so texts are composited over two colours."""
    gc = renderer.new_gc()
    gc.set_linewidth(0)
    for rect, colour in (((0, 0, width, height), (1, 1, 1, 1)), ((0, height / 3, width, height / 3), (0.2, 0.6, 0.9, 1))):
        x, y, w, h = rect
        renderer.draw_path(gc, Path([(x, y), (x + w, y), (x + w, y + h), (x, y + h), (x, y)]), IdentityTransform(),
                           colour)
    gc.restore()


@pytest.mark.parametrize("text, angle, colour, alpha, math", [
    ("KV cache 1,024 tokens gyp", 0, "black", None, False),
    ("bf16 weights 15.0 GiB", 90, "tab:red", None, False),
    ("slanted label", 30, (0.1, 0.5, 0.2, 0.6), None, False),
    ("half transparent", 0, "tab:blue", 0.5, False),
    (r"$\alpha^2 + \frac{a}{b}$", 0, "black", None, True),
])
def test_frame_renderer_draws_text_as_stock_agg_at_whole_pixels(text, angle, colour, alpha, math):
    # drawn twice (the second from the cached bitmap), at two places: pixel for pixel what RendererAgg draws
    width, height, prop = 240, 160, FontProperties(size=11)
    frame, stock = FrameRenderer(width, height, 100), RendererAgg(width, height, 100)
    for renderer in (frame, stock):
        _background(renderer, width, height)
        for x, y in ((40, 120), (90, 70)):  # y downwards, as Text.draw passes it
            gc = renderer.new_gc()
            gc.set_foreground(colour)
            gc.set_alpha(alpha)
            renderer.draw_text(gc, x, y, text, prop, angle, ismath=math)
            gc.restore()
    a, b = np.asarray(frame.buffer_rgba()), np.asarray(stock.buffer_rgba())
    assert len(frame.text_bitmaps) == 1 and not np.array_equal(b, np.asarray(_blank(width, height).buffer_rgba()))
    assert np.array_equal(a, b)
    ink = frame.inked()  # the recorded ink holds every pixel the texts changed
    rows, cols = np.nonzero(np.any(a != np.asarray(_blank(width, height).buffer_rgba()), axis=-1))
    assert ink.x0 <= cols.min() and cols.max() + 1 <= ink.x1
    assert ink.y0 <= height - rows.max() - 1 and height - rows.min() <= ink.y1


def _blank(width, height):
    renderer = RendererAgg(width, height, 100)
    _background(renderer, width, height)
    return renderer


@pytest.mark.parametrize("name", ["kv_size", "masks", "roofline"])
def test_a_view_renders_as_stock_agg_but_for_text_snapped_to_whole_pixels(name):
    view = VIEWS[name]()
    fig = view.fig
    frame = np.asarray(fig.canvas.buffer_rgba()).copy()
    texts = fig.canvas.get_renderer().ink  # every text's box is recorded (with the unclipped paths)
    FigureCanvasAgg(fig).draw()  # the same figure, same layout, on matplotlib's own Agg canvas
    stock = np.asarray(fig.canvas.buffer_rgba())
    differ = np.any(frame != stock, axis=-1)
    near_text = np.zeros_like(differ)
    h = differ.shape[0]
    for x0, y0, x1, y1 in texts:
        near_text[max(0, int(h - y1) - 2):int(np.ceil(h - y0)) + 2, max(0, int(x0) - 2):int(np.ceil(x1)) + 2] = True
    assert not (differ & ~near_text).any(), f"{name}: {(differ & ~near_text).sum()} pixels differ away from text"
    darkness = [float((255 - image[:, :, :3].astype(int)).sum()) for image in (frame, stock)]
    assert abs(darkness[0] / darkness[1] - 1) < 0.001  # the same ink, moved by under a pixel (no text missing)


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 5), (37, 101)])
def test_encode_png_holds_every_pixel_of_the_frame(rows, cols):
    # the PNG the browser receives decodes to the canvas's RGB pixels exactly (alpha is opaque on a canvas)
    rng = np.random.default_rng(rows * cols)
    rgba = rng.integers(0, 256, (rows, cols, 4), dtype=np.uint8)
    rgba[:, :, 3] = 255
    for level in (1, 6):
        png = encode_png(rgba, level)
        assert png.startswith(PNG_MAGIC)
        shown = Image.open(io.BytesIO(png))
        assert shown.mode == "RGB" and np.array_equal(np.asarray(shown), rgba[:, :, :3])
