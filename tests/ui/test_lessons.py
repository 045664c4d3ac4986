"""Every lesson in a real JupyterLab in headless Chromium: Run All shows no error, every control of every kvsim
view redraws its figure, and JupyterLab shows no news pop-up.

Views are found generically (the `kvsim-view` class every kvsim.lessons view carries), so a view added to a
lesson is tested without changing this file. Run with `pytest tests/ui -m ui` (make test does).
Every control is moved one step and back, the others at their defaults, and each move must change the image.
Screenshots: test-artifacts/screenshots/<lesson>.png (the page) and <lesson>-<view>.png (each view at its
defaults); docs/lesson-02-sliders.png in the README is lesson 02's seed_figure one. Time spent per lesson
(running it, moving its views): test-artifacts/ui-timings.jsonl.
"""

import time

import pytest
from conftest import lesson_notebooks
from playwright.sync_api import expect

pytestmark = pytest.mark.ui

REDRAW_TIMEOUT_MS = 30_000  # a redraw takes well under a second; some views run a small simulation first


@pytest.mark.parametrize("notebook", lesson_notebooks(), ids=lambda p: p.stem)
def test_lesson_runs_and_every_view_redraws(lab, notebook):
    start = time.monotonic()
    lab.open(notebook.name)
    lab.run_all()
    lab.screenshot(notebook.stem)
    assert lab.problems() == [], f"{notebook.name} shows errors in the browser"

    ran, moves = time.monotonic(), 0
    for name, view in lab.views():
        view.scroll_into_view_if_needed()
        image = view.locator(".widget-image").first
        expect(image, f"{notebook.stem}: view {name} shows no image").to_be_visible()
        controls = lab.controls(view)
        assert controls, f"{notebook.stem}: view {name} has no controls"
        lab.screenshot(f"{notebook.stem}-{name}", view)  # at its defaults, as the lesson shows it
        for description, control in controls:  # one at a time, the others at their defaults
            for step in ("forth", "back"):
                before = image.get_attribute("src")
                if step == "forth":
                    moved, move_back = lab.move(control)
                else:
                    move_back()
                expect(image, f"{notebook.stem}: moving {name}'s {description} ({moved}, {step}) did not redraw"
                       ).not_to_have_attribute("src", before, timeout=REDRAW_TIMEOUT_MS)
                moves += 1
    lab.record_timing(notebook.stem, open_and_run_s=ran - start, view_moves=moves, moving_s=time.monotonic() - ran)
    assert lab.problems() == [], f"{notebook.name}: moving the views' controls raised an error"
    assert lab.news_notifications() == [], "JupyterLab asked about its news feed (tools/lab_overrides.json)"
