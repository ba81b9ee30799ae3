"""The pool view and the shared colours: what is drawn matches the snapshot, block by block."""

from __future__ import annotations

import copy
import html
import re
import threading

import pytest

from cgviz.views.text import format_bytes
from cgviz.trace.model import STEP_KINDS, Block, NodeView, OutputView, Segment, Snapshot, Trace
from cgviz.views.style import (
    FREE_COLOR,
    INPUT_HATCH,
    NODE_PALETTE,
    STEP_COLORS,
    UNOWNED_COLOR,
    UNOWNED_HATCH,
    block_category,
    node_color,
    text_color_on,
)
from cgviz.views.pool import (
    MIN_BLOCK_FRACTION,
    clear_cache,
    pool_blocks,
    pool_figure,
    pool_png,
    pool_svg,
    pool_totals,
)
from cgviz.views.svg_output import figure_png, figure_svg
from helpers import GPU_TRACES, texts

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.text import Text  # noqa: E402

BASE = 0x7F0000000000


# --- helpers -----------------------------------------------------------------------------


def snapshots_of(trace: Trace) -> list[Snapshot]:
    return [s.snapshot for s in trace.steps if s.snapshot is not None]


def true_live(snapshot: Snapshot) -> int:
    """Bytes of allocated blocks owned by an output the snapshot lists as live (independently)."""
    total = 0
    for seg in snapshot.segments:
        for b in seg.blocks:
            if not (b.allocated and b.node is not None and b.output is not None):
                continue
            try:
                states = {o.index: o.state for o in snapshot.node(b.node).outputs}
            except KeyError:
                total += b.size
                continue
            if states.get(b.output, "live") == "live":
                total += b.size
    return total


def drawn_rectangles(fig) -> dict[int, dict]:
    """address -> {x0, x1, y, rgba, hatch} of every block rectangle in the figure's collections."""
    ax = fig.axes[0]
    out = {}
    for coll in ax.collections:
        gid = coll.get_gid() or ""
        if not gid.startswith("pool-blocks-"):
            continue
        urls = coll.get_urls()
        faces = coll.get_facecolor()
        for path, url, face in zip(coll.get_paths(), urls, faces):
            v = path.vertices
            address = int(url.removeprefix("#block-"), 16)
            assert address not in out, "a block is drawn twice"
            out[address] = {
                "x0": float(v[:, 0].min()),
                "x1": float(v[:, 0].max()),
                "y": float(v[:, 1].min() + v[:, 1].max()) / 2,
                "rgba": tuple(float(c) for c in face),
                "hatch": "",
                "stripes": 0,
            }
    # hatching: a LineCollection of stripes per hatched category, each stripe inside its block
    for coll in ax.collections:
        gid = coll.get_gid() or ""
        if not gid.startswith("pool-hatch-"):
            continue
        hatch = INPUT_HATCH if gid == "pool-hatch-input" else UNOWNED_HATCH
        rows: dict[int, list[int]] = {}
        for a, r in out.items():
            rows.setdefault(round(r["y"]), []).append(a)
        for seg in coll.get_segments():
            (xa, ya), (xb, yb) = seg
            inside = [a for a in rows.get(round((ya + yb) / 2), [])
                      if out[a]["x0"] - 1e-9 <= min(xa, xb) and max(xa, xb) <= out[a]["x1"] + 1e-9]
            assert len(inside) == 1, "a stripe outside any block"
            out[inside[0]]["hatch"] = hatch
            out[inside[0]]["stripes"] += 1
    return out


def legend_texts(fig) -> list[str]:
    """The legend's entries, top to bottom."""
    entries = [t for t in fig.findobj(Text) if (t.get_gid() or "").startswith("pool-legend-text-")]
    return [t.get_text() for t in sorted(entries, key=lambda t: -t.get_position()[1])]


def legend_patch_colors(fig) -> list[tuple]:
    """The fill colours of the legend's patches (RGB), top to bottom."""
    coll = next(a for a in fig.get_children() if getattr(a, "get_gid", lambda: None)() == "pool-legend-patches")
    order = sorted(range(len(coll.get_paths())), key=lambda i: -coll.get_paths()[i].vertices[:, 1].max())
    return [tuple(round(float(c), 3) for c in coll.get_facecolor()[i][:3]) for i in order]


