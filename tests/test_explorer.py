"""The Explorer widget, driven from Python: buttons, slider, node selector, live trees, workloads."""

from __future__ import annotations

import dataclasses
import html
import random
import re
import statistics
import time

import pytest

pytest.importorskip("ipywidgets")

import cgviz  # noqa: E402
from cgviz.data import gpu_trace, gpu_trace_names  # noqa: E402
from cgviz.scenarios import run_scenario  # noqa: E402
from cgviz.trace.model import Block, NodeView, OutputView, Segment, Snapshot, Step, Trace  # noqa: E402
from cgviz.widgets.explorer import Explorer  # noqa: E402

RENDERER = "builtin"  # the same pictures with or without Graphviz installed


# -- helpers --------------------------------------------------------------------------------------
def text(widget) -> str:
    """A widget's HTML as plain text (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", widget.value))


def table_rows(explorer: Explorer) -> list[dict]:
    """The output table's rows: index, shape, state (from the row class), address, alias."""
    rows = []
    for m in re.finditer(r'<tr class="cgviz-output cgviz-(\w+)" data-index="(\d+)">(.*?)</tr>', explorer.table_html.value):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", m.group(3))]
        rows.append({"state": m.group(1), "index": int(m.group(2)), "shape": cells[1], "dtype": cells[2],
                     "address": cells[4], "state_text": cells[5], "alias": cells[6]})
    return rows


def expected_rows(node: NodeView) -> list[dict]:
    return [
        {"index": o.index, "shape": "(" + ", ".join(map(str, o.shape)) + ("," if len(o.shape) == 1 else "") + ")",
         "state": o.state, "address": "—" if o.address is None else f"{o.address:#x}"}
        for o in node.outputs
    ]


def shown(widget) -> bool:
    return widget.layout.display != "none"


@pytest.fixture(scope="module")
def chain_trace() -> Trace:
    return run_scenario("chain", "sim").trace


@pytest.fixture(scope="module")
def generations_trace() -> Trace:
    return run_scenario("generations", "sim").trace


def small_tree():
    import torch

    tree = cgviz.Tree("sim", name="live")

    def f(x):
        return x * 2 + 1

    def g(y):
        return y.relu()

    tf, tg = tree.wrap(f, name="f"), tree.wrap(g, name="g")
    x = torch.randn(16)

    def call():
        return tg(tf(x)).sum()

    return tree, call


# -- stepping ------------------------------------------------------------------------------------
def test_next_button_advances_and_updates_every_view(chain_trace):
    ex = Explorer(chain_trace, renderer=RENDERER)
    assert ex.index == 0 and ex.slider.value == 0
    before = {name: getattr(ex, name).value for name in ("headline", "tree_html", "table_html", "pool_html")}
    # walk to the first step that names a node, checking each press
    for expected in range(1, len(chain_trace.steps)):
        ex.next_button.click()
        assert ex.index == expected == ex.slider.value
        step = chain_trace.steps[expected]
        assert f"step {expected + 1}/{len(chain_trace.steps)}" in text(ex.headline)
        assert step.headline() in text(ex.headline)
        assert step.reason in text(ex.reason)
        if step.node is not None and step.kind in ("warmup", "record", "execute"):
            break
    assert f'id="node-{step.node}"' in ex.tree_html.value
    assert ex.selected == step.node == ex.node_select.value
    assert [{k: r[k] for k in ("index", "shape", "state", "address")} for r in table_rows(ex)] == expected_rows(
        step.snapshot.node(step.node))
    for name, old in before.items():
        assert getattr(ex, name).value != old, f"{name} did not change"
    assert "<svg" in ex.pool_html.value and "<svg" in ex.tree_html.value


