"""The built-in layout worked out level by level and cached across trees (`layout.LayoutCache`)
gives exactly what the plain walk gives, and so do the drawings of a page's structures made
one after another (`frames.DrawCache`), the page's lines stored as lines, and the trace's
text check that runs before a page is made."""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from cgviz.trace import surrogates
from cgviz.trace.model import NodeView, OutputView, Snapshot
from cgviz.views.tree import frames, layout
from cgviz.views.page_store import SvgStore, runs

ROOT = Path(__file__).resolve().parent.parent


def synthetic_trace(**kw: int) -> Any:
    """The render benchmark's synthetic trace: a tree growing a node at a time, then replays."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from render import synthetic_trace
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return synthetic_trace(**kw)[0]


# -- the plain walk: Reingold–Tilford over a pre-order walk, contours merged in place ------------
class _PlainContour:
    def __init__(self, half: float) -> None:
        self.lefts, self.rights, self.dl, self.dr = [-half], [half], 0.0, 0.0


def _plain_row(contours: list, gap: float) -> tuple[list[float], Any]:
    acc, offsets = contours[0], [0.0]
    for c in contours[1:]:
        na, nc = len(acc.lefts), len(c.lefts)
        sep = max(acc.rights[na - 1 - d] + acc.dr - (c.lefts[nc - 1 - d] + c.dl) for d in range(min(na, nc))) + gap
        offsets.append(sep)
        c.dl += sep
        c.dr += sep
        if nc > na:
            for j in range(na):
                c.lefts[nc - na + j] = acc.lefts[j] + (acc.dl - c.dl)
            acc.lefts, acc.dl = c.lefts, c.dl
        if nc >= na:
            acc.rights, acc.dr = c.rights, c.dr
        else:
            shift = c.dr - acc.dr
            for j in range(nc):
                acc.rights[na - nc + j] = c.rights[j] + shift
    return offsets, acc


def plain_layout(ids: set[int], sizes: dict, snapshot: Snapshot) -> tuple[dict[int, float], dict[int, int]]:
    children = {n.id: [c for c in n.children if c in ids] for n in snapshot.nodes}
    roots = [n.id for n in snapshot.nodes if n.parent is None or n.parent not in ids]
    depth: dict[int, int] = {}
    order: list[int] = []

    def visit(root: int) -> None:
        stack = [(root, 0)]
        while stack:
            v, d = stack.pop()
            if v not in depth:
                depth[v] = d
                order.append(v)
                stack.extend((c, d + 1) for c in reversed(children[v]) if c not in depth)

    for r in roots:
        visit(r)
    for n in snapshot.nodes:
        if n.id not in depth:
            roots.append(n.id)
            visit(n.id)
    kids: dict[int, list[int]] = {v: [] for v in order}
    seen: set[int] = set()
    for v in order:
        for c in children[v]:
            if depth.get(c) == depth[v] + 1 and c not in seen:
                seen.add(c)
                kids[v].append(c)
    rel, contour = {}, {}
    for v in reversed(order):
        half = sizes[v][0] / 2
        if not kids[v]:
            contour[v] = _PlainContour(half)
            continue
        offsets, acc = _plain_row([contour.pop(c) for c in kids[v]], layout.SIBLING_GAP)
        mid = (offsets[0] + offsets[-1]) / 2
        for c, off in zip(kids[v], offsets):
            rel[c] = off - mid
        acc.dl -= mid
        acc.dr -= mid
        acc.lefts.append(-half - acc.dl)
        acc.rights.append(half - acc.dr)
        contour[v] = acc
    top = [r for r in roots if r in contour]
    x = dict(zip(top, _plain_row([contour[r] for r in top], layout.SIBLING_GAP * 1.6)[0]))
    parent_of = {c: p for p in order for c in kids[p]}
    for v in order:
        if v not in x:
            x[v] = x[parent_of[v]] + rel[v]
    return x, depth


# -- random trees --------------------------------------------------------------------------------
def node(i: int, parent: Optional[int], children: list[int]) -> NodeView:
    return NodeView(i, f"f{i % 3}", "graph", parent, children, 0, 0, [])


def snapshot_of(parents: dict[int, Optional[int]]) -> Snapshot:
    """A snapshot of the tree `parents` (node -> parent, in node order)."""
    children: dict[int, list[int]] = {i: [] for i in parents}
    for i, p in parents.items():
        if p is not None:
            children[p].append(i)
    return Snapshot([node(i, p, children[i]) for i, p in parents.items()], None, [], "none", 0)


def random_parents(rng: random.Random, n: int) -> dict[int, Optional[int]]:
    parents: dict[int, Optional[int]] = {}
    for i in range(n):
        parents[i] = None if not parents or rng.random() < 0.15 else rng.choice(list(parents))
    return parents


def malformed(rng: random.Random, snap: Snapshot) -> Snapshot:
    """`snap` with what a broken trace may hold: a child listed twice, a child that is no node,
    a parent that does not list its child, a cycle."""
    nodes = copy.deepcopy(snap.nodes)
    for _ in range(rng.randrange(1, 4)):
        a, b = rng.choice(nodes), rng.choice(nodes)
        what = rng.randrange(4)
        if what == 0:
            a.children.append(b.id)
        elif what == 1:
            a.children.append(10_000 + rng.randrange(5))
        elif what == 2 and b.parent is not None:
            b.parent = a.id
        else:
            a.parent, b.parent = b.id, a.id
            a.children.append(b.id)
            b.children.append(a.id)
    return Snapshot(nodes, None, [], "none", 0)


def random_sizes(rng: random.Random, ids, sizes: Optional[dict] = None) -> dict[int, tuple[float, float]]:
    sizes = dict(sizes or {})
    for i in ids:
        if i not in sizes or rng.random() < 0.05:
            sizes[i] = (rng.choice([96.0, 104.37, 131.25, 250.9]), rng.choice([60.5, 74.0, 88.0]))
    return sizes


@pytest.mark.parametrize("seed", range(40))
def test_layout_is_the_plain_walks(seed):
    rng = random.Random(seed)
    snap = snapshot_of(random_parents(rng, rng.randrange(1, 60)))
    if seed % 2:
        snap = malformed(rng, snap)
    ids = {n.id for n in snap.nodes}
    sizes = random_sizes(rng, ids)
    assert layout.tidy_layout(ids, sizes, snap) == plain_layout(ids, sizes, snap)
    assert layout.tidy_layout(ids, sizes, snap, layout.LayoutCache()) == plain_layout(ids, sizes, snap)


@pytest.mark.parametrize("seed", range(8))
def test_cached_layout_is_a_fresh_one_as_a_tree_grows(seed):
    """A tree grows a node at a time (now and then a box grows, or a node goes), laid out with
    one cache throughout: each layout is the one made from scratch."""
    rng = random.Random(seed)
    cache = layout.LayoutCache()
    parents: dict[int, Optional[int]] = {}
    sizes: dict[int, tuple[float, float]] = {}
    for i in range(120):
        if len(parents) > 1 and rng.random() < 0.05:
            gone = rng.choice([v for v in parents if v not in parents.values()])  # a leaf
            del parents[gone]
        else:
            parents[i] = None if not parents or rng.random() < 0.1 else rng.choice(list(parents))
        snap = snapshot_of(parents)
        ids = [n.id for n in snap.nodes]
        sizes = random_sizes(rng, ids, sizes)
        assert layout.boxes(ids, sizes, snap, 40.0, cache) == layout.boxes(ids, sizes, snap, 40.0)
        assert layout.tidy_layout(set(ids), sizes, snap, cache) == plain_layout(set(ids), sizes, snap)


def test_drawings_made_in_turn_are_the_ones_made_alone():
    """A page's structures drawn one after another with one `DrawCache` (as `TreeStates.data`
    draws them) are the drawings each makes alone, line for line."""
    trace = synthetic_trace(nodes=60, steps=400, variants=3)
    states = frames.TreeStates(lambda lines: 0)
    for step in trace.steps:
        states.add(step)
    structures = states.structures()
    assert len(structures) > 20
    cache, memo = frames.DrawCache(), {}
    for s in structures:
        args = (s, states.frames[s.first], states.looks, states.sizes)
        lines = frames.draw_structure(*args, memo, cache, lines=True)
        alone = frames.draw_structure(*args, {})
        assert "\n".join(lines) == alone
        assert all("\n" not in line for line in lines)


def test_lines_are_stored_as_their_text_is():
    store, alone = SvgStore(), SvgStore()
    texts = [["<svg>a", "b", "c</svg>"], ["<svg>a", "x\ny", "c</svg>"], ["b", "c</svg>", "b"], [""], ["<svg>a"]]
    for lines in texts:
        assert store.runs_of_lines(lines) == alone.runs("\n".join(lines))
    assert store.lines == alone.lines


def test_runs_are_the_consecutive_stretches():
    rng = random.Random(3)
    for _ in range(2000):
        values = [rng.randrange(6) for _ in range(rng.randrange(8))]
        plain: list[int] = []
        for j in values:
            if plain and plain[-2] + plain[-1] == j:
                plain[-1] += 1
            else:
                plain += (j, 1)
        assert runs(values) == plain


# -- the trace's text check ----------------------------------------------------------------------
def plain_holds_surrogate(trace: Any) -> bool:
    """Every string of the trace looked at, one object at a time."""
    seen, stack = set(), [trace.meta, trace.steps]
    while stack:
        value = stack.pop()
        if type(value) is str:
            if any("\ud800" <= c <= "\udfff" for c in value):
                return True
        elif type(value) in (list, tuple):
            stack.extend(value)
        elif type(value) is dict:
            stack.extend(value)
            stack.extend(value.values())
        elif type(value) in surrogates.MODEL_FIELDS and id(value) not in seen:
            seen.add(id(value))
            stack.extend(getattr(value, name) for name in surrogates.MODEL_FIELDS[type(value)])
    return False


@pytest.mark.parametrize("seed", range(30))
def test_surrogate_check_is_the_plain_walks(seed):
    rng = random.Random(seed)
    trace = synthetic_trace(nodes=40, steps=150, variants=2)
    bad = "x\udc80y"
    snaps = [s.snapshot for s in trace.steps if s.snapshot is not None and s.snapshot.nodes]
    where = seed % 6
    if where == 0:
        trace.meta["extra"] = [1, (2, {bad if seed % 12 else "k": bad})]
    elif where == 1:  # a node shared by many snapshots, at the same place in each
        rng.choice(rng.choice(snaps).nodes).function = bad
    elif where == 2:
        n = rng.choice(rng.choice(snaps).nodes)
        n.outputs = [*n.outputs, OutputView(9, [2], bad, 8, None, "live")]
    elif where == 3:
        rng.choice(trace.steps).reason = bad
    elif where == 4:
        snap = rng.choice(snaps)
        snap.nodes = [*snap.nodes[1:], snap.nodes[0]]  # moved: no longer at its neighbours' places
        snap.nodes[-1] = copy.copy(snap.nodes[-1])
        snap.nodes[-1].signature = bad
    else:
        rng.choice(trace.steps).invalidated = [[1, 2]]
    assert surrogates.holds_surrogate(trace) == plain_holds_surrogate(trace) == (where != 5)
