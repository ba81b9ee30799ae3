"""The HTML export's trees with the built-in layout: one drawing per tree structure, and per
step only what its nodes look like.

A long trace has thousands of steps whose trees differ only in a few nodes' states (replay
counts, which node is current or replaying, live/dead marks), so drawing a tree per step costs
minutes and tens of megabytes, and showing one costs the browser a full layout. Here a tree is
drawn once per *structure* (node ids, parents, functions, kinds, generations, signatures and
output shapes) with every box as wide and as tall as the widest and tallest state the steps
give it; a node's look (classes, colours, badges, output marks: the box's markup with
placeholders for its width, centre and replay count) is stored once; and each step stores only
the nodes whose look or replay count changed since the step before, with the whole state every
`KEYFRAME` steps, so that the page reaches any step by applying at most that many deltas and
then repaints only the nodes that differ from what it shows, and of those only the ones in (or
near) the tree panel's view: the others as they are scrolled to.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from itertools import compress, count
from operator import attrgetter, is_not, ne
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, overload

from cgviz.views.page_store import looked_up
from cgviz.views.text import plural
from cgviz.views.tree.card import SIZE_META, STEP_BADGES, Card, card, card_size, escape, invalidated_now
from cgviz.views.tree.layout import MARGIN, Box, LayoutCache, boxes
from cgviz.views.tree.svg import (
    EDGE_TEXT, PATH_STROKE, PLAIN_STROKE, ROUND_JOIN, builtin_tree_svg, edge_inner, node_inner, svg_legend, svg_lines,
)

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView, Snapshot, Step

__all__ = ["TreeStates", "KEYFRAME", "EDGE_CSS"]

_STATE = attrgetter("state")

#: The whole state of the tree is stored every this many steps: a jump applies at most this
#: many steps' deltas (each a few numbers), however far it goes.
KEYFRAME = 100

# placeholders in a look's markup, filled in by the page: the replay count's words, the box's
# width and its centre (both as the drawing of the structure gives them, on the node's group)
REPLAYS, WIDTH, CENTRE = "\ue000", "\ue001", "\ue002"

_EDGE_PATH = PATH_STROKE + ROUND_JOIN

#: The page's CSS for the edges drawn here: each edge holds its plain and its on-path stroke,
#: and the class "on-path" picks one.
EDGE_CSS = (".cg-tree-box .cg-e1{display:none}.cg-tree-box .on-path>.cg-e1{display:inline}"
            ".cg-tree-box .on-path>.cg-e0{display:none}")


class Structure:
    """One tree structure: the first step drawn with it, and its nodes (as `_static` keys them)."""

    __slots__ = ("index", "first", "snapshot", "ids", "statics", "position")

    def __init__(self, index: int, first: int, snapshot: "Snapshot", statics: tuple[int, ...]) -> None:
        self.index = index
        self.first = first
        self.snapshot = snapshot
        self.ids = [n.id for n in snapshot.nodes]
        self.statics = statics
        self.position = {node: k for k, node in enumerate(self.ids)}  # node id -> its place


class Frame:
    """The tree after one step: its structure and, per node (in the structure's order), its
    look and replay count."""

    __slots__ = ("structure", "looks", "replays")

    def __init__(self, structure: Structure, looks: tuple, replays: tuple) -> None:
        self.structure = structure
        self.looks = looks
        self.replays = replays

    def state(self) -> dict[int, tuple[int, int]]:
        """Per node id: its look and replay count."""
        return dict(zip(self.structure.ids, zip(self.looks, self.replays)))

    def flat(self) -> list[int]:
        """The whole state as the page's keyframes hold it: [node, look, replays, ...]."""
        return [x for node, look, rep in zip(self.structure.ids, self.looks, self.replays) for x in (node, look, rep)]


class TreeStates:
    """Builds the trees of a page step by step (`add`), then the page's data (`data`).

    `svg_index` stores a drawing (the lines of its SVG text) and returns its index among the
    page's trees (the page keeps drawings as runs over shared lines).
    """

    def __init__(self, svg_index: Callable[[list[str]], int]) -> None:
        self._svg_index = svg_index
        self._statics: dict[int, int] = {}  # id(NodeView) -> index of what the structure keeps of it
        self._static_by_key: dict[tuple, int] = {}
        #: per static node: its box's largest width and height and smallest height over all steps,
        #: so that a node is as wide in every structure and growing trees share their drawings' lines
        self.sizes: list[list[float]] = []
        self._structures: dict[tuple, Structure] = {}
        self._structure_of: dict[int, Structure] = {}  # id(Snapshot) ->
        self._snapshots: list["Snapshot"] = []
        self._by_key: dict[tuple, Frame] = {}  # the frames built, by what they show
        self._cards: dict[tuple, tuple[int, tuple[float, float]]] = {}  # what a box shows -> its look, size
        self._look_index: dict[tuple, int] = {}
        self.looks: list[list[str]] = []
        self.frames: list[Optional[Frame]] = []  #: per step added: the tree after it (None: no snapshot)
        self._markup: dict[tuple, str] = {}  # node and edge groups by what they show, for draw_structure
        self._last: Optional[tuple] = None  # (snapshot, frame, path, current, active, invalidated) built last

    # -- per step -------------------------------------------------------------------------------
    def add(self, step: "Step") -> int:
        """Record the tree after `step`; the index of its structure among the page's structures
        (its drawing comes later, in `data`), or -1 when the step has no snapshot."""
        snap = step.snapshot
        if snap is None:
            self.frames.append(None)
            return -1
        frame, _ = self.frame(snap, step)
        self.frames.append(frame)
        return frame.structure.index

    def structures(self) -> list[Structure]:
        """The tree structures seen so far, in the order they came."""
        return sorted(self._structures.values(), key=lambda s: s.index)

    def _structure(self, snap: "Snapshot") -> Structure:
        s = self._structure_of.get(id(snap))
        if s is None:
            key = tuple(looked_up(self._statics, snap.nodes, self._static))
            s = self._structures.get(key)
            if s is None:
                s = self._structures[key] = Structure(len(self._structures), len(self.frames), snap, key)
            self._structure_of[id(snap)] = s
            self._snapshots.append(snap)  # the caches key snapshots by id(): keep them alive
        return s

    def _static(self, n: "NodeView") -> int:
        """What a structure keeps of a node: all that does not change while steps run."""
        i = self._statics.get(id(n))
        if i is None:
            key = (n.id, n.parent, n.function, n.kind, n.generation, n.signature, tuple(n.children),
                   tuple((o.index, o.dtype, tuple(o.shape), o.nbytes, o.alias_of) for o in n.outputs))
            i = self._static_by_key.get(key)
            if i is None:
                i = self._static_by_key[key] = len(self.sizes)
                self.sizes.append([0.0, 0.0, float("inf")])
            self._statics[id(n)] = i
        return i

    def frame(self, snap: "Snapshot", step: "Step") -> tuple[Frame, bool]:
        """The tree after `step` (`snap`: its snapshot), and whether it was built just now: a
        frame is built once for what it shows, then handed out again."""
        active = step.node if step.kind in STEP_BADGES else None
        inval = invalidated_now(step)
        key = (id(snap), active, step.kind if active is not None else None, tuple(sorted(inval)))
        frame = self._by_key.get(key)
        if frame is not None:
            return frame, False
        structure = self._structure(snap)
        path = set(snap.path)
        touched = self._touched_since_last(snap, path, inval, active)
        last = self._last
        nodes, statics = snap.nodes, structure.statics
        if touched is None:
            looks, replays = [0] * len(nodes), [0] * len(nodes)
            todo: Any = range(len(nodes))
        elif last[1].structure is structure:  # a node object as before, not touched: the same look (found in C)
            looks, replays = list(last[1].looks), list(last[1].replays)
            where = structure.position
            changed = set(compress(count(), map(is_not, nodes, last[0].nodes)))
            changed.update(where[i] for i in touched if i in where)
            todo = sorted(changed)  # in order, so that new looks are numbered as they come
        else:  # another structure (a tree that grew): its nodes kept from the last frame keep their looks
            looks, replays, todo = _carried_over(nodes, last[0].nodes, last[1], touched)
        for k in todo:
            n, static = nodes[k], statics[k]
            look, rep, (w, h) = self._card(snap, n, step, path, inval, n.id == active)
            looks[k] = look
            replays[k] = rep
            size = self.sizes[static]
            if w > size[0]:
                size[0] = w
            if h > size[1]:
                size[1] = h
            if h < size[2]:
                size[2] = h
        frame = self._by_key[key] = Frame(structure, tuple(looks), tuple(replays))
        self._last = (snap, frame, path, snap.current_node, active, inval)
        return frame, True

    def _touched_since_last(self, snap: "Snapshot", path: set[int], inval: set[int],
                              active: Optional[int]) -> Optional[set[int]]:
        """The ids whose look may differ from the last frame built although their node object is
        the same (path, current node, the active node, invalidations), or None for the first
        frame (then every node is looked at)."""
        last = self._last
        if last is None:
            return None
        _, _, last_path, last_current, last_active, last_inval = last
        return (path ^ last_path) | (inval ^ last_inval) | {snap.current_node, last_current, active, last_active}

    def _card(self, snap: "Snapshot", n: "NodeView", step: "Step", path: set[int], inval: set[int],
              active: bool) -> tuple[int, int, tuple[float, float]]:
        """A node's look index, replay count and box size after `step`. Kept by what the box
        shows, not by node object: a node whose replay count changed is a new object with the same
        look (the count is filled in by the page) and a box as large while the count keeps its
        number of digits (digits are equally wide), so a far step costs no new looks."""
        static = self._statics.get(id(n))
        if static is None:
            static = self._static(n)
        r = n.replays
        key = (static, len(str(r)), r == 1, tuple(map(_STATE, n.outputs)), n.id in path, snap.current_node == n.id,
               step.kind if active else None, n.id in inval)
        got = self._cards.get(key)
        if got is None:
            box = card(snap, n, step, None, path, inval)
            got = self._cards[key] = (self._look(box, n), card_size(box))
        return got[0], r, got[1]

    def _look(self, box: Card, n: "NodeView") -> int:
        """The index of a box's look: its classes, its text colour, its markup with the replay
        count, width and centre left as placeholders (the page fills them in), and which of its
        texts says the replay count, and how (so that a new count alone rewrites that text)."""
        meta = list(box.meta)
        meta[1] = f"gen {n.generation} · {REPLAYS}"
        blank = replace(box, meta=meta)
        height = card_size(box)[1]
        inner = (f"<title>{escape(box.title)} (node {box.id})</title>"
                 + node_inner(blank, WIDTH, CENTRE, height))
        key = (box.classes, box.muted, inner, len(box.badges) + 2, meta[1])
        i = self._look_index.get(key)
        if i is None:
            i = self._look_index[key] = len(self.looks)
            self.looks.append(list(key))
        return i

    # -- the page's data ------------------------------------------------------------------------
    def data(self, progress: Optional[Callable[[int, int], None]] = None) -> dict:
        """The page's tree data: ``structs`` (per structure ``[tree, first]``: its drawing's
        index among the page's trees and the step whose state it is drawn in), ``looks`` (per
        look ``[class, fill, markup, replay text's index, replay text]``), ``delta`` (per step
        ``[node, look, replays, ...]``: the nodes that changed since the step before; look -1:
        the node is gone) and ``keys`` (every `KEYFRAME`th step: its whole state, the same way).
        `progress(done, total)` hears of each structure drawn."""
        structs = self.structures()
        drawn = []
        cache = DrawCache()
        for k, s in enumerate(structs):
            lines = draw_structure(s, self.frames[s.first], self.looks, self.sizes, self._markup, cache, lines=True)
            drawn.append([self._svg_index(lines), s.first])
            if progress is not None:
                progress(k + 1, len(structs))
        delta: list[list[int]] = []
        keys: dict[str, list[int]] = {}
        before: Optional[Frame] = None
        pairs: dict[tuple[int, int], list[int]] = {}
        for i, frame in enumerate(self.frames):
            if frame is None or frame is before:
                delta.append([])
            else:
                pair = (id(before), id(frame))
                if pair not in pairs:
                    pairs[pair] = frame_delta(before, frame)
                delta.append(pairs[pair])
                before = frame
            if i % KEYFRAME == 0:
                keys[str(i)] = before.flat() if before else []
        return {"structs": drawn, "looks": self.looks, "delta": delta, "keys": keys, "every": KEYFRAME}


def _carried_over(nodes: list, last_nodes: list, last: Frame, touched: set[int]) -> tuple[list, list, list]:
    """Looks and replay counts of a frame of a new structure, taken from the last frame for the
    nodes it had as the same objects and untouched; and the positions left to work out."""
    before = {n.id: (n, look, rep) for n, look, rep in zip(last_nodes, last.looks, last.replays)}
    looks, replays, todo = [0] * len(nodes), [0] * len(nodes), []
    for k, n in enumerate(nodes):
        kept = before.get(n.id)
        if kept is not None and kept[0] is n and n.id not in touched:
            looks[k], replays[k] = kept[1], kept[2]
        else:
            todo.append(k)
    return looks, replays, todo


def frame_delta(before: Optional[Frame], after: Frame) -> list[int]:
    """[node, look, replays, ...] for what changed from `before` to `after` (look -1: gone)."""
    out: list[int] = []
    if before is not None and before.structure is after.structure:
        ids, lb, rb = after.structure.ids, after.looks, after.replays
        # the positions that changed, found by C loops (a step changes a few nodes of a thousand)
        changed = set(compress(count(), map(ne, before.looks, lb))) | set(compress(count(), map(ne, before.replays, rb)))
        for k in sorted(changed):
            out += (ids[k], lb[k], rb[k])
        return out
    old = before.state() if before is not None else {}
    new = after.state()
    for k, v in new.items():
        if old.get(k) != v:
            out += (k, v[0], v[1])
    for k in old.keys() - new.keys():
        out += (k, -1, 0)
    return out


class DrawCache:
    """What drawing a structure worked out, for drawing the next (`draw_structure_lines`): its
    layout (`layout.LayoutCache`), and its edges' and nodes' groups with what they show, which
    the next structure of a growing tree mostly has too, at the same places from either end."""

    __slots__ = ("layout", "edges", "nodes")

    def __init__(self) -> None:
        self.layout = LayoutCache()
        self.edges: tuple[list[tuple], list[str]] = ([], [])
        self.nodes: tuple[list[tuple], list[str]] = ([], [])


@overload
def draw_structure(structure: Structure, frame: Frame, looks: list[list[str]], sizes: list[list[float]],
                   memo: dict[tuple, str], cache: Optional[DrawCache] = None, *, lines: Literal[False] = False) -> str:
    ...


@overload
def draw_structure(structure: Structure, frame: Frame, looks: list[list[str]], sizes: list[list[float]],
                   memo: dict[tuple, str], cache: Optional[DrawCache] = None, *, lines: Literal[True]) -> list[str]:
    ...


def draw_structure(structure: Structure, frame: Frame, looks: list[list[str]], sizes: list[list[float]],
                   memo: dict[tuple, str], cache: Optional[DrawCache] = None, *, lines: bool = False) -> Any:
    """A structure's drawing: its SVG text, or with `lines` the text's lines, which a page
    stores as they are (no text to join, then split again): see `draw_structure_lines`."""
    out = draw_structure_lines(structure, frame, looks, sizes, memo, cache)
    return out if lines else "\n".join(out)


def draw_structure_lines(structure: Structure, frame: Frame, looks: list[list[str]], sizes: list[list[float]],
                         memo: dict[tuple, str], cache: Optional[DrawCache] = None) -> list[str]:
    """A structure's drawing, as the lines of its SVG text (each node and edge group a line of
    its own), its nodes as after its first step: the built-in layout with every box at its
    largest size (`sizes`: per static node, width, height and smallest height); each node
    group carries its width and centre (data-w, data-cx) for the page to redraw it, and each
    edge both its plain and its on-path stroke. `memo` keeps the groups drawn, by what they
    show, and `cache` what drawing the last structure worked out: the structures of a growing
    tree share most of both."""
    snap = structure.snapshot
    if not snap.nodes:
        return builtin_tree_svg(snap).split("\n")
    if cache is None:
        cache = DrawCache()
    ids, statics = structure.ids, structure.statics
    head, legend_w, legend_h = _legend()
    size = dict(zip(ids, map(sizes.__getitem__, statics)))
    box, depth, right, height = boxes(ids, size, snap, MARGIN + legend_h + 16, cache.layout)
    width = max(legend_w + 2 * MARGIN, right + MARGIN)
    edge_keys = _edge_keys(snap, box, depth, size)
    edges = _drawn(memo, edge_keys, _edge, cache.edges)
    node_keys = list(zip(ids, frame.looks, frame.replays, map(box.__getitem__, ids)))
    nodes = _drawn(memo, node_keys, lambda node_id, look, replays, b: _node(node_id, looks[look], replays, b),
                   cache.nodes)
    cache.edges, cache.nodes = (edge_keys, edges), (node_keys, nodes)
    return svg_lines(width, height, [*head, '<g class="cgviz-edges">', *edges, "</g>", *nodes])


@functools.lru_cache(maxsize=1)
def _legend() -> tuple[tuple[str, ...], float, float]:
    """The legend above every drawing, its width and height (the same each time)."""
    parts, width, height = svg_legend(MARGIN, MARGIN)
    return tuple(parts), width, height


def _edge_keys(snap: "Snapshot", box: dict[int, Box], depth: dict[int, int],
               size: dict[int, list[float]]) -> list[tuple]:
    """What each edge drawn shows, in `card.edges`' order, of those from a parent to a child
    one level down: (parent, child, the child's function, the parent's box and smallest height,
    the child's box)."""
    function = {n.id: n.function for n in snap.nodes}
    return [(n.id, c, function[c], box[n.id], size[n.id][2], box[c])
            for n in snap.nodes for c in n.children if c in function and depth[c] == depth[n.id] + 1]


def _drawn(memo: dict[tuple, str], keys: list[tuple], draw: Callable[..., str],
           last: tuple[list[tuple], list[str]]) -> list[str]:
    """The group of each key: the last drawing's (`last`: its keys and groups) where the keys
    are the same from the start or from the end (compared by C loops), else `draw(*key)` the
    first time and then from `memo`."""
    last_keys, last_groups = last
    n = min(len(keys), len(last_keys))
    head = _same(keys, last_keys, n)
    tail = _same(keys[::-1], last_keys[::-1], n - head)
    middle = keys[head : len(keys) - tail]
    groups = list(map(memo.get, middle))
    for k, group in enumerate(groups):
        if group is None:
            key = middle[k]
            group = memo.get(key)
            if group is None:
                group = memo[key] = draw(*key)
            groups[k] = group
    return last_groups[:head] + groups + last_groups[len(last_groups) - tail:]  # type: ignore[operator]


def _same(a: list, b: list, limit: int) -> int:
    """How many items `a` and `b` have equal from the start, up to `limit`."""
    return next(compress(count(), map(ne, a[:limit], b[:limit])), limit)


def _node(node_id: int, look: list, replays: int, box: Box) -> str:
    x0, y0, w, _ = box
    inner = _fill(look[2], replays, f"{w:.1f}", f"{w / 2:.1f}")
    return (f'<g id="node-{node_id}" class="{look[0]}" data-node="{node_id}" data-w="{w:.1f}" '
            f'data-cx="{w / 2:.1f}" transform="translate({x0:.1f},{y0:.1f})" '
            f'font-size="{SIZE_META:g}" fill="{look[1]}" text-anchor="middle">{inner}</g>')


def _fill(markup: str, replays: int, w: str, cx: str) -> str:
    """A look's markup with its placeholders filled in (as the page's script does)."""
    return markup.replace(REPLAYS, plural(replays, "replay")).replace(WIDTH, w).replace(CENTRE, cx)


def _edge(parent: int, child: int, function: str, pbox: Box, low: float, cbox: Box) -> str:
    # an edge leaves its parent where the box is shortest (`low`): the rest of it is under the
    # box, drawn after it, so it meets the box whatever height a step gives it
    pbox = pbox[:3] + (low,)
    plain = edge_inner(pbox, cbox, function, False)
    hot = edge_inner(pbox, cbox, function, True)
    cut = plain.index("<rect")  # the label, the same in both
    return (f'<g id="edge-{parent}-{child}" class="cgviz-edge" data-parent="{parent}" data-child="{child}"'
            f'{EDGE_TEXT}><g class="cg-e0"{PLAIN_STROKE}>{plain[:cut]}</g>'
            f'<g class="cg-e1"{_EDGE_PATH}>{hot[:hot.index("<rect")]}</g>{plain[cut:]}</g>')
