"""The nodes a state at "full" shows are walked once per change of the trees, not at each
decision (TreeSnapshots._shown_now): every way the trees change shows in the next state, and a
loop's states under random changes equal a walk and a read of every output made afresh."""

from __future__ import annotations

import random

import pytest
from tree_standins import (
    CachedOutputsNode, CUDAGraphNode, CUDAWarmupNode, Manager, liveness, looping_observer, shown_ids,
)

from cgviz.observe.observer import TorchObserver
from cgviz.observe.tree_snapshots import TreeSnapshots


def test_a_graph_recorded_during_a_loop_is_shown_from_its_recording_on():
    """A replay loop's state walks the tree once per change: a node torch records is shown
    from the decision that records it."""
    observer, manager, root = looping_observer()
    child = CUDAGraphNode("b")
    root.children["f"].append(child)
    observer.step("record", "recording b", manager, node=child)
    assert shown_ids(observer, manager) == [id(root), id(child)]


def test_a_node_added_without_a_name_is_shown_from_the_next_decision_off_the_loop():
    """A recording that raised leaves its node in torch's tree, never named by the observer:
    the error's step is a decision off the replay loop, and from it on the node is shown."""
    observer, manager, root = looping_observer()
    child = CUDAGraphNode("b")
    root.children["f"].append(child)
    observer.step("error", "recording b raised", manager)
    assert observer.log.states[-1][3][0::2] == (id(root), id(child))  # the state the error step was made in
    assert shown_ids(observer, manager) == [id(root), id(child)]


def test_a_warmup_node_is_shown_while_it_lives():
    observer, manager, root = looping_observer()
    warmup = CUDAWarmupNode("w", 0)
    observer.node_id(warmup)
    assert shown_ids(observer, manager) == [id(root), id(warmup)]
    del warmup  # torch lets it go
    assert shown_ids(observer, manager) == [id(root)]


def test_a_tree_shut_down_shows_nothing_though_its_nodes_live():
    observer, manager, root = looping_observer()
    manager.roots = None  # torch's shutdown(), which the observer is told of
    observer.manager_shutting_down(manager)
    assert shown_ids(observer, manager) == [] and root.held


def test_two_managers_in_turn_each_show_their_own_nodes():
    """Trees on two devices, replayed in turn: each state shows its own tree's nodes and their
    outputs' liveness as torch's replays change it (each replay hands its output out again,
    which dies before the other tree's replay), however often the other's is read between."""
    roots = [CachedOutputsNode("a"), CachedOutputsNode("b", outputs=2)]
    managers = [Manager({"f": [root]}, current=root) for root in roots]
    for manager in managers:
        manager.device_index, manager.cuda_graphs_thread_pool = None, None
    observer = TorchObserver("full")
    for _ in range(3):
        for manager, root in zip(managers, roots):
            out = root.replay()
            observer.replayed(manager, root)
            assert liveness(observer.snapshots, manager) == [True] * len(out)
            del out
            assert liveness(observer.snapshots, manager) == [False] * len(root.outputs_weakrefs)



def test_a_manager_at_a_freed_ones_id_gets_a_walk_of_its_own():
    """torch frees a manager and makes another, which Python may place at the freed one's id():
    the new manager's state shows its own tree, not the walk kept for the old one."""
    observer, old, root = looping_observer()
    node = CUDAGraphNode("b")
    new = Manager({"f": [node]}, current=node)
    new.device_index, new.cuda_graphs_thread_pool = 0, None
    shown = observer.snapshots._shown
    shown[id(new)] = shown.pop(id(old))  # as if `new` had taken old's address
    del old
    assert shown_ids(observer, new) == [id(node)]

class RandomTrees:
    """Two trees of cached-output nodes under one observer at "full", changed at random (a fixed
    seed) as a program and torch change them: replays (the caller keeping some outputs), outputs
    let go, graphs recorded, warmup nodes made and freed, paths ended, generations, the current
    node moved, a leaf leaving its tree, a tree shut down or its manager freed, and a new one
    made in its place."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.observer = TorchObserver("full")
        self.trees: list[tuple[Manager, list[CachedOutputsNode]]] = []
        self.held: list = []  # the outputs the caller keeps
        self.warmups: list[CUDAWarmupNode] = []
        self.new_tree()
        self.new_tree()

    def new_tree(self) -> None:
        root = CachedOutputsNode("root", outputs=self.rng.randint(1, 3))
        manager = Manager({"f": [root]}, current=root)
        manager.device_index, manager.cuda_graphs_thread_pool = None, None
        self.trees.append((manager, [root]))

    def change(self) -> None:
        rng, observer = self.rng, self.observer
        manager, nodes = rng.choice(self.trees)
        action = rng.random()
        if action < 0.4:
            node = rng.choice(nodes)
            manager.current_node = node
            out = node.replay()
            observer.replayed(manager, node)
            self.held += rng.sample(out, rng.randint(0, len(out)))
        elif action < 0.6 and self.held:
            del self.held[rng.randrange(len(self.held))]
        elif action < 0.68:
            parent = rng.choice(nodes)
            child = CachedOutputsNode("child", outputs=rng.randint(1, 3))
            parent.children["f"].append(child)
            child.parent = parent
            nodes.append(child)
            manager.current_node = child
            observer.step("record", "recording a child", manager, node=child)
        elif action < 0.74:
            warmup = CUDAWarmupNode("warmup", 0)
            warmup.device_index = None  # on the trees' device
            observer.node_id(warmup)
            self.warmups.append(warmup)
        elif action < 0.8 and self.warmups:
            del self.warmups[rng.randrange(len(self.warmups))]
        elif action < 0.86:
            observer.path_ended(manager, manager.current_node)
        elif action < 0.9:
            observer.generation_began(manager)
        elif action < 0.94:
            manager.current_node = rng.choice(nodes + [None])
        elif action < 0.97:
            leaves = [n for n in nodes[1:] if not n.children["f"]]
            if leaves:
                leaf = rng.choice(leaves)
                leaf.parent.children["f"].remove(leaf)
                nodes.remove(leaf)
                if manager.current_node is leaf:
                    manager.current_node = leaf.parent
        else:  # torch shuts the tree down, or frees its manager with its compiled functions
            if action < 0.985:
                manager.roots = None
                observer.manager_shutting_down(manager)
            self.trees.remove((manager, nodes))
            del manager, nodes  # its id() free for the next manager's
            self.new_tree()


def afresh(observer: TorchObserver, manager: Manager) -> tuple:
    """The state a walk of the tree and a read of every output made now give (nothing kept)."""
    return TreeSnapshots(lambda node: None, observer.live_nodes, observer.label, observer._devices,
                         observer.replays, observer._born).state(manager, set())


@pytest.mark.parametrize("seed", range(6))
def test_states_under_random_changes_are_what_a_walk_and_reads_afresh_give(seed):
    trees = RandomTrees(seed)
    for _ in range(250):
        trees.change()
        for manager, _ in trees.trees:
            assert trees.observer.snapshots.state(manager, set()) == afresh(trees.observer, manager)
