"""The trace file's layout as writing and reading both see it: the format marker, the top-level
keys of each layout, the tables of layout 2, and the model's fields, worked out once per class from
the dataclass annotations of `cgviz.trace.model` (so a new field is written and checked without new
code). docs/trace-format.md describes the layouts."""

from __future__ import annotations

import dataclasses
import typing
from functools import lru_cache
from typing import Any, Optional

from cgviz.trace.model import Block, NodeView, OutputView, Segment, Snapshot


FORMAT = "cgviz-trace"
TOP_KEYS = {
    1: ("format", "schema_version", "meta", "steps"),
    2: ("format", "schema_version", "meta", "tables", "steps"),
}
# Written only when there is something in them (a trace without them reads as before).
OPTIONAL_TOP_KEYS = {2: ("graphs",)}
# Layout 2: the classes stored once per distinct value, each in its table (holders before parts).
TABLES: dict[type, str] = {
    Snapshot: "snapshots", NodeView: "nodes", OutputView: "outputs", Segment: "segments", Block: "blocks"
}


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class Field(typing.NamedTuple):
    """One field of a model dataclass as writing and reading need it."""

    type: Any
    required: bool
    default: Any
    table_item: Optional[type]  # X when the type is list[X] of a table class: a list of references


@lru_cache(maxsize=None)
def model_fields(cls: type) -> dict[str, Field]:
    """The init fields of a model dataclass by name, worked out once per class: loading and
    saving visit them for every object of a large trace."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = _hints(cls)[f.name]
        args = typing.get_args(tp)
        item = args[0] if typing.get_origin(tp) is list and args and args[0] in TABLES else None
        if f.default is not dataclasses.MISSING:
            required, default = False, f.default
        elif f.default_factory is not dataclasses.MISSING:
            required, default = False, f.default_factory()
        else:
            required, default = True, None
        out[f.name] = Field(tp, required, default, item)
    return out


# Snapshot fields written as deltas against the previous snapshot entry: its reference lists.
DELTA_FIELDS: tuple[str, ...] = tuple(name for name, f in model_fields(Snapshot).items() if f.table_item)
