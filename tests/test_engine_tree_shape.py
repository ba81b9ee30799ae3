"""The shape of the tree on the sim backend: roots and children, path ends, a root per input shape,
backward graphs under their forward. Every test checks the decisions and the values (bit for bit
equal to eager)."""

from __future__ import annotations

import torch

import cgviz
from helpers import chain_tree, data, graph_nodes, kinds, last_step, same, steps_of


# -- the tree's shape -------------------------------------------------------------------------
def test_chain_records_a_root_and_children_then_replays_the_path():
    tree, f, g, h = chain_tree()
    for i in range(3):
        x = data(8, seed=i)
        out = h(g(f(x)))
        assert same(out, (x + 1) * 2 - 3)
        del out
    records = steps_of(tree, "record")
    assert [(s.function, s.node, s.parent) for s in records] == [("f", 3, None), ("g", 4, 3), ("h", 5, 4)]
    assert "no child for g under node 3" in records[1].reason
    # torch hangs a new graph under the current node: the last graph run on the path
    assert "under node 3, the current node (the last graph run on the path" in records[1].reason
    # what torch checks before a replay: static inputs in place, outputs dead at recording still dead
    replay = steps_of(tree, "execute")[-1].reason
    assert "no output of the path that was dead at recording is live" in replay
    assert "live outputs as at recording" not in replay
    snap = tree.snapshot()
    assert [(n.id, n.parent, n.children) for n in graph_nodes(snap)] == [(3, None, [4]), (4, 3, [5]), (5, 4, [])]
    # warmups chain the same way
    assert [(n.id, n.kind, n.parent) for n in snap.nodes[:3]] == [(0, "warmup", None), (1, "warmup", 0), (2, "warmup", 1)]
    assert [(s.kind, s.node, s.parent) for s in tree.trace.steps[-3:]] == [
        ("execute", 3, None),
        ("execute", 4, 3),
        ("execute", 5, 4),
    ]
    assert snap.path == [3, 4, 5] and snap.current_node == 5


def test_warmup_step_under_a_node_carries_its_parent():
    tree, f, g, _ = chain_tree()
    z = g(f(data(8)))  # noqa: F841  (held: a live output)
    warmups = steps_of(tree, "warmup")
    assert [(s.node, s.parent) for s in warmups] == [(0, None), (1, 0)]


def test_function_called_under_a_different_parent_records_a_new_child(tree):
    F = tree.wrap(lambda x: x + 1, name="F")
    H = tree.wrap(lambda x: x * 5, name="H")
    G = tree.wrap(lambda x: x.sin(), name="G")
    x = data(8)
    for _ in range(3):
        z = G(F(x))
        assert same(z, (x + 1).sin())
        del z
        z = G(H(x))
        assert same(z, (x * 5).sin())
        del z
    snap = tree.snapshot()
    (f_node,) = graph_nodes(snap, "F")
    (h_node,) = graph_nodes(snap, "H")
    g_nodes = graph_nodes(snap, "G")
    assert sorted(n.parent for n in g_nodes) == sorted([f_node.id, h_node.id])
    g_under_h = next(n for n in g_nodes if n.parent == h_node.id)
    rec = next(s for s in steps_of(tree, "record") if s.node == g_under_h.id)
    assert rec.parent == h_node.id and f"no child for G under node {h_node.id}" in rec.reason
    # the last round replayed both paths
    assert [(s.kind, s.node) for s in steps_of(tree, "execute")[-4:]] == [
        ("execute", f_node.id),
        ("execute", next(n.id for n in g_nodes if n.parent == f_node.id)),
        ("execute", h_node.id),
        ("execute", g_under_h.id),
    ]


def test_with_nothing_live_a_function_records_a_new_root(tree):
    F = tree.wrap(lambda x: x + 1, name="F")
    G = tree.wrap(lambda x: x.sin(), name="G")
    x = data(8)
    for _ in range(2):
        z = G(F(x))
        del z
    (g_child,) = graph_nodes(tree.snapshot(), "G")
    z = G(x)  # nothing is live now: G gets a root of its own
    assert same(z, x.sin())
    rec = last_step(tree)
    assert rec.kind == "record" and rec.parent is None
    assert "recording a new root (nothing on the path is live)" in rec.reason
    assert tree.snapshot().node(rec.node).parent is None and rec.node != g_child.id


def test_output_dead_at_recording_and_live_now_records_a_new_child(tree):
    F = tree.wrap(lambda x: (x * 2, x * 3), name="F")
    G = tree.wrap(lambda a: a + 1, name="G")
    x = data(8)
    for _ in range(3):
        a, b = F(x)
        del b  # output 1 of F is dead when G records
        c = G(a)
        assert same(c, x * 2 + 1)
        del a, c
    (g_first,) = graph_nodes(tree.snapshot(), "G")
    assert last_step(tree).kind == "execute"

    a, b = F(x)  # now output 1 of F stays live: G's graph might overwrite it
    c = G(a)
    rec = last_step(tree)
    (f_node,) = graph_nodes(tree.snapshot(), "F")
    assert rec.kind == "record" and rec.parent == f_node.id
    assert f"output 1 of node {f_node.id} was dead at recording and is live now" in rec.reason
    assert f"node {g_first.id} can't replay" in rec.reason
    assert same((a, b, c), (x * 2, x * 3, x * 2 + 1))
    del a, b, c
    a, b = F(x)
    c = G(a)  # the new child replays when the same outputs are live again  # noqa: F841  (held: a live output)
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", rec.node)
    assert same(b, x * 3)


