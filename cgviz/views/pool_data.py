"""The pool view as data the explorer's front end lays out (views/page/explorer.js).

Drawing every distinct pool of a trace with matplotlib cost most of an export (a recording
phase adds a block per step, so every step is a new picture). The page draws the pool itself
instead, from these records, each kept once:

- ``segs``: a segment, ``[label, blocks]``; `blocks` is flat, six numbers a block:
  ``x, width`` (ten-thousandths of the bar, as `pool.segment_blocks` places them), the
  style (an index into ``pstyles``), the node (-1: none), the tooltip and the candidate
  labels (indices into ``ptexts``; the labels tab-separated, longest first).
- ``pstyles``: ``[category, colour, text colour]``; the category names the hatching
  (input, unowned).
- ``legends``: ``[[style, text, node], ...]`` (node -1 for the kinds of block).
- ``pools``: ``[title, subtitle, [segment indices, top to bottom], legend, widened]``.

Words, colours and geometry all come from `cgviz.views.pool`, so the page shows what
`pool_svg` draws.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from cgviz.views.text import format_bytes
from cgviz.views.style import node_color, text_color_on
from cgviz.views.pool import (
    WIDENED_NOTE, block_labels, legend_entries, pool_subtitle, pool_title_of, segment_blocks, segment_label,
)

if TYPE_CHECKING:
    from cgviz.trace.model import NodeView
    from cgviz.trace.model import Segment, Snapshot

__all__ = ["PoolData", "POOL_LISTS", "WIDENED_NOTE"]

#: The payload lists a PoolData fills (sent a piece at a time, like the pictures).
POOL_LISTS = ("segs", "pstyles", "ptexts", "legends", "pools")

_NODE_ID = attrgetter("id")
_COMPACT_SEGMENTS = 24  # more segments than this: one-line segment labels (as pool_figure does)


class _Segment:
    """What one segment gives every pool it is in: its record and its share of the totals."""

    __slots__ = ("index", "compact_index", "allocated", "owned", "owners", "live", "nodes", "categories", "widened",
                 "keep")

    def __init__(self, seg: "Segment") -> None:
        self.keep = seg  # the id() cache relies on the object staying alive
        self.index = self.compact_index = -1
        self.allocated = sum(b.size for b in seg.blocks if b.allocated)
        # bytes per output that owns allocated blocks here: (node, output) -> size
        self.owned: dict[tuple[int, int], int] = {}
        for b in seg.blocks:
            if b.allocated and b.node is not None and b.output is not None:
                key = (b.node, b.output)
                self.owned[key] = self.owned.get(key, 0) + b.size
        self.owners = tuple(sorted({node for node, _ in self.owned}))  # the nodes whose outputs own blocks here
        # ids of the owners' node objects in a snapshot -> (those objects, kept alive for their ids; live bytes)
        self.live: dict[tuple, tuple[tuple, int]] = {}
        self.nodes: set[int] = set()
        self.categories: set[str] = set()
        self.widened = False


def _live_bytes(info: _Segment, by_id: dict[int, "NodeView"]) -> int:
    """Bytes of a segment's blocks owned by live outputs, or by outputs the snapshot does not
    know (counted live: nothing says they are dead). Worked out once per set of owner node
    objects: from one snapshot to the next, most segments keep theirs."""
    owners = tuple(map(by_id.get, info.owners))
    key = tuple(map(id, owners))
    got = info.live.get(key)
    if got is None:
        states = {(n.id, o.index): o.state for n in owners if n is not None for o in n.outputs}
        live = sum(size for pair, size in info.owned.items() if states.get(pair, "live") == "live")
        got = info.live[key] = (owners, live)
    return got[1]


class PoolData:
    """Pools of a trace's snapshots as records, each segment, style and text stored once."""

    def __init__(self) -> None:
        self.segs: list[list] = []
        self.pstyles: list[list] = []
        self.ptexts: list[str] = []
        self.legends: list[list] = []
        self.pools: list[list] = []
        self._by_id: dict[int, _Segment] = {}
        self._seg_keys: dict[tuple, int] = {}
        self._styles: dict[tuple, int] = {}
        self._texts: dict[str, int] = {}
        self._legend_keys: dict[tuple, int] = {}
        self._pool_keys: dict[tuple, int] = {}
        self._legends_by_rows: dict[tuple, int] = {}

    def lists(self) -> dict[str, list]:
        return {name: getattr(self, name) for name in POOL_LISTS}

    def add(self, snap: "Snapshot") -> int:
        """The index of `snap`'s pool record (the same index for the same picture)."""
        segments = sorted(snap.segments, key=lambda s: s.address)
        compact = len(segments) > _COMPACT_SEGMENTS
        infos = [self._segment(seg, compact) for seg in segments]
        by_id = dict(zip(map(_NODE_ID, snap.nodes), snap.nodes))
        totals = {
            "reserved": sum(s.size for s in segments),
            "allocated": sum(i.allocated for i in infos),
            "live": sum(_live_bytes(i, by_id) for i in infos),
            "segments": len(segments),
            "blocks": sum(len(s.blocks) for s in segments),
        }
        rows = [i.compact_index if compact else i.index for i in infos]
        legend = self._legends_by_rows.get(tuple(rows))  # a node id names one function for the whole trace
        if legend is None:
            legend = self._legends_by_rows[tuple(rows)] = self._legend(snap, infos)
        record = [pool_title_of(totals), pool_subtitle(totals), rows, legend, int(any(i.widened for i in infos))]
        key = (record[0], record[1], tuple(rows), legend, record[4])
        index = self._pool_keys.get(key)
        if index is None:
            index = self._pool_keys[key] = len(self.pools)
            self.pools.append(record)
        return index

    # -- parts --------------------------------------------------------------------------------------
    def _segment(self, seg: "Segment", compact: bool) -> _Segment:
        info = self._by_id.get(id(seg))
        if info is None:
            info = self._by_id[id(seg)] = _Segment(seg)
        if (info.compact_index if compact else info.index) < 0:
            index = self._segment_record(seg, info, compact)
            if compact:
                info.compact_index = index
            else:
                info.index = index
        return info

    def _segment_record(self, seg: "Segment", info: _Segment, compact: bool) -> int:
        blocks = segment_blocks(seg)
        flat: list[int] = []
        for d in blocks:
            node = -1 if d["node"] is None else d["node"]
            tip = f"{d['label']} · {format_bytes(d['size'])} at {d['address']:#x}"
            flat += (round(d["x"] * 10000), round(d["width"] * 10000), self._style(d["category"], d["color"]), node,
                     self._text(tip), self._text("\t".join(block_labels(d))))
            if d["node"] is not None:
                info.nodes.add(d["node"])
            info.categories.add(d["category"])
            info.widened = info.widened or d["widened"]
        record = [segment_label(seg.address, seg.kind, seg.size, info.allocated, compact), flat]
        key = (record[0], tuple(flat))
        index = self._seg_keys.get(key)
        if index is None:
            index = self._seg_keys[key] = len(self.segs)
            self.segs.append(record)
        return index

    def _legend(self, snap: "Snapshot", infos: list[_Segment]) -> int:
        nodes = set().union(*(i.nodes for i in infos))
        present = set().union(*(i.categories for i in infos))
        entries = []
        for e in legend_entries(snap, nodes, present, None):
            color = node_color(e.node) if e.kind == "node" else ("" if e.face == "none" else e.face)
            entries.append((self._style("output" if e.kind == "node" else e.kind, color), e.label,
                            -1 if e.node is None else e.node))
        key = tuple(entries)
        index = self._legend_keys.get(key)
        if index is None:
            index = self._legend_keys[key] = len(self.legends)
            self.legends.append([list(e) for e in entries])
        return index

    def _style(self, category: str, color: str) -> int:
        key = (category, color)
        index = self._styles.get(key)
        if index is None:
            index = self._styles[key] = len(self.pstyles)
            self.pstyles.append([category, color, text_color_on(color) if color else ""])
        return index

    def _text(self, text: str) -> int:
        index = self._texts.get(text)
        if index is None:
            index = self._texts[text] = len(self.ptexts)
            self.ptexts.append(text)
        return index
