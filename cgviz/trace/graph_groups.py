"""The CUDA graphs of a trace (`Trace.graphs`) grouped as people look for them: by the code that
captured them (a per-batch-size family is one line of code captured at several sizes) and by
the memory pool they share. The views and the doctor read these; pure data, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from cgviz.trace.model import GraphView, Trace

__all__ = ["Family", "PoolGroup", "families", "pools", "own_graphs"]


def own_graphs(trace: "Trace") -> list["GraphView"]:
    """The graphs that are not a node of an observed tree (those are shown as their node)."""
    return [g for g in trace.graphs if g.node is None]


@dataclass
class Family:
    """The graphs one line of code captured (several: one per batch size, or one per call)."""

    site: str
    graphs: list["GraphView"]

    @property
    def sizes(self) -> list[int]:
        """The batch sizes its graphs were captured for (where the caller said), ascending."""
        return sorted({g.batch for g in self.graphs if g.batch is not None})

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)

    @property
    def padding(self) -> Optional[float]:
        """The share of the rows replayed that were padding, where the caller said how many
        were in use (`cgviz.graph_batch(size, used=...)`); None where it never did."""
        padded = sum(g.padded for g in self.graphs)
        return None if not padded else 1 - sum(g.used for g in self.graphs) / padded

    @property
    def memory(self) -> int:
        return sum(g.memory for g in self.graphs)


@dataclass
class PoolGroup:
    """The graphs that captured into one memory pool."""

    pool: int
    graphs: list["GraphView"]

    @property
    def shared(self) -> bool:
        return len(self.graphs) > 1

    @property
    def memory(self) -> int:
        """The bytes the device reserved for its graphs' captures."""
        return sum(g.memory for g in self.graphs)

    @property
    def growth(self) -> list[int]:
        """The pool's size after each capture into it, where it was read (trace level "full")."""
        return [g.pool_bytes for g in self.graphs if g.pool_bytes is not None]


def families(trace: "Trace") -> list[Family]:
    """Graphs by the line that captured them, in the order each line first captured."""
    out: dict[str, Family] = {}
    for g in own_graphs(trace):
        out.setdefault(g.site, Family(g.site, [])).graphs.append(g)
    return list(out.values())


def pools(trace: "Trace") -> list[PoolGroup]:
    """Graphs by the pool they captured into, in the order the pools were first used."""
    out: dict[int, PoolGroup] = {}
    for g in own_graphs(trace):
        out.setdefault(g.pool, PoolGroup(g.pool, [])).graphs.append(g)
    return list(out.values())