def synthetic_pool(nseg: int = 100, nblocks: int = 2000, nodes: int = 30) -> Snapshot:
    """nseg segments (every fifth large), each cut into nblocks/nseg blocks of every category."""
    per = nblocks // nseg
    segments, views = [], {}
    address = BASE
    for si in range(nseg):
        size = (20 << 20) if si % 5 == 4 else (2 << 20)
        blocks, cursor = [], address
        for bi in range(per):
            bsize = address + size - cursor if bi == per - 1 else 512 * (1 + (si * 7 + bi * 13) % 64)
            which = (si + bi) % 5
            node, out = (si * per + bi) % nodes, bi % 3
            if bi == per - 1 or which == 0:
                b = Block(cursor, bsize, False)
            elif which in (1, 2):
                b = Block(cursor, bsize, True, bsize, f"node {node} output {out}", node, out)
                views.setdefault(node, set()).add(out)
            elif which == 3:
                b = Block(cursor, bsize, True, bsize, f"node {node} input 0 buffer", node, None)
                views.setdefault(node, set())
            else:
                b = Block(cursor, bsize, True, bsize, "unowned (intermediate or stale)")
            blocks.append(b)
            cursor += bsize
        segments.append(Segment(address, size, "large" if size > (2 << 20) else "small", blocks))
        address += size
    nodes_ = [
        NodeView(n, f"fn{n}", "graph", None, [], 1, 0,
                 [OutputView(o, [4], "float32", 16, None, "live" if o != 2 else "dead") for o in range(3)])
        for n in sorted(views)
    ]
    return Snapshot(nodes_, None, [], "execution", 1, segments)


# --- colours ---------------------------------------------------------------------------


def test_node_colors_are_stable_distinct_and_not_grey():
    assert node_color(0) == NODE_PALETTE[0] == "#1f77b4"
    assert [node_color(i) for i in range(40)] == [node_color(i) for i in range(40)]
    assert len({node_color(i) for i in range(len(NODE_PALETTE))}) == len(NODE_PALETTE) == 20
    assert node_color(len(NODE_PALETTE) + 3) == node_color(3)
    for c in NODE_PALETTE:
        assert re.fullmatch(r"#[0-9a-f]{6}", c)
        r, g, b = (int(c[i : i + 2], 16) for i in (1, 3, 5))
        assert max(r, g, b) - min(r, g, b) > 30, f"{c} is a grey: greys are for free/unowned blocks"
    assert FREE_COLOR not in NODE_PALETTE and UNOWNED_COLOR not in NODE_PALETTE
    assert node_color(None) == UNOWNED_COLOR


def test_step_colors_cover_every_kind_and_differ():
    assert set(STEP_COLORS) == set(STEP_KINDS)
    assert len(set(STEP_COLORS.values())) == len(STEP_KINDS)
    assert text_color_on("#000000") == "#ffffff" and text_color_on("#ffffff") != "#ffffff"


def test_block_categories():
    assert block_category(Block(0, 512, False)) == "free"
    assert block_category(Block(0, 512, False, 0, "node 2 output 0", 2, 0)) == "free"  # free wins
    assert block_category(Block(0, 512, True, 512, "node 2 output 0", 2, 0)) == "output"
    assert block_category(Block(0, 512, True, 512, "node 2 input 1 buffer", 2, None)) == "input"
    assert block_category(Block(0, 512, True, 512, "unowned (intermediate or stale)")) == "unowned"


# --- what is drawn ------------------------------------------------------------------------


def check_blocks_match(snapshot: Snapshot) -> list[dict]:
    drawn = pool_blocks(snapshot)
    expected = [
        (row, b)
        for row, seg in enumerate(sorted(snapshot.segments, key=lambda s: s.address))
        for b in sorted(seg.blocks, key=lambda b: b.address)
    ]
    assert len(drawn) == len(expected)
    for d, (row, b) in zip(drawn, expected):
        assert (d["segment"], d["address"], d["size"]) == (row, b.address, b.size)
        if not b.allocated:
            assert (d["category"], d["color"], d["hatch"]) == ("free", FREE_COLOR, "")
        elif b.node is None:
            assert (d["category"], d["color"], d["hatch"]) == ("unowned", UNOWNED_COLOR, UNOWNED_HATCH)
        else:
            assert d["color"] == node_color(b.node)
            assert d["node"] == b.node
            if b.output is None:
                assert (d["category"], d["hatch"]) == ("input", INPUT_HATCH)
            else:
                assert (d["category"], d["hatch"], d["output"]) == ("output", "", b.output)
    # within each bar: in order, inside [0, 1], never narrower than the floor, to scale when big
    by_row: dict[int, list[dict]] = {}
    for d in drawn:
        by_row.setdefault(d["segment"], []).append(d)
    for row, ds in by_row.items():
        floor = min(MIN_BLOCK_FRACTION, 0.5 / len(ds)) - 1e-12
        for a, b in zip(ds, ds[1:]):
            assert a["x"] + a["width"] <= b["x"] + 1e-9
        assert ds[0]["x"] >= 0 and ds[-1]["x"] + ds[-1]["width"] <= 1 + 1e-9
        assert all(d["width"] >= floor for d in ds)
        big = [d for d in ds if not d["widened"]]
        if len(big) >= 2:  # blocks drawn to scale keep their proportions
            a, b = big[0], big[-1]
            assert a["width"] / b["width"] == pytest.approx(a["size"] / b["size"], rel=1e-6)
    return drawn


