"""The Explorer widget in JupyterLab 4 and Notebook 7, driven in Chromium as a person would:
open a notebook, run all cells, step, click, type cells that drive it."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import SHOWN_NODES, VIEWPORT, UI, expected_nodes, shot

from cgviz.scenarios import run_scenario

SETUP = "import cgviz\nfrom cgviz.scenarios import run_scenario\ntrace = run_scenario('branching', 'sim').trace"
SHOW = "ex = cgviz.Explorer(trace)\nex"
LIVE = ("import torch, cgviz\nt = cgviz.Tree('sim')\nf = t.wrap(lambda x: x * 2, name='f')\nx = torch.ones(4)\nf(x);")
LOAD = 120_000  # ms: a fresh kernel imports torch and runs the scenario (a loaded 2-core machine takes over 60 s)


@pytest.fixture(scope="module")
def trace() -> Any:
    return run_scenario("branching", "sim").trace


def open_and_run_all(context: Any, jupyter: Any, path: str) -> Any:
    page = context.new_page()
    page.goto(jupyter.page_url(path + ("?reset" if path.startswith("/lab") else "")))  # no tabs from earlier tests
    page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')",
                           timeout=30_000)
    page.locator(".jp-Notebook .jp-Cell").first.click()
    # Run ▸ Run All Cells, from the menu bar (the command itself if the menu was not ready)
    page.locator(".lm-MenuBar-itemLabel:text-is('Run')").first.click()
    page.locator(".lm-Menu-itemLabel:text-is('Run All Cells')").first.click()
    started = "() => /\\[[*0-9]/.test(document.querySelector('.jp-Notebook .jp-InputPrompt').textContent)"
    try:
        page.wait_for_function(started, timeout=5_000)
    except Exception:
        page.keyboard.press("Escape")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(started, timeout=5_000)
    try:
        page.wait_for_selector(".cgviz .cg-headline:not(:empty)", state="attached", timeout=LOAD)
    except Exception:
        shot(page, "no-explorer-" + path.rsplit("/", 1)[-1].split(".")[0])
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        raise AssertionError(f"no explorer after running all cells; outputs: {outputs}") from None
    page.locator(".cgviz").first.scroll_into_view_if_needed()
    page.wait_for_selector(".cgviz .cg-headline:not(:empty)", timeout=10_000)
    return page


def run_typed_cell(page: Any, code: str) -> None:
    """Type `code` into the notebook's last (empty) cell and run it with Shift+Enter."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    before = cells.count()
    editor = cells.last.locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    # running the last cell appends a new empty one
    page.wait_for_function("(n) => document.querySelectorAll('.jp-Notebook .jp-Cell').length > n", arg=before, timeout=10_000)


def last_output(page: Any, index: int) -> str:
    out = page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea-output")
    out.first.wait_for(timeout=30_000)
    return out.first.inner_text().strip()


def set_file_browser(page: Any, shown: bool) -> None:
    fb = page.locator("#filebrowser")
    if fb.is_visible() != shown:
        page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:toggle-main')")
        page.wait_for_timeout(300)
    assert fb.is_visible() == shown