def test_buttons_prev_first_last_and_slider_agree_with_index(chain_trace):
    n = len(chain_trace.steps)
    ex = Explorer(chain_trace, renderer=RENDERER)
    assert ex.first_button.disabled and ex.prev_button.disabled and not ex.next_button.disabled
    ex.last_button.click()
    assert ex.index == n - 1 == ex.slider.value == ex.slider.max
    assert ex.next_button.disabled and ex.last_button.disabled and not ex.prev_button.disabled
    ex.prev_button.click()
    assert ex.index == n - 2 == ex.slider.value
    ex.first_button.click()
    assert ex.index == 0 == ex.slider.value
    ex.slider.value = 5  # dragging the slider shows that step
    assert ex.index == 5
    assert f"step 6/{n}" in text(ex.headline)
    ex.go(-1)
    assert ex.index == n - 1 == ex.slider.value
    with pytest.raises(IndexError, match=f"no step {n}"):
        ex.go(n)
    ex.next()  # at the end: stays
    assert ex.index == n - 1


def test_selecting_a_node_shows_its_outputs(chain_trace):
    ex = Explorer(chain_trace, renderer=RENDERER)
    ex.last()
    snap = chain_trace.steps[-1].snapshot
    assert len(snap.nodes) >= 3
    assert [v for _, v in ex.node_select.options] == [n.id for n in snap.nodes]
    for node in snap.nodes:
        ex.node_select.value = node.id  # as a user picks it
        assert ex.selected == node.id
        rows = table_rows(ex)
        assert len(rows) == len(node.outputs)
        assert [{k: r[k] for k in ("index", "shape", "state", "address")} for r in rows] == expected_rows(node)
        assert f'data-node="{node.id}"' in ex.table_html.value
        assert f"node {node.id} · {node.function}" in text(ex.table_html)
    first = snap.nodes[0]
    ex.select(first.id)
    assert ex.node_select.value == first.id and ex.selected == first.id
    with pytest.raises(KeyError, match="no node 999"):
        ex.select(999)


def test_selection_persists_through_steps_without_a_node(generations_trace):
    ex = Explorer(generations_trace, renderer=RENDERER)
    steps = generations_trace.steps
    gen = next(i for i, s in enumerate(steps) if s.kind == "generation" and s.invalidated)
    ex.go(gen - 1)
    victim = steps[gen].invalidated[0][0]
    ex.select(victim)
    ex.next()  # the generation step has no node: the selection stays, and its outputs are invalid now
    assert ex.index == gen and ex.selected == victim
    assert any(r["state"] == "invalid" for r in table_rows(ex))


def test_tree_and_pool_pictures_are_cached_per_step_and_the_timeline_drawn_once(chain_trace, monkeypatch):
    import cgviz.views.tree as tree_view

    calls = {"tree": 0, "timeline": 0}
    real_tree = tree_view.tree_svg

    def counting_tree(*a, **kw):
        calls["tree"] += 1
        return real_tree(*a, **kw)

    monkeypatch.setattr(tree_view, "tree_svg", counting_tree)
    try:
        import cgviz.views.timeline as timeline_view
    except ImportError:
        timeline_view = None
    if timeline_view is not None:
        real_timeline = timeline_view.timeline_figure

        def counting_timeline(*a, **kw):
            calls["timeline"] += 1
            return real_timeline(*a, **kw)

        monkeypatch.setattr(timeline_view, "timeline_figure", counting_timeline)
    ex = Explorer(chain_trace, renderer=RENDERER)
    with_node = [i for i, s in enumerate(chain_trace.steps) if s.node is not None][:4]
    for i in with_node:
        ex.go(i)
    drawn = calls["tree"]
    assert drawn >= len(with_node)
    for i in reversed(with_node):
        ex.go(i)  # back over the same steps: from the cache
    assert calls["tree"] == drawn
    if timeline_view is not None:
        assert calls["timeline"] == 1  # drawn once; only its marker moves
        assert f'data-step="{ex.index}"' in ex.timeline_html.value


