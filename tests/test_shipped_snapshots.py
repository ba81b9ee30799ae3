"""Every snapshot of a shipped trace shows its step's last repetition: a folded block keeps the
snapshots of its newest repetition, so the replay counts and the generation each shows are those
reached through it (the executes and generations before it, counted with their repeats)."""

from __future__ import annotations

from collections import Counter

import pytest

from cgviz.data import (
    ddp_traces, gpu_trace, gpu_trace_names, graph_trace, graph_trace_names, surprise_names, surprise_trace, torch_trace,
    torch_trace_names,
)
from cgviz.trace.io import load_trace
from cgviz.trace.model import Trace

SHIPPED = ([("gpu", n) for n in gpu_trace_names()] + [("torch", n) for n in torch_trace_names()]
           + [("surprises", n) for n in surprise_names()] + [("graphs", n) for n in graph_trace_names()])
LOADERS = {"gpu": gpu_trace, "torch": torch_trace, "surprises": surprise_trace, "graphs": graph_trace}


def stale_snapshots(trace: Trace) -> list[tuple]:
    """(step index, what, shown, expected) for each snapshot whose generation or replay counts are
    not those reached at its step's last repetition (its last place in `Trace.expanded()`)."""
    replays, generations = Counter(), 0
    first: dict[int, int] = {}  # id(step) -> generation steps seen before its first repetition
    reached: dict[int, tuple] = {}  # id(step) -> (step, replays and generation steps at its last)
    for s in trace.expanded():
        replays[s.node] += s.kind == "execute"
        generations += s.kind == "generation"
        first.setdefault(id(s), generations)
        reached[id(s)] = (s, Counter(replays), generations)
    found = []
    for s, counts, at in reached.values():
        if s.snapshot is None:
            continue
        generation = s.generation + at - first[id(s)]
        if s.snapshot.generation != generation:
            found.append((s.index, "generation", s.snapshot.generation, generation))
        found += [(s.index, f"node {v.id} replays", v.replays, counts[v.id])
                  for v in s.snapshot.nodes if v.kind == "graph" and v.replays != counts[v.id]]
    return found


@pytest.mark.parametrize("family,name", SHIPPED, ids=[f"{f}/{n}" for f, n in SHIPPED])
def test_a_shipped_snapshot_shows_its_steps_last_repetition(family, name):
    assert stale_snapshots(LOADERS[family](name)) == []


@pytest.mark.parametrize("run", ["clean", "planted"])
def test_the_ddp_traces_snapshots_show_their_steps_last_repetition(run):
    assert all(stale_snapshots(load_trace(path)) == [] for path in ddp_traces(run))


def test_a_snapshot_left_at_an_earlier_repetition_is_found():
    """The check itself: a block repeated three times whose kept snapshots show the second."""
    trace = torch_trace("torch_training")
    block_end = next(s for s in trace.steps if s.repeat > 1)
    assert block_end.repeat == 3 and stale_snapshots(trace) == []
    first = trace.steps[block_end.index - block_end.span + 1]
    first.snapshot.generation -= 1
    for view in block_end.snapshot.nodes:
        view.replays -= 1
    found = stale_snapshots(trace)
    assert (first.index, "generation", first.snapshot.generation, first.snapshot.generation + 1) in found
    assert {what for index, what, _, _ in found if index == block_end.index} == {"node 2 replays", "node 3 replays"}
