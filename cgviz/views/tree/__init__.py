"""The tree view: a snapshot's tree as graphviz DOT, and as SVG.

    dot = to_dot(snapshot, step)          # DOT source (the `graphviz` package builds it)
    svg = tree_svg(snapshot, step)        # SVG: Graphviz's `dot` when installed, else built in
    svg = builtin_tree_svg(snapshot)      # SVG laid out here, in pure Python

Every tree node is one box, top-down from the roots: its function, its node id, kind,
generation and replay count, and its outputs as marks (● live, ○ dead, ✕ invalid) with
shape and size. The fill says what the node is (warmup, recorded graph, touched by this
step, invalidated); the border says where the current path is (on the path, the current
node, the selected node). An edge goes from a parent to each child and is labelled with
the child's function: the function that branched there.

Both renderers draw the same boxes, marks and colours (`STYLE`), and both give each
node's SVG group `id="node-<id>"` and each edge's `id="edge-<parent>-<child>"`, with
`class` names from `node_state`, so a page can find and style them.

The modules, one job each: `card` (what a box shows, and its size), `layout` (the built-in
layout), `svg` (the built-in renderer's SVG), `dot` (DOT text, and running `dot`), `render`
(which renderer: the "auto" policy), `frames` and `windows` (a page's trees, step by step).
"""

from cgviz.views.tree.card import MARKS, STYLE, node_state
from cgviz.views.tree.dot import GraphvizError, dot_available, to_dot
from cgviz.views.tree.render import (
    GRAPHVIZ_FAILED_NOTICE, GRAPHVIZ_MISSING_NOTICE, RENDERERS, choose_renderer, dot_seconds, tree_svg,
)
from cgviz.views.tree.svg import builtin_tree_svg

__all__ = [
    "STYLE",
    "MARKS",
    "node_state",
    "to_dot",
    "tree_svg",
    "builtin_tree_svg",
    "dot_available",
    "choose_renderer",
    "dot_seconds",
    "RENDERERS",
    "GRAPHVIZ_MISSING_NOTICE",
    "GRAPHVIZ_FAILED_NOTICE",
    "GraphvizError",
]
