"""The exported page of plain CUDA graphs (`cgviz.observe_graphs`) in Chromium: the list of graphs
and the timeline show, the step's graph is marked in the list as the steps go, light and dark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import LAYOUT_JS, UI, shot
from conftest import PANELS as ALL_PANELS
from test_page_browser import exported

from cgviz.data import graph_trace
from cgviz.views.text import GRAPHS_ONLY

PANELS = [".cg-steps-panel", ".cg-graphs-panel"]


@pytest.fixture(scope="module")
def trace() -> Any:
    return graph_trace("serving_runner")


@pytest.fixture(scope="module")
def page_file(trace: Any, tmp_path_factory: Any) -> Path:
    return exported(trace, tmp_path_factory.mktemp("graphs") / "serving_runner.html")


def opened(browser: Any, page_file: Path, scheme: str, width: int = 1280, step: int = 1) -> tuple[Any, Any, list[str]]:
    """A context and the page at `step` (counted from 1), with its script errors and console errors."""
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(page_file.as_uri() + f"#step={step}")
    page.wait_for_selector(".cgviz .cg-headline:not(:empty)", timeout=10_000)
    return context, page, errors


def marked(page: Any) -> list[str]:
    return page.locator(".cgviz .cg-gl-cur").evaluate_all("(es) => es.map((e) => e.dataset.graphs)")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_graph_list_and_timeline_show_and_follow_the_steps(browser: Any, page_file: Path, trace: Any,
                                                           scheme: str) -> None:
    first_replay = next(i for i, s in enumerate(trace.steps) if s.kind == "replay")
    context, page, errors = opened(browser, page_file, scheme, step=first_replay + 1)
    try:
        ui = UI(page)
        assert ui.el(".cg-graphs-panel").is_visible() and ui.el(".cg-timeline svg").is_visible()
        box = ui.el(".cg-timeline svg").bounding_box()
        assert box["width"] > 600 and box["height"] > 80
        assert not ui.el(".cg-tree-panel").is_visible()  # no tree to draw: said in words instead
        assert GRAPHS_ONLY in [t.strip() for t in page.locator(".cgviz .notice").all_inner_texts()]
        text = ui.el(".cg-graphs").inner_text()
        assert "By the code that captured them" in text and "By memory pool" in text
        never = page.locator(".cgviz .cg-gl-never")
        assert never.count() == 1 and never.first.is_visible() and "batch 64" in never.first.inner_text()

        # the step's graph is marked in the list, and follows the steps
        assert ui.step_of()[0] == first_replay + 1
        graph = trace.steps[first_replay].graph
        assert marked(page) and all(str(graph) in ids.split() for ids in marked(page))
        later = next(i for i in range(first_replay + 1, len(trace.steps)) if trace.steps[i].graph != graph)
        before = ui.headline()
        page.evaluate(f"location.hash = '#step={later + 1}'")
        assert ui.step_of(ui.wait_headline_change(before))[0] == later + 1
        now = trace.steps[later].graph
        assert marked(page) and all(str(now) in ids.split() and str(graph) not in ids.split() for ids in marked(page))

        assert page.locator(".cgviz").first.evaluate(LAYOUT_JS, PANELS) == []
        if scheme == "dark":
            assert ui.white_boxes() == []
        path = shot(page, f"graphs-{scheme}")
        assert path.stat().st_size > 40_000, f"a screenshot of {path.stat().st_size} bytes: is the page blank?"
        assert errors == [], f"errors: {errors}"
    finally:
        context.close()


def test_graph_list_in_a_narrow_window(browser: Any, page_file: Path) -> None:
    context, page, errors = opened(browser, page_file, "light", width=800)
    try:
        ui = UI(page)
        assert ui.el(".cg-graphs-panel").is_visible()
        assert page.locator(".cgviz").first.evaluate(LAYOUT_JS, PANELS) == []
        shot(page, "graphs-800px")
        assert errors == []
    finally:
        context.close()


def test_trees_and_graphs_page_names_the_graphs_lane(browser: Any, tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_view_graphs import mixed_trace

    trace = mixed_trace()
    path = exported(trace, tmp_path / "mixed.html")
    replay = next(i for i, s in enumerate(trace.steps) if s.kind == "replay")
    context, page, errors = opened(browser, path, "light", step=replay + 1)
    try:
        ui = UI(page)
        assert "CUDA graphs" in ui.el(".cg-timeline svg").text_content()
        assert ui.el(".cg-tree-panel").is_visible() and ui.el(".cg-graphs-panel").is_visible()
        assert "it changes no tree" in ui.el(".cg-tree-box").inner_text()
        tree_step = next(i for i in range(replay + 1, len(trace.steps)) if trace.steps[i].snapshot is not None)
        page.evaluate(f"location.hash = '#step={tree_step + 1}'")
        page.wait_for_function("() => document.querySelector('.cgviz .cg-tree-box svg') !== null", timeout=5_000)
        assert ui.tree_nodes() == len(trace.steps[tree_step].snapshot.nodes)
        assert page.locator(".cgviz").first.evaluate(LAYOUT_JS, ALL_PANELS + [".cg-graphs-panel"]) == []
        shot(page, "graphs-with-trees")
        assert errors == []
    finally:
        context.close()
