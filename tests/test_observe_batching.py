"""The observer notes replay-loop events raw and makes them into steps in batches.

torch's tree manager needs a GPU, so these tests drive the observer's hooks through a small
stand-in with the manager's method names and its replay-loop call pattern (the GPU tests in
tests/gpu/test_observe_torch.py run the real one).
"""

import pytest
from torch._inductor import cudagraph_trees as trees

from cgviz.observe import raw_events
from cgviz.observe import torch_compile as tc


class Node:
    def __init__(self, function_id, parent=None):
        self.wrapped_function = type("Wrapped", (), {"id": function_id})()
        self.parent = parent
        self.children = {}
        self.outputs_weakrefs = []

    def check_invariants(self, inputs):
        return trees.CheckInvariantStatus.SUCCESS, lambda: "SUCCESS"

    def run(self, inputs):
        return ["output"]


class Manager:
    """The replay loop of torch's manager: each call a new invocation, its path ends, the
    root replays; `eager` makes a call run without any decision, as torch's eager fallbacks do."""

    def __init__(self):
        self.function_id = object()
        self.roots = {self.function_id: [Node(self.function_id)]}
        self.current_node = None
        self.current_gen = -1
        self.running_forwards_with_pending_backwards = False
        self.eager = False
        self.in_recording = False
        self.id_to_mode = {}
        self.id_to_compile_id = {}
        self.ids_to_stack_traces = {}
        self.non_cudagraph_managed_mutation_hint = {}

    def _get_node_id(self):
        return None

    def exceed_rerecord_limit(self, node_id, function_id):
        return False

    def get_func_name(self, function_id):
        return "model"

    def run(self, new_inputs, function_id):
        return self._run(new_inputs, function_id)

    def _run(self, new_inputs, function_id):
        if self.eager:
            return ["eager output"]
        if self.current_node is not None:
            self.clear_current_path_state_and_set_to_none()
            return self.run(new_inputs, function_id)
        return self.execute_node(self.roots[function_id][0], new_inputs)

    def clear_current_path_state_and_set_to_none(self):
        self.current_node = None

    def execute_node(self, node, new_inputs):
        self.current_node = node
        self.current_gen = trees.GenerationTracker.generation
        return node.run(new_inputs)

    def never_on_this_path(self, *args):
        raise AssertionError("not part of the replay loop")

    run_eager = apply_checkpoint_execution_state_in_allocator = never_on_this_path
    try_end_curr_warmup = dealloc_current_path_weakrefs = check_warn_on_unable_to_start_executing = never_on_this_path
    add_function = never_on_this_path

    def record_function(self, new_inputs, function_id):
        node = Node(function_id, self.current_node)
        self.current_node.children.setdefault(function_id, []).append(node)
        self.current_node = node
        return node.run(new_inputs)


@pytest.fixture
def observed(monkeypatch, hold_manager):
    monkeypatch.setattr(raw_events, "RAW_BATCH", 7)
    monkeypatch.setattr(trees.GenerationTracker, "generation", trees.GenerationTracker.generation)
    monkeypatch.setattr(trees, "CUDAGraphTreeManager", Manager)
    manager = hold_manager(Manager())
    run = manager.run  # bound before observing begins, as a model compiled and called earlier has it
    observer = tc.start_observing("events")

    def call():
        trees.GenerationTracker.generation += 1  # a new torch.compile invocation
        return run([], manager.function_id)

    yield observer, manager, call
    tc.stop_observing(observer)


def test_a_replay_loop_folds_into_one_block_and_counts_every_replay(observed):
    observer, manager, call = observed
    for _ in range(50):
        call()
    tc.stop_observing(observer)
    assert len(observer.trace.steps) <= 4
    kinds = [s.kind for s in observer.trace.expanded()]
    assert kinds == ["execute"] + ["generation", "execute"] * 49
    assert observer.replays[observer.trace.steps[0].node] == 50
    assert observer.generation == 50


def test_events_are_made_in_batches_and_before_any_other_decision(observed):
    observer, manager, call = observed
    for _ in range(3):
        call()
    assert len(observer.raw.events) == 5  # replay, then (generation, replay) twice: not made yet
    manager.eager = True
    call()  # a decision off the loop: the noted events are made first, then the eager step
    assert observer.raw.events == []
    assert [s.kind for s in observer.trace.expanded()] == ["execute", "generation"] * 2 + ["execute", "eager"]
    manager.eager = False
    for _ in range(4):
        call()
    assert 0 < len(observer.raw.events) < raw_events.RAW_BATCH  # a full batch was made on the way
    made = len(observer.trace.expanded())
    tc.stop_observing(observer)
    assert made < len(observer.trace.expanded()) == 6 + 8


def test_a_recording_in_the_middle_keeps_its_place_and_its_notes(observed):
    observer, manager, call = observed
    call()
    call()
    manager.record_function([], manager.function_id)
    steps = observer.trace.steps
    assert [s.kind for s in steps] == ["execute", "generation", "execute", "record"]
    assert steps[-1].parent == steps[0].node
