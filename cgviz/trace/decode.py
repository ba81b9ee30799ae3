"""Reading a trace: any layout up to the current one (layout 1, every step's snapshot written out in
full, still loads), with every field checked against the dataclass annotations of `cgviz.trace.model`
by one generic validator, so a new field is checked without new code.

A problem is a `TraceFormatError` saying what is wrong and where, naming the file. A table entry is
checked where it is first used, so messages name the step ("step 4 snapshot node 2 output 0").
Values that would load and then fail later are refused too (checks.py, meta_checks.py): a lone
surrogate in a string, NaN or an infinite number, an integer too long to convert, a repeated block
(`span`) reaching before the first step or into another block, nesting too deep to read, and
snapshot deltas that would hold more in memory than a file within the size limit may (a delta
copies runs of the previous snapshot's lists, so a small file could otherwise ask for gigabytes).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
import types
import typing
from functools import lru_cache
from typing import Any, Literal, Optional, Union

from cgviz.trace.checks import (
    TraceFormatError, Unreadable, check_count, check_free_form, check_positive, check_text, fail, json_kind,
    shortened, wrong_type,
)
from cgviz.trace.files import MAX_FILE_ENV, max_file_bytes, mib, read_file
from cgviz.trace.meta_checks import check_meta, check_values
from cgviz.trace.model import SCHEMA_VERSION, Block, GraphView, NodeView, OutputView, Segment, Snapshot, Step, Trace
from cgviz.trace.schema import DELTA_FIELDS, FORMAT, OPTIONAL_TOP_KEYS, TABLES, TOP_KEYS, model_fields


# How an element of a list of these dataclasses is named in messages ("step 3", "node 2").
_LABELS: dict[type, str] = {
    Step: "step", NodeView: "node", OutputView: "output", Segment: "segment", Block: "block", GraphView: "graph",
}
# A scalar field's type as messages name it.
_EXPECTED = {int: "an integer", str: "a string", bool: "true or false"}
# A device as torch names it: "cuda", "cuda:1" (its type at most 32 letters, its index 6 digits:
# a name a file makes longer is refused, not carried into every label that shows it).
_DEVICE = re.compile(r"[a-z]{1,32}(:\d{1,6})?")
_SHOWN = 40  # characters of a refused value a message shows


def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a trace file; any problem is a TraceFormatError naming the file. A
    directory, FIFO, device or socket is refused unread (OSError), and so is a file larger
    than `MAX_FILE_BYTES` (see `read_file`) or a path holding NUL (ValueError). A leading
    byte order mark is skipped."""
    path = os.fspath(path)
    try:
        raw = read_file(path, "trace", TraceFormatError)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "trace file not found", path) from None
    try:
        text = raw.decode("utf-8-sig")  # a byte order mark (as Windows editors write) is not part of the JSON
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise TraceFormatError(f"{path}: not a cgviz trace ({problem})") from None
    return loads(text, source=path)


def loads(text: str, source: str = "<string>") -> Trace:
    """Parse and validate a trace's JSON text; any problem is a TraceFormatError naming `source`."""
    data = _parse(text, source)
    try:
        return from_dict(data)
    except TraceFormatError as exc:
        raise TraceFormatError(f"{source}: {exc}") from None


def _parse(text: str, source: str) -> Any:
    """The JSON value of `text`. NaN, Infinity and integers too long to convert parse as
    `Unreadable` markers, so that the builder reports them with the field that holds them."""
    try:
        return json.loads(text, parse_constant=Unreadable.constant)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{source}: truncated or not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}, char {exc.pos})"
        ) from None
    except RecursionError:
        raise TraceFormatError(f"{source}: {_TOO_DEEP}") from None
    except ValueError:  # an integer longer than int() converts: parse again (the slow way) marking it
        return json.loads(text, parse_constant=Unreadable.constant, parse_int=Unreadable.integer)


_TOO_DEEP = "not a cgviz trace (arrays and objects nested too deeply to read: Python's recursion limit reached)"


def from_dict(data: Any) -> Trace:
    """Build a Trace from its JSON form (any layout up to the current one), checking every field;
    raises TraceFormatError."""
    try:
        version = _check_top_level(data)
        reader = _Reader(_tables(data["tables"]) if "tables" in TOP_KEYS[version] else None)
        steps = reader.build(list[Step], data["steps"], "", "steps")
        _check_spans(steps)
        reader.check_unused_entries()
        meta = reader.build(dict, data["meta"], "", "meta")
        check_meta(meta, "meta")
        graphs = reader.build(list[GraphView], data.get("graphs", []), "", "graphs")
        _check_graphs(graphs, steps)
        return Trace(steps=steps, meta=meta, schema_version=version, graphs=graphs)
    except RecursionError:
        raise TraceFormatError(_TOO_DEEP) from None


