"""A shared trace cannot run script or break the views through the names it carries.

Every text of a trace (function names, signatures, reasons, dtypes, owners, meta) may come from
anyone: the tree's DOT source quotes each for the place it goes (no name makes a DOT attribute,
a link or a line of its own), Graphviz draws every tree of such a trace, the SVG that comes
back holds no link but `#…` and no event handler, a failing `dot` is a clear cgviz error, the
built-in drawing keeps each node and edge on a line of its own, and matplotlib draws names as
they are (no mathtext).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Iterator

import pytest

from hostile_trace import HOSTILE, hostile_trace, shown

import cgviz
from cgviz.views.html import to_html
from cgviz.views.page_data import page_data
from cgviz.views.tree import GraphvizError, builtin_tree_svg, dot_available, to_dot, tree_svg
from cgviz.views.tree.dot import graphviz_svg

needs_dot = pytest.mark.skipif(not dot_available(), reason="Graphviz's dot is not installed")

#: The attributes cgviz writes in a tree's DOT source; a name must never add another.
DOT_ATTRIBUTES = {
    "rankdir", "ordering", "bgcolor", "fontname", "nodesep", "ranksep", "pad", "id", "class", "shape", "style",
    "fontsize", "fontcolor", "margin", "color", "arrowsize", "label", "labelloc", "labeljust", "fillcolor",
    "penwidth", "peripheries",
}
#: The elements and attributes of the HTML-like labels cgviz writes.
LABEL_TAGS = {"TABLE", "TR", "TD", "FONT", "B"}
LABEL_ATTRIBUTES = {"BORDER", "CELLBORDER", "CELLSPACING", "CELLPADDING", "POINT-SIZE", "COLOR", "ALIGN", "BGCOLOR",
                    "STYLE", "WIDTH"}
LINE_BREAKS = ("\r", "\u2028", "\u2029", "\x85")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: Any) -> Any:
    return hostile_trace(tmp_path_factory.mktemp("hostile"))


def trees(trace: Any) -> Iterator[tuple[Any, Any]]:
    """(step, snapshot) for each distinct tree the trace shows."""
    seen = set()
    for step in trace.steps:
        snap = step.snapshot
        key = (id(snap), step.kind, step.node)
        if snap is not None and key not in seen:
            seen.add(key)
            yield step, snap


# -- DOT -----------------------------------------------------------------------------------------
_TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|#[^\n]*|"(?:\\.|[^"\\])*"|->|--|[\[\]{};,=:]|[\w.\-]+|<', re.S)


def dot_tokens(source: str) -> list[str]:
    """DOT's tokens: quoted strings, HTML strings (`<…>`, nested), names and punctuation."""
    out, i = [], 0
    while i < len(source):
        if source[i] == "<":  # an HTML string: up to its matching '>'
            depth, j = 0, i
            while True:
                c = source[j]
                depth += (c == "<") - (c == ">")
                j += 1
                if depth == 0:
                    break
            out.append(source[i:j])
            i = j
            continue
        m = _TOKEN.match(source, i)
        assert m, f"DOT source does not tokenize at {source[i:i + 60]!r}"
        if not m.group().isspace() and not m.group().startswith(("//", "/*", "#")):
            out.append(m.group())
        i = m.end()
    return out


def dot_attributes(source: str) -> list[tuple[str, str]]:
    """Every `name = value` of the source."""
    toks = dot_tokens(source)
    return [(toks[k - 1], toks[k + 1]) for k in range(1, len(toks) - 1) if toks[k] == "="]


def label_text(value: str) -> str:
    """The text an HTML-like label shows, its elements and attributes checked against what cgviz
    writes, and every backslash in it doubled (Graphviz reads `\\N`, `\\G`, ... in a label as names)."""
    assert value.startswith("<") and value.endswith(">"), value
    root = ET.fromstring(f"<L>{value[1:-1]}</L>")  # well-formed XML: no raw '<' or '&' from a name
    for e in root.iter():
        if e.tag != "L":
            assert e.tag in LABEL_TAGS, f"a label holds <{e.tag}>: {value[:200]}"
            assert set(e.attrib) <= LABEL_ATTRIBUTES, f"a label's <{e.tag}> has {set(e.attrib) - LABEL_ATTRIBUTES}"
    text = "".join(root.itertext())
    assert re.fullmatch(r"(?:[^\\]|\\\\)*", text, re.S), f"a lone backslash in a label: {text!r}"
    return text.replace("\\\\", "\\")


