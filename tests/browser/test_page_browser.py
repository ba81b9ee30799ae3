"""The exported page (`cgviz.to_html`) opened from disk in Chromium: what a person sees and does."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import SHOWN_NODES, UI, expected_nodes, explorer_js_override, shot, shots_dir

import cgviz
from cgviz.scenarios import run_scenario
from cgviz.views.html import asset


def exported(trace: Any, path: Path, js: Optional[str] = None, **options: Any) -> Path:
    """`trace` exported to `path`, with the explorer module under test in the page (the one
    CGVIZ_EXPLORER_JS names, or `js`)."""
    cgviz.to_html(trace, path, **options)
    js = js if js is not None else explorer_js_override()
    if js is not None:  # the page inlines the module: swap in the one under test
        text = path.read_text(encoding="utf-8")
        assert asset("explorer.js") in text
        path.write_text(text.replace(asset("explorer.js"), js), encoding="utf-8")
    return path


def synthetic(nodes: int, steps: int) -> Any:
    """The render benchmark's synthetic trace (benchmarks/render.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from render import synthetic_trace

    return synthetic_trace(nodes=nodes, steps=steps)[0]


@pytest.fixture(scope="module")
def trace() -> Any:
    return run_scenario("branching", "sim").trace


@pytest.fixture(scope="module")
def page_file(trace: Any, tmp_path_factory: Any) -> Path:
    return exported(trace, tmp_path_factory.mktemp("page") / "branching.html")


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


CONTRAST_JS = r"""
(sel) => {
  // the contrast ratio (WCAG) of each element's text against the explorer's background
  const lum = (c) => {
    const [r, g, b] = c.match(/[\d.]+/g).slice(0, 3).map((v) => {
      v = v / 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const bg = lum(getComputedStyle(document.querySelector(".cgviz")).backgroundColor);
  return [...document.querySelectorAll(sel)].map((e) => {
    const fg = lum(getComputedStyle(e).color);
    return [e.textContent.trim(), (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05)];
  });
}
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_page_step_kind_counts_are_legible(browser: Any, tmp_path: Path, scheme: str) -> None:
    """Each step kind's count in the header is legible on the page's background in both colour
    schemes (its colour is a swatch before it: warmup orange as text is 2.1:1 on white), and the
    swatch of a new generation is not black on a dark page."""
    trace = run_scenario("training", "sim").trace
    path = exported(trace, tmp_path / "training.html")
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=scheme)
    try:
        page, _, errors = open_page(context, path)
        counts = page.evaluate(CONTRAST_JS, ".cgviz .counts .kc")
        assert any("generation" in text for text, _ in counts), counts
        low = [(text, round(ratio, 2)) for text, ratio in counts if ratio < 4.5]
        assert low == [], f"step kind counts below 4.5:1 contrast in the {scheme} scheme: {low}"
        swatch = page.evaluate("""() => getComputedStyle(document.querySelector(".cgviz .counts .k-generation"),
                                                         "::before").backgroundColor""")
        assert (swatch == "rgb(0, 0, 0)") == (scheme == "light"), swatch
        assert errors == []
    finally:
        context.close()


def test_a_dark_page_gives_each_step_kind_the_colour_its_pictures_show(browser: Any, tmp_path: Path) -> None:
    """The step list, headline and counts of a dark page take each kind's colour as the dark
    pictures' filter shows it (as_dark_picture, checked against Chromium's own rendering), so
    that they match the timeline; and a merged trace's per-rank trees are filtered once."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_rank_trees import _rank_trace

    from cgviz.trace.ranks import merge
    from cgviz.views.style import DARK_PICTURE_FILTER, STEP_COLORS, as_dark_picture

    merged = merge([_rank_trace(0, [4, 4, 4, 4]), _rank_trace(1, [4, 4, 8, 8, 8])])
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    try:
        page, _, errors = open_page(context, exported(merged, tmp_path / "merged.html"))
        for kind, color in STEP_COLORS.items():
            page.evaluate("""([c, f]) => { const d = document.createElement("div"); d.id = "swatch";
                d.style.cssText = `position:fixed;left:0;top:0;width:40px;height:40px;z-index:99999;background:${c};filter:${f}`;
                document.body.appendChild(d); }""", [color, DARK_PICTURE_FILTER])
            png = page.screenshot(clip={"x": 10, "y": 10, "width": 1, "height": 1})
            page.evaluate("() => document.getElementById('swatch').remove()")
            from io import BytesIO

            from PIL import Image

            shown = Image.open(BytesIO(png)).convert("RGB").getpixel((0, 0))
            want = tuple(int(as_dark_picture(color)[i:i + 2], 16) for i in (1, 3, 5))
            assert max(abs(a - b) for a, b in zip(shown, want)) <= 2, (kind, shown, want)
            if kind != "generation":  # a new generation takes the text colour on a dark page
                said = page.evaluate("(k) => getComputedStyle(document.querySelector('.cgviz')).getPropertyValue('--k-' + k)",
                                     kind).strip()
                assert said == as_dark_picture(color), (kind, said)
        record = page.evaluate("() => getComputedStyle(document.querySelector('.cgviz .counts .k-record'), '::before').backgroundColor")
        assert record == "rgb({}, {}, {})".format(*(int(as_dark_picture(STEP_COLORS["record"])[i:i + 2], 16) for i in (1, 3, 5)))
        filters = page.evaluate("() => [...document.querySelectorAll('.cgviz .cg-tree-box svg')].map((s) => getComputedStyle(s).filter)")
        assert len(filters) >= 2 and filters[0] == DARK_PICTURE_FILTER.replace(".88", "0.88")
        assert set(filters[1:]) == {"none"}, filters  # the ranks' trees inside it are not inverted back
        assert errors == []
    finally:
        context.close()


