"""The built-in layout: where each box of a tree goes, in pure Python.

An incremental Reingold–Tilford layout: children centred under their parent, subtrees packed
side by side as close as their contours allow, roots side by side. A page draws thousands of
trees that mostly differ in a node or two, so `LayoutCache` keeps what laying out one tree
worked out for the next: only what changed is packed and placed again.

Packing keeps each subtree's contour, one entry per level below it, so a tree costs its nodes
times its depth at most. A tree past `MAX_TIDY_WORK` (a chain of thousands of nodes, which only
a hand-made trace holds, would take gigabytes) is laid out row by row instead (`_rows`): each
level's boxes side by side from the left, in order, in time and memory linear in its nodes.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, chain, compress, count, repeat, zip_longest
from operator import add, is_not, itemgetter, sub
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView, Snapshot

SIBLING_GAP = 22.0
LEVEL_GAP = 54.0  # between rows: the elbow and the edge label
MARGIN = 14.0
#: Nodes times levels past which a tree is laid out row by row (`_rows`), not packed: packing a
#: tree of 1,000 nodes and 1,000 levels keeps about 8 MB of contours, one of this bound 160 MB.
MAX_TIDY_WORK = 20_000_000

#: A box: x, y of its top left corner, width and height.
Box = tuple[float, float, float, float]


class _Contour:
    """Left and right edges of a laid-out subtree, one per depth, deepest first.

    The real value at depth d (0: the subtree's root) is `lefts[len-1-d] + dl` (and likewise
    for rights), so shifting a whole subtree is O(1). A contour is never changed once made:
    merging makes a new one (sharing the lists it can), so a `LayoutCache` can hand the same
    one to every tree that holds its subtree.
    """

    __slots__ = ("lefts", "rights", "dl", "dr")

    def __init__(self, lefts: list[float], rights: list[float], dl: float = 0.0, dr: float = 0.0) -> None:
        self.lefts = lefts
        self.rights = rights
        self.dl = dl
        self.dr = dr


def _merge(row: _Contour, c: _Contour, gap: float) -> tuple[float, _Contour]:
    """Place subtree `c` right of the subtrees merged in `row`, as close as their contours
    allow: its root's offset from the row's first root, and the row's contour with it."""
    lefts, rights, dl, dr = row.lefts, row.rights, row.dl, row.dr
    na, nc = len(lefts), len(c.lefts)
    cl = c.lefts
    sep = max(rights[na - 1 - d] + dr - (cl[nc - 1 - d] + c.dl) for d in range(min(na, nc))) + gap
    cdl, cdr = c.dl + sep, c.dr + sep
    if nc > na:  # lefts: the row's where it reaches, c's below
        shift = dl - cdl
        lefts, dl = cl[: nc - na] + [v + shift for v in lefts], cdl
    if nc >= na:  # rights: c's where it reaches, the row's below
        rights, dr = c.rights, cdr
    else:
        shift = cdr - dr
        rights = rights[: na - nc] + [v + shift for v in c.rights]
    return sep, _Contour(lefts, rights, dl, dr)


def _place_row(contours: list[_Contour], gap: float) -> tuple[list[float], Optional[_Contour]]:
    """Place subtrees left to right, each as close as its contours allow; offsets of their roots
    (the first at 0) and the merged contour (`contours` are left as they are)."""
    if not contours:
        return [], None
    acc = contours[0]
    offsets = [0.0]
    for c in contours[1:]:
        sep, acc = _merge(acc, c, gap)
        offsets.append(sep)
    return offsets, acc


def _pack(half: float, contours: list[_Contour]) -> tuple[_Contour, tuple[float, ...]]:
    """A node of half width `half` over its children's subtrees (`contours`, left to right):
    its subtree's contour, and each child's x relative to the node (centred under it)."""
    if not contours:
        return _Contour([-half], [half]), ()
    if len(contours) == 1:  # right under the node: the general case, with offset and middle 0, sooner
        c = contours[0]
        return _Contour([*c.lefts, -half - c.dl], [*c.rights, half - c.dr], c.dl, c.dr), (0.0,)
    offsets, acc = _place_row(contours, SIBLING_GAP)
    assert acc is not None
    mid = (offsets[0] + offsets[-1]) / 2
    dl, dr = acc.dl - mid, acc.dr - mid
    return _Contour([*acc.lefts, -half - dl], [*acc.rights, half - dr], dl, dr), tuple(map(sub, offsets, repeat(mid)))


class _Subtree:
    """A node's subtree packed on its own (`_pack`), from the node's shape (`_Shape`): its
    contour, and each child's x relative to the node. Hashed by identity: a shape holds its
    children's subtrees, the same objects wherever they did not change."""

    __slots__ = ("contour", "offsets")

    def __init__(self, shape: "_Shape") -> None:
        _, width, _, kids = shape
        self.contour, self.offsets = _pack(width / 2, [k.contour for k in kids])