def _check_top_level(data: Any) -> int:
    """The schema version, once the top level is an object with the fields that version has."""
    if not isinstance(data, dict):
        raise TraceFormatError(f"not a cgviz trace: the top level is {json_kind(data)}, expected an object")
    if data.get("format") != FORMAT:
        found = "no 'format' marker" if "format" not in data else f"format marker is {data['format']!r}"
        raise TraceFormatError(f"not a cgviz trace ({found}, expected {FORMAT!r})")
    version = data.get("schema_version")
    if type(version) is not int or version < 1:
        raise TraceFormatError(f"'schema_version' must be a positive integer, not {version!r}")
    if version > SCHEMA_VERSION:
        raise TraceFormatError(f"written by a newer cgviz (schema {version} > {SCHEMA_VERSION}); upgrade cgviz")
    keys = TOP_KEYS[version]
    for key in data:
        if key not in keys and key not in OPTIONAL_TOP_KEYS.get(version, ()):
            raise TraceFormatError(f"unknown top-level field {key!r}")
    for key in keys:
        if key not in data:
            raise TraceFormatError(f"missing top-level field {key!r}")
    return version


def _tables(value: Any) -> dict[str, list]:
    """The 'tables' object of layout 2: exactly one array per table."""
    if type(value) is not dict:
        fail("", "tables", f"must be an object, not {json_kind(value)}")
    for name in value:
        if name not in TABLES.values():
            raise TraceFormatError(f"tables: unknown table {name!r}")
    for name in TABLES.values():
        if name not in value:
            raise TraceFormatError(f"tables: missing table {name!r}")
        if type(value[name]) is not list:
            fail("tables", name, f"must be an array, not {json_kind(value[name])}")
    return value


