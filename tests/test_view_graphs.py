"""The views of CUDA graphs made outside the trees (`cgviz.observe_graphs`): the steps' headlines
and colours, their lane of the timeline, the list of graphs (by the code that captured them, by
pool, those of the trees) as HTML and text, and the page and the still picture that show it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from cgviz.data import graph_trace
from cgviz.scenarios import run_scenario
from cgviz.trace.model import GRAPH_STEP_KINDS, GraphView, Step, Trace
from cgviz.views import style
from cgviz.views.graph_list import graph_list_html, graph_list_lines
from cgviz.views.page_data import page_data
from cgviz.views.static_view import static_html
from cgviz.views.text import GRAPH_STEP_NOTE, GRAPHS_ONLY, KIND_WORDS, headline, trace_counts
from cgviz.views.timeline import timeline_figure
from cgviz.views.timeline_data import timeline_items

from helpers import still_drawings

pytest.importorskip("matplotlib")  # the timeline draws with it


@pytest.fixture(scope="module")
def serving() -> Trace:
    return graph_trace("serving_runner")


@pytest.fixture(scope="module")
def recapture() -> Trace:
    return graph_trace("serving_runner-recapture")


def graph_step(kind: str, graph: GraphView, generation: int = 1, **kw) -> Step:
    return Step(0, kind, f"{graph.name} {kind}", generation, function=graph.name, graph=graph.id, **kw)


def mixed_trace() -> Trace:
    """A sim tree's steps with a plain graph replayed between them; graph 3 is the tree's node 2."""
    tree = run_scenario("generations", "sim").trace
    decode = GraphView(1, "serve.py:3 in step", "torch.cuda.graph", "cuda:0", 1, 1, memory=2 << 20, batch=8,
                       replays=4, used=20, padded=32, label="decode")
    spare = GraphView(2, "serve.py:3 in step", "torch.cuda.graph", "cuda:0", 1, 1, batch=16)
    of_tree = GraphView(3, "model.py:9 in forward", "torch.compile", "cuda:0", 2, 2, node=2, replays=12)
    steps = [graph_step("capture", decode), graph_step("capture", spare)]
    for k, s in enumerate(tree.steps):
        steps.append(s)
        if k % 4 == 3:
            steps.append(graph_step("replay", decode, s.generation))
    for i, s in enumerate(steps):
        s.index = i
    return Trace(steps, meta=dict(tree.meta), graphs=[decode, spare, of_tree])


# -- words and colours ------------------------------------------------------------------------------
def test_headline_of_a_graph_step_names_its_graph_without_node_or_generation():
    g = GraphView(3, "x.py:1", "torch.cuda.graph", "cuda:0", 1, 1, batch=8, label="batch 8")
    assert headline(graph_step("replay", g, 4, repeat=300)) == "replay graph 3 (batch 8) · ×300"
    assert headline(graph_step("capture", g)) == "capture graph 3 (batch 8)"
    assert headline(graph_step("destroy", g, rank=1, device="cuda:1")) == \
        "rank 1 · cuda:1 · destroy graph 3 (batch 8)"
    assert headline(Step(0, "replay", "", 1, graph=5)) == "replay graph 5"
    assert headline(graph_step("replay", g, repeat=4, span=2)) == "replay graph 3 (batch 8) · ×4 (last 2 steps)"


def test_the_shipped_traces_headlines(serving):
    for s in serving.steps:
        text = s.headline()
        assert text.startswith(f"{s.kind} {serving.graph(s.graph).name}")
        assert "→ node" not in text and "generation" not in text
        assert ("×" in text) == (s.repeat > 1)


def test_kind_words_colours_and_labels_for_graph_steps():
    words = dict(KIND_WORDS)
    assert words["capture"] == "graph captures" and words["replay"] == "graph replays"
    assert words["destroy"] == "graphs destroyed"
    for kind in GRAPH_STEP_KINDS:
        assert kind in style.STEP_LABELS and kind in style.STEP_COLORS
    assert len(set(style.STEP_COLORS.values())) == len(style.STEP_COLORS)


def _luminance(hex_color: str) -> float:
    rgb = [int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("kind", GRAPH_STEP_KINDS)
def test_graph_kind_colours_read_as_text_on_light_and_dark_pages(kind):
    color = style.STEP_COLORS[kind]
    assert _contrast(color, "#ffffff") >= 3 and _contrast(color, "#1b1f24") >= 3  # the page's panels


def test_replay_is_green_like_execute_but_another_colour():
    def hue(c: str) -> float:
        import colorsys

        return colorsys.rgb_to_hsv(*(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)))[0] * 360

    replay, execute = style.STEP_COLORS["replay"], style.STEP_COLORS["execute"]
    assert replay != execute and 80 <= hue(replay) <= 170 and abs(hue(replay) - hue(execute)) >= 15


def test_trace_counts_say_the_graph_steps(serving):
    counts = serving.counts()
    text = trace_counts(serving)
    assert f"{counts['capture']} graph captures" in text and f"{counts['replay']} graph replays" in text
    assert "recorded" not in text  # no tree recorded anything: not said
    beside_a_tree = Trace([Step(0, "record", "", 1, "f", 0), Step(1, "capture", "", 1, graph=2)])
    assert trace_counts(beside_a_tree) == "2 steps · 1 graph recorded · 0 replays · 1 graph capture"


# -- the timeline -------------------------------------------------------------------------------------
def test_items_carry_the_graph_and_the_lane():
    trace = mixed_trace()
    items = timeline_items(trace)
    for it, s in zip(items, trace.steps):
        assert it["graph"] == s.graph
        assert it["lane"] == ("graphs" if s.kind in GRAPH_STEP_KINDS else "tree")


def _tick_ys(fig) -> list[float]:
    ticks = next(a for a in fig.findobj() if getattr(a, "get_gid", lambda: None)() == "timeline-steps")
    return [float(p.vertices[:, 1].min()) for p in ticks.get_paths()]


def _lane_names(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_yticklabels()]


def test_a_trace_of_trees_and_graphs_gets_a_graphs_lane_under_the_tree():
    trace = mixed_trace()
    fig = timeline_figure(trace)
    assert _lane_names(fig) == ["tree", "CUDA graphs"]
    ys = _tick_ys(fig)
    tree_y = {y for y, s in zip(ys, trace.steps) if s.kind not in GRAPH_STEP_KINDS}
    graph_y = {y for y, s in zip(ys, trace.steps) if s.kind in GRAPH_STEP_KINDS}
    assert len(tree_y) == 1 and len(graph_y) == 1 and graph_y.pop() < tree_y.pop()


def test_no_generation_line_or_label_in_the_graphs_lane():
    trace = mixed_trace()
    assert len({s.generation for s in trace.steps}) > 1  # the tree's generations change
    fig = timeline_figure(trace)
    ys = _tick_ys(fig)
    graph_base = min(ys)
    lines = next(a for a in fig.findobj() if getattr(a, "get_gid", lambda: None)() == "timeline-generations")
    assert all(min(seg[:, 1]) > graph_base + 1 for seg in lines.get_segments())
    gen_labels = [t for t in fig.axes[0].texts if t.get_text().startswith("gen ")]
    assert gen_labels and all(t.get_position()[1] > graph_base + 1 for t in gen_labels)


def test_a_trace_of_graph_steps_only_is_one_lane_without_generations(serving):
    steps = [Step(i, s.kind, s.reason, 1 + i // 50, s.function, graph=s.graph, repeat=s.repeat, span=s.span)
             for i, s in enumerate(serving.steps)]  # even where the trees' generation moved meanwhile
    fig = timeline_figure(Trace(steps, graphs=serving.graphs), current=10)
    assert _lane_names(fig) == []
    assert len(set(_tick_ys(fig))) == 1
    assert not [a for a in fig.findobj() if getattr(a, "get_gid", lambda: None)() == "timeline-generations"]
    assert not [t for t in fig.axes[0].texts if t.get_text().startswith("gen ")]


def test_a_trace_without_graph_steps_keeps_its_lanes():
    trace = run_scenario("branching", "sim").trace
    assert {it["lane"] for it in timeline_items(trace)} == {"tree"}
    assert _lane_names(timeline_figure(trace)) == []


# -- the list of graphs -------------------------------------------------------------------------------
class _Items(HTMLParser):
    """The text of each element with a data-graphs attribute, its classes and graph ids."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict] = []
        self._open: list[dict] = []
        self.tags: set[str] = set()
        self.styles: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        if a.get("style"):
            self.styles.append(a["style"])
        if "data-graphs" in a:
            ids = [int(x) for x in a["data-graphs"].split()]
            item = {"ids": ids, "classes": a.get("class", "").split(), "text": ""}
            self.items.append(item)
            self._open.append(item)
        elif self._open:
            self._open.append(None)

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for item in self._open:
            if item is not None:
                item["text"] += data


