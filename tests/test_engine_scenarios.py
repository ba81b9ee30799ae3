"""The scenarios (cgviz.scenarios) on the sim backend: results equal to eager and the structure
each one exists to show."""

from __future__ import annotations

import pytest

from cgviz.scenarios import SCENARIOS, run_scenario
from helpers import graph_nodes, steps_of


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
