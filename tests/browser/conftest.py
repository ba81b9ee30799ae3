"""Fixtures for the browser tests: Debian's Chromium driven by Playwright, and a JupyterLab
server (which also serves Notebook 7) started in a temporary directory.

The tests skip, saying why, only where Chromium, Playwright or JupyterLab cannot be found
(`make setup` installs them: Debian's chromium, and the `browser` extra). Every server and
browser started here is stopped, also when a test fails.

Screenshots go to a temporary folder, printed at the start and the end of the run
(`CGVIZ_SHOTS=<dir>` picks it).

`CGVIZ_EXPLORER_JS=<file>` runs everything with that file in place of the package's
cgviz/views/page/explorer.js (in the exported page, and in the kernel through a temporary copy of
the package first on its PYTHONPATH): a way to check that these tests fail when the front end
breaks, without touching the real file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CGVIZ_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 800}
PANELS = [".cg-steps-panel", ".cg-tree-panel", ".cg-node-panel", ".cg-pool-panel"]

_shots: Optional[Path] = None


def shots_dir() -> Path:
    global _shots
    if _shots is None:
        chosen = os.environ.get("CGVIZ_SHOTS")
        if chosen:
            _shots = Path(chosen)
            _shots.mkdir(parents=True, exist_ok=True)
        else:
            _shots = Path(tempfile.mkdtemp(prefix="cgviz-browser-shots-"))
    return _shots


def pytest_report_header(config: Any) -> str:
    return f"browser screenshots: {shots_dir()}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _shots is not None and any(_shots.iterdir()):
        terminalreporter.write_line(f"browser screenshots: {_shots}")


def shot(page: Any, name: str) -> Path:
    """A screenshot of the viewport, numbered in the order taken."""
    d = shots_dir()
    path = d / f"{len(list(d.glob('*.png'))):02d}-{name}.png"
    page.screenshot(path=str(path))
    return path


# the pictures (images, SVG drawings) inside each `area` (a selector: a notebook's output, a
# docs cell's) that reach past its right edge: [picture width, area width] for each
_PICTURES_PAST_JS = """(area) => [...document.querySelectorAll(`${area} svg, ${area} img`)]
  .filter((pic) => !pic.parentElement.closest('svg'))  // an element inside a drawing, not a picture
  .map((pic) => [pic.getBoundingClientRect(), pic.closest(area).getBoundingClientRect()])
  .filter(([box, out]) => box.width > 0 && box.right > out.right + 1)
  .map(([box, out]) => [Math.round(box.width), Math.round(out.width)])"""


def pictures_past_their_area(page: Any, area: str) -> list[list[int]]:
    """The pictures of the page cut off at the right of their `area` (none where all fit)."""
    return page.evaluate(_PICTURES_PAST_JS, area)


# -- the front end under test ---------------------------------------------------------------------
def explorer_js_override() -> Optional[str]:
    path = os.environ.get("CGVIZ_EXPLORER_JS")
    return Path(path).read_text(encoding="utf-8") if path else None


@pytest.fixture(scope="session")
def kernel_pythonpath(tmp_path_factory: Any) -> str:
    """PYTHONPATH for the kernel: this checkout, or a copy of its package with the overriding
    explorer.js in place (CGVIZ_EXPLORER_JS)."""
    js = explorer_js_override()
    if js is None:
        return str(REPO)
    root = tmp_path_factory.mktemp("cgviz-override")
    shutil.copytree(REPO / "cgviz", root / "cgviz", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "cgviz" / "views" / "page" / "explorer.js").write_text(js, encoding="utf-8")
    return str(root)


# -- Chromium --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def browser() -> Any:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests: Chromium not found at {CHROMIUM} (install Debian's chromium: "
                    "`apt-get install -y chromium`, or run `make setup` as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip('browser tests: playwright is not installed (pip install -e ".[browser]", or `make setup`)')
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


@pytest.fixture
def context(browser: Any) -> Any:
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        yield ctx
    finally:
        ctx.close()


# -- JupyterLab ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jupyter_lab() -> Optional[list[str]]:
    exe = Path(sys.executable).with_name("jupyter-lab")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("jupyter-lab")
    return [found] if found else None


class JupyterServer:
    def __init__(self, url: str, token: str, root: Path, proc: subprocess.Popen, log: Path) -> None:
        self.url, self.token, self.root, self.proc, self.log = url, token, root, proc, log

    def api(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(self.url + path, method=method, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            body = r.read()
        return json.loads(body) if body else None

    def page_url(self, path: str) -> str:
        return f"{self.url}{path}{'&' if '?' in path else '?'}token={self.token}"

    def write_notebook(self, name: str, cells: list[str]) -> str:
        import nbformat

        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nbformat.write(nb, str(self.root / name))
        return name

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: Any, kernel_pythonpath: str) -> Any:
    """A JupyterLab server on 127.0.0.1 with a token, its root and settings in a temporary
    directory; shut down (kernels too) when the module's tests end, however they end."""
    if _jupyter_lab() is None:
        pytest.skip('browser tests: JupyterLab not found (pip install -e ".[browser]", or `make setup`)')
    server = start_jupyter(tmp_path_factory.mktemp("jupyter"), kernel_pythonpath)
    try:
        yield server
    finally:
        stop_jupyter(server)


