"""How the explorer's payload keeps pictures small: each distinct SVG stored once, as runs
over a shared pool of lines, with ids namespaced so that several pictures share one page."""

from __future__ import annotations

import re
from typing import Any



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
    """The SVGs of one view: distinct texts in order, each kept as its runs over the store."""

    def __init__(self, store: SvgStore) -> None:
        self.store = store
        self.items: list[list[int]] = []
        self._by_runs: dict[tuple, int] = {}

    def add(self, svg: str) -> int:
        runs = self.store.runs(svg)  # the runs identify the text: equal texts, equal runs
        key = tuple(runs)
        i = self._by_runs.get(key)
        if i is None:
            i = self._by_runs[key] = len(self.items)
            self.items.append(runs)
        return i


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


_METADATA_RE = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def strip_prolog(svg: str) -> str:
    """The <svg> element alone: no XML prolog or DOCTYPE, and no <metadata> (RDF namespaces)."""
    start = svg.find("<svg")
    if start > 0:
        svg = svg[start:]
    return _METADATA_RE.sub("", svg) if "<metadata>" in svg else svg
