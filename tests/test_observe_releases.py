"""What each torch release decides differently, as the observer records it: outputs cloned at a
generation (2.14+), nodes with no kernels (2.14+), another warmup asked for (2.14+), inputs of the
path demoted to copies or skipped (2.15), the dynamic-shape limit (2.15), re-records that do not
count (2.13+) and no limit (2.12). torch's tree manager needs a GPU to run, so these tests tell the
observer's public event methods what torch's hooks would, with plain objects in the places of
torch's nodes; tests/gpu runs the real manager (torch 2.11)."""

from __future__ import annotations

import gc
import logging
import warnings
import weakref
from typing import Optional

import pytest
import torch
from torch._inductor.cudagraph_trees import StorageWeakRefWrapper

import cgviz
from cgviz.observe import recorded_kernels
from cgviz.observe import _torch_layout as layout
from cgviz.observe import naming
from cgviz.observe.observer import TorchObserver
from cgviz.trace.model import Step, Trace


class Function:
    def __init__(self, number: int, kernel_free: bool = False) -> None:
        self.id = number
        self.kernel_free_cudagraph = kernel_free


class Ref(StorageWeakRefWrapper):
    """torch's weak reference to an output's storage (a CPU one here): live while `alive`, that
    is, while the caller holds the output."""

    def __init__(self, alive: bool = True, ptr: int = 4096) -> None:
        self.held: Optional[torch.Tensor] = torch.zeros(4)
        super().__init__(self.held)
        self.ptr = ptr
        self.alive = alive

    @property
    def alive(self) -> bool:
        return self.held is not None

    @alive.setter
    def alive(self, value: bool) -> None:
        if not value:
            self.held = None
        elif self.held is None:  # held again: torch's replay points the reference at new outputs
            self.held = torch.zeros(4)
            self.swap_weakref(self.held.untyped_storage()._weak_ref())

    def data_ptr(self) -> int:
        return self.ptr


class Node:
    def __init__(self, function: Function, parent: "Node | None" = None, outputs: int = 2) -> None:
        self.wrapped_function = function
        self.parent = parent
        self.children: dict = {}
        self.outputs_weakrefs = [Ref(ptr=4096 * (i + 1)) for i in range(outputs)]
        self.outputs_metadata = [{"size": (4,), "dtype": "torch.float32", "nbytes": 1024 * (i + 1)}
                                 for i in range(outputs)]
        self.device = 0


class Manager:
    def __init__(self) -> None:
        self.device_index = 0
        self.current_node = None
        self.id_to_mode: dict = {}
        self.id_to_compile_id: dict = {}
        self.ids_to_stack_traces: dict = {}

    def get_func_name(self, function_id) -> str:
        return f"f{function_id.id}"


def observer() -> TorchObserver:
    return TorchObserver("events")


def reasons(trace: Trace) -> list[tuple[str, str]]:
    return [(s.kind, s.reason) for s in trace.expanded()]


def test_a_generation_that_clones_says_which_outputs_and_how_many_bytes_and_invalidates_only_the_rest():
    obs, manager = observer(), Manager()
    fn = Function(0)
    node = Node(fn)
    manager.current_node = node
    obs.recorded(manager, fn, None, node, [], None, None)
    obs.outputs_cloning([(node, 0, 1024)])  # torch 2.14+ copies output 0 out of the pool
    obs.path_deallocating(manager, node)  # then frees what stays in it
    obs.generation_began(manager)
    obs.finish()
    generation = obs.trace.steps[-1]
    assert generation.kind == "generation"
    assert generation.invalidated == [[0, 1]]  # output 0 was cloned: it stays valid
    assert "cudagraph_trees_generation_cloning = 'user_visible'" in generation.reason
    assert "output 0 of node 0 (1.0 KiB)" in generation.reason
    assert generation.reason.endswith("invalidated: output 1 of node 0")


def test_the_clone_hook_finds_the_outputs_on_the_current_path():
    manager = Manager()
    root = Node(Function(0))
    child = Node(Function(1), root, outputs=1)
    manager.current_node = child
    # torch's groups: (storage pointer, entries of (outputs_weakrefs, tensor_weakrefs, cached, index))
    groups = [(object(), ((root.outputs_weakrefs, [], None, 1),)), (object(), ((child.outputs_weakrefs, [], None, 0),))]
    assert layout.cloned_outputs(manager, groups) == [(root, 1, 2048), (child, 0, 1024)]