MARKER_AND_TITLE_JS = r"""
() => {
  const title = [...document.querySelectorAll(".cgviz .cg-timeline text")].find((t) => t.textContent.startsWith("Timeline:"));
  const m = document.querySelector(".cgviz .cg-marker").getBoundingClientRect(), r = title.getBoundingClientRect();
  return {markerTop: m.top, markerBottom: m.bottom, titleBottom: r.bottom, titleLeft: r.left, titleRight: r.right, x: m.left};
}
"""


@pytest.mark.parametrize("width", [800, 1280])
def test_page_step_marker_spans_the_steps_not_the_timeline_title(browser: Any, page_file: Path, width: int) -> None:
    """At the first step the marker stands under the title's first words: it starts below them."""
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        page, _, errors = open_page(context, page_file)
        at = page.evaluate(MARKER_AND_TITLE_JS)
        assert at["titleLeft"] <= at["x"] <= at["titleRight"], at  # the case that matters: under the title
        assert at["markerTop"] >= at["titleBottom"], at
        assert at["markerBottom"] - at["markerTop"] > 20, at
        assert errors == []
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


ROW_VISIBLE_JS = r"""
(root) => {
  // is the current step's row inside the step list's visible part? null when it is
  const list = root.querySelector(".cg-steps"), row = list.querySelector("li.cur");
  if (!row) return "no current row";
  const b = list.getBoundingClientRect(), r = row.getBoundingClientRect();
  return r.top >= b.top - 1 && r.bottom <= b.bottom + 1 ? null : "row " + row.dataset.i + " at " + r.top + ".." + r.bottom + ", list " + b.top + ".." + b.bottom;
}
"""


@pytest.mark.parametrize("width", [1280, 800])
@pytest.mark.parametrize("at", ["third", "last"])
def test_page_shows_the_current_steps_row_at_load(browser: Any, page_file: Path, trace: Any, width: int, at: str) -> None:
    context = browser.new_context(viewport={"width": width, "height": 800})
    try:
        page = context.new_page()
        n = len(trace.steps)
        step = 3 if at == "third" else n
        page.goto(page_file.as_uri() + f"#step={step}")
        page.wait_for_selector(".cgviz .cg-headline:not(:empty)", timeout=10_000)
        page.wait_for_timeout(100)
        assert UI(page).step_of() == (step, n)
        assert page.locator(".cgviz").first.evaluate(ROW_VISIBLE_JS) is None
    finally:
        context.close()


def findings_page(trace: Any, tmp_path: Path) -> Path:
    return exported(trace, tmp_path / "findings.html")


@pytest.mark.parametrize("scheme,width", [("light", 1280), ("dark", 1280), ("light", 800)])
def test_page_findings_link_to_their_steps(browser: Any, tmp_path: Path, scheme: str, width: int) -> None:
    from cgviz.data import gpu_trace

    trace = gpu_trace("static_move")
    found = [f for f in cgviz.diagnose(trace) if f.severity != "info"]
    assert found and len(found[0].evidence) > 1
    context = browser.new_context(viewport={"width": width, "height": 800}, color_scheme=scheme)
    try:
        page, requests, errors = open_page(context, findings_page(trace, tmp_path))
        ui = UI(page)
        box = ui.el(".cg-findings")
        assert box.is_visible() and box.get_attribute("open") is not None
        titles = [t.strip() for t in page.locator(".cgviz .cg-findings > ul .f-title").all_inner_texts()]
        assert titles == [f.title for f in found]
        shot(page, f"page-findings-{scheme}-{width}")

        before = ui.headline()
        page.locator(".cgviz .cg-findings > ul .f-title").first.click()
        after = ui.wait_headline_change(before)
        assert ui.step_of(after)[0] == found[0].evidence[0] + 1
        assert page.locator(".cgviz").first.evaluate(ROW_VISIBLE_JS) is None

        # every evidence step is a link; the one shown is marked
        last = found[0].evidence[-1]
        page.locator(f".cgviz .cg-findings .f-step[data-step='{last}']").first.click()
        assert ui.step_of(ui.wait_headline_change(after))[0] == last + 1
        assert page.locator(".cgviz .cg-findings .f-step.at").first.get_attribute("data-step") == str(last)

        # infos fold away under the errors and warnings
        infos = page.locator(".cgviz .cg-infos")
        assert infos.count() == 1 and infos.first.get_attribute("open") is None
        shot(page, f"page-findings-clicked-{scheme}-{width}")
        if scheme == "dark":
            assert ui.white_boxes() == []
        assert ui.layout_problems() == []
        assert requests == [] and errors == []
    finally:
        context.close()


