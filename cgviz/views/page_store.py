"""How the explorer's payload keeps pictures small: each distinct SVG stored once, as runs
over a shared pool of lines (or a diff against the SVG before it), with ids namespaced so that
several pictures share one page."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from cgviz.trace.diff import format_bytes

if TYPE_CHECKING:
    from cgviz.trace.model import Snapshot


# -- storing SVGs once ---------------------------------------------------------------------------
class SvgStore:
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


class SvgKind:
    """The SVGs of one view: distinct texts in order, and their runs.

    With `diffs`, an SVG may instead be kept as ``{"b": i - 1, "o": ops}``: its lines as
    runs over the lines of the SVG stored before it (``pos, count``) and new lines
    (``-1 - line``), where that is shorter. Pictures that grow a block at a time, or change
    only a title, are then a few numbers each, where runs over the shared lines grow with
    every insertion. Every `DIFF_CHAIN`th SVG is kept whole, so that reading one applies at
    most that many diffs.
    """

    DIFF_CHAIN = 32

    def __init__(self, store: SvgStore, diffs: bool = False) -> None:
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


def linear(ax: Any, width: float, n: int) -> list[float]:
    a = float(ax.transData.transform((0, 0))[0]) / width
    b = float(ax.transData.transform((1, 0))[0]) / width - a
    return [round(a + b * i, 5) for i in range(n)]


def runs(values: list[int]) -> list[int]:
    out: list[int] = []
    for j in values:
        if out and out[-2] + out[-1] == j:
            out[-1] += 1
        else:
            out += (j, 1)
    return out


_ID_RE = re.compile(r'\bid="(?=[^"]+")')
_REF_RE = re.compile(r'(url\(#|href="#)(?=[^")])')


def namespace_ids(svg: str, prefix: str) -> str:
    """Prefix every id (and reference to one) so SVGs on one page do not clash. (Templates,
    not a function per match: a pool of 1,000 blocks has thousands of ids.)"""
    safe = prefix.replace("\\", "\\\\")
    svg = _ID_RE.sub(f'id="{safe}', svg)
    return _REF_RE.sub(f"\\g<1>{safe}", svg)


_BLOCK_RE = re.compile(r'<g id="block-([0-9a-fA-F]+)"')


def pool_key(snap: "Snapshot") -> tuple:
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


def pool_markup(snap: "Snapshot", svg: str) -> str:
    """The pool SVG with ids namespaced and each block group marked with its node (data-node)."""
    owner = {b.address: b.node for s in snap.segments for b in s.blocks if b.allocated and b.node is not None}

    def mark(m: re.Match) -> str:
        node = owner.get(int(m.group(1), 16))
        return m.group(0) if node is None else f'{m.group(0)} data-node="{node}"'

    return namespace_ids(_BLOCK_RE.sub(mark, strip_prolog(svg)), "pool-")


#: The title's text in a pool SVG after `pool_markup` (for `pool.with_title`).
MARKED_TITLE = re.compile(r'<g id="pool-pool-title">\s*<text\b[^>]*>(?P<text>[^<]*)</text>')

_METADATA_RE = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def strip_prolog(svg: str) -> str:
    """The <svg> element alone: no XML prolog or DOCTYPE, and no <metadata> (RDF namespaces)."""
    start = svg.find("<svg")
    if start > 0:
        svg = svg[start:]
    return _METADATA_RE.sub("", svg) if "<metadata>" in svg else svg


def output_row(o) -> list:
    address = "" if o.address is None else f"{o.address:#x}"
    if not o.described:  # torch keeps no metadata for the outputs of its warmup runs
        return [o.index, o.state, "not recorded", "", "", address, o.alias_of or ""]
    shape = "[" + ", ".join(str(d) for d in o.shape) + "]"
    return [o.index, o.state, shape, o.dtype, format_bytes(o.nbytes), address, o.alias_of or ""]