def parsed(fragment: str) -> _Items:
    p = _Items()
    p.feed(fragment)
    return p


def _sizes(trace: Trace) -> dict[int, list[GraphView]]:
    out: dict[int, list[GraphView]] = {}
    for g in trace.graphs:
        out.setdefault(g.batch, []).append(g)
    return out


def _percent(text: str) -> int:
    return int(re.search(r"(\d+)% padding", text).group(1))


@pytest.mark.parametrize("name", ["serving_runner", "serving_runner-recapture"])
def test_list_by_code_line_has_each_size_with_its_replays_and_padding(name):
    trace = graph_trace(name)
    items = parsed(graph_list_html(trace)).items
    rows = {item["text"].split(" ", 2)[1]: item for item in items if item["text"].startswith("batch ")}
    sizes = _sizes(trace)
    assert sorted(int(k) for k in rows) == sorted(sizes)
    for batch, graphs in sizes.items():
        row = rows[str(batch)]
        assert sorted(row["ids"]) == sorted(g.id for g in graphs)
        replays = sum(g.replays for g in graphs)
        if not replays:
            assert "never replayed" in row["text"] and "cg-gl-never" in row["classes"]
            continue
        assert f"{replays} replay" in row["text"] and "cg-gl-never" not in row["classes"]
        padded, used = sum(g.padded for g in graphs), sum(g.used for g in graphs)
        if padded:
            share = 100 * (padded - used) / padded
            if share:
                assert abs(_percent(row["text"]) - share) <= 0.5
            else:
                assert "no padding" in row["text"]