def test_jupyterlab_explorer(context: Any, jupyter: Any, trace: Any) -> None:
    name = jupyter.write_notebook("explorer.ipynb", [SETUP, SHOW, ""])
    page = open_and_run_all(context, jupyter, f"/lab/tree/{name}")
    ui, n = UI(page), len(trace.steps)
    set_file_browser(page, True)
    page.locator(".cgviz").first.scroll_into_view_if_needed()
    shot(page, "lab-rendered")

    first = ui.headline()
    assert ui.step_of(first) == (1, n)
    assert ui.tree_nodes() == len(trace.steps[0].snapshot.nodes)
    # the still picture shown for readers without widgets is there, and hidden by the running widget
    stills = page.evaluate("() => [...document.querySelectorAll('.cgviz-still')].map(e => getComputedStyle(e).display)")
    assert stills and set(stills) == {"none"}, stills

    # ▶ moves one step; the arrow key too, once the widget has focus
    ui.el(".cg-next").click()
    second = ui.wait_headline_change(first)
    assert ui.step_of(second) == (2, n)
    page.keyboard.press("ArrowRight")
    third = ui.wait_headline_change(second)
    assert ui.step_of(third) == (3, n)
    tree_before = ui.tree_html()
    page.keyboard.press("End")
    ui.wait_headline_change(third)
    assert ui.tree_html() != tree_before, "the tree did not change between step 3 and the last step"
    assert ui.tree_nodes() == len(trace.steps[-1].snapshot.nodes)
    shot(page, "lab-last-step")

    # clicking a node shows its outputs, `state` first
    node = trace.steps[-1].snapshot.nodes[1].id
    ui.click_node(node)
    page.wait_for_function("(id) => (document.querySelector('.cgviz .cg-node .title') || {}).textContent?.includes('node ' + id)",
                           arg=node, timeout=10_000)
    assert ui.node_table_headers()[:1] == ["state"]
    shot(page, "lab-node-selected")

    # the browser's step and node reach the kernel; a cell's `ex.step = 3` moves the view
    run_typed_cell(page, "print(ex.step, ex.selected)")
    assert last_output(page, 2) == f"{n - 1} {node}"
    shown = ui.headline()
    run_typed_cell(page, "ex.step = 3")
    assert ui.step_of(ui.wait_headline_change(shown)) == (4, n)

    # at 1280x800 with the file browser open: no overlapping panels, `state` on screen
    page.locator(".cgviz").first.scroll_into_view_if_needed()
    shot(page, "lab-file-browser-open")
    assert ui.layout_problems() == []
    problem = ui.state_column_problem()
    shot(page, "lab-node-panel")
    assert problem is None, problem

    # JupyterLab's dark theme: no panel stays white
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    page.wait_for_selector("body[data-jp-theme-light='false']", state="attached", timeout=20_000)
    page.wait_for_timeout(500)
    page.locator(".cgviz").first.scroll_into_view_if_needed()
    shot(page, "lab-dark")
    white = ui.white_boxes()
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    page.wait_for_selector("body[data-jp-theme-light='true']", state="attached", timeout=20_000)
    assert white == [], "white boxes in JupyterLab's dark theme:\n  " + "\n  ".join(white)


def test_jupyterlab_live_tree(context: Any, jupyter: Any) -> None:
    name = jupyter.write_notebook("live.ipynb", [LIVE, "cgviz.Explorer(t)", ""])
    page = open_and_run_all(context, jupyter, f"/lab/tree/{name}")
    ui = UI(page)
    count = lambda: int(ui.el(".cg-count").inner_text().strip() or 0)  # noqa: E731
    before = count()
    assert before >= 1
    shot(page, "lab-live-before")
    run_typed_cell(page, "[f(x) for _ in range(3)];")
    # steps stream in while the cell runs: wait for new ones, and for the headline to say the same total
    page.wait_for_function("""(n) => {
        const c = +document.querySelector('.cgviz .cg-count').textContent;
        const m = /step \\d+\\/(\\d+)/.exec(document.querySelector('.cgviz .cg-headline').textContent);
        return c > n && m && +m[1] === c; }""", arg=before, timeout=30_000)
    after, headline = page.evaluate("() => [+document.querySelector('.cgviz .cg-count').textContent, "
                                    "document.querySelector('.cgviz .cg-headline').textContent]")  # read together
    assert after > before and ui.step_of(headline)[1] == after
    page.locator(".cgviz").first.scroll_into_view_if_needed()
    shot(page, "lab-live-after")
    assert ui.tree_nodes() >= 1