def test_a_node_without_kernels_says_torch_keeps_no_graph_for_it():
    obs, manager = observer(), Manager()
    fn = Function(0, kernel_free=True)
    node = Node(fn)
    obs.recorded(manager, fn, None, node, [], None, None)
    obs.replayed(manager, node)
    obs.finish()
    (record, why_record), (execute, why_execute) = reasons(obs.trace)
    assert (record, execute) == ("record", "execute")
    assert naming.KERNEL_FREE in why_record and naming.KERNEL_FREE in why_execute
    assert "no kernels" in naming.KERNEL_FREE


def test_a_warmup_marked_incomplete_says_its_next_call_warms_up_again():
    """torch 2.14+ forgets that the function warmed up: the warmup it asked for is not a first
    call (the node's already_warm is False again), and the one after it is."""
    obs, manager = observer(), Manager()
    fn = Function(0)
    obs.warmup_incomplete(manager, fn)  # torch.compiler.cudagraph_mark_warmup_incomplete() inside the warmup
    obs.warmed_up(manager, fn, Node(fn), None)
    obs.warmed_up(manager, fn, Node(fn), None)  # the warmup it asked for
    obs.warmed_up(manager, fn, Node(fn), None)  # as if torch had forgotten again (a reset, say): a first call
    obs.finish()
    (first, why_first), (again, why_again), (third, why_third) = reasons(obs.trace)
    assert first == again == third == "warmup"
    assert why_first.startswith("first call of") and naming.WARMUP_INCOMPLETE in why_first
    assert naming.WARMED_UP_AGAIN in why_again and not why_again.startswith("first call")
    assert why_third.startswith("first call of")


@pytest.mark.parametrize("action, said", [("copy", "records this graph copying it in"), ("skip", "runs this function eagerly")])
def test_inputs_of_the_path_that_keep_moving_are_said_with_torchs_limit_and_action(action, said):
    obs, manager = observer(), Manager()
    fn = Function(0)
    obs.managed_inputs_limited([1], action, 5)
    obs.recorded(manager, fn, None, Node(fn), [], None, None)
    obs.finish()
    why = reasons(obs.trace)[0][1]
    assert said in why and "cudagraph_managed_input_rerecord_limit = 5" in why and f"action '{action}'" in why


def test_the_managed_input_skip_message_is_told_from_a_mutation():
    obs, manager = observer(), Manager()
    fn = Function(3)
    obs.compile.remember_skip(manager, fn, "skipping cudagraph due to function 3 reaching the cudagraph-managed "
                                    "input re-recording threshold (=5) on cudagraph node 2 for input indices [1].")
    assert (id(manager), fn, layout.EAGER_MANAGED_INPUT_LIMIT) in obs.compile.skips