def test_the_serving_runner_list_in_numbers(serving):
    fragment = graph_list_html(serving)
    never = [g for g in serving.graphs if not g.replays]
    assert [g.batch for g in never] == [64]
    padded = sum(g.padded for g in serving.graphs)
    share = 100 * (padded - sum(g.used for g in serving.graphs)) / padded
    family = re.search(r"(\d+) graphs for (\d+) batch sizes · (\d+) replays · (\d+)% padding", fragment)
    assert family and int(family.group(1)) == len(serving.graphs) == int(family.group(2))
    assert int(family.group(3)) == sum(g.replays for g in serving.graphs) > 0
    assert abs(int(family.group(4)) - share) <= 0.5
    assert f"shared by {len(serving.graphs)} graphs" in fragment
    chips = [i for i in parsed(fragment).items if "cg-gl-chip" in i["classes"]]
    assert [c["ids"] for c in chips] == [[g.id] for g in serving.graphs]
    assert [c["text"] for c in chips] == [g.name for g in serving.graphs]


def test_recaptured_sizes_count_their_graphs(recapture):
    sizes = _sizes(recapture)
    lines = graph_list_lines(recapture)
    assert len(recapture.graphs) > len(sizes)  # sizes captured again and again
    for batch, graphs in sizes.items():
        line = next(x for x in lines if x.strip().startswith(f"batch {batch}:"))
        n = len(graphs)
        assert f"{n} graph{'s' if n > 1 else ''}" in line
        never = sum(1 for g in graphs if not g.replays)
        if never and never < n:
            assert f"{never} of {n} never replayed" in line


def test_list_as_text_lines(serving):
    lines = graph_list_lines(serving)
    replays = sum(g.replays for g in serving.graphs)
    assert lines[0] == f"CUDA graphs: {len(serving.graphs)} graphs · {replays} replays · 1 memory pool"
    assert any("batch 64: 1 graph · never replayed" in x for x in lines)
    assert any(f"shared by {len(serving.graphs)} graphs" in x for x in lines)
    assert all(len(x) <= 80 for x in lines)
    assert graph_list_lines(run_scenario("branching", "sim").trace) == []


def test_graphs_of_a_tree_are_listed_as_their_node_and_pools_apart():
    trace = mixed_trace()
    items = parsed(graph_list_html(trace)).items
    node = next(i for i in items if i["ids"] == [3])
    assert "node 2 of the tree" in node["text"] and "12 replays" in node["text"]
    lines = graph_list_lines(trace)
    assert any("graph 3: node 2 of the tree" in x for x in lines)
    assert "2 graphs · 4 replays · 1 memory pool · 1 graph of the trees" in lines[0]
    # graph 3 is shown as its node: in no family or pool
    assert sum(1 for i in items if 3 in i["ids"]) == 1
    spare = next(i for i in items if i["text"].startswith("batch 16"))
    assert "never replayed" in spare["text"]


