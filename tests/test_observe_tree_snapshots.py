"""What a snapshot of torch's tree shows (observe/tree_snapshots.py), read from stand-ins for
torch's nodes with the attributes the layout names, whose outputs are torch's own weak references
(StorageWeakRefWrapper, on CPU storages): every recorded graph breadth first from the roots, then
the warmup nodes still alive on the manager's device; and the state the step log compares, which
changes when an output dies, and asks an output found dead again only when its node runs."""

from __future__ import annotations

import time
import weakref

import pytest
import torch
from snapshot_twins import observer_twins, same_steps
from torch._inductor.cudagraph_trees import StorageWeakRefWrapper
from tree_standins import (
    Asked, CachedOutputsNode, CUDAGraphNode, CUDAWarmupNode, Manager, check_refcount_2_11, check_refcount_2_15,
    liveness, looping_observer, snapshots,
)

from cgviz.observe import _torch_layout as layout
from cgviz.observe._torch_layout import manager as manager_layout
from cgviz.observe.observer import TorchObserver


def test_a_snapshot_shows_the_graphs_breadth_first_then_the_warmups_alive_on_its_device():
    c, d, e = CUDAGraphNode("c"), CUDAGraphNode("d"), CUDAGraphNode("e")
    a, b = CUDAGraphNode("a", c, d), CUDAGraphNode("b", e)
    here, elsewhere = CUDAWarmupNode("w0", 0), CUDAWarmupNode("w1", 1)
    manager = Manager({"f": [a], "g": [b]})
    live = {1: here, 2: elsewhere, 3: a}  # a graph node kept by id is shown once
    shown = snapshots(live, manager).shown_nodes(manager, live)
    assert [n.name for n in shown] == ["a", "b", "c", "d", "e", "w0"]
    e.children["f"].append(here)  # a warmup node reached from the roots is shown once
    assert [n.name for n in snapshots(live, manager).shown_nodes(manager, live)] == ["a", "b", "c", "d", "e", "w0"]


def test_the_state_changes_when_an_output_dies_and_not_otherwise():
    child = CUDAGraphNode("c", outputs=2)
    root = CUDAGraphNode("a", child)
    manager = Manager({"f": [root]}, current=child)
    tree = snapshots({}, manager)
    before = tree.state(manager, set())
    assert tree.state(manager, set()) == before
    del child.held[1]
    after = tree.state(manager, set())
    assert after != before
    assert tree.state(manager, {(0, 1)}) != after  # an output invalidated is told apart too


@pytest.fixture
def use_counts(monkeypatch) -> list:
    """Counts the reads of a storage's use count (the observer's, and torch's own in expired())."""
    reads = [0]
    count = torch._C._storage_Use_Count

    def counted(cdata: int) -> int:
        reads[0] += 1
        return count(cdata)

    monkeypatch.setattr(torch._C, "_storage_Use_Count", counted)
    return reads


def test_an_output_found_dead_is_not_asked_again_until_its_node_runs(use_counts):
    node = CUDAGraphNode("a", outputs=3)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    del node.held[0]
    assert liveness(tree, manager) == [False, True, True]
    use_counts[0] = 0
    assert liveness(tree, manager) == [False, True, True]
    assert use_counts[0] == 2  # the live ones only
    tree.ran(node)
    use_counts[0] = 0
    assert liveness(tree, manager) == [False, True, True]
    assert use_counts[0] == 3


def test_an_output_given_another_storage_by_its_nodes_run_is_asked_again():
    node = CUDAGraphNode("a", outputs=2)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    node.held[0] = None
    assert liveness(tree, manager) == [False, True]
    fresh = torch.zeros(4)
    node.outputs_weakrefs[0].swap_weakref(fresh.untyped_storage()._weak_ref())  # as torch's replay does
    tree.ran(node)  # what the observer does at each replay torch makes
    assert liveness(tree, manager) == [True, True]


