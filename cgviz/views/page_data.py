"""The explorer's payload: what both hosts of the front end (views/page/explorer*.js) consume.

    data = page_data(trace)              # everything: the HTML export embeds it
    data = page_data(trace, range(40))   # the head and steps 0..39 only: a widget's first view
    data, cut = page_whole(trace)        # everything, and where its first steps end (a page's parts)

The head (title, header, notices, the step list's rows, the timeline) is cheap and always
whole; the pictures of a step (tree, pool, snapshot, banner) are what costs, so a widget asks
for them a window at a time (`PageData.piece`), each piece carrying only the pictures, lines,
nodes and snapshots not sent before. Indices into those lists never change: the front end
appends what a piece brings (`mergePiece` in explorer_logic.js). The records' fields are
declared in views/payload.py; the head names them (``fields``).
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from cgviz.trace.diagnose import SEVERITIES, diagnose
from cgviz.trace.lanes import tree_keys, tree_of
from cgviz.trace.model import GRAPH_STEP_KINDS
from cgviz.trace.profile import profile_entries
from cgviz.views.graph_list import graph_list_html
from cgviz.views.text import (
    GRAPH_STEP_NOTE, GRAPHS_ONLY, REPEATS_NOTE, format_bytes, generation_banner, kernel_label, output_row, path_line,
    time_line,
)
from cgviz.views.style import STEP_COLORS, css_variables
from cgviz.views.payload import FIELDS, KERNEL, KIND_COUNT, META, NODE, ROW, STEP
from cgviz.views.page_split import FIRST_STEPS, FirstCut
from cgviz.views.page_store import SvgKind, SvgStore, linear, looked_up, namespace_ids, runs, strip_prolog
from cgviz.views.pool_data import POOL_LISTS, WIDENED_NOTE, PoolData

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView, Snapshot, Step, Trace

__all__ = ["page_data", "page_whole", "PageData", "KIND_COLORS", "Progress"]

#: A progress callback: ``progress(done, total, what)``, e.g. ``(4000, 10000, "steps")``; called
#: as the payload is built (per step, then per tree drawn: ``"trees"``), last with done == total.
Progress = Callable[[int, int, str], None]

#: The colour of each step kind (the timeline's), for the step list and the headline.
KIND_COLORS: dict[str, str] = dict(STEP_COLORS)

# "auto" uses Graphviz when laying out every distinct tree of the trace should take about this
# long at most (a `dot` run costs about 15 ms plus 1.1 ms per node); the built-in layout beyond.
GRAPHVIZ_BUDGET_S = 10.0

#: The timeline's size in inches (an inch is 96 CSS px): wide and low, as it spans the page. The
#: page shows it at 0.9 to 1.1 times that size (page.css), for its words to read as the page's
#: small text: centred in a wider box, scrolled sideways in a narrower one.
TIMELINE_SIZE = (14.0, 1.9)

_META_ORDER = ("scenario", "backend", "device", "torch", "cuda", "trace_level")
_NOT_SHOWN = ("profile",)  # meta keys the header leaves out: the node panel shows the profile
_LISTS = ("lines", "trees", "nodes", "snaps", "banners") + POOL_LISTS
_STEP_TREE = STEP.fields.index("tree")


def page_data(trace: "Trace", steps: Optional[Iterable[int]] = None, *, title: Optional[str] = None,
              renderer: str = "auto", progress: Optional[Progress] = None) -> dict:
    """The payload for `trace`: the head, and the pictures of `steps` (indices; default all).

    ``steps`` then has one entry per step of the trace: a `payload.STEP` record, or None for a
    step whose pictures were left out. `progress` (`Progress`) hears how far the pictures are."""
    if steps is None:
        return page_whole(trace, title=title, renderer=renderer, progress=progress)[0]
    with _collections_paused():
        data = PageData(trace, title=title, renderer=renderer)
        return {**data.head(), **data.piece(steps, progress=progress)}


def page_whole(trace: "Trace", *, title: Optional[str] = None, renderer: str = "auto",
               progress: Optional[Progress] = None) -> tuple[dict, Optional[FirstCut]]:
    """`page_data(trace)`, and where the pictures of its first `FIRST_STEPS` steps end, for a
    page that shows those before it decodes the rest (`page_split`; None for a shorter trace)."""
    with _collections_paused():
        data = PageData(trace, title=title, renderer=renderer)
        whole = {**data.head(), **data.piece(whole=True, progress=progress, first=FIRST_STEPS)}
        cut = data.first_cut if len(trace.steps) > FIRST_STEPS else None
        return whole, cut


@contextlib.contextmanager
def _collections_paused() -> Any:
    """Python's cyclic garbage collector held off while a payload is built: building one makes
    millions of small objects that all live as long as the payload (no cycles to find), and
    each collection would only walk them again (about a tenth of a 10,000-step export)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class PageData:
    """Builds the payload of one trace in pieces; it follows the trace as it grows (`grow`).

    `renderer` draws the trees: "graphviz", "builtin", or "auto" (Graphviz when `dot` is
    installed and laying out every distinct tree should take about ten seconds at most)."""

    def __init__(self, trace: "Trace", *, title: Optional[str] = None, renderer: str = "auto") -> None:
        if renderer not in ("auto", "graphviz", "builtin"):
            raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")
        self.trace = trace
        self.title = title or _default_title(trace)
        self.notices: list[str] = []
        self.store = SvgStore()
        self.trees = SvgKind(self.store)
        self.pools = PoolData()
        self.node_recs: list[list] = []
        self.snap_recs: list[dict] = []
        self.banners: list[dict] = []
        self._sent = {k: 0 for k in _LISTS}
        # caches by id() keep their object alive (`_keep`): a fold replaces steps, and a freed
        # object's id may come back
        self._keep: list[Any] = []
        self._by_id: dict[tuple[str, int], int] = {}
        self._by_key: dict[tuple, int] = {}
        self._records: dict[int, list] = {}
        self._node_ids: dict[int, int] = {}  # id(NodeView) -> index into node_recs
        self._functions: dict[int, str] = {}
        self._last_snap: list[int] = []  # per step: the index of the latest step with a snapshot, or -1
        self._windows: Any = None  # a widget's trees as drawings and node states (`tree.windows`)
        self.first_cut: Optional[FirstCut] = None  # where a whole piece's first steps end (`piece`)
        self._ranks = _rank_trees(trace)  # a trace of several trees: a drawing per rank or device (`rank_trees`)
        self._rank_parts: dict = {}  # each tree's drawing among them, by what it shows (`ranks_tree_svg`)
        self.renderer = self._choose(renderer)
        self._fallback = renderer == "auto"  # a tree `dot` cannot draw is drawn built in (else: GraphvizError)

    # -- the head ---------------------------------------------------------------------------------
    def head(self, start: int = 0) -> dict:
        """Title, header, notices, timeline, findings (`_findings`), the list of CUDA graphs made
        outside the trees (``graphs``: HTML, `graph_list_html`; '' when there are none) and what
        the tree panel says at such a graph's step (``graph_step``), the step list's rows from
        step `start` on (`payload.ROW`), and the records' fields (``fields``, `payload.FIELDS`)."""
        steps = self.trace.steps
        empty = _empty_message(self.trace)
        timeline, xs, band, names = self._timeline()
        return {
            "title": self.title, "header": self._header(), "n": len(steps), "start": start,
            "rows": self._rows(start), "empty": empty,
            "notices": self.notices + ([empty] if steps and empty else []),
            "timeline": timeline, "tx": xs, "tband": band, "tnames": names, "level": self.trace.meta.get("trace_level"),
            "colors": KIND_COLORS, "findings": self._findings(), "widened": WIDENED_NOTE,
            "css": css_variables(), "repeats": REPEATS_NOTE, "profile": self._profile(),
            "graphs": graph_list_html(self.trace), "graph_step": GRAPH_STEP_NOTE, "fields": FIELDS,
        }

    def grow(self, start: int) -> None:
        """Forget what was built for steps `start` on (new steps, or a fold that rewrote them)."""
        for i in [i for i in self._records if i >= start]:
            del self._records[i]
        del self._last_snap[start:]

    # -- pictures ---------------------------------------------------------------------------------
    def piece(self, steps: Optional[Iterable[int]] = None, *, whole: bool = False,
              progress: Optional[Progress] = None, first: int = 0) -> dict:
        """The step records of `steps` (default all) and what they need that was not sent yet.

        `whole` (every step, in order) draws a built-in tree once per structure and sends each
        step's node states (`tree.frames.TreeStates`, as ``tree``): the smallest export, but not
        one that can be sent a window at a time; with `first` (a whole first piece), `first_cut`
        then says where the pictures of its first `first` steps end (`page_split`). `progress`
        hears of each step done, then of each tree drawn."""
        n = len(self.trace.steps)
        wanted = range(n) if steps is None else sorted({i for i in steps if 0 <= i < n})
        states = drawn = None
        if whole and self.renderer == "builtin" and self._ranks is None and any(s.snapshot is not None for s in self.trace.steps):
            from cgviz.views.tree.frames import TreeStates

            drawn = []  # the lines and trees stored once each structure is drawn: its pictures' ends

            def draw(lines: list[str]) -> int:
                index = self.trees.add_lines(lines)  # built-in drawings, as lines: no prolog to strip
                drawn.append((len(self.store.lines), len(self.trees.items)))
                return index

            states = TreeStates(draw)
        out: dict[str, Any] = {}
        total = len(wanted)
        self.first_cut = None
        if whole:
            out["steps"] = recs = []
            for k, i in enumerate(wanted):
                recs.append(self._record(i, states))
                if k + 1 == first and not any(self._sent.values()):
                    self.first_cut = self._cut(first, states)
                if progress is not None:
                    progress(k + 1, total, "steps")
        else:
            recs = [None] * n if steps is not None else []
            for k, i in enumerate(wanted):
                recs[i] = self._record(i, None)
                if progress is not None:
                    progress(k + 1, total, "steps")
            out["steps"] = recs
        if progress is not None and not total:
            progress(0, 0, "steps")
        if states is not None:
            out["tree"] = states.data(None if progress is None else lambda done, all_: progress(done, all_, "trees"))
            cut = self.first_cut
            if cut is not None and cut.structs:  # the first steps' structures are drawn first
                cut.lists["lines"], cut.lists["trees"] = drawn[cut.structs - 1]
        out.update(self._new_items())
        return out

    def _cut(self, first: int, states: Any) -> FirstCut:
        """Where the pictures of the steps built so far end (they were built first)."""
        cut = FirstCut(first, {k: len(items) for k, items in self._lists().items()})
        if states is not None:
            cut.structs, cut.looks = len(states.structures()), len(states.looks)
        return cut

    def window(self, steps: Iterable[int]) -> dict:
        """A piece for a host that has the head: ``at`` maps step index (text) to its record.
        With the built-in layout the trees come as drawings and node states (``tree``, see
        `tree.windows`), so the front end steps by repainting a few nodes."""
        n = len(self.trace.steps)
        wanted = sorted({i for i in steps if 0 <= i < n})
        tree = None
        if self.renderer == "builtin" and self._windows is None and self._ranks is None:
            from cgviz.views.tree.windows import TreeWindows

            self._windows = TreeWindows(self.trees.add_lines)
        if self._windows is not None:
            drawings, tree = self._windows.piece(self.trace.steps, wanted)
            at = {}
            for i in wanted:
                rec = at[str(i)] = self._record(i, None, drawings[i])
                rec[_STEP_TREE] = drawings[i]  # a record made before may name an older drawing
        else:
            at = {str(i): self._record(i, None) for i in wanted}
        return {**self._new_items(), "at": at, **({"tree": tree} if tree is not None else {})}

    def _lists(self) -> dict[str, list]:
        return {"lines": self.store.lines, "trees": self.trees.items, "nodes": self.node_recs,
                "snaps": self.snap_recs, "banners": self.banners, **self.pools.lists()}

    def _new_items(self) -> dict:
        out = {}
        for k, items in self._lists().items():
            out[k] = items[self._sent[k]:]
            self._sent[k] = len(items)
        return out

    def _record(self, i: int, states: Any, drawing: Optional[int] = None) -> list:
        """Step `i`'s record; its tree is `states`' structure, or `drawing` (a `TreeWindows`
        drawing), or else the step's own picture."""
        rec = self._records.get(i)
        if rec is not None and states is None:
            return rec
        step = self.trace.steps[i]
        snap = step.snapshot
        tree = pool = sidx = -1
        if states is not None:
            tree = states.add(step)
        elif drawing is not None:
            tree = drawing
        if snap is not None:
            if self._ranks is not None:
                tree = self._rank_drawing(i)
            elif states is None and drawing is None:
                tree = self._cached(("tree", self._tree_key(step)), step,
                                    lambda: self.trees.add(strip_prolog(self._tree_svg(snap, step))))
            pool = self._cached(("pool", id(snap)), snap, lambda: self.pools.add(snap))
            sidx = self._snap_index(snap)
        rec = self._records[i] = STEP.pack(tree=tree, pool=pool, snap=sidx, node=step.node, banner=self._banner(i))
        return rec

    def _tree_svg(self, snap: "Snapshot", step: "Step") -> str:
        """A step's tree drawn by the renderer chosen; with "auto", a tree Graphviz's `dot` fails
        on is drawn built in, its notice saying why."""
        from cgviz.views.tree import tree_svg

        return tree_svg(snap, step, renderer=self.renderer, fallback=self._fallback)

    def _rank_drawing(self, i: int) -> int:
        """Step `i`'s trees of a merged trace: its rank's and every other rank's beside it."""
        from cgviz.views.rank_trees import ranks_tree_svg

        ranks = self._ranks
        return self._cached_key(("ranks",) + ranks.key(i), lambda: self.trees.add(
            ranks_tree_svg(ranks.at(i), tree_of(self.trace.steps[i]), renderer=self.renderer,
                           drawn=self._rank_parts, fallback=self._fallback)))

    def _cached(self, key: tuple, keep: Any, make: Any) -> int:
        i = self._by_id.get(key)
        if i is None:
            self._keep.append(keep)
            i = self._by_id[key] = make()
        return i

    def _cached_key(self, key: tuple, make: Any) -> int:
        i = self._by_key.get(key)
        if i is None:
            i = self._by_key[key] = make()
        return i

    @staticmethod
    def _tree_key(step: "Step") -> tuple:
        # what the tree view depends on: the snapshot, and what it shows of the step
        from cgviz.views.rank_trees import step_shown

        return (id(step.snapshot),) + step_shown(step)

    def _node_index(self, n: "NodeView") -> int:
        index = self._node_ids.get(id(n))
        if index is not None:
            return index
        key = ("node", n.id, n.function, n.kind, n.parent, tuple(n.children), n.generation, n.replays,
               n.signature, tuple((o.index, o.state, tuple(o.shape), o.dtype, o.nbytes, o.address, o.alias_of,
                                   repr(o.values)) for o in n.outputs))

        def add() -> int:
            self.node_recs.append(NODE.pack(id=n.id, function=n.function, kind=n.kind, parent=n.parent,
                                            children=list(n.children), generation=n.generation, replays=n.replays,
                                            signature=n.signature, outputs=[output_row(o) for o in n.outputs]))
            return len(self.node_recs) - 1
        self._keep.append(n)  # the id() cache relies on the object staying alive
        index = self._node_ids[id(n)] = self._cached_key(key, add)
        return index

    def _snap_index(self, s: "Snapshot") -> int:
        def make() -> int:
            nodes = runs(looked_up(self._node_ids, s.nodes, self._node_index))
            key = ("snap", tuple(nodes), tuple(s.path), s.current_node, s.state, s.generation)

            def add() -> int:
                self.snap_recs.append({"n": nodes, "path": list(s.path), "cur": s.current_node, "state": s.state,
                                       "gen": s.generation, "info": path_line(s)})
                return len(self.snap_recs) - 1
            return self._cached_key(key, add)
        return self._cached(("snap", id(s)), s, make)

    def _banner(self, i: int) -> int:
        """The generation banner of step `i` (an index into banners), or -1."""
        step = self.trace.steps[i]
        if step.kind != "generation":
            return -1
        self._scan()
        last = self._last_snap[i]
        snap = None if last < 0 else self.trace.steps[last].snapshot
        items = []
        for pair in step.invalidated:
            node_id, out_index = pair[0], pair[1]
            function, detail = self._functions.get(node_id), ""
            if snap is not None:
                with contextlib.suppress(KeyError):
                    node = snap.node(node_id)
                    function = node.function
                    for o in node.outputs:
                        if o.index == out_index:
                            shape = ", ".join(str(d) for d in o.shape)
                            detail = f" · {o.dtype}[{shape}] · {format_bytes(o.nbytes)}"
            who = f"{function} (node {node_id})" if function else f"node {node_id}"
            items.append(f"output {out_index} of {who}{detail}")
        self.banners.append({"head": generation_banner(step.generation, items), "items": items})
        return len(self.banners) - 1

    def _scan(self) -> None:
        """Node → function names and each step's latest snapshot, for the steps not scanned yet."""
        steps = self.trace.steps
        for i in range(len(self._last_snap), len(steps)):
            step = steps[i]
            if step.node is not None and step.function:
                self._functions[step.node] = step.function
            before = self._last_snap[-1] if self._last_snap else -1
            self._last_snap.append(i if step.snapshot is not None else before)

    def _choose(self, renderer: str) -> str:
        """The renderer for the trace's trees (`tree.choose_renderer`, within GRAPHVIZ_BUDGET_S
        for its distinct trees), a notice saying why where "auto" chose the built-in layout."""
        from cgviz.views.tree import choose_renderer, dot_seconds

        seen: dict[tuple, int] = {}
        if renderer == "auto":
            for step in self.trace.steps:
                if step.snapshot is not None:
                    seen[self._tree_key(step)] = len(step.snapshot.nodes)
        choice = choose_renderer(renderer, seen.values(), GRAPHVIZ_BUDGET_S)
        if choice.why_builtin == "missing":
            self.notices.append("Trees drawn with the built-in layout: Graphviz's `dot` was not found "
                                "(apt install graphviz / brew install graphviz / conda install graphviz).")
        elif choice.why_builtin == "slow":
            self.notices.append(f"Trees drawn with the built-in layout: Graphviz would need about "
                                f"{dot_seconds(seen.values()):.0f} s for the {len(seen)} distinct trees of this "
                                f"trace (to_html(..., renderer=\"graphviz\") uses it anyway).")
        return choice.renderer

    # -- text -------------------------------------------------------------------------------------
    def _header(self) -> dict:
        """``meta`` (`payload.META` records), ``count`` (the steps, and calls when repeats were
        folded) and ``kinds`` (`payload.KIND_COUNT`, for the kinds that occur). A merged trace's
        ranks are said in words (`ranks_summary`, which says the world size too), and a trace's
        devices too (`devices_summary`)."""
        from cgviz.views.text import devices_summary, ranks_summary

        meta = self.trace.meta
        hidden = _NOT_SHOWN + (("world_size",) if "ranks" in meta else ())
        keys = [k for k in _META_ORDER if k in meta] + sorted(k for k in meta if k not in _META_ORDER and k not in hidden)
        items = [META.pack(key=k, text=ranks_summary(meta) if k == "ranks"
                           else devices_summary(v) if k == "devices" and isinstance(v, list)
                           else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
                 for k, v in ((k, meta[k]) for k in keys)]
        n, calls = len(self.trace.steps), self.trace.calls
        count = f"{n} step{'' if n == 1 else 's'}" + (f" ({calls} with repeats)" if calls != n else "")  # as the timeline says
        return {"meta": items, "count": count,
                "kinds": [KIND_COUNT.pack(kind=k, count=v) for k, v in self.trace.counts().items() if v]}

    def _profile(self) -> dict:
        """Per node id: its times in words and its graph's kernels (`payload.KERNEL`) from
        ``trace.meta["profile"]`` (`Tree(profile=True)`)."""
        out = {}
        for entry in profile_entries(self.trace.meta):
            out[entry.node] = {"time": time_line(entry),
                               "kernels": [KERNEL.pack(label=kernel_label(name), count=count, name=name)
                                           for name, count in entry.kernels]}
        return out

    def _findings(self) -> list[dict]:
        """`cgviz.diagnose`'s findings as plain data, errors first then warnings then infos:
        ``{severity, title, suggestion, step, steps}`` (step: the first evidence step, or None).
        Made once per head, which a growing tree resends: diagnosing is linear in the steps."""
        order = {s: i for i, s in enumerate(SEVERITIES)}
        found = sorted(diagnose(self.trace), key=lambda f: order.get(f.severity, len(order)))
        return [{"severity": f.severity, "title": f.title, "suggestion": f.suggestion,
                 "step": f.evidence[0] if f.evidence else None, "steps": list(f.evidence)} for f in found]

    def _rows(self, start: int) -> list[list]:
        steps = self.trace.steps
        n = len(steps)
        times = self.trace.repeats() if n else []
        rows = []
        block_end = -1
        for i in range(max(0, start - 64), n):
            step = steps[i]
            if i > block_end:  # find the folded block (if any) that step i belongs to
                block_end = -1
                for j in range(i, min(n, i + 64)):
                    if steps[j].repeat > 1:
                        block_end = j if j - steps[j].span < i else -1
                        break
            if i < start:
                continue
            note = ""
            if step.repeat == 1 and block_end >= 0:
                span = steps[block_end].span
                note = f" · ×{times[i]} (step {i - (block_end - span)} of a {span}-step block)"
            rows.append(ROW.pack(kind=step.kind, headline=step.headline(), reason=step.reason, note=note,
                                 times=times[i], graph=step.graph))
        return rows

    def _timeline(self) -> tuple[str, list[float], list[float], dict]:
        """The timeline SVG (ids namespaced), the x of each step as a fraction of its width, the
        band the steps are drawn in (its top and bottom margins as fractions of the height): the
        page's step marker spans that band, not the title above it; and its lanes' names
        (``lanes``: [y from the top, name], fractions of the height; ``left``: where the lanes
        begin, a fraction of the width), which the page keeps in sight when the timeline scrolls
        sideways."""
        n = len(self.trace.steps)
        if not n:
            return "", [], [], {}
        from cgviz.views.svg_output import figure_svg
        from cgviz.views.timeline import timeline_figure

        fig = timeline_figure(self.trace, figsize=TIMELINE_SIZE)
        svg = namespace_ids(strip_prolog(figure_svg(fig)), "tl-")
        ax = fig.axes[0]
        try:  # where matplotlib put each step: data x = step position
            xs = linear(ax, fig.bbox.width, n)
        except Exception:
            xs = [round((i + 0.5) / n, 5) for i in range(n)]
        box = ax.get_position()
        to_figure = fig.transFigure.inverted()
        lanes = [[round(1 - float(to_figure.transform(ax.transData.transform((0, y)))[1]), 4), label.get_text()]
                 for y, label in zip(ax.get_yticks(), ax.get_yticklabels()) if label.get_text()]
        names = {"lanes": lanes, "left": round(float(box.x0), 4)} if lanes else {}
        return svg, xs, [round(1 - box.y1, 4), round(box.y0, 4)], names


def _rank_trees(trace: "Trace") -> Any:
    """A `RankTrees` for a trace of two trees or more (ranks merged, or several devices), else None
    (the steps of CUDA graphs made outside the trees are no tree's)."""
    if len(tree_keys(s for s in trace.steps if s.kind not in GRAPH_STEP_KINDS)) < 2:
        return None
    from cgviz.views.rank_trees import RankTrees

    return RankTrees(trace)


def _default_title(trace: "Trace") -> str:
    meta = trace.meta
    return " · ".join(["cgviz"] + [str(meta[k]) for k in ("scenario", "backend") if meta.get(k)])


def _empty_message(trace: "Trace") -> str:
    """Why the tree, node and pool panels have nothing to show, or '' where they have."""
    if not trace.steps:
        return "This trace has no steps: nothing ran through the tree."
    if all(s.kind in GRAPH_STEP_KINDS for s in trace.steps):
        return GRAPHS_ONLY
    if all(s.snapshot is None for s in trace.steps):
        level = trace.meta.get("trace_level")
        lvl = f" (trace level {level!r})" if level else ""
        return (f"This trace keeps steps and reasons only{lvl}: no snapshots of the tree or the pool. "
                f"Record with trace=\"full\" to see them.")
    return ""
