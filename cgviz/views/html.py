"""The HTML export: a whole trace as one self-contained page that opens offline.

    page = to_html(trace)                       # the page as text
    to_html(trace, "run.html")                  # ... also written (atomically) to run.html

Every step is precomputed: its headline and reason, the tree after it, the pool after it,
every node's outputs and, for a generation step, the outputs it invalidated. A few lines of
inline JavaScript (no libraries, nothing fetched) step through them: ⏮ ◀ ▶ ⏭, a slider, the
arrow keys (Home/End for the first and last step), a click on a step in the list or on the
timeline. A click on a tree node pins it: its output table is shown and its blocks stand out in
the pool (click it again to follow the steps' nodes). `#step=N` (1-based, as in the headline)
and `#step=N&node=M` in the address open the page at that step and node.

Pictures that repeat are stored once: each distinct SVG is kept as a list of runs over a
shared pool of SVG lines, so steps that draw the same tree share it, and trees that differ in
a few nodes share the rest; a pool may be kept as a diff against the pool before it.
Stepping to a tree that differs from the one shown only in some node or edge groups swaps
just those groups, and to a pool that differs only in some texts (its title's totals)
rewrites those texts. With the built-in layout, a tree is drawn once per structure and each
step stores only its nodes' states, which the script paints where the tree panel shows them
(`cgviz.views.html_trees`): a long trace's export stays small and a step change costs what
changed in view. The timeline is drawn once; a marker moves along it. The page's template,
style and script are files of their own in cgviz/views/page/.
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Optional

from cgviz.trace.diff import format_bytes
from cgviz.trace.io import check_save_target, with_safe_text, write_atomic
from cgviz.trace.model import safe_text
from cgviz.views.colors import STEP_COLORS

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView, Snapshot, Step, Trace

__all__ = ["to_html", "KIND_COLORS"]

#: The colour of each step kind (the timeline's), for the step list and the headline.
KIND_COLORS: dict[str, str] = dict(STEP_COLORS)

# "auto" uses Graphviz when laying out every distinct tree of the trace should take about this
# long at most (a `dot` run costs about 15 ms plus 1.1 ms per node); the built-in layout beyond.
GRAPHVIZ_BUDGET_S = 10.0
_DOT_RUN_S = 0.015
_DOT_NODE_S = 0.0011

#: The timeline's size in inches: wide and low, as it spans the page.
TIMELINE_SIZE = (14.0, 1.9)

_META_ORDER = ("scenario", "backend", "device", "torch", "cuda", "trace_level")


def to_html(trace: "Trace", path: Any = None, *, title: Optional[str] = None, renderer: str = "auto") -> str:
    """The trace as one self-contained HTML page; also written to `path` when given.

    `renderer` draws the trees: "graphviz", "builtin", or "auto" (Graphviz when `dot` is
    installed and the trace is small enough to lay out every distinct tree in about ten
    seconds, else the built-in layout). The file is written atomically: a temporary file
    beside `path`, renamed over it (see `write_atomic` for what is refused). Lone surrogates
    in the trace's text or the title are shown as their escape text (`safe_text`), since UTF-8
    cannot encode them.
    """
    if renderer not in ("auto", "graphviz", "builtin"):
        raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")
    if path is not None:
        check_save_target(path, "HTML")  # before building the page, which can take a while
    page = _Page(with_safe_text(trace), title and safe_text(title), renderer).build()
    if path is not None:
        write_atomic(path, lambda fh: fh.write(page), "HTML")
    return page


# -- storing SVGs once ---------------------------------------------------------------------------
class _SvgStore:
    """Distinct SVG texts, each kept as runs [start, count, ...] over one pool of lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._line_index: dict[str, int] = {}

    def runs(self, svg: str) -> list[int]:
        out: list[int] = []
        index = self._line_index
        for line in svg.split("\n"):
            j = index.get(line)
            if j is None:
                j = index[line] = len(self.lines)
                self.lines.append(line)
            if out and out[-2] + out[-1] == j:
                out[-1] += 1
            else:
                out += (j, 1)
        return out