def test_the_dot_source_quotes_every_string_from_the_trace(trace: Any) -> None:
    planted = {shown(s) for s in HOSTILE}
    shown_texts = []
    for step, snap in trees(trace):
        source = to_dot(snap, step, selected=snap.nodes[-1].id)
        for name, value in dot_attributes(source):
            assert name in DOT_ATTRIBUTES, f"the DOT source has an attribute {name}={value[:80]!r}"
            if name == "label" and value.startswith("<"):
                shown_texts.append(label_text(value))
            else:
                assert value.startswith('"') or re.fullmatch(r"[\w.\-]+", value), value
                for c in "\x00\x07\x1b" + "".join(LINE_BREAKS):
                    assert c not in value
    text = "\n".join(shown_texts)
    for s in planted:  # every name, as a view writes it, on a box or an edge
        assert s in text, f"{s!r} is not shown in any label"
    for raw in ("\x00", "\x07", "\x1b", "\x7f", "\u2028", "\u2029", "\r"):
        assert raw not in text


def test_a_lambda_is_shown_with_its_angle_brackets_on_boxes_and_edges(trace: Any) -> None:
    step = trace.steps[-3]  # a replay: the whole path, every edge
    source = to_dot(step.snapshot, step)
    edge_labels = [label_text(v) for k, v in _edge_labels(source)]
    assert "<lambda>" in edge_labels
    assert sum("<lambda>" in label_text(v) for n, v in dot_attributes(source) if n == "label") >= 2


def _edge_labels(source: str) -> list[tuple[str, str]]:
    out = []
    for line in source.splitlines():
        if "->" in line:
            out += [(k, v) for k, v in dot_attributes(line) if k == "label"]
    return out


def svg_problems(svg: str) -> list[str]:
    """Links other than `#…`, event handlers, scripts and foreign content in an SVG text."""
    root = ET.fromstring(svg)
    out = []
    for e in root.iter():
        tag = e.tag.rsplit("}", 1)[-1]
        if tag in ("script", "foreignObject", "iframe", "object", "embed"):
            out.append(f"<{tag}>")
        for k, v in e.attrib.items():
            name = k.rsplit("}", 1)[-1]
            if name.lower().startswith("on"):
                out.append(f"{tag} {name}={v!r}")
            if name == "href" and not v.startswith("#"):
                out.append(f"{tag} href={v!r}")
    return out


def svg_text(svg: str) -> str:
    return "\n".join(t for t in ET.fromstring(svg).itertext())


@needs_dot
def test_graphviz_draws_every_tree_of_the_trace_with_no_link_and_every_name_shown(trace: Any) -> None:
    text = []
    for step, snap in trees(trace):
        svg = tree_svg(snap, step, selected=snap.nodes[0].id, renderer="graphviz")
        assert svg_problems(svg) == []
        text.append(svg_text(svg))
    text = "\n".join(text)
    for s in HOSTILE:
        assert shown(s) in text, f"{shown(s)!r} is not in the drawings"


@needs_dot
@pytest.mark.parametrize("name", ["</script><script>x</script>", "nul\x00", "esc\x1b[31m", "bel\x07", "a\nb",
                                  "c\rd", "e\u2028f", "g\u2029h", "<lambda>", '\\"\\N', "\ufffe\uffff"])
def test_one_name_from_a_trace_does_not_stop_dot(name: str) -> None:
    import torch

    tree = cgviz.Tree("sim")
    f, g = tree.wrap(lambda x: x + 1, name=name + "0"), tree.wrap(lambda x: x * 2, name=name)
    for _ in range(3):
        g(f(torch.ones(2)))
    step = tree.trace.steps[-1]
    svg = tree_svg(step.snapshot, step, renderer="graphviz")
    assert svg_problems(svg) == []
    root = ET.fromstring(svg)
    groups = {e.get("id"): "".join(e.itertext()) for e in root.iter() if e.get("id")}
    assert shown(name + "0") in groups["node-0"] and shown(name) in groups["node-1"]
    assert shown(name) in groups["edge-0-1"]  # the edge's label: the child's function
    assert to_html(tree.trace, renderer="graphviz")


