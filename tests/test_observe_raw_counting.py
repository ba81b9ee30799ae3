"""The observer's replay-loop events (trace level "events") are made into steps in bulk: whole
repetitions of the block before them are counted at once (StepLog.count_key_repetitions). What that
stores must be what making each event into a step one at a time stores: the steps, and what the
observer keeps besides (replay counts, the generation, decisions, invalidated outputs), for random
loops that break off, record, free paths, change device, and interleave graphs outside the trees,
read at random points and in batches of any size."""

from __future__ import annotations

import random

import pytest
from test_observe_releases import Function, Manager, Node

from cgviz.observe import observer as observer_module
from cgviz.observe import raw_events
from cgviz.observe.observer import TorchObserver
from cgviz.trace.fold import StepLog


class GraphSink:
    """Stands for the graph observer sharing the trace: what it was told, in order."""

    def __init__(self) -> None:
        self.told: list[int] = []

    def noted(self, event: int) -> None:
        self.told.append(event)


def drive(seed: int) -> tuple[TorchObserver, GraphSink]:
    """A random loop of two managers told to a fresh observer: phases that repeat a body of
    replays, path ends and generations, with decisions off the loop between them."""
    rng = random.Random(seed)
    first, second = Manager(), Manager()
    second.device_index = 1
    fwd_fn, bwd_fn, other_fn = Function(0), Function(1), Function(2)
    fwd = Node(fwd_fn)
    bwd = Node(bwd_fn, parent=fwd)
    other = Node(other_fn)
    obs = TorchObserver("events")
    sink = obs.graph_sink = GraphSink()
    obs.recorded(first, fwd_fn, None, fwd, [], None, None)
    obs.recorded(first, bwd_fn, fwd, bwd, [], None, None)
    replay, generation = obs.replayed, obs.generation_began
    bodies = [
        [(replay, fwd), (replay, bwd), (generation,)],  # a training step
        [(replay, other), (obs.path_ended, other)],
        [(replay, fwd), (replay, bwd), (replay, other), (generation,)],
        [(replay, other)],
    ]
    for _ in range(60):
        manager = second if rng.random() < 0.1 else first
        body = rng.choice(bodies)
        for _ in range(rng.randint(1, 30)):
            for event, *node in body:
                event(manager, *node)
                if rng.random() < 0.01:
                    obs.catch_up()  # the trace read mid-loop
        r = rng.random()
        if r < 0.3:  # a path's outputs freed (at a generation): invalidated until replayed
            path = rng.choice([bwd, other])
            manager.current_node = path
            for ref in path.outputs_weakrefs:
                ref.alive = rng.random() < 0.5
            obs.path_deallocating(manager, path)
            if rng.random() < 0.5:
                generation(manager)
        elif r < 0.45:
            obs.note_graph_event(rng.randrange(3))
        elif r < 0.6:  # a warning said with the next decision that is not a replay
            obs.pending_backward_warned()
        elif r < 0.75:
            obs.recorded(manager, other_fn, None, Node(other_fn), [(other, "StaticInputIdxMismatch", "moved")],
                         None, None)
        elif r < 0.85:
            replay(manager, fwd)  # a repetition broken off half way
    obs.finish()
    return obs, sink


def kept(obs: TorchObserver, sink: GraphSink) -> tuple:
    return (obs.trace.steps, dict(obs.replays), obs.generation, obs.decisions, obs._invalidated, sink.told)


@pytest.mark.parametrize("batch", [1, 7, 4096])
@pytest.mark.parametrize("seed", range(12))
def test_counting_in_bulk_stores_what_one_at_a_time_stores(monkeypatch, seed, batch):
    monkeypatch.setattr(raw_events, "RAW_BATCH", batch)
    monkeypatch.setattr(observer_module, "device_described", lambda index: f"cuda:{index} (a GPU)")
    in_bulk = kept(*drive(seed))
    monkeypatch.setattr(StepLog, "count_key_repetitions", lambda self, keys, i: i)  # each event made on its own
    one_at_a_time = kept(*drive(seed))
    assert in_bulk == one_at_a_time
    assert sum(step.repeat > 1 for step in in_bulk[0]) > 0  # the loop did fold


def one_recorded_node() -> tuple[Manager, Node, TorchObserver]:
    """An observer at "events" that saw torch record one node."""
    manager, fn = Manager(), Function(0)
    node = Node(fn)
    obs = TorchObserver("events")
    obs.recorded(manager, fn, None, node, [], None, None)
    return manager, node, obs


def test_a_steady_loop_is_counted_in_bulk(monkeypatch):
    """The replays of a steady loop make no step one by one: they are counted."""
    made = []
    real = TorchObserver._add_replay
    monkeypatch.setattr(TorchObserver, "_add_replay", lambda self, *a: (made.append(1), real(self, *a)))
    manager, node, obs = one_recorded_node()
    for _ in range(1000):
        obs.replayed(manager, node)
        obs.generation_began(manager)
    obs.finish()
    assert obs.replays[0] == 1000 and obs.generation == 1001
    assert len(made) < 10


def test_outputs_invalidated_before_a_counted_replay_of_their_node_are_valid_again():
    manager, node, obs = one_recorded_node()
    for _ in range(3):
        obs.replayed(manager, node)
        obs.path_ended(manager, node)
    manager.current_node = node
    obs.path_deallocating(manager, node)  # both outputs live: invalidated
    assert obs._invalidated == {(0, 0), (0, 1)}
    for _ in range(3):  # counted in bulk against the block before
        obs.replayed(manager, node)
        obs.path_ended(manager, node)
    obs.catch_up()
    assert obs.trace.steps[-1].repeat == 6
    assert obs._invalidated == set()


@pytest.mark.parametrize("replays_after", [0, 1, 6])
def test_a_warning_is_said_with_the_next_record_unless_a_replay_came_first(replays_after):
    manager, node, obs = one_recorded_node()
    for _ in range(4):  # a loop: the replays after the warning are counted against it
        obs.replayed(manager, node)
    obs.pending_backward_warned()
    for _ in range(replays_after):
        obs.replayed(manager, node)
    obs.recorded(manager, Function(1), None, Node(Function(1)), [], None, None)
    obs.finish()
    said = "torch warns" in obs.trace.steps[-1].reason
    assert said == (replays_after == 0)