@lru_cache(maxsize=None)
def _shape(tp: Any) -> tuple[str, Any]:
    """How the validator treats a model type: a kind and what that kind needs, worked out once
    per type, since typing's introspection is slow and a large trace holds millions of values."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (int, str, bool):
        return "scalar", tp
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"unsupported union in the trace model: {tp}")
        return "optional", rest[0]
    if origin is list or tp is list:
        return "list", args[0] if args else Any
    if origin is Literal:
        return "literal", args
    if dataclasses.is_dataclass(tp):
        return "dataclass", tp
    if tp is float:
        return "float", None
    if origin is dict or tp is dict:
        return "dict", None
    if tp is Any:
        return "any", None
    raise TypeError(f"unsupported type in the trace model: {tp}")


class _Reader:
    """Checks JSON values against the model's annotations and builds them.

    With `tables` (layout 2) a table object is given by the index of its entry. Each entry is
    built once, when first used, so messages name the step that uses it, and every use shares
    the object: a loaded trace keeps one NodeView per distinct node view, however many
    snapshots hold it.
    """

    def __init__(self, tables: Optional[dict[str, list]] = None) -> None:
        self.tables = tables
        self.built: dict[str, list] = {name: [None] * len(entries) for name, entries in (tables or {}).items()}
        self._snapshots = 0  # snapshot entries built so far, in order: each is a delta against the one before
        # How many items the snapshots' delta-built lists may hold in all: a run [start, count] copies
        # `count` references for a few bytes of file, so memory is bounded here, not by the file's size.
        # A reference costs 8 bytes, so this is as much memory as the largest file read takes.
        self.held, self.max_held = 0, (max_file_bytes(TraceFormatError) // 8 if tables is not None else 0)

    def build(self, tp: Any, value: Any, ctx: str, name: str) -> Any:
        """Check `value` against type `tp` and build it. `ctx` locates the enclosing object
        ("step 5 snapshot node 2"), `name` the field within it ("path[3]")."""
        kind, arg = _shape(tp)
        if kind == "scalar":
            if type(value) is not arg:
                fail(ctx, name, wrong_type(value, _EXPECTED[arg]))
            if arg is str and not value.isascii():
                check_text(value, ctx, name)
            return value
        if kind == "optional":
            return None if value is None else self.build(arg, value, ctx, name)
        if kind == "list":
            return self._build_list(arg, value, ctx, name)
        if kind == "literal":
            if not any(type(value) is type(a) and value == a for a in arg):
                choices = ", ".join(repr(a) for a in arg)
                fail(ctx, name, f"must be one of {choices} (got {value!r})")
            return value
        if kind == "dataclass":
            where = f"{ctx} {name}".strip()
            if self.tables is not None and arg in TABLES:
                return self._resolve(arg, value, ctx, name, where)
            return self._build_dataclass(arg, value, where)
        if kind == "float":
            if type(value) not in (int, float):
                fail(ctx, name, wrong_type(value, "a number"))
            if not math.isfinite(value):
                fail(ctx, name, f"must be a finite number, not {value!r}")
            return float(value)
        if kind == "dict" and type(value) is not dict:
            fail(ctx, name, f"must be an object, not {json_kind(value)}")
        check_free_form(value, ctx, name)
        return value  # a dict, or Any

    def _build_list(self, item: Any, value: Any, ctx: str, name: str) -> list:
        if type(value) is not list:
            fail(ctx, name, f"must be an array, not {json_kind(value)}")
        label = _LABELS.get(item)
        if label is None:
            return [self.build(item, v, ctx, f"{name}[{i}]") for i, v in enumerate(value)]
        if self.tables is not None and item in TABLES:  # references: "node 2" is built where first used
            return [self._resolve(item, v, ctx, f"{name}[{i}]", f"{ctx} {label} {i}") for i, v in enumerate(value)]
        return [self._build_dataclass(item, v, f"{ctx} {label} {i}".strip()) for i, v in enumerate(value)]

    def _build_dataclass(self, cls: type, value: Any, ctx: str) -> Any:
        if type(value) is not dict:
            raise TraceFormatError(f"{ctx}: must be an object, not {json_kind(value)}")
        spec = model_fields(cls)
        for key in value:
            if key not in spec:
                raise TraceFormatError(f"{ctx}: unknown field {key!r}")
        kwargs = {}
        for name, f in spec.items():
            if name in value:
                if cls is Snapshot and self.tables is not None and name in DELTA_FIELDS:
                    kwargs[name] = self._apply_delta(f.table_item, value[name], ctx, name)
                else:
                    kwargs[name] = self.build(f.type, value[name], ctx, name)
            elif f.required:
                raise TraceFormatError(f"{ctx}: missing field {name!r}")
        obj = cls(**kwargs)
        if cls is Step:
            _check_step(obj, ctx)
        elif cls is OutputView and obj.values is not None:
            check_values(obj.values, ctx)
        return obj

    def _resolve(self, cls: type, ref: Any, ctx: str, name: str, where: str) -> Any:
        """The object of entry `ref` of `cls`'s table, built (as `where`) when first used;
        `ctx` and `name` locate the reference itself."""
        table = TABLES[cls]
        built = self.built[table]
        if type(ref) is not int:
            fail(ctx, name, f"must be a reference to an entry of the {table} table (an integer), not {json_kind(ref)}")
        if not 0 <= ref < len(built):
            fail(ctx, name, f"refers to entry {ref} of the {table} table, which has {len(built)} entries")
        if built[ref] is None:
            if cls is Snapshot:
                self._build_snapshots(ref, where)
            else:
                built[ref] = self._build_dataclass(cls, self.tables[table][ref], where)  # type: ignore[index]
        return built[ref]

    def _build_snapshots(self, upto: int, where: str) -> None:
        """Build snapshot entries in order up to `upto` (named `where`), since each is a delta
        against the one before; earlier entries no step used yet are named by their index."""
        entries, built = self.tables["snapshots"], self.built["snapshots"]  # type: ignore[index]
        while self._snapshots <= upto:
            k = self._snapshots
            built[k] = self._build_dataclass(Snapshot, entries[k], where if k == upto else f"snapshots table entry {k}")
            self._snapshots += 1

    def _apply_delta(self, cls: type, ops: Any, ctx: str, name: str) -> list:
        """A snapshot's list `name` from its delta: [start, count] copies that run of the previous
        snapshot entry's list (sharing its objects), an integer is a reference to a new item."""
        if type(ops) is not list:
            fail(ctx, name, f"must be an array, not {json_kind(ops)}")
        previous = self.built["snapshots"][self._snapshots - 1] if self._snapshots else None
        base = getattr(previous, name) if previous is not None else []
        label, out = _LABELS[cls], []
        for i, op in enumerate(ops):
            if type(op) is list:
                if not (len(op) == 2 and type(op[0]) is int and type(op[1]) is int
                        and op[0] >= 0 and op[1] >= 1 and op[0] + op[1] <= len(base)):
                    fail(ctx, f"{name}[{i}]", f"must be a reference or a run [start, count] within the previous "
                         f"snapshot's {len(base)} {name} (got {op!r})")
                if self.held + len(out) + op[1] > self.max_held:
                    self._too_much(ctx, f"{name}[{i}]")
                out += base[op[0] : op[0] + op[1]]
            else:
                out.append(self._resolve(cls, op, ctx, f"{name}[{i}]", f"{ctx} {label} {len(out)}"))
        self.held += len(out)
        if self.held > self.max_held:
            self._too_much(ctx, name)
        return out

    def _too_much(self, ctx: str, name: str) -> typing.NoReturn:
        fail(ctx, name, f"makes the snapshots hold more than {self.max_held:,} nodes and segments in all (each "
             f"snapshot entry copies runs of the previous one's): more than a trace within the file size limit of "
             f"{mib(self.max_held * 8)} holds (set {MAX_FILE_ENV} to read larger traces)")

    def check_unused_entries(self) -> None:
        """Check the entries no step used as well: the file is valid as a whole or not at all."""
        if self.tables is None:
            return
        for cls, table in TABLES.items():  # holders first, so a part is named by its holder
            for ref, obj in enumerate(self.built[table]):
                if obj is None:
                    self._resolve(cls, ref, "", "", f"{table} table entry {ref}")


