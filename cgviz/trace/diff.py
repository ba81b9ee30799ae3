"""What changed between two snapshots, as data and as plain-words lines.

Views use this to show what a step did to the tree and the pool ("node 4 added",
"output 0 of node 2: live → invalid") instead of two whole snapshots side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from cgviz.trace.model import Block, NodeView, Segment, Snapshot, Trace
from cgviz.trace.units import format_bytes


@dataclass
class OutputChange:
    node: int
    index: int
    old: str
    new: str


@dataclass
class BlockChange:
    """A block (by address) whose allocation or owner changed; None: no block starts there."""

    address: int
    old: Optional[Block]
    new: Optional[Block]


@dataclass
class SnapshotDiff:
    """Differences from snapshot a to snapshot b; (old, new) pairs are None when unchanged."""

    nodes_added: list[NodeView] = field(default_factory=list)
    nodes_removed: list[NodeView] = field(default_factory=list)
    replays: list[tuple[int, int, int]] = field(default_factory=list)  # (node, old, new)
    outputs: list[OutputChange] = field(default_factory=list)
    current_node: Optional[tuple[Optional[int], Optional[int]]] = None
    path: Optional[tuple[list[int], list[int]]] = None
    state: Optional[tuple[str, str]] = None
    generation: Optional[tuple[int, int]] = None
    segments_added: list[Segment] = field(default_factory=list)
    segments_removed: list[Segment] = field(default_factory=list)
    reserved_delta: int = 0
    allocated_delta: int = 0
    blocks: list[BlockChange] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def summary(self) -> list[str]:
        """One plain-words line per change, the tree first, then the pool."""
        lines = []
        if self.generation:
            lines.append(f"generation {self.generation[0]} → {self.generation[1]}")
        if self.state:
            lines.append(f"state {self.state[0]} → {self.state[1]}")
        if self.current_node:
            old, new = (_node_name(n) for n in self.current_node)
            lines.append(f"current node {old} → {new}")
        if self.path:
            old, new = ("→".join(map(str, p)) or "empty" for p in self.path)
            lines.append(f"path {old} → {new}")
        for n in self.nodes_added:
            parent = "a root" if n.parent is None else f"parent {n.parent}"
            lines.append(f"node {n.id} added ({n.function}, {n.kind}, {parent})")
        lines += [f"node {n.id} removed ({n.function}, {n.kind})" for n in self.nodes_removed]
        lines += [f"node {n} replays {old} → {new}" for n, old, new in self.replays]
        lines += [f"output {o.index} of node {o.node}: {o.old} → {o.new}" for o in self.outputs]
        lines += [f"segment {s.address:#x} added ({s.kind}, {format_bytes(s.size)})" for s in self.segments_added]
        lines += [f"segment {s.address:#x} removed ({s.kind}, {format_bytes(s.size)})" for s in self.segments_removed]
        if self.reserved_delta:
            lines.append(f"pool reserved {format_bytes(self.reserved_delta, sign=True)}")
        if self.allocated_delta:
            lines.append(f"pool allocated {format_bytes(self.allocated_delta, sign=True)}")
        for c in self.blocks:
            size = (c.new if c.new is not None and c.new.allocated else c.old or c.new).size  # the allocated one's
            lines.append(f"block {c.address:#x} ({format_bytes(size)}): {_block_name(c.old)} → {_block_name(c.new)}")
        return lines


def diff_snapshots(a: Snapshot, b: Snapshot) -> SnapshotDiff:
    """Compare nodes by id, outputs by (node, index), segments and blocks by address."""
    d = SnapshotDiff()
    old_nodes, new_nodes = {n.id: n for n in a.nodes}, {n.id: n for n in b.nodes}
    d.nodes_added = [n for i, n in new_nodes.items() if i not in old_nodes]
    d.nodes_removed = [n for i, n in old_nodes.items() if i not in new_nodes]
    for i, new in new_nodes.items():
        old = old_nodes.get(i)
        if old is None:
            continue
        if old.replays != new.replays:
            d.replays.append((i, old.replays, new.replays))
        old_states = {o.index: o.state for o in old.outputs}
        for o in new.outputs:
            was = old_states.get(o.index)
            if was is not None and was != o.state:
                d.outputs.append(OutputChange(i, o.index, was, o.state))
    for name in ("current_node", "state", "generation"):
        if getattr(a, name) != getattr(b, name):
            setattr(d, name, (getattr(a, name), getattr(b, name)))
    if a.path != b.path:
        d.path = (list(a.path), list(b.path))
    old_segs, new_segs = {s.address: s for s in a.segments}, {s.address: s for s in b.segments}
    d.segments_added = [s for addr, s in new_segs.items() if addr not in old_segs]
    d.segments_removed = [s for addr, s in old_segs.items() if addr not in new_segs]
    d.reserved_delta = b.reserved_bytes - a.reserved_bytes
    d.allocated_delta = b.allocated_bytes - a.allocated_bytes
    old_blocks = {blk.address: blk for s in a.segments for blk in s.blocks}
    new_blocks = {blk.address: blk for s in b.segments for blk in s.blocks}
    for addr in sorted(old_blocks.keys() | new_blocks.keys()):
        old, new = old_blocks.get(addr), new_blocks.get(addr)
        if _block_key(old) != _block_key(new):
            d.blocks.append(BlockChange(addr, old, new))
    return d


def diff_steps(trace: Trace, i: int, j: int) -> SnapshotDiff:
    """The diff between the snapshots taken after steps i and j (positions in trace.steps)."""
    for k in (i, j):
        if not -len(trace.steps) <= k < len(trace.steps):
            raise IndexError(f"no step {k}: the trace has {len(trace.steps)} steps")
    snaps = []
    for k in (i, j):
        snap = trace.steps[k].snapshot
        if snap is None:
            level = trace.meta.get("trace_level")
            raise ValueError(
                f"step {k} has no snapshot (trace level {level!r}); record with trace='full' to compare steps"
            )
        snaps.append(snap)
    return diff_snapshots(*snaps)


def _block_key(b: Optional[Block]) -> tuple:
    """What counts as a change of a block: free blocks and no block at all are alike."""
    if b is None or not b.allocated:
        return (False, None)
    return (True, b.owner)


def _block_name(b: Optional[Block]) -> str:
    if b is None or not b.allocated:
        return "free"
    return b.owner or "allocated"


def _node_name(n: Optional[int]) -> str:
    return "none" if n is None else str(n)


def decisions(trace: Trace) -> list[tuple]:
    """What a tree decided, step by step, without what depends on the machine.

    Step kinds, functions, nodes, parents, repeats, generations, the number of outputs
    invalidated, and after each step every output's live/dead/invalid state: equal for the
    same workload on sim and on cuda (addresses, durations and pool layout aside).
    """
    out = []
    for s in trace.steps:
        states = None
        if s.snapshot is not None:
            states = sorted((n.id, o.index, o.state) for n in s.snapshot.nodes for o in n.outputs)
        out.append((s.kind, s.function, s.node, s.parent, s.repeat, s.span, s.generation, len(s.invalidated), states))
    return out