def start_jupyter(base: Path, kernel_pythonpath: str) -> JupyterServer:
    """Start JupyterLab in `base` (its root, settings and log there) and wait for /api/status;
    `stop_jupyter` ends it. Also used by benchmarks/widget_browser.py."""
    cmd = _jupyter_lab()
    if cmd is None:
        raise RuntimeError("JupyterLab not found (pip install -e \".[browser]\")")
    root, log = base / "root", base / "server.log"
    root.mkdir()
    # no news or update pop-ups over the notebook
    notif = base / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notif.parent.mkdir(parents=True)
    notif.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = dict(os.environ)
    env.update({
        "JUPYTER_CONFIG_DIR": str(base / "config"), "JUPYTER_DATA_DIR": str(base / "data"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"), "IPYTHONDIR": str(base / "ipython"),
        "PYTHONPATH": os.pathsep.join([kernel_pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        "MPLBACKEND": "Agg",
    })
    env.pop("JUPYTER_PATH", None)
    port, token = _free_port(), secrets.token_hex(16)
    args = cmd + ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                  f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root",
                  "--LabApp.expose_app_in_browser=True", "--JupyterNotebookApp.expose_app_in_browser=True"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    server = JupyterServer(f"http://127.0.0.1:{port}", token, root, proc, log)
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            stop_jupyter(server)
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            server.api("/api/status")
            return server
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                stop_jupyter(server)
                raise RuntimeError(f"jupyter lab did not answer /api/status within 90 s:\n{server.log_tail()}") from None
            time.sleep(0.25)


def stop_jupyter(server: JupyterServer) -> None:
    proc = server.proc
    if proc.poll() is None:
        try:
            for k in server.api("/api/kernels") or []:
                server.api(f"/api/kernels/{k['id']}", method="DELETE")
        except Exception:
            pass
        try:  # a server with a page still connected may not end on its own: a few seconds, then a signal
            server.api("/api/shutdown", method="POST")
            proc.wait(timeout=4)
        except Exception:
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own group (start_new_session)
            proc.wait(timeout=4)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


# -- what a person sees: checks run in the page ----------------------------------------------------
WHITE_JS = r"""
(root) => {
  // visible boxes inside the explorer that are (nearly) white: HTML backgrounds of 2000 px² or
  // more, and SVG shapes filled white that cover a quarter of their picture or more
  const white = (c) => {
    const m = /rgba?\(([^)]*)\)/.exec(c || ""); if (!m) return false;
    const v = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number), a = v.length > 3 ? v[3] : 1;
    return a > 0.5 && v[0] >= 225 && v[1] >= 225 && v[2] >= 225;
  };
  const label = (e) => {
    const c = typeof e.className === "string" ? e.className : (e.className && e.className.baseVal) || "";
    const p = e.closest(".panel"), ph = p ? " in " + (p.className.split(" ").find((x) => x.startsWith("cg-")) || "panel") : "";
    return e.tagName.toLowerCase() + (c ? "." + c.trim().split(/\s+/).join(".") : "") + ph;
  };
  // what a person sees: a colour under a CSS invert() filter (pictures drawn on white, inverted
  // in a dark theme) shows inverted
  const inverted = (e) => {
    for (let a = e; a && a !== root.parentElement; a = a.parentElement) {
      const m = /invert\(([\d.]+)\)/.exec(getComputedStyle(a).filter || "");
      if (m) return Number(m[1]);
    }
    return 0;
  };
  const seen = (c, e) => {
    const k = inverted(e), m = /rgba?\(([^)]*)\)/.exec(c || "");
    if (!k || !m) return c;
    const v = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    const f = (x) => Math.round(x * (1 - k) + (255 - x) * k);
    return "rgba(" + f(v[0]) + "," + f(v[1]) + "," + f(v[2]) + "," + (v.length > 3 ? v[3] : 1) + ")";
  };
  const out = [];
  for (const e of [root, ...root.querySelectorAll("*")]) {
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    if (cs.display === "none" || cs.visibility === "hidden" || r.width * r.height < 2000) continue;
    if (e instanceof SVGElement && !(e instanceof SVGSVGElement)) {
      const svg = e.ownerSVGElement, s = svg && svg.getBoundingClientRect();
      if (/^(rect|polygon|path|ellipse|circle)$/.test(e.tagName) && white(seen(cs.fill, e)) && s && r.width * r.height >= 0.25 * s.width * s.height)
        out.push(label(e) + " fill " + cs.fill);
    } else if (white(seen(cs.backgroundColor, e))) out.push(label(e) + " background " + cs.backgroundColor);
  }
  return out;
}
"""

LAYOUT_JS = r"""
(root, panels) => {
  // problems a person sees in the panels' layout: two panels' boxes overlapping, content
  // spilling out of a panel that does not clip or scroll it
  const out = [], boxes = [];
  for (const sel of panels) {
    const p = root.querySelector(sel);
    if (!p) { out.push(sel + " missing"); continue; }
    const r = p.getBoundingClientRect();
    if (!r.width || !r.height) { out.push(sel + " has no size"); continue; }
    boxes.push([sel, r]);
    const cs = getComputedStyle(p);
    if (cs.overflowX === "visible" && p.scrollWidth > p.clientWidth + 2)
      out.push(sel + " content spills " + (p.scrollWidth - p.clientWidth) + "px to the right");
    if (r.right > document.documentElement.clientWidth + 1) out.push(sel + " extends past the window's right edge");
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, r] = boxes[i], [b, s] = boxes[j];
    const w = Math.min(r.right, s.right) - Math.max(r.left, s.left), h = Math.min(r.bottom, s.bottom) - Math.max(r.top, s.top);
    if (w > 1 && h > 1) out.push(a + " overlaps " + b + " by " + Math.round(w) + "x" + Math.round(h) + "px");
  }
  return out;
}
"""

STATE_COLUMN_JS = r"""
(root) => {
  // is the node table's `state` header on screen and not covered or clipped? null when it is
  const th = Array.from(root.querySelectorAll(".cg-node th")).find((t) => t.textContent.trim() === "state");
  if (!th) return "no `state` column in the node panel";
  if (th.parentNode.firstElementChild !== th) return "`state` is not the first column";
  const r = th.getBoundingClientRect(), W = document.documentElement.clientWidth, H = document.documentElement.clientHeight;
  if (r.width < 10 || r.left < 0 || r.right > W || r.top < 0 || r.bottom > H) return "`state` header outside the viewport: " + JSON.stringify(r);
  for (let a = th.parentElement; a && a !== document.body; a = a.parentElement) {
    const cs = getComputedStyle(a), b = a.getBoundingClientRect();
    if (cs.overflowX !== "visible" && (r.left < b.left - 1 || r.right > b.right + 1)) return "`state` header clipped by " + a.className;
  }
  const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
  if (!hit || !(hit === th || th.contains(hit))) return "`state` header covered by " + (hit ? hit.tagName + "." + hit.className : "nothing");
  return null;
}
"""


def expected_nodes(trace: Any, i: int) -> dict[int, tuple[set[str], int]]:
    """Per node shown after step i: its state classes and replay count, from the trace (the
    classes as the per-step drawing of the built-in layout gives them)."""
    from cgviz.views.tree import node_state

    step = trace.steps[i]
    snap = step.snapshot
    return {n.id: ({f"state-{w}" for w in node_state(snap, n.id, step) - {n.kind}}, n.replays) for n in snap.nodes}


# the page repaints only the nodes in (or near) the tree panel's view, the rest as they are
# scrolled to, and a big tree has only those in the document: scroll over the whole tree and
# take every node group seen on the way, as it was there
SHOWN_NODES = """async (root) => {
  const box = document.querySelector(root + ' .cg-tree-box'), frame = () => new Promise((r) => requestAnimationFrame(r)), seen = {};
  const take = () => box.querySelectorAll('g[id^="node-"]').forEach((g) => { seen[g.id] =
    [+g.id.slice(5), (g.getAttribute('class') || '').split(/\\s+/).filter((c) => c.startsWith('state-')), g.textContent]; });
  for (let y = 0; y <= box.scrollHeight; y += box.clientHeight / 2)
    for (let x = 0; x <= box.scrollWidth; x += box.clientWidth / 2) { box.scrollTo(x, y); await frame(); take(); }
  box.scrollTo(0, 0); await frame();
  return Object.values(seen);
}"""


class UI:
    """The checks above, on a Playwright page and the explorer root (a selector)."""

    def __init__(self, page: Any, root: str = ".cgviz") -> None:
        self.page, self.root = page, root

    def el(self, sel: str) -> Any:
        return self.page.locator(f"{self.root} {sel}").first

    def headline(self) -> str:
        return self.el(".cg-headline").inner_text().strip()

    def wait_headline_change(self, before: str, timeout: float = 10_000) -> str:
        self.page.wait_for_function(
            "([r, t]) => { const h = document.querySelector(r + ' .cg-headline'); return h && h.textContent.trim() && h.textContent.trim() !== t; }",
            arg=[self.root, before], timeout=timeout)
        return self.headline()

    def step_of(self, text: Optional[str] = None) -> tuple[int, int]:
        m = re.search(r"step (\d+)\s*/\s*(\d+)", text if text is not None else self.headline())
        assert m, f"no 'step i/N' in the headline {text!r}"
        return int(m.group(1)), int(m.group(2))

    def tree_nodes(self) -> int:
        return self.page.locator(f"{self.root} .cg-tree-box [id^='node-']").count()

    def tree_html(self) -> str:
        return self.el(".cg-tree-box").inner_html()

    def click_node(self, node_id: int) -> None:
        g = self.page.locator(f"{self.root} .cg-tree-box [id='node-{node_id}']").first
        g.scroll_into_view_if_needed()
        # the node's box (its shape), not its middle, which may be text over an edge
        g.locator("rect, polygon, path").first.click(force=True)

    def node_table_headers(self) -> list[str]:
        return [t.strip() for t in self.page.locator(f"{self.root} .cg-node th").all_inner_texts()]

    def white_boxes(self) -> list[str]:
        return self.page.locator(self.root).first.evaluate(WHITE_JS)

    def layout_problems(self) -> list[str]:
        return self.page.locator(self.root).first.evaluate(LAYOUT_JS, PANELS)

    def state_column_problem(self) -> Optional[str]:
        self.el(".cg-node-panel").scroll_into_view_if_needed()
        return self.page.locator(self.root).first.evaluate(STATE_COLUMN_JS)