class _Kind:
    """The SVGs of one view: distinct texts in order, and their runs.

    With `diffs`, an SVG may instead be kept as ``{"b": i - 1, "o": ops}``: its lines as
    runs over the lines of the SVG stored before it (``pos, count``) and new lines
    (``-1 - line``), where that is shorter. Pictures that grow a block at a time, or change
    only a title, are then a few numbers each, where runs over the shared lines grow with
    every insertion. Every `DIFF_CHAIN`th SVG is kept whole, so that reading one applies at
    most that many diffs.
    """

    DIFF_CHAIN = 32

    def __init__(self, store: _SvgStore, diffs: bool = False) -> None:
        self.store = store
        self.diffs = diffs
        self.items: list[Any] = []
        self._by_runs: dict[tuple, int] = {}
        self._last: list[int] = []

    def add(self, svg: str) -> int:
        runs = self.store.runs(svg)  # the runs identify the text: equal texts, equal runs
        key = tuple(runs)
        i = self._by_runs.get(key)
        if i is None:
            i = self._by_runs[key] = len(self.items)
            self.items.append(self._stored(runs, i))
        return i

    def _stored(self, runs: list[int], i: int) -> Any:
        """What the page keeps of the `i`th SVG: its runs, or a diff where that is shorter."""
        if not self.diffs:
            return runs
        lines = [j for a, n in zip(runs[::2], runs[1::2]) for j in range(a, a + n)]
        base, self._last = self._last, lines
        if i % self.DIFF_CHAIN:
            ops = _diff(base, lines)
            if len(ops) < len(runs):
                return {"b": i - 1, "o": ops}
        return runs


def _diff(base: list[int], lines: list[int]) -> list[int]:
    """`lines` as ops over `base`: ``pos, count`` copies base[pos:pos + count]; a negative
    number is one new line (``-1 - line``). Greedy: after a change, it looks for the next line
    where the copying stopped (an insertion) or as many lines on (a replacement), then anywhere."""
    where: dict[int, int] = {}
    for p, j in enumerate(base):
        where.setdefault(j, p)
    out: list[int] = []
    k, end, new = 0, 0, 0
    nb, nl = len(base), len(lines)
    while k < nl:
        j = lines[k]
        p = next((q for q in (end, end + new) if q < nb and base[q] == j), where.get(j))
        if p is None:
            out.append(-1 - j)
            k += 1
            new += 1
            continue
        n = 1
        while k + n < nl and p + n < nb and base[p + n] == lines[k + n]:
            n += 1
        out += (p, n)
        k += n
        end, new = p + n, 0
    return out


def _linear(ax: Any, width: float, n: int) -> list[float]:
    a = float(ax.transData.transform((0, 0))[0]) / width
    b = float(ax.transData.transform((1, 0))[0]) / width - a
    return [round(a + b * i, 5) for i in range(n)]


def _runs(values: list[int]) -> list[int]:
    out: list[int] = []
    for j in values:
        if out and out[-2] + out[-1] == j:
            out[-1] += 1
        else:
            out += (j, 1)
    return out


_ID_RE = re.compile(r'\bid="(?=[^"]+")')
_REF_RE = re.compile(r'(url\(#|href="#)(?=[^")])')


def _namespace_ids(svg: str, prefix: str) -> str:
    """Prefix every id (and reference to one) so SVGs on one page do not clash. (Templates,
    not a function per match: a pool of 1,000 blocks has thousands of ids.)"""
    safe = prefix.replace("\\", "\\\\")
    svg = _ID_RE.sub(f'id="{safe}', svg)
    return _REF_RE.sub(f"\\g<1>{safe}", svg)


_BLOCK_RE = re.compile(r'<g id="block-([0-9a-fA-F]+)"')


