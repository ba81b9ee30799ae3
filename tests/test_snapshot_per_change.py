"""trace="full" takes a snapshot only when what it shows changed; the stored trace is the one a
snapshot at every decision gives, on every scenario (sim here; tests/gpu for cuda). Replay-loop
decisions are noted and logged in batches (at "full", those the log would only count); the
stored trace is the one logging each decision at once gives."""

from __future__ import annotations

import random
import re

import pytest
import torch

import cgviz
from cgviz.engine import recorder
from cgviz.scenarios import SCENARIOS, run_scenario
from cgviz.trace.fold import StepLog
from cgviz.trace.model import NodeView, Snapshot, Step
from snapshot_twins import same_steps, scenario_with_twin, tree_with_twin


@pytest.mark.parametrize("batch", [1, 7, recorder.RAW_BATCH])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_scenario_stores_the_trace_a_snapshot_per_decision_gives(name, batch, monkeypatch):
    monkeypatch.setattr(recorder, "RAW_BATCH", batch)
    steps, twin = scenario_with_twin(name, "sim", monkeypatch)
    assert same_steps(steps, twin)
    assert all(s.snapshot is not None for s in steps)


def test_the_twin_check_sees_a_snapshot_brought_forward_wrongly(monkeypatch):
    """A kept snapshot not brought forward by the repetitions counted in bulk: the replay counts
    it shows lag behind, and the twin check fails."""
    from cgviz.trace import fold

    monkeypatch.setattr(fold, "bring_forward", lambda snapshot, change: None)
    steps, twin = scenario_with_twin("training", "sim", monkeypatch)
    assert not same_steps(steps, twin)


def _decisions(steps: list) -> list:
    """Steps without their times and addresses (two runs differ in both)."""
    return [(s.index, s.kind, re.sub(r"0x[0-9a-f]+", "0x…", s.reason), s.generation, s.function, s.node, s.parent, s.repeat, s.span, s.invalidated)
            for s in steps]


@pytest.mark.parametrize("batch", [1, 7, recorder.RAW_BATCH])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_events_noted_in_batches_store_the_trace_logging_each_at_once_gives(name, batch, monkeypatch):
    monkeypatch.setattr(recorder, "RAW_BATCH", batch)
    traces = []
    for listening in (False, True):  # a listener is told of each step at once: nothing is noted
        tree = cgviz.Tree("sim", trace="events", name=name, **SCENARIOS[name].tree_options)
        if listening:
            tree.subscribe(lambda step: None)
        run_scenario(name, tree=tree)
        traces.append(tree.trace)
    noted, logged = traces
    assert _decisions(noted.steps) == _decisions(logged.steps)
    assert sum(s.duration > 0 for s in noted.steps) == len(noted.steps)
    assert noted.counts() == logged.counts()


def test_a_long_loop_at_events_is_noted_and_counted():
    tree = cgviz.Tree("sim", trace="events")
    f = tree.wrap(lambda x: x + 1, name="f")
    x = torch.randn(4)
    for _ in range(2 * recorder.RAW_BATCH + 5):  # two batches logged, the third read half noted
        f(x)
    steps = tree.trace.steps
    assert tree.trace.counts()["execute"] == 2 * recorder.RAW_BATCH + 3
    assert len(steps) <= 5 and steps[-1].repeat == 2 * recorder.RAW_BATCH + 3  # path end and replay, per call


def test_a_steady_replay_loop_takes_no_snapshot_per_call(monkeypatch):
    tree, log = tree_with_twin(monkeypatch, "sim", trace="full")
    f = tree.wrap(lambda x: (x * 2).relu(), name="f")
    x = torch.randn(8)
    for _ in range(50):
        f(x)
    assert log.skipped >= 2 * 40  # path_end and execute of each steady call
    assert len(log._raw) >= 2 * 40  # noted, not logged yet
    steps = tree.trace.steps
    assert same_steps(steps, log.twin_steps())
    assert steps[-1].snapshot.node(steps[-1].node).replays == tree.nodes[-1].replays


def test_an_output_dying_between_identical_decisions_takes_a_new_snapshot(monkeypatch):
    """g was recorded while f's first output was held, so it replays whether that output is held
    or not; held on every other call, the decisions repeat, what g's replay shows does not."""
    tree, log = tree_with_twin(monkeypatch, "sim", trace="full")
    f = tree.wrap(lambda x: (x * 2, x + 1), name="f")
    g = tree.wrap(lambda b: b.relu(), name="g")
    x = torch.randn(8)
    states = []
    for i in range(24):
        a, b = f(x)
        if i > 6 and i % 2:
            del a
        g(b)
        states.append(tree.snapshot().node(tree.current.parent.id).outputs[0].state)
        a = b = None
    assert states[-2:] == ["live", "dead"]
    steps = tree.trace.steps
    assert same_steps(steps, log.twin_steps())
    assert log.skipped > 0
    last_g = [s for s in steps if s.kind == "execute" and s.function == "g"][-1]
    assert last_g.snapshot.node(last_g.parent).outputs[0].state == "dead"


