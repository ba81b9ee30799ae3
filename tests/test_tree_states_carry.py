"""The export's node states, built step after step, reuse what the step before worked out (a node
object unchanged and untouched keeps its look, also when the tree grew a node): each step's state
must equal the state worked out for that step alone."""

from __future__ import annotations

import pytest

from cgviz.scenarios import SCENARIOS, run_scenario
from cgviz.trace.io import load_trace, save_trace
from cgviz.views.tree.frames import TreeStates


def _states_in_words(states: TreeStates, frame) -> dict[int, tuple]:
    """Per node id, its look's content and replay count (look indices differ between builders)."""
    return {node: (tuple(states.looks[look]), rep) for node, (look, rep) in frame.state().items()}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_steps_states_equal_those_worked_out_for_it_alone(name, tmp_path):
    path = tmp_path / "t.cgtrace.json"
    save_trace(run_scenario(name, "sim").trace, path)
    trace = load_trace(path)  # a loaded trace shares the node objects that did not change between snapshots
    shared = sum(a is b for s, t in zip(trace.steps, trace.steps[1:]) if s.snapshot and t.snapshot
                 for a, b in zip(s.snapshot.nodes, t.snapshot.nodes))
    assert shared, "no node object is shared between snapshots: the reuse is not exercised"
    sequential = TreeStates(lambda lines: 0)
    for step in trace.steps:
        sequential.add(step)
    grew = 0
    for i, step in enumerate(trace.steps):
        if step.snapshot is None:
            continue
        alone = TreeStates(lambda lines: 0)
        alone.add(step)
        frame = sequential.frames[i]
        prev = next((f for f in reversed(sequential.frames[:i]) if f is not None), None)
        grew += prev is not None and prev.structure is not frame.structure
        assert _states_in_words(sequential, frame) == _states_in_words(alone, alone.frames[0]), f"step {i}"
    assert grew, "the tree never changed structure: the carry-over across structures is not exercised"


def test_digits_are_equally_wide_as_the_looks_cache_assumes():
    """A node's look and box are kept for any replay count of as many digits
    (`TreeStates._card`): that holds only while every digit is as wide as the others."""
    from cgviz.views.tree.card import SIZE_META, text_width

    assert len({text_width(d, SIZE_META) for d in "0123456789"}) == 1