def _pool_key(snap: "Snapshot") -> tuple:
    """What the pool view draws from a snapshot: its blocks, the names of their nodes, the totals."""
    from cgviz.views.pool import pool_totals

    owners = {b.node for s in snap.segments for b in s.blocks if b.node is not None}
    return (
        tuple((s.address, s.size, s.kind,
               tuple((b.address, b.size, b.allocated, b.requested, b.owner, b.node, b.output) for b in s.blocks))
              for s in snap.segments),
        tuple((n.id, n.function) for n in snap.nodes if n.id in owners),
        tuple(sorted(pool_totals(snap).items())),
    )


def _pool_markup(snap: "Snapshot", svg: str) -> str:
    """The pool SVG with ids namespaced and each block group marked with its node (data-node)."""
    owner = {b.address: b.node for s in snap.segments for b in s.blocks if b.allocated and b.node is not None}

    def mark(m: re.Match) -> str:
        node = owner.get(int(m.group(1), 16))
        return m.group(0) if node is None else f'{m.group(0)} data-node="{node}"'

    return _namespace_ids(_BLOCK_RE.sub(mark, _strip_prolog(svg)), "pool-")


_METADATA_RE = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def _strip_prolog(svg: str) -> str:
    """The <svg> element alone: no XML prolog or DOCTYPE, and no <metadata> (RDF namespaces)."""
    start = svg.find("<svg")
    if start > 0:
        svg = svg[start:]
    return _METADATA_RE.sub("", svg) if "<metadata>" in svg else svg


# -- the page ------------------------------------------------------------------------------------
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _output_row(o) -> list:
    address = "" if o.address is None else f"{o.address:#x}"
    if not o.described:  # torch keeps no metadata for the outputs of its warmup runs
        return [o.index, o.state, "not recorded", "", "", address, o.alias_of or ""]
    shape = "[" + ", ".join(str(d) for d in o.shape) + "]"
    return [o.index, o.state, shape, o.dtype, format_bytes(o.nbytes), address, o.alias_of or ""]