def test_the_dynamic_shape_limit_is_an_eager_step(monkeypatch):
    """torch 2.15 says it once, through its trees' logger; the observer listens while active only."""
    monkeypatch.setattr(layout, "RELEASE", (2, 15))
    logger = logging.getLogger(layout.TREES_LOGGER)
    handlers = list(logger.handlers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the 2.15 methods this torch lacks
        with cgviz.observe_torch("events") as trace:
            logger.warning("[%s] %s graph hit cudagraph_dynamic_shape_rerecord_limit=%s; already-recorded shapes "
                           "still replay, new shapes run eager.", "0/0", "forward", 4)
    assert logger.handlers == handlers  # gone with the observation
    (kind, why), = reasons(trace)
    assert kind == "eager" and "cudagraph_dynamic_shape_rerecord_limit = 4" in why and "[0/0]" in why


@pytest.mark.parametrize("release, said", [
    ((2, 11), "no re-record limit in torch 2.11 while torch._dynamo.config.inline_inbuilt_nn_modules is on"),
    ((2, 12), "no re-record limit in torch 2.12"),
    ((2, 13), "torch 2.13+ does not count a moved static input"),
    ((2, 15), "torch 2.13+ does not count a moved static input"),
])
def test_a_rerecord_for_a_moved_static_input_says_how_the_release_counts_it(monkeypatch, release, said):
    monkeypatch.setattr(layout, "RELEASE_NAME", f"{release[0]}.{release[1]}")
    obs, manager = observer(), Manager()
    fn = Function(0)
    old = Node(fn)
    obs.recorded(manager, fn, None, old, [], None, None)
    obs.recorded(manager, fn, None, Node(fn), [(old, layout.STATIC_INPUT_MISMATCH, "static input 0 moved")], None, None)
    obs.finish()
    why = reasons(obs.trace)[1][1]
    assert "node 0 could not replay: static input 0 moved" in why and said in why


MANAGED, DEAD, STATIC = "CudagraphManagedIdxMismatch", "ExpectedDeadIndicesBeforeGraphMismatch", "StaticInputIdxMismatch"


@pytest.mark.parametrize("release, inlining, status, said", [
    # 2.11 applies the limit only while dynamo inlines nn modules is off; then it counts no dead output
    ("2.11", True, MANAGED, "no re-record limit in torch 2.11 while"),
    ("2.11", False, MANAGED, ""),
    ("2.11", False, STATIC, ""),
    ("2.11", False, DEAD, "torch 2.11–2.12 does not count an output of the path live that was dead at recording"),
    ("2.12", False, MANAGED, "no re-record limit in torch 2.12"),
    ("2.13", True, DEAD, ""),
    ("2.13", True, MANAGED, ""),
    ("2.15", False, STATIC, "torch 2.13+ does not count a moved static input"),
])
def test_a_rerecord_note_says_what_the_installed_release_does_with_the_failed_check(monkeypatch, release, inlining,
                                                                                     status, said):
    import torch._dynamo.config as dynamo_config

    monkeypatch.setattr(layout, "RELEASE_NAME", release)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated (always on) from torch 2.12: setting it warns
        with dynamo_config.patch(inline_inbuilt_nn_modules=inlining):
            note = layout.rerecord_note(status)
    assert note.startswith(said) and (note == "") == (said == "")


@pytest.mark.parametrize("torch_version, names_cloning", [("2.11.0+cu130", False), ("2.13.0", False),
                                                          ("2.14.1", True), ("2.15.0", True)])
def test_the_doctor_fixes_an_overwritten_output_with_what_the_release_has(torch_version, names_cloning):
    steps = [Step(index=0, kind="generation", reason="g", generation=2, invalidated=[[0, 0]]),
             Step(index=1, kind="error", reason="an output was used after a later run overwrote it: "
                  "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run", generation=2)]
    trace = Trace(steps=steps, meta={"backend": "torch.compile", "torch": torch_version})
    finding = next(f for f in cgviz.diagnose(trace).findings if f.kind == "overwritten")
    assert ("cudagraph_trees_generation_cloning = 'user_visible'" in finding.suggestion) is names_cloning
    assert "y.clone()" in finding.suggestion
    if not names_cloning:
        assert "comes with torch 2.14" in finding.suggestion


def test_the_observer_holds_torchs_nodes_and_managers_only_weakly():
    """A reset inside an observation frees what torch frees: the observer keeps no node or manager."""
    obs, manager = observer(), Manager()
    fn = Function(0)
    node = Node(fn)
    obs.recorded(manager, fn, None, node, [], None, None)
    for _ in range(3):
        obs.replayed(manager, node)  # noted raw, as in a replay loop
    obs.manager_shutting_down(manager)  # torch._dynamo.reset(): what was noted becomes steps
    nodes, managers = weakref.ref(node), weakref.ref(manager)
    del node, manager
    gc.collect()
    assert nodes() is None and managers() is None
    assert obs.managers == []
    obs.finish()
    assert [s.kind for s in obs.trace.expanded()] == ["record", "execute", "execute", "execute"]


def test_a_new_node_at_a_freed_nodes_address_gets_a_new_id():
    obs = observer()
    first = Node(Function(0))
    assert obs.node_id(first) == 0
    key = id(first)
    del first
    gc.collect()
    assert key not in obs._ids
    assert obs.node_id(Node(Function(1))) == 1


@pytest.mark.parametrize("reason, fix", [
    (naming.dynamic_shape_limit_reason("f [0/0] (forward)", "4"), "cudagraph_capture_sizes"),
    ("f ran eagerly: " + naming.EAGER_WORDS[layout.EAGER_MANAGED_INPUT_LIMIT], "cudagraph_managed_input_rerecord_action"),
])
def test_the_doctor_fixes_the_2_15_limits(reason, fix):
    trace = Trace(steps=[Step(index=0, kind="eager", reason=reason, generation=1, function="f")],
                  meta={"backend": "torch.compile", "torch": "2.15.0"})
    eager = [f for f in cgviz.diagnose(trace).findings if f.kind == "eager"]
    assert eager and fix in eager[0].suggestion


def test_kernels_come_through_the_public_instantiate_hook_where_torch_has_it(monkeypatch):
    """torch 2.14+ runs global instantiate hooks with the graph's template live: the observer reads
    get_graph_data() there, and where torch refuses it (cuda.bindings or a driver older than 13.1)
    the DOT text CUDA writes for the template; it leaves torch.cuda.CUDAGraph alone, and the hook
    is removed after."""
    import sys
    import types
    from pathlib import Path

    import torch

    from cgviz._torch.kernels import kernel_counts

    registry: dict = {}

    class Handle:
        def __init__(self, key):
            self.key = key

        def remove(self):
            registry.pop(self.key)

    def register(fn):
        registry[len(registry)] = fn
        return Handle(len(registry) - 1)

    dot = (Path(__file__).parent / "data" / "cuda_graph_debug.dot").read_text()

    class Graph:  # get_graph_data answers
        def get_graph_data(self):
            return {"nodes": [{"node_type": "kernel", "kernel_name": "k"}, {"node_type": "memcpy"}]}

    class OldDriverGraph:  # torch refuses get_graph_data; debug_dump writes the template's DOT text
        def get_graph_data(self):
            raise RuntimeError("get_graph_data requires cudaGraphNodeGetToolsId which needs cuda.bindings >= 13.1 "
                               "and CUDA driver >= 13.1")

        def debug_dump(self, path):
            Path(path).write_text(dot)

    class NoBindingsGraph:  # neither: nothing to read the graph with
        def get_graph_data(self):
            raise RuntimeError("This CUDAGraph API requires the cuda-bindings package")

        def debug_dump(self, path):
            raise RuntimeError("This CUDAGraph API requires the cuda-bindings package")

    monkeypatch.setattr(layout, "RELEASE", (2, 14))
    monkeypatch.setitem(sys.modules, "torch.cuda.graphs", types.SimpleNamespace(register_graph_instantiate_hook=register))
    with recorded_kernels.instantiated_graph_data() as seen:
        assert torch.cuda.CUDAGraph is sys.modules["torch"].cuda.CUDAGraph  # not stood in for
        for graph in (Graph(), OldDriverGraph(), NoBindingsGraph()):
            for fn in list(registry.values()):
                fn(graph)  # what torch does at instantiate()
    assert registry == {}
    assert seen == [[["k", 1], ["memcpy", 1]], kernel_counts(dot)] and kernel_counts(dot)
    monkeypatch.setattr(layout, "RELEASE", (2, 13))
    with recorded_kernels.instantiated_graph_data() as none:
        assert none is None  # older releases: no such hook, the graphs are kept instead


def test_a_manager_freed_without_shutdown_is_not_kept_by_the_replays_noted_raw():
    """torch frees a manager without shutdown() when the compiled functions that used it die
    before torch._dynamo.reset() looks for it: the replays noted on its loop (trace "events")
    hold nothing of it or of its nodes, and still become steps."""
    obs, manager = observer(), Manager()
    fn = Function(0)
    node = Node(fn)
    obs.recorded(manager, fn, None, node, [], None, None)
    for _ in range(3):
        obs.replayed(manager, node)
        obs.generation_began(manager)
    assert len(obs.raw.events) == 6  # noted, not yet made
    nodes, managers = weakref.ref(node), weakref.ref(manager)
    del node, manager
    gc.collect()
    assert nodes() is None and managers() is None
    obs.finish()
    assert [s.kind for s in obs.trace.expanded()] == ["record"] + ["execute", "generation"] * 3