def test_the_outputs_torch_found_dead_before_a_replay_are_not_asked():
    """torch replays a node only after finding dead the outputs of its path that died while it
    was recorded (a backward finds its forward's saved outputs dead): the state after the replay
    shows them dead without asking; the path's other outputs are asked as before."""
    backward = CUDAGraphNode("backward", outputs=1)
    forward = CUDAGraphNode("forward", backward, outputs=4)
    backward.expected_dead_indices_before_graph = [(0, 0)]
    backward.expected_dead_indices_after_graph = [(0, 1), (0, 2)]
    manager = Manager({"f": [forward]}, current=backward)
    tree = snapshots({}, manager)
    assert liveness(tree, manager) == [True] * 5
    del forward.held[:3]  # what torch found dead before it replayed the backward
    out = list(backward.held)  # what the replay returns
    tree.returning(backward)
    wrappers = forward.outputs_weakrefs
    forward.outputs_weakrefs = [Untouchable(), Untouchable(), Untouchable(), wrappers[3]]
    assert liveness(tree, manager) == [False, False, False, True, True]
    forward.outputs_weakrefs = wrappers
    assert layout.outputs_live(forward) == [False, False, False, True]  # what asking each one gives
    tree.ran(forward)  # the forward runs again: its outputs are asked anew
    assert liveness(tree, manager) == [False, False, False, True, True]
    del out


def test_what_torch_finds_dead_is_read_from_the_nodes_own_lists():
    """The outputs torch checks before a replay, by ancestor from the root: both of the node's
    lists, each output once; an index outside its path (none in torch) is left out."""
    c = CUDAGraphNode("c", outputs=1)
    b = CUDAGraphNode("b", c, outputs=2)
    a = CUDAGraphNode("a", b, outputs=3)
    c.expected_dead_indices_before_graph = [(1, 1), (0, 2)]
    c.expected_dead_indices_after_graph = [(0, 0), (0, 2), (2, 0), (5, 0)]
    assert [(node.name, found) for node, found in layout.found_dead_by_torch(c)] == [("a", (0, 2)), ("b", (1,))]
    assert layout.found_dead_by_torch(a) == []


class Untouchable:
    """Stands where torch's wrapper of an output found dead was: any read of it fails."""

    def __getattr__(self, name: str):
        raise AssertionError(f"an output found dead was read ({name})")


def test_nothing_of_an_output_found_dead_is_read_until_its_node_runs():
    """A read of a replay loop costs cache misses on torch's objects: an output found dead is
    skipped by its index alone, its wrapper and storage left untouched."""
    node = CachedOutputsNode("a", outputs=2)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    out = node.replay()[1]
    assert liveness(tree, manager) == [False, True]
    wrapper, node.outputs_weakrefs[0] = node.outputs_weakrefs[0], Untouchable()
    dead_tensor, node.cached_tensor_outputs[0] = node.cached_tensor_outputs[0], Untouchable()
    assert liveness(tree, manager) == [False, True]
    node.outputs_weakrefs[0], node.cached_tensor_outputs[0] = wrapper, dead_tensor
    del out


def test_a_cached_outputs_storage_is_read_from_its_wrapper_once_while_its_tensor_is_cached():
    """A replay loop reads each cached output again after its node runs: its storage is the one
    torch's wrapper pointed at when the tensor was cached, kept from the first read, so the
    wrapper and its weak reference are not touched again."""
    node = CachedOutputsNode("a", outputs=2)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    assert liveness(tree, manager) == [False, False]  # each read to its storage's count
    out = node.replay()
    tree.ran(node)
    view = out[1][1:]  # the caller keeps a view of output 1 alone: its storage's count says live
    del out
    wrappers, node.outputs_weakrefs = node.outputs_weakrefs, [Untouchable(), Untouchable()]
    assert liveness(tree, manager) == [False, True]
    node.outputs_weakrefs = wrappers
    assert liveness(tree, manager) == [not StorageWeakRefWrapper.expired(r) for r in wrappers]
    del view