# -- banners and messages ------------------------------------------------------------------------
def test_generation_banner_appears_exactly_on_generation_steps(generations_trace):
    ex = Explorer(generations_trace, renderer=RENDERER)
    seen = 0
    for i, step in enumerate(generations_trace.steps):
        ex.go(i)
        if step.kind != "generation":
            assert not shown(ex.banner) and ex.banner.value == ""
            continue
        seen += 1
        assert shown(ex.banner)
        banner = text(ex.banner)
        assert f"generation {step.generation} begins" in banner
        names = {n.id: n.function for n in step.snapshot.nodes}
        for node, out in step.invalidated:
            assert f"output {out} of node {node} ({names[node]})" in banner
        if not step.invalidated:
            assert "nothing live was invalidated" in banner
    assert seen >= 3
    assert any(s.kind == "generation" and s.invalidated for s in generations_trace.steps)


def test_events_trace_shows_that_snapshots_need_full_traces():
    trace = run_scenario("generations", "sim", trace="events").trace
    assert all(s.snapshot is None for s in trace.steps)
    ex = Explorer(trace, renderer=RENDERER)
    gen = next(i for i, s in enumerate(trace.steps) if s.kind == "generation" and s.invalidated)
    ex.go(gen)
    for pane in (ex.tree_html, ex.table_html, ex.pool_html):
        assert 'snapshots need trace="full"' in text(pane)
        assert "events" in text(pane)
    assert trace.steps[gen].headline() in text(ex.headline)
    assert trace.steps[gen].reason in text(ex.reason)
    # the banner names the functions from the trace's warmup/record steps
    assert shown(ex.banner) and "invalidated output 0 of node" in text(ex.banner)
    assert "(f)" in text(ex.banner) or "(g)" in text(ex.banner)
    assert ex.node_select.disabled and ex.node_select.options == ()
    assert "failed" not in text(ex.timeline_html)
    with pytest.raises(KeyError, match="no snapshot"):
        ex.select(0)


def test_empty_trace_says_no_steps_yet_and_disables_buttons():
    ex = Explorer(Trace(), renderer=RENDERER)
    assert ex.index is None
    assert "no steps yet" in text(ex.headline)
    for b in (ex.first_button, ex.prev_button, ex.next_button, ex.last_button):
        assert b.disabled
    assert ex.slider.disabled and ex.slider.max == 0
    for pane in (ex.tree_html, ex.table_html, ex.pool_html, ex.timeline_html):
        assert "no steps yet" in text(pane)
    ex.next()
    ex.last()  # nothing to do, no error
    assert ex.index is None
    with pytest.raises(IndexError, match="no steps yet"):
        ex.go(0)
    assert not shown(ex.run_button)  # no workload, no button


def test_one_step_trace(chain_trace):
    one = Trace(steps=[chain_trace.steps[1]], meta=dict(chain_trace.meta))
    ex = Explorer(one, renderer=RENDERER)
    assert ex.index == 0 == ex.slider.value
    assert "step 1/1" in text(ex.headline)
    for b in (ex.first_button, ex.prev_button, ex.next_button, ex.last_button):
        assert b.disabled
    assert ex.slider.disabled
    ex.next()
    ex.prev()
    assert ex.index == 0
    assert f'id="node-{one.steps[0].node}"' in ex.tree_html.value


def test_folded_replay_blocks_are_one_stop_shown_times_n():
    tree, call = small_tree()
    for _ in range(12):
        call()
    steps = tree.trace.steps
    folded = [i for i, s in enumerate(steps) if s.repeat > 1]
    assert folded, "a replay loop folds into a repeated block"
    ex = Explorer(tree.trace, renderer=RENDERER)
    end = folded[-1]
    ex.go(end)
    assert f"×{steps[end].repeat}" in text(ex.headline)
    if steps[end].span > 1:  # the block's other steps say so too
        ex.go(end - 1)
        assert f"×{steps[end].repeat}" in text(ex.headline)


