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
changed in view. The timeline is drawn once; a marker moves along it.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from typing import TYPE_CHECKING, Any, Optional

from cgviz.trace.diff import format_bytes
from cgviz.trace.io import write_atomic
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
    beside `path`, renamed over it.
    """
    if renderer not in ("auto", "graphviz", "builtin"):
        raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")
    page = _Page(trace, title, renderer).build()
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
        return _TEMPLATE.format(
            title=_e(self.title),
            css=_CSS + EDGE_CSS + self._kind_css(),
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
            js=_JS,
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

_CSS = """
:root{--fg:#1f2933;--muted:#52606d;--line:#d9dee4;--bg:#f6f7f9;--panel:#fff;--accent:#e8590c}
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:10px 16px 8px;background:var(--panel);border-bottom:1px solid var(--line)}
h1{font-size:18px;margin:0 0 4px}
.meta{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12.5px}
.meta-key{color:var(--muted)}
.counts{font-size:12.5px;color:var(--muted);margin-top:2px}
.kc{color:var(--k);font-weight:600}
.notice{margin:8px 16px 0;padding:6px 12px;font-size:13px;color:#323f4b;background:#eef2f6;border:1px solid var(--line);border-radius:6px}
#controls{position:sticky;top:0;z-index:5;display:flex;align-items:center;gap:6px;padding:8px 16px;background:var(--panel);border-bottom:1px solid var(--line)}
#controls button{display:inline-flex;align-items:center;justify-content:center;min-width:36px;height:30px;border:1px solid #b8c2cc;background:#fff;color:#323f4b;border-radius:5px;cursor:pointer}
#controls button:hover:not(:disabled){background:#eef2f6}
#controls button:disabled{opacity:.4;cursor:default}
#slider{flex:1;min-width:120px}
#pos{min-width:110px;text-align:right;font-variant-numeric:tabular-nums;color:var(--muted)}
#keys{font-size:11.5px;color:var(--muted)}
#timeline-box{position:relative;margin:8px 16px 0;background:#fff;border:1px solid var(--line);border-radius:6px;padding:4px;cursor:pointer}
#timeline-box svg{display:block;width:100%;height:auto}
#timeline-inner{position:relative}
#marker{position:absolute;top:0;bottom:0;width:0;border-left:2px solid var(--accent);pointer-events:none;transition:left .08s}
#marker::before{content:"";position:absolute;top:-1px;left:-6px;border:5px solid transparent;border-top:7px solid var(--accent)}
#now{margin:8px 16px 0;padding:10px 14px;background:#fff;border:1px solid var(--line);border-left:6px solid var(--k,#888);border-radius:6px}
#headline{font-size:17px;font-weight:600}
#headline .kind{color:var(--k)}
#reason{margin-top:3px;color:#323f4b}
#banner{margin:8px 16px 0;padding:8px 14px;background:#fff4e6;border:1px solid #f0b37e;border-radius:6px;color:#7c2d12}
#banner ul{margin:4px 0 0;padding-left:20px}
#main{display:grid;grid-template-columns:minmax(220px,280px) minmax(0,1fr) minmax(300px,380px);grid-template-areas:"steps tree node" "steps pool pool";grid-template-rows:auto 1fr;gap:10px;padding:10px 16px 16px;align-items:start}
#steps-panel{grid-area:steps;position:sticky;top:56px}
#tree-panel{grid-area:tree}
#node-panel{grid-area:node}
#pool-panel{grid-area:pool}
.panel{background:#fff;border:1px solid var(--line);border-radius:6px;min-width:0}
.panel h2{font-size:13px;margin:0;padding:6px 10px;border-bottom:1px solid var(--line);color:var(--muted);font-weight:600;display:flex;justify-content:space-between;gap:8px}
.panel h2 .sub{font-weight:400}
#steps{list-style:none;margin:0;padding:0;max-height:calc(100vh - 100px);min-height:200px;overflow:auto}
#steps li{padding:4px 8px 4px 6px;border-left:4px solid var(--k);border-bottom:1px solid #eef0f3;cursor:pointer;font-size:12.5px}
#steps li:hover{background:#f3f6f9}
#steps li.cur{background:#fff1e6;box-shadow:inset 0 0 0 1px #f5b07a}
#steps .sn{display:inline-block;color:var(--muted);font-variant-numeric:tabular-nums}
#steps .why{display:block;color:var(--muted);font-size:11.5px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#steps li.cur .why{white-space:normal}
#tree-box{overflow:auto;max-height:calc(100vh - 120px);min-height:160px;padding:6px}
#tree-box svg{display:block;margin:0 auto;max-width:none}
#tree-box.fit svg{max-width:100%;height:auto}
#tree-box [id^="node-"]{cursor:pointer}
#tree-box g.cg-sel>rect,#tree-box g.cg-sel>path,#tree-box g.cg-sel>polygon{stroke:var(--accent)!important;stroke-width:4px!important}
#tree-box g.cg-sel{filter:drop-shadow(0 0 3px rgba(232,89,12,.7))}
.msg{padding:18px;color:var(--muted);font-style:italic}
#snapinfo{font-size:12px;color:var(--muted);padding:4px 10px;border-bottom:1px solid var(--line)}
#snapinfo:empty{display:none}
body.no-pictures #main{grid-template-columns:minmax(0,1fr);grid-template-areas:"steps"}
body.no-pictures #tree-panel,body.no-pictures #node-panel,body.no-pictures #pool-panel{display:none}
body.no-pictures #steps-panel{position:static}
#now.k-error #reason{color:#9b1c1c}
#node{padding:8px 10px;font-size:12.5px}
#node .title{font-size:15px;font-weight:600}
#node .facts{color:var(--muted);margin:2px 0 6px}
#node .how{font-size:11.5px;color:var(--muted);margin-bottom:4px}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:12px}
th,td{text-align:left;padding:3px 5px;border-bottom:1px solid #eef0f3;white-space:nowrap}
th{color:var(--muted);font-weight:600}
td.addr{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px}
.st-live{color:#2f855a;font-weight:600}.st-dead{color:#616e7c}.st-invalid{color:#c62828;font-weight:600}
#pool-box{padding:4px}
#pool-box svg{display:block;width:100%;height:auto}
#pool-box.hl g[data-node]{opacity:.3}
#pool-box.hl g[data-node].on{opacity:1}
#pool-box.hl g.on path{stroke:#111!important;stroke-width:1.8px!important}
#steps .blk{color:var(--muted)}
label.fit{font-weight:400;cursor:pointer}
@media (max-width:1100px){#main{grid-template-columns:1fr;grid-template-areas:"tree" "node" "pool" "steps"}#steps-panel{position:static}#steps{max-height:60vh}}
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="cgviz">
<title>{title}</title>
<style>{css}</style>
</head>
<body class="{body_class}">
<header>{header}</header>
{notices}
<div id="controls">
<button id="first" title="first step (Home)" aria-label="⏮ first step"{disabled}>{icon_first}</button>
<button id="prev" title="previous step (←)" aria-label="◀ previous step"{disabled}>{icon_prev}</button>
<button id="next" title="next step (→)" aria-label="▶ next step"{disabled}>{icon_next}</button>
<button id="last" title="last step (End)" aria-label="⏭ last step"{disabled}>{icon_last}</button>
<input id="slider" type="range" min="0" max="{n_max}" value="0" aria-label="step"{disabled}>
<span id="pos">{n} steps</span>
<span id="keys">{keys}</span>
</div>
<div id="timeline-box" title="click to go to a step"{timeline_hidden}><div id="timeline-inner">{timeline}<div id="marker"></div></div></div>
<div id="now"><div id="headline">{empty}</div><div id="reason"></div></div>
<div id="banner" hidden></div>
<div id="main">
<section class="panel" id="steps-panel"><h2>Steps <span class="sub">{n}</span></h2><ol id="steps">{step_list}</ol></section>
<section class="panel" id="tree-panel"><h2>Tree after this step <label class="fit" title="shrink the tree to the panel's width"><input type="checkbox" id="fit"> fit to width</label></h2><div id="snapinfo"></div><div id="tree-box"><p class="msg">{empty}</p></div></section>
<section class="panel" id="node-panel"><h2>Node outputs</h2><div id="node"><p class="msg">{node_msg}</p></div></section>
<section class="panel" id="pool-panel"><h2>Memory pool <span class="sub">blocks of the node shown on the right stand out</span></h2><div id="pool-box"></div></section>
</div>
<noscript><p class="msg">JavaScript is off: the steps and their reasons are listed above; the tree, pool and outputs need JavaScript.</p></noscript>
<script type="application/json" id="cgviz-data">{payload}</script>
<script>{js}</script>
</body>
</html>
"""

_JS = r"""
(function () {
"use strict";
var D = JSON.parse(document.getElementById("cgviz-data").textContent);
var S = D.steps, N = S.length;
function $(id) { return document.getElementById(id); }
var rows = $("steps").children, slider = $("slider");
var cur = -1, sel = null, shownTree = -2, shownPool = -2, shownNode = null, snapNodes = {};

function lineIndex(r) { var out = []; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) out.push(j); return out; }
var shownLines = null, WHOLE = /^(<g id="((?:node|edge)-[0-9-]+)".*<\/g>)(?:<\/svg>)?$/;
function setTree(t) {
  // a tree that differs from the one shown only in whole node or edge groups: swap just those
  // (a big tree's layout is what costs; the browser then lays out only what changed)
  var box = $("tree-box"), svg = box.querySelector("svg"), next = lineIndex(D.trees[t]), swaps = [], gone = [];
  if (svg && shownLines && shownLines.length === next.length) {
    for (var p = 0; p < next.length; p++) {
      if (next[p] === shownLines[p]) continue;
      var a = WHOLE.exec(D.lines[shownLines[p]]), b = WHOLE.exec(D.lines[next[p]]);
      if (!a || !b || swaps.length > next.length / 2) { swaps = null; break; }
      gone.push(a[2]); swaps.push(b);
    }
    // the same groups, redrawn (edges may change places: those on the path are drawn last)
    if (swaps && gone.sort().join() !== swaps.map(function (m) { return m[2]; }).sort().join()) swaps = null;
  } else swaps = null;
  if (swaps) {
    var tmp = document.createElementNS(svg.namespaceURI, "g");
    tmp.innerHTML = swaps.map(function (m) { return m[1]; }).join("");
    while (tmp.firstElementChild) {
      var g = tmp.firstElementChild, old = document.getElementById(g.id);
      if (old) old.parentNode.replaceChild(g, old); else tmp.removeChild(g);
    }
  } else if (svg) {
    var fresh = document.createElement("div");
    fresh.innerHTML = next.map(function (j) { return D.lines[j]; }).join("\n");
    morph(svg, fresh.firstElementChild);
  } else box.innerHTML = next.map(function (j) { return D.lines[j]; }).join("\n");
  shownLines = next;
}
function morph(a, b) {
  // make the shown element a look like b, replacing only the subtrees that differ
  if (a.isEqualNode(b)) return;
  var ka = a.childNodes, kb = b.childNodes, same = a.nodeName === b.nodeName && ka.length === kb.length &&
    a.attributes && b.attributes && a.attributes.length === b.attributes.length;
  for (var i = 0; same && i < a.attributes.length; i++) same = a.attributes[i].value === b.getAttribute(a.attributes[i].name);
  if (!same || !ka.length) { a.parentNode.replaceChild(b, a); return; }
  var xs = Array.prototype.slice.call(ka), ys = Array.prototype.slice.call(kb);
  for (i = 0; i < xs.length; i++) morph(xs[i], ys[i]);
}
var T = D.tree, tState = null, tAt = -1, shownStruct = -1, shownState = {}, hot = [], geo = {}, must = {};
function stateAt(i) {
  // node id -> [look, replays] after step i: on from the state last computed when that is at most
  // a keyframe's distance before i, else from the keyframe before i (a jump costs at most that)
  if (!tState || tAt > i || i - tAt > T.every) {
    var k = i - i % T.every, f = T.keys[k]; tState = {}; tAt = k;
    for (var j = 0; j < f.length; j += 3) tState[f[j]] = [f[j + 1], f[j + 2]];
  }
  for (var s = tAt + 1; s <= i; s++) {
    var d = T.delta[s];
    for (j = 0; j < d.length; j += 3) { if (d[j + 1] < 0) delete tState[d[j]]; else tState[d[j]] = [d[j + 1], d[j + 2]]; }
  }
  tAt = i; return tState;
}
function copyOf(m) { var o = {}; for (var k in m) o[k] = m[k]; return o; }
function replays(n) { return n + (n === 1 ? " replay" : " replays"); }
function paintNode(g, v, was) {
  // a new replay count alone rewrites one text; a new look redraws the box
  var L = T.looks[v[0]];
  if (was[0] === v[0]) { g.getElementsByTagName("text")[L[3]].textContent = L[4].replace("\ue000", replays(v[1])); return; }
  g.setAttribute("class", L[0] + (sel != null && g.id === "node-" + sel ? " cg-sel" : "")); g.setAttribute("fill", L[1]);
  g.innerHTML = L[2].replace("\ue000", replays(v[1])).split("\ue001").join(g.dataset.w).split("\ue002").join(g.dataset.cx);
}
function setTreeState(i, st) {
  // the structure's drawing once; then the step's state, painted where it shows (paintNodes)
  if (st[0] !== shownStruct) {
    var s = T.structs[st[0]], gs;
    $("tree-box").innerHTML = unrun(D.trees[s[0]]); shownStruct = st[0]; hot = []; geo = {};
    shownState = copyOf(stateAt(s[1]));
    gs = $("tree-box").querySelectorAll('g[id^="node-"]');
    for (var k = 0; k < gs.length; k++) {
      var m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(gs[k].getAttribute("transform"));
      geo[gs[k].id.slice(5)] = [+m[1], +m[2], +gs[k].dataset.w];
    }
  }
  stateAt(i);
  // the nodes this step names, and those the step before named, are painted wherever they are
  var now = {}, sn = D.snaps[st[2]];
  [st[3], sn.cur, sel].forEach(function (id) { if (id != null) now[id] = 1; });
  var both = copyOf(must); for (var id in now) both[id] = 1;
  must = now; markPath(sn.path);
  return both;
}
function paintNodes(also) {
  // repaint the nodes whose look or replay count differ from the step's: those in view or near it
  // (half a box around), and `also`; the others when scrolled to (a jump then costs what shows)
  if (!T || shownStruct < 0) return;
  var box = $("tree-box"), svg = box.querySelector("svg"), b = box.getBoundingClientRect(), r = svg.getBoundingClientRect();
  var f = naturalWidth(svg) / r.width || 1, x0 = (b.left - b.width / 2 - r.left) * f, x1 = (b.right + b.width / 2 - r.left) * f;
  var y0 = (b.top - b.height / 2 - r.top) * f - 400, y1 = (b.bottom + b.height / 2 - r.top) * f;
  for (var id in tState) {
    var a = shownState[id], v = tState[id], p = geo[id];
    if (a[0] === v[0] && a[1] === v[1]) continue;
    if (!(also && also[id]) && (p[0] > x1 || p[0] + p[2] < x0 || p[1] > y1 || p[1] < y0)) continue;
    paintNode(document.getElementById("node-" + id), v, a); shownState[id] = v;
  }
}
function markPath(path) {
  // the edges of the current path take their path stroke, drawn last (over their siblings' elbows)
  for (var j = 0; j < hot.length; j++) hot[j].classList.remove("on-path");
  hot = [];
  for (j = 0; j + 1 < path.length; j++) {
    var e = document.getElementById("edge-" + path[j] + "-" + path[j + 1]);
    if (e) { e.classList.add("on-path"); e.parentNode.appendChild(e); hot.push(e); }
  }
}
var poolShown = null, TEXT_LINE = /^\s*(<text\b[^>]*>)([^<]*)<\/text>\s*$/;
function setPool(t) {
  var box = $("pool-box"), tmp = document.createElement("div"), old = box.firstElementChild, next = poolLines(t);
  var svg = old && old.tagName.toLowerCase() === "svg";
  if (!(svg && poolShown && patchTexts(old, poolShown, next))) {
    tmp.innerHTML = next.map(function (j) { return D.lines[j]; }).join("\n");
    if (svg) morph(old, tmp.firstElementChild);
    else { box.textContent = ""; box.appendChild(tmp.firstElementChild); }
  }
  poolShown = next;
}
var poolMemo = {}, poolMemoSize = 0;
function poolLines(t) {
  // a pool's line indices: from its runs, or from the pool before it and a diff (see _Kind)
  var r = D.pools[t];
  if (Array.isArray(r)) return lineIndex(r);
  if (poolMemo[t]) return poolMemo[t];
  var base = poolLines(r.b), o = r.o, out = [];
  for (var k = 0; k < o.length; k++) {
    if (o[k] < 0) out.push(-1 - o[k]);
    else { for (var j = o[k]; j < o[k] + o[k + 1]; j++) out.push(base[j]); k++; }
  }
  if (++poolMemoSize > 64) { poolMemo = {}; poolMemoSize = 0; }
  return (poolMemo[t] = out);
}
function patchTexts(svg, a, b) {
  // pools that differ only in a few texts (the totals in the title, in a replay loop): rewrite
  // those texts rather than parse and compare the whole drawing
  if (a.length !== b.length) return false;
  var edits = [], n = 0, tmp = document.createElement("div");
  for (var p = 0; p < b.length; p++) {
    var line = D.lines[a[p]];
    if (a[p] !== b[p]) {
      var x = TEXT_LINE.exec(line), y = TEXT_LINE.exec(D.lines[b[p]]);
      if (!x || !y || x[1] !== y[1] || edits.length > 8) return false;
      edits.push([n, y[2]]);
    }
    if (line.indexOf("<text") >= 0) n += line.split(/<text\b/).length - 1;
  }
  var texts = svg.getElementsByTagName("text");
  for (p = 0; p < edits.length; p++) { tmp.innerHTML = edits[p][1]; texts[edits[p][0]].textContent = tmp.textContent; }
  return true;
}
function unrun(r) { var out = []; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) out.push(D.lines[j]); return out.join("\n"); }
function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
function msg(box, text) { box.textContent = ""; box.appendChild(el("p", "msg", text)); }
function nodesOf(si) {
  if (!snapNodes[si]) { var m = {}, r = D.snaps[si].n; for (var i = 0; i < r.length; i += 2) for (var j = r[i]; j < r[i] + r[i + 1]; j++) m[D.nodes[j][0]] = D.nodes[j]; snapNodes[si] = m; }
  return snapNodes[si];
}
function poolMark(id) {
  var box = $("pool-box"), on = box.querySelectorAll(".on");
  for (var i = 0; i < on.length; i++) on[i].classList.remove("on");
  var mine = id == null ? [] : box.querySelectorAll('[data-node="' + id + '"]');
  for (i = 0; i < mine.length; i++) mine[i].classList.add("on");
  box.classList.toggle("hl", mine.length > 0);
}
function nodeTable(st) {
  shownNode = null; nodeTableInner(st); return shownNode;
}
function nodeTableInner(st) {
  var box = $("node"), si = st[2];
  if (si < 0) { msg(box, "No snapshot for this step."); return; }
  var snap = D.snaps[si], nodes = nodesOf(si), id = sel, how = "selected · click it again to follow the steps";
  if (id == null || !nodes[id]) {
    if (id != null) how = "node " + id + " does not exist at this step; showing ";
    else how = "";
    id = st[3] != null && nodes[st[3]] ? st[3] : snap.cur;
    how += id == null ? "" : (id === st[3] ? "the node of this step" : "the current node") + " · click a node to pin it";
  }
  if (id == null || !nodes[id]) { msg(box, Object.keys(nodes).length ? "Click a node in the tree to see its outputs." : "No nodes yet."); return; }
  var n = nodes[id]; box.textContent = ""; shownNode = id;
  box.appendChild(el("div", "how", how));
  box.appendChild(el("div", "title", n[1] + " · node " + n[0]));
  var facts = [n[2] === "graph" ? "recorded graph" : "warmup run", "generation " + n[5], n[6] + (n[6] === 1 ? " replay" : " replays"),
    n[3] == null ? "a root" : "parent " + n[3], n[4].length ? "children " + n[4].join(", ") : "no children"];
  if (snap.cur === n[0]) facts.push("current node"); else if (snap.path.indexOf(n[0]) >= 0) facts.push("on the current path");
  box.appendChild(el("div", "facts", facts.join(" · ")));
  if (n[7]) box.appendChild(el("div", "facts", "inputs: " + n[7]));
  if (!n[8].length) { box.appendChild(el("p", "msg", "No outputs.")); return; }
  var t = el("table"), h = el("tr"), alias = n[8].some(function (o) { return o[6]; });
  ["#", "state", "shape", "dtype", "size", "address"].concat(alias ? ["alias of"] : []).forEach(function (c) { h.appendChild(el("th", null, c)); });
  t.appendChild(h);
  n[8].forEach(function (o) {
    var tr = el("tr");
    tr.appendChild(el("td", null, o[0])); tr.appendChild(el("td", "st-" + o[1], ({live: "● ", dead: "○ ", invalid: "✕ "}[o[1]] || "") + o[1]));
    tr.appendChild(el("td", null, o[2])); tr.appendChild(el("td", null, o[3])); tr.appendChild(el("td", null, o[4]));
    tr.appendChild(el("td", "addr", o[5])); if (alias) tr.appendChild(el("td", null, o[6]));
    t.appendChild(tr);
  });
  var wrap = el("div", "table-wrap"); wrap.appendChild(t); box.appendChild(wrap);
}
function markSelected() {
  var old = $("tree-box").querySelectorAll(".cg-sel");
  for (var i = 0; i < old.length; i++) old[i].classList.remove("cg-sel");
  if (sel != null) { var g = $("tree-box").querySelector('[id="node-' + sel + '"]'); if (g) g.classList.add("cg-sel"); }
}
var boxW = 0;
function measure() { boxW = $("tree-box").clientWidth - 12; }
function naturalWidth(svg) { var w = svg.getAttribute("width") || "", v = parseFloat(w); return /pt$/.test(w) ? v * 4 / 3 : v; }
function placeTree(also) {
  // shrink a tree a little too wide for the panel; otherwise keep its size and scroll to the node of interest
  // (a tree drawn once per structure reads where the panel shows it, to paint only the nodes in view)
  var box = $("tree-box"), svg = box.querySelector("svg"); if (!svg) return;
  var nat = naturalWidth(svg), fit = $("fit").checked || (nat > boxW && boxW / nat >= 0.6);
  box.classList.toggle("fit", fit);
  paintNodes(also);
  if (!fit && nat > boxW) requestAnimationFrame(scrollToNode);
}
function scrollToNode() {
  var box = $("tree-box"), g = box.querySelector(".cg-sel") || box.querySelector(".state-active") || box.querySelector(".state-current");
  if (!g) return;
  var b = box.getBoundingClientRect(), r = g.getBoundingClientRect();
  if (r.left < b.left || r.right > b.right) box.scrollLeft += (r.left + r.right) / 2 - (b.left + b.right) / 2;
  if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += (r.top + r.bottom) / 2 - (b.top + b.bottom) / 2;
}
function show(i, keepHash) {
  if (!N) return;
  i = Math.max(0, Math.min(N - 1, i | 0));
  var st = S[i], row = rows[i];
  if (cur >= 0) rows[cur].classList.remove("cur");
  cur = i; row.classList.add("cur");
  var lst = $("steps"); if (row.offsetTop < lst.scrollTop || row.offsetTop + row.offsetHeight > lst.scrollTop + lst.clientHeight) lst.scrollTop = row.offsetTop - lst.clientHeight / 3;
  $("now").className = "k-" + row.dataset.kind; var hl = $("headline"); hl.textContent = "";
  hl.appendChild(el("span", null, "step " + (i + 1) + "/" + N + " · "));
  var blk = row.querySelector(".blk"), text = row.querySelector(".hl").textContent + (blk ? blk.textContent : ""), sp = text.indexOf(" ");
  hl.appendChild(el("span", "kind", sp < 0 ? text : text.slice(0, sp)));
  if (sp >= 0) hl.appendChild(el("span", null, text.slice(sp)));
  $("reason").textContent = row.querySelector(".why").textContent;
  var b = $("banner");
  if (st[4] >= 0) { var bn = D.banners[st[4]]; b.textContent = ""; b.appendChild(el("div", null, bn.head)); if (bn.items.length) { var ul = el("ul"); bn.items.forEach(function (t) { ul.appendChild(el("li", null, t)); }); b.appendChild(ul); } b.hidden = false; }
  else b.hidden = true;
  if (st[0] < 0) {
    if (shownTree !== -1) { shownTree = shownStruct = -1; shownLines = null; msg($("tree-box"), $("tree-box").dataset.empty || "No snapshot was recorded for this step."); }
  } else if (T) { shownTree = -2; var also = setTreeState(i, st); }
  else if (st[0] !== shownTree) { shownTree = st[0]; setTree(st[0]); }
  markSelected(); placeTree(also);
  if (st[1] !== shownPool) { shownPool = st[1]; if (st[1] >= 0) setPool(st[1]); else { poolShown = null; msg($("pool-box"), "No snapshot of the pool for this step."); } }
  if (st[2] >= 0) {
    var sn = D.snaps[st[2]], word = {warmup: "warming up", recording: "recording", execution: "replaying"}[sn.state] || sn.state;
    $("snapinfo").textContent = "generation " + sn.gen + " · " + (sn.path.length ? word + " path " + (sn.path.length > 12 ? sn.path.slice(0, 3).join(" → ") + " → … → " + sn.path.slice(-3).join(" → ") + " (" + sn.path.length + " nodes)" : sn.path.join(" → ")) + (sn.cur == null ? "" : " · current node " + sn.cur) : "no current path: the next call starts from the roots") +
      (row.dataset.fold ? " · as after the last of its ×" + row.dataset.fold + " repeats" : "");
  }
  else $("snapinfo").textContent = "";
  poolMark(nodeTable(st));
  slider.value = i; $("pos").textContent = "step " + (i + 1) + " / " + N;
  $("first").disabled = $("prev").disabled = i === 0; $("last").disabled = $("next").disabled = i === N - 1;
  if (D.tx.length) $("marker").style.left = (D.tx[i] * 100) + "%";
  if (!keepHash) { try { history.replaceState(null, "", "#step=" + (i + 1) + (sel != null ? "&node=" + sel : "")); } catch (e) {} }
}
function fromHash() {
  var m = /step=(\d+)/.exec(location.hash), k = /node=(\d+)/.exec(location.hash);
  sel = k ? +k[1] : null;
  show(m ? +m[1] - 1 : (cur < 0 ? 0 : cur), true);
}
if (!N) return;
var emptyMsg = $("headline").textContent; if (emptyMsg) $("tree-box").dataset.empty = emptyMsg;
$("first").onclick = function () { show(0); };
$("prev").onclick = function () { show(cur - 1); };
$("next").onclick = function () { show(cur + 1); };
$("last").onclick = function () { show(N - 1); };
slider.oninput = function () { show(+slider.value); };
$("steps").onclick = function (e) { var li = e.target.closest("li"); if (li) show(+li.dataset.i); };
$("fit").onchange = function () { placeTree(); };
$("tree-box").addEventListener("scroll", function () { paintNodes(); });
window.addEventListener("resize", function () { measure(); placeTree(); });
measure();
$("tree-box").onclick = function (e) {
  var g = e.target.closest('[id^="node-"]'); if (!g) return;
  var id = +g.id.slice(5); sel = sel === id ? null : id; show(cur);
};
$("timeline-box").onclick = function (e) {
  var r = $("timeline-inner").getBoundingClientRect(), f = (e.clientX - r.left) / r.width, best = 0;
  for (var i = 1; i < D.tx.length; i++) if (Math.abs(D.tx[i] - f) < Math.abs(D.tx[best] - f)) best = i;
  show(best);
};
document.addEventListener("keydown", function (e) {
  if (e.altKey || e.ctrlKey || e.metaKey || (e.target.tagName === "INPUT" && e.target.type !== "checkbox")) return;
  var to = {ArrowLeft: cur - 1, ArrowRight: cur + 1, Home: 0, End: N - 1}[e.key];
  if (to != null) { e.preventDefault(); show(to); }
});
window.addEventListener("hashchange", fromHash);
fromHash();
})();
"""