def test_path_ends_when_all_its_outputs_are_dead():
    tree, f, g, _ = chain_tree()
    for _ in range(3):
        z = g(f(data(8)))
        del z
    end = steps_of(tree, "path_end")[-1]  # recorded at the next call, before it replays
    assert "all outputs of path 2→3 are dead" in end.reason
    assert tree.trace.steps[end.index + 1].kind == "execute"
    assert end.snapshot.current_node is None and end.snapshot.path == [] and end.snapshot.state == "none"
    assert end.node is None


def test_path_continues_while_any_output_is_live():
    tree, f, g, h = chain_tree()
    x = data(8)
    for _ in range(2):
        z = g(f(x))
        del z
    y = f(x)  # replay root f; keep its output
    z = g(y)
    del z  # g's output is dead, f's is live: the path goes on
    start = len(tree.trace.steps)
    out = h(y)  # h is new: it warms up under g's node, not as a root
    assert kinds(tree, start) == ["checkpoint_restore", "warmup"]
    snap = tree.snapshot()
    g_node = graph_nodes(snap, "g")[0]
    assert snap.node(last_step(tree).node).parent == g_node.id
    assert snap.path == [g_node.parent, g_node.id, last_step(tree).node]
    assert same(out, (x + 1) - 3)


# -- dynamic shapes ---------------------------------------------------------------------------
def test_each_input_shape_gets_its_own_warmup_and_root(tree):
    tf = tree.wrap(lambda x: x.softmax(-1) * x.shape[-1], name="f")
    shapes = (4, 8, 4, 8, 4, 8)
    for n in shapes:
        x = data(2, n, seed=n)
        y = tf(x)
        assert same(y, x.softmax(-1) * n)
        del y
    snap = tree.snapshot()
    warmups = [n for n in snap.nodes if n.kind == "warmup"]
    roots = graph_nodes(snap)
    assert sorted(n.signature for n in warmups) == ["(float32[2, 4])", "(float32[2, 8])"]
    assert sorted(n.signature for n in roots) == ["(float32[2, 4])", "(float32[2, 8])"]
    assert all(n.parent is None for n in roots)
    assert kinds(tree).count("execute") == 2
    signature_of = {n.id: n.signature for n in roots}
    assert [signature_of[s.node] for s in steps_of(tree, "execute")] == ["(float32[2, 4])", "(float32[2, 8])"]
    assert "f(float32[2, 8])" in steps_of(tree, "warmup")[1].reason


def test_shapes_past_the_shape_limit_run_eagerly():
    tree = cgviz.Tree("sim", shape_limit=2)
    tf = tree.wrap(lambda x: x * 2, name="f")
    for n in (2, 3, 2, 3):
        y = tf(data(n))
        del y
    nodes = len(tree.nodes)
    x = data(16)
    y = tf(x)
    eager = last_step(tree)
    assert eager.kind == "eager" and "shape_limit=2" in eager.reason and "float32[16]" in eager.reason
    assert same(y, x * 2) and len(tree.nodes) == nodes
    del y
    y = tf(data(2))  # graphed shapes still replay  # noqa: F841  (held: a live output)
    assert last_step(tree).kind == "execute"


# -- forward and backward ---------------------------------------------------------------------
def fwd_bwd_tree():
    tree = cgviz.Tree("sim")
    fw = tree.wrap(lambda x: (x * 2, x + 1), name="fw", mode="forward")
    bw = tree.wrap(lambda h, g: h * g, name="bw", mode="backward")
    return tree, fw, bw


def test_forward_then_backward_records_backward_under_forward_and_replays():
    tree, fw, bw = fwd_bwd_tree()
    g = torch.ones(4)
    for i in range(3):
        tree.mark_step()
        x = data(4, seed=i)
        y, h = fw(x)
        gx = bw(h, g)
        assert same((y, gx), (x * 2, (x + 1) * g))
        del y, h, gx
    fw_rec, bw_rec = steps_of(tree, "record")
    assert bw_rec.parent == fw_rec.node
    assert [(s.kind, s.node) for s in tree.trace.steps[-2:]] == [("execute", fw_rec.node), ("execute", bw_rec.node)]
    assert tree.pending_backward == 0


def test_second_forward_before_its_backward_mentions_the_pending_backward():
    tree, fw, bw = fwd_bwd_tree()
    g = torch.ones(4)
    for i in range(2):
        tree.mark_step()
        y, h = fw(data(4, seed=i))
        gx = bw(h, g)
        del y, h, gx
    tree.mark_step()
    x1, x2 = data(4, seed=1), data(4, seed=2)
    y1, h1 = fw(x1)
    y2, h2 = fw(x2)
    rec = last_step(tree)
    assert rec.kind == "record" and rec.function == "fw"
    assert "pending backward" in rec.reason and "1 forward(s)" in rec.reason
    assert same((y1, h1, y2, h2), (x1 * 2, x1 + 1, x2 * 2, x2 + 1))


def test_mark_step_with_a_pending_backward_mentions_it():
    tree, fw, bw = fwd_bwd_tree()
    y, h = fw(data(4))
    tree.mark_step()
    gen = last_step(tree)
    assert gen.kind == "generation" and "pending backward" in gen.reason
    assert tree.pending_backward == 0
    tree.mark_step()
    assert "pending backward" not in last_step(tree).reason