def _world_step(kind: str, node: int) -> Step:
    return Step(index=0, kind=kind, reason=f"{kind} {node}", generation=1, node=node if kind == "execute" else None)


class _World:
    """A made-up producer's world: nodes whose replay counts rise at each execute, a generation
    that rises at each generation step, and a `shown` value that a snapshot shows (the test
    changes it between decisions, as an output dying). `decisions`: random loops, each block
    repeated a number of times drawn from `repeats`."""

    def __init__(self, seed: int, repeats: tuple[int, int]) -> None:
        self.rng = rng = random.Random(seed)
        self.replays = {n: 0 for n in range(3)}
        self.shown, self.generation = 0, 1
        self.decisions = []
        for _ in range(rng.randint(1, 8)):
            pattern = [(rng.choice(["execute", "path_end", "generation"]), rng.randrange(3))
                       for _ in range(rng.randint(1, 4))]
            self.decisions += pattern * rng.randint(*repeats) + [("execute", rng.randrange(3))] * rng.randint(0, 2)

    def snap(self) -> Snapshot:
        views = [NodeView(n, "f", "graph", None, [], 1, r, []) for n, r in self.replays.items()]
        return Snapshot(views, None, [self.shown], "execution", self.generation)

    def decide(self, kind: str, node: int) -> None:
        if kind == "execute":
            self.replays[node] += 1
        elif kind == "generation":
            self.generation += 1


@pytest.mark.parametrize("seed", range(40))
def test_per_change_snapshots_equal_per_decision_ones_on_random_loops(seed):
    """A made-up producer (`_World`) whose `shown` value sometimes changes between decisions."""
    world = _World(seed, (1, 6))
    rng = world.rng
    lazy_steps: list = []
    lazy, eager = StepLog(lazy_steps), StepLog([])
    for kind, node in world.decisions:
        if rng.random() < 0.1:
            world.shown += 1
        world.decide(kind, node)
        key = (kind, node)
        eager.add(key, lambda k=kind, n=node: _world_step(k, n), 1.0, snap=world.snap)
        lazy.add(key, lambda k=kind, n=node: _world_step(k, n), 1.0, state=world.shown, snap=world.snap)
        if rng.random() < 0.05:  # read half way through a repetition
            lazy.flush()
            eager.flush()
    lazy.flush()
    eager.flush()
    assert [(s.kind, s.repeat, s.span) for s in lazy_steps] == [(s.kind, s.repeat, s.span) for s in eager.steps]
    assert lazy_steps == eager.steps


class _NotingProducer:
    """A producer that notes the decisions its log would only count, as the tree's recorder does
    (StepLog.expected), and logs them in batches (StepLog.count_repetitions)."""

    def __init__(self, snap) -> None:
        self.log, self.snap, self.notes, self.expect = StepLog([]), snap, [], None

    def decide(self, key, make, state) -> None:
        if self.expect is not None:
            keys, states, at = self.expect
            if keys[at] == key and states[at] == state:
                self.expect[2] = (at + 1) % len(keys)
                self.notes.append((key, 1.0, state, make))
                return
        self.catch_up()
        self.log.add(key, make, 1.0, state=state, snap=self.snap)
        self.expect = self.log.expected()

    def catch_up(self) -> None:
        notes, self.notes, i = self.notes, [], 0
        while i < len(notes):
            i = self.log.count_repetitions(notes, i)
            if i < len(notes):
                key, duration, state, make = notes[i]
                self.log.add(key, make, duration, state=state, snap=self.snap)
                i += 1
        self.expect = self.log.expected()


@pytest.mark.parametrize("seed", range(40))
def test_noted_decisions_logged_in_batches_equal_a_snapshot_per_decision(seed):
    """The made-up producer of the test above, noting what its log would only count: whatever
    the batches, the steps are those of a snapshot taken at every decision. A noted decision
    that needed a snapshot would take it late, at the catch-up, and differ."""
    world = _World(seed, (2, 12))
    rng = world.rng
    noting, eager = _NotingProducer(world.snap), StepLog([])
    for kind, node in world.decisions:
        if rng.random() < 0.15:  # what a snapshot shows changes, and sometimes changes back
            world.shown = rng.randrange(3)
        world.decide(kind, node)
        make = lambda k=kind, n=node: _world_step(k, n)  # noqa: E731
        eager.add((kind, node), make, 1.0, snap=world.snap)
        noting.decide((kind, node), make, world.shown)
        if rng.random() < 0.1:
            noting.catch_up()
        if rng.random() < 0.03:  # read half way through a repetition
            noting.catch_up()
            noting.log.flush()
            noting.expect = noting.log.expected()
            eager.flush()
    noting.catch_up()
    noting.log.flush()
    eager.flush()
    assert noting.log.steps == eager.steps