def test_cached_tensors_made_anew_are_read_through_their_new_wrappers():
    """torch takes a node's cached tensors out at a checkpoint and makes them anew, each with a
    new wrapper, at the node's next run: the read follows the new storages, not those kept from
    before (the caller may still hold an old output)."""
    node = CachedOutputsNode("a", outputs=2)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    assert liveness(tree, manager) == [False, False]  # the storages kept
    old_wrappers = node.outputs_weakrefs  # kept: a read of the old storages stays in bounds
    old_output = node.cached_tensor_outputs[0]  # the caller holds an output from before the checkpoint
    node.cached_tensor_outputs.clear()  # remove_node_cached_tensors()
    node.initialize_cached_tensors(2)  # the next run's reconstruct_outputs()
    tree.ran(node)
    view = node.cached_tensor_outputs[0][1:]  # and a view of the new output 0
    torch_says = [not StorageWeakRefWrapper.expired(r) for r in node.outputs_weakrefs]
    assert torch_says == [True, False]
    assert liveness(tree, manager) == torch_says
    del view, old_output, old_wrappers


def test_a_cached_output_taken_out_of_the_cache_is_read_through_its_wrapper():
    """2.14+'s generation cloning points an output's wrapper at a placeholder storage as it puts
    None in the output's place in the cache: that output is read as a plain one, through its
    wrapper, and the others still from the storages kept."""
    node = CachedOutputsNode("a", outputs=2)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    out = node.replay()
    assert liveness(tree, manager) == [True, True]
    placeholder = torch.zeros(4)
    node.outputs_weakrefs[1].remove_extra_reference()
    node.outputs_weakrefs[1].swap_weakref(placeholder.untyped_storage()._weak_ref())
    node.cached_tensor_outputs[1] = None
    del out
    tree.ran(node)
    torch_says = [not StorageWeakRefWrapper.expired(r) for r in node.outputs_weakrefs]
    assert torch_says == [False, True]  # the placeholder's storage is held by `placeholder`
    assert liveness(tree, manager) == torch_says
    del placeholder
    tree.ran(node)
    assert liveness(tree, manager) == [False, False]


def test_what_a_freed_node_was_found_is_not_taken_for_a_new_node_at_its_id():
    """torch frees a node and makes another, which Python may place at the freed one's id(): the
    new node's outputs are read, not skipped as the old one's were found."""
    old, new = CUDAGraphNode("a", outputs=1), CUDAGraphNode("b", outputs=1)
    manager = Manager({"f": [old]}, current=old)
    tree = snapshots({}, manager)
    del old.held[0]
    assert liveness(tree, manager) == [False]
    tree._found_dead[id(new)] = tree._found_dead.pop(id(old))  # as if `new` had taken old's address
    del old
    manager.roots["f"], manager.current_node = [new], new
    assert liveness(tree, manager) == [True]


def test_a_cached_output_handed_out_again_by_its_nodes_run_is_live_again():
    node = CachedOutputsNode("a")
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    out = node.replay()
    assert liveness(tree, manager) == [True]
    del out
    assert liveness(tree, manager) == [False]
    out = node.replay()
    tree.ran(node)  # what the observer does at each replay torch makes
    assert liveness(tree, manager) == [True]
    assert tree.snapshot(manager, 1, set()).nodes[0].outputs[0].state == "live"
    del out  # held by the user until here


def test_the_outputs_a_replay_is_returning_are_shown_live_without_asking(use_counts):
    """While torch's execute_node returns a replay's outputs (one list holds them all), the next
    state shows every output torch tracks live without asking, and equals a read that asks each
    one; the other nodes' outputs are asked, and the state after it asks that node's again."""
    node = CUDAGraphNode("a", outputs=3)
    node.outputs_weakrefs.append(None)  # an output torch does not track (None, a number, a static input)
    other = CUDAGraphNode("b", outputs=2)
    manager = Manager({"f": [node], "g": [other]}, current=node)
    tree = snapshots({}, manager)
    out = list(node.held)  # what the replay returns
    tree.returning(node)
    use_counts[0] = 0
    assert liveness(tree, manager) == [True, True, True, False, True, True]
    assert use_counts[0] == 2  # the other node's two outputs only
    assert layout.outputs_live(node) == [True, True, True, False]  # what asking each one gives
    del out, node.held[:2]
    use_counts[0] = 0
    assert liveness(tree, manager) == [False, False, True, False, True, True]
    assert use_counts[0] == 5  # asked again once the decision is past


class Unwalked(list):
    """torch's list of an output's wrappers, which may be measured but not read."""

    def __iter__(self):
        raise AssertionError("the wrappers were walked")

    def __getitem__(self, index):
        raise AssertionError(f"wrapper {index} was read")


