"""A shared trace's names cannot run script in the explorer: the exported page (Graphviz and
the built-in layout) and the Jupyter widget, opened in Chromium, a trace planting hostile
strings in every text field (`tests/hostile_trace.py`). Every step is shown, every node and
edge clicked; no link but `#…`, no event handler, no script of the trace's, no page error,
`window.__pwned` never set, and every planted string shown as it is."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import UI, explorer_js_override, shot
from test_page_browser import exported, open_page

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the hostile trace
from hostile_trace import HOSTILE, hostile_trace, shown  # noqa: E402

from cgviz.views.tree import dot_available  # noqa: E402

# links, handlers and scripts under `root` (a selector), and the page's scripts
PROBLEMS_JS = r"""
(root) => {
  const out = [], box = document.querySelector(root);
  for (const e of [box, ...box.querySelectorAll("*")]) {
    for (const a of e.attributes) {
      const n = a.name.toLowerCase();
      if (n.startsWith("on")) out.push(e.tagName + " " + a.name + "=" + a.value.slice(0, 80));
      if ((n === "href" || n.endsWith(":href")) && !a.value.startsWith("#"))
        out.push(e.tagName + " " + a.name + "=" + a.value.slice(0, 80));
      if (n === "target" || n === "formaction" || n === "action") out.push(e.tagName + " " + a.name);
    }
    if (/^(script|iframe|object|embed|foreignobject|animate|set|form)$/i.test(e.tagName))
      out.push("<" + e.tagName + ">");
  }
  for (const a of box.querySelectorAll("a[href], [*|href]")) {
    const v = a.getAttribute("href") || a.getAttributeNS("http://www.w3.org/1999/xlink", "href") || "";
    if (!v.startsWith("#")) out.push("link " + v.slice(0, 80));
  }
  return {problems: out, scripts: Array.from(document.scripts).map((s) => (s.type || "") + "#" + (s.id || "")),
          pwned: typeof window.__pwned !== "undefined"};
}
"""

# the ids of the tree's node and edge groups shown now
GROUPS_JS = "(root) => Array.from(document.querySelectorAll(root + ' .cg-tree-box g[id^=\"node-\"], ' + root + " + \
            "' .cg-tree-box g[id^=\"edge-\"]')).map((g) => g.id)"

# the text a person reads: the explorer's HTML text (headline, reason, node panel, header,
# findings, banners) and its tree's SVG text, and the kernels' full names (their tooltips)
TEXT_JS = r"""
(root) => {
  const box = document.querySelector(root), tree = box.querySelector(".cg-tree-box");
  const svg = tree ? Array.from(tree.querySelectorAll("text, title")).map((t) => t.textContent).join("\n") : "";
  const titles = Array.from(box.querySelectorAll("[title]")).map((e) => e.getAttribute("title")).join("\n");
  return [box.textContent, svg, titles];
}
"""


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: Any) -> Path:
    folder = tmp_path_factory.mktemp("hostile-trace")
    hostile_trace(folder)
    return folder / "hostile.cgtrace.json"


@pytest.fixture(scope="module")
def trace(trace_file: Path) -> Any:
    import cgviz

    return cgviz.Trace.load(trace_file)


#: Names a Graphviz that takes them as they are still draws: a link and a lost `<lambda>`, not an error.
LINK_NAMES = ["$x^2$", HOSTILE[0], "<lambda>"]  # the edge into a node is labelled with its name


@pytest.fixture(scope="module")
def link_trace(tmp_path_factory: Any) -> Any:
    return hostile_trace(tmp_path_factory.mktemp("link-trace"), LINK_NAMES)


def check_page(page: Any, root: str) -> dict:
    got = page.evaluate(PROBLEMS_JS, root)
    assert got["problems"] == [], got["problems"][:20]
    assert not got["pwned"], "the trace's script ran"
    return got


def drive(page: Any, root: str, n: int, errors: list[str]) -> tuple[str, str]:
    """Every step, from the first to the last (▶), every node and edge clicked the first time it
    shows, and at the last step all of them; checked after each. The HTML and SVG text seen."""
    ui = UI(page, root)
    html, svg, clicked = [], [], set()

    def take() -> None:
        box, tree, titles = page.evaluate(TEXT_JS, root)
        html.extend([box, titles])
        svg.append(tree)

    def click_all(ids: list[str]) -> None:
        for gid in ids:
            g = page.locator(f"{root} .cg-tree-box g[id='{gid}']").first
            if not g.count():
                continue
            g.scroll_into_view_if_needed()
            # a node's box, an edge's label: where a person clicks (an injected link sat on the label)
            g.locator("rect, polygon, path" if gid.startswith("node-") else "text").first.click(force=True)
            page.wait_for_timeout(10)
            take()
            check_page(page, root)
            assert not errors, errors

    for i in range(n):
        if i:
            before = ui.headline()
            ui.el(".cg-next").click()
            ui.wait_headline_change(before)
        page.wait_for_function("(r) => !document.querySelector(r).classList.contains('loading')", arg=root,
                               timeout=10_000)
        assert ui.step_of() == (i + 1, n)
        ids = page.evaluate(GROUPS_JS, root)
        assert any(g.startswith("node-") for g in ids), f"step {i + 1}: no tree"
        take()
        check_page(page, root)
        fresh = [g for g in ids if g not in clicked] if i < n - 1 else ids
        clicked.update(fresh)
        click_all(fresh)
    return "\n".join(html), "\n".join(svg)


def check_shown(trace: Any, html: str, svg: str, planted: list[str] = HOSTILE) -> None:
    for s in planted:
        # the tree writes control characters and line breaks as escapes; the HTML text holds them as they are
        assert shown(s) in svg, f"{shown(s)!r} is not in the tree"
        assert s in html, f"{s!r} is not in the page's text"
    for step in trace.steps:
        assert step.reason in html or step.reason.replace("\n", " ") in html


NEEDS_DOT = pytest.mark.skipif(not dot_available(), reason="Graphviz's dot is not installed")
RENDERERS = ["builtin", pytest.param("graphviz", marks=NEEDS_DOT)]


@pytest.mark.parametrize("renderer", RENDERERS)
def test_the_exported_page_of_a_hostile_trace_runs_none_of_it(context: Any, tmp_path: Path, trace: Any,
                                                              renderer: str) -> None:
    check_exported(context, tmp_path, trace, renderer, HOSTILE)


@NEEDS_DOT
def test_a_name_cannot_make_graphviz_draw_a_link(context: Any, tmp_path: Path, link_trace: Any) -> None:
    """Names that Graphviz would take as label markup and attributes (a `javascript:` URL on the
    edge it labels), alone: the page draws them as text."""
    check_exported(context, tmp_path, link_trace, "graphviz", LINK_NAMES)


def check_exported(context: Any, tmp_path: Path, trace: Any, renderer: str, planted: list[str]) -> None:
    page, requests, errors = open_page(context, exported(trace, tmp_path / f"hostile-{renderer}.html",
                                                         renderer=renderer))
    got = check_page(page, ".cgviz")
    # the payload (JSON, or gzipped when large) and the explorer: none from the trace
    assert got["scripts"] in (["application/json#cgviz-data", "module#"],
                              ["application/octet-stream#cgviz-data", "module#"]), got["scripts"]
    html, svg = drive(page, ".cgviz", len(trace.steps), errors)
    shot(page, f"hostile-{renderer}")
    check_shown(trace, html, svg, planted)
    assert page.evaluate("document.title") == f"cgviz · {planted[0]} · {planted[-1]}"  # meta: scenario, backend
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert errors == [] and requests == []


def test_the_page_reads_drawings_whose_lines_hold_line_breaks(context: Any, tmp_path: Path, trace: Any) -> None:
    """The page's script reads a drawing's node and edge groups by lines; a line break that
    reached one (raw "\\r", U+2028, U+2029 in a group's line, or a group cut over two lines)
    still gives a tree with every node and no script error."""
    from cgviz.views.html import render_page
    from cgviz.views.page_data import page_data
    from cgviz.views.page_store import SvgKind, SvgStore

    data = page_data(trace, renderer="builtin")
    lines = data["lines"]
    drawings = [[lines[j] for i in range(0, len(r), 2) for j in range(r[i], r[i] + r[i + 1])] for r in data["trees"]]
    cut = 0

    def broken(line: str) -> list[str]:
        nonlocal cut
        if not line.startswith('<g id="node-') or "<title>" not in line:
            return [line]
        line = line.replace("ls\\u2028ps\\u2029end", "ls\u2028ps\u2029end").replace("line2\\rline3", "line2\rline3")
        head, sep, tail = line.partition("line1\\nline2")
        if not sep:
            return [line]
        cut += 1
        return [head + "line1", "line2" + tail]  # the group over two lines, as a raw "\n" would make it

    store = SvgStore()
    kind = SvgKind(store)
    for d in drawings:
        kind.add_lines([piece for line in d for piece in broken(line)])
    assert cut, "no group was cut"
    data["lines"], data["trees"] = store.lines, kind.items
    path = tmp_path / "broken-lines.html"
    path.write_text(render_page(data), encoding="utf-8")
    page, requests, errors = open_page(context, exported_file(path))
    ui, n = UI(page), len(trace.steps)
    for i in range(n):
        if i:
            before = ui.headline()
            ui.el(".cg-next").click()
            ui.wait_headline_change(before)
        nodes = page.evaluate("() => document.querySelectorAll('.cgviz .cg-tree-box g[id^=\"node-\"]').length")
        assert nodes == len(trace.steps[i].snapshot.nodes), f"step {i + 1}: {nodes} nodes shown"
    text = page.evaluate(TEXT_JS, ".cgviz")[1]
    assert "line1" in text and "ls\u2028ps\u2029end" in text
    assert errors == [] and requests == []


def exported_file(path: Path) -> Path:
    """`path`, an exported page, with the explorer module under test in it (CGVIZ_EXPLORER_JS)."""
    from cgviz.views.html import asset

    js = explorer_js_override()
    if js is not None:
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(asset("explorer.js"), js), encoding="utf-8")
    return path


@pytest.mark.parametrize("which", ["hostile", "links"])
def test_the_widget_of_a_hostile_trace_runs_none_of_it(context: Any, jupyter: Any, trace_file: Path,
                                                        which: str) -> None:
    """The same in JupyterLab: the Explorer widget (its default renderer: Graphviz, for traces
    this small) on the trace, and on the one whose names would make Graphviz draw a link."""
    import cgviz
    from test_jupyter_browser import open_and_run_all

    if which == "hostile":
        planted = HOSTILE
        (jupyter.root / f"{which}.cgtrace.json").write_text(trace_file.read_text(encoding="utf-8"), encoding="utf-8")
    else:
        planted = LINK_NAMES
        folder = jupyter.root / which
        folder.mkdir()
        hostile_trace(folder, LINK_NAMES)
        (folder / "hostile.cgtrace.json").rename(jupyter.root / f"{which}.cgtrace.json")
    trace = cgviz.Trace.load(jupyter.root / f"{which}.cgtrace.json")
    setup = f"import cgviz\ntrace = cgviz.Trace.load('{which}.cgtrace.json')\nex = cgviz.Explorer(trace)\nex"
    name = jupyter.write_notebook(f"{which}.ipynb", [setup, ""])
    page = open_and_run_all(context, jupyter, f"/lab/tree/{name}")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    check_page(page, ".cgviz")
    html, svg = drive(page, ".cgviz", len(trace.steps), errors)
    shot(page, f"widget-{which}")
    check_shown(trace, html, svg, planted)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert errors == []


def test_the_planted_trace_holds_every_hostile_string(trace_file: Path) -> None:
    """The trace under test carries the strings where it should (a check on the test itself)."""
    data = json.loads(trace_file.read_text(encoding="utf-8"))
    functions = {s.get("function") for s in data["steps"]}
    assert set(HOSTILE) <= functions
    assert all(any(h in s["reason"] for h in HOSTILE) for s in data["steps"])
    planted = {o["dtype"] for o in data["tables"]["outputs"]} | {n["signature"][1:-3] for n in data["tables"]["nodes"]}
    assert len(set(HOSTILE) & planted) >= 3
    assert any(h in k for h in HOSTILE for k in data["meta"]) and data["meta"]["scenario"] == HOSTILE[0]
    assert all(e["kernels"] for e in data["meta"]["profile"].values())