# a node's shape: its id, its box's width and height, and its children's subtrees
_Shape = tuple[int, float, float, tuple[_Subtree, ...]]


class _Level:
    """One level (depth) of a tree being laid out: its nodes, their boxes' sizes, where each
    one's children end in the level below, and the nodes' shapes and subtrees."""

    __slots__ = ("nodes", "widths", "heights", "ends", "shapes", "subtrees")

    def __init__(self, nodes: list[int], sizes: Mapping[int, Sequence[float]], kids: dict[int, list[int]]) -> None:
        self.nodes = nodes
        box_sizes = list(map(sizes.__getitem__, nodes))
        self.widths = list(map(itemgetter(0), box_sizes))
        self.heights = list(map(itemgetter(1), box_sizes))
        self.ends = list(accumulate(map(len, map(kids.__getitem__, nodes))))
        self.shapes: list[_Shape] = []
        self.subtrees: tuple[_Subtree, ...] = ()

    def pack(self, below: tuple[_Subtree, ...], before: Optional["_Level"]) -> None:
        """Each node's subtree over the level below's: `before`'s (this depth in the last tree)
        where the node's shape is the same there, else packed anew."""
        runs = map(below.__getitem__, map(slice, chain((0,), self.ends), self.ends))
        self.shapes = list(zip(self.nodes, self.widths, self.heights, runs))
        known = dict(zip(before.shapes, before.subtrees)) if before is not None else {}
        self.subtrees = tuple([known.get(shape) or _Subtree(shape) for shape in self.shapes])

    def repack(self, before: "_Level", below: tuple[_Subtree, ...], below_before: tuple[_Subtree, ...]) -> bool:
        """`before`'s subtrees (this depth in the last tree, over `below_before`), but packed
        anew for the nodes whose children's subtrees differ in `below`; False, doing nothing,
        unless this level has the same nodes, sizes and children counts as `before`: then
        only those nodes are looked at (found by C loops)."""
        if (self.nodes != before.nodes or self.ends != before.ends or self.widths != before.widths
                or self.heights != before.heights):
            return False
        shapes, subtrees = list(before.shapes), list(before.subtrees)
        starts = [0, *self.ends]
        for j in {bisect_right(self.ends, i) for i in compress(count(), map(is_not, below, below_before))}:
            shapes[j] = shape = (self.nodes[j], self.widths[j], self.heights[j], below[starts[j] : self.ends[j]])
            subtrees[j] = _Subtree(shape)
        self.shapes, self.subtrees = shapes, tuple(subtrees)
        return True


class _Placed:
    """A root's subtree placed (`levels` of nodes and their x centres `xs`, level by level; or a
    whole forest, `_rows`): its nodes (as counted), with their depths, x centres, widths, half
    widths and heights; how far left and right its boxes reach; and each of its rows' tallest box."""

    __slots__ = ("nodes", "counts", "depths", "xs", "widths", "halves", "heights", "left", "right", "row_heights",
                 "_boxes")

    def __init__(self, levels: list[list[int]], xs: list[list[float]], sizes: Mapping[int, Sequence[float]]) -> None:
        self.counts = list(map(len, levels))
        self.nodes = list(chain.from_iterable(levels))
        self.depths = list(chain.from_iterable(map(repeat, range(len(levels)), self.counts)))
        self.xs = list(chain.from_iterable(xs))
        box_sizes = list(map(sizes.__getitem__, self.nodes))
        self.widths = [s[0] for s in box_sizes]
        self.halves = [w / 2 for w in self.widths]
        self.heights = [s[1] for s in box_sizes]
        self.left = min(map(sub, self.xs, self.halves))
        self.right = max(map(add, self.xs, self.halves))
        ends = list(accumulate(self.counts))
        self.row_heights = [max([0.0, *self.heights[start:end]]) for start, end in zip([0, *ends], ends)]
        self._boxes: Optional[tuple[float, tuple[float, ...], dict[int, Box]]] = None

    def boxes(self, shift: float, tops: list[float]) -> dict[int, Box]:
        """Its boxes (x, y, w, h): x shifted by `shift`, each row at its top in `tops`. The
        last ones made are kept: the next tree mostly has the same shift and rows."""
        key = tuple(tops[: len(self.counts)])
        if self._boxes is None or self._boxes[:2] != (shift, key):
            box = {v: (x + shift - half, key[d], w, h)
                   for v, d, x, half, w, h in zip(self.nodes, self.depths, self.xs, self.halves, self.widths,
                                                   self.heights)}
            self._boxes = (shift, key, box)
        return self._boxes[2]


