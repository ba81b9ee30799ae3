"""The Explorer widget in a marimo app (`mo.ui.anywidget(cgviz.Explorer(trace))`), served by
`marimo run` and driven in Chromium as a person would: it renders, ▶ and → step, a click on a
node shows its outputs.

marimo puts an anywidget in a shadow root (inside <marimo-anywidget>): Playwright's CSS locators
reach into it, `document.querySelector` does not, so the waits here go through locators.

The app is written into a temporary folder; the server runs there on 127.0.0.1 with a free port,
no token, its settings and state in that folder, and no update check; it is stopped when the
module's tests end, however they end. `CGVIZ_EXPLORER_JS` (see conftest.py) reaches the app's
kernel through PYTHONPATH, as in the JupyterLab tests.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import STATE_COLUMN_JS, UI, VIEWPORT, _free_port, shot

SCENARIO = "branching"
LOAD = 90_000  # ms: a fresh marimo kernel imports torch and runs the scenario

APP = textwrap.dedent(f'''\
    import marimo

    app = marimo.App(width="full")


    @app.cell
    def _():
        import marimo as mo
        import cgviz
        from cgviz.scenarios import run_scenario
        return cgviz, mo, run_scenario


    @app.cell
    def _(mo):
        mo.md("# cgviz in marimo\\n\\nThe `{SCENARIO}` scenario on the CPU simulation, stepped in the explorer.")
        return


    @app.cell
    def _(cgviz, mo, run_scenario):
        trace = run_scenario("{SCENARIO}", "sim").trace
        widget = mo.ui.anywidget(cgviz.Explorer(trace))
        widget
        return trace, widget


    if __name__ == "__main__":
        app.run()
''')


class MarimoApp:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def stop_marimo(app: MarimoApp) -> None:
    """SIGTERM to the server's own process group (start_new_session), then SIGKILL."""
    proc = app.proc
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: Any, kernel_pythonpath: str) -> Any:
    if importlib.util.find_spec("marimo") is None:
        pytest.skip('browser tests: marimo is not installed (pip install -e ".[browser]", or `make setup`)')
    base = tmp_path_factory.mktemp("marimo")
    (base / "app.py").write_text(APP, encoding="utf-8")
    log = base / "server.log"
    env = dict(os.environ)
    env.update({
        "XDG_CONFIG_HOME": str(base / "config"), "XDG_STATE_HOME": str(base / "state"),
        "XDG_CACHE_HOME": str(base / "cache"), "MARIMO_SKIP_UPDATE_CHECK": "1", "MPLBACKEND": "Agg",
        "PYTHONPATH": os.pathsep.join([kernel_pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
    })
    port = _free_port()
    args = [sys.executable, "-m", "marimo", "run", "app.py", "--headless", "--host", "127.0.0.1", "--port", str(port),
            "--no-token", "--no-sandbox"]
    with open(log, "wb") as fh:  # cwd: the app's folder, so the kernel imports cgviz from kernel_pythonpath
        proc = subprocess.Popen(args, cwd=base, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    app = MarimoApp(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"marimo run exited with {proc.returncode}:\n{app.log_tail()}")
            try:
                with urllib.request.urlopen(app.url + "/health", timeout=5) as r:
                    r.read()
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"marimo run did not answer /health within 60 s:\n{app.log_tail()}") from None
                time.sleep(0.25)
        yield app
    finally:
        stop_marimo(app)


@pytest.fixture(scope="module")
def opened(browser: Any, marimo_app: MarimoApp) -> Any:
    """The app open in a 1280x800 page (its kernel starts with the page), and the trace the app
    shows, built here too, meanwhile, for what the page should say."""
    from cgviz.scenarios import run_scenario

    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(marimo_app.url + "/")
        yield page, run_scenario(SCENARIO, "sim").trace, errors, marimo_app
    finally:
        ctx.close()


def wait_for_explorer(page: Any, errors: list[str], app: MarimoApp) -> None:
    """Until the explorer's headline shows; fails at once on an error in the page (a front end
    that throws: marimo shows its message in red in the cell's output, in the shadow root, and
    logs it to the console, which is where this sees it)."""
    headline = page.locator(".cgviz .cg-headline:not(:empty)")
    deadline = time.monotonic() + LOAD / 1000
    while not errors and headline.count() == 0 and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    if errors or headline.count() == 0:
        shot(page, "marimo-no-explorer")
        outputs = page.locator(".marimo-cell .output-area").all_inner_texts()
        raise AssertionError(f"no explorer in the marimo app; page errors: {errors}; cell outputs: {outputs}\n"
                             f"server log:\n{app.log_tail()}")
    page.locator(".cgviz").first.scroll_into_view_if_needed()


def headline_after(ui: UI, before: str) -> str:
    from playwright.sync_api import expect

    expect(ui.el(".cg-headline")).not_to_have_text(before, timeout=10_000)
    return ui.headline()


def test_marimo_explorer(opened: Any) -> None:
    from playwright.sync_api import expect

    page, trace, errors, app = opened
    wait_for_explorer(page, errors, app)
    ui, n = UI(page), len(trace.steps)
    assert page.viewport_size == VIEWPORT
    # the widget's stylesheet reached marimo's shadow root: the panels are laid out by page.css
    assert ui.el(".cg-main").evaluate("e => getComputedStyle(e).display") == "grid", "explorer CSS not applied"
    shot(page, "marimo-rendered")

    first = ui.headline()
    assert ui.step_of(first) == (1, n)
    assert ui.tree_nodes() == len(trace.steps[0].snapshot.nodes)

    # ▶ moves one step; → too, with the widget focused
    ui.el(".cg-next").click()
    second = headline_after(ui, first)
    assert ui.step_of(second) == (2, n)
    root = page.locator(".cgviz").first
    root.focus()
    assert root.evaluate("e => e.getRootNode().activeElement === e"), "the explorer did not take the focus"
    page.keyboard.press("ArrowRight")
    third = headline_after(ui, second)
    assert ui.step_of(third) == (3, n)

    # the last step: the tree has the last snapshot's nodes
    ui.el(".cg-last").click()
    assert ui.step_of(headline_after(ui, third)) == (n, n)
    expect(page.locator(".cgviz .cg-tree-box [id^='node-']")).to_have_count(len(trace.steps[-1].snapshot.nodes),
                                                                           timeout=10_000)
    shot(page, "marimo-last-step")

    # clicking a node shows its outputs, `state` first
    node = trace.steps[-1].snapshot.nodes[1].id
    ui.click_node(node)
    expect(ui.el(".cg-node .title")).to_contain_text(f"node {node}", timeout=10_000)
    assert ui.node_table_headers()[:1] == ["state"]
    assert ui.layout_problems() == []
    # the `state` header on screen and not covered: looked up in the shadow root, where it is
    js = STATE_COLUMN_JS.replace("document.elementFromPoint", "th.getRootNode().elementFromPoint")
    assert js != STATE_COLUMN_JS
    ui.el(".cg-node-panel").scroll_into_view_if_needed()
    problem = root.evaluate(js)
    shot(page, "marimo-node-selected")
    assert problem is None, problem
    assert not errors, f"errors in the page: {errors}"


def test_marimo_header_has_no_objects(opened: Any) -> None:
    """marimo's JSON encoder sends a str subclass (torch.__version__ is a TorchVersion) as {}:
    the trace's meta holds plain strings."""
    page, _, errors, app = opened
    wait_for_explorer(page, errors, app)
    header = page.locator(".cgviz .cg-header").first.inner_text()
    assert "[object Object]" not in header, header


def test_marimo_dark_theme_darkens_the_explorer(opened: Any) -> None:
    """marimo's dark theme (what it sets on <body>: a "dark-theme" class and data-theme="dark"):
    the explorer follows it, and back; no panel stays white."""
    page, _, errors, app = opened
    wait_for_explorer(page, errors, app)
    ui = UI(page)
    set_theme = "(t) => { const b = document.body; b.classList.remove('light', 'light-theme', 'dark', 'dark-theme'); " \
                "b.classList.add(t, t + '-theme'); b.dataset.theme = t; }"
    root = page.locator(".cgviz").first
    try:
        page.evaluate(set_theme, "dark")
        page.wait_for_function("() => true")
        root.evaluate("e => new Promise((r) => requestAnimationFrame(() => r()))")
        assert root.evaluate("e => e.classList.contains('cg-dark')"), "the explorer did not follow marimo's dark theme"
        shot(page, "marimo-dark")
        white = ui.white_boxes()
        assert white == [], "white boxes in marimo's dark theme:\n  " + "\n  ".join(white)
    finally:
        page.evaluate(set_theme, "light")
    root.evaluate("e => new Promise((r) => requestAnimationFrame(() => r()))")
    assert not root.evaluate("e => e.classList.contains('cg-dark')")
