"""Turns the tree's decisions into Trace steps and snapshots, at the level asked for.

Level None records nothing (the replay path pays one attribute test); "events" records
steps; "full" adds a Snapshot after each step. Repeated work is stored once: when the
newest k steps (k <= MAX_SPAN) repeat the k before them, they fold into that block's
repeat count, so a replay loop of any length stays a few steps long.
"""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING, Callable, Optional

from cgviz.engine.pool_model import round_size
from cgviz.trace.model import Block, NodeView, OutputView, Segment, Snapshot, Step, Trace, safe_text

if TYPE_CHECKING:
    from cgviz.engine.node import Node
    from cgviz.engine.tree import Tree


MAX_SPAN = 8


def step_key(step: Step) -> tuple:
    """What makes two steps the same decision, generation numbers aside."""
    reason = None if step.kind == "generation" else step.reason
    return (step.kind, step.function, step.node, step.parent, tuple(map(tuple, step.invalidated)), reason)


def fold_repeats(steps: list[Step], keys: list[tuple]) -> Optional[Step]:
    """Fold the newest k steps into the identical block just before them, if there is one.

    `keys` holds `step_key` of each step. Returns the block's last step when folded.
    """
    n = len(steps)
    last = keys[-1] if keys else None
    for k in range(1, min(MAX_SPAN, n // 2) + 1):
        if keys[n - 1 - k] != last or keys[n - k :] != keys[n - 2 * k : n - k]:
            continue
        new, old = steps[n - k :], steps[n - 2 * k : n - k]
        end = old[-1]
        if any(s.repeat != 1 for s in new) or any(s.repeat != 1 or s.span != 1 for s in old[:-1]):
            continue
        if end.repeat != 1 and end.span != k:
            continue
        for kept, again in zip(old, new):
            kept.duration += again.duration
            if again.snapshot is not None:
                kept.snapshot = again.snapshot
        end.repeat += 1
        end.span = k
        del steps[n - k :], keys[n - k :]
        return end
    return None


class Recorder:
    def __init__(self, tree: "Tree", level: Optional[str]) -> None:
        self.tree = tree
        self.level = level
        self.trace = Trace(meta={"trace_level": level})
        self.listeners: list = []  # callables(step), e.g. a live Explorer
        self._keys: list[tuple] = []  # step_key of each stored step

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
        step = Step(
            index=len(self.trace.steps),
            kind=kind,
            reason=safe_text(reason),  # user text (exception messages, names) may not be valid UTF-8
            generation=self.tree.generation,
            function=None if function is None else safe_text(function),
            node=node,
            parent=parent,
            duration=time.perf_counter() - start,
            invalidated=invalidated or [],
        )
        self._append(step)

    def execute(self, node: "Node", start: float) -> None:
        if self.level is None:
            return
        parent = node.parent
        where = "a root" if parent is None else f"under node {parent.id}"
        self.step(
            "execute",
            f"{node.variant.label} replays node {node.id} ({where}): static inputs in place "
            "and the path's live outputs as at recording",
            start=start,
            function=node.variant.label,
            node=node.id,
            parent=None if parent is None else parent.id,
        )

    def _append(self, step: Step) -> None:
        if self.level == "full":
            step.snapshot = self.snapshot()
        self.trace.steps.append(step)
        self._keys.append(step_key(step))
        shown = fold_repeats(self.trace.steps, self._keys) or step
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


def owned_segments(raw_segments: list, nodes: list[NodeView], buffers: dict) -> list[Segment]:
    """Pool segments, each block mapped to what lives in it, by address.

    During replays the allocator's view is stale (replays bypass it): memory it calls
    free may hold live outputs. Such a free block is shown split, each live output's
    bytes as an allocated piece owned by that output, so the picture shows what is in
    use. `buffers` (address -> (node, input)) claim the allocated blocks at their address.
    """
    live = sorted(
        (out.address, max(out.nbytes, 1), view.id, out.index)
        for view in nodes
        for out in view.outputs
        if out.alias_of is None and out.state == "live" and out.address is not None
    )
    segments = []
    for raw in raw_segments:
        blocks: list[Block] = []
        for b in raw.blocks:
            lo = bisect.bisect_left(live, (b.address,))
            hi = bisect.bisect_left(live, (b.address + b.size,))
            inside = live[lo:hi]
            if b.allocated or not inside:
                blocks.append(_claimed(b, inside, buffers))
                continue
            cursor = b.address
            for address, nbytes, node, out in inside:
                end = min(b.address + b.size, address + round_size(nbytes))
                if address < cursor:
                    continue
                if address > cursor:
                    blocks.append(Block(cursor, address - cursor, False))
                blocks.append(Block(address, end - address, True, nbytes, f"node {node} output {out}", node, out))
                cursor = end
            if cursor < b.address + b.size:
                blocks.append(Block(cursor, b.address + b.size - cursor, False))
        segments.append(Segment(raw.address, raw.size, raw.kind, blocks))
    return segments


def _claimed(b, inside: list, buffers: dict) -> Block:
    """An allocator block as it is, named after the live output or input buffer in it."""
    if inside:
        _, _, node, out = inside[0]
        return Block(b.address, b.size, b.allocated, b.requested, f"node {node} output {out}", node, out)
    if b.allocated and b.address in buffers:
        node, i = buffers[b.address]
        return Block(b.address, b.size, True, b.requested, f"node {node} input {i} buffer", node, None)
    owner = "unowned (intermediate or stale)" if b.allocated else None
    return Block(b.address, b.size, b.allocated, b.requested, owner)


def _node_view(n: "Node") -> NodeView:
    outputs = []
    for i, leaf in enumerate(n.leaves):
        if leaf.ref is None:
            state = "dead"
        elif i in n.invalid:
            state = "invalid"
        else:
            state = "live" if leaf.ref.alive() else "dead"
        outputs.append(OutputView(i, list(leaf.shape), leaf.dtype, leaf.nbytes, leaf.address, state, leaf.alias_of))
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