def test_a_replay_returning_again_is_shown_without_reading_its_wrappers():
    """Which outputs torch tracks is set when it records a node: a later replay of the node shows
    them live without reading each wrapper again."""
    node = CUDAGraphNode("a", outputs=2)
    node.outputs_weakrefs.append(None)
    manager = Manager({"f": [node]}, current=node)
    tree = snapshots({}, manager)
    tree.returning(node)
    assert liveness(tree, manager) == [True, True, False]
    wrappers = node.outputs_weakrefs
    node.outputs_weakrefs = Unwalked(wrappers)
    tree.returning(node)
    assert tree.state(manager, set())[3] == (id(node), (0, 1))
    node.outputs_weakrefs = wrappers


def test_the_observer_asks_nothing_of_the_outputs_its_replay_is_returning(use_counts):
    node = CUDAGraphNode("a", outputs=2)
    manager = Manager({"f": [node]}, current=node)
    manager.device_index, manager.cuda_graphs_thread_pool = None, None
    observer = TorchObserver("full")
    for _ in range(3):  # a steady loop: the repeated decisions take no snapshot (which asks each output)
        observer.replayed(manager, node)
        observer.path_ended(manager, node)
    use_counts[0] = 0
    observer.replayed(manager, node)
    assert use_counts[0] == 0
    observer.path_ended(manager, node)
    assert use_counts[0] == 2
    observer.catch_up()  # the steady decisions, noted raw, made into steps
    assert observer.trace.counts()["execute"] == 4


def test_the_observer_asks_a_replayed_nodes_outputs_again():
    """An output dies, then torch's replay of its node hands the cached tensor out again: the
    state the step log compares, and the steps, show it live."""
    node = CachedOutputsNode("a")
    manager = Manager({"f": [node]}, current=node)
    manager.device_index, manager.cuda_graphs_thread_pool = None, None
    observer = TorchObserver("full")
    out = node.replay()
    observer.replayed(manager, node)
    del out
    observer.path_ended(manager, node)
    out = node.replay()
    observer.replayed(manager, node)
    assert liveness(observer.snapshots, manager) == [True]
    observer.catch_up()
    shown = [[o.state for v in step.snapshot.nodes for o in v.outputs] for step in observer.trace.steps]
    assert shown == [["live"], ["dead"], ["live"]]
    del out  # held by the user until here


def test_what_was_found_of_a_node_no_longer_shown_is_let_go():
    kept, freed = CUDAGraphNode("a", outputs=1), CUDAGraphNode("b", outputs=1)
    manager = Manager({"f": [kept], "g": [freed]})
    tree = snapshots({}, manager)
    del kept.held[0], freed.held[0]
    assert liveness(tree, manager) == [False, False]
    gone = weakref.ref(freed)
    del manager.roots["g"], freed  # torch lets the node go
    assert gone() is None  # what the state found does not keep it
    assert liveness(tree, manager) == [False]
    assert list(tree._found_dead) == [id(kept)]  # nor its record, once it is no longer shown



HOLDERS = ["tensor", "tensor twice", "view", "storage", "nothing", "C++ (a .grad)", "C++ and a tensor", "C++ twice"]


def hold(kind: str, tensor: torch.Tensor) -> list:
    """What the caller keeps of an output: its tensor (once or twice), a view, its storage, the
    tensor as a parameter's .grad (C++ holds it), or nothing."""
    if kind == "tensor":
        return [tensor]
    if kind == "tensor twice":
        return [tensor, tensor]
    if kind == "view":
        return [tensor[1:]]
    if kind == "storage":
        return [tensor.untyped_storage()]
    if kind.startswith("C++"):
        params = [torch.zeros(4, requires_grad=True) for _ in range(2 if kind == "C++ twice" else 1)]
        for p in params:
            p.grad = tensor
        return params + ([tensor] if kind == "C++ and a tensor" else [])
    return []


