"""Which renderer draws a tree: the one "auto" policy, and `tree_svg`, which follows it.

"auto" means Graphviz's `dot` where it is installed and would draw the trees asked for within
the caller's time budget, and the built-in layout otherwise. A picture of one tree has a budget
that keeps stepping through a trace quick; a page of many trees has its own (`page_data`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, NamedTuple, Optional

from cgviz.views.tree.dot import GraphvizError, dot_available, graphviz_svg, to_dot
from cgviz.views.tree.svg import builtin_tree_svg

if TYPE_CHECKING:
    from cgviz.trace.model import Snapshot, Step

RENDERERS = ("auto", "graphviz", "builtin")

# Graphviz's time for a tree: about 15 ms a `dot` run plus 1.1 ms a node.
DOT_RUN_S = 0.015
DOT_NODE_S = 0.0011

#: A picture of one tree: "auto" uses Graphviz up to this many nodes (the built-in layout draws
#: 1,000 nodes in about 25 ms, so past this size stepping through a trace stays quick).
AUTO_GRAPHVIZ_MAX_NODES = 200

LARGE_TREE_NOTICE = (
    "{nodes} nodes: built-in layout (Graphviz is used up to {limit} nodes; renderer='graphviz' uses it anyway)"
)
GRAPHVIZ_MISSING_NOTICE = (
    "Graphviz not found: built-in layout (install graphviz: apt install graphviz / "
    "brew install graphviz / conda install graphviz)"
)

#: The built-in layout's notice where `dot` failed on a tree; {problem}: what it said.
GRAPHVIZ_FAILED_NOTICE = "Graphviz's dot could not draw this tree ({problem}): built-in layout"


def dot_seconds(node_counts: Iterable[int]) -> float:
    """About how long Graphviz takes to lay out trees of these many nodes, one `dot` run each."""
    counts = list(node_counts)
    return DOT_RUN_S * len(counts) + DOT_NODE_S * sum(counts)


class Choice(NamedTuple):
    """What draws the trees ("graphviz" or "builtin"), and why "auto" chose the built-in layout:
    "missing" (no `dot`), "slow" (over the budget); None where it did not, or where the
    renderer was named."""

    renderer: str
    why_builtin: Optional[str]


def choose_renderer(renderer: str, node_counts: Iterable[int], budget_s: float) -> Choice:
    """The renderer for trees of `node_counts` nodes: a named one as it is; "auto" as the
    module says, `budget_s` being the seconds Graphviz may take for them all."""
    if renderer not in RENDERERS:
        raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")
    if renderer != "auto":
        return Choice(renderer, None)
    if not dot_available():
        return Choice("builtin", "missing")
    if dot_seconds(node_counts) > budget_s:
        return Choice("builtin", "slow")
    return Choice("graphviz", None)


def tree_svg(
    snapshot: "Snapshot",
    step: Optional["Step"] = None,
    selected: Optional[int] = None,
    renderer: str = "auto",
    *,
    legend: bool = True,
    fallback: bool = False,
) -> str:
    """The tree as SVG text.

    `renderer`: "graphviz" runs `dot -Tsvg` on `to_dot(...)` (a `GraphvizError` if `dot`
    fails, unless `fallback`); "builtin" lays the tree out in Python (`builtin_tree_svg`);
    "auto" uses Graphviz when `dot` is installed and the tree has at most
    AUTO_GRAPHVIZ_MAX_NODES nodes, and otherwise the built-in layout. Where "auto" (or
    `fallback`) draws built in, a one-line notice says why (and how to install Graphviz when
    it is missing).
    """
    nodes = len(snapshot.nodes)
    choice = choose_renderer(renderer, [nodes], dot_seconds([AUTO_GRAPHVIZ_MAX_NODES]))
    notice = None
    if choice.why_builtin == "missing":
        notice = GRAPHVIZ_MISSING_NOTICE
    elif choice.why_builtin == "slow":
        notice = LARGE_TREE_NOTICE.format(nodes=nodes, limit=AUTO_GRAPHVIZ_MAX_NODES)
    if choice.renderer == "builtin":
        return builtin_tree_svg(snapshot, step, selected, legend=legend, notice=notice)
    if not dot_available():
        raise RuntimeError(GRAPHVIZ_MISSING_NOTICE.replace(": built-in layout", "") + "; or use renderer='builtin'")
    try:
        return graphviz_svg(to_dot(snapshot, step, selected, legend=legend))
    except GraphvizError as exc:
        if not (fallback or renderer == "auto"):
            raise
        notice = GRAPHVIZ_FAILED_NOTICE.format(problem=exc.problem)
        return builtin_tree_svg(snapshot, step, selected, legend=legend, notice=notice)