def test_a_large_page_is_stored_compressed_and_opens_offline(context: Any, tmp_path: Path) -> None:
    trace = synthetic(nodes=100, steps=1500)
    path = exported(trace, tmp_path / "large.html", renderer="builtin")
    assert 'data-encoding="gzip-base64"' in path.read_text(encoding="utf-8")
    page, requests, errors = open_page(context, path)
    ui = UI(page)
    assert ui.step_of(ui.headline()) == (1, len(trace.steps))
    first = ui.headline()
    page.keyboard.press("End")
    assert ui.step_of(ui.wait_headline_change(first)) == (len(trace.steps), len(trace.steps))
    assert ui.tree_nodes() == len(trace.steps[-1].snapshot.nodes)
    assert page.locator(".cgviz .cg-blk").count() > 0  # the pool, laid out from its records
    assert requests == [] and errors == []
    shot(page, "page-large-compressed")


def test_a_merged_trace_shows_every_ranks_tree_and_the_steps_rank(context: Any, tmp_path: Path) -> None:
    """A two-rank trace: each step's tree beside the other rank's, the headline's kind in its
    colour after the rank, and a click on the step's rank's node shows that node."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_rank_trees import _rank_trace

    from cgviz.trace.ranks import merge

    merged = merge([_rank_trace(0, [4, 4, 4, 4]), _rank_trace(1, [4, 4, 8, 8, 8])])
    page, requests, errors = open_page(context, exported(merged, tmp_path / "merged.html"))
    ui = UI(page)
    i = max(k for k, s in enumerate(merged.steps) if s.rank == 1 and s.kind == "record")
    ui.el(".cg-slider").evaluate("(s, i) => { s.value = i; s.dispatchEvent(new Event('input')); }", i)
    page.wait_for_function("(i) => document.querySelector('.cgviz .cg-headline').textContent.includes('step ' + i + '/')",
                           arg=i + 1, timeout=10_000)
    assert ui.el(".cg-headline .kind").inner_text() == "record"
    labels = page.locator(".cgviz .cg-tree-box text").all_text_contents()
    assert "rank 1 · this step's rank" in labels and any(t.startswith("rank 0 · after step") for t in labels)
    own = merged.steps[i].snapshot.nodes
    assert ui.tree_nodes() == len(own)  # the other rank's nodes are drawn under ids of their own
    ui.click_node(own[0].id)
    page.wait_for_function("(t) => (document.querySelector('.cgviz .cg-node .title') || {}).textContent === t",
                           arg=f"{own[0].function} · node {own[0].id}", timeout=10_000)
    shot(page, "page-merged-ranks")
    assert requests == [] and errors == []


STEP_ROWS_JS = r"""
(root) => {
  // the step list's rows in the document: [index, number shown, headline, kind class, wholly in the list's view, current]
  const list = root.querySelector(".cg-steps"), b = list.getBoundingClientRect();
  return Array.from(list.querySelectorAll("li[data-i]")).map((li) => {
    const r = li.getBoundingClientRect(), kind = Array.from(li.classList).find((c) => c.startsWith("k-")) || "";
    return [+li.dataset.i, li.querySelector(".sn").textContent, li.querySelector(".hl").textContent, kind,
            r.top >= b.top - 1 && r.bottom <= b.bottom + 1, li.classList.contains("cur")];
  });
}
"""


def test_a_long_step_list_keeps_its_rows_right_far_from_the_start(context: Any, tmp_path: Path) -> None:
    """Only the rows near the step list's view are built (a few thousand steps here): a jump far
    away, a scroll to the middle and a click on a row there must all find the right rows."""
    trace = synthetic(nodes=100, steps=3000)
    n = len(trace.steps)
    page, requests, errors = open_page(context, exported(trace, tmp_path / "long.html", renderer="builtin"))
    ui, root = UI(page), page.locator(".cgviz").first

    def rows() -> list:
        page.wait_for_timeout(150)  # the list scrolls at the next frame, and measures its rows after it
        got = root.evaluate(STEP_ROWS_JS)
        for i, number, headline, kind, _, _ in got:  # every row built says its own step
            assert (number, headline, kind) == (str(i + 1), trace.steps[i].headline(), "k-" + trace.steps[i].kind), i
        assert [r[0] for r in got] == list(range(got[0][0], got[0][0] + len(got))), "the rows built are not consecutive"
        return got

    def current_row_shows(i: int) -> None:
        assert ui.step_of() == (i + 1, n)
        cur = [r for r in rows() if r[5]]
        assert [r[0] for r in cur] == [i], f"current rows {cur}, expected step {i + 1}"
        assert cur[0][4], f"the current row (step {i + 1}) is not in the list's view"
        assert root.evaluate(ROW_VISIBLE_JS) is None

    first = rows()
    assert len(first) < 200, f"{len(first)} rows built for {n} steps: the list should build only the rows near its view"

    before = ui.headline()
    page.keyboard.press("End")
    ui.wait_headline_change(before)
    current_row_shows(n - 1)

    far = 1234
    ui.el(".cg-slider").evaluate("(s, i) => { s.value = i; s.dispatchEvent(new Event('input')); }", far)
    page.wait_for_function("(i) => document.querySelector('.cgviz .cg-headline').textContent.includes('step ' + i + '/')",
                           arg=far + 1, timeout=10_000)
    current_row_shows(far)

    # scrolled to the middle by the reader: rows of the middle steps show, and one of them, clicked, is shown
    ui.el(".cg-steps").evaluate("(l) => { l.scrollTop = (l.scrollHeight - l.clientHeight) / 2; }")
    shown = [r for r in rows() if r[4]]
    assert shown and n // 4 < shown[0][0] < 3 * n // 4, f"rows in view after scrolling to the middle: {[r[0] for r in shown]}"
    pick = shown[len(shown) // 2][0]
    before = ui.headline()
    page.locator(f".cgviz .cg-steps li[data-i='{pick}'] .hl").click()
    ui.wait_headline_change(before)
    current_row_shows(pick)

    before = ui.headline()
    page.keyboard.press("ArrowRight")
    ui.wait_headline_change(before)
    current_row_shows(pick + 1)
    shot(page, "page-long-step-list")
    assert requests == [] and errors == []


IN_DOCUMENT_JS = r"""() => {
  const box = document.querySelector('.cgviz .cg-tree-box'), b = box.getBoundingClientRect();
  const seen = (g) => { const r = g.getBoundingClientRect(); return r.right > b.left && r.left < b.right && r.bottom > b.top && r.top < b.bottom; };
  return {
    nodes: box.querySelectorAll('g[id^="node-"]').length,
    active: Array.from(box.querySelectorAll('g.state-active')).map((g) => [+g.id.slice(5), seen(g)]),
    onPath: Array.from(box.querySelectorAll('g.on-path[id^="edge-"]')).map((g) => g.id),
    edges: Array.from(box.querySelectorAll('g[id^="edge-"]')).map((g) => g.id),
  };
}"""


# at each place of a scroll over the whole tree: the nodes whose groups show in the panel's view
VISIBLE_NODES_JS = r"""async () => {
  const box = document.querySelector('.cgviz .cg-tree-box'), frame = () => new Promise((r) => requestAnimationFrame(r)), out = [];
  for (let y = 0; y <= box.scrollHeight; y += box.clientHeight / 2)
    for (let x = 0; x <= box.scrollWidth; x += box.clientWidth / 2) {
      box.scrollTo(x, y); await frame(); await frame();
      const b = box.getBoundingClientRect();
      out.push(Array.from(box.querySelectorAll('g[id^="node-"]')).filter((g) => {
        const r = g.getBoundingClientRect();
        return r.right > b.left && r.left < b.left + box.clientWidth && r.bottom > b.top && r.top < b.top + box.clientHeight;
      }).map((g) => +g.id.slice(5)).sort((p, q) => p - q));
    }
  return out;
}"""


def test_a_big_tree_shows_in_its_panel_what_the_whole_drawing_shows(context: Any, tmp_path: Path) -> None:
    """Scrolled over the whole of a 300-node tree, the panel shows at every place the same nodes
    as the same page with every group in the document."""
    trace = synthetic(nodes=300, steps=900)
    seen = []
    for name, whole in (("culled", False), ("whole", True)):
        js = explorer_js_override() or asset("explorer.js")
        if whole:
            assert "ALL_SHOWN = 400" in js
            js = js.replace("ALL_SHOWN = 400", "ALL_SHOWN = 1e9")
        page, requests, errors = open_page(context, exported(trace, tmp_path / f"{name}.html", js, renderer="builtin"))
        page.keyboard.press("End")
        page.wait_for_function("() => document.querySelector('.cgviz .cg-headline').textContent.includes('step 900/')")
        seen.append(page.evaluate(VISIBLE_NODES_JS))
        assert requests == [] and errors == []
        page.close()
    culled, whole = seen
    assert len(culled) == len(whole) > 4 and all(whole), "the scroll should pass over several places, each showing nodes"
    for k, (a, b) in enumerate(zip(culled, whole)):
        assert a == b, f"place {k} of the scroll: nodes {a} show, the whole drawing shows {b}"


def test_a_big_tree_has_only_what_shows_in_the_document_and_shows_it_right(context: Any, tmp_path: Path) -> None:
    """A tree of hundreds of nodes keeps only the node and edge groups near the panel's view in
    the document: far from the start, the step's node is scrolled to and shown in its state,
    every node met while scrolling over the whole tree shows the step's state and replay count,
    the current path's edges (and only they) take the path stroke, and a node reached by
    scrolling can be clicked."""
    trace = synthetic(nodes=300, steps=900)
    n = len(trace.steps)
    page, requests, errors = open_page(context, exported(trace, tmp_path / "big-tree.html", renderer="builtin"))
    ui = UI(page)

    def check(i: int) -> None:
        page.wait_for_function("(i) => document.querySelector('.cgviz .cg-headline').textContent.includes('step ' + i + '/')",
                               arg=i + 1, timeout=10_000)
        page.wait_for_timeout(100)  # the tree scrolls to the step's node at the next frame
        step, now = trace.steps[i], page.evaluate(IN_DOCUMENT_JS)
        total = len(step.snapshot.nodes)
        assert total >= 250, f"step {i + 1}: a big tree expected, {total} nodes"
        assert 0 < now["nodes"] < total / 2, f"step {i + 1}: {now['nodes']} of {total} node groups in the document"
        if step.node is not None:
            assert now["active"] == [[step.node, True]], f"step {i + 1}: node {step.node} should show, active: {now['active']}"
        snap = step.snapshot
        path_edges = {f"edge-{a}-{b}" for a, b in zip(snap.path, snap.path[1:])}
        assert set(now["onPath"]) == path_edges & set(now["edges"]), f"step {i + 1}: on-path edges {now['onPath']}"
        shown = {node: (set(classes), text) for node, classes, text in page.evaluate(SHOWN_NODES, ".cgviz")}
        want = expected_nodes(trace, i)
        assert set(shown) == set(want), f"step {i + 1}: {len(shown)} nodes met while scrolling, {len(want)} expected"
        for node, (classes, replays) in want.items():
            got_classes, text = shown[node]
            assert got_classes == classes, f"step {i + 1}, node {node}: {got_classes} != {classes}"
            assert f"{replays} replay" in text, f"step {i + 1}, node {node}: {replays} replays expected in {text!r}"

    page.keyboard.press("End")
    check(n - 1)
    for far in (n // 2, 3 * n // 4, 2 * n // 3):
        ui.el(".cg-slider").evaluate("(s, i) => { s.value = i; s.dispatchEvent(new Event('input')); }", far)
        check(far)
    page.keyboard.press("ArrowRight")
    check(2 * n // 3 + 1)

    # a node far from the one shown, reached by scrolling the panel, is clicked and its outputs show
    box = ui.el(".cg-tree-box")
    box.evaluate("(b) => { b.scrollLeft = b.scrollWidth; }")
    page.wait_for_timeout(100)
    far_node = page.evaluate("() => +Array.from(document.querySelectorAll('.cgviz .cg-tree-box g[id^=\"node-\"]')).pop().id.slice(5)")
    page.locator(f".cgviz .cg-tree-box [id='node-{far_node}']").first.click()
    expect_title = f"node {far_node}"
    page.wait_for_function("(t) => document.querySelector('.cgviz .cg-node .title').textContent.endsWith(t)", arg=expect_title,
                           timeout=10_000)
    assert "cg-sel" in page.locator(f".cgviz .cg-tree-box [id='node-{far_node}']").first.get_attribute("class")
    shot(page, "page-big-tree")
    assert requests == [] and errors == []


def test_the_render_benchmark_times_the_page_in_chromium(browser: Any, tmp_path: Path) -> None:
    """benchmarks/render.py's in-browser figures come from the page itself: its probe finds the
    explorer's controls, steps and jumps, and reports times (not a "skipped" reason)."""
    trace = synthetic(nodes=40, steps=300)
    from render import measure_browser  # (benchmarks/ is on the path now)

    path = exported(trace, tmp_path / "small.html", renderer="builtin")
    page = path.read_text(encoding="utf-8")
    assert 'id="cgviz-rest"' in page  # a page of two parts: its first steps shown before the rest is in
    got = measure_browser(page, browser)
    assert "skipped" not in got, got
    for key in ("shown_ms", "open_ms", "ready_ms", "next_median_ms", "jump_median_ms"):
        assert isinstance(got[key], (int, float)) and got[key] >= 0, got
    assert got["shown_ms"] <= got["open_ms"] <= got["ready_ms"], got  # shown, painted, then the rest decoded
    assert got["next_median_ms"] <= got["next_max_ms"] and got["jump_median_ms"] <= got["jump_max_ms"], got


