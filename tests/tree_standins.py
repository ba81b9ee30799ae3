"""Stand-ins for torch's tree manager and its nodes, with the attributes the layout names, whose
outputs are torch's own weak references (StorageWeakRefWrapper, on CPU storages); and readers of
what an observer's snapshots show of them."""

from __future__ import annotations

import functools
import sys
import weakref
from collections import Counter

import torch
from torch._inductor.cudagraph_trees import StorageWeakRefWrapper

from cgviz.observe.observer import TorchObserver
from cgviz.observe.tree_snapshots import TreeSnapshots


def held_outputs(count: int) -> tuple[list, list]:
    """`count` outputs held by the caller (the first list), and torch's references to them."""
    held = [torch.zeros(4) for _ in range(count)]
    return held, [StorageWeakRefWrapper(t) for t in held]


class CUDAGraphNode:
    def __init__(self, name: str, *children: "CUDAGraphNode", outputs: int = 1) -> None:
        self.name = name
        self.children = {"f": list(children)}
        self.held, self.outputs_weakrefs = held_outputs(outputs)
        self.device = 0
        self.parent = None
        for child in children:
            child.parent = self
        # (depth, output index) of the path's outputs torch finds dead before replaying this node
        self.expected_dead_indices_before_graph, self.expected_dead_indices_after_graph = [], []


class CUDAWarmupNode:
    def __init__(self, name: str, device_index: int) -> None:
        self.name = name
        self.device_index = device_index
        self.held, self.outputs_weakrefs = held_outputs(1)


class Manager:
    def __init__(self, roots: dict, current=None) -> None:
        self.roots = roots
        self.current_node = current
        self.path_state = None


def check_refcount_2_11(node: "CachedOutputsNode", i: int) -> bool:
    """torch 2.11 - 2.14's check_refcount (cudagraph_trees.py), as a cached output's extra check."""
    refcount = node.get_output_refcount(i)
    if node.cached_tensor_outputs[i]._use_count() > 1:
        assert refcount >= 3
        return refcount == 3
    assert refcount >= 2
    return refcount == 2


def check_refcount_2_15(node: "CachedOutputsNode", i: int) -> bool:
    """torch 2.15's check_refcount: a tensor C++ holds is live; a stale grad_fn is detached."""
    refcount = node.get_output_refcount(i)
    cached = node.cached_tensor_outputs[i]
    if refcount == 2 and cached._use_count() == 1 and cached.grad_fn is not None:
        cached.detach_()
    if cached._use_count() > 1:
        return False
    assert refcount >= 2
    return refcount == 2


class Asked(StorageWeakRefWrapper):
    """torch's weak reference to an output's storage, counting the calls of expired()."""

    asked = 0

    def expired(self) -> bool:
        Asked.asked += 1
        return super().expired()


class CachedOutputsNode(CUDAGraphNode):
    """A recorded node whose outputs torch caches: each output's reference carries torch's extra
    check (check_refcount of a release), and a replay hands the cached tensor out again."""

    def __init__(self, name: str, outputs: int = 1, check=check_refcount_2_11) -> None:
        super().__init__(name, outputs=0)
        self.cached_tensor_outputs: list = []
        self.check = check
        self.initialize_cached_tensors(outputs)

    def initialize_cached_tensors(self, outputs: int) -> None:
        """As torch's _initialize_cached_tensors: new cached tensors, each with a new wrapper
        (at the recording, and at the first run after a checkpoint took them out)."""
        assert not self.cached_tensor_outputs
        node, check = weakref.ref(self), self.check

        def check_refcount(i: int) -> bool:
            return check(node(), i)

        self.cached_tensor_outputs += [torch.zeros(4) for _ in range(outputs)]
        self.outputs_weakrefs = [Asked(t, extra_ref_check=functools.partial(check_refcount, i))
                                 for i, t in enumerate(self.cached_tensor_outputs)]

    def get_output_refcount(self, index: int) -> int:
        return sys.getrefcount(self.cached_tensor_outputs[index])

    def replay(self) -> list:
        return list(self.cached_tensor_outputs)


def snapshots(live: dict, manager: Manager) -> TreeSnapshots:
    return TreeSnapshots(lambda node: None, lambda: live, lambda m, f: "f", {id(manager): "cuda:0"}, Counter(), {})


def liveness(tree: TreeSnapshots, manager: Manager) -> list:
    """The outputs' liveness in the state (which holds each shown node's id, then the indices of
    its live outputs), one bool per output of each node."""
    shown = tree.state(manager, set())[3]
    nodes = tree.shown_nodes(manager, tree.live_nodes())
    assert shown[0::2] == tuple(id(node) for node in nodes)
    return [i in live for node, live in zip(nodes, shown[1::2]) for i in range(len(node.outputs_weakrefs))]


def shown_ids(observer: TorchObserver, manager: Manager) -> list:
    """The id() of each node the state of a decision now shows."""
    return list(observer.snapshots.state(manager, set())[3][0::2])


def looping_observer(rounds: int = 4) -> tuple[TorchObserver, Manager, CUDAGraphNode]:
    """An observer at "full" in a steady replay loop of one root, its state read many times."""
    root = CUDAGraphNode("a")
    manager = Manager({"f": [root]}, current=root)
    manager.device_index, manager.cuda_graphs_thread_pool = 0, None
    observer = TorchObserver("full")
    for _ in range(rounds):
        observer.replayed(manager, root)
        observer.path_ended(manager, root)
    assert shown_ids(observer, manager) == [id(root)]
    return observer, manager, root