def _check_spans(steps: list[Step]) -> None:
    """A step's `span` counts the steps of the repeated block ending at it, so it lies within
    the steps up to it: anything else would index past the first step when the trace is used.
    Blocks never overlap (cgviz folds only unrepeated steps, trace/fold.py): a block reaching
    into another would make every use of the trace cost steps × span."""
    same_rank_from = 0  # where the run of steps of step i's rank began (merged traces: one rank per block)
    last_block = -1  # the last step before i that ends a folded block
    for i, step in enumerate(steps):
        if not 1 <= step.span <= i + 1:
            fail(f"step {i}", "span", f"must be from 1 to {i + 1}: a block of steps ending at step {i} cannot start "
                 f"before step 0 (got {step.span})")
        if i and step.rank != steps[i - 1].rank:
            same_rank_from = i
        if step.repeat > 1 and i - step.span + 1 < same_rank_from:
            fail(f"step {i}", "span", f"covers steps of another rank: a folded block is one rank's (got {step.span})")
        if step.repeat > 1:
            if i - step.span + 1 <= last_block:
                fail(f"step {i}", "span", f"reaches step {last_block}, which ends a folded block of its own: blocks "
                     f"cannot overlap (got {step.span}, so at most {i - last_block})")
            last_block = i


def _check_step(step: Step, ctx: str) -> None:
    if step.repeat < 1:
        fail(ctx, "repeat", f"must be at least 1 (got {step.repeat})")
    if step.rank is not None and step.rank < 0:
        fail(ctx, "rank", f"must be a rank number, 0 or more (got {step.rank})")
    if step.device is not None and not _DEVICE.fullmatch(step.device):
        more = f"… ({len(step.device):,} characters)" if len(step.device) > _SHOWN else ""
        fail(ctx, "device", f"must name a device as torch does, like 'cuda:1' (got {step.device[:_SHOWN]!r}{more})")
    for i, pair in enumerate(step.invalidated):
        if len(pair) != 2:
            fail(ctx, f"invalidated[{i}]", f"must be a [node, output] pair (got {pair!r})")


def _check_graphs(graphs: list[GraphView], steps: list[Step]) -> None:
    """The graphs' ids are distinct, their counts sane and their kernels [name, count] pairs; every
    step that names a graph names one of them."""
    ids: set[int] = set()
    for i, g in enumerate(graphs):
        ctx = f"graph {i}"
        if g.id in ids:
            fail(ctx, "id", f"is used by another graph too (got {g.id})")
        ids.add(g.id)
        for name in ("stream", "pool", "memory", "replays", "used", "padded"):
            check_count(getattr(g, name), ctx, name)
        if g.pool_bytes is not None:
            check_count(g.pool_bytes, ctx, "pool_bytes")
        if g.batch is not None:
            check_positive(g.batch, ctx, "batch")
        if g.used > g.padded:
            fail(ctx, "used", f"counts more rows in use ({g.used}) than were replayed ({g.padded})")
        for name in ("replay_us", "capture_ms"):
            value = getattr(g, name)
            if value is not None and value < 0:
                fail(ctx, name, f"must be a duration, 0 or more (got {value})")
        for k, entry in enumerate(g.kernels or []):
            if not (type(entry) is list and len(entry) == 2 and type(entry[0]) is str and type(entry[1]) is int
                    and entry[1] >= 1):
                fail(ctx, f"kernels[{k}]", f"must be a [kernel name, count] pair (got {shortened(entry)})")
    for i, step in enumerate(steps):
        if step.graph is not None and step.graph not in ids:
            fail(f"step {i}", "graph", f"names graph {step.graph}, which the trace's graphs do not hold")