@pytest.mark.parametrize("release", ["2.11", "2.15"])
def test_liveness_read_without_asking_is_torchs_expired(monkeypatch, release):
    """The observer reads an output's liveness without calling StorageWeakRefWrapper.expired(),
    and gets what expired() says: torch's own wrapper, with the release's check_refcount on the
    cached outputs, for outputs held in every way, a plain output beside each, and none."""
    monkeypatch.setattr(manager_layout, "CPP_HELD_CACHED_OUTPUT_LIVE", release == "2.15")
    node = CachedOutputsNode("a", outputs=len(HOLDERS), check=check_refcount_2_11 if release == "2.11" else check_refcount_2_15)
    plain = [torch.zeros(4) for _ in HOLDERS]
    node.outputs_weakrefs += [Asked(t) for t in plain] + [None]
    cached = node.replay()
    kept = [hold(kind, t) for kind, t in zip(HOLDERS * 2, cached + plain)]
    del cached, plain
    Asked.asked = 0
    read = layout.outputs_live(node)
    assert Asked.asked == 0
    torch_says = [r is not None and not StorageWeakRefWrapper.expired(r) for r in node.outputs_weakrefs]
    assert read == torch_says
    # the releases differ for a cached output C++ holds and Python only through it
    dead = {"storage", "nothing"} | ({"C++ (a .grad)", "C++ twice"} if release == "2.11" else set())
    assert read == [kind not in dead for kind in HOLDERS] + [kind != "nothing" for kind in HOLDERS] + [False]
    del kept


class CppHeldAsIn2_15:
    """A cached output whose tensor C++ also holds, counted as torch 2.15 counts one: Python holds
    it through the cache alone (the CPU torch here adds a reference for C++, which 2.15 does not).
    It holds the output's tensor, as the real one is that tensor."""

    grad_fn = None

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def _use_count(self) -> int:
        return 2


def test_a_cached_output_cpp_holds_is_live_from_2_15_at_the_cache_s_count(monkeypatch):
    """From 2.15, a cached output whose tensor C++ also holds is live whatever Python's count:
    the read asks its use count even where only the cache holds it, as torch's expired() does."""
    monkeypatch.setattr(manager_layout, "CPP_HELD_CACHED_OUTPUT_LIVE", True)
    node = CachedOutputsNode("a", outputs=2, check=check_refcount_2_15)
    node.cached_tensor_outputs[0] = CppHeldAsIn2_15(node.cached_tensor_outputs[0])
    torch_says = [not StorageWeakRefWrapper.expired(r) for r in node.outputs_weakrefs]
    assert torch_says == [True, False]
    assert layout.outputs_live(node) == torch_says


def test_an_output_with_an_extra_check_and_no_cached_tensor_is_asked_expired():
    """Where the node keeps no cached tensor for an output whose reference has an extra check (a
    layout cgviz does not know), the observer calls expired() itself, at the baseline count."""
    node = CUDAGraphNode("a", outputs=0)
    tensor = torch.zeros(4)
    storage = tensor.untyped_storage()  # the count at its baseline (2) for a cached output
    node.outputs_weakrefs = [Asked(tensor, extra_ref_check=lambda: True)]
    Asked.asked = 0
    assert layout.outputs_live(node) == [False]
    assert Asked.asked == 1
    del storage


def test_the_observer_lets_go_of_the_nodes_torch_freed():
    """A long run makes and frees many nodes (warmups, re-recordings): what the observer keeps
    of them, walked by every snapshot and state at "full", holds only those torch still keeps."""
    observer = TorchObserver("full")
    kept = CUDAGraphNode("kept")
    observer.node_id(kept)
    for i in range(200):
        observer.node_id(CUDAWarmupNode(f"w{i}", 0))  # freed at once, as torch frees a warmup node
    assert observer.live_nodes() == {0: kept}
    assert len(observer._nodes) == 1
    observer.node_id(CUDAWarmupNode("late", 0))
    assert len(observer._nodes) == 2  # let go at the next walk
    assert observer.live_nodes() == {0: kept} and len(observer._nodes) == 1