# -- live trees and workloads --------------------------------------------------------------------
def test_live_tree_new_steps_appear_and_the_view_follows():
    tree, call = small_tree()
    call()
    ex = Explorer(tree, renderer=RENDERER)
    assert ex.index == len(tree.trace.steps) - 1  # a live tree opens at its last step
    for _ in range(3):
        call()
        n = len(tree.trace.steps)
        assert ex.slider.max == n - 1
        assert ex.index == n - 1 == ex.slider.value
        last = tree.trace.steps[-1]
        assert f"step {n}/{n}" in text(ex.headline) and last.headline() in text(ex.headline)
        if last.node is not None and last.snapshot is not None:
            assert f'id="node-{last.node}"' in ex.tree_html.value
    # not at the last step: the slider grows, the view stays where the user is
    ex.go(1)
    call()
    tree.mark_step()
    n = len(tree.trace.steps)
    assert ex.slider.max == n - 1 and ex.index == 1
    assert f"step 2/{n}" in text(ex.headline)
    ex.last()
    assert shown(ex.banner)  # the mark_step() just made
    ex.close()
    assert ex._on_step not in tree._recorder.listeners
    call()  # the closed explorer no longer follows
    assert ex.slider.max == n - 1


def test_live_explorer_on_an_empty_tree_starts_with_no_steps():
    tree, call = small_tree()
    ex = Explorer(tree, renderer=RENDERER)
    assert ex.index is None and "no steps yet" in text(ex.headline)
    assert "call a function of the tree" in text(ex.reason)
    call()
    assert ex.index == len(tree.trace.steps) - 1 and "no steps yet" not in text(ex.headline)
    assert not ex.prev_button.disabled or len(tree.trace.steps) == 1
    ex.close()


def test_run_next_call_runs_the_workload_and_follows():
    tree, call = small_tree()
    ex = Explorer(tree, call, renderer=RENDERER)
    assert shown(ex.run_button) and "run next call" in ex.run_button.description
    assert "run next call" in text(ex.reason)
    counts = []
    for _ in range(4):
        ex.run_button.click()
        counts.append(tree.trace.calls)
        assert ex.index == len(tree.trace.steps) - 1
    assert counts == sorted(counts) and counts[-1] > counts[0]
    assert not shown(ex.error_html)
    ex.close()


def test_a_raising_workload_shows_its_error_and_keeps_the_trace():
    import torch

    tree, call = small_tree()
    call()
    before = list(tree.trace.steps)
    ex = Explorer(tree, lambda: (_ for _ in ()).throw(ValueError("boom: the workload failed")), renderer=RENDERER)
    ex.run_button.click()  # does not raise
    assert shown(ex.error_html)
    assert "ValueError: boom: the workload failed" in text(ex.error_html)
    assert isinstance(ex.last_error, ValueError)
    assert tree.trace.steps[: len(before)] == before

    # an error inside a tree function: the tree records an error step; the view shows it
    bad = tree.wrap(lambda x: x.view(3, 5), name="bad")
    ex.workload = lambda: bad(torch.randn(16))
    ex.run_next()
    assert "RuntimeError" in text(ex.error_html)
    assert tree.trace.steps[-1].kind == "error" and ex.index == len(tree.trace.steps) - 1
    assert "error bad" in text(ex.headline)
    # the next good call clears the message
    ex.workload = call
    ex.run_next()
    assert not shown(ex.error_html) and ex.last_error is None or not shown(ex.error_html)
    ex.close()


def test_a_drawing_failure_does_not_break_the_live_tree(monkeypatch):
    tree, call = small_tree()
    ex = Explorer(tree, renderer=RENDERER)

    def broken(*a, **kw):
        raise RuntimeError("drawing broke")

    monkeypatch.setattr(ex, "_draw_pictures", broken)
    call()  # the tree's call goes through
    assert all(s.kind != "error" for s in tree.trace.steps)
    assert "drawing broke" in text(ex.error_html)
    ex.close()


# -- inputs and display --------------------------------------------------------------------------
@pytest.mark.parametrize("name", gpu_trace_names())
def test_gpu_traces_load_into_an_explorer(name):
    trace = gpu_trace(name)
    ex = Explorer(trace, renderer=RENDERER)
    for i in range(len(trace.steps)):
        ex.go(i)
        for pane in (ex.tree_html, ex.table_html, ex.pool_html, ex.timeline_html):
            assert "failed" not in text(pane), text(pane)[:300]
        step = trace.steps[i]
        if step.node is not None and step.snapshot is not None and any(n.id == step.node for n in step.snapshot.nodes):
            assert f'id="node-{step.node}"' in ex.tree_html.value
            assert len(table_rows(ex)) == len(step.snapshot.node(step.node).outputs)
    assert ex.index == len(trace.steps) - 1