# -- the tree box's scroll: the node of interest in view -------------------------------------------
def chain_trace(functions: int, calls: int, rank: Optional[int] = None, shapes: tuple[int, ...] = (8,)) -> Any:
    """A sim tree run `calls` times over a chain of `functions` wrapped calls, once per input shape
    of `shapes` (a branch each), each run a generation of its own (mark_step): a tree as tall as
    the chain. With `rank`, that rank's trace of a world of two, to merge."""
    import torch

    tree = cgviz.Tree("sim")
    fs = [tree.wrap(lambda x, k=k: x * 2 + k, name=f"f{k}") for k in range(functions)]
    for _ in range(calls):
        for n in shapes:
            tree.mark_step()
            x = torch.ones(n)
            for f in fs:
                x = f(x)
            del x
    trace = tree.trace
    if rank is not None:
        trace.meta.update(rank=rank, world_size=2)
    return trace


# a node group's box and the tree box's visible part (its client area: no padding's outside, no
# scrollbar), in the viewport's pixels; the box's scroll, whether the tree is shrunk to the
# width and whether it is taller than the box
NODE_IN_BOX_JS = r"""(id) => {
  const box = document.querySelector('.cgviz .cg-tree-box'), g = box.querySelector('[id="' + id + '"]');
  const b = box.getBoundingClientRect(), x = b.left + box.clientLeft, y = b.top + box.clientTop, r = g && g.getBoundingClientRect();
  return {node: r && [r.left, r.top, r.right, r.bottom], view: [x, y, x + box.clientWidth, y + box.clientHeight],
          scroll: [box.scrollLeft, box.scrollTop], fit: box.classList.contains('fit'), tall: box.scrollHeight > box.clientHeight + 1,
          cursor: g && getComputedStyle(g).cursor, sel: !!g && g.classList.contains('cg-sel')};
}"""