class LayoutCache:
    """What laying out a tree worked out, for laying out the next, which mostly shares it (as
    the trees of a tree growing node by node do): its levels, with their nodes' subtrees
    packed (`_Level`), its row of roots, and its roots' subtrees placed (`_Placed`). Only the
    last tree's are kept."""

    __slots__ = ("levels", "row", "placed")

    def __init__(self) -> None:
        self.levels: list[_Level] = []
        self.row: list[tuple[_Subtree, float, _Contour]] = []  # per root: its subtree, its x, the row's contour to it
        self.placed: dict[tuple[_Subtree, float], _Placed] = {}


def _forest(ids: set[int], snapshot: "Snapshot") -> tuple[list[list[int]], dict[int, list[int]]]:
    """The nodes `ids` of `snapshot` level by level from the roots (the children of a level's
    nodes, in order, make the next level), and each node's children as placed: a node
    reachable twice (not a tree) is placed once, under its first parent in pre-order; a node
    no root reaches (a cycle) is a root too."""
    nodes = snapshot.nodes
    children = {n.id: n.children for n in nodes}
    if not ids.issuperset(chain.from_iterable(children.values())):
        children = {v: [c for c in cs if c in ids] for v, cs in children.items()}
    roots = [n.id for n in nodes if n.parent is None or n.parent not in ids]
    listed = list(chain.from_iterable(children.values()))
    if len(set(chain(roots, listed))) == len(roots) + len(listed):  # no node twice among roots and children
        levels = _levels(roots, children)
        if sum(map(len, levels)) == len(children):  # every node reached: a plain forest
            return levels, children
    top, kids = _forest_walk(roots, children, nodes)
    return _levels(top, kids), kids


def _levels(top: list[int], kids: dict[int, list[int]]) -> list[list[int]]:
    """The nodes under `top`, level by level; `kids` must be a forest under `top` (no node
    listed twice, no node of `top` listed), or this would not end."""
    levels = []
    level = top
    while level:
        levels.append(level)
        level = [c for v in level for c in kids[v]]
    return levels


def _forest_walk(roots: list[int], children: dict[int, list[int]],
                 nodes: list["NodeView"]) -> tuple[list[int], dict[int, list[int]]]:
    """`_forest` of any snapshot, a malformed one included, by a pre-order walk from each
    root: the roots that are no other node's child, and each node's children as placed."""
    depth: dict[int, int] = {}
    order: list[int] = []  # pre-order

    def visit(root: int) -> None:
        stack = [(root, 0)]
        while stack:
            v, d = stack.pop()
            if v in depth:
                continue
            depth[v] = d
            order.append(v)
            stack.extend((c, d + 1) for c in reversed(children[v]) if c not in depth)

    for r in roots:
        visit(r)
    for n in nodes:  # only in a malformed snapshot (a cycle): shown as a root
        if n.id not in depth:
            roots.append(n.id)
            visit(n.id)
    kids = {v: [c for c in children[v] if depth.get(c) == depth[v] + 1] for v in order}
    seen_child: set[int] = set()
    for v in order:
        uniq = []
        for c in kids[v]:
            if c not in seen_child:
                seen_child.add(c)
                uniq.append(c)
        kids[v] = uniq
    return [r for r in roots if depth[r] == 0], kids


def _placed(ids: set[int], sizes: Mapping[int, Sequence[float]], snapshot: "Snapshot",
            cache: Optional[LayoutCache]) -> list[_Placed]:
    """Each root's subtree placed, the roots side by side (see `tidy_layout`)."""
    levels, kids = _forest(ids, snapshot)
    if not levels:
        return []
    if len(levels) * len(kids) > MAX_TIDY_WORK:
        return [_rows(levels, sizes)]
    if cache is None:
        cache = LayoutCache()
    subtrees = _subtrees(levels, kids, sizes, cache)
    known, used = cache.placed, {}
    out: list[_Placed] = []
    starts = [0] * len(levels)  # where the next root's nodes begin in each level
    for root, x in zip(subtrees[0], _root_offsets(subtrees[0], cache)):
        placed = known.get((root, x))
        if placed is None:
            nodes, subs = _subtree_levels(levels, subtrees, kids, starts)
            placed = _Placed(nodes, _centres(subs, x), sizes)
        used[(root, x)] = placed
        out.append(placed)
        starts[: len(placed.counts)] = map(add, starts, placed.counts)
    cache.placed = used
    return out


def _centres(subtrees: list[tuple[_Subtree, ...]], x: float) -> list[list[float]]:
    """Each level's x centres, of a root at x whose subtrees (level by level) are packed."""
    xs = [[x]]
    for above in subtrees[:-1]:  # a level's children, in order, are the next level
        xs.append([px + off for px, s in zip(xs[-1], above) for off in s.offsets])
    return xs


