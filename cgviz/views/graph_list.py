"""The list of a trace's CUDA graphs (`Trace.graphs`), as people look for them: by the code that
captured them (one line of code captured at several batch sizes is one family: each size with its
replays and padding, the sizes never replayed marked), by the memory pool they captured into (a
shared pool said so), and the graphs that are a node of an observed tree.

    html = graph_list_html(trace, current=3)   # the page's and the still picture's section
    lines = graph_list_lines(trace)            # the same, as plain text lines

The groups come from `cgviz.trace.graph_groups`, the words from `views/text.py`. The HTML is a
fragment with no script: text escaped (control characters written as escapes, `shown`), each
graph's entries carrying ``data-graphs`` (the ids of the graphs they stand for, space-separated:
``[data-graphs~="3"]`` finds graph 3's), styled by the page's classes (``cg-gl-*``) or, with
`inline`, by a few style attributes of its own.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from cgviz.trace.graph_groups import Family, PoolGroup, families, own_graphs, pools
from cgviz.views.style import TREE_STYLE
from cgviz.views.text import (
    GRAPHS_BY_POOL, GRAPHS_BY_SITE, GRAPHS_OF_TREES, GRAPHS_TITLE, family_facts, graphs_summary, pool_facts,
    shown, size_facts, size_label, tree_graph_line, wrap,
)

if TYPE_CHECKING:
    from cgviz.trace.model import GraphView, Trace

__all__ = ["SizeRow", "size_rows", "graph_list_html", "graph_list_lines"]

#: The class the entries of the graph shown now get (the page moves it as the steps go).
CURRENT_CLASS = "cg-gl-cur"

# the still picture has no style sheet: these few attributes stand in for the page's classes
# (no colours but the selection's, so that it reads in light and dark notebooks alike)
_INLINE = {
    "cg-gl": "font-size:13px;margin:10px 0",
    "cg-gl-head": "font-weight:600;margin:0 0 4px",
    "cg-gl-h": "font-size:13px;margin:8px 0 2px",
    "cg-gl-site": "font-family:monospace;font-size:12px;overflow-wrap:anywhere",
    "cg-gl-facts": "opacity:.8",
    "cg-gl-sizes": "margin:2px 0 6px;padding-left:18px",
    "cg-gl-never": "font-style:italic",
    "cg-gl-chips": "list-style:none;margin:2px 0 6px;padding:0",
    "cg-gl-chip": f"display:inline-block;margin:0 4px 3px 0;padding:0 4px;border:1px solid {TREE_STYLE['edge']};"
                  "border-radius:3px",
    CURRENT_CLASS: f"outline:2px solid {TREE_STYLE['selected_border']}",
}


@dataclass
class SizeRow:
    """The graphs of a family captured for one batch size (or one graph, where no size was said)."""

    batch: Optional[int]
    graphs: list["GraphView"]

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)

    @property
    def never(self) -> int:
        """How many of its graphs were never replayed."""
        return sum(1 for g in self.graphs if not g.replays)

    @property
    def padding(self) -> Optional[float]:
        """The share of its replayed rows that were padding; None where the caller never said."""
        padded = sum(g.padded for g in self.graphs)
        return None if not padded else 1 - sum(g.used for g in self.graphs) / padded

    @property
    def replay_us(self) -> Optional[float]:
        """The median of its graphs' median replay times, where replays were timed."""
        timed = [g.replay_us for g in self.graphs if g.replay_us is not None]
        return statistics.median(timed) if timed else None

    @property
    def label(self) -> str:
        return size_label(self.batch, self.graphs[0].name)

    @property
    def facts(self) -> str:
        return size_facts(len(self.graphs), self.replays, self.never, self.padding, self.replay_us)


def size_rows(family: Family) -> list[SizeRow]:
    """A family's graphs by batch size, smallest first; graphs of no size said after, one row each."""
    by_size: dict[int, list["GraphView"]] = {}
    unsized = []
    for g in family.graphs:
        if g.batch is None:
            unsized.append(SizeRow(None, [g]))
        else:
            by_size.setdefault(g.batch, []).append(g)
    return [SizeRow(b, by_size[b]) for b in sorted(by_size)] + unsized


def _facts(family: Family) -> str:
    return family_facts(len(family.graphs), len(family.sizes), family.replays, family.padding, family.memory)


def _pool_facts(pool: PoolGroup) -> str:
    growth = pool.growth
    return pool_facts(pool.pool, len(pool.graphs), pool.memory, growth[-1] if growth else None)


def _tree_graphs(trace: "Trace") -> list["GraphView"]:
    """The graphs that are a node of an observed tree (shown as that node)."""
    return [g for g in trace.graphs if g.node is not None]


def _summary(trace: "Trace") -> str:
    """The graphs outside the trees, their replays and pools; and how many are a tree's node."""
    own = own_graphs(trace)
    return graphs_summary(len(own), sum(g.replays for g in own), len({g.pool for g in own}), len(_tree_graphs(trace)))


