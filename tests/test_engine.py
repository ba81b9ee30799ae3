"""The tree's semantics on the sim backend: warmup / record / execute, the tree's shape,
liveness and path ends, static and copied inputs, generations, dynamic shapes, forward /
backward, trace levels, snapshots, the pool, explain(), the default tree and the scenarios.

Every test checks both the decisions (the trace: step kinds, nodes, parents, reasons) and
the values (bit for bit equal to running the function eagerly).

Errors, fallbacks to eager and exceptions raised by user functions are in
tests/test_engine_errors.py.
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cgviz
from cgviz.scenarios import SCENARIOS, run_scenario


# -- helpers ----------------------------------------------------------------------------------
def data(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def kinds(tree, start: int | None = None) -> list[str]:
    """Kinds of every decision, repeated blocks unrolled; or of the steps stored from `start` on."""
    if start is None:
        return [s.kind for s in tree.trace.expanded()]
    return [s.kind for s in tree.trace.steps[start:]]


def steps_of(tree, kind: str) -> list:
    """Every decision of this kind, in order (repeated blocks unrolled)."""
    return [s for s in tree.trace.expanded() if s.kind == kind]


def last_step(tree):
    return tree.trace.steps[-1]


def graph_nodes(snapshot, function: str | None = None) -> list:
    return [n for n in snapshot.nodes if n.kind == "graph" and (function is None or n.function == function)]


def same(a, b) -> bool:
    """Bit-for-bit equality of tensors or (nested) tuples of tensors."""
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


@pytest.fixture
def tree():
    return cgviz.Tree("sim")


def f_affine(x):
    return (x * 2 + 1).relu()


# -- warmup, record, execute ------------------------------------------------------------------
def test_first_call_warms_up_second_records_third_replays(tree):
    tf = tree.wrap(f_affine, name="f")
    x = data(16)
    y = tf(x)
    assert same(y, f_affine(x))
    assert last_step(tree).kind == "warmup" and last_step(tree).node == 0
    snap = tree.snapshot()
    assert snap.node(0).kind == "warmup" and snap.state == "warmup"
    del y

    y = tf(x)
    assert same(y, f_affine(x))
    rec = last_step(tree)
    assert (rec.kind, rec.node, rec.parent, rec.function) == ("record", 1, None, "f")
    assert "recording a new root" in rec.reason
    snap = tree.snapshot()
    assert snap.node(1).kind == "graph" and snap.node(1).parent is None and snap.node(1).replays == 0
    assert snap.state == "recording"
    del y

    y = tf(x)
    assert same(y, f_affine(x))
    ex = last_step(tree)
    assert (ex.kind, ex.node) == ("execute", 1)
    assert "replays node 1" in ex.reason
    assert tree.snapshot().node(1).replays == 1 and tree.state == "execution"
    del y

    y = tf(x)
    assert same(y, f_affine(x))
    assert tree.snapshot().node(1).replays == 2
    assert kinds(tree) == ["warmup", "path_end", "record", "path_end", "execute", "path_end", "execute"]
    assert len(tree.nodes) == 2  # replays add no nodes


def test_results_equal_eager_bit_for_bit_with_new_inputs_every_call(tree):
    w = data(8, 8, seed=100)

    def fn(x):
        return (x @ w).softmax(-1).cumsum(-1) * x.sin()

    tf = tree.wrap(fn, name="fn")
    for i in range(6):
        x = data(4, 8, seed=i)
        y = tf(x)
        assert same(y, fn(x)), f"call {i} differs from eager"
        del y
    assert tree.trace.counts()["execute"] == 4


def test_replay_hands_back_the_recorded_static_buffer(tree):
    tf = tree.wrap(f_affine, name="f")
    for i in range(2):
        y = tf(data(16, seed=i))
        del y
    recorded_address = tree.snapshot().node(1).outputs[0].address
    pointers = set()
    for i in range(3):
        x = data(16, seed=10 + i)
        y = tf(x)
        assert last_step(tree).kind == "execute"
        assert same(y, f_affine(x))
        pointers.add(y.data_ptr())
        assert tree.snapshot().node(1).outputs[0].address == recorded_address
        del y
    assert len(pointers) == 1  # every replay returns the same memory


def test_next_replay_overwrites_the_static_buffer_of_an_output_kept_across_mark_step(tree):
    tf = tree.wrap(f_affine, name="f")
    for i in range(2):
        y = tf(data(16, seed=i))
        del y
    x1, x2 = data(16, seed=1), data(16, seed=2)
    y1 = tf(x1)
    assert last_step(tree).kind == "execute"
    ptr = y1.data_ptr()
    tree.mark_step()
    y2 = tf(x2)
    assert last_step(tree).kind == "execute"
    assert y2.data_ptr() == ptr  # the memory y1 pointed at now holds the new result
    assert same(y2, f_affine(x2))
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
        y1.sum()


def test_outputs_sharing_storage_alias_after_replay(tree):
    def fn(x):
        y = x * 3
        return y, y.view(2, 4)

    tf = tree.wrap(fn, name="fn")
    for i in range(3):
        x = data(8, seed=i)
        a, b = tf(x)
        assert same((a, b), fn(x))
        if i < 2:
            del a, b
    assert last_step(tree).kind == "execute"
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    outs = tree.snapshot().node(1).outputs
    assert outs[0].alias_of is None and outs[1].alias_of == "output 0"
    assert [o.state for o in outs] == ["live", "live"]
    a.add_(1)
    assert same(b, (fn(x)[0] + 1).view(2, 4))  # writing one output is visible through the other


def test_output_aliasing_a_copied_input_keeps_its_value_after_the_next_replay(tree):
    tf = tree.wrap(lambda x: (x, x * 2), name="f")
    for _ in range(3):
        out = tf(torch.zeros(4))
        del out
    ones = torch.ones(4)
    a, b = tf(ones)  # a replay; keep the output that is input 0
    assert last_step(tree).kind == "execute"
    assert a.data_ptr() == ones.data_ptr()  # as eagerly: the caller's own tensor
    del b
    c, d = tf(torch.full((4,), 7.0))
    assert same(a, torch.ones(4)), f"kept output now holds {a.tolist()}"
    assert tree.snapshot().node(1).outputs[0].alias_of == "input 0"


def test_output_aliasing_a_static_input_is_that_input(tree):
    tf = tree.wrap(lambda x, w: (w, x * w), static=(1,), name="f")
    x, w = data(4), data(4, seed=1)
    for _ in range(3):
        a, b = tf(x, w)
        assert a is w or a.data_ptr() == w.data_ptr()
        assert same(b, x * w)
        del a, b
    assert tree.snapshot().node(1).outputs[0].alias_of == "input 1"


OUTPUT_STRUCTURES = {
    "dict and list": lambda x: {"a": x + 1, "b": [x * 2, x * 3]},
    "same tensor twice": lambda x: (x * 2,) * 2,
    "transposed view": lambda x: (x * 2).view(2, 4).t(),
    "expanded view": lambda x: (x + 1).expand(3, 8),
    "view of the input": lambda x: x[1:],
    "0-dim": lambda x: x.sum(),
    "int64": lambda x: (x * 10).to(torch.int64),
    "bool": lambda x: x > 0,
    "complex": lambda x: torch.view_as_complex((x * 1).view(4, 2)),
    "zero-size and non-tensor": lambda x: (x * 2, torch.empty(0), 3, None),
    "in-place on an intermediate": lambda x: (x * 2).add_(1).mul_(3),
}


def flat(out) -> list:
    return torch.utils._pytree.tree_flatten(out)[0]


@pytest.mark.parametrize("structure", list(OUTPUT_STRUCTURES))
def test_output_structures_replay_equal_to_eager(tree, structure):
    fn = OUTPUT_STRUCTURES[structure]
    tf = tree.wrap(fn, name="fn")
    for i in range(4):
        x = data(8, seed=i)
        out, expected = tf(x), fn(x)
        assert torch.utils._pytree.tree_structure(out) == torch.utils._pytree.tree_structure(expected)
        got, want = flat(out), flat(expected)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(w, torch.Tensor):
                assert torch.equal(g, w) and g.shape == w.shape and g.dtype == w.dtype
            else:
                assert g == w
        del out, got, g
    assert [s.kind for s in tree.trace.expanded()][-2:] == ["path_end", "execute"]


# -- the tree's shape -------------------------------------------------------------------------
def chain_tree():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x + 1, name="f")
    g = tree.wrap(lambda x: x * 2, name="g")
    h = tree.wrap(lambda x: x - 3, name="h")
    return tree, f, g, h


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
    z = g(f(data(8)))
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
    c = G(a)  # the new child replays when the same outputs are live again
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


# -- static and copied inputs -----------------------------------------------------------------
def matmul(x, w):
    return torch.tanh(x @ w)


def test_static_input_in_place_replays_and_reads_its_current_values(tree):
    tf = tree.wrap(matmul, static=(1,), name="f")
    x, w = data(4, 8, seed=1), data(8, 8, seed=2)
    for _ in range(2):
        y = tf(x, w)
        del y
    with torch.no_grad():
        w.mul_(0.5)  # same address, new values (an optimizer step)
    y = tf(x, w)
    assert last_step(tree).kind == "execute"
    assert same(y, matmul(x, w))


def test_moved_static_input_rerecords_and_names_both_addresses(tree):
    tf = tree.wrap(matmul, static=(1,), name="f")
    x, w = data(4, 8, seed=1), data(8, 8, seed=2)
    for _ in range(3):
        y = tf(x, w)
        del y
    w2 = w.clone()  # same values, new address
    y = tf(x, w2)
    rec = last_step(tree)
    assert rec.kind == "record" and rec.parent is None and rec.node == 2
    assert f"static input 1 moved from {hex(w.data_ptr())} to {hex(w2.data_ptr())}" in rec.reason
    assert re.search(r"static input 1 moved from 0x[0-9a-f]+ to 0x[0-9a-f]+", rec.reason)
    assert same(y, matmul(x, w2))
    del y
    y = tf(x, w2)
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", 2)
    del y
    y = tf(x, w)  # back at the first address: the first graph replays again
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", 1)


def test_static_input_moving_every_call_records_again_without_limit():
    """As torch's trees: a replaced parameter is recorded again at each new address; moves of
    static inputs do not count towards rerecord_limit."""
    tree = cgviz.Tree("sim", rerecord_limit=1)
    tf = tree.wrap(matmul, static=(1,), name="f")
    x, w = data(4, 8, seed=1), data(8, 8, seed=2)
    for _ in range(2):
        y = tf(x, w)
        del y
    weights = [w.clone() for _ in range(4)]  # all kept alive: each address is new
    for wi in weights:
        y = tf(x, wi)
        assert last_step(tree).kind == "record" and "static input 1 moved" in last_step(tree).reason
        assert same(y, matmul(x, wi))
        del y
    assert not steps_of(tree, "eager")


def test_moved_path_output_past_rerecord_limit_runs_eagerly_there():
    """g recorded on a row of f's output, later given other rows (other addresses in the path's
    memory): each such move counts; past rerecord_limit g runs eagerly under that node."""
    tree = cgviz.Tree("sim", rerecord_limit=1)
    tf = tree.wrap(lambda x: x + 1, name="f")
    tg = tree.wrap(lambda r: r * 2, name="g")
    x = data(4, 8, seed=3)
    for _ in range(3):
        y = tf(x)
        z = tg(y[0])
        del y, z
    assert last_step(tree).kind == "execute"
    decisions = []
    for row in (1, 2, 3):
        y = tf(x)
        z = tg(y[row])
        assert same(z, (x[row] + 1) * 2)
        decisions.append(last_step(tree))
        del y, z
    assert [d.kind for d in decisions] == ["record", "eager", "eager"]
    assert "was output 0 of node" in decisions[0].reason
    assert "rerecord_limit=1" in decisions[1].reason and "under node" in decisions[1].reason


def test_non_static_input_is_copied_so_later_mutation_does_not_change_the_output(tree):
    tf = tree.wrap(lambda x: x * 3, name="f")
    x = torch.ones(4)
    y = tf(x)
    del y
    for kind in ("record", "execute"):
        y = tf(x)
        assert last_step(tree).kind == kind
        x.fill_(5)  # the graph computed from its own copy
        assert same(y, torch.full((4,), 3.0))
        del y
        x.fill_(1)


def test_another_tensor_of_the_same_shape_replays_with_its_values(tree):
    tf = tree.wrap(lambda x: x * 3, name="f")
    for _ in range(2):
        y = tf(torch.ones(4))
        del y
    x2 = torch.arange(4.0)
    y = tf(x2)
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", 1)
    assert same(y, x2 * 3)


# -- generations and invalidation -------------------------------------------------------------
def replayed_output(tree, fn=f_affine):
    tf = tree.wrap(fn, name="f")
    for i in range(2):
        y = tf(data(16, seed=i))
        del y
    y = tf(data(16, seed=5))
    assert last_step(tree).kind == "execute"
    return tf, y


def test_mark_step_starts_a_generation_ends_the_path_and_invalidates_live_outputs(tree):
    tf, y = replayed_output(tree)
    assert tree.generation == 1
    tree.mark_step()
    gen = last_step(tree)
    assert gen.kind == "generation" and gen.generation == 2 and tree.generation == 2
    assert gen.invalidated == [[1, 0]]
    assert "generation 1 ends, generation 2 begins" in gen.reason and "output 0 of node 1" in gen.reason
    assert tree.current is None and tree.state == "none"
    assert gen.snapshot.path == [] and gen.snapshot.node(1).outputs[0].state == "invalid"


def test_mark_step_with_nothing_live_invalidates_nothing(tree):
    tf = tree.wrap(f_affine, name="f")
    y = tf(data(4))
    del y
    tree.mark_step()
    gen = last_step(tree)
    assert gen.invalidated == [] and "nothing live was invalidated" in gen.reason


USES = {
    "print": lambda y, tf: print(y),
    "repr": lambda y, tf: repr(y),
    "arithmetic": lambda y, tf: y + 1,
    "torch function": lambda y, tf: torch.add(y, 1),
    "reduction": lambda y, tf: y.sum(),
    "indexing": lambda y, tf: y[0],
    "shape": lambda y, tf: y.shape,
    "clone": lambda y, tf: y.clone(),
    "in place": lambda y, tf: y.add_(1),
    "tolist": lambda y, tf: y.tolist(),
    "tree function": lambda y, tf: tf(y),
}


@pytest.mark.parametrize("use", list(USES))
def test_any_use_of_an_invalidated_output_raises_naming_function_node_and_generations(tree, use):
    tf, y = replayed_output(tree)
    tree.mark_step()
    with pytest.raises(RuntimeError) as info:
        USES[use](y, tf)
    message = str(info.value)
    assert "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run" in message
    assert "of f" in message and "node 1" in message
    assert "generation 1" in message and "began generation 2" in message


def test_views_taken_before_invalidation_also_raise(tree):
    tf, y = replayed_output(tree)
    v, t = y[2:], y.view(4, 4).t()
    tree.mark_step()
    for view in (v, t):
        with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
            view * 2


def test_warmup_and_recording_outputs_are_invalidated_too(tree):
    tf = tree.wrap(f_affine, name="f")
    y0 = tf(data(4))
    tree.mark_step()
    y1 = tf(data(4))  # records (the path ended at mark_step)
    assert last_step(tree).kind == "record"
    tree.mark_step()
    assert last_step(tree).invalidated == [[1, 0]]
    for y in (y0, y1):
        with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
            y + 1


def test_passing_an_invalidated_output_to_a_tree_function_records_an_error_step(tree):
    tf, y = replayed_output(tree)
    tree.mark_step()
    nodes = len(tree.nodes)
    with pytest.raises(RuntimeError, match="began generation 2"):
        tf(y)
    err = last_step(tree)
    assert err.kind == "error" and err.function == "f" and err.node is None
    assert "overwritten by a subsequent run" in err.reason
    assert len(tree.nodes) == nodes
    x = data(16, seed=9)
    y = tf(x)  # the tree still works, in the new generation
    assert same(y, f_affine(x)) and last_step(tree).kind == "execute" and last_step(tree).generation == 2


def test_outputs_of_the_new_generation_are_valid_and_values_are_right(tree):
    tf, y = replayed_output(tree)
    tree.mark_step()
    x = data(16, seed=3)
    y_new = tf(x)
    assert same(y_new, f_affine(x))
    tree.mark_step()
    assert last_step(tree).invalidated == [[1, 0]]


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
    y = tf(data(2))  # graphed shapes still replay
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


# -- trace levels -----------------------------------------------------------------------------
def run_loop(tree, calls: int = 4):
    tf = tree.wrap(f_affine, name="f")
    for i in range(calls):
        x = data(8, seed=i)
        y = tf(x)
        assert same(y, f_affine(x))
        del y


def test_trace_none_records_no_steps():
    tree = cgviz.Tree("sim", trace=None)
    run_loop(tree)
    assert tree.trace.steps == [] and tree.trace_level is None
    assert len(tree.nodes) == 2  # the tree itself still works
    assert "not recorded" in tree.explain()


def test_trace_events_records_steps_without_snapshots():
    tree = cgviz.Tree("sim", trace="events")
    run_loop(tree)
    assert kinds(tree) == ["warmup", "path_end", "record", "path_end", "execute", "path_end", "execute"]
    assert all(s.snapshot is None for s in tree.trace.steps)


def test_trace_full_takes_a_snapshot_after_each_step():
    tree = cgviz.Tree("sim", trace="full")
    run_loop(tree)
    steps = tree.trace.expanded()
    assert all(s.snapshot is not None for s in tree.trace.steps)
    assert [len(s.snapshot.nodes) for s in steps] == [1, 1, 2, 2, 2, 2, 2]
    assert [s.snapshot.state for s in steps] == [
        "warmup", "none", "recording", "none", "execution", "none", "execution"
    ]
    assert tree.trace.meta["backend"] == "sim" and tree.trace.meta["trace_level"] == "full"


def test_step_indices_are_positions_and_trace_counts_add_up():
    tree = cgviz.Tree("sim")
    run_loop(tree, calls=6)
    assert [s.index for s in tree.trace.steps] == list(range(len(tree.trace.steps)))
    counts = tree.trace.counts()
    assert counts["warmup"] == 1 and counts["record"] == 1 and counts["execute"] == 4
    assert tree.trace.calls == sum(counts.values()) == len(tree.trace.expanded())


def test_a_replay_loop_folds_into_a_few_stored_steps_with_repeat_counts():
    tree = cgviz.Tree("sim")
    run_loop(tree, calls=50)
    trace = tree.trace
    assert len(trace.steps) < 10  # a long replay loop stays small
    folded = [s for s in trace.steps if s.repeat > 1]
    assert folded and all(s.span >= 1 for s in folded)
    assert trace.counts()["execute"] == 48 and trace.counts()["record"] == 1
    # warmup, then path_end + (record | execute) for each later call
    assert trace.calls == 99 == len(trace.expanded())
    assert [s.kind for s in trace.expanded()[-4:]] == ["path_end", "execute", "path_end", "execute"]
    assert "×" in folded[-1].headline()


def test_folded_steps_keep_the_latest_snapshot():
    tree = cgviz.Tree("sim")
    run_loop(tree, calls=10)
    last = tree.trace.steps[-1]
    assert last.repeat > 1 and last.kind == "execute"
    assert last.snapshot.node(1).replays == 8


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
    c = G(a)
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


# -- explain(), the default tree, decorators ----------------------------------------------------
def test_explain_names_the_path_live_outputs_and_the_last_reasons():
    tree, f, g, _ = chain_tree()
    x = data(8)
    for _ in range(2):
        z = g(f(x))
        del z
    y = f(x)
    z = g(y)
    text = tree.explain()
    assert "current path: 2 (f) → 3 (g)" in text
    assert "output 0 of node 2 (f)" in text and "output 0 of node 3 (g)" in text
    assert "roots" in text and "node 3 g" in text
    assert "last decisions:" in text
    assert last_step(tree).reason in text
    last = last_step(tree)  # steps counted from 1, as the explorer and the CLI count them
    assert f"  step {last.index + 1}: {last.headline()}" in text.splitlines()
    del y, z
    tree.mark_step()
    text = tree.explain()
    assert "current path: none" in text and "generation 2" in text


def test_explain_lists_functions_that_run_eagerly_and_why(tree):
    tf = tree.wrap(lambda x: x * x.sum().item(), name="syncs")
    for _ in range(2):
        tf(torch.ones(3))
    assert "eager: syncs runs eagerly" in tree.explain()


def test_default_tree_is_auto_which_is_sim_without_cuda(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("auto picks cuda on this machine")
    monkeypatch.setattr(cgviz, "_default_tree", None)
    tree = cgviz.default_tree()
    assert tree is cgviz.default_tree()
    assert tree.backend.name == "sim" and tree.name == "default"

    @cgviz.graphed
    def plus(x):
        return x + 1

    @cgviz.graphed(static=(1,))
    def scale(x, w):
        return x * w

    assert plus.tree is tree and scale.tree is tree and scale.static == (1,)
    x, w = data(4), data(4, seed=1)
    for _ in range(3):
        a = plus(x)
        assert same(a, x + 1)
        del a
    assert last_step(tree).kind == "execute" and last_step(tree).function == "plus"
    for _ in range(3):
        b = scale(x, w)
        assert same(b, x * w)
        del b
    assert last_step(tree).kind == "execute" and last_step(tree).function == "scale"


def test_tree_graphed_decorator_with_static_keeps_the_function_and_name(tree):
    @tree.graphed(static=(1,))
    def scale(x, w):
        """Scale x by w."""
        return x * w

    @tree.graphed
    def plain(x):
        return x - 1

    assert scale.static == (1,) and scale.name == "scale" and scale.__doc__ == "Scale x by w."
    assert plain.static == () and tree.functions == {"scale": scale, "plain": plain}
    x, w = data(4), data(4, seed=1)
    for _ in range(3):
        y = scale(x, w)
        assert same(y, x * w)
        del y
    w2 = w.clone()
    y = scale(x, w2)
    assert "static input 1 moved" in last_step(tree).reason


def test_wrapping_two_functions_with_one_name_keeps_both(tree):
    a = tree.wrap(lambda x: x + 1, name="f")
    b = tree.wrap(lambda x: x + 2, name="f")
    assert a.name == "f" and b.name != "f" and set(tree.functions) == {"f", b.name}


# -- the scenarios ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scenario_runs():
    return {name: run_scenario(name, "sim") for name in SCENARIOS}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_results_equal_eager(scenario_runs, name):
    run = scenario_runs[name]
    assert run.mismatches == []
    assert run.tree.backend.name == "sim"
    assert run.trace.meta["scenario"] == name
    assert run.trace.steps and all(s.snapshot is not None for s in run.trace.steps)
    expected_errors = 1 if name == "generations" else 0
    assert len(steps_of(run.tree, "error")) == expected_errors == len(run.errors)


def test_run_scenario_rejects_an_unknown_name():
    with pytest.raises(KeyError, match="unknown scenario 'nope'"):
        run_scenario("nope", "sim")


def test_scenario_chain_structure(scenario_runs):
    snap = scenario_runs["chain"].trace.last_snapshot()
    assert [(n.function, n.parent) for n in graph_nodes(snap)] == [("f", None), ("g", 3), ("h", 4)]
    assert [n.replays for n in graph_nodes(snap)] == [2, 2, 2]


def test_scenario_branching_structure(scenario_runs):
    tree = scenario_runs["branching"].tree
    snap = tree.trace.last_snapshot()
    (a,) = graph_nodes(snap, "A")
    (b,) = graph_nodes(snap, "B")
    (bp,) = graph_nodes(snap, "B'")
    assert a.parent is None and b.parent == a.id and bp.parent == a.id
    assert {b.id, bp.id} <= set(a.children)
    restore_then = [
        (s.kind, tree.trace.steps[s.index + 1].kind, tree.trace.steps[s.index + 1].function)
        for s in steps_of(tree, "checkpoint_restore")
    ]
    assert ("checkpoint_restore", "record", "B'") in restore_then


def test_scenario_generations_structure(scenario_runs):
    run = scenario_runs["generations"]
    (err,) = steps_of(run.tree, "error")
    assert "overwritten by a subsequent run" in err.reason and err.function == "g"
    assert "overwritten by a subsequent run" in run.errors[0]
    gens = steps_of(run.tree, "generation")
    assert len(gens) == 5 and gens[-1].generation == 6
    assert all(s.invalidated for s in gens[1:])


def test_scenario_fwd_bwd_structure(scenario_runs):
    tree = scenario_runs["fwd_bwd"].tree
    fw_records = [s for s in steps_of(tree, "record") if s.function == "forward"]
    assert len(fw_records) == 2
    first, second = fw_records
    assert first.parent is None and second.parent == first.node
    assert "pending backward" in second.reason


def test_scenario_static_move_structure(scenario_runs):
    tree = scenario_runs["static_move"].tree
    moved = [s for s in steps_of(tree, "record") if "static input 1 moved" in s.reason]
    assert len(moved) == 4  # every move records again: no limit for static inputs
    assert all(s.parent is None for s in moved)
    assert steps_of(tree, "eager") == []


def test_scenario_dynamic_shapes_structure(scenario_runs):
    tree = scenario_runs["dynamic_shapes"].tree
    roots = [n for n in graph_nodes(tree.trace.last_snapshot()) if n.parent is None]
    assert len(roots) == 3 and len({n.signature for n in roots}) == 3
    (eager,) = steps_of(tree, "eager")
    assert "shape_limit=3" in eager.reason


def test_scenario_training_structure(scenario_runs):
    tree = scenario_runs["training"].tree
    assert [n.kind for n in tree.trace.last_snapshot().nodes] == ["warmup", "graph"]
    assert tree.trace.counts()["execute"] == 4 and tree.trace.counts()["eager"] == 0


# -- random programs: replays never overwrite what the user still holds ------------------------
def _f(x):
    return x * 2 + 1


def _g(x):
    return x.sin() * x


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("f"), st.integers(0, 3)),  # f on a fresh input (seed)
        st.tuples(st.just("g"), st.integers(0, 7)),  # g on a kept output (index)
        st.tuples(st.just("drop"), st.integers(0, 7)),
        st.tuples(st.just("mark_step"), st.just(0)),
    ),
    max_size=24,
)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_random_programs_equal_eager_and_never_overwrite_live_outputs(ops):
    tree = cgviz.Tree("sim", trace="events")
    F, G = tree.wrap(_f, name="f"), tree.wrap(_g, name="g")
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # (tree output, its eager value)
    invalidated: list[torch.Tensor] = []
    for op, k in ops:
        if op == "f":
            x = data(8, seed=k)
            kept.append((F(x), _f(x)))
        elif op == "g" and kept:
            src, expected = kept[k % len(kept)]
            kept.append((G(src), _g(expected)))
        elif op == "drop" and kept:
            kept.pop(k % len(kept))
        elif op == "mark_step":
            tree.mark_step()
            invalidated += [t for t, _ in kept]
            kept = []
        for t, expected in kept:
            assert torch.equal(t, expected)
    for t in invalidated:
        with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
            t + 1
    assert not steps_of(tree, "error") and not steps_of(tree, "eager")


def test_subscribe_is_public_and_hands_each_recorded_step():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x + 1, name="f")
    seen = []
    stop = tree.subscribe(seen.append)
    f(data(4))
    assert [s.kind for s in seen] == ["warmup"] and seen[0] is tree.trace.steps[0]
    stop()
    f(data(4))
    assert len(seen) == 1
    with pytest.raises(TypeError, match="subscribe needs a callable"):
        tree.subscribe("not a function")
