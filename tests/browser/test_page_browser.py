"""The exported page (`cgviz.to_html`) opened from disk in Chromium: what a person sees and does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import UI, explorer_js_override, shot

import cgviz
from cgviz.scenarios import run_scenario
from cgviz.views.html import asset


@pytest.fixture(scope="module")
def trace() -> Any:
    return run_scenario("branching", "sim").trace


@pytest.fixture(scope="module")
def page_file(trace: Any, tmp_path_factory: Any) -> Path:
    path = tmp_path_factory.mktemp("page") / "branching.html"
    cgviz.to_html(trace, path)
    js = explorer_js_override()
    if js is not None:  # the page inlines the module: swap in the one under test
        text = path.read_text(encoding="utf-8")
        assert asset("explorer.js") in text
        path.write_text(text.replace(asset("explorer.js"), js), encoding="utf-8")
    return path


def open_page(context: Any, page_file: Path) -> tuple[Any, list[str], list[str]]:
    """The page, the URLs it requested besides itself, and its script errors."""
    page = context.new_page()
    requests: list[str] = []
    errors: list[str] = []
    me = page_file.as_uri()
    page.on("request", lambda r: requests.append(r.url) if r.url.split("#")[0] != me else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(me)
    page.wait_for_selector(".cgviz .cg-headline:not(:empty)", timeout=10_000)
    return page, requests, errors


def test_page_steps_keys_and_clicks(context: Any, page_file: Path, trace: Any) -> None:
    page, requests, errors = open_page(context, page_file)
    ui = UI(page)
    n = len(trace.steps)
    first = ui.headline()
    assert ui.step_of(first) == (1, n)
    assert ui.tree_nodes() == len(trace.steps[0].snapshot.nodes)
    shot(page, "page-first-step")

    page.keyboard.press("ArrowRight")
    after_key = ui.wait_headline_change(first)
    assert ui.step_of(after_key) == (2, n)

    tree_before = ui.tree_html()
    ui.el(".cg-next").click()
    after_click = ui.wait_headline_change(after_key)
    assert ui.step_of(after_click) == (3, n)
    assert ui.el(".cg-pos").inner_text().strip().startswith("step 3")

    page.keyboard.press("End")
    last = ui.wait_headline_change(after_click)
    assert ui.step_of(last) == (n, n)
    assert ui.tree_html() != tree_before, "the tree did not change between step 3 and the last step"
    assert ui.tree_nodes() == len(trace.steps[-1].snapshot.nodes)
    assert ui.el(".cg-next").is_disabled() and ui.el(".cg-last").is_disabled()
    shot(page, "page-last-step")

    # clicking a node pins it: the node panel shows its outputs, `state` first and on screen
    node = trace.steps[-1].snapshot.nodes[1].id
    ui.click_node(node)
    page.wait_for_function("(id) => (document.querySelector('.cgviz .cg-node .title') || {}).textContent?.includes('node ' + id)",
                           arg=node, timeout=5_000)
    assert page.locator(f".cgviz .cg-tree-box [id='node-{node}']").first.get_attribute("class").count("cg-sel") == 1
    headers = ui.node_table_headers()
    assert headers[:1] == ["state"], headers
    assert ui.state_column_problem() is None, ui.state_column_problem()
    shot(page, "page-node-selected")

    page.keyboard.press("Home")
    assert ui.step_of(ui.wait_headline_change(last)) == (1, n)
    assert ui.el(".cg-first").is_disabled() and ui.el(".cg-prev").is_disabled()

    assert ui.layout_problems() == []
    assert requests == [], f"the page requested {requests}"
    assert errors == [], f"script errors: {errors}"


def test_page_no_white_panels_in_dark_scheme(browser: Any, page_file: Path) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    try:
        page, _, errors = open_page(context, page_file)
        page.keyboard.press("End")
        page.wait_for_timeout(200)
        shot(page, "page-dark")
        assert errors == []
        white = UI(page).white_boxes()
        assert white == [], "white boxes in the dark colour scheme:\n  " + "\n  ".join(white)
    finally:
        context.close()


def test_page_narrow_window_stacks_panels(browser: Any, page_file: Path) -> None:
    context = browser.new_context(viewport={"width": 800, "height": 800})
    try:
        page, _, _ = open_page(context, page_file)
        page.keyboard.press("End")
        page.wait_for_timeout(200)
        shot(page, "page-800px")
        ui = UI(page)
        assert ui.layout_problems() == []
        ui.click_node(1)
        assert ui.state_column_problem() is None, ui.state_column_problem()
    finally:
        context.close()
