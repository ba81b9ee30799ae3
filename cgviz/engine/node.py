"""Nodes of the tree, their outputs' liveness and the invariants that allow a replay."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from cgviz.engine.backend import LeafInfo
from cgviz._torch.rules import DEAD, MANAGED, STATIC

if TYPE_CHECKING:
    from cgviz.engine.function import Variant


def hexaddr(address: Optional[int]) -> str:
    return "?" if address is None else f"0x{address:x}"


@dataclass
class Mismatch:
    """Why a recorded graph cannot replay. `kind` names the failed check as torch's
    CheckInvariantStatus does (rules.MANAGED, rules.DEAD, rules.STATIC); whether recording
    again for it counts toward the re-record limit depends on the torch release (rules.py)."""

    reason: str
    kind: str


@dataclass
class Node:
    """A warmup run (kind 'warmup') or a recorded graph (kind 'graph') at one place in the tree.

    `leaves` describe the outputs of the node's latest run; their `ref`s say which are
    still referenced by the user. A warmup node only lives while its path does.
    """

    id: int
    kind: str
    variant: "Variant"
    parent: Optional["Node"]
    generation: int
    leaves: list[LeafInfo]
    children: dict[int, list["Node"]] = field(default_factory=dict)  # variant id -> recorded graphs
    warmups: list["Node"] = field(default_factory=list)  # warmup runs under this node (display only)
    replays: int = 0
    invalid: set[int] = field(default_factory=set)  # outputs of the latest run invalidated by mark_step()
    # graph nodes only:
    graph: Any = None
    copy_inputs: tuple[int, ...] = ()
    static_addresses: dict[int, int] = field(default_factory=dict)  # input index -> address
    managed_addresses: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # idx -> (addr, node, out)
    dead_before: list[tuple["Node", int]] = field(default_factory=list)  # path outputs dead at recording
    live_after: list[tuple["Node", int]] = field(default_factory=list)  # path outputs allocated at checkpoint
    has_invariants: bool = True  # False when nothing can stop a replay (skips the check)
    tracks_mode: bool = False  # a forward or backward: replays count pending backwards
    input_buffers: dict[int, int] = field(default_factory=dict)
    checkpoint: Any = None
    refs: Optional[list] = None  # the liveness refs of the latest replay, as the backend gave them
    values: Optional[list] = None  # Tree(values=True): each tensor output's summary after the latest run

    @property
    def path(self) -> list["Node"]:
        """Nodes from the root to this node."""
        out = []
        node: Optional[Node] = self
        while node is not None:
            out.append(node)
            node = node.parent
        out.reverse()
        return out

    def child_list(self) -> list["Node"]:
        """Children in creation order, graphs and warmups."""
        return sorted([c for nodes in self.children.values() for c in nodes] + self.warmups, key=lambda n: n.id)

    def output_alive(self, index: int) -> bool:
        ref = self.leaves[index].ref
        return ref is not None and index not in self.invalid and ref.alive()

    def path_is_live(self) -> bool:
        """Is any output of this node or its ancestors still referenced? (the hot path's test)"""
        node: Optional[Node] = self
        while node is not None:
            if node.invalid:
                if node.live_outputs():
                    return True
            else:
                for leaf in node.leaves:
                    ref = leaf.ref
                    if ref is not None and ref.alive():
                        return True
            node = node.parent
        return False

    def live_outputs(self) -> list[int]:
        return [i for i in range(len(self.leaves)) if self.output_alive(i)]

    def check_invariants(self, args: tuple, address) -> Optional[Mismatch]:
        """None if this graph can replay with `args` now, else why not (the first failed check,
        in the order of torch's CUDAGraphNode.check_invariants)."""
        for idx, (recorded, node_id, out) in self.managed_addresses.items():
            now = address(args[idx])
            if now != recorded:
                return Mismatch(
                    f"input {idx} was output {out} of node {node_id} at {hexaddr(recorded)} "
                    f"when recorded, now it is at {hexaddr(now)}",
                    MANAGED,
                )
        for node, out in self.dead_before:
            if node.output_alive(out):
                return Mismatch(f"output {out} of node {node.id} was dead at recording and is live now", DEAD)
        for idx, recorded in self.static_addresses.items():
            now = address(args[idx])
            if now != recorded:
                return Mismatch(f"static input {idx} moved from {hexaddr(recorded)} to {hexaddr(now)}", STATIC)
        return None