@pytest.mark.parametrize("name", ["branching", "generations", "training", "fwd_bwd"])
def test_pool_blocks_match_every_snapshot_of_a_scenario(scenario_traces, name):
    for snapshot in snapshots_of(scenario_traces[name]):
        check_blocks_match(snapshot)


def test_pool_blocks_match_gpu_traces():
    seen = set()
    for path in GPU_TRACES:
        for snapshot in snapshots_of(Trace.load(path)):
            seen |= {d["category"] for d in check_blocks_match(snapshot)}
    assert {"free", "output"} <= seen
    # no block the tree cannot name: cuBLAS workspaces are cleared around warmups and captures,
    # and every intermediate is freed by the end of a step (unowned blocks: synthetic tests below)
    assert "unowned" not in seen


def test_branching_sibling_reuse_draws_both_owners(scenario_traces):
    # after recording B' (node 5) under A (node 2): B' sits where B used to, A's output is live
    trace = scenario_traces["branching"]
    step = next(s for s in trace.steps if s.kind == "record" and s.function == "B'")
    drawn = pool_blocks(step.snapshot)
    owned = {d["node"]: d for d in drawn if d["category"] == "output"}
    assert set(owned) == {2, step.node}
    assert owned[step.node]["color"] == node_color(step.node) != owned[2]["color"]


def check_figure(snapshot: Snapshot, **kw):
    fig = pool_figure(snapshot, **kw)
    blocks = pool_blocks(snapshot)
    assert fig.cgviz_blocks == blocks
    rects = drawn_rectangles(fig)
    assert len(rects) == len(blocks)
    for d in blocks:
        r = rects[d["address"]]
        assert r["x0"] == pytest.approx(d["x"]) and r["x1"] == pytest.approx(d["x"] + d["width"])
        assert r["y"] == pytest.approx(d["segment"])
        assert r["rgba"][:3] == pytest.approx(to_rgba(d["color"])[:3])
        assert r["hatch"] == d["hatch"]
    return fig, rects


def test_figure_draws_exactly_pool_blocks_with_totals_in_title(scenario_traces):
    for name in ("branching", "fwd_bwd", "training"):
        for snapshot in snapshots_of(scenario_traces[name]):
            fig, _ = check_figure(snapshot)
            title = fig._suptitle.get_text()
            assert f"{format_bytes(snapshot.reserved_bytes)} reserved" in title
            assert f"{format_bytes(snapshot.allocated_bytes)} allocated" in title
            assert f"{format_bytes(true_live(snapshot))} in live outputs" in title
            t = pool_totals(snapshot)
            assert (t["reserved"], t["allocated"], t["live"]) == (
                snapshot.reserved_bytes, snapshot.allocated_bytes, true_live(snapshot))


def test_figure_labels_segments_and_legend_names_owning_nodes(scenario_traces):
    trace = scenario_traces["fwd_bwd"]
    snapshot = trace.steps[-1].snapshot
    fig, _ = check_figure(snapshot)
    words = "\n".join(texts(fig))
    for seg in snapshot.segments:
        assert f"{seg.address:#x} {seg.kind}" in words
        assert format_bytes(seg.size) in words
    owners = {b.node for seg in snapshot.segments for b in seg.blocks if b.allocated and b.node is not None}
    legend = legend_texts(fig)
    for node in owners:
        assert f"node {node} · {snapshot.node(node).function}" in legend
    assert "free" in legend
    # each node's entry has a patch of the node's colour, in the same order
    colors = legend_patch_colors(fig)
    for k, node in enumerate(sorted(owners)):
        assert legend[k].startswith(f"node {node} ")
        assert colors[k] == tuple(round(c, 3) for c in to_rgba(node_color(node))[:3])
    # tiny blocks were widened: the footnote says so
    assert any("drawn 3% wide" in t for t in texts(fig))