def node_in_box(page: Any, gid: str) -> dict:
    """Where node group `gid` is against the tree box's view (NODE_IN_BOX_JS), after the frames
    the box scrolls at."""
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => requestAnimationFrame(r))))")
    at = page.evaluate(NODE_IN_BOX_JS, gid)
    assert at["node"] is not None, f"no group {gid} in the tree box"
    return at


def shows(at: dict) -> bool:
    (l, t, r, b), (vl, vt, vr, vb) = at["node"], at["view"]
    return l >= vl - 1 and r <= vr + 1 and t >= vt - 1 and b <= vb + 1


def tree_shot(page: Any, name: str) -> Path:
    """A screenshot of the tree panel (its box reaches below the window's fold), numbered as `shot`'s."""
    d = shots_dir()
    path = d / f"{len(list(d.glob('*.png'))):02d}-{name}.png"
    page.locator(".cgviz .cg-tree-panel").first.screenshot(path=str(path))
    return path


def go_to(page: Any, i: int) -> None:
    """Step i (from 0) through the slider, and wait for its headline."""
    page.locator(".cgviz .cg-slider").first.evaluate("(s, i) => { s.value = i; s.dispatchEvent(new Event('input')); }", i)
    page.wait_for_function("(i) => document.querySelector('.cgviz .cg-headline').textContent.includes('step ' + i + '/')",
                           arg=i + 1, timeout=10_000)


