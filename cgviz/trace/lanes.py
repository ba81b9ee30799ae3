"""Whose tree made a step, where a trace holds several: its rank and its device.

torch keeps a tree manager per device (per thread), so a trace can hold several trees: one per
rank once ranks' traces are merged (`Step.rank`), one per device where one process ran trees on
several (`Step.device`). A tree is named by (rank, device); either is None where the trace does
not tell them apart. The views give each tree a lane of the timeline and a drawing of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional

if TYPE_CHECKING:
    from cgviz.trace.model import Step

__all__ = ["TreeKey", "tree_of", "tree_keys", "in_tree_order", "tree_name", "tree_id_prefix"]

TreeKey = tuple[Optional[int], Optional[str]]


def tree_of(step: "Step") -> TreeKey:
    """The tree that made `step`: (rank, device)."""
    return step.rank, step.device


def tree_keys(steps: Iterable["Step"]) -> list[TreeKey]:
    """The trees the steps come from, in order (`in_tree_order`)."""
    return in_tree_order(map(tree_of, steps))


def in_tree_order(keys: Iterable[TreeKey]) -> list[TreeKey]:
    """The distinct trees of `keys` by rank, then device ('cuda:2' before 'cuda:10')."""
    return sorted(set(keys), key=_order)


def tree_name(key: TreeKey) -> str:
    """'rank 1', 'cuda:1' or 'rank 1 · cuda:1'; 'no rank' for a tree named by neither."""
    rank, device = key
    parts = ([] if rank is None else [f"rank {rank}"]) + ([] if device is None else [device])
    return " · ".join(parts) or "no rank"


def tree_id_prefix(key: TreeKey) -> str:
    """What the ids of a tree's drawing start with where several trees share a picture: 'rank1-',
    'cuda1-', 'rank1-cuda1-' (letters, digits and dashes: valid in an SVG id and a CSS selector)."""
    rank, device = key
    return ("" if rank is None else f"rank{rank}-") + ("" if device is None else device.replace(":", "") + "-")


def _order(key: TreeKey) -> tuple:
    rank, device = key
    kind, _, index = (device or "").partition(":")
    # isdecimal, not isdigit ("²" is a digit int() refuses); at most 18 digits (int() refuses thousands)
    return (rank is None, rank or 0, device is None, kind, int(index) if index.isdecimal() and len(index) < 19 else -1)
