"""Every lesson in a real JupyterLab in headless Chromium: Run All shows no error; lesson 02's tokens slider redraws.

Run with `pytest tests/ui -m ui` (make test does). Screenshots: test-artifacts/screenshots/.
"""

import re

import pytest
from conftest import NOTEBOOKS, lesson_notebooks
from playwright.sync_api import expect

pytestmark = pytest.mark.ui


@pytest.mark.parametrize("notebook", lesson_notebooks(), ids=lambda p: p.stem)
def test_lesson_runs_without_errors(lab, notebook):
    lab.open(notebook.name)
    lab.run_all()
    lab.screenshot(notebook.stem)
    assert lab.problems() == [], f"{notebook.name} shows errors in the browser"


def test_lesson_02_tokens_slider_redraws_the_plot(lab):
    lessons = sorted(NOTEBOOKS.glob("02_*.ipynb"))
    assert len(lessons) == 1, f"expected exactly one lesson notebooks/02_*.ipynb, found {[p.name for p in lessons]}"
    lab.open(lessons[0].name)
    lab.run_all()
    assert lab.problems() == []

    page = lab.page
    label = page.locator(".widget-label", has_text=re.compile("tokens", re.I))
    slider = page.locator(".widget-slider", has=label).first
    expect(slider, "no slider whose description contains 'tokens'").to_be_visible()
    cell = page.locator(".jp-Notebook .jp-Cell", has=slider).first
    img = cell.locator(".jp-OutputArea-output img").first
    expect(img, "the tokens slider's cell shows no plot image").to_be_visible()
    before_src = img.get_attribute("src")
    readout = slider.locator(".widget-readout")
    before_value = readout.inner_text()

    handle = slider.locator(".noUi-handle").first  # ipywidgets 8 sliders are noUiSlider
    at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
    handle.scroll_into_view_if_needed()
    lab.screenshot("02_tokens_slider_before", cell)
    handle.focus()
    page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")

    expect(readout).not_to_have_text(before_value)
    expect(cell.locator(".jp-OutputArea-output img").first).not_to_have_attribute("src", before_src, timeout=30_000)
    lab.screenshot("02_tokens_slider_after", cell)
    assert lab.problems() == [], "moving the tokens slider raised an error"
