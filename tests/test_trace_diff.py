"""Snapshot diffs: what a step changed in the tree and the pool, as data and in words."""

from __future__ import annotations

import copy

import pytest
import torch

import cgviz
from cgviz.trace.diff import BlockChange, OutputChange, diff_snapshots, diff_steps
from cgviz.views.text import format_bytes
from cgviz.trace.model import Block, NodeView, OutputView, Segment, Snapshot, Trace

MiB = 1 << 20


def steps_of(trace: Trace, kind: str) -> list[int]:
    return [i for i, s in enumerate(trace.steps) if s.kind == kind]


@pytest.fixture
def engine():
    """f warmed up, recorded and replayed once, its last output kept live, then mark_step()."""
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2 + 1, name="f")
    g = tree.wrap(lambda x: x.sum(), name="g")
    x = torch.ones(4)
    for _ in range(3):
        y = f(x)
        z = g(y)
        del y, z
    y = f(x)  # noqa: F841  (held: a live output)
    tree.mark_step()
    return tree.trace


def test_identical_snapshots_give_empty_diff(engine):
    snap = engine.last_snapshot()
    for other in (snap, copy.deepcopy(snap)):
        d = diff_snapshots(snap, other)
        assert not d and d.summary() == []
        assert d.reserved_delta == 0 and d.blocks == [] and d.generation is None


def test_mark_step_invalidates_live_output(engine):
    gen = steps_of(engine, "generation")[-1]
    before = engine.steps[gen - 1]
    assert before.kind == "execute" and before.snapshot.node(before.node).outputs[0].state == "live"
    d = diff_steps(engine, gen - 1, gen)
    assert d
    assert OutputChange(before.node, 0, "live", "invalid") in d.outputs
    assert d.generation == (1, 2) and d.state == ("execution", "none") and d.current_node == (before.node, None)
    lines = d.summary()
    assert f"output 0 of node {before.node}: live → invalid" in lines
    assert "generation 1 → 2" in lines and "state execution → none" in lines
    assert not d.nodes_added and not d.replays


def test_recording_adds_nodes(engine):
    rec_f, rec_g = steps_of(engine, "record")
    d = diff_steps(engine, rec_f - 1, rec_f)
    [node] = d.nodes_added
    assert node.id == engine.steps[rec_f].node and node.kind == "graph" and node.parent is None
    assert f"node {node.id} added (f, graph, a root)" in d.summary()
    assert d.path == ([], [node.id]) and d.state == ("none", "recording")
    assert d.allocated_delta > 0
    assert any(c.new is not None and c.new.owner == f"node {node.id} output 0" for c in d.blocks)
    child = diff_steps(engine, rec_g - 1, rec_g)
    assert f"node {engine.steps[rec_g].node} added (g, graph, parent {node.id})" in child.summary()


def test_execute_changes_replay_count(engine):
    first, second = steps_of(engine, "execute")[:2]
    node = engine.steps[first].node
    d = diff_steps(engine, first - 1, first)
    assert (node, 0, 1) in d.replays
    assert f"node {node} replays 0 → 1" in d.summary()
    assert OutputChange(node, 0, "dead", "live") in d.outputs
    assert diff_steps(engine, first, -1).replays  # negative positions count from the end


def test_diff_between_far_steps(engine):
    d = diff_steps(engine, 0, len(engine.steps) - 1)
    added = {n.id for n in d.nodes_added}
    assert added == {n.id for n in engine.last_snapshot().nodes} - {engine.steps[0].node}
    reverse = diff_steps(engine, len(engine.steps) - 1, 0)
    assert {n.id for n in reverse.nodes_removed} == added
    assert reverse.allocated_delta == -d.allocated_delta and reverse.reserved_delta == -d.reserved_delta


def test_diff_steps_needs_snapshots():
    tree = cgviz.Tree("sim", trace="events")
    f = tree.wrap(lambda x: x + 1, name="f")
    f(torch.ones(2))
    tree.mark_step()
    with pytest.raises(ValueError, match="step 0 has no snapshot .*'events'"):
        diff_steps(tree.trace, 0, 1)
    with pytest.raises(IndexError, match="no step 9: the trace has 2 steps"):
        diff_steps(tree.trace, 0, 9)


def _snap(segments, outputs_state="live", replays=0, generation=1) -> Snapshot:
    out = OutputView(0, [2], "float32", 8, 0x1000, outputs_state)
    return Snapshot([NodeView(0, "f", "graph", None, [], 1, replays, [out])], 0, [0], "execution", generation, segments)


def test_pool_changes_by_address():
    out0 = Block(0x1000, 512, True, 8, "node 0 output 0", 0, 0)
    buffer = Block(0x1000, 512, True, 8, "node 0 input 0 buffer", 0)
    seg_a = Segment(0x1000, 2 * MiB, "small", [out0, Block(0x1200, 2 * MiB - 512, False)])
    out1 = Block(0x1200, 512, True, 8, "node 1 output 0", 1, 0)
    seg_b = Segment(0x1000, 2 * MiB, "small", [buffer, out1, Block(0x1400, 2 * MiB - 1024, False)])
    large = Segment(0x10_0000_0000, 20 * MiB, "large", [Block(0x10_0000_0000, 20 * MiB, False)])
    a, b = _snap([seg_a]), _snap([seg_b, large])
    d = diff_snapshots(a, b)
    assert d.segments_added == [large] and not d.segments_removed
    assert d.reserved_delta == 20 * MiB and d.allocated_delta == 512
    assert [c.address for c in d.blocks] == [0x1000, 0x1200]  # the free block split off at 0x1400 is no change
    assert d.blocks[1] == BlockChange(0x1200, seg_a.blocks[1], seg_b.blocks[1])
    lines = d.summary()
    assert "pool reserved +20.0 MiB" in lines and "pool allocated +512 B" in lines
    assert "segment 0x1000000000 added (large, 20.0 MiB)" in lines
    assert "block 0x1000 (512 B): node 0 output 0 → node 0 input 0 buffer" in lines
    assert "block 0x1200 (512 B): free → node 1 output 0" in lines
    back = diff_snapshots(b, a)
    assert back.segments_removed == [large] and "pool reserved −20.0 MiB" in back.summary()
    assert "block 0x1200 (512 B): node 1 output 0 → free" in back.summary()


def test_nodes_removed_and_outputs():
    a = _snap([], replays=3)
    b = Snapshot([], None, [], "none", 2)
    d = diff_snapshots(a, b)
    assert [n.id for n in d.nodes_removed] == [0] and not d.outputs and not d.replays
    assert "node 0 removed (f, graph)" in d.summary() and "path 0 → empty" in d.summary()
    assert diff_snapshots(_snap([], "live"), _snap([], "dead")).summary() == ["output 0 of node 0: live → dead"]


@pytest.mark.parametrize(
    "n, sign, text",
    [(0, False, "0 B"), (512, False, "512 B"), (1536, False, "1.5 KiB"), (2 * MiB, True, "+2.0 MiB"),
     (-512, True, "−512 B"), (3 << 30, False, "3.0 GiB"), (5 << 40, False, "5.0 TiB")],
)
def test_format_bytes(n, sign, text):
    assert format_bytes(n, sign=sign) == text
