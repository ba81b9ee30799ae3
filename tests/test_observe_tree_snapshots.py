"""What a snapshot of torch's tree shows (observe/tree_snapshots.py), read from stand-ins with
the attributes the layout names: every recorded graph breadth first from the roots, then the
warmup nodes still alive on the manager's device; and the state the step log compares, which
changes when an output dies."""

from __future__ import annotations

from collections import Counter

from cgviz.observe.tree_snapshots import TreeSnapshots


class Ref:
    """An output's weak reference, as torch's StorageWeakRefWrapper answers."""

    def __init__(self, live: bool = True) -> None:
        self.live = live

    def expired(self) -> bool:
        return not self.live


class CUDAGraphNode:
    def __init__(self, name: str, *children: "CUDAGraphNode", outputs: int = 1) -> None:
        self.name = name
        self.children = {"f": list(children)}
        self.outputs_weakrefs = [Ref() for _ in range(outputs)]
        self.device = 0


class CUDAWarmupNode:
    def __init__(self, name: str, device_index: int) -> None:
        self.name = name
        self.device_index = device_index
        self.outputs_weakrefs = [Ref()]


class Manager:
    def __init__(self, roots: dict, current=None) -> None:
        self.roots = roots
        self.current_node = current
        self.path_state = None


def snapshots(live: dict, manager: Manager) -> TreeSnapshots:
    return TreeSnapshots(lambda node: None, lambda: live, lambda m, f: "f", {id(manager): "cuda:0"}, Counter(), {})


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
    child.outputs_weakrefs[1].live = False
    after = tree.state(manager, set())
    assert after != before
    assert tree.state(manager, {(0, 1)}) != after  # an output invalidated is told apart too