class _Page:
    def __init__(self, trace: "Trace", title: Optional[str], renderer: str) -> None:
        self.trace = trace
        self.steps = list(trace.steps)
        self.title = title or self._default_title()
        self.renderer = renderer
        self.notices: list[str] = []
        self.store = _SvgStore()
        self.trees = _Kind(self.store)
        self.pools = _Kind(self.store, diffs=True)
        self.node_recs: list[list] = []
        self._node_by_id: dict[int, int] = {}
        self._node_by_key: dict[tuple, int] = {}
        self.snap_recs: list[dict] = []
        self._snap_by_id: dict[int, int] = {}
        self._snap_by_key: dict[tuple, int] = {}
        self.banners: list[dict] = []

    def _default_title(self) -> str:
        meta = self.trace.meta
        parts = ["cgviz"]
        if meta.get("scenario"):
            parts.append(str(meta["scenario"]))
        if meta.get("backend"):
            parts.append(str(meta["backend"]))
        return " · ".join(parts)

    # -- data ---------------------------------------------------------------------------------
    def _node_index(self, n: "NodeView") -> int:
        i = self._node_by_id.get(id(n))
        if i is not None:
            return i
        key = (n.id, n.function, n.kind, n.parent, tuple(n.children), n.generation, n.replays, n.signature,
               tuple((o.index, o.state, tuple(o.shape), o.dtype, o.nbytes, o.address, o.alias_of)
                     for o in n.outputs))
        i = self._node_by_key.get(key)
        if i is None:
            i = self._node_by_key[key] = len(self.node_recs)
            self.node_recs.append([n.id, n.function, n.kind, n.parent, list(n.children), n.generation, n.replays,
                                   n.signature, [_output_row(o) for o in n.outputs]])
        self._node_by_id[id(n)] = i
        return i

    def _snap_index(self, s: "Snapshot") -> int:
        i = self._snap_by_id.get(id(s))
        if i is not None:
            return i
        nodes = _runs([self._node_index(n) for n in s.nodes])
        key = (tuple(nodes), tuple(s.path), s.current_node, s.state, s.generation)
        i = self._snap_by_key.get(key)
        if i is None:
            i = self._snap_by_key[key] = len(self.snap_recs)
            self.snap_recs.append({"n": nodes, "path": list(s.path), "cur": s.current_node, "state": s.state,
                                   "gen": s.generation})
        self._snap_by_id[id(s)] = i
        return i

    def _banner(self, step: "Step", snap: Optional["Snapshot"], functions: dict[int, str]) -> int:
        """The generation banner of `step` (an index into banners), or -1. `snap`: the step's
        snapshot or the latest before it; `functions`: node → function from the steps so far."""
        if step.kind != "generation":
            return -1
        items = []
        for pair in step.invalidated:
            node_id, out_index = pair[0], pair[1]
            function, detail = functions.get(node_id), ""
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
        n = len(items)
        if n:
            head = (f"Generation {step.generation} begins: {n} output{'' if n == 1 else 's'} still live from "
                    f"the previous generation {'is' if n == 1 else 'are'} now invalid. Using "
                    f"{'it' if n == 1 else 'one'} raises \u201caccessing tensor output of CUDAGraphs that has "
                    f"been overwritten by a subsequent run\u201d.")
        else:
            head = f"Generation {step.generation} begins: nothing live was invalidated."
        self.banners.append({"head": head, "items": items})
        return len(self.banners) - 1

    def _tree_renderer(self) -> str:
        from cgviz.views.tree import dot_available

        if self.renderer != "auto":
            return self.renderer
        if not dot_available():
            self.notices.append("Trees drawn with the built-in layout: Graphviz's `dot` was not found "
                                "(apt install graphviz / brew install graphviz / conda install graphviz).")
            return "builtin"
        seen: dict[tuple, int] = {}
        for step in self.steps:
            if step.snapshot is not None:
                seen[self._tree_key(step)] = len(step.snapshot.nodes)
        estimate = _DOT_RUN_S * len(seen) + _DOT_NODE_S * sum(seen.values())
        if estimate > GRAPHVIZ_BUDGET_S:
            self.notices.append(f"Trees drawn with the built-in layout: Graphviz would need about "
                                f"{estimate:.0f} s for the {len(seen)} distinct trees of this trace "
                                f"(to_html(..., renderer=\"graphviz\") uses it anyway).")
            return "builtin"
        return "graphviz"

    @staticmethod
    def _tree_key(step: "Step") -> tuple:
        # what the tree view depends on: the snapshot, and the step's node, kind and invalidations
        inval = tuple(sorted({p[0] for p in step.invalidated})) if step.invalidated else ()
        return (id(step.snapshot), step.kind, step.node, inval)

    def _data(self) -> dict:
        """The page's data (the JSON block the script reads):

        - ``steps``: per step ``[tree, pool, snap, node, banner]``: indices into ``trees``,
          ``pools``, ``snaps`` and ``banners`` (-1: none), and the step's node id;
        - ``lines``: the distinct lines of every SVG; ``trees``/``pools``: each SVG as runs
          ``[start, count, ...]`` over ``lines`` (its text is those lines joined by newlines),
          or a pool as a diff against the pool before it (`_Kind`);
        - ``nodes``: distinct node records ``[id, function, kind, parent, children, generation,
          replays, signature, outputs]``, each output ``[index, state, shape, dtype, size,
          address, alias_of]``; ``snaps``: per distinct snapshot its nodes (runs over
          ``nodes``), ``path``, current node ``cur``, ``state`` and generation ``gen``;
        - ``banners``: ``{"head": text, "items": [text, ...]}`` for generation steps;
        - ``tree``, with the built-in layout only (`html_trees.TreeStates.data`): a step's
          ``tree`` is then the index of its tree's structure in ``tree.structs``, drawn once,
          and the step's node looks come from ``tree.delta`` and ``tree.keys``.
        """
        steps_out: list[list] = []
        if not self.steps:
            return {"steps": steps_out}
        have_snapshots = any(s.snapshot is not None for s in self.steps)
        states = None
        if have_snapshots:
            from cgviz.views.pool import pool_svg
            from cgviz.views.tree import tree_svg

            renderer = self._tree_renderer()
            if renderer == "builtin":
                from cgviz.views.html_trees import TreeStates

                states = TreeStates(lambda svg: self.trees.add(_strip_prolog(svg)))
        tree_cache: dict[tuple, int] = {}
        pool_cache: dict[tuple, int] = {}
        pool_by_id: dict[int, int] = {}
        last_snap = None
        functions: dict[int, str] = {}
        for i, step in enumerate(self.steps):
            snap = step.snapshot
            if step.node is not None and step.function:
                functions[step.node] = step.function
            tree = pool = sidx = -1
            if states is not None:  # every step: its structure's index (-1: none), drawn at the end
                tree = states.add(step)
            if snap is not None:
                if states is None:
                    key = self._tree_key(step)
                    tree = tree_cache.get(key, -1)
                    if tree < 0:
                        svg = _strip_prolog(tree_svg(snap, step, renderer=renderer))
                        tree = tree_cache[key] = self.trees.add(svg)
                pool = pool_by_id.get(id(snap), -1)
                if pool < 0:
                    key = _pool_key(snap)
                    pool = pool_cache.get(key, -1)
                    if pool < 0:
                        pool = pool_cache[key] = self.pools.add(_pool_markup(snap, pool_svg(snap)))
                    pool_by_id[id(snap)] = pool
                sidx = self._snap_index(snap)
            last_snap = snap or last_snap
            steps_out.append([tree, pool, sidx, step.node, self._banner(step, last_snap, functions)])
        tree_states = states.data() if states is not None else None
        out = {
            "steps": steps_out,
            "lines": self.store.lines,
            "trees": self.trees.items,
            "pools": self.pools.items,
            "nodes": self.node_recs,
            "snaps": self.snap_recs,
            "banners": self.banners,
        }
        if tree_states is not None:
            out["tree"] = tree_states
        return out

    def _timeline(self) -> tuple[str, list[float]]:
        """The timeline SVG (ids namespaced) and the x of each step as a fraction of its width."""
        if not self.steps:
            return "", []
        from cgviz.views.svg_output import figure_svg
        from cgviz.views.timeline import timeline_figure

        # wide and low: the page shows it across its whole width
        fig = timeline_figure(self.trace, figsize=TIMELINE_SIZE)
        svg = _namespace_ids(_strip_prolog(figure_svg(fig)), "tl-")
        n = len(self.steps)
        try:  # where matplotlib put each step: data x = step position
            ax = fig.axes[0]
            width = fig.bbox.width
            xs = _linear(ax, width, n)
        except Exception:
            xs = [round((i + 0.5) / n, 5) for i in range(n)]
        return svg, xs

    # -- markup -------------------------------------------------------------------------------
    def build(self) -> str:
        from cgviz.views.html_trees import EDGE_CSS

        data = self._data()
        empty = self._empty_message()
        if self.steps and empty:
            self.notices.append(empty)
        timeline, xs = self._timeline()
        data["tx"] = xs
        data["level"] = self.trace.meta.get("trace_level")
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        # safe inside <script>: no "</script>", "<!--" or "]]>" can appear
        payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        n = len(self.steps)
        return _asset("page.html").format(
            title=_e(self.title),
            css=_asset("page.css") + EDGE_CSS + self._kind_css(),
            header=self._header(),
            n_max=max(n - 1, 0),
            n=n,
            disabled="" if n else " disabled",
            notices="".join(f'<p class="notice">{_e(t)}</p>' for t in self.notices),
            timeline=timeline,
            timeline_hidden="" if timeline else " hidden",
            step_list=self._step_list(),
            empty=_e(empty),
            body_class="no-pictures" if empty else "",
            keys="← → Home End" + ("" if empty else " · click a node"),
            node_msg="Click a node in the tree to see its outputs." if n else "",
            payload=payload,
            js=_asset("page.js"),
            **_ICONS,
        )

    def _kind_css(self) -> str:
        digits = len(str(len(self.steps))) + 1  # the step numbers' column fits the largest
        return ("".join(f".k-{k}{{--k:{c}}}" for k, c in KIND_COLORS.items())
                + f"#steps .sn{{min-width:{digits}ch}}#steps .why{{padding-left:{digits}ch}}")

    def _header(self) -> str:
        meta = self.trace.meta
        keys = [k for k in _META_ORDER if k in meta] + sorted(k for k in meta if k not in _META_ORDER)
        items = []
        for k in keys:
            v = meta[k]
            text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            items.append(f'<span class="meta-item"><span class="meta-key">{_e(k)}</span> {_e(text)}</span>')
        if not items:
            items.append('<span class="meta-item"><span class="meta-key">meta</span> none recorded</span>')
        n = len(self.steps)
        calls = self.trace.calls
        count = f"{n} step{'' if n == 1 else 's'}"
        if calls != n:
            count += f" ({calls} calls, repeats counted)"
        kinds = " · ".join(f'<span class="k-{k} kc">{v} {_e(k)}</span>'
                           for k, v in self.trace.counts().items() if v)
        return (f'<h1>{_e(self.title)}</h1><div class="meta">{"".join(items)}</div>'
                f'<div class="counts">{count}{" — " + kinds if kinds else ""}</div>')

    def _step_list(self) -> str:
        rows = []
        n = len(self.steps)
        times = self.trace.repeats() if n else []
        block_end = -1
        for i, step in enumerate(self.steps):
            if i > block_end:  # find the folded block (if any) that step i belongs to
                block_end = -1
                for j in range(i, min(n, i + 64)):
                    if self.steps[j].repeat > 1:
                        block_end = j if j - self.steps[j].span < i else -1
                        break
            note = ""
            fold = f' data-fold="{times[i]}"' if times[i] > 1 else ""
            if step.repeat == 1 and block_end >= 0:
                span = self.steps[block_end].span
                note = (f'<span class="blk"> · ×{times[i]} (step {i - (block_end - span)} of a '
                        f'{span}-step block)</span>')
            rows.append(
                f'<li class="k-{_e(step.kind)}" data-kind="{_e(step.kind)}" data-i="{i}"{fold}>'
                f'<span class="sn">{i + 1}</span><span class="hl">{_e(step.headline())}</span>{note}'
                f'<span class="why">{_e(step.reason)}</span></li>'
            )
        return "".join(rows)

    def _empty_message(self) -> str:
        if not self.steps:
            return "This trace has no steps: nothing ran through the tree."
        if all(s.snapshot is None for s in self.steps):
            level = self.trace.meta.get("trace_level")
            lvl = f" (trace level {level!r})" if level else ""
            return (f"This trace keeps steps and reasons only{lvl}: no snapshots of the tree or the pool. "
                    f"Record with trace=\"full\" to see them.")
        return ""


def _icon(body: str) -> str:
    return f'<svg viewBox="0 0 16 16" width="14" height="14" fill="currentColor" aria-hidden="true">{body}</svg>'


# drawn, not typed: ⏮ and ⏭ are missing from many fonts
_ICONS = {
    "icon_first": _icon('<rect x="2" y="3" width="2.2" height="10"/><path d="M14 3v10L5 8z"/>'),
    "icon_prev": _icon('<path d="M12 3v10L3.5 8z"/>'),
    "icon_next": _icon('<path d="M4 3v10l8.5-5z"/>'),
    "icon_last": _icon('<path d="M2 3v10l9-5z"/><rect x="11.8" y="3" width="2.2" height="10"/>'),
}


@functools.lru_cache(maxsize=None)
def _asset(name: str) -> str:
    """A part of the page kept as a file of its own in cgviz/views/page/ (HTML template, CSS, script)."""
    return resources.files("cgviz.views").joinpath("page").joinpath(name).read_text(encoding="utf-8")
