"""The inference loop's shortcut: a root replayed again once its outputs died.

In a loop such as ``for x in batches: y = f(x)`` every call finds the path of f's root dead,
ends it and replays the root: the same decision each time (Tree._run makes it). After making it
once the tree keeps what it needs here, and the next call that finds the tree where that
decision left it (the root current, its function called with the same input signature) checks
only what can change between such calls: the signature, the root's outputs' liveness, and then
replays. Any other call (one that finds the outputs live or raises included), mark_step() and
reset() drop the shortcut, so everything else the decision depends on (the tree's shape, the
variant's state, the place's history) is as it was.

Only where the decision has nothing else to check: a root with no invariants (no static input),
no child of its own function, an inference function. Where the tree times replays (a profile),
keeps values or snapshots ("full": a decision's state is read between the path's end and the
replay), and where the backend has no faster replay for the graph, the call then ends the path
and replays through the tree's own steps; elsewhere it checks the outputs' liveness and replays
in one call of the backend's (Backend.steady_replay).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from cgviz.engine.backend import Backend
    from cgviz.engine.function import TreeFunction, Variant
    from cgviz.engine.node import Node


class SteadyRoot:
    """What the loop's call needs: whose call it is, which root it replays, and how."""

    __slots__ = ("fn", "node", "arity", "matches", "replay")

    def __init__(self, fn: "TreeFunction", node: "Node", arity: int, matches: Callable[..., bool],
                 replay: Optional[Callable[[tuple], Any]]) -> None:
        self.fn = fn
        self.node = node
        self.arity = arity
        self.matches = matches  # args -> the variant's signature (torch's check, in C++)
        self.replay = replay  # args -> the outputs, or NOT_NOW while the root's outputs are live; None: own steps


def steady_root(variant: "Variant", node: "Node", roots: dict, backend: "Backend", own_steps: bool) -> Optional[SteadyRoot]:
    """The shortcut for calls of `variant` after `node`, a root, was replayed again; None where
    its decision has more to check. `own_steps`: the tree times replays, keeps values or
    snapshots, so the call ends the path and replays through the tree's own steps (no `replay`, as
    where the backend has no steady_replay for the graph)."""
    if (variant.matches is None or variant.grad_inputs or node.has_invariants or node.tracks_mode
            or variant.id in node.children or roots[variant.id][0] is not node):
        return None
    replay = None if own_steps else backend.steady_replay(node.graph, node.copy_inputs)
    return SteadyRoot(variant.function, node, len(variant.key), variant.matches, replay)

