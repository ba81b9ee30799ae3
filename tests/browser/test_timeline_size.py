"""The exported page's timeline in Chromium at narrow, usual and wide windows: its words read at
about the page's small-text size (not shrunk to specks on a narrow window, nor grown past the
headline on a wide one), a click on a step goes to that step, and the marker stands on it, also
where the timeline scrolls sideways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import shot

from cgviz.scenarios import run_scenario
from cgviz.views.html import to_html

WINDOWS = {800: 700, 1280: 800, 1920: 1080}

# the words of the timeline as shown: the CSS px size of the axis' step numbers, the steps' own
# labels and the legend (font size and glyph box height), the title's font size, the headline's
SIZES_JS = r"""() => {
  const svg = document.querySelector(".cgviz .cg-timeline svg");
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const texts = [...svg.querySelectorAll("text")], px = (t) => parseFloat(getComputedStyle(t).fontSize) * scale;
  const words = texts.filter((t) => /^(\d+|[A-Z]'?|warmup|record|execute \(replay\)|path end)$/.test(t.textContent));
  const title = texts.find((t) => t.textContent.startsWith("Timeline:"));
  return {font: words.map(px), box: words.map((t) => t.getBoundingClientRect().height), title: px(title),
          headline: parseFloat(getComputedStyle(document.querySelector(".cgviz .cg-headline")).fontSize),
          dark: document.querySelector(".cgviz").classList.contains("cg-dark")};
}"""

# step k's tick on the timeline, the marker and the box's visible part (client coordinates)
AT_JS = r"""(k) => {
  const r = document.querySelector('.cgviz .cg-timeline [id="tl-step-' + k + '"]').getBoundingClientRect();
  const m = document.querySelector(".cgviz .cg-marker").getBoundingClientRect();
  const b = document.querySelector(".cgviz .cg-timeline-box").getBoundingClientRect();
  return {x: (r.left + r.right) / 2, y: (r.top + r.bottom) / 2, marker: (m.left + m.right) / 2, mTop: m.top, mBottom: m.bottom,
          left: b.left, right: b.right, pos: document.querySelector(".cgviz .cg-pos").textContent};
}"""


@pytest.fixture(scope="module")
def trace() -> Any:
    return run_scenario("branching", "sim").trace


@pytest.fixture(scope="module")
def page_file(trace: Any, tmp_path_factory: Any) -> Path:
    path = tmp_path_factory.mktemp("timeline") / "branching.html"
    to_html(trace, path, renderer="builtin")
    return path


@pytest.fixture
def opened(browser: Any, page_file: Path) -> Any:
    """open(width, scheme="light"): the page in a window that wide, its marker moved at once."""
    contexts = []

    def open_(width: int, scheme: str = "light") -> Any:
        ctx = browser.new_context(viewport={"width": width, "height": WINDOWS[width]}, color_scheme=scheme)
        contexts.append(ctx)
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.errors = errors
        page.goto(page_file.as_uri())
        page.wait_for_selector(".cgviz .cg-headline:not(:empty)", timeout=10_000)
        page.add_style_tag(content=".cgviz .cg-marker{transition:none!important}")
        return page

    yield open_
    for ctx in contexts:
        ctx.close()


def at(page: Any, k: int) -> dict:
    return page.evaluate(AT_JS, k)


def wait_pos(page: Any, text: str) -> None:
    page.wait_for_function("(t) => document.querySelector('.cgviz .cg-pos').textContent === t", arg=text, timeout=10_000)


@pytest.mark.parametrize("width,scheme", [(800, "light"), (800, "dark"), (1280, "light"), (1920, "light"),
                                          (1920, "dark")])
def test_the_timelines_words_read_at_the_pages_small_text_size(opened: Any, width: int, scheme: str) -> None:
    page = opened(width, scheme)
    got = page.evaluate(SIZES_JS)
    assert got["dark"] == (scheme == "dark")
    assert len(got["font"]) > 10
    assert 8 <= min(got["font"]) and max(got["font"]) <= 13, got["font"]  # CSS px
    assert 9 <= min(got["box"]) and max(got["box"]) <= 14, got["box"]
    assert 11 <= got["title"] < got["headline"], got
    assert page.errors == []


@pytest.mark.parametrize("width", [800, 1280, 1920])
def test_a_click_on_a_step_goes_there_and_the_marker_stands_on_it(opened: Any, trace: Any, width: int) -> None:
    page, n = opened(width), len(trace.steps)
    for k in (n // 2, 1, n - 1, 0):
        a = at(page, k)
        if not a["left"] + 8 < a["x"] < a["right"] - 8:  # a narrow window: the timeline scrolls sideways
            page.locator(".cgviz .cg-timeline-box").evaluate("(b, dx) => { b.scrollLeft += dx; }", a["x"] - (a["left"] + a["right"]) / 2)
            a = at(page, k)
        assert a["left"] < a["x"] < a["right"], a
        page.mouse.click(a["x"], a["y"])
        wait_pos(page, f"step {k + 1} / {n}")
        a = at(page, k)
        assert abs(a["marker"] - a["x"]) <= 2, a
        assert a["mTop"] <= a["y"] <= a["mBottom"], a
    assert page.errors == []


def test_a_narrow_window_scrolls_the_timeline_to_the_current_step(opened: Any, trace: Any) -> None:
    page, n = opened(800), len(trace.steps)
    assert at(page, n - 1)["x"] > at(page, n - 1)["right"]  # the last steps are out of sight at first
    for key, k in (("End", n - 1), ("Home", 0)):
        page.keyboard.press(key)
        wait_pos(page, f"step {k + 1} / {n}")
        page.wait_for_function("() => { const m = document.querySelector('.cgviz .cg-marker').getBoundingClientRect(),"
                               " b = document.querySelector('.cgviz .cg-timeline-box').getBoundingClientRect();"
                               " return b.left < m.left && m.right < b.right; }", timeout=10_000)
        a = at(page, k)
        assert abs(a["marker"] - a["x"]) <= 2, a
    assert page.errors == []


def test_a_click_beside_a_wide_windows_timeline_stays_on_the_step(opened: Any, trace: Any) -> None:
    page, n = opened(1920), len(trace.steps)
    a, first = at(page, n // 2), at(page, 0)
    assert a["left"] + 100 < first["x"]  # the timeline stands centred, not stretched
    page.mouse.click(a["left"] + 20, a["y"])
    page.mouse.click(a["right"] - 20, a["y"])
    assert page.locator(".cgviz .cg-pos").text_content() == f"step 1 / {n}"
    assert page.errors == []


# the lanes' names kept in sight: each shown name's text, its centre and left, its background, the
# timeline's own name of that lane (its centre), and the box's left edge (client coordinates)
NAMES_JS = r"""() => {
  const box = document.querySelector(".cgviz .cg-timeline-box"), names = document.querySelector(".cgviz .cg-tl-names");
  const own = [...document.querySelectorAll(".cgviz .cg-timeline svg text")];
  return {hidden: names.hidden, left: box.getBoundingClientRect().left, scroll: box.scrollLeft,
          names: [...names.children].map((s) => { const r = s.getBoundingClientRect(), t = own.find((o) => o.textContent === s.textContent);
            const o = t.getBoundingClientRect();
            return {text: s.textContent, y: (r.top + r.bottom) / 2, left: r.left, bg: getComputedStyle(s).backgroundColor,
                    ownY: (o.top + o.bottom) / 2, ownRight: o.right}; })};
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_narrow_window_keeps_the_lanes_names_in_sight(browser: Any, tmp_path: Path, scheme: str) -> None:
    """Two ranks' lanes on a narrow window: once the timeline scrolls past its own lane names, the
    page shows them at the box's left edge, each at its lane's height; back at the start, only the
    timeline's own show."""
    import cgviz
    from cgviz.data import ddp_traces
    from cgviz.trace.io import load_trace
    trace = cgviz.merge([load_trace(p) for p in ddp_traces("planted")])
    path = tmp_path / "ranks.html"
    to_html(trace, path, renderer="builtin")
    ctx = browser.new_context(viewport={"width": 700, "height": 700}, color_scheme=scheme)
    try:
        page, errors = ctx.new_page(), []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri() + f"#step={len(trace.steps)}")
        page.evaluate("() => window.cgvizReady")
        page.wait_for_function("() => !document.querySelector('.cgviz .cg-tl-names').hidden", timeout=10_000)
        got = page.evaluate(NAMES_JS)
        assert [n["text"] for n in got["names"]] == ["rank 0", "rank 1"] and got["scroll"] > 0, got
        for n in got["names"]:
            assert abs(n["y"] - n["ownY"]) <= 2, n  # at its lane's height
            assert got["left"] <= n["left"] <= got["left"] + 6, n  # at the box's left edge
            dark_bg = sum(int(v) for v in n["bg"][n["bg"].index("(") + 1:-1].split(",")[:3]) < 3 * 80
            assert dark_bg == (scheme == "dark"), n["bg"]
        shot(page, f"timeline-lane-names-{scheme}")
        page.keyboard.press("Home")
        page.wait_for_function("() => document.querySelector('.cgviz .cg-timeline-box').scrollLeft === 0", timeout=10_000)
        got = page.evaluate(NAMES_JS)
        assert got["hidden"], got  # the timeline's own names show
        assert errors == []
    finally:
        ctx.close()