# -- HTML --------------------------------------------------------------------------------------------
def _esc(text: str) -> str:
    """Text from the trace as HTML shows it: one visible line, nothing taken for markup."""
    return html.escape(shown(text))


class _Html:
    """Writes tags with the page's classes, or with their inline stand-ins."""

    def __init__(self, inline: bool, current: Optional[int]) -> None:
        self.inline, self.current = inline, current

    def tag(self, name: str, classes: str, body: str, graphs: Optional[list["GraphView"]] = None) -> str:
        """`<name class=...>body</name>`; `graphs`: the graphs it stands for (data-graphs), marked
        as current when the graph shown now is among them. `body` is HTML already."""
        ids = [g.id for g in graphs or []]
        if self.current is not None and self.current in ids:
            classes += f" {CURRENT_CLASS}"
        attrs = f' class="{classes}"'
        if ids:
            attrs += f' data-graphs="{" ".join(map(str, ids))}"'
        style = ";".join(_INLINE[c] for c in classes.split() if c in _INLINE) if self.inline else ""
        if style:
            attrs += f' style="{style}"'
        return f"<{name}{attrs}>{body}</{name}>"


def graph_list_html(trace: "Trace", current: Optional[int] = None, *, inline: bool = False) -> str:
    """The graphs of `trace` as an HTML fragment ('' when it has none); the entries of graph
    `current` (an id) marked with `CURRENT_CLASS`. `inline`: styled by attributes of its own (for
    a still picture, which has no style sheet) rather than by the page's classes."""
    if not trace.graphs:
        return ""
    h = _Html(inline, current)
    summary = h.tag("span", "cg-gl-facts", _esc(_summary(trace)))
    parts = [h.tag("div", "cg-gl-head", f"{_esc(GRAPHS_TITLE)} {summary}")]
    fams = families(trace)
    if fams:
        parts.append(h.tag("h3", "cg-gl-h", _esc(GRAPHS_BY_SITE)))
        parts += [_family_html(h, f) for f in fams]
    groups = pools(trace)
    if groups:
        parts.append(h.tag("h3", "cg-gl-h", _esc(GRAPHS_BY_POOL)))
        parts += [_pool_html(h, p) for p in groups]
    linked = _tree_graphs(trace)
    if linked:
        parts.append(h.tag("h3", "cg-gl-h", _esc(GRAPHS_OF_TREES)))
        items = [h.tag("li", "cg-gl-node", _esc(tree_graph_line(g.name, g.node, g.replays)), [g]) for g in linked]
        parts.append(h.tag("ul", "cg-gl-sizes", "".join(items)))
    return h.tag("div", "cg-gl", "".join(parts))


def _family_html(h: _Html, family: Family) -> str:
    """A family: its code line, its facts, and a row per batch size."""
    rows = [h.tag("li", "cg-gl-size" + (" cg-gl-never" if r.never == len(r.graphs) else ""),
                  f"<b>{_esc(r.label)}</b> {_esc(r.facts)}", r.graphs) for r in size_rows(family)]
    return h.tag("div", "cg-gl-fam", h.tag("div", "cg-gl-site", _esc(family.site))
                 + h.tag("div", "cg-gl-facts", _esc(_facts(family))) + h.tag("ul", "cg-gl-sizes", "".join(rows)))


def _pool_html(h: _Html, pool: PoolGroup) -> str:
    """A pool: its facts, and its graphs as chips."""
    chips = [h.tag("li", "cg-gl-chip", _esc(g.name), [g]) for g in pool.graphs]
    return h.tag("div", "cg-gl-pool",
                 h.tag("div", "cg-gl-facts", _esc(_pool_facts(pool))) + h.tag("ul", "cg-gl-chips", "".join(chips)))


# -- plain text --------------------------------------------------------------------------------------
def graph_list_lines(trace: "Trace") -> list[str]:
    """The graphs of `trace` as plain text lines, wrapped to 80 columns (none when it has none)."""
    if not trace.graphs:
        return []
    lines = [f"{GRAPHS_TITLE}: {_summary(trace)}"]
    fams = families(trace)
    if fams:
        lines.append(f"  {GRAPHS_BY_SITE.lower()}:")
        for f in fams:
            lines += [f"    {f.site}", f"      {_facts(f)}"]
            lines += [f"      {r.label}: {r.facts}" for r in size_rows(f)]
    groups = pools(trace)
    if groups:
        lines.append(f"  {GRAPHS_BY_POOL.lower()}:")
        lines += [f"    {_pool_facts(p)}: {', '.join(g.name for g in p.graphs)}" for p in groups]
    linked = _tree_graphs(trace)
    if linked:
        lines.append(f"  {GRAPHS_OF_TREES.lower()}:")
        lines += [f"    {tree_graph_line(g.name, g.node, g.replays)}" for g in linked]
    return [w for line in lines for w in wrap(shown(line))]
