"""Lone surrogates (a JSON escape such as \\ud800 read alone, or user text holding one), which UTF-8
cannot encode: finding them in a trace, and a copy of the trace or its JSON text with each one
written as its `safe_text` escape, so that a trace holding one can still be drawn and saved."""

from __future__ import annotations

import dataclasses
import json
import re
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not, not_
from typing import Any, Iterable, Iterator

from cgviz.trace.model import Block, GraphView, NodeView, OutputView, Segment, Snapshot, Step, Trace, safe_text
from cgviz.trace.schema import model_fields


SURROGATE = re.compile("[\ud800-\udfff]")


def json_safe(text: str) -> str:
    """JSON text with each lone surrogate (left raw by `ensure_ascii=False`) replaced by the
    JSON form of its `safe_text` escape: text that UTF-8 cannot encode could not be saved."""
    if text.isascii():
        return text
    return SURROGATE.sub(lambda m: json.dumps(safe_text(m.group()))[1:-1], text)


def with_safe_text(trace: Trace) -> Trace:
    """`trace` itself when all its text can be written as UTF-8, else a copy with every string
    passed through `safe_text`, so that views can draw it and pages holding it can be written."""
    return _safe_copy(trace, {}) if holds_surrogate(trace) else trace


def holds_surrogate(trace: Trace) -> bool:
    """Whether any string in the trace holds a lone surrogate; each shared object is seen once.

    The trace is walked a depth at a time, each depth's objects taken by type with C loops (a
    long trace's snapshots list millions of nodes, nearly all shared with their neighbours):
    its strings checked as one text, and what its containers and model objects hold (the
    model objects not seen before) making the next depth."""
    seen: set[int] = set()
    objects: list[Any] = [trace.meta, trace.steps, trace.graphs]
    while objects:
        types = list(map(type, objects))
        inner: list[Any] = []
        for kind in _WALKED.intersection(types):
            of_kind = list(compress(objects, map(is_, types, repeat(kind))))
            if kind is str:
                text = "".join(of_kind)
                if not text.isascii() and SURROGATE.search(text):
                    return True
            elif kind is list or kind is tuple:
                inner += _new_items(of_kind)
            elif kind is dict:
                inner += chain.from_iterable(of_kind)
                inner += chain.from_iterable(map(dict.values, of_kind))
            elif kind in MODEL_FIELDS:
                inner += chain.from_iterable(map(_FIELD_VALUES[kind], _unseen(of_kind, seen)))
        objects = inner
    return False


def _new_items(lists: list[Any]) -> Iterator[Any]:
    """The items of `lists`, but for a long list those at the same place in the long list
    before it (walked already): a snapshot's nodes are mostly the ones of the snapshot before."""
    parts: list[Iterable[Any]] = []
    before: Any = ()
    for items in lists:
        if len(items) >= 64:
            parts += (compress(items, map(is_not, items, before)), items[len(before):])
            before = items
        else:
            parts.append(items)
    return chain.from_iterable(parts)


def _unseen(objects: list[Any], seen: set[int]) -> list[Any]:
    """`objects` not seen before, each once, in order; all of them seen from now on."""
    by_id = dict(zip(map(id, objects), objects))
    fresh = list(compress(by_id.values(), map(not_, map(seen.__contains__, by_id))))
    seen.update(by_id)
    return fresh


# The model's classes and their fields, for walking a trace.
MODEL_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(model_fields(cls)) for cls in (Step, Snapshot, NodeView, OutputView, Segment, Block, GraphView)
}
_FIELD_VALUES = {cls: attrgetter(*names) for cls, names in MODEL_FIELDS.items()}  # each has several: a tuple
_WALKED = {str, list, tuple, dict, *MODEL_FIELDS}  # the types whose objects are or hold strings


def _safe_copy(value: Any, memo: dict[int, Any]) -> Any:
    """A copy of `value` with each string through `safe_text`; objects shared stay shared."""
    kind = type(value)
    if kind is str:
        return safe_text(value)
    if kind is list or kind is tuple:
        return kind(_safe_copy(v, memo) for v in value)
    if kind is dict:
        return {_safe_copy(k, memo): _safe_copy(v, memo) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if id(value) not in memo:
            memo[id(value)] = dataclasses.replace(
                value, **{name: _safe_copy(getattr(value, name), memo) for name in model_fields(kind)})
        return memo[id(value)]
    return value