def test_current_graph_is_marked():
    trace = mixed_trace()
    marked = [i for i in parsed(graph_list_html(trace, current=1)).items if "cg-gl-cur" in i["classes"]]
    assert marked and all(i["ids"] == [1] for i in marked)
    assert "cg-gl-cur" not in graph_list_html(trace)


def test_list_is_escaped_with_no_script_and_only_the_palettes_colours():
    g = GraphView(1, "<script>alert(1)</script> & x.py:1", "torch.cuda.graph", "cuda:0", 1, 1,
                  label="<b>big</b>", replays=2)
    trace = Trace([graph_step("capture", g)], graphs=[g])
    for inline in (False, True):
        fragment = graph_list_html(trace, inline=inline)
        p = parsed(fragment)
        assert "<script" not in fragment and "<b>big</b>" not in fragment
        assert "&lt;script&gt;" in fragment and "&amp; x.py:1" in fragment
        assert p.tags <= {"div", "span", "h3", "ul", "li", "b"}
        palette = {c.lower() for c in re.findall(r"#[0-9a-fA-F]{3,6}\b", repr(vars(style)))}
        for s in p.styles:
            assert {c.lower() for c in re.findall(r"#[0-9a-fA-F]{3,6}\b", s)} <= palette
            assert "rgb" not in s
        assert bool(p.styles) == inline


def test_no_graphs_no_list():
    trace = run_scenario("branching", "sim").trace
    assert graph_list_html(trace) == ""


# -- the page and the still picture -------------------------------------------------------------------
def test_page_of_graphs_only_says_there_is_no_tree_and_carries_the_list(serving):
    data = page_data(serving, renderer="builtin")
    assert data["empty"] == GRAPHS_ONLY and GRAPHS_ONLY in data["notices"]
    assert data["graphs"] == graph_list_html(serving) and "cg-gl" in data["graphs"]
    assert [r[5] for r in data["rows"]] == [s.graph for s in serving.steps]
    assert all(rec[0] == -1 for rec in data["steps"])
    assert set(GRAPH_STEP_KINDS) <= set(data["colors"])


def test_page_of_trees_and_graphs_keeps_its_trees():
    trace = mixed_trace()
    data = page_data(trace, renderer="builtin")
    assert data["empty"] == "" and "cg-gl" in data["graphs"] and data["graph_step"] == GRAPH_STEP_NOTE
    for row, s in zip(data["rows"], trace.steps):
        assert (row[5] if len(row) > 5 else None) == s.graph


def test_page_without_graphs_has_no_graph_section():
    trace = run_scenario("branching", "sim").trace
    data = page_data(trace, renderer="builtin")
    assert data["graphs"] == "" and all(len(r) == 5 for r in data["rows"])


def test_exported_page_holds_the_list(serving):
    from cgviz.views.html import render_page

    page = render_page(page_data(serving, renderer="builtin"), compress=False)
    assert "cg-graphs-panel" in page and "cg-gl-never" in page and 'data-graphs=\\"1\\"' in page


def test_still_picture_shows_the_list_with_the_steps_graph(serving):
    i = next(k for k, s in enumerate(serving.steps) if s.kind == "replay")
    still = static_html(serving, i)
    assert "<script" not in still and GRAPHS_ONLY.split(":")[0].replace("'", "&#x27;") in still
    marked = [x for x in parsed(still).items if "cg-gl-cur" in x["classes"]]
    assert marked and all(serving.steps[i].graph in x["ids"] for x in marked)


def test_still_picture_of_a_graph_step_among_tree_steps():
    trace = mixed_trace()
    i = next(k for k, s in enumerate(trace.steps) if s.kind == "replay")
    still = static_html(trace, i)
    assert GRAPH_STEP_NOTE.split(":")[0].replace("'", "&#x27;") in still and "cg-gl" in still
    tree_step = next(k for k, s in enumerate(trace.steps) if s.snapshot is not None)
    assert "<svg" in still_drawings(static_html(trace, tree_step))[0]


def test_still_picture_without_graphs_has_no_graph_section():
    trace = run_scenario("branching", "sim").trace
    assert "cg-gl" not in static_html(trace, 3)
