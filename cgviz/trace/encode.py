"""Writing a trace, in layout 2: every distinct snapshot, node, output, segment and block (distinct
by value) is one entry of its table, and whatever holds one names it by its index there; a snapshot
lists its nodes and segments as a delta against the previous snapshot entry, so a step that changed
one node of a thousand costs a few numbers, not a thousand nodes. Fields equal to their defaults are
left out. Every string goes through `safe_text` (surrogates.py), so a lone surrogate from user code
(an exception message) is written as its escape text and the trace stays savable.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from cgviz.trace.files import write_atomic
from cgviz.trace.model import SCHEMA_VERSION, Trace
from cgviz.trace.schema import DELTA_FIELDS, FORMAT, TABLES, model_fields
from cgviz.trace.surrogates import json_safe


_PLAIN = (str, int, float, bool, type(None))
_COMPACT: dict[str, Any] = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
# An entry's canonical form, by which equal objects find one entry: its JSON text. One encoder
# made once, since json.dumps() with options makes a new one on every call.
_canonical = json.JSONEncoder(check_circular=False, **_COMPACT).encode


def to_dict(trace: Trace) -> dict:
    """The trace as plain JSON types in the current layout; fields equal to their defaults are left out."""
    writer = _Writer()
    steps = [writer.encode(s) for s in trace.steps]
    out = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,  # the layout written is always the current one
        "meta": writer.encode(trace.meta),
        "tables": writer.tables,
        "steps": steps,
    }
    if trace.graphs:
        out["graphs"] = [writer.encode(g) for g in trace.graphs]
    return out


class _Writer:
    """Encodes a trace's objects; each table object becomes the index of its table entry.

    Objects are memoised by identity during one save, so an object shared by many snapshots
    is encoded once; equal objects that are not the same one meet by their canonical form
    (the JSON text of their entry) and share one entry.
    """

    def __init__(self) -> None:
        self.tables: dict[str, list] = {name: [] for name in TABLES.values()}
        self._entries: dict[str, dict[str, int]] = {name: {} for name in TABLES.values()}
        self._memo: dict[int, int] = {}  # id(object) -> its entry; the trace keeps the objects alive
        self._base: dict[str, list[int]] = {name: [] for name in DELTA_FIELDS}  # previous snapshot entry's
        self._last: dict[tuple[type, str], tuple[list, list[int]]] = {}  # (class, field) -> items, references

    def encode(self, value: Any) -> Any:
        if type(value) in _PLAIN:
            return value
        table = TABLES.get(type(value))
        if table is not None:
            return self._ref(value, table)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._object(value)
        if isinstance(value, (list, tuple)):
            return [self.encode(v) for v in value]
        if isinstance(value, dict):
            return {k: self.encode(v) for k, v in value.items()}
        return value

    def _object(self, obj: Any) -> dict:
        """The fields that differ from their defaults, encoded."""
        out = {}
        for name, f in model_fields(type(obj)).items():
            value = getattr(obj, name)
            if f.required or type(value) is not type(f.default) or value != f.default:
                out[name] = self._refs(value, (type(obj), name)) if f.table_item else self.encode(value)
        return out

    def _refs(self, items: list, field: tuple[type, str]) -> list[int]:
        """encode() of `field`, a list of table objects, quickly for the usual cases: objects
        seen before (looked up at C speed), and fresh objects equal to the one at the same place
        of this field last time (an engine builds new node views for each snapshot)."""
        refs = list(map(self._memo.get, map(id, items)))
        before, before_refs = self._last.get(field, ((), ()))
        i = 0
        for _ in range(refs.count(None)):
            i = refs.index(None, i)
            if i < len(before) and items[i] == before[i]:
                refs[i] = self._memo[id(items[i])] = before_refs[i]
            else:
                refs[i] = self.encode(items[i])
        self._last[field] = (items, refs)
        return refs

    def _ref(self, obj: Any, table: str) -> int:
        ref = self._memo.get(id(obj))
        if ref is None:
            entry = self._object(obj)
            key = _canonical(entry)
            known = self._entries[table]
            ref = known.get(key)
            if ref is None:
                ref = known[key] = len(self.tables[table])
                self.tables[table].append(self._as_delta(entry) if table == "snapshots" else entry)
            self._memo[id(obj)] = ref
        return ref

    def _as_delta(self, entry: dict) -> dict:
        """A new snapshot entry with its reference lists as deltas against the previous entry's."""
        out = dict(entry)
        for name in DELTA_FIELDS:
            refs = entry.get(name, [])
            if name in entry:
                out[name] = _delta(self._base[name], refs)
            self._base[name] = refs
        return out


def _delta(base: list[int], refs: list[int]) -> list:
    """`refs` as runs copied from `base` ([start, count]: `base[start:start + count]`) and new
    references (integers). Runs are found at equal positions, which is how snapshots change:
    a node's view replaced in place, new nodes appended."""
    ops: list = []
    same = min(len(base), len(refs))
    i = 0
    while i < len(refs):
        j = _equal_until(base, refs, i, same)
        if j > i:
            ops.append([i, j - i])
            i = j
        else:
            ops.append(refs[i])
            i += 1
    return ops


def _equal_until(a: list, b: list, start: int, stop: int, chunk: int = 64) -> int:
    """The first index from `start` (at most `stop`) where `a` and `b` differ; whole chunks
    are compared as slices, at C speed, since most of two successive snapshots is equal."""
    i = start
    while i + chunk <= stop and a[i : i + chunk] == b[i : i + chunk]:
        i += chunk
    while i < stop and a[i] == b[i]:
        i += 1
    return i


def dumps(trace: Trace) -> str:
    """The trace as compact JSON text in the current layout, valid UTF-8 whatever its strings hold."""
    return json_safe(json.dumps(to_dict(trace), **_COMPACT))


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Save as JSON, atomically (see write_atomic)."""
    text = dumps(trace)  # one string: json.dump() to a file encodes in pure Python, several times slower
    write_atomic(path, lambda fh: fh.write(text), "trace")