def test_explorer_accepts_a_scenario_run_and_is_displayable():
    run = run_scenario("branching", "sim")
    ex = cgviz.Explorer(run, renderer=RENDERER)
    assert ex.tree is run.tree and ex.trace is run.trace
    bundle = ex._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.widget.model_id
    assert "Explorer" in cgviz.__all__ and cgviz.Explorer is Explorer
    assert "cgviz.Explorer" in repr(ex)
    with pytest.raises(TypeError, match="cgviz.Tree or a cgviz.Trace"):
        Explorer(42)
    with pytest.raises(ValueError, match="unknown renderer"):
        Explorer(run.trace, renderer="nope")
    ex.close()


# -- speed on a large trace ----------------------------------------------------------------------
def synthetic_trace(n_nodes: int = 1000, n_steps: int = 10_000, seed: int = 0) -> Trace:
    """A big trace from the model's dataclasses: n_nodes nodes (recorded in the first
    n_nodes steps), then replays of random nodes with a mark_step every 50 steps. Every
    step has its own snapshot; unchanged nodes and segments are shared between them."""
    rng = random.Random(seed)
    base = 0x7F0000000000
    nodes: list[NodeView] = []
    segments: list[Segment] = []
    steps: list[Step] = []
    gen, current = 1, None
    for i in range(n_steps):
        if len(nodes) < n_nodes:
            nid = len(nodes)
            parent = None if nid % 100 == 0 else rng.randrange(max(0, nid - 30), nid)
            kind = "warmup" if nid % 4 == 0 else "graph"
            outs = [OutputView(k, [64, 64 * (k + 1)], "torch.float32", 16384 * (k + 1), base + nid * 65536 + k * 32768,
                               "live") for k in range(2)]
            nodes = nodes + [NodeView(nid, f"fn{nid % 37}", kind, parent, [], gen, 0, outs, "(float32[64, 64])")]
            if parent is not None:
                nodes[parent] = dataclasses.replace(nodes[parent], children=nodes[parent].children + [nid])
            if nid % 16 == 0:
                segments = segments + [Segment(base + nid * 65536, 16 * 65536, "large", [])]
            seg = segments[-1]
            blocks = seg.blocks + [Block(base + nid * 65536 + k * 32768, 32768, True, 16384 * (k + 1),
                                         f"node {nid} output {k}", nid, k) for k in range(2)]
            segments = segments[:-1] + [Segment(seg.address, seg.size, seg.kind, blocks)]
            current = nid
            step = Step(i, "warmup" if kind == "warmup" else "record", f"synthetic {kind} of node {nid}", gen,
                        f"fn{nid % 37}", nid, parent)
        elif i % 50 == 0:
            gen += 1
            nodes = list(nodes)
            invalidated = []
            for v in (rng.randrange(n_nodes), rng.randrange(n_nodes)):
                nodes[v] = dataclasses.replace(nodes[v], outputs=[dataclasses.replace(o, state="invalid")
                                                                  for o in nodes[v].outputs])
                invalidated.append([v, 0])
            current = None
            step = Step(i, "generation", f"mark_step(): generation {gen} begins", gen, invalidated=invalidated)
        else:
            nid = rng.randrange(n_nodes)
            nodes = list(nodes)
            nodes[nid] = dataclasses.replace(nodes[nid], replays=nodes[nid].replays + 1,
                                             outputs=[dataclasses.replace(o, state="live") for o in nodes[nid].outputs])
            current = nid
            step = Step(i, "execute", f"replays node {nid}", gen, nodes[nid].function, nid, nodes[nid].parent)
        step.snapshot = Snapshot(nodes, current, [] if current is None else [current],
                                 "none" if current is None else "execution", gen, segments)
        steps.append(step)
    return Trace(steps, {"trace_level": "full", "backend": "synthetic"})