def test_highlight_node_outlines_its_blocks_and_fades_the_others(scenario_traces):
    snapshot = scenario_traces["fwd_bwd"].steps[-1].snapshot
    owners = sorted({b.node for s in snapshot.segments for b in s.blocks if b.allocated and b.node is not None})
    target = owners[0]
    fig, rects = check_figure(snapshot, highlight_node=target)
    for d in pool_blocks(snapshot):
        alpha = rects[d["address"]]["rgba"][3]
        if d["category"] == "free":
            assert alpha == 1
        elif d["node"] == target:
            assert alpha == 1
        else:
            assert alpha < 0.5
    node_of = {d["address"]: d["node"] for d in pool_blocks(snapshot)}
    coll = next(c for c in fig.axes[0].collections if c.get_gid() == "pool-blocks-output")
    for url, width in zip(coll.get_urls(), coll.get_linewidths()):
        assert (width > 1) == (node_of[int(url.removeprefix("#block-"), 16)] == target)
    legend = legend_texts(fig)
    assert any(t.startswith(f"node {target} ") and t.endswith("◀") for t in legend)


def test_names_inside_blocks_that_fit():
    snapshot = Snapshot([], None, [], "execution", 1, [Segment(BASE, 2 << 20, "small", [
        Block(BASE, 1 << 20, True, 1 << 20, "node 3 output 1", 3, 1),
        Block(BASE + (1 << 20), 1 << 20, False),
    ])])
    fig, _ = check_figure(snapshot)
    words = texts(fig)
    assert "node 3 · out 1 · 1.0 MiB" in words and "free 1.0 MiB" in words
    written = [w for _, _, w in svg_lines(pool_svg(snapshot))]
    assert "node 3 · out 1 · 1.0 MiB" in written and "free 1.0 MiB" in written
    assert not any("widened" in w or "drawn 3% wide" in w for w in words)  # nothing was widened


def test_input_buffers_and_unowned_blocks():
    snapshot = synthetic_pool(4, 40, nodes=5)
    drawn = check_blocks_match(snapshot)
    assert {d["category"] for d in drawn} == {"free", "output", "input", "unowned"}
    fig, rects = check_figure(snapshot)
    assert {r["hatch"] for r in rects.values()} == {"", INPUT_HATCH, UNOWNED_HATCH}
    assert all(r["stripes"] >= 2 for r in rects.values() if r["hatch"])
    legend = legend_texts(fig)
    assert any("input buffer" in t for t in legend) and any("intermediate or stale" in t for t in legend)
    # every line of every text, labels on stripes (in a box) included, is in the SVG
    lines = [line for t in texts(fig) for line in t.split("\n")]
    assert sorted(html.unescape(w) for _, _, w in svg_lines(figure_svg(fig))) == sorted(lines)


def test_empty_pool_and_missing_snapshot():
    empty = Snapshot([], None, [], "none", 1, [])
    assert pool_blocks(empty) == [] and pool_blocks(None) == []
    fig = pool_figure(empty)
    assert any("pool is empty" in t for t in texts(fig))
    assert "0 B reserved" in fig._suptitle.get_text()
    assert any("no pool snapshot" in t for t in texts(pool_figure(None)))
    assert pool_png(empty).startswith(b"\x89PNG")
    assert "pool is empty" in pool_svg(empty)


# --- output -------------------------------------------------------------------------------


def test_svg_has_block_ids_with_tooltips_and_is_deterministic(scenario_traces):
    snapshot = scenario_traces["fwd_bwd"].steps[-1].snapshot
    svg = pool_svg(snapshot)
    assert svg == pool_svg(snapshot)
    for seg in snapshot.segments:
        for b in seg.blocks:
            assert f'<g id="block-{b.address:x}"><title>' in svg
    owned = next(b for s in snapshot.segments for b in s.blocks if b.node is not None and b.allocated)
    assert f"{owned.owner} · {format_bytes(owned.size)} at {owned.address:#x}" in svg
    assert "<dc:date>" not in svg and "xlink:href=\"#block-" not in svg


_SVG_TEXT = re.compile(
    r'<text\b[^>]*?(?:x="([-0-9.]+)" y="([-0-9.]+)"|translate\(([-0-9.]+) ([-0-9.]+)\))[^>]*>([^<]*)</text>'
)


def svg_lines(svg: str) -> list[tuple[float, float, str]]:
    """(x, y, words) of every line of text in an SVG (as matplotlib or the pool view write them)."""
    return [(float(m[0] or m[2]), float(m[1] or m[3]), m[4]) for m in _SVG_TEXT.findall(svg)]


