"""The tree view: DOT and SVG (Graphviz and built-in) show every node, edge, mark and colour."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from cgviz.scenarios import run_scenario
from cgviz.trace.model import NodeView, OutputView, Snapshot, Step
from cgviz.views.tree import MARKS, STYLE, builtin_tree_svg, dot_available, node_state, render, to_dot, tree_svg
from cgviz.views.tree.card import MAX_OUTPUT_LINES

HAS_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="Graphviz `dot` is not installed")
SVG_NS = "{http://www.w3.org/2000/svg}"
SCENARIO_NAMES = ("chain", "branching", "generations", "fwd_bwd", "static_move", "dynamic_shapes", "training")


@pytest.fixture(scope="module")
def traces():
    return {name: run_scenario(name, "sim").trace for name in SCENARIO_NAMES}


def all_steps(traces, names=SCENARIO_NAMES):
    for name in names:
        for step in traces[name].steps:
            yield name, step


# -- parsing DOT ---------------------------------------------------------------------------------
_STMT = re.compile(r"^\s*(n\d+|empty)(?: -> (n\d+))? \[(.*)\]\s*$")


def parse_attrs(text: str) -> dict[str, str]:
    """key=value pairs, values "quoted" (with \\" escapes) or <HTML-like> (balanced brackets)."""
    attrs, i = {}, 0
    while i < len(text):
        while i < len(text) and text[i] == " ":
            i += 1
        if i >= len(text):
            break
        eq = text.index("=", i)
        key = text[i:eq]
        j = eq + 1
        if text[j] == '"':
            k, buf = j + 1, []
            while text[k] != '"':
                if text[k] == "\\":
                    k += 1
                buf.append(text[k])
                k += 1
            attrs[key] = "".join(buf)
            i = k + 1
        elif text[j] == "<":
            depth, k = 0, j
            while True:
                if text[k] == "<":
                    depth += 1
                elif text[k] == ">":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            attrs[key] = text[j : k + 1]
            i = k + 1
        else:
            k = text.find(" ", j)
            k = len(text) if k < 0 else k
            attrs[key] = text[j:k]
            i = k
    return attrs


def parse_dot(source: str):
    nodes, edges = {}, {}
    for line in source.splitlines():
        m = _STMT.match(line)
        if not m:
            continue
        a, b, attrs = m.group(1), m.group(2), parse_attrs(m.group(3))
        if b is None:
            assert a not in nodes, f"two statements for {a}"
            nodes[a] = attrs
        else:
            key = (int(a[1:]), int(b[1:]))
            assert key not in edges, f"two edges {key}"
            edges[key] = attrs
    return nodes, edges


def label_text(label: str) -> str:
    """The visible text of an HTML-like label (tags dropped, entities decoded, rows on lines,
    backslashes undoubled: Graphviz reads `\\N`, `\\G`, ... in a label's text as names)."""
    import html

    if label.startswith("<") and label.endswith(">"):
        label = label[1:-1]
    text = re.sub(r"</TR>", "\n", label)
    text = re.sub(r"<[^<>]*>", " ", text)
    text = "\n".join(" ".join(html.unescape(line).split()) for line in text.splitlines()).strip()
    return text.replace("\\\\", "\\")


def expected_edges(snap: Snapshot) -> set[tuple[int, int]]:
    pairs = {(n.parent, n.id) for n in snap.nodes if n.parent is not None}
    assert pairs == {(n.id, c) for n in snap.nodes for c in n.children}
    return pairs


# -- DOT -----------------------------------------------------------------------------------------
def test_dot_has_one_node_per_tree_node_and_exactly_the_tree_edges(traces):
    for name, step in all_steps(traces):
        snap = step.snapshot
        nodes, edges = parse_dot(to_dot(snap, step))
        if not snap.nodes:
            assert set(nodes) == {"empty"}
            continue
        assert set(nodes) == {f"n{n.id}" for n in snap.nodes}, (name, step.index)
        assert set(edges) == expected_edges(snap), (name, step.index)
        for n in snap.nodes:
            attrs = nodes[f"n{n.id}"]
            assert attrs["id"] == f"node-{n.id}"
            classes = attrs["class"].split()
            assert "cgviz-node" in classes and f"kind-{n.kind}" in classes
            text = label_text(attrs["label"])
            assert n.function in text.splitlines()
            assert f"node {n.id} · {n.kind}" in text
            assert f"gen {n.generation} · {n.replays} replay" in text
        for (p, c), attrs in edges.items():
            # the function that branched, as an HTML-like label: a name is text there, whatever it holds
            assert attrs["label"].startswith("<") and label_text(attrs["label"]) == snap.node(c).function
            assert attrs["id"] == f"edge-{p}-{c}"


def test_dot_is_top_down_and_valid_for_graphviz(traces):
    src = to_dot(traces["branching"].last_snapshot())
    assert "rankdir=TB" in src
    import graphviz

    assert isinstance(graphviz.Source(src).source, str)


def test_dot_colours_follow_kind_and_state(traces):
    s = STYLE
    seen = {"current": 0, "warmup": 0, "graph": 0, "active": 0, "invalidated": 0, "on-path": 0}
    for name, step in all_steps(traces):
        snap = step.snapshot
        nodes, edges = parse_dot(to_dot(snap, step))
        for n in snap.nodes:
            attrs = nodes[f"n{n.id}"]
            states = node_state(snap, n.id, step)
            assert {f"state-{w}" for w in states - {n.kind}} <= set(attrs["class"].split())
            if "current" in states:
                seen["current"] += 1
                assert attrs["color"] == s["current_border"]
                assert float(attrs["penwidth"]) == s["current_width"]
            elif "on-path" in states:
                seen["on-path"] += 1
                assert attrs["color"] == s["path_border"]
            if "active" in states:
                seen["active"] += 1
                assert attrs["fillcolor"] == s["active_fill"]
            elif "invalidated" in states:
                seen["invalidated"] += 1
                assert attrs["fillcolor"] in (s["invalid_warmup_fill"], s["invalid_graph_fill"])
                assert "dashed" in attrs["style"]
            elif n.kind == "warmup":
                seen["warmup"] += 1
                assert attrs["fillcolor"] == s["warmup_fill"]
            else:
                seen["graph"] += 1
                assert attrs["fillcolor"] == s["graph_fill"]
        on_path = {(snap.path[i], snap.path[i + 1]) for i in range(len(snap.path) - 1)}
        for key, attrs in edges.items():
            assert ("on-path" in attrs["class"].split()) == (key in on_path)
    assert all(seen.values()), seen  # every case was met by some scenario


def test_output_marks_match_output_states(traces):
    checked = 0
    for name, step in all_steps(traces):
        snap = step.snapshot
        nodes, _ = parse_dot(to_dot(snap, step))
        for n in snap.nodes:
            lines = label_text(nodes[f"n{n.id}"]["label"]).splitlines()
            out_lines = [ln for ln in lines if re.match(r"^[●○✕] \d+: ", ln)]
            assert len(out_lines) == len(n.outputs)
            for out, line in zip(n.outputs, out_lines):
                assert line.startswith(f"{MARKS[out.state]} {out.index}: "), (line, out)
                checked += 1
    assert checked > 100


def test_invalidated_outputs_get_the_invalid_mark_and_the_step_that_invalidated_them(traces):
    trace = traces["generations"]
    step = next(s for s in trace.steps if s.kind == "generation" and s.invalidated)
    snap = step.snapshot
    nodes, _ = parse_dot(to_dot(snap, step))
    for node_id, index in step.invalidated:
        text = label_text(nodes[f"n{node_id}"]["label"])
        assert f"✕ {index}: " in text
        assert "⊘ invalidated by a new generation" in text
        assert "state-invalidated-now" in nodes[f"n{node_id}"]["class"]
        assert node_state(snap, node_id, step) >= {"invalidated", "invalidated-now"}
    # and the last snapshot: everything invalid, nothing live
    last = trace.last_snapshot()
    nodes, _ = parse_dot(to_dot(last))
    for n in last.nodes:
        text = label_text(nodes[f"n{n.id}"]["label"])
        assert "●" not in text and "○" not in text
        assert text.count("✕") == len(n.outputs) == sum(o.state == "invalid" for o in n.outputs)


def test_output_line_shape_size_and_alias():
    outs = [
        OutputView(0, [256], "float32", 1024, 0x1000, "live"),
        OutputView(1, [8, 16], "bfloat16", 256, 0x2000, "dead"),
        OutputView(2, [4], "float32", 16, 0x3000, "live", alias_of="input 0"),
        OutputView(3, [], "int64", 8, 0x4000, "invalid"),
    ]
    snap = Snapshot([NodeView(0, "f", "graph", None, [], 1, 2, outs, "(float32[256])")], 0, [0], "execution", 1)
    text = label_text(parse_dot(to_dot(snap))[0]["n0"]["label"])
    assert "● 0: f32[256] 1.0 KiB" in text
    assert "○ 1: bf16[8, 16] 256 B" in text
    assert "● 2: f32[4] ↪ alias of input 0" in text
    assert "✕ 3: i64[] 8 B" in text
    assert "(f32[256])" in text
    assert "2 replays" in text and "gen 1" in text


def test_many_outputs_are_summed_up():
    outs = [OutputView(i, [2], "float32", 8, None, "live" if i % 3 else "dead") for i in range(30)]
    snap = Snapshot([NodeView(0, "f", "graph", None, [], 1, 0, outs)], 0, [0], "execution", 1)
    text = label_text(parse_dot(to_dot(snap))[0]["n0"]["label"])
    assert f"{30 - MAX_OUTPUT_LINES + 1} more: " in text
    assert text.count("●") + text.count("○") == MAX_OUTPUT_LINES - 1


def test_node_state_of_a_recording_step(traces):
    trace = traces["fwd_bwd"]
    step = trace.steps[-1]
    assert step.kind == "record"
    snap = step.snapshot
    assert node_state(snap, step.node, step) == {"graph", "current", "on-path", "active", "recording"}
    assert node_state(snap, step.node) == {"graph", "current", "on-path"}
    assert node_state(snap, 0, step) == {"warmup"}
    with pytest.raises(KeyError):
        node_state(snap, 999)


def test_selected_node_is_outlined(traces):
    snap = traces["branching"].last_snapshot()
    nodes, _ = parse_dot(to_dot(snap, selected=3))
    assert nodes["n3"].get("peripheries") == "2"
    assert nodes["n3"]["color"] == STYLE["selected_border"]
    assert "state-selected" in nodes["n3"]["class"]
    assert all("peripheries" not in a for k, a in nodes.items() if k != "n3")


def test_empty_and_single_node_snapshots():
    empty = Snapshot([], None, [], "none", 1)
    nodes, edges = parse_dot(to_dot(empty))
    assert list(nodes) == ["empty"] and not edges
    assert nodes["empty"]["label"] == "no functions have run yet"
    one = Snapshot([NodeView(0, "f", "warmup", None, [], 1, 0, [OutputView(0, [3], "float32", 12, None, "live")])],
                   0, [0], "warmup", 1)
    nodes, edges = parse_dot(to_dot(one))
    assert list(nodes) == ["n0"] and not edges
    assert nodes["n0"]["fillcolor"] == STYLE["warmup_fill"]
    assert nodes["n0"]["color"] == STYLE["current_border"]


def test_names_that_need_escaping():
    names = ['<lambda>', 'say "hi"', "a & b", "back\\slash", "B'", "\\N \\G \\E"]
    nodes = [NodeView(i, f, "graph", None if i == 0 else 0, [] if i else [1, 2, 3, 4], 1, 0, [])
             for i, f in enumerate(names)]
    nodes[0].children = list(range(1, len(names)))
    snap = Snapshot(nodes, None, [], "none", 1)
    dot_nodes, edges = parse_dot(to_dot(snap))
    for n in nodes:
        assert n.function in label_text(dot_nodes[f"n{n.id}"]["label"]).splitlines()
    assert len(edges) == len(names) - 1
    for (p, c), attrs in edges.items():
        assert label_text(attrs["label"]) == names[c]
    for svg in [builtin_tree_svg(snap)] + ([tree_svg(snap, renderer="graphviz")] if HAS_DOT else []):
        texts = svg_texts(ET.fromstring(svg))
        for f in names:
            assert f in texts


# -- SVG -----------------------------------------------------------------------------------------
def svg_texts(root) -> str:
    return "\n".join("".join(t.itertext()) for t in root.iter(f"{SVG_NS}text"))


def groups_by_id(root) -> dict[str, ET.Element]:
    return {g.get("id"): g for g in root.iter(f"{SVG_NS}g") if g.get("id")}


def check_svg_content(svg: str, snap: Snapshot) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag == f"{SVG_NS}svg"
    groups = groups_by_id(root)
    texts = svg_texts(root)
    if not snap.nodes:
        assert "no functions have run yet" in texts
        return root
    for n in snap.nodes:
        g = groups[f"node-{n.id}"]
        assert "cgviz-node" in g.get("class").split()
        assert n.function in svg_texts(g).splitlines()
    for p, c in expected_edges(snap):
        g = groups[f"edge-{p}-{c}"]
        assert "cgviz-edge" in g.get("class").split()
        assert snap.node(c).function in svg_texts(g)
    assert len([k for k in groups if k.startswith("node-")]) == len(snap.nodes)
    assert len([k for k in groups if k.startswith("edge-")]) == len(expected_edges(snap))
    return root


@needs_dot
@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_graphviz_svg_has_every_node_and_edge(traces, name):
    trace = traces[name]
    for step in trace.steps[:: max(1, len(trace.steps) // 5)] + [trace.steps[-1]]:
        svg = tree_svg(step.snapshot, step, renderer="graphviz")
        assert 'id="node-' in svg or not step.snapshot.nodes  # ids written plainly, not as &#45;
        check_svg_content(svg, step.snapshot)


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_builtin_svg_has_every_node_and_edge(traces, name):
    for step in traces[name].steps:
        svg = builtin_tree_svg(step.snapshot, step, selected=0)
        root = check_svg_content(svg, step.snapshot)
        for n in step.snapshot.nodes:
            assert f'<g id="node-{n.id}" class="cgviz-node' in svg
            assert f'data-node="{n.id}"' in svg
        assert root.get("viewBox") and float(root.get("width")) > 0 and float(root.get("height")) > 0
        assert "<script" not in svg and "@import" not in svg and "http" not in svg.replace(
            'xmlns="http://www.w3.org/2000/svg"', "")


def test_gpu_traces_render_with_both_renderers():
    from cgviz.data import gpu_trace, gpu_trace_names

    names = gpu_trace_names()
    assert names
    for name in names:
        trace = gpu_trace(name)
        for step in trace.steps:
            snap = step.snapshot
            nodes, edges = parse_dot(to_dot(snap, step))
            assert set(nodes) == ({f"n{n.id}" for n in snap.nodes} or {"empty"})
            assert set(edges) == expected_edges(snap)
            check_layout(builtin_tree_svg(snap, step), snap)
        if HAS_DOT:
            check_svg_content(tree_svg(trace.steps[-1].snapshot, trace.steps[-1], renderer="graphviz"),
                              trace.steps[-1].snapshot)


def node_boxes(root) -> dict[int, tuple[float, float, float, float]]:
    """x, y, width, height of each node's box in a built-in SVG."""
    boxes = {}
    for g in root.iter(f"{SVG_NS}g"):
        if g.get("data-node") is None:
            continue
        tx, ty = map(float, re.match(r"translate\(([-\d.]+),([-\d.]+)\)", g.get("transform")).groups())
        rect = next(r for r in g.iter(f"{SVG_NS}rect") if r.get("fill") != "none")
        boxes[int(g.get("data-node"))] = (tx + float(rect.get("x", 0)), ty + float(rect.get("y", 0)),
                                          float(rect.get("width")), float(rect.get("height")))
    return boxes


def check_layout(svg: str, snap: Snapshot, pairwise: bool = True) -> None:
    root = ET.fromstring(svg)
    boxes = node_boxes(root)
    assert set(boxes) == {n.id for n in snap.nodes}
    width, height = float(root.get("width")), float(root.get("height"))
    for x, y, w, h in boxes.values():
        assert 0 <= x and x + w <= width and 0 <= y and y + h <= height
    items = sorted(boxes.values())
    if pairwise:
        for i, (x1, y1, w1, h1) in enumerate(items):
            for x2, y2, w2, h2 in items[i + 1 :]:
                assert x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1, "boxes overlap"
    else:  # same row: sorted by x, neighbours must not overlap
        rows: dict[float, list] = {}
        for b in items:
            rows.setdefault(b[1], []).append(b)
        for row in rows.values():
            for a, b in zip(row, row[1:]):
                assert a[0] + a[2] <= b[0]
    for n in snap.nodes:
        if n.parent is not None:
            px, py, pw, ph = boxes[n.parent]
            cx, cy, cw, _ = boxes[n.id]
            assert cy > py + ph  # the child is below its parent
    # parents centred over their children
    for n in snap.nodes:
        if n.children:
            xs = [boxes[c][0] + boxes[c][2] / 2 for c in n.children]
            px, _, pw, _ = boxes[n.id]
            assert abs(px + pw / 2 - (min(xs) + max(xs)) / 2) < 0.5


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_builtin_layout_has_no_overlaps_and_children_below_parents(traces, name):
    for step in traces[name].steps:
        check_layout(builtin_tree_svg(step.snapshot, step, selected=1), step.snapshot)


def synthetic(n: int, shape: str = "random", seed: int = 0) -> Snapshot:
    rng = random.Random(seed)
    nodes = []
    for i in range(n):
        if i == 0:
            parent = None
        elif shape == "chain":
            parent = i - 1
        elif shape == "star":
            parent = 0
        elif shape == "comb":
            parent = i - 2 if i % 2 == 0 else i - 1
        else:
            parent = None if rng.random() < 0.03 else rng.randrange(max(0, i - 20), i)
        outs = [OutputView(k, [rng.choice([8, 64, 4096]), 16], "float32", 4096, 0x7F0000 + 4096 * k,
                           rng.choice(["live", "dead", "invalid"])) for k in range(rng.randint(0, 3))]
        nodes.append(NodeView(i, f"fn_{i % 7}" + "x" * rng.randint(0, 12), "warmup" if i % 5 == 0 else "graph",
                              parent, [], 1 + i // 50, rng.randint(0, 60), outs, "(float32[8, 16])"))
    for nd in nodes:
        if nd.parent is not None:
            nodes[nd.parent].children.append(nd.id)
    path, v = [], n - 1
    while v is not None:
        path.append(v)
        v = nodes[v].parent
    return Snapshot(nodes, n - 1, path[::-1], "execution", 1 + n // 50)


@pytest.mark.parametrize("shape", ["random", "chain", "star", "comb"])
def test_builtin_layout_of_synthetic_trees(shape):
    snap = synthetic(120, shape)
    check_layout(builtin_tree_svg(snap, selected=5), snap)
    nodes, edges = parse_dot(to_dot(snap))
    assert len(nodes) == 120 and set(edges) == expected_edges(snap)


@pytest.mark.parametrize("shape", ["random", "chain"])
def test_large_trees_render_completely(shape):
    """1,000 nodes, in DOT and with the built-in layout (their speed: benchmarks/render.py)."""
    snap = synthetic(1000, shape)
    step = Step(0, "execute", "replay", snap.generation, "fn", snap.current_node, snapshot=snap)
    dot = to_dot(snap, step)
    svg = builtin_tree_svg(snap, step)
    assert len(parse_dot(dot)[0]) == 1000
    check_layout(svg, snap, pairwise=False)


def test_auto_falls_back_to_builtin_with_a_notice(traces, monkeypatch):
    snap = traces["branching"].last_snapshot()
    monkeypatch.setattr(render, "dot_available", lambda: False)
    svg = tree_svg(snap)
    root = check_svg_content(svg, snap)
    assert "data-node=" in svg  # the built-in renderer
    notices = [t for t in root.iter(f"{SVG_NS}text") if t.get("class") == "cgviz-notice"]
    assert len(notices) == 1
    assert "Graphviz not found" in notices[0].text and "apt install graphviz" in notices[0].text
    with pytest.raises(RuntimeError, match="install graphviz"):
        tree_svg(snap, renderer="graphviz")
    assert "cgviz-notice" not in tree_svg(snap, renderer="builtin")


@needs_dot
def test_auto_uses_graphviz_when_dot_is_found(traces):
    snap = traces["branching"].last_snapshot()
    svg = tree_svg(snap)
    assert 'class="node cgviz-node' in svg and "data-node=" not in svg
    assert dot_available() is True


@needs_dot
def test_auto_draws_large_trees_with_the_builtin_layout_and_says_so(traces, monkeypatch):
    snap = traces["branching"].last_snapshot()
    monkeypatch.setattr(render, "AUTO_GRAPHVIZ_MAX_NODES", len(snap.nodes) - 1)
    svg = tree_svg(snap)
    check_svg_content(svg, snap)
    assert "data-node=" in svg  # the built-in renderer
    assert f"{len(snap.nodes)} nodes: built-in layout" in svg
    assert 'class="node cgviz-node' in tree_svg(snap, renderer="graphviz")  # asked for: Graphviz anyway
    monkeypatch.setattr(render, "AUTO_GRAPHVIZ_MAX_NODES", len(snap.nodes))
    assert "data-node=" not in tree_svg(snap)


def test_availability_check_is_cached(monkeypatch):
    pytest.importorskip("graphviz")
    calls = []
    monkeypatch.setattr(shutil, "which", lambda name: calls.append(name) or name)
    dot_available.cache_clear()
    try:
        assert dot_available() is True and dot_available() is True
    finally:
        dot_available.cache_clear()
    assert calls == ["dot"]


def test_unknown_renderer(traces):
    with pytest.raises(ValueError, match="renderer"):
        tree_svg(traces["chain"].last_snapshot(), renderer="ascii")


def test_empty_and_single_node_svgs():
    empty = Snapshot([], None, [], "none", 1)
    one = Snapshot([NodeView(7, "f", "graph", None, [], 2, 3, [OutputView(0, [3], "float32", 12, None, "dead")])],
                   None, [], "none", 2)
    for snap in (empty, one):
        check_svg_content(builtin_tree_svg(snap), snap)
        if HAS_DOT:
            check_svg_content(tree_svg(snap, renderer="graphviz"), snap)
    check_layout(builtin_tree_svg(one), one)


def test_importing_the_view_loads_nothing_heavy():
    code = ("import sys, cgviz.views, cgviz.views.tree; "
            "print(sorted(m for m in ('graphviz', 'torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- pictures ------------------------------------------------------------------------------------
def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return name
    return None


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@needs_dot
@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_graphviz_renders_png(traces, name, tmp_path):
    trace = traces[name]
    step = trace.steps[len(trace.steps) // 2]
    dot_file = tmp_path / f"{name}.dot"
    dot_file.write_text(to_dot(step.snapshot, step, selected=0), encoding="utf-8")
    png = tmp_path / f"{name}.png"
    proc = subprocess.run(["dot", "-Tpng", str(dot_file), "-o", str(png)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("name", ["branching", "generations"])
def test_builtin_svg_renders_png(traces, name, tmp_path):
    svg_file = tmp_path / f"{name}.svg"
    trace = traces[name]
    step = trace.steps[len(trace.steps) // 2]
    svg_file.write_text(builtin_tree_svg(step.snapshot, step), encoding="utf-8")
    png = tmp_path / f"{name}.png"
    browser = _browser()
    if browser:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={png}",
               "--window-size=1200,900", svg_file.as_uri()]
    elif shutil.which("rsvg-convert"):
        cmd = ["rsvg-convert", str(svg_file), "-o", str(png)]
    else:
        pytest.skip("no chromium or rsvg-convert to draw an SVG")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == PNG_MAGIC
