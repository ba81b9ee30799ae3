"""The Explorer widget in JupyterLab, in headless Chromium, on the synthetic 1,000-node /
10,000-step trace of benchmarks/render.py: first paint after display, a step (→), a jump.

- first paint: from the moment the widget's element enters the page to the headline and the
  tree of the first step shown (the head and the first window of pictures come from the kernel);
- step: → pressed on the focused widget, to the new headline painted (two animation frames);
- jump: the slider moved to a far step, to its headline painted: the pictures of a step the
  front end has not received are asked of the kernel first.

Medians over the samples; goals stated by the project: first paint ≤ 1 s, step ≤ 50 ms, jump
≤ 200 ms. Prints one JSON object (`--out PATH` also writes it).

usage: python benchmarks/widget_browser.py [--nodes N] [--steps S] [--samples K] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "browser"), str(ROOT)]

from conftest import CHROMIUM, VIEWPORT, start_jupyter, stop_jupyter  # noqa: E402

GOALS_MS = {"first_paint": 1000.0, "step": 50.0, "jump": 200.0}

# marks when the widget's element enters the page and when its first headline and tree show
WATCH = """
window.__cg = {};
new MutationObserver(() => {
  const root = document.querySelector('.cgviz');
  if (root && !window.__cg.added) window.__cg.added = performance.now();
  const hl = root && root.querySelector('.cg-headline');
  if (hl && hl.textContent && root.querySelector('.cg-tree-box svg') && !window.__cg.painted)
    requestAnimationFrame(() => requestAnimationFrame(() => { window.__cg.painted = window.__cg.painted || performance.now(); }));
}).observe(document, {childList: true, subtree: true, characterData: true});
"""

# one step or jump: change the view, then wait for the headline to change and two frames to paint
CHANGE = """
async ([how, arg]) => {
  const root = document.querySelector('.cgviz'), hl = root.querySelector('.cg-headline'), before = hl.textContent;
  const t = performance.now();
  if (how === 'key') root.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
  else { const s = root.querySelector('.cg-slider'); s.value = arg; s.dispatchEvent(new Event('input', {bubbles: true})); }
  await new Promise((done) => {
    const f = () => (hl.textContent !== before && !root.classList.contains('loading'))
      ? requestAnimationFrame(() => requestAnimationFrame(done)) : requestAnimationFrame(f);
    f();
  });
  return performance.now() - t;
}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        server = start_jupyter(Path(tmp), str(ROOT))
        try:
            build = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
                     "import cgviz\nfrom render import synthetic_trace\n"
                     f"trace, _ = synthetic_trace(nodes={args.nodes}, steps={args.steps})")
            name = server.write_notebook("speed.ipynb", [build, "ex = cgviz.Explorer(trace)\nex"])
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                try:
                    result = measure(browser, server, name, args.samples)
                finally:
                    browser.close()
        finally:
            stop_jupyter(server)
    result.update({
        "benchmark": "widget_browser", "trace": {"nodes": args.nodes, "steps": args.steps},
        "viewport": VIEWPORT, "python": platform.python_version(), "goals_ms": GOALS_MS,
    })
    result["vs_goal"] = {k: round(result["median_ms"][k] / GOALS_MS[k], 3) for k in GOALS_MS}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


def measure(browser, server, name: str, samples: int) -> dict:
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    page.add_init_script(WATCH)
    page.goto(server.page_url(f"/lab/tree/{name}?reset"))
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')",
                           timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=60_000)
    select = page.locator(".jp-Dialog button:has-text('Select')")
    try:  # a fresh server may ask which kernel to start
        select.wait_for(timeout=5_000)
        select.click()
    except Exception:
        pass
    started = time.monotonic()
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    try:
        page.wait_for_function("() => window.__cg.painted", timeout=300_000, polling=50)
    except Exception:
        page.screenshot(path=str(Path(tempfile.gettempdir()) / "widget_browser_failed.png"))
        raise
    marks = page.evaluate("() => window.__cg")
    first = marks["painted"] - marks["added"]
    page.locator(".cgviz").first.click(position={"x": 5, "y": 5})  # focus, for the arrow keys
    steps = [page.evaluate(CHANGE, ["key", None]) for _ in range(samples)]
    n = page.evaluate("() => +document.querySelector('.cgviz .cg-slider').max + 1")
    targets = [int(n * (k + 0.5) / samples) for k in range(samples)]
    jumps = [page.evaluate(CHANGE, ["slider", t]) for t in targets]
    ctx.close()
    return {
        "median_ms": {"first_paint": round(first, 1), "step": round(statistics.median(steps), 1),
                      "jump": round(statistics.median(jumps), 1)},
        "slowest_ms": {"step": round(max(steps), 1), "jump": round(max(jumps), 1)},
        "samples": samples, "cells_run_s": round(time.monotonic() - started, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
