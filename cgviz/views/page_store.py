"""How the explorer's payload keeps pictures small: each distinct SVG stored once, as runs
over a shared pool of lines, with ids namespaced so that several pictures share one page."""

from __future__ import annotations

import re
from itertools import compress, count, repeat
from operator import is_, ne, sub
from typing import Any, Callable


def looked_up(cache: dict, items: list, make: Callable[[Any], Any]) -> list:
    """Per item, `cache[id(item)]`, or `make(item)` for the items not there yet. The items of a
    snapshot were mostly seen with an earlier one: they are looked up in one pass (in C), and only
    the new ones go through Python."""
    found = list(map(cache.get, map(id, items)))
    for k in compress(count(), map(is_, found, repeat(None))):
        found[k] = make(items[k])
    return found


# -- storing SVGs once ---------------------------------------------------------------------------
class SvgStore:
    """Distinct SVG texts, each kept as runs [start, count, ...] over one pool of lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._line_index: dict[str, int] = {}

    def runs(self, svg: str) -> list[int]:
        return self.runs_of_lines(svg.split("\n"))

    def runs_of_lines(self, lines: list[str]) -> list[int]:
        """The runs of `lines` joined by newlines, without joining them (a drawing made as
        lines need not be one string only to be split again here)."""
        return runs(self._indices(lines))

    def _indices(self, lines: list[str]) -> list[int]:
        """Each line's index in the pool; a new one (split at any newline it holds) is added."""
        found = list(map(self._line_index.get, lines))
        if None not in found:
            return found  # type: ignore[return-value]
        out: list[int] = []
        for line, j in zip(lines, found):
            if j is not None:
                out.append(j)
            else:
                out.extend(map(self._add, line.split("\n")))
        return out

    def _add(self, line: str) -> int:
        j = self._line_index.get(line)
        if j is None:
            j = self._line_index[line] = len(self.lines)
            self.lines.append(line)
        return j


class SvgKind:
    """The SVGs of one view: distinct texts in order, each kept as its runs over the store."""

    def __init__(self, store: SvgStore) -> None:
        self.store = store
        self.items: list[list[int]] = []
        self._by_runs: dict[tuple, int] = {}

    def add(self, svg: str) -> int:
        return self._add_runs(self.store.runs(svg))

    def add_lines(self, lines: list[str]) -> int:
        """`add` of `lines` joined by newlines."""
        return self._add_runs(self.store.runs_of_lines(lines))

    def _add_runs(self, item: list[int]) -> int:
        key = tuple(item)  # the runs identify the text: equal texts, equal runs
        i = self._by_runs.get(key)
        if i is None:
            i = self._by_runs[key] = len(self.items)
            self.items.append(item)
        return i


def linear(ax: Any, width: float, n: int) -> list[float]:
    a = float(ax.transData.transform((0, 0))[0]) / width
    b = float(ax.transData.transform((1, 0))[0]) / width - a
    return [round(a + b * i, 5) for i in range(n)]


def runs(values: list[int]) -> list[int]:
    """`values` as runs of consecutive integers, [start, count, ...] (the runs' starts found by
    C loops: a page stores thousands of drawings of thousands of lines)."""
    if not values:
        return []
    starts = [0, *compress(count(1), map(ne, map(sub, values[1:], values), repeat(1)))]
    return [x for start, end in zip(starts, starts[1:] + [len(values)]) for x in (values[start], end - start)]


_ID_RE = re.compile(r'\bid="(?=[^"]+")')
_REF_RE = re.compile(r'(url\(#|href="#)(?=[^")])')


def namespace_ids(svg: str, prefix: str) -> str:
    """Prefix every id (and reference to one) so SVGs on one page do not clash. (Templates,
    not a function per match: a pool of 1,000 blocks has thousands of ids.)"""
    safe = prefix.replace("\\", "\\\\")
    svg = _ID_RE.sub(f'id="{safe}', svg)
    return _REF_RE.sub(f"\\g<1>{safe}", svg)


_METADATA_RE = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def strip_prolog(svg: str) -> str:
    """The <svg> element alone: no XML prolog or DOCTYPE, and no <metadata> (RDF namespaces)."""
    start = svg.find("<svg")
    if start > 0:
        svg = svg[start:]
    return _METADATA_RE.sub("", svg) if "<metadata>" in svg else svg
