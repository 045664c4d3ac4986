"""Real-browser harness: headless Debian Chromium, driven by Playwright for Python, against a real JupyterLab.

Contract
- Chromium comes from the system (`chromium` on PATH, or KVSIM_CHROMIUM=/path); Playwright never downloads one.
  Missing browser: the ui tests skip with a loud warning, or fail when KVSIM_REQUIRE_BROWSER=1 (CI sets it).
- `lab_url` (session): copies notebooks/ into a temporary root (JupyterLab autosaves, so the committed files are
  never touched), starts `jupyter lab` on 127.0.0.1 at a free port with no token, waits for /api/status, and
  terminates the server on teardown. Lab settings, workspaces, Jupyter config and IPython dirs are temporary too,
  so a developer's own configuration cannot change what the tests see; the app-wide settings overrides are
  tools/lab_overrides.json, the file `make lab` installs (so the news check tests what learners get). The
  server log goes to test-artifacts/jupyter-lab.log.
- `lab_page` (session): one browser page per worker on a fresh workspace, where JupyterLab loads once; each lesson
  opens in it through the app's own `docmanager:open` command, as a learner opens a file from the file browser.
- `lab` (per test): a `Lab` helper on that page: `open(name)` opens a notebook and waits until its kernel is idle,
  `run_all()` runs every cell and waits until all have finished, `problems()` lists error outputs,
  `views()` finds every kvsim view (an element with class `kvsim-view`, see kvsim.ui.base),
  `move(control)` moves one slider or dropdown (and returns how to move it back), `news_notifications()` lists toasts about Jupyter news,
  `screenshot(name)` saves test-artifacts/screenshots/<name>.png. After each test the notebook's kernel is shut
  down and the notebook closed (no other notebook stays open, so the DOM queries see only the current one); a
  failed test leaves test-artifacts/playwright/<test>.png.
- KVSIM_UI_NOTEBOOKS=/dir serves another directory instead of notebooks/ (only for developing this harness).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import expect

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = Path(os.environ.get("KVSIM_UI_NOTEBOOKS", REPO / "notebooks"))
LAB_OVERRIDES = REPO / "tools" / "lab_overrides.json"  # what `make lab` installs into the venv
ARTIFACTS = REPO / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
REQUIRE_BROWSER = os.environ.get("KVSIM_REQUIRE_BROWSER") == "1"
RUN_TIMEOUT_MS = 240_000  # one lesson must run in well under a minute; this only catches hangs

# As the machine notes require for headless Chromium as root on a closed network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

_skip_reasons = []


def lesson_notebooks():
    """The lessons the browser tests run: notebooks/NN_*.ipynb."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def find_chromium():
    """Path of a system Chromium, or None."""
    candidates = [os.environ.get("KVSIM_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@pytest.fixture(scope="session")
def chromium_path():
    path = find_chromium()
    if path is None:
        reason = "chromium not found (apt-get install chromium, or set KVSIM_CHROMIUM=/path/to/chromium)"
        if REQUIRE_BROWSER:
            pytest.fail(f"KVSIM_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
        _skip_reasons.append(reason)
        pytest.skip(reason)
    return path


def _is_xdist_worker(config):
    return hasattr(config, "workerinput")


def pytest_configure(config):
    # The browser stage runs lessons on two xdist workers (each with its own JupyterLab): the run's timing file
    # is cleared once, here in the controller (or the only process), and every worker appends to it.
    if not _is_xdist_worker(config):
        (ARTIFACTS / "ui-timings.jsonl").unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter):
    # Under xdist the skips happen in the workers; the controller looks for the browser itself.
    if not _skip_reasons and find_chromium() is None and not REQUIRE_BROWSER:
        _skip_reasons.append("chromium not found (apt-get install chromium, or set KVSIM_CHROMIUM=/path/to/chromium)")
    if _skip_reasons:
        terminalreporter.write_sep("!", "REAL-BROWSER TESTS WERE SKIPPED", red=True, bold=True)
        terminalreporter.write_line(f"  {_skip_reasons[0]}", red=True, bold=True)
        terminalreporter.write_line("  The lessons were NOT checked in a browser. CI (KVSIM_REQUIRE_BROWSER=1) fails here.", red=True)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args, chromium_path):
    return {**browser_type_launch_args, "executable_path": chromium_path, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1400, "height": 1000}}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_lab_settings(settings_dir: Path, app_settings_dir: Path):
    """Render every cell (no virtual scrolling), so the DOM checks see all outputs; the project's overrides."""
    tracker = settings_dir / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    app_settings_dir.mkdir(parents=True)
    shutil.copy(LAB_OVERRIDES, app_settings_dir / "overrides.json")


