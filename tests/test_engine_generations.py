"""Generations on the sim backend: mark_step() ends the path and invalidates the outputs still
live, and any later use of one raises, naming its function, node and generations."""

from __future__ import annotations

import pytest
import torch

from helpers import data, f_affine, last_step, same


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
