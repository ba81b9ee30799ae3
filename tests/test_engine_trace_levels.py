"""What a tree records at each trace level, and how a replay loop folds into a few stored steps."""

from __future__ import annotations

import pytest

import cgviz
from helpers import data, f_affine, kinds, same


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
    # the 48 replays, each a (path_end, execute) pair, are one stored step: a long replay loop stays small
    stored = [(s.kind, s.repeat, s.span) for s in trace.steps]
    assert stored == [("warmup", 1, 1), ("path_end", 1, 1), ("record", 1, 1), ("path_end", 1, 1), ("execute", 48, 2)]
    assert trace.counts()["execute"] == 48 and trace.counts()["record"] == 1
    # warmup, then path_end + (record | execute) for each later call
    assert trace.calls == 99 == len(trace.expanded())
    assert [s.kind for s in trace.expanded()[-4:]] == ["path_end", "execute", "path_end", "execute"]
    assert "×" in trace.steps[-1].headline()


def test_folded_steps_keep_the_latest_snapshot():
    tree = cgviz.Tree("sim")
    run_loop(tree, calls=10)
    last = tree.trace.steps[-1]
    assert last.repeat > 1 and last.kind == "execute"
    assert last.snapshot.node(1).replays == 8


@pytest.mark.parametrize("level", [None, "events", "full"])
def test_a_root_replay_that_raises_leaves_the_path_ended_at_every_level(level, monkeypatch):
    """A root's replay that raises after its path ended: the user's exception comes through
    unchanged, the path stays ended at every level, and the next call replays the root."""
    tree = cgviz.Tree("sim", trace=level)
    tf = tree.wrap(f_affine, name="f")
    for i in range(3):
        tf(data(8, seed=i))
    root = tree.current
    assert root.kind == "graph" and tree.state == "execution" and not root.has_invariants
    replays = root.replays
    failure = RuntimeError("the launch failed")

    def broken(*args):
        raise failure

    with monkeypatch.context() as patched:
        patched.setattr(tree.backend, "replay", broken)
        with pytest.raises(RuntimeError) as raised:
            tf(data(8, seed=9))
    assert raised.value is failure
    assert tree.current is None and tree.state == "none" and root.replays == replays
    x = data(8, seed=10)
    assert same(tf(x), f_affine(x))
    assert tree.current is root and root.replays == replays + 1