def _wait_for_status(url, proc, log_path, timeout_s=90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}; log:\n{log_path.read_text()[-3000:]}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"jupyter lab did not answer /api/status within {timeout_s} s; log:\n{log_path.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def lab_url(chromium_path):
    """Start JupyterLab on a temporary copy of notebooks/; yield its base URL."""
    tmp = Path(tempfile.mkdtemp(prefix="kvsim-lab-"))
    root = tmp / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    _write_lab_settings(tmp / "settings", tmp / "app-settings")
    port = _free_port()
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", "--ServerApp.token=", "--ServerApp.password=",
        "--LabApp.expose_app_in_browser=True",
        f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
        f"--LabApp.app_settings_dir={tmp / 'app-settings'}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "JUPYTER_CONFIG_DIR": str(tmp / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "jupyter-runtime"),
        "IPYTHONDIR": str(tmp / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    env.pop("MPLBACKEND", None)  # kernels must use the inline backend, as in JupyterLab for real
    ARTIFACTS.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # one lab per xdist worker, one log each
    log_path = ARTIFACTS / (f"jupyter-lab-{worker}.log" if worker else "jupyter-lab.log")
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_status(url, proc, log_path)
        yield url
    finally:
        proc.terminate()  # the server shuts its kernels down on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


CURRENT = "window.jupyterapp?.shell?.currentWidget"

WAIT_KERNEL_IDLE = f"""(path) => {{
  const w = {CURRENT};
  return !!w && w.context?.path === path && w.sessionContext?.session?.kernel?.status === 'idle';
}}"""

# Run All has finished: the kernel is idle, no cell is running, and either every code cell has an execution count
# or a cell raised (JupyterLab then stops Run All; the cells after it stay unrun and problems() reports them).
WAIT_ALL_RUN = f"""() => {{
  const w = {CURRENT};
  const cells = w.content.model.toJSON().cells.filter(c => c.cell_type === 'code' && c.source.length > 0);
  const running = Array.from(w.content.widgets).some(c => c.model.type === 'code' && c.model.executionState === 'running');
  const raised = cells.some(c => (c.outputs || []).some(o => o.output_type === 'error'));
  return !running && w.sessionContext.session?.kernel?.status === 'idle'
      && (raised || cells.every(c => Number.isInteger(c.execution_count)));
}}"""

STDERR_TRACEBACKS = """() => Array.from(document.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'))
  .map(e => e.innerText).filter(t => /Traceback|^\\s*\\w*(Error|Exception)\\b.*:/m.test(t))"""


CONTENT_BOX = """(el) => {
  const box = el.getBoundingClientRect();
  let right = box.left;
  for (const child of el.querySelectorAll('.widget-inline-hbox, img, .jp-RenderedImage, pre')) {
    right = Math.max(right, child.getBoundingClientRect().right);
  }
  return {x: box.left, y: box.top, width: Math.min(box.width, right - box.left + 8), height: box.height};
}"""


class Lab:
    """One browser page on the test JupyterLab."""

    def __init__(self, page):
        self.page, self.path = page, None
        page.set_default_timeout(60_000)

    def open(self, name):
        """Open notebook `name` (relative to the served root) in the loaded JupyterLab; wait for an idle kernel."""
        self.path = name
        self.page.evaluate("async (path) => { await window.jupyterapp.commands.execute('docmanager:open', {path}); }",
                           name)
        self.page.wait_for_function(WAIT_KERNEL_IDLE, arg=name, timeout=120_000)

    def run_all(self):
        """Clear the stored outputs, run every cell (Run All) and wait until all have finished."""
        self.page.evaluate(f"() => {CURRENT}.content.activate()")
        self.page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs'); }")
        self.page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        self.page.wait_for_function(WAIT_ALL_RUN, timeout=RUN_TIMEOUT_MS, polling=250)

    def notebook_json(self):
        return self.page.evaluate(f"() => {CURRENT}.content.model.toJSON()")

    def problems(self):
        """Error outputs, tracebacks on stderr, and cells that did not run, from the model and the rendered page."""
        found = []
        for i, cell in enumerate(self.notebook_json()["cells"]):
            if cell["cell_type"] != "code":
                continue
            if cell["source"] and cell.get("execution_count") is None:
                found.append(f"cell {i} did not run")
            for out in cell.get("outputs", []):
                if out["output_type"] == "error":
                    found.append(f"cell {i}: {out['ename']}: {out['evalue']}")
                elif out["output_type"] == "stream" and out["name"] == "stderr" and "Traceback" in "".join(out["text"]):
                    found.append(f"cell {i}: traceback on stderr:\n{''.join(out['text'])[-800:]}")
        found += [f"rendered error output:\n{t[-800:]}" for t in self.page.evaluate(STDERR_TRACEBACKS)]
        return found

    def screenshot(self, name, locator=None):
        """Save a PNG of `locator` or, by default, of the page scrolled to the notebook's first figure."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        if locator is None:
            self.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
            first_figure = self.page.locator(".jp-Notebook .jp-OutputArea-output img").first
            if first_figure.count():
                first_figure.scroll_into_view_if_needed()
        path = SCREENSHOTS / f"{name}.png"
        if locator is None:
            self.page.screenshot(path=str(path))
        else:  # the element's box, only as wide as what it shows (a widget box spans the whole output area)
            self.page.screenshot(path=str(path), clip=locator.evaluate(CONTENT_BOX))
        return path

    def views(self):
        """[(name, locator)] of every kvsim view in the notebook, top to bottom (name from its CSS class)."""
        views = self.page.locator(".jp-Notebook .kvsim-view")
        found = []
        for i in range(views.count()):
            view = views.nth(i)
            names = [c.removeprefix("kvsim-view-") for c in (view.get_attribute("class") or "").split()
                     if c.startswith("kvsim-view-")]
            found.append((names[0] if names else f"view-{i}", view))
        return found

    @staticmethod
    def controls(view):
        """[(description, locator)] of the view's controls: every inline widget box holding an input."""
        boxes = view.locator(".widget-inline-hbox")
        found = []
        for i in range(boxes.count()):
            box = boxes.nth(i)
            if box.locator(".noUi-handle, select, input, button").count():
                found.append((box.locator(".widget-label").first.inner_text().strip() or f"control {i}", box))
        return found

    def move(self, control):
        """Move a slider one step (back from its end) or pick a dropdown's next option.

        Returns (what changed, a function that moves it back).
        """
        handle = control.locator(".noUi-handle")
        if handle.count():
            readout = control.locator(".widget-readout")
            before = readout.inner_text()
            at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
            keys = ("ArrowLeft", "ArrowRight") if at_max else ("ArrowRight", "ArrowLeft")

            def press(key, expected_change_from):
                handle.focus()
                self.page.keyboard.press(key)
                expect(readout).not_to_have_text(expected_change_from)

            press(keys[0], before)
            moved = readout.inner_text()
            return f"{before} -> {moved}", lambda: press(keys[1], moved)
        select = control.locator("select")
        if select.count():
            index = select.evaluate("s => s.selectedIndex")
            before = select.evaluate("s => s.options[s.selectedIndex].text")
            select.select_option(index=(index + 1) % select.locator("option").count())
            moved = select.evaluate("s => s.options[s.selectedIndex].text")
            return f"{before} -> {moved}", lambda: select.select_option(index=index)
        checkbox = control.locator("input[type=checkbox]")
        if checkbox.count():
            checkbox.click()
            return "toggled", checkbox.click
        raise AssertionError(f"no way to move this control: {control.inner_html()[:300]}")

    def news_notifications(self):
        """Texts of the notification toasts that mention news (JupyterLab asks about its news feed)."""
        return [t for t in self.page.locator(".Toastify__toast").all_inner_texts() if "news" in t.lower()]

    @staticmethod
    def record_timing(lesson, **seconds):
        """Append one line of JSON to test-artifacts/ui-timings.jsonl (where the browser stage spends its time)."""
        ARTIFACTS.mkdir(exist_ok=True)
        with open(ARTIFACTS / "ui-timings.jsonl", "a") as f:
            f.write(json.dumps({"lesson": lesson, **{k: round(v, 1) for k, v in seconds.items()}}) + "\n")

    def close(self):
        """Shut the current notebook's kernel down and close the notebook without saving (its changes are only
        the outputs of this run, in a temporary copy)."""
        self.page.evaluate(f"""async () => {{
          const w = {CURRENT};
          if (!w) return;
          await w.sessionContext?.shutdown();
          w.context.model.dirty = false;
          w.dispose();
        }}""")
        self.path = None


@pytest.fixture(scope="session")
def lab_page(browser, browser_context_args, lab_url):
    """One page per worker, JupyterLab loaded once on a fresh workspace; the lessons open in it one after another."""
    context = browser.new_context(**browser_context_args)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{lab_url}/lab/workspaces/t{uuid.uuid4().hex[:8]}")
    page.wait_for_function("() => !!window.jupyterapp", timeout=120_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")
    yield page
    context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.failed_call = True
    return report


@pytest.fixture
def lab(request, lab_page):
    helper = Lab(lab_page)
    yield helper
    if getattr(request.node, "failed_call", False):
        failures = ARTIFACTS / "playwright"
        failures.mkdir(parents=True, exist_ok=True)
        try:
            lab_page.screenshot(path=str(failures / f"{request.node.name}.png"))
        except Exception:  # the page may be gone: the failure itself says why
            pass
    if helper.path:
        try:
            helper.close()
        except Exception:  # the page may already be gone after a failure; the server cleans up at the end
            pass