def press(page: Any, key: str, i: int) -> None:
    """Press `key`, and wait for step i's (from 0) headline."""
    page.keyboard.press(key)
    page.wait_for_function("(i) => document.querySelector('.cgviz .cg-headline').textContent.includes('step ' + i + '/')",
                           arg=i + 1, timeout=10_000)


@pytest.mark.parametrize("renderer", ["builtin", "graphviz"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_tree_fit_to_the_width_scrolls_up_and_down_to_the_node_of_interest(browser: Any, tmp_path: Path,
                                                                             renderer: str, scheme: str) -> None:
    """A tall tree shrunk to the panel's width ("fit to width") is still taller than the panel:
    a step whose node is below (or above) the part in view scrolls the box to it, and a node
    selected stays the one shown; where the node shows already, the box keeps its scroll. The
    built-in layout (node states painted on one drawing) and Graphviz's (a drawing per step)
    scroll by different code."""
    if renderer == "graphviz":
        from cgviz.views.tree import dot_available

        if not dot_available():
            pytest.skip("Graphviz's dot is not installed")
    trace = chain_trace(16, 2, shapes=(8, 16, 32))  # three branches: wider than the panel, shrunk to it
    steps, n = trace.steps, len(trace.steps)
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=scheme)
    try:
        page, _, errors = open_page(context, exported(trace, tmp_path / "tall.html", renderer=renderer))
        if "fit" not in (page.locator(".cgviz .cg-tree-box").first.get_attribute("class") or ""):
            page.locator(".cgviz .cg-fit").first.click()  # (a tree only a little too wide is fit without)
        press(page, "End", n - 1)
        last = node_in_box(page, f"node-{steps[-1].node}")
        assert last["fit"] and last["tall"], f"the tree should be fit to the width and taller than the box: {last}"
        assert shows(last), f"step {n}: node {steps[-1].node} is not in the tree box's view: {last}"
        tree_shot(page, f"page-fit-tall-last-{renderer}-{scheme}")

        top = next(i for i, s in enumerate(steps) if s.node is not None)  # (step 1 begins a generation: no node)
        go_to(page, top)
        first = node_in_box(page, f"node-{steps[top].node}")
        assert shows(first) and first["scroll"][1] == 0, f"step {top + 1}: its node should show at the top: {first}"

        # the step's node shows already: the box keeps its scroll
        go_to(page, top + 1)
        again = node_in_box(page, f"node-{steps[top + 1].node}")
        assert shows(again) and again["scroll"] == first["scroll"], (first, again)

        # a node selected is the node of interest: at a step whose own node is far below, it shows
        rec = next(i for i, s in enumerate(steps) if s.kind == "record")
        go_to(page, rec)
        UI(page).click_node(steps[rec].node)
        page.wait_for_function("(id) => (document.querySelector('.cgviz .cg-node .title') || {}).textContent?.endsWith('node ' + id)",
                               arg=steps[rec].node, timeout=5_000)
        go_to(page, n - 2)
        sel = node_in_box(page, f"node-{steps[rec].node}")
        assert sel["sel"] and shows(sel), f"step {n - 1}: the selected node {steps[rec].node} is not in view: {sel}"
        assert not shows(node_in_box(page, f"node-{steps[n - 2].node}")), "the step's own node was expected out of view"
        tree_shot(page, f"page-fit-tall-selected-{renderer}-{scheme}")
        assert errors == []
    finally:
        context.close()


def two_ranks() -> Any:
    """Two ranks' sim trees, merged: rank 0's steps, then rank 1's (each ran after the other: the
    merge orders by start time). Each a chain run for two input shapes, so that the two trees side
    by side are too wide to be fit to the width."""
    from cgviz.trace.ranks import merge

    return merge([chain_trace(8, 2, rank=0, shapes=(8, 16)), chain_trace(8, 2, rank=1, shapes=(8, 16))])


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_merged_trace_scrolls_to_the_node_of_the_steps_own_rank(browser: Any, tmp_path: Path, scheme: str) -> None:
    """The trees of both ranks side by side, the step's rank's first: at a step of rank 1 whose
    tree has no current node (a generation begins), rank 0's current node, beside it, is not
    the node scrolled to (the box keeps its scroll); rank 1's next node is."""
    merged = two_ranks()
    steps = merged.steps
    g = next(i for i, s in enumerate(steps) if s.rank == 1 and s.kind == "generation" and s.snapshot.nodes)
    theirs = max(i for i in range(g) if steps[i].rank == 0 and steps[i].snapshot is not None)
    other = steps[theirs].snapshot.current_node
    assert steps[g].snapshot.current_node is None and steps[g - 1].rank == 1 and other is not None
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=scheme)
    try:
        page, _, errors = open_page(context, exported(merged, tmp_path / "ranks.html", renderer="builtin"))
        go_to(page, g - 1)
        before = node_in_box(page, f"node-{steps[g - 1].node}")
        assert not before["fit"] and shows(before), before
        press(page, "ArrowRight", g)
        now = node_in_box(page, f"rank0-node-{other}")
        assert not shows(now), f"step {g + 1} (rank 1): rank 0's current node {other} was scrolled to: {now}"
        assert now["scroll"][0] == before["scroll"][0], (before, now)  # (down, the box may stop short: a tree changed)
        tree_shot(page, f"page-ranks-own-tree-{scheme}")
        press(page, "ArrowRight", g + 1)
        mine = node_in_box(page, f"node-{steps[g + 1].node}")
        assert steps[g + 1].rank == 1 and shows(mine), mine
        assert errors == []
    finally:
        context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_click_on_another_ranks_node_selects_it_at_the_step_its_tree_shows(browser: Any, tmp_path: Path,
                                                                             scheme: str) -> None:
    """A node of another rank's tree (ids `rank0-node-M`) takes a pointer and can be clicked: the
    explorer goes to the step that tree is drawn after (its label's "after step K"), where it is
    the step's own tree, and selects node M there: outlined (.cg-sel), in view, its outputs in
    the node panel."""
    merged = two_ranks()
    steps, n = merged.steps, len(merged.steps)
    assert steps[-1].rank == 1
    k = max(i for i, s in enumerate(steps) if s.rank == 0 and s.snapshot is not None)
    node = steps[k].snapshot.nodes[0]  # the root: far from rank 0's last node
    assert node.id != steps[k].node
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=scheme)
    try:
        page, _, errors = open_page(context, exported(merged, tmp_path / "ranks.html", renderer="builtin"))
        press(page, "End", n - 1)
        label = [t for t in page.locator(".cgviz .cg-tree-box text").all_text_contents() if t.startswith("rank 0 · ")]
        assert label == [f"rank 0 · after step {k + 1}"], label
        g = page.locator(f".cgviz .cg-tree-box [id='rank0-node-{node.id}']").first
        g.scroll_into_view_if_needed()
        assert node_in_box(page, f"rank0-node-{node.id}")["cursor"] == "pointer"
        g.locator("rect, polygon, path").first.click(force=True)
        page.wait_for_function("(i) => document.querySelector('.cgviz .cg-headline').textContent.includes('step ' + i + '/')",
                               arg=k + 1, timeout=5_000)
        page.wait_for_function("(t) => (document.querySelector('.cgviz .cg-node .title') || {}).textContent === t",
                               arg=f"{node.function} · node {node.id}", timeout=5_000)
        at = node_in_box(page, f"node-{node.id}")
        assert at["sel"] and shows(at), at
        assert page.locator(".cgviz .cg-tree-box .cg-sel").count() == 1
        assert "#step=%d&node=%d" % (k + 1, node.id) in page.url
        assert "rank 0 · this step's rank" in page.locator(".cgviz .cg-tree-box text").all_text_contents()
        tree_shot(page, f"page-ranks-other-node-clicked-{scheme}")
        assert errors == []
    finally:
        context.close()