# -- what Graphviz returns is checked, and a failing dot is a cgviz error -------------------------
@needs_dot
def test_links_and_handlers_in_what_graphviz_returns_are_taken_out(trace: Any, monkeypatch: Any) -> None:
    import graphviz

    real = graphviz.pipe

    def tampered(engine: str, fmt: str, data: bytes, **kw: Any) -> bytes:
        svg = real(engine, fmt, data, **kw).decode()
        svg = svg.replace("<text ", '<text onclick="x1()" ', 1)
        assert '<g id="node&#45;0"' in svg
        svg = svg.replace('<g id="node&#45;0"', '<g id="node-0" onmouseover="x2()"', 1)
        svg = svg.replace("</svg>", '<a xlink:href="javascript:x3()" href="data:text/html,x4" target="_self">'
                                    '<text>k</text></a><script>x5()</script><foreignObject><p>x6</p></foreignObject>'
                                    '<set attributeName="href" to="javascript:x7()"/></svg>')
        return svg.encode()

    monkeypatch.setattr(graphviz, "pipe", tampered)
    graphviz_svg.cache_clear()
    try:
        step = trace.steps[-3]
        svg = tree_svg(step.snapshot, step, renderer="graphviz")
    finally:
        graphviz_svg.cache_clear()
    for planted in ("x1()", "x2()", "x3()", "x4", "x5()", "x6", "x7()", 'target="_self"', "<script", "foreignObject"):
        assert planted not in svg
    assert svg_problems(svg) == []
    assert 'id="node-0"' in svg and "<text" in svg


@needs_dot
def test_a_failing_dot_is_a_cgviz_error_or_the_built_in_layout(trace: Any, monkeypatch: Any) -> None:
    import graphviz

    def failing(engine: str, fmt: str, data: bytes, **kw: Any) -> bytes:
        raise graphviz.CalledProcessError(1, ["dot", "-Tsvg"], output=b"",
                                          stderr=b"Error: not well-formed (invalid token) in line 1\nmore\n")

    monkeypatch.setattr(graphviz, "pipe", failing)
    graphviz_svg.cache_clear()
    step = trace.steps[-3]
    try:
        with pytest.raises(GraphvizError) as caught:
            tree_svg(step.snapshot, step, renderer="graphviz")
        message = str(caught.value)
        assert "dot" in message and "not well-formed (invalid token)" in message and "renderer='builtin'" in message
        assert not isinstance(caught.value, __import__("subprocess").CalledProcessError)
        auto = tree_svg(step.snapshot, step, renderer="auto")
        assert 'class="cgviz-notice"' in auto and "Graphviz" in auto and 'id="node-0"' in auto
        page = to_html(trace)  # auto: Graphviz chosen, then a tree it cannot draw drawn built in
        assert "not well-formed" in page
        with pytest.raises(GraphvizError):
            to_html(trace, renderer="graphviz")
    finally:
        graphviz_svg.cache_clear()


# -- the built-in layout -------------------------------------------------------------------------
def _check_lines(lines: list[str], whole_groups: bool = True) -> None:
    """No line break but between lines; with `whole_groups` (the built-in layout), each node
    and edge group a line of its own, as the page's script reads them."""
    for line in lines:
        for c in LINE_BREAKS:
            assert c not in line, f"{c!r} in a line of the drawing: {line[:120]!r}"
        if whole_groups and line.startswith(('<g id="node-', '<g id="edge-')):
            assert line.endswith(("</g>", "</g></svg>")), f"a group cut over lines: {line[:160]!r}"


def test_the_built_in_drawing_keeps_every_group_on_its_line_and_shows_every_name(trace: Any) -> None:
    text = []
    for step, snap in trees(trace):
        svg = builtin_tree_svg(snap, step, selected=snap.nodes[0].id)
        _check_lines(svg.split("\n"))
        assert svg_problems(svg) == []  # also: well-formed XML, so no NUL, ESC or BEL
        text.append(svg_text(svg))
    text = "\n".join(text)
    for s in HOSTILE:
        assert shown(s) in text


@pytest.mark.parametrize("renderer", ["builtin", pytest.param("graphviz", marks=needs_dot)])
def test_the_pages_drawings_keep_every_group_on_its_line(trace: Any, renderer: str) -> None:
    data = page_data(trace, renderer=renderer)
    _check_lines(data["lines"], whole_groups=renderer == "builtin")
    for k, runs in enumerate(data["trees"]):
        lines = [data["lines"][j] for i in range(0, len(runs), 2) for j in range(runs[i], runs[i] + runs[i + 1])]
        assert svg_problems("\n".join(lines)) == [], f"tree {k}"
    for look in (data.get("tree") or {}).get("looks", []):
        for c in LINE_BREAKS + ("\x00", "\x07", "\x1b"):
            assert c not in look[2]
    assert svg_problems(data["timeline"]) == []


