"""The Trace: steps, snapshots and their JSON form."""

from cgviz.trace.model import SCHEMA_VERSION, Block, NodeView, OutputView, Segment, Snapshot, Step, Trace

__all__ = ["SCHEMA_VERSION", "Block", "NodeView", "OutputView", "Segment", "Snapshot", "Step", "Trace"]
