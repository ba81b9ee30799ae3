"""The sim pool: checkpoint restores before recording after replays, siblings sharing the memory
of their dead sibling, reserved memory that never shrinks."""

from __future__ import annotations

import torch

from cgviz.scenarios import run_scenario
from helpers import data, graph_nodes, kinds, last_step, same, steps_of


# -- the pool: sharing memory between branches, checkpoints ------------------------------------
def test_checkpoint_restore_comes_before_recording_a_child_after_replays(tree):
    A = tree.wrap(lambda x: x * 2, name="A")
    B = tree.wrap(lambda y: y * 3, name="B")
    B2 = tree.wrap(lambda y: y - 1, name="B2")
    x = data(256)
    for _ in range(2):
        ya = A(x)
        yb = B(ya)
        del ya, yb
    ya = A(x)  # replay of A, then B2 warms up under it
    assert last_step(tree).kind == "execute"
    yb2 = B2(ya)
    del ya, yb2
    ya = A(x)
    start = len(tree.trace.steps)
    yb2 = B2(ya)  # recording under A after a replay: the allocator state is restored first
    assert kinds(tree, start) == ["checkpoint_restore", "record"]
    restore, rec = tree.trace.steps[start:]
    assert restore.node == 2 and rec.parent == 2
    assert "node 2" in restore.reason and "keeping 1 live output" in restore.reason
    assert same(yb2, x * 2 - 1)


def test_sibling_recording_reuses_the_memory_its_dead_sibling_used(tree):
    A = tree.wrap(lambda x: x * 2, name="A")
    B = tree.wrap(lambda y: y * 3, name="B")
    B2 = tree.wrap(lambda y: y - 1, name="B2")
    x = data(256)
    for _ in range(3):
        ya = A(x)
        yb = B(ya)
        del ya, yb
    reserved_after_ab = tree.snapshot().reserved_bytes
    for _ in range(3):
        ya = A(x)
        yb2 = B2(ya)
        assert same(yb2, x * 2 - 1)
        del ya, yb2
    snap = tree.snapshot()
    (a_node,) = graph_nodes(snap, "A")
    (b_node,) = graph_nodes(snap, "B")
    (b2_node,) = graph_nodes(snap, "B2")
    assert b_node.parent == a_node.id and b2_node.parent == a_node.id
    assert b2_node.outputs[0].address == b_node.outputs[0].address
    assert snap.reserved_bytes == reserved_after_ab


def test_checkpoint_restore_leaves_no_dead_intermediates_allocated():
    run = run_scenario("branching", "sim")
    restores = steps_of(run.tree, "checkpoint_restore")
    assert restores
    for step in restores:
        unowned = [blk for seg in step.snapshot.segments for blk in seg.blocks if blk.allocated and blk.node is None]
        assert unowned == [], f"step {step.index}: {unowned}"
    snap = run.trace.last_snapshot()
    (b_node,) = graph_nodes(snap, "B")
    (b2_node,) = graph_nodes(snap, "B'")
    assert b2_node.outputs[0].address == b_node.outputs[0].address


def test_checkpoint_restore_never_shrinks_reserved_memory(tree):
    n = 3 * 1024 * 1024  # 12 MiB of float32: each allocation gets a segment of its own size
    A = tree.wrap(lambda x: x * 2, name="A")
    B = tree.wrap(lambda y: torch.cat([y, y]) * 3, name="B")  # B needs new segments
    B2 = tree.wrap(lambda y: y - 1, name="B2")
    x = torch.ones(n)
    for _ in range(3):
        ya = A(x)
        yb = B(ya)
        del ya, yb
    for _ in range(3):
        ya = A(x)
        yb2 = B2(ya)
        del ya, yb2
    reserved = [s.snapshot.reserved_bytes for s in tree.trace.steps]
    assert all(b >= a for a, b in zip(reserved, reserved[1:])), reserved