# what the page shows at every step: headline, tree, pool, node panel, and whether it waits
EVERY_STEP_JS = """(n) => {
  const r = document.querySelector('.cgviz'), S = r.querySelector('.cg-slider'), out = [];
  for (let i = 0; i < n; i++) {
    S.value = i; S.dispatchEvent(new Event('input'));
    out.push([r.querySelector('.cg-headline').textContent, r.querySelector('.cg-tree-box').innerHTML,
              r.querySelector('.cg-pool-box').textContent, r.querySelector('.cg-node').textContent, r.classList.contains('loading')]);
  }
  return out;
}"""


@pytest.mark.parametrize("name", ["graphs", "ranks"])
def test_a_page_in_two_parts_shows_every_step_as_the_page_in_one(browser: Any, tmp_path: Path, name: str) -> None:
    """A long trace's page carries its first steps' pictures and the rest apart (views/page_split.py):
    once the rest is in, every step shows what the same payload in one part shows. Here on traces
    of CUDA graphs made outside the trees and of two ranks' trees side by side."""
    from cgviz.data import ddp_traces, graph_trace
    from cgviz.trace.io import load_trace
    from cgviz.views.html import render_page
    from cgviz.views.page_data import page_whole

    trace = graph_trace("serving_runner") if name == "graphs" else cgviz.merge([load_trace(p) for p in ddp_traces("planted")])
    data, cut = page_whole(trace, renderer="builtin")
    if cut is None:  # a trace of 50 steps or fewer: its first part is cut at a step of its own
        from cgviz.views.page_data import PageData

        built = PageData(trace, renderer="builtin")
        data = {**built.head(), **built.piece(whole=True, first=len(trace.steps) // 2)}
        cut = built.first_cut
    shown = []
    for i, page in enumerate((render_page(data, compress=True), render_page(data, compress=True, cut=cut))):
        assert page.count('id="cgviz-rest"') == i
        path = tmp_path / f"page{i}.html"
        path.write_text(page, encoding="utf-8")
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        try:
            tab, errors = context.new_page(), []
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto(path.as_uri())
            tab.evaluate("() => window.cgvizReady")
            shown.append(tab.evaluate(EVERY_STEP_JS, len(trace.steps)))
            assert errors == []
        finally:
            context.close()
    assert len(shown[1]) == len(trace.steps) and not any(s[-1] for s in shown[1])
    assert shown[1] == shown[0]
