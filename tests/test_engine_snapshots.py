"""Snapshots on the sim backend: nodes, path, state, output liveness, and pool blocks that belong
to each live output."""

from __future__ import annotations

import pytest

import cgviz
from helpers import chain_tree, data, last_step


# -- snapshots --------------------------------------------------------------------------------
def test_snapshot_shows_nodes_path_state_and_output_liveness():
    tree, f, g, _ = chain_tree()
    x = data(8)
    for _ in range(2):
        z = g(f(x))
        del z
    y = f(x)
    z = g(y)
    snap = tree.snapshot()  # nodes 0, 1: warmups of f, g; 2, 3: their graphs
    assert snap.current_node == 3 and snap.path == [2, 3] and snap.state == "execution"
    assert snap.generation == 1
    assert [(n.id, n.kind) for n in snap.nodes] == [(0, "warmup"), (1, "warmup"), (2, "graph"), (3, "graph")]
    node2, node3 = snap.node(2), snap.node(3)
    assert (node2.function, node2.parent, node2.children, node2.replays) == ("f", None, [3], 1)
    assert (node3.function, node3.parent, node3.children, node3.replays) == ("g", 2, [], 1)
    out = node3.outputs[0]
    assert (out.index, out.shape, out.dtype, out.nbytes, out.state) == (0, [8], "float32", 32, "live")
    del z
    assert tree.snapshot().node(3).outputs[0].state == "dead"
    assert tree.snapshot().node(2).outputs[0].state == "live"
    tree.mark_step()
    snap = tree.snapshot()
    assert snap.node(2).outputs[0].state == "invalid" and snap.state == "none" and snap.current_node is None
    with pytest.raises(KeyError):
        snap.node(99)


def owners_of_live_outputs(snap) -> dict:
    """(node, output) of each live output that owns its memory -> the Block it owns, or None."""
    owned = {(blk.node, blk.output): blk for seg in snap.segments for blk in seg.blocks}
    return {
        (n.id, o.index): owned.get((n.id, o.index))
        for n in snap.nodes
        for o in n.outputs
        if o.state == "live" and o.alias_of is None
    }


def two_function_tree():
    tree = cgviz.Tree("sim")
    F = tree.wrap(lambda x: (x * 2, x.exp()), name="F")
    G = tree.wrap(lambda a: a + 1, name="G")
    return tree, F, G


@pytest.mark.parametrize("calls", [1, 2, 3], ids=["warmup", "record", "execute"])
def test_snapshot_pool_blocks_belong_to_each_live_output(calls):
    tree, F, G = two_function_tree()
    x = data(64)
    for _ in range(calls - 1):
        a, b = F(x)
        c = G(a)
        del a, b, c
    a, b = F(x)
    c = G(a)  # noqa: F841  (held: a live output)
    assert last_step(tree).kind == ("warmup", "record", "execute")[calls - 1]
    snap = tree.snapshot()
    owners = owners_of_live_outputs(snap)
    assert len(owners) == 3
    for (node, index), blk in owners.items():
        assert blk is not None, f"no block owned by node {node} output {index}"
        out = snap.node(node).outputs[index]
        assert blk.allocated and blk.address == out.address and blk.size >= out.nbytes
        assert blk.owner == f"node {node} output {index}"
    spans = sorted((blk.address, blk.address + blk.size) for blk in owners.values())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # disjoint
    assert snap.reserved_bytes > 0 and 0 < snap.allocated_bytes <= snap.reserved_bytes
    for seg in snap.segments:  # blocks tile their segment
        assert sum(blk.size for blk in seg.blocks) == seg.size


def test_snapshot_block_of_an_offset_view_output_is_owned_by_that_output(tree):
    tf = tree.wrap(lambda x: (x * 2)[2:], name="f")
    for i in range(3):  # warmup, record, replay
        y = tf(data(8, seed=i))
        snap = tree.snapshot()
        node = snap.current_node
        out = snap.node(node).outputs[0]
        owned = [blk for seg in snap.segments for blk in seg.blocks if (blk.node, blk.output) == (node, 0)]
        assert len(owned) == 1, f"call {i}: no block owned by node {node} output 0"
        assert owned[0].address <= out.address < owned[0].address + owned[0].size
        del y
