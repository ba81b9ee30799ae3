"""The tree's first calls on the sim backend: warmup, record, execute; replays hand back the
recorded memory and values bit for bit equal to running the function eagerly, whatever the
outputs' structure.

The rest of the engine's semantics, one subject a module: test_engine_tree_shape.py (roots,
children, path ends, shapes, forward / backward), test_engine_inputs.py (static and copied
inputs), test_engine_generations.py (mark_step and invalidation), test_engine_trace_levels.py,
test_engine_snapshots.py, test_engine_pool.py, test_engine_api.py (explain(), the default tree,
decorators, subscribe) and test_engine_scenarios.py. Errors, fallbacks to eager and exceptions
raised by user functions are in test_engine_errors.py; random programs in
test_engine_properties.py.

Every test checks both the decisions (the trace: step kinds, nodes, parents, reasons) and
the values (bit for bit equal to running the function eagerly).
"""

from __future__ import annotations

import pytest
import torch

from helpers import data, f_affine, kinds, last_step, same


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