def test_the_html_export_of_the_trace_works_with_either_layout(trace: Any, tmp_path: Path) -> None:
    for renderer in ["builtin"] + (["graphviz"] if dot_available() else []):
        page = to_html(trace, tmp_path / f"{renderer}.html", renderer=renderer)
        assert page.count("<script") == 2  # the payload and the explorer, nothing from the trace
        head = page.split("</head>", 1)[0]
        assert "<x>" not in head and "&lt;x&gt; URL=&quot;javascript:" in head  # the title (meta) escaped


# -- matplotlib: names drawn as they are ----------------------------------------------------------
def _math_trace() -> Any:
    import torch

    tree = cgviz.Tree("sim")
    f, g = tree.wrap(lambda x: x + 1, name="$x^2$"), tree.wrap(lambda x: x * 2, name="$\\frac{$")
    for _ in range(3):
        g(f(torch.ones(2)))
    return tree.trace


@pytest.fixture
def no_mathtext(monkeypatch: Any) -> None:
    """Any mathtext parse fails the test."""
    import matplotlib.mathtext

    def parse(*a: Any, **k: Any) -> Any:
        raise AssertionError(f"mathtext parsed {a[1] if len(a) > 1 else a!r}")

    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", parse)


def _texts(fig: Any) -> list[Any]:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_text()]


@pytest.mark.parametrize("current", [None, 1, 4])
def test_the_timeline_draws_dollar_names_as_they_are(current: Any, no_mathtext: None) -> None:
    from cgviz.views.svg_output import figure_png, figure_svg
    from cgviz.views.timeline import timeline_figure, timeline_svg

    trace = _math_trace()
    fig = timeline_figure(trace, current)
    texts = _texts(fig)
    assert all(not t.get_parse_math() and not t.get_usetex() for t in texts)
    shown_texts = [t.get_text() for t in texts]
    assert "$x^2$" in shown_texts and "$\\frac{$" in shown_texts
    if current is not None:
        assert any(t.startswith("step ") and ("$x^2$" in t or "$\\frac{$" in t) for t in shown_texts)
    svg = figure_svg(fig)
    assert "$x^2$" in svg and "$\\frac{$" in svg
    assert figure_png(fig)[:4] == b"\x89PNG"
    assert "$x^2$" in timeline_svg(trace, current)


def test_the_timeline_of_the_hostile_trace_draws(trace: Any, no_mathtext: None) -> None:
    from cgviz.views.timeline import timeline_png, timeline_svg

    assert timeline_png(trace, len(trace.steps) - 1)[:4] == b"\x89PNG"
    svg = timeline_svg(trace, 3)
    assert svg_problems(svg) == []


def test_the_pool_draws_dollar_names_as_they_are(trace: Any, no_mathtext: None) -> None:
    from cgviz.views.pool import clear_cache, pool_figure, pool_png, pool_svg

    clear_cache()
    mtrace = _math_trace()
    for t in (mtrace, trace):
        snap = t.steps[-1].snapshot
        fig = pool_figure(snap)
        texts = _texts(fig)
        assert all(not x.get_parse_math() and not x.get_usetex() for x in texts)
        assert pool_png(snap)[:4] == b"\x89PNG"
        assert svg_problems(pool_svg(snap)) == []
    legend = [x.get_text() for x in _texts(pool_figure(mtrace.steps[-1].snapshot))]
    assert any("$x^2$" in x for x in legend) and any("$\\frac{$" in x for x in legend)
    clear_cache()


@needs_dot
def test_a_merged_trace_draws_a_tree_dot_fails_on_built_in(monkeypatch: Any) -> None:
    """Several ranks' trees side by side follow the same rule under "auto" as one tree: the
    built-in layout with the notice, not an error."""
    import graphviz
    import torch

    from cgviz.trace.ranks import merge

    def rank(r: int) -> Any:
        tree = cgviz.Tree("sim")
        f = tree.wrap(lambda x: x * 2, name="f")
        for _ in range(3):
            f(torch.ones(4))
        tree.trace.meta.update(rank=r, world_size=2)
        return tree.trace

    def failing(engine: str, fmt: str, data: bytes, **kw: Any) -> bytes:
        raise graphviz.CalledProcessError(1, ["dot", "-Tsvg"], output=b"", stderr=b"Error: syntax error in line 1\n")

    merged = merge([rank(0), rank(1)])
    monkeypatch.setattr(graphviz, "pipe", failing)
    graphviz_svg.cache_clear()
    try:
        data = page_data(merged, renderer="auto")
        drawn = "\n".join(data["lines"])
        assert "syntax error in line 1" in drawn and 'id="node-0"' in drawn
        with pytest.raises(GraphvizError):
            page_data(merged, renderer="graphviz")
    finally:
        graphviz_svg.cache_clear()
