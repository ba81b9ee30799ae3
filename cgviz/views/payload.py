"""The explorer's payload, declared: the fields of each record that views/page_data.py sends and
the front end decodes (views/page/explorer_logic.js: `decodeHead`, `decodePiece`).

A record that comes by the thousand (a step, a row of the step list, a node, a pool block) travels
as a list, its fields in the order declared here: names in every record would make a long trace's
page several times larger. The head names those orders once (``fields``), and the front end reads
every record by name, so a field is added here, not by a position in two languages.

A *flat* record (`BLOCK`, `NODE_STATE`: a pool block, a node's state in the tree) is a run of numbers inside a
longer list, read at ``position + offset`` (`layout` in explorer_logic.js), for speed.

Records built outside page_data follow the same declarations: `OUTPUT` is `text.output_row`'s,
`POOL`, `SEG`, `BLOCK`, `PSTYLE` and `LEGEND` are `pool_data`'s, `STRUCT`, `LOOK` and
`NODE_STATE` are the tree states' (`tree.frames.TreeStates.data`, `tree.windows.TreeWindows.piece`);
tests/test_payload.py checks that they agree.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["Record", "RECORDS", "FIELDS", "STEP", "ROW", "NODE", "OUTPUT", "META", "KIND_COUNT", "KERNEL",
           "POOL", "SEG", "BLOCK", "PSTYLE", "LEGEND", "STRUCT", "LOOK", "NODE_STATE"]


class Record:
    """A record's name and its fields in order. `pack` makes one from its values by name; the
    fields from `optional` on are left out at the end where None (the front end reads null)."""

    __slots__ = ("name", "fields", "optional", "_names")

    def __init__(self, name: str, fields: str, *, optional: Optional[int] = None) -> None:
        self.name = name
        self.fields = tuple(fields.split())
        self.optional = len(self.fields) if optional is None else optional
        self._names = frozenset(self.fields)

    def pack(self, **values: Any) -> list:
        if values.keys() != self._names:
            raise TypeError(f"a {self.name} record has the fields {', '.join(self.fields)}, not {', '.join(values)}")
        rec = [values[k] for k in self.fields]
        while len(rec) > self.optional and rec[-1] is None:
            rec.pop()
        return rec


#: A step's pictures: indices into ``trees``, ``pools``, ``snaps`` and ``banners`` (-1: none), and
#: the step's node (None: none).
STEP = Record("step", "tree pool snap node banner")
#: A row of the step list: where a step sits in a folded block (``note``), how often a folded step
#: ran (``times``, 1 if once), and a CUDA graph's id for a step of a graph made outside the trees.
ROW = Record("row", "kind headline reason note times graph", optional=5)
#: A node of a snapshot; ``outputs`` are `OUTPUT` records.
NODE = Record("node", "id function kind parent children generation replays signature outputs")
#: A node's output as the output table shows it (`text.output_row`).
OUTPUT = Record("output", "index state shape dtype size address alias_of values")
#: The header's meta items and its counts per step kind.
META = Record("meta", "key text")
KIND_COUNT = Record("kind_count", "kind count")
#: A kernel of a node's graph (`Tree(profile=True)`): its short name, count and full name.
KERNEL = Record("kernel", "label count name")
#: The pool of a step: title, subtitle, its segments (indices into ``segs``, top to bottom), its
#: legend (an index into ``legends``) and whether a block was widened to show.
POOL = Record("pool", "title subtitle segs legend widened")
#: A segment: its label and its blocks (flat `BLOCK` records).
SEG = Record("seg", "label blocks")
#: A block of a segment: its place and width (ten-thousandths of the bar), style (into
#: ``pstyles``), node (-1: none), tooltip and candidate labels (into ``ptexts``).
BLOCK = Record("block", "x width style node tip labels")
#: A block style: its category (the hatching), colour and text colour.
PSTYLE = Record("pstyle", "category color tone")
#: An entry of a pool's legend: style, text, node (-1 for the kinds of block).
LEGEND = Record("legend", "style text node")
#: A tree structure's drawing (an index into ``trees``), the step whose state it is drawn in (-1
#: for a widget's), and that state (flat `NODE_STATE`s; a page's comes from its keyframes).
STRUCT = Record("struct", "tree first state", optional=2)
#: A node's look: its class, fill and markup, and which of its texts says the replays (its index
#: among the group's texts, and the text with the count's placeholder).
LOOK = Record("look", "cls fill markup count_at count_template")
#: A node's state at a step: its id, its look (an index into ``looks``; -1: the node is gone) and
#: its replay count.
NODE_STATE = Record("node_state", "node look replays")

RECORDS = (STEP, ROW, NODE, OUTPUT, META, KIND_COUNT, KERNEL, POOL, SEG, BLOCK, PSTYLE, LEGEND, STRUCT, LOOK,
           NODE_STATE)
#: What the head sends as ``fields``: each record's field names in order.
FIELDS: dict[str, list[str]] = {r.name: list(r.fields) for r in RECORDS}
