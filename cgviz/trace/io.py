"""The Trace on disk: compact JSON with a format marker and a schema version.

Loading checks every field against the dataclass annotations of `cgviz.trace.model`
(one generic validator, so a new field is checked without new code) and reports what
is wrong, and where, in a `TraceFormatError` naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import secrets
import types
import typing
from functools import lru_cache
from typing import Any, Callable, Literal, TextIO, Union

from cgviz.trace.model import SCHEMA_VERSION, Block, NodeView, OutputView, Segment, Step, Trace

FORMAT = "cgviz-trace"
_TOP_KEYS = ("format", "schema_version", "meta", "steps")
# How an element of a list of these dataclasses is named in messages ("step 3", "node 2").
_LABELS: dict[type, str] = {Step: "step", NodeView: "node", OutputView: "output", Segment: "segment", Block: "block"}


class TraceFormatError(ValueError):
    """A trace file (or string) that is not a readable cgviz trace; the message says why."""


# -- encoding -----------------------------------------------------------------------------------
def to_dict(trace: Trace) -> dict:
    """The trace as plain JSON types; fields equal to their defaults are left out."""
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,  # the layout written is always the current one
        "meta": _encode(trace.meta),
        "steps": [_encode(s) for s in trace.steps],
    }


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if not _is_default(f, v):
                out[f.name] = _encode(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _is_default(f: dataclasses.Field, value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return False
    return type(value) is type(default) and value == default


def dumps(trace: Trace) -> str:
    return json.dumps(to_dict(trace), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Save as JSON, atomically (see write_atomic)."""
    data = to_dict(trace)
    write_atomic(path, lambda fh: json.dump(data, fh, ensure_ascii=False, allow_nan=False, separators=(",", ":")), "trace")


def write_atomic(path: str | os.PathLike, write: Callable[[TextIO], None], what: str = "file") -> None:
    """Write through `write(fh)` to a temp file beside `path`, fsync it, then rename it over
    `path`, so a crash or error mid-write leaves any previous file intact."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot save {what} to {path}: directory {directory} does not exist")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as for open(): umask applies
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError, AttributeError):  # make the rename durable where supported
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# -- decoding -----------------------------------------------------------------------------------
def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a trace file; any problem is a TraceFormatError naming the file."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "trace file not found", path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise TraceFormatError(f"{path}: not a cgviz trace ({problem})") from None
    return loads(text, source=path)


def loads(text: str, source: str = "<string>") -> Trace:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{source}: truncated or not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}, char {exc.pos})"
        ) from None
    try:
        return from_dict(data)
    except TraceFormatError as exc:
        raise TraceFormatError(f"{source}: {exc}") from None


def from_dict(data: Any) -> Trace:
    """Build a Trace from its JSON form, checking every field; raises TraceFormatError."""
    if not isinstance(data, dict):
        raise TraceFormatError(f"not a cgviz trace: the top level is {_kind(data)}, expected an object")
    if data.get("format") != FORMAT:
        found = "no 'format' marker" if "format" not in data else f"format marker is {data['format']!r}"
        raise TraceFormatError(f"not a cgviz trace ({found}, expected {FORMAT!r})")
    version = data.get("schema_version")
    if type(version) is not int or version < 1:
        raise TraceFormatError(f"'schema_version' must be a positive integer, not {version!r}")
    if version > SCHEMA_VERSION:
        raise TraceFormatError(f"written by a newer cgviz (schema {version} > {SCHEMA_VERSION}); upgrade cgviz")
    for key in data:
        if key not in _TOP_KEYS:
            raise TraceFormatError(f"unknown top-level field {key!r}")
    for key in ("meta", "steps"):
        if key not in data:
            raise TraceFormatError(f"missing top-level field {key!r}")
    return Trace(
        steps=_build(list[Step], data["steps"], "", "steps"),
        meta=_build(dict, data["meta"], "", "meta"),
        schema_version=version,
    )


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(tp: Any, value: Any, ctx: str, name: str) -> Any:
    """Check `value` against type `tp` and build it. `ctx` locates the enclosing object
    ("step 5 snapshot node 2"), `name` the field within it ("path[3]")."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, f"{ctx} {name}".strip())
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _build(rest[0], value, ctx, name)
        raise TypeError(f"unsupported union in the trace model: {tp}")
    if origin is Literal:
        if not any(type(value) is type(a) and value == a for a in args):
            choices = ", ".join(repr(a) for a in args)
            _fail(ctx, name, f"must be one of {choices} (got {value!r})")
        return value
    if origin is list or tp is list:
        if type(value) is not list:
            _fail(ctx, name, f"must be an array, not {_kind(value)}")
        item = args[0] if args else Any
        label = _LABELS.get(item)
        if label is not None:  # "step 3", "node 2": the element names itself
            return [_build_dataclass(item, v, f"{ctx} {label} {i}".strip()) for i, v in enumerate(value)]
        return [_build(item, v, ctx, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if type(value) is not dict:
            _fail(ctx, name, f"must be an object, not {_kind(value)}")
        return value
    if tp is Any:
        return value
    if tp is float:
        if type(value) not in (int, float):
            _fail(ctx, name, f"must be a number, not {_kind(value)}")
        return float(value)
    if tp in (int, str, bool):
        if type(value) is not tp:
            _fail(ctx, name, f"must be {_EXPECTED[tp]}, not {_kind(value)}")
        return value
    raise TypeError(f"unsupported type in the trace model: {tp}")


def _build_dataclass(cls: type, value: Any, ctx: str) -> Any:
    if type(value) is not dict:
        raise TraceFormatError(f"{ctx}: must be an object, not {_kind(value)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in value:
        if key not in fields:
            raise TraceFormatError(f"{ctx}: unknown field {key!r}")
    kwargs = {}
    hints = _hints(cls)
    for fname, f in fields.items():
        if fname in value:
            kwargs[fname] = _build(hints[fname], value[fname], ctx, fname)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TraceFormatError(f"{ctx}: missing field {fname!r}")
    obj = cls(**kwargs)
    if isinstance(obj, Step):
        if obj.repeat < 1:
            _fail(ctx, "repeat", f"must be at least 1 (got {obj.repeat})")
        for i, pair in enumerate(obj.invalidated):
            if len(pair) != 2:
                _fail(ctx, f"invalidated[{i}]", f"must be a [node, output] pair (got {pair!r})")
    return obj


_EXPECTED = {int: "an integer", str: "a string", bool: "true or false"}


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number",
             str: "a string", list: "an array", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def _fail(ctx: str, name: str, problem: str) -> typing.NoReturn:
    where = f"{ctx}: " if ctx else ""
    raise TraceFormatError(f"{where}field {name!r} {problem}")