def test_notebook7_explorer(context: Any, jupyter: Any, trace: Any) -> None:
    name = jupyter.write_notebook("nb7.ipynb", [SETUP, SHOW])
    page = open_and_run_all(context, jupyter, f"/notebooks/{name}")
    ui, n = UI(page), len(trace.steps)
    page.locator(".cgviz").first.scroll_into_view_if_needed()
    shot(page, "nb7-rendered")
    first = ui.headline()
    assert ui.step_of(first) == (1, n)
    assert ui.tree_nodes() == len(trace.steps[0].snapshot.nodes)
    ui.el(".cg-next").click()
    assert ui.step_of(ui.wait_headline_change(first)) == (2, n)
    ui.el(".cg-last").click()
    ui.wait_headline_change(ui.headline()) if ui.step_of()[0] != n else None
    node = trace.steps[-1].snapshot.nodes[1].id
    ui.click_node(node)
    page.wait_for_function("(id) => (document.querySelector('.cgviz .cg-node .title') || {}).textContent?.includes('node ' + id)",
                           arg=node, timeout=10_000)
    assert ui.node_table_headers()[:1] == ["state"]
    shot(page, "nb7-node-selected")
    assert ui.layout_problems() == []
    problem = ui.state_column_problem()
    assert problem is None, problem
    assert page.viewport_size == VIEWPORT


LONG = ("import torch, cgviz\n"
        "t = cgviz.Tree('sim')\n"
        "f = t.wrap(lambda x: x * 2, name='f')\n"
        "g = t.wrap(lambda x: x + 1, name='g')\n"
        "for i in range(60):\n"
        "    g(f(torch.ones(2 + i % 5)))\n"
        "    if i % 7 == 6:\n"
        "        t.mark_step()\n"
        "trace = t.trace\n"
        "trace.save('long.cgtrace.json')")


def test_jupyterlab_builtin_trees_follow_the_steps(context: Any, jupyter: Any) -> None:
    """The widget's built-in trees come as drawings plus node states, a window of steps at a
    time: after every kind of move (▶, ◀, a key, a far jump set from a cell, End, Home) the
    tree shows exactly the step's nodes, each with the step's states and replay count."""
    from cgviz.trace.model import Trace

    name = jupyter.write_notebook("long.ipynb", [LONG, "ex = cgviz.Explorer(trace, renderer='builtin')\nex", ""])
    page = open_and_run_all(context, jupyter, f"/lab/tree/{name}")
    trace = Trace.load(jupyter.root / "long.cgtrace.json")
    ui, n = UI(page), len(trace.steps)
    assert n > 100, n

    def check(i: int) -> None:
        page.wait_for_function("([r, i]) => !document.querySelector(r).classList.contains('loading') && "
                               "(document.querySelector(r + ' .cg-headline').textContent || '').includes('step ' + i + '/')",
                               arg=[".cgviz", i + 1], timeout=10_000)
        shown = {node: (set(classes), text) for node, classes, text in page.evaluate(SHOWN_NODES, ".cgviz")}
        want = expected_nodes(trace, i)
        assert set(shown) == set(want), f"step {i + 1}: nodes {sorted(shown)} shown, {sorted(want)} expected"
        for node, (classes, replays) in want.items():
            got_classes, text = shown[node]
            assert got_classes - {"state-selected"} == classes, f"step {i + 1}, node {node}: {got_classes} != {classes}"
            assert f"{replays} replay" in text, f"step {i + 1}, node {node}: {replays} replays expected in {text!r}"

    check(0)  # a trace opens at its first step
    for k in range(1, 4):
        ui.el(".cg-next").click()
        check(k)
    page.keyboard.press("ArrowRight")
    check(4)
    for target in (n // 2, n - 3, n // 3):
        run_typed_cell(page, f"ex.step = {target}")
        check(target)
        ui.el(".cg-prev").click()
        check(target - 1)
    page.locator(".cgviz").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("End")
    check(n - 1)
    page.keyboard.press("Home")
    check(0)
    shot(page, "lab-builtin-trees")