def _rows(levels: list[list[int]], sizes: Mapping[int, Sequence[float]]) -> _Placed:
    """The whole forest as one placed block, each level's boxes side by side from the left in
    their order (a parent is not centred over its children): for a tree too deep to pack."""
    xs = []
    for level in levels:
        widths = [sizes[v][0] for v in level]
        lefts = accumulate((w + SIBLING_GAP for w in widths[:-1]), initial=0.0)
        xs.append([left + w / 2 for left, w in zip(lefts, widths)])
    return _Placed(levels, xs, sizes)


def _subtrees(levels: list[list[int]], kids: dict[int, list[int]], sizes: Mapping[int, Sequence[float]],
              cache: LayoutCache) -> list[tuple[_Subtree, ...]]:
    """Per level, each node's subtree packed (`_Subtree`), a level at a time, deepest first,
    from the last tree laid out (`cache`): where a level has the same nodes, sizes and children
    counts as there, only the nodes whose children's subtrees changed are packed again, and
    elsewhere a node of the same shape as there takes the same subtree."""
    last = cache.levels
    now: list[_Level] = []
    below: tuple[_Subtree, ...] = ()
    for d in range(len(levels) - 1, -1, -1):
        level = _Level(levels[d], sizes, kids)
        before = last[d] if d < len(last) else None
        below_before = last[d + 1].subtrees if d + 1 < len(last) else ()
        if before is None or not level.repack(before, below, below_before):
            level.pack(below, before)
        now.append(level)
        below = level.subtrees
    now.reverse()
    cache.levels = now
    return [level.subtrees for level in now]


def _root_offsets(roots: tuple[_Subtree, ...], cache: LayoutCache) -> list[float]:
    """The roots' x, side by side (`_place_row`, with a wider gap), merged again only from the
    first root that is not the last tree's."""
    row = cache.row
    same = next(compress(count(), map(is_not, roots, [r for r, _, _ in row])), min(len(roots), len(row)))
    row = row[:same] or [(roots[0], 0.0, roots[0].contour)]
    for root in roots[len(row):]:
        x, merged = _merge(row[-1][2], root.contour, SIBLING_GAP * 1.6)
        row.append((root, x, merged))
    cache.row = row
    return [x for _, x, _ in row]


def _subtree_levels(levels: list[list[int]], subtrees: list[tuple[_Subtree, ...]], kids: dict[int, list[int]],
                    starts: list[int]) -> tuple[list[list[int]], list[tuple[_Subtree, ...]]]:
    """The nodes and subtrees, level by level, of the root at `starts` (each level's share of a
    root's subtree is a run: the children of the level above's share)."""
    nodes: list[list[int]] = []
    subs: list[tuple[_Subtree, ...]] = []
    n = 1  # the root's share of the level
    for start, level, level_subs in zip(starts, levels, subtrees):
        if not n:
            break
        nodes.append(level[start : start + n])
        subs.append(level_subs[start : start + n])
        n = sum(map(len, map(kids.__getitem__, nodes[-1])))
    return nodes, subs


def tidy_layout(
    ids: set[int], sizes: Mapping[int, Sequence[float]], snapshot: "Snapshot", cache: Optional[LayoutCache] = None
) -> tuple[dict[int, float], dict[int, int]]:
    """x centre and depth of every node: children centred under their parent, subtrees packed
    side by side without overlap (Reingold–Tilford), roots side by side. `cache` keeps what
    was worked out for the next call: a tree that changed in one place is packed again only
    along that node's path to its root, and only its root's subtree is placed again."""
    x: dict[int, float] = {}
    depth: dict[int, int] = {}
    for placed in _placed(ids, sizes, snapshot, cache):
        x.update(zip(placed.nodes, placed.xs))
        depth.update(zip(placed.nodes, placed.depths))
    return x, depth


def boxes(
    ids: list[int], sizes: Mapping[int, Sequence[float]], snapshot: "Snapshot", top: float,
    cache: Optional[LayoutCache] = None,
) -> tuple[dict[int, Box], dict[int, int], float, float]:
    """Every node's box (x, y, w, h) below `top`, its depth, and the right and bottom edges of
    the drawing: rows one per depth, each as tall as its tallest box, boxes top-aligned.
    `ids` are the snapshot's nodes, `sizes` their boxes' (w, h, ...); `cache`: see `tidy_layout`."""
    placed = _placed(set(ids), sizes, snapshot, cache)
    rows = [max([0.0, *row]) for row in zip_longest(*[p.row_heights for p in placed], fillvalue=0.0)]
    tops = list(accumulate([h + LEVEL_GAP for h in rows], initial=top))
    shift = MARGIN - min(p.left for p in placed)
    right = max(p.right for p in placed) + shift
    box: dict[int, Box] = {}
    depth: dict[int, int] = {}
    for p in placed:
        box.update(p.boxes(shift, tops))
        depth.update(zip(p.nodes, p.depths))
    return box, depth, right, tops[-1] - LEVEL_GAP + MARGIN

