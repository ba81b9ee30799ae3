"""The trees of a trace of several side by side: after a step, its tree, and beside it every other
tree as it was last left.

A trace holds several trees when ranks' traces were merged (a tree per rank: node ids,
generations and snapshots are per rank) or when one process ran trees on several devices (a
tree per device); `cgviz.trace.lanes` names them. The picture of a step is one drawing per
tree, each under its name ("rank 1", "cuda:1"), the step's own tree first and outlined. The
others' ids are prefixed, so the explorer's node panel (which shows the step's tree) never
mistakes one rank's node 3 for another's; each of their drawings says in `data-step` the step
it is drawn after, where a click on one of its nodes takes the explorer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from cgviz.trace.lanes import TreeKey, in_tree_order, tree_id_prefix, tree_keys, tree_name, tree_of
from cgviz.views.page_store import namespace_ids, strip_prolog
from cgviz.views.style import TREE_STYLE as STYLE

if TYPE_CHECKING:
    from cgviz.trace.model import Snapshot, Step, Trace

__all__ = ["RankTrees", "ranks_tree_svg", "step_shown"]

_GAP = 28.0  # px between two ranks' trees
_LABEL = 22.0  # px above each tree for its label
_SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)(pt|px)?"[^>]*?\bheight="([\d.]+)(pt|px)?"')
_PX = {"pt": 4 / 3, "px": 1.0, None: 1.0}


def step_shown(step: "Step") -> tuple:
    """What a tree's drawing shows of the step that left it so, beside its snapshot: the step's
    kind and node, and the nodes whose outputs it invalidated (equal values, equal drawings)."""
    inval = tuple(sorted({p[0] for p in step.invalidated})) if step.invalidated else ()
    return (step.kind, step.node, inval)


class RankTrees:
    """Walks a trace of several trees step by step (`at`), keeping each tree's latest snapshot."""

    def __init__(self, trace: "Trace") -> None:
        self.trace = trace
        self._latest: dict[TreeKey, tuple["Snapshot", "Step", int]] = {}
        self._seen = 0
        self.ranks = tree_keys(trace.steps)  # the trees, as (rank, device)

    def at(self, i: int) -> dict[TreeKey, tuple["Snapshot", Optional["Step"], int]]:
        """Per tree, its state after step `i` and the step (an index) that left it so: the step's
        own tree with its step (what it did shows), the others with none (only their state)."""
        steps = self.trace.steps
        if i + 1 < self._seen:  # a step before the last one walked: walk again from the start
            self._latest, self._seen = {}, 0
        for k in range(self._seen, i + 1):
            s = steps[k]
            if s.snapshot is not None:
                self._latest[tree_of(s)] = (s.snapshot, s, k)
        self._seen = i + 1
        own = tree_of(steps[i])
        return {r: (snap, step if r == own and k == i else None, k) for r, (snap, step, k) in self._latest.items()}

    def key(self, i: int) -> tuple:
        """What the picture of step `i` depends on (equal keys, equal pictures)."""
        trees = self.at(i)  # in tree order: a key mixes None and text where some steps name no device or rank
        return (tree_of(self.trace.steps[i]),) + tuple(
            (r, id(trees[r][0]), trees[r][2], None if trees[r][1] is None else step_shown(trees[r][1]))
            for r in in_tree_order(trees))


def ranks_tree_svg(trees: dict[TreeKey, tuple["Snapshot", Optional["Step"], int]], own: TreeKey,
                   renderer: str = "auto", drawn: Optional[dict] = None, fallback: bool = False) -> str:
    """One SVG holding each tree (`trees`: as `RankTrees.at` gives them), `own` first and
    clickable, the others after it in rank and device order, each labelled.

    `drawn` (a dict kept across the steps of one trace) keeps each tree's drawing by what it
    shows: a step changes one tree, so the others are drawn once, not once per step (a trace of
    many ranks costs in proportion to its steps, not to steps times ranks). With `fallback`, a
    tree Graphviz's `dot` fails on is drawn with the built-in layout, its notice saying why."""
    order = ([own] if own in trees else []) + [r for r in in_tree_order(trees) if r != own]
    mine = "rank" if own[1] is None else "device" if own[0] is None else "tree"
    parts, x, height = [], 0.0, 0.0
    for r in order:
        snap, step, last = trees[r]
        svg, (w, h) = _tree_part(r, snap, step, r == own, r == order[0], renderer, drawn, fallback)
        label = tree_name(r) + (f" · this step's {mine}" if r == own else f" · after step {last + 1}")
        weight = ' font-weight="bold"' if r == own else ""
        parts.append(f'<text x="{x + 4:.1f}" y="15" font-size="12"{weight} fill="{STYLE["edge_label"]}">{label}</text>')
        if r == own:
            parts.append(f'<rect x="{x + 0.5:.1f}" y="{_LABEL - 2:.1f}" width="{w - 1:.1f}" height="{h + 3:.1f}" '
                         f'fill="none" stroke="{STYLE["current_border"]}" stroke-width="1" rx="4"/>')
        after = "" if r == own else f' data-step="{last}"'
        parts.append(svg.replace("<svg", f'<svg x="{x:.1f}" y="{_LABEL:.1f}"{after}', 1))
        x += w + _GAP
        height = max(height, h)
    width, total = max(x - _GAP, 1.0), height + _LABEL + 2
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.1f}" height="{total:.1f}" '
            f'viewBox="0 0 {width:.1f} {total:.1f}" font-family="{STYLE["font"]}" class="cgviz-rank-trees">\n'
            + "\n".join(parts) + "\n</svg>")


def _tree_part(r: TreeKey, snap: "Snapshot", step: Optional["Step"], own: bool, legend: bool, renderer: str,
               drawn: Optional[dict], fallback: bool) -> tuple[str, tuple[float, float]]:
    """One tree's drawing in the picture (its ids prefixed unless it is the step's own) and size."""
    key = None
    if drawn is not None:
        key = (r, id(snap), None if step is None else step_shown(step), own, legend, renderer)
        found = drawn.get(key)
        if found is not None and found[0] is snap:
            return found[1], found[2]
    from cgviz.views.tree import tree_svg

    svg = strip_prolog(tree_svg(snap, step, renderer=renderer, legend=legend, fallback=fallback))
    if not own:
        svg = namespace_ids(svg, tree_id_prefix(r))
    size = _size(svg)
    if key is not None:
        drawn[key] = (snap, svg, size)  # the snapshot kept with it: its id() is not reused meanwhile
    return svg, size


def _size(svg: str) -> tuple[float, float]:
    m = _SIZE.search(svg)
    if m is None:
        return 300.0, 150.0
    return float(m.group(1)) * _PX[m.group(2)], float(m.group(3)) * _PX[m.group(4)]