def test_step_changes_on_a_large_trace_are_fast(capsys):
    trace = synthetic_trace()
    assert len(trace.steps) == 10_000 and len(trace.steps[-1].snapshot.nodes) == 1000
    start = time.perf_counter()
    ex = Explorer(trace, renderer=RENDERER)
    opened = time.perf_counter() - start
    ex.go(6000)

    def timed(action, times: int) -> list[float]:
        out = []
        for _ in range(times):
            t0 = time.perf_counter()
            action()
            out.append(time.perf_counter() - t0)
        return out

    cold = timed(ex.next_button.click, 10)  # steps never drawn: tree and pool drawn
    warm = timed(ex.prev_button.click, 10)  # back over them: from the cache
    ex.prefetch(ex.index + 12)  # drawn ahead (in Jupyter: while the kernel is idle)
    ex.go(ex.index + 11)
    prefetched = timed(ex.next_button.click, 1)
    figures = {
        "open_s": round(opened, 3),
        "cold_median_ms": round(1e3 * statistics.median(cold), 1),
        "cold_max_ms": round(1e3 * max(cold), 1),
        "warm_median_ms": round(1e3 * statistics.median(warm), 2),
        "warm_max_ms": round(1e3 * max(warm), 2),
        "prefetched_ms": round(1e3 * prefetched[0], 2),
    }
    with capsys.disabled():
        print(f"\nexplorer step change, 1000 nodes / 10000 steps, builtin renderer: {figures}")
    assert statistics.median(warm) < 0.1
    assert prefetched[0] < 0.1
    assert statistics.median(cold) < 2.0  # drawing a 1000-node tree and its pool from scratch


# -- inside a running event loop (as in a Jupyter kernel) ---------------------------------------
async def _until(condition, timeout: float = 10.0) -> bool:
    import asyncio

    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def test_in_an_event_loop_the_pool_is_drawn_after_the_step_change_and_neighbours_ahead(chain_trace):
    import asyncio

    async def main():
        ex = Explorer(chain_trace, renderer=RENDERER)
        target = next(i for i, s in enumerate(chain_trace.steps) if s.kind == "record")
        ex.go(target)
        # the step is shown at once; a pool picture not drawn yet follows when the loop is free
        assert chain_trace.steps[target].headline() in text(ex.headline)
        assert f'id="node-{chain_trace.steps[target].node}"' in ex.tree_html.value
        assert "drawing the pool" in text(ex.pool_html)
        assert await _until(lambda: "drawing the pool" not in text(ex.pool_html))
        assert "<svg" in ex.pool_html.value
        # the neighbours were drawn ahead: the next step comes from the caches
        after = chain_trace.steps[target + 1]
        assert await _until(lambda: not ex._prefetch_queue and ex._prefetch_handle is None)
        assert (target + 1, ex._default_node(after)) in ex._tree_cache
        ex.next()
        assert "drawing the pool" not in text(ex.pool_html)
        ex.close()

    asyncio.run(main())


def test_in_an_event_loop_a_busy_live_tree_is_redrawn_at_most_every_interval():
    import asyncio

    tree, call = small_tree()

    async def main():
        ex = Explorer(tree, renderer=RENDERER, live_interval=1.0)
        draws = []
        real = ex._draw_pictures

        def counting(*a, **kw):
            draws.append(ex.index)
            return real(*a, **kw)

        ex._draw_pictures = counting
        for _ in range(6):  # a cell that runs the tree in a loop
            call()
            n = len(tree.trace.steps)
            assert ex.index == n - 1 and f"step {n}/{n}" in text(ex.headline)  # the headline follows every step
        assert len(draws) < len(tree.trace.steps)  # the pictures did not redraw on every step
        assert ex._dirty
        last = tree.trace.steps[-1]
        # when the cell ends (the loop is free), the last step is drawn
        assert await _until(lambda: not ex._dirty)
        assert draws[-1] == len(tree.trace.steps) - 1
        if last.node is not None:
            assert f'id="node-{last.node}"' in ex.tree_html.value
        ex.close()

    asyncio.run(main())