@pytest.mark.parametrize("ha", ["left", "center", "right"])
@pytest.mark.parametrize("words,spacing,family", [
    ("node 3 · input 1 buffer", 1.0, "sans-serif"),
    ("n3\no1", 1.0, "sans-serif"),
    ("0x7f00 small\n2.0 MiB, 1.0 KiB used", 1.3, "monospace"),
])
def test_labels_written_into_the_svg_sit_where_matplotlib_puts_them(ha, words, spacing, family):
    from matplotlib.figure import Figure

    from cgviz.views.svg_output import svg_artists

    _, _, Label = svg_artists()
    drawn = {}
    for cls in (Label, Text):
        fig = Figure(figsize=(3, 2))
        fig.add_artist(cls(0.4, 0.5, words, ha=ha, va="center", fontsize=7.5, linespacing=spacing, family=family))
        drawn[cls] = svg_lines(figure_svg(fig))
    ours, theirs = drawn[Label], drawn[Text]
    assert [w for _, _, w in ours] == [w for _, _, w in theirs] == words.split("\n")
    for (x, y, _), (x_ref, y_ref, _) in zip(ours, theirs):
        assert y == pytest.approx(y_ref, abs=0.01)  # the same baselines
        if len(ours) == 1:  # matplotlib anchors one line as we do; several it places from their widths
            assert x == pytest.approx(x_ref, abs=0.05)


def test_png_is_a_png(scenario_traces):
    png = pool_png(scenario_traces["branching"].steps[4].snapshot)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert png == pool_png(scenario_traces["branching"].steps[4].snapshot)


def test_large_pool_is_drawn_with_few_artists_and_quickly():
    snapshot = synthetic_pool(100, 2000)
    drawn = check_blocks_match(snapshot)
    assert len(drawn) == 2000
    fig, rects = check_figure(snapshot)
    assert len(rects) == 2000
    # segments, one collection per category, one of stripes per hatched category
    assert len(fig.axes[0].collections) <= 7
    assert len(texts(fig)) < 250
    png = figure_png(pool_figure(snapshot))
    svg = figure_svg(pool_figure(snapshot))
    assert png.startswith(b"\x89PNG") and svg.count('<g id="block-') == 2000
    # drawn again only when something shown changed
    assert pool_svg(snapshot) is pool_svg(snapshot)


def test_cache_follows_content(scenario_traces):
    snapshot = copy.deepcopy(scenario_traces["fwd_bwd"].steps[-1].snapshot)
    before = pool_svg(snapshot)
    assert pool_svg(copy.deepcopy(snapshot)) == before
    block = next(b for s in snapshot.segments for b in s.blocks if b.node is not None and b.allocated)
    block.allocated = False  # the same objects, changed: drawn again
    after = pool_svg(snapshot)
    assert after != before and f'<g id="block-{block.address:x}"><title>free ·' in after
    assert pool_png(snapshot) != pool_png(snapshot, highlight_node=2)


def test_a_pool_drawn_before_with_other_live_outputs_is_reused_with_its_own_totals(scenario_traces, monkeypatch):
    import cgviz.views.pool as pool_mod

    before = copy.deepcopy(scenario_traces["fwd_bwd"].steps[-1].snapshot)
    after = copy.deepcopy(before)  # the same pool, one output died (a replay loop moves on)
    owned = next(b for s in after.segments for b in s.blocks if b.allocated and b.output is not None
                 and after.node(b.node).outputs[b.output].state == "live")
    after.node(owned.node).outputs[owned.output].state = "dead"
    assert pool_totals(after)["live"] == pool_totals(before)["live"] - owned.size
    clear_cache()
    pool_svg(before)
    drawn = []
    monkeypatch.setattr(pool_mod, "pool_figure", lambda *a, **k: drawn.append(1) or pool_figure(*a, **k))
    reused = pool_svg(after)
    assert drawn == []  # not drawn again
    assert f"{format_bytes(true_live(after))} in live outputs" in reused
    assert f"{format_bytes(true_live(before))} in live outputs" not in reused
    clear_cache()
    assert reused == pool_svg(after) and drawn == [1]  # the same bytes as drawn afresh
    assert pool_png(after) != pool_png(before)  # a PNG has its title drawn in


def test_figures_render_in_threads(scenario_traces):
    snapshots = [scenario_traces["fwd_bwd"].steps[-1].snapshot, scenario_traces["branching"].steps[4].snapshot] * 3
    reference = {i: figure_svg(pool_figure(s)) for i, s in enumerate(snapshots[:2])}
    results: dict[int, str] = {}
    errors = []

    def work(i: int, snap: Snapshot) -> None:
        try:
            results[i] = figure_svg(pool_figure(snap))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(snapshots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, svg in results.items():
        assert svg == reference[i % 2]