def test_a_loop_noted_raw_at_full_stores_what_a_snapshot_per_decision_gives(monkeypatch):
    """At "full" the decisions the step log would only count are noted raw with their state and
    made into steps in bulk; the others are logged at once. A loop whose user holds an output on
    some steps (the state changes there, and back) stores the steps, snapshots and durations
    that a snapshot at each decision gives, and notes most of its decisions."""
    made = observer_twins(monkeypatch)
    backward = CachedOutputsNode("backward", outputs=3)
    forward = CachedOutputsNode("forward", outputs=4)
    forward.children, backward.children, backward.parent = {"g": [backward]}, {}, forward
    backward.expected_dead_indices_after_graph = [(0, 1), (0, 2)]
    manager = Manager({"f": [forward]}, current=forward)
    manager.device_index, manager.cuda_graphs_thread_pool = None, None
    observer = TorchObserver("full")
    held = []
    for step in range(60):
        outs = forward.replay()
        observer.generation_began(manager)
        observer.replayed(manager, forward, time.perf_counter())
        loss = outs[0]
        if step % 11 == 3 or step == 57:  # the user keeps an output a while (and to the end)
            held.append(outs[3])
        del outs
        grads = backward.replay()
        observer.replayed(manager, backward, time.perf_counter())
        if step % 11 == 5:
            held.clear()
        if step % 13 == 9:
            observer.path_ended(manager, backward)
        del loss, grads
    observer.finish()
    (log,) = made
    log.twin.flush()
    assert same_steps(observer.trace.steps, log.twin.steps)
    counts = observer.trace.counts()
    assert (counts["execute"], counts["generation"], counts["path_end"]) == (120, 60, 4)
    assert log.skipped > 120  # most decisions took no snapshot: noted raw
    assert len(observer.trace.steps) < 60


@pytest.mark.parametrize("level", ["events", "full"])
def test_replays_of_a_graph_outside_the_trees_keep_their_place_among_noted_decisions(monkeypatch, level):
    """observe_torch(graphs=True): a graph outside the trees replayed between the trees' replays
    of a steady loop shares the trace; its steps come where it replayed, in the generation it
    replayed in, and at "full" the trees' steps are what a snapshot per decision gives."""
    from test_observe_graphs import _observer_holding

    made = observer_twins(monkeypatch)
    backward = CachedOutputsNode("backward", outputs=2)
    forward = CachedOutputsNode("forward", outputs=2)
    forward.children, backward.children, backward.parent = {"g": [backward]}, {}, forward
    manager = Manager({"f": [forward]}, current=forward)
    manager.device_index, manager.cuda_graphs_thread_pool = None, None
    tree = TorchObserver(level)
    graphs, (graph,) = _observer_holding(1, trace=level, tree=tree)
    tree.graph_sink = graphs
    for step in range(30):
        outs = forward.replay()
        tree.generation_began(manager)
        tree.replayed(manager, forward, time.perf_counter())
        if step % 7 == 5:
            graphs.replay_began(graph)
        grads = backward.replay()
        tree.replayed(manager, backward, time.perf_counter())
        del outs, grads
    tree.finish()
    kinds = [(s.kind, s.generation) for s in tree.trace.expanded()]
    replays = [i for i, (kind, _) in enumerate(kinds) if kind == "replay"]
    assert [[kind for kind, _ in kinds[i - 1:i + 2]] for i in replays] == [["execute", "replay", "execute"]] * 4
    assert [kinds[i][1] for i in replays] == [7, 14, 21, 28]
    assert [kind for kind, _ in kinds].count("execute") == 60
    if level == "full":
        (log,) = made
        log.twin.flush()
        assert same_steps(tree.trace.steps, log.twin.steps)


def test_decisions_noted_before_torch_freed_their_manager_keep_their_device_and_snapshots():
    """torch frees a manager (its compiled functions died) while decisions of it are noted: they
    are made into steps with the device they were noted with, folding into their block, and the
    block keeps the snapshot it had."""
    observer, manager, node = looping_observer(6)
    observer.replayed(manager, node)  # a repetition half done
    assert observer.raw.events  # noted, not yet made into steps
    del manager
    assert observer.raw.manager_ref is None  # nothing of it held
    observer.finish()
    steps = observer.trace.steps
    assert [(s.kind, s.repeat) for s in steps] == [("execute", 1), ("path_end", 6), ("execute", 1)]
    assert all(s.snapshot is not None for s in steps)
    assert [key[-1] for key in observer.log.keys] == ["cuda:0"] * 3  # each with its device