# -- the pool highlight, and staying light ---------------------------------------------------------
def test_pool_highlight_overlay_outlines_the_selected_nodes_blocks(chain_trace):
    ex = Explorer(chain_trace, renderer=RENDERER)
    ex.last()
    snap = chain_trace.steps[-1].snapshot
    owners = {b.node for seg in snap.segments for b in seg.blocks if b.allocated and b.node is not None}
    assert owners
    pictures = set()
    for node in sorted(owners):
        ex.select(node)
        blocks = [b for seg in snap.segments for b in seg.blocks if b.allocated and b.node == node]
        style = re.search(r"<style>(.*?)</style>", ex.pool_html.value).group(1)
        for b in blocks:
            assert f"#block-{b.address:x}" in style
            assert f'id="block-{b.address:x}"' in ex.pool_html.value
        assert f"node {node}" in text(ex.pool_html)
        pictures.add(re.sub(r"<style>.*?</style>|<div class=\"cgviz-pool-highlight\".*?</div>", "", ex.pool_html.value))
    assert len(pictures) == 1  # one picture of the pool, whichever node is highlighted


def test_steps_whose_pool_differs_only_in_what_is_live_draw_it_once_each_with_its_totals(monkeypatch):
    import cgviz.views.pool as pool_view
    from cgviz.trace.diff import format_bytes

    base, size = 0x7F0000000000, 1 << 20
    segment = Segment(base, 2 * size, "small", [Block(base + k * size, size, True, size, f"node {k} output 0", k, 0)
                                                for k in range(2)])

    def snapshot(states: tuple[str, str]) -> Snapshot:
        nodes = [NodeView(k, f"f{k}", "graph", None, [], 1, 0,
                          [OutputView(0, [4], "float32", size, base + k * size, st)]) for k, st in enumerate(states)]
        return Snapshot(nodes, 0, [0], "execution", 1, [segment])

    states = [("live", "dead"), ("live", "live"), ("dead", "live"), ("dead", "dead")]  # a replay loop moving on
    trace = Trace([Step(k, "execute", "replay", 1, "f0", 0, snapshot=snapshot(st)) for k, st in enumerate(states)],
                  {"trace_level": "full"})
    drawn = []
    real = pool_view.pool_figure
    monkeypatch.setattr(pool_view, "pool_figure", lambda *a, **k: drawn.append(1) or real(*a, **k))
    pool_view.clear_cache()
    ex = Explorer(trace, renderer=RENDERER)
    for k, st in enumerate(states):
        ex.go(k)
        live = format_bytes(size * st.count("live"))
        assert f"2.0 MiB reserved · 2.0 MiB allocated · {live} in live outputs" in text(ex.pool_html)
        assert all(f'id="block-{b.address:x}"' in ex.pool_html.value for b in segment.blocks)
    assert len(drawn) == 1


def test_pool_highlight_redraw_draws_the_highlight_into_the_picture(chain_trace):
    ex = Explorer(chain_trace, pool_highlight="redraw", renderer=RENDERER)
    ex.last()
    snap = chain_trace.steps[-1].snapshot
    a, b = snap.nodes[0].id, snap.nodes[-1].id
    ex.select(a)
    first = ex.pool_html.value
    ex.select(b)
    assert "<style>" not in ex.pool_html.value and ex.pool_html.value != first
    with pytest.raises(ValueError, match="pool_highlight"):
        Explorer(chain_trace, pool_highlight="glow")


def test_explorer_class_loads_no_widget_or_plotting_library_until_made():
    import json
    import subprocess
    import sys

    probe = (
        "import json, sys, cgviz\n"
        "cls = cgviz.Explorer\n"
        "print(json.dumps(sorted(m for m in ('ipywidgets', 'matplotlib', 'IPython', 'torch') if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
