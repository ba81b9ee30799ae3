"""Turns the tree's decisions into Trace steps and snapshots, at the level asked for.

Level None records nothing (the replay path pays one attribute test); "events" records
steps; "full" adds a Snapshot after each step. Repeated work is stored once (trace/fold.py),
so a replay loop of any length stays a few steps long; pool blocks are named after their
owners by trace/ownership.py.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Optional

from cgviz.trace.fold import StepLog, step_key
from cgviz.trace.model import NodeView, OutputView, Segment, Snapshot, Step, Trace, safe_text
from cgviz.trace.ownership import owned_segments

# What torch checks before it replays a node (CUDAGraphNode.check_invariants): the static inputs
# and the inputs that are outputs of the path at their recorded addresses, and every output of the
# path that was dead at recording still dead (outputs live then may have died since).
REPLAY_RULE = ("its static inputs and the inputs that are outputs of the path are where they were at recording, "
               "and no output of the path that was dead at recording is live")

if TYPE_CHECKING:
    from cgviz.engine.node import Node
    from cgviz.engine.tree import Tree


class Recorder:
    def __init__(self, tree: "Tree", level: Optional[str]) -> None:
        self.tree = tree
        self.level = level
        self.trace = Trace(meta={"trace_level": level})
        self.listeners: list = []  # callables(step), e.g. a live Explorer
        self.log = StepLog(self.trace.steps, defer=False)  # read while the tree runs: kept exact

    def subscribe(self, fn: Callable[[Step], None]) -> Callable[[], None]:
        """Call `fn(step)` after each recorded step (a fold passes the block's last step), e.g.
        a live Explorer; returns the function that stops it."""
        self.listeners.append(fn)

        def unsubscribe() -> None:
            if fn in self.listeners:
                self.listeners.remove(fn)
        return unsubscribe

    @property
    def meta(self) -> dict:
        return self.trace.meta

    def step(
        self,
        kind: str,
        reason: str,
        *,
        start: float,
        function: Optional[str] = None,
        node: Optional[int] = None,
        parent: Optional[int] = None,
        invalidated: Optional[list] = None,
    ) -> None:
        if self.level is None:
            return
        duration = time.perf_counter() - start
        step = Step(
            index=len(self.trace.steps),
            kind=kind,
            reason=safe_text(reason),  # user text (exception messages, names) may not be valid UTF-8
            generation=self.tree.generation,
            function=None if function is None else safe_text(function),
            node=node,
            parent=parent,
            duration=duration,
            invalidated=invalidated or [],
            # `start` is perf_counter()'s (durations need a steady clock); the step's start on the
            # wall clock torch's profiler uses is now on that clock less the time since then
            start=time.time() - duration,
        )
        self._append(step)

    def execute(self, node: "Node", start: float) -> None:
        """A replay, in torch's rule for one (CUDAGraphNode.check_invariants)."""
        if self.level is None:
            return
        parent = node.parent
        where = "a root" if parent is None else f"under node {parent.id}"
        self.step(
            "execute",
            f"{node.variant.label} replays node {node.id} ({where}): {REPLAY_RULE}",
            start=start,
            function=node.variant.label,
            node=node.id,
            parent=None if parent is None else parent.id,
        )

    def _append(self, step: Step) -> None:
        if self.level == "full":
            step.snapshot = self.snapshot()
        shown = self.log.add(step_key(step), step, step.duration)
        for listener in self.listeners:
            listener(shown)

    # -- snapshots ----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        tree = self.tree
        nodes = [_node_view(n) for n in tree.nodes]
        path = [n.id for n in tree.current.path] if tree.current is not None else []
        return Snapshot(
            nodes=nodes,
            current_node=None if tree.current is None else tree.current.id,
            path=path,
            state=tree.state,
            generation=tree.generation,
            segments=self._segments(nodes, path),
        )

    def _segments(self, nodes: list[NodeView], path: list[int]) -> list[Segment]:
        on_path = set(path)
        buffers = {address: (n.id, i) for n in self.tree.nodes if n.id in on_path for i, address in n.input_buffers.items()}
        return owned_segments(self.tree.backend.segments(), nodes, buffers)


def _node_view(n: "Node") -> NodeView:
    outputs = []
    for i, leaf in enumerate(n.leaves):
        if leaf.ref is None:
            state = "dead"
        elif i in n.invalid:
            state = "invalid"
        else:
            state = "live" if leaf.ref.alive() else "dead"
        values = n.values[i] if n.values is not None and i < len(n.values) else None
        outputs.append(OutputView(i, list(leaf.shape), leaf.dtype, leaf.nbytes, leaf.address, state, leaf.alias_of,
                                  values))
    return NodeView(
        id=n.id,
        function=n.variant.label,
        kind=n.kind,
        parent=None if n.parent is None else n.parent.id,
        children=[c.id for c in n.child_list()],
        generation=n.generation,
        replays=n.replays,
        outputs=outputs,
        signature=n.variant.signature,
    )
