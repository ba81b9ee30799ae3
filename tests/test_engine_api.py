"""The public API around a tree: explain(), the default tree and the graphed decorators, names,
subscribe()."""

from __future__ import annotations

import pytest
import torch

import cgviz
from helpers import chain_tree, data, last_step, same


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
    y = scale(x, w2)  # noqa: F841  (held: a live output)
    assert "static input 1 moved" in last_step(tree).reason


def test_wrapping_two_functions_with_one_name_keeps_both(tree):
    a = tree.wrap(lambda x: x + 1, name="f")
    b = tree.wrap(lambda x: x + 2, name="f")
    assert a.name == "f" and b.name != "f" and set(tree.functions) == {"f", b.name}


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


@pytest.mark.parametrize("level", ["events", "full"])
def test_a_listener_hears_a_replay_loop_once_per_repetition(level):
    """In a steady loop a call repeats the block before it: the listener is told once per call
    with the block's last step, whose repeat count has grown, and at once (nothing is held back
    while someone listens)."""
    tree = cgviz.Tree("sim", trace=level)
    f = tree.wrap(lambda x: x + 1, name="f")
    x = data(4)
    for _ in range(4):  # warmup, record, replays: the loop's block forms
        f(x)
    seen = []
    tree.subscribe(seen.append)
    for i in range(10):
        f(x)
        assert len(seen) == i + 1
    end = tree.trace.steps[-1]
    assert all(s is end for s in seen) and end.kind == "execute"
    assert end.repeat == 12 and tree.trace.counts()["execute"] == 12  # a path end and a replay per call
