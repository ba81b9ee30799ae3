"""The Trace on disk: compact JSON with a format marker and a schema version.

Layout 2 (written now) stores snapshot content once. Every distinct snapshot, node, output,
segment and block (distinct by value) is one entry of its table, and whatever holds one names
it by its index there: a step its snapshot, a node its outputs, a segment its blocks. A
snapshot lists its nodes and segments as a delta against the previous snapshot entry, so a
step that changed one node of a thousand costs a few numbers, not a thousand nodes.
Layout 1 (every step's snapshot written out in full) still loads. docs/trace-format.md
describes both.

Loading checks every field against the dataclass annotations of `cgviz.trace.model`
(one generic validator, so a new field is checked without new code) and reports what
is wrong, and where, in a `TraceFormatError` naming the file. A table entry is checked
where it is first used, so messages name the step ("step 4 snapshot node 2 output 0").
Values that would load and then fail later are refused too: a lone surrogate in a string
(it cannot be written as UTF-8), NaN or an infinite number, an integer too long to convert,
a repeated block (`span`) reaching before the first step, nesting too deep to read.

The keys of `meta` that cgviz reads and that have a structure (a profile, a merged trace's
ranks, device and graph names, counts) and an output's `values` are checked the same way, as
the views use them; the rest of `meta` is free-form.

Reading a file (`read_file`, also used for torch profiler traces) takes regular files only: a
directory, FIFO, device or socket is refused before it is opened, so nothing blocks or reads
without end, and a file over `MAX_FILE_BYTES` (512 MiB; the environment variable
CGVIZ_MAX_FILE_MB sets another limit) is refused before it is read and cut off if it grows
past the limit while it is read.

A step's `rank` (set only in a merged multi-rank trace, see cgviz/trace/ranks.py) and `device`
(set only where one process ran trees on several devices) are optional like every field with a
default: a trace of one rank on one device is written without them, and files written before
they existed load unchanged.

Saving writes every string through `safe_text`, so a lone surrogate from user code (an
exception message) is written as its escape text and the trace stays savable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import secrets
import stat
import sys
import types
import typing
from functools import lru_cache
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not, not_
from typing import Any, Callable, Iterable, Iterator, Literal, Optional, TextIO, Union

from cgviz.trace.model import (
    SCHEMA_VERSION, Block, GraphView, NodeView, OutputView, Segment, Snapshot, Step, Trace, safe_text,
)

FORMAT = "cgviz-trace"
_TOP_KEYS = {
    1: ("format", "schema_version", "meta", "steps"),
    2: ("format", "schema_version", "meta", "tables", "steps"),
}
# Written only when there is something in them (a trace without them reads as before).
_OPTIONAL_TOP_KEYS = {2: ("graphs",)}
# Layout 2: the classes stored once per distinct value, each in its table (holders before parts).
_TABLES: dict[type, str] = {
    Snapshot: "snapshots", NodeView: "nodes", OutputView: "outputs", Segment: "segments", Block: "blocks"
}
# How an element of a list of these dataclasses is named in messages ("step 3", "node 2").
_LABELS: dict[type, str] = {
    Step: "step", NodeView: "node", OutputView: "output", Segment: "segment", Block: "block", GraphView: "graph",
}
_PLAIN = (str, int, float, bool, type(None))
_COMPACT: dict[str, Any] = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
# An entry's canonical form, by which equal objects find one entry: its JSON text. One encoder
# made once, since json.dumps() with options makes a new one on every call.
_canonical = json.JSONEncoder(check_circular=False, **_COMPACT).encode
_SURROGATE = re.compile("[\ud800-\udfff]")
# How deep the free-form `meta` may nest: deeper would load, then fail to save (RecursionError).
META_DEPTH = 100


class TraceFormatError(ValueError):
    """A trace file (or string) that is not a readable cgviz trace; the message says why."""


# -- the model's fields, as the encoder and the validator see them -------------------------------
@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class _Field(typing.NamedTuple):
    type: Any
    required: bool
    default: Any
    table_item: Optional[type]  # X when the type is list[X] of a table class: a list of references


@lru_cache(maxsize=None)
def _fields(cls: type) -> dict[str, _Field]:
    """The init fields of a model dataclass by name, worked out once per class: loading and
    saving visit them for every object of a large trace."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = _hints(cls)[f.name]
        args = typing.get_args(tp)
        item = args[0] if typing.get_origin(tp) is list and args and args[0] in _TABLES else None
        if f.default is not dataclasses.MISSING:
            required, default = False, f.default
        elif f.default_factory is not dataclasses.MISSING:
            required, default = False, f.default_factory()
        else:
            required, default = True, None
        out[f.name] = _Field(tp, required, default, item)
    return out


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


# Snapshot fields written as deltas against the previous snapshot entry: its reference lists.
_DELTA_FIELDS: tuple[str, ...] = tuple(name for name, f in _fields(Snapshot).items() if f.table_item)


# -- encoding -----------------------------------------------------------------------------------
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
        self.tables: dict[str, list] = {name: [] for name in _TABLES.values()}
        self._entries: dict[str, dict[str, int]] = {name: {} for name in _TABLES.values()}
        self._memo: dict[int, int] = {}  # id(object) -> its entry; the trace keeps the objects alive
        self._base: dict[str, list[int]] = {name: [] for name in _DELTA_FIELDS}  # previous snapshot entry's
        self._last: dict[tuple[type, str], tuple[list, list[int]]] = {}  # (class, field) -> items, references

    def encode(self, value: Any) -> Any:
        if type(value) in _PLAIN:
            return value
        table = _TABLES.get(type(value))
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
        for name, f in _fields(type(obj)).items():
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
        for name in _DELTA_FIELDS:
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
    return _json_safe(json.dumps(to_dict(trace), **_COMPACT))


def _json_safe(text: str) -> str:
    """JSON text with each lone surrogate (left raw by `ensure_ascii=False`) replaced by the
    JSON form of its `safe_text` escape: text that UTF-8 cannot encode could not be saved."""
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda m: json.dumps(safe_text(m.group()))[1:-1], text)


def with_safe_text(trace: Trace) -> Trace:
    """`trace` itself when all its text can be written as UTF-8, else a copy with every string
    passed through `safe_text`, so that views can draw it and pages holding it can be written."""
    return _safe_copy(trace, {}) if _holds_surrogate(trace) else trace


def _holds_surrogate(trace: Trace) -> bool:
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
                if not text.isascii() and _SURROGATE.search(text):
                    return True
            elif kind is list or kind is tuple:
                inner += _new_items(of_kind)
            elif kind is dict:
                inner += chain.from_iterable(of_kind)
                inner += chain.from_iterable(map(dict.values, of_kind))
            elif kind in _MODEL:
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
_MODEL: dict[type, tuple[str, ...]] = {
    cls: tuple(_fields(cls)) for cls in (Step, Snapshot, NodeView, OutputView, Segment, Block, GraphView)
}
_FIELD_VALUES = {cls: attrgetter(*names) for cls, names in _MODEL.items()}  # each has several: a tuple
_WALKED = {str, list, tuple, dict, *_MODEL}  # the types whose objects are or hold strings


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
                value, **{name: _safe_copy(getattr(value, name), memo) for name in _fields(kind)})
        return memo[id(value)]
    return value


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Save as JSON, atomically (see write_atomic)."""
    text = dumps(trace)  # one string: json.dump() to a file encodes in pure Python, several times slower
    write_atomic(path, lambda fh: fh.write(text), "trace")


def write_atomic(path: str | os.PathLike, write: Callable[[TextIO], None], what: str = "file") -> None:
    """Write through `write(fh)` to a temp file beside the target, fsync it, then rename it over
    the target, so a crash or error mid-write leaves any previous file intact.

    The target is `path`, or the file a symbolic link at `path` points to (the link stays a
    link). An existing target must be a writable regular file, and keeps its permission bits;
    anything else (a directory, a FIFO, a device, a read-only file) is refused before anything
    is written, since renaming over it would silently replace it. Errors name the target.
    """
    target, mode = _save_target(path, what)
    directory = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as for open(): umask applies
    except OSError as exc:
        raise _naming(exc, target) from None
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as fh:
            if mode is not None:
                os.chmod(tmp, mode)  # the file replaced keeps its permission bits
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, target) from None
        raise
    with contextlib.suppress(OSError, AttributeError):  # make the rename durable where supported
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def check_save_target(path: str | os.PathLike, what: str = "file") -> None:
    """Raise now what `write_atomic(path, ...)` would refuse, before work whose result it
    would write (an HTML page can take a while to build)."""
    _save_target(path, what)


def _save_target(path: str | os.PathLike, what: str) -> tuple[str, Optional[int]]:
    """The file a save to `path` writes (`path`, or a symbolic link's target) and the permission
    bits of the file there (None when there is none yet); raises when it must not be replaced."""
    path = os.fspath(path)
    target = os.path.realpath(path) if os.path.islink(path) else path
    shown = target if target == path else f"{target} (the target of the link {path})"
    return target, _replaceable(target, shown, what)


_NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _replaceable(target: str, shown: str, what: str) -> Optional[int]:
    """The permission bits of the file at `target`, or None when there is none yet; raises
    (naming `shown`) when a save must not go there."""
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise NotADirectoryError(f"cannot save {what} to {shown}: {directory} is not a directory")
        raise FileNotFoundError(f"cannot save {what} to {shown}: directory {directory} does not exist")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a loop of symbolic links, ...
        raise _naming(exc, target) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"cannot save {what} to {shown}: it is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _NOT_REGULAR if test(st.st_mode)), "a special file")
        raise OSError(f"cannot save {what} to {shown}: it is {kind}, not a regular file")
    if st is not None and (not st.st_mode & 0o222 or not os.access(target, os.W_OK)):
        raise PermissionError(f"cannot save {what} to {shown}: the file is read-only (left unchanged)")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot save {what} to {shown}: directory {directory} is not writable")
    return None if st is None else stat.S_IMODE(st.st_mode)


def _naming(exc: OSError, target: str) -> OSError:
    """`exc` as raised for `target`: an OS error about the temp file or an unnamed one (a full
    disk) names the file the caller asked for instead."""
    if exc.errno is None or not exc.strerror:
        return exc
    return type(exc)(exc.errno, exc.strerror, target)


# -- reading a user's file ------------------------------------------------------------------------
# The most a file given to cgviz (a trace, a profiler trace, what a gzipped one decompresses to)
# may hold. It is checked before reading (the file's size) and while reading (a file that grows,
# or one whose size says nothing, such as those of /proc), so no file makes cgviz read without
# end. The environment variable raises or lowers it, in MiB.
MAX_FILE_BYTES = 512 << 20
MAX_FILE_ENV = "CGVIZ_MAX_FILE_MB"
_CHUNK = 1 << 20


def max_file_bytes(error: type[Exception] = ValueError) -> int:
    """The limit on what a file read may hold: `MAX_FILE_BYTES`, or CGVIZ_MAX_FILE_MB (MiB) when set."""
    text = os.environ.get(MAX_FILE_ENV, "").strip()
    if not text:
        return MAX_FILE_BYTES
    try:
        mib = float(text)
    except ValueError:
        mib = math.nan
    if not (math.isfinite(mib) and mib > 0):
        raise error(f"{MAX_FILE_ENV} must be a positive number of MiB, not {text!r}")
    return max(1, int(mib * (1 << 20)))


def _mib(n: int) -> str:
    """4294967296 -> '4096 MiB', 10485 -> '0.01 MiB'."""
    return f"{n / (1 << 20):.3g} MiB" if n < 100 << 20 else f"{n / (1 << 20):.0f} MiB"


def read_file(path: str | os.PathLike, what: str, error: type[Exception]) -> bytes:
    """The bytes of the regular file at `path` (a symbolic link is followed), `what` naming it in
    messages ("trace").

    Anything else is refused before it is opened, since reading it could block (a FIFO, a socket)
    or never end (/dev/zero): `IsADirectoryError` or `OSError` "cannot read trace P: it is a FIFO,
    not a regular file". A file over `max_file_bytes()` raises `error` ("P: too large ...") before
    it is read, and one that turns out to hold more while it is read is cut there. The file is
    opened non-blocking and checked again once open, in case it was replaced in between.
    """
    path = os.fspath(path)
    limit = max_file_bytes(error)
    _check_regular(os.stat(path), path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb", buffering=0) as fh:
        st = os.fstat(fd)
        _check_regular(st, path, what)
        if st.st_size > limit:
            raise error(f"{path}: too large to read as a {what}: {_mib(st.st_size)}, more than the limit of "
                        f"{_mib(limit)} (set {MAX_FILE_ENV} to read larger files)")
        return _read_at_most(fh.read, st.st_size, limit, lambda: error(
            f"{path}: grew past the limit of {_mib(limit)} while being read (set {MAX_FILE_ENV} to read larger files)"))


def _read_at_most(read: Callable[[int], bytes], expected: int, limit: int, too_much: Callable[[], Exception]) -> bytes:
    """Everything `read(n)` gives until it gives nothing, raising `too_much()` past `limit` bytes.
    The first read asks for `expected` bytes and one more, later ones for a chunk: memory follows
    what is there, not the limit."""
    chunks: list[bytes] = []
    total, want = 0, min(expected, limit) + 1
    while True:
        chunk = read(min(max(want - total, _CHUNK), limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise too_much()


def decompressed(raw: bytes, path: str, what: str, error: type[Exception]) -> bytes:
    """The content of gzip data `raw` (of the file `path`), refused past `max_file_bytes()`."""
    import gzip
    import zlib
    from io import BytesIO

    limit = max_file_bytes(error)
    try:
        with gzip.GzipFile(fileobj=BytesIO(raw)) as fh:
            return _read_at_most(fh.read, len(raw), limit, lambda: error(
                f"{path}: too large to read as a {what}: it decompresses to more than the limit of {_mib(limit)} "
                f"(set {MAX_FILE_ENV} to read larger files)"))
    except (OSError, EOFError, zlib.error) as exc:
        raise error(f"{path}: not a {what} (a damaged gzip file: {exc})") from None


def _check_regular(st: os.stat_result, path: str, what: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"cannot read {what} {path}: it is a directory")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _NOT_REGULAR if test(st.st_mode)), "a special file")
        raise OSError(f"cannot read {what} {path}: it is {kind}, not a regular file")


# -- decoding -----------------------------------------------------------------------------------
def load_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a trace file; any problem is a TraceFormatError naming the file. A
    directory, FIFO, device or socket is refused unread (OSError), and so is a file larger
    than `MAX_FILE_BYTES` (see `read_file`)."""
    path = os.fspath(path)
    try:
        raw = read_file(path, "trace", TraceFormatError)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "trace file not found", path) from None
    try:
        text = raw.decode("utf-8")
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
    `_Unreadable` markers, so that the builder reports them with the field that holds them."""
    try:
        return json.loads(text, parse_constant=_Unreadable.constant)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{source}: truncated or not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}, char {exc.pos})"
        ) from None
    except RecursionError:
        raise TraceFormatError(f"{source}: {_TOO_DEEP}") from None
    except ValueError:  # an integer longer than int() converts: parse again (the slow way) marking it
        return json.loads(text, parse_constant=_Unreadable.constant, parse_int=_Unreadable.integer)


_TOO_DEEP = "not a cgviz trace (arrays and objects nested too deeply to read: Python's recursion limit reached)"


class _Unreadable:
    """A value Python's json reads but a trace cannot hold: NaN or Infinity (not JSON, and
    refused when saving) or an integer of more digits than int() converts."""

    __slots__ = ("kind", "problem")

    def __init__(self, kind: str, problem: str) -> None:
        self.kind, self.problem = kind, problem

    def __repr__(self) -> str:
        return self.kind

    @classmethod
    def constant(cls, name: str) -> "_Unreadable":
        return cls(name, f"is {name}, which is not a JSON number (a trace holds finite numbers only)")

    @classmethod
    def integer(cls, digits: str) -> Any:
        try:
            return int(digits)
        except ValueError:
            n, limit = len(digits.lstrip("-")), sys.get_int_max_str_digits()
            return cls(f"a {n}-digit integer", f"is an integer of {n} digits, more than the {limit} Python converts")


def from_dict(data: Any) -> Trace:
    """Build a Trace from its JSON form (any layout up to the current one), checking every field;
    raises TraceFormatError."""
    try:
        version = _check_top_level(data)
        reader = _Reader(_tables(data["tables"]) if "tables" in _TOP_KEYS[version] else None)
        steps = reader.build(list[Step], data["steps"], "", "steps")
        _check_spans(steps)
        reader.check_unused_entries()
        meta = reader.build(dict, data["meta"], "", "meta")
        _check_meta(meta, "meta")
        graphs = reader.build(list[GraphView], data.get("graphs", []), "", "graphs")
        _check_graphs(graphs, steps)
        return Trace(steps=steps, meta=meta, schema_version=version, graphs=graphs)
    except RecursionError:
        raise TraceFormatError(_TOO_DEEP) from None


def _check_top_level(data: Any) -> int:
    """The schema version, once the top level is an object with the fields that version has."""
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
    keys = _TOP_KEYS[version]
    for key in data:
        if key not in keys and key not in _OPTIONAL_TOP_KEYS.get(version, ()):
            raise TraceFormatError(f"unknown top-level field {key!r}")
    for key in keys:
        if key not in data:
            raise TraceFormatError(f"missing top-level field {key!r}")
    return version


def _tables(value: Any) -> dict[str, list]:
    """The 'tables' object of layout 2: exactly one array per table."""
    if type(value) is not dict:
        _fail("", "tables", f"must be an object, not {_kind(value)}")
    for name in value:
        if name not in _TABLES.values():
            raise TraceFormatError(f"tables: unknown table {name!r}")
    for name in _TABLES.values():
        if name not in value:
            raise TraceFormatError(f"tables: missing table {name!r}")
        if type(value[name]) is not list:
            _fail("tables", name, f"must be an array, not {_kind(value[name])}")
    return value


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

    def build(self, tp: Any, value: Any, ctx: str, name: str) -> Any:
        """Check `value` against type `tp` and build it. `ctx` locates the enclosing object
        ("step 5 snapshot node 2"), `name` the field within it ("path[3]")."""
        kind, arg = _shape(tp)
        if kind == "scalar":
            if type(value) is not arg:
                _fail(ctx, name, _wrong_type(value, _EXPECTED[arg]))
            if arg is str and not value.isascii():
                _check_text(value, ctx, name)
            return value
        if kind == "optional":
            return None if value is None else self.build(arg, value, ctx, name)
        if kind == "list":
            return self._build_list(arg, value, ctx, name)
        if kind == "literal":
            if not any(type(value) is type(a) and value == a for a in arg):
                choices = ", ".join(repr(a) for a in arg)
                _fail(ctx, name, f"must be one of {choices} (got {value!r})")
            return value
        if kind == "dataclass":
            where = f"{ctx} {name}".strip()
            if self.tables is not None and arg in _TABLES:
                return self._resolve(arg, value, ctx, name, where)
            return self._build_dataclass(arg, value, where)
        if kind == "float":
            if type(value) not in (int, float):
                _fail(ctx, name, _wrong_type(value, "a number"))
            if not math.isfinite(value):
                _fail(ctx, name, f"must be a finite number, not {value!r}")
            return float(value)
        if kind == "dict" and type(value) is not dict:
            _fail(ctx, name, f"must be an object, not {_kind(value)}")
        _check_free_form(value, ctx, name)
        return value  # a dict, or Any

    def _build_list(self, item: Any, value: Any, ctx: str, name: str) -> list:
        if type(value) is not list:
            _fail(ctx, name, f"must be an array, not {_kind(value)}")
        label = _LABELS.get(item)
        if label is None:
            return [self.build(item, v, ctx, f"{name}[{i}]") for i, v in enumerate(value)]
        if self.tables is not None and item in _TABLES:  # references: "node 2" is built where first used
            return [self._resolve(item, v, ctx, f"{name}[{i}]", f"{ctx} {label} {i}") for i, v in enumerate(value)]
        return [self._build_dataclass(item, v, f"{ctx} {label} {i}".strip()) for i, v in enumerate(value)]

    def _build_dataclass(self, cls: type, value: Any, ctx: str) -> Any:
        if type(value) is not dict:
            raise TraceFormatError(f"{ctx}: must be an object, not {_kind(value)}")
        spec = _fields(cls)
        for key in value:
            if key not in spec:
                raise TraceFormatError(f"{ctx}: unknown field {key!r}")
        kwargs = {}
        for name, f in spec.items():
            if name in value:
                if cls is Snapshot and self.tables is not None and name in _DELTA_FIELDS:
                    kwargs[name] = self._apply_delta(f.table_item, value[name], ctx, name)
                else:
                    kwargs[name] = self.build(f.type, value[name], ctx, name)
            elif f.required:
                raise TraceFormatError(f"{ctx}: missing field {name!r}")
        obj = cls(**kwargs)
        if cls is Step:
            _check_step(obj, ctx)
        elif cls is OutputView and obj.values is not None:
            _check_values(obj.values, ctx)
        return obj

    def _resolve(self, cls: type, ref: Any, ctx: str, name: str, where: str) -> Any:
        """The object of entry `ref` of `cls`'s table, built (as `where`) when first used;
        `ctx` and `name` locate the reference itself."""
        table = _TABLES[cls]
        built = self.built[table]
        if type(ref) is not int:
            _fail(ctx, name, f"must be a reference to an entry of the {table} table (an integer), not {_kind(ref)}")
        if not 0 <= ref < len(built):
            _fail(ctx, name, f"refers to entry {ref} of the {table} table, which has {len(built)} entries")
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
            _fail(ctx, name, f"must be an array, not {_kind(ops)}")
        previous = self.built["snapshots"][self._snapshots - 1] if self._snapshots else None
        base = getattr(previous, name) if previous is not None else []
        label, out = _LABELS[cls], []
        for i, op in enumerate(ops):
            if type(op) is list:
                if not (len(op) == 2 and type(op[0]) is int and type(op[1]) is int
                        and op[0] >= 0 and op[1] >= 1 and op[0] + op[1] <= len(base)):
                    _fail(ctx, f"{name}[{i}]", f"must be a reference or a run [start, count] within the previous "
                          f"snapshot's {len(base)} {name} (got {op!r})")
                out += base[op[0] : op[0] + op[1]]
            else:
                out.append(self._resolve(cls, op, ctx, f"{name}[{i}]", f"{ctx} {label} {len(out)}"))
        return out

    def check_unused_entries(self) -> None:
        """Check the entries no step used as well: the file is valid as a whole or not at all."""
        if self.tables is None:
            return
        for cls, table in _TABLES.items():  # holders first, so a part is named by its holder
            for ref, obj in enumerate(self.built[table]):
                if obj is None:
                    self._resolve(cls, ref, "", "", f"{table} table entry {ref}")


def _check_spans(steps: list[Step]) -> None:
    """A step's `span` counts the steps of the repeated block ending at it, so it lies within
    the steps up to it: anything else would index past the first step when the trace is used."""
    same_rank_from = 0  # where the run of steps of step i's rank began (merged traces: one rank per block)
    for i, step in enumerate(steps):
        if not 1 <= step.span <= i + 1:
            _fail(f"step {i}", "span", f"must be from 1 to {i + 1}: a block of steps ending at step {i} cannot start "
                  f"before step 0 (got {step.span})")
        if i and step.rank != steps[i - 1].rank:
            same_rank_from = i
        if step.repeat > 1 and i - step.span + 1 < same_rank_from:
            _fail(f"step {i}", "span", f"covers steps of another rank: a folded block is one rank's (got {step.span})")


def _check_text(text: str, ctx: str, name: str, subject: str = "") -> None:
    """Refuse a string holding a lone surrogate (a JSON escape such as \\ud800 read alone):
    UTF-8 cannot encode it, so the trace could be loaded but not rendered or saved."""
    found = _SURROGATE.search(text)
    if found:
        _fail(ctx, name, f"{subject}must be valid Unicode text, but holds the lone surrogate {found.group()!r} "
                         f"at character {found.start()}")


def _check_free_form(value: Any, ctx: str, name: str) -> None:
    """Check free-form JSON (`meta`) for what would load but fail later: lone surrogates, NaN
    and infinite numbers, integers too long, nesting too deep to save. Iterative, since the
    nesting is what may be too deep."""
    stack = [(value, name, 0)]
    while stack:
        item, where, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii():
                _check_text(item, ctx, where)
        elif kind is float:
            if not math.isfinite(item):
                _fail(ctx, where, f"must be a finite number, not {item!r}")
        elif kind is dict or kind is list:
            if depth == META_DEPTH:
                _fail(ctx, name, f"nests deeper than {META_DEPTH} levels of arrays and objects")
            for key, v in item.items() if kind is dict else enumerate(item):
                if kind is dict and type(key) is str and not key.isascii():
                    _check_text(key, ctx, where, "has a key that ")
                label = json.dumps(key, ensure_ascii=False) if kind is dict else key
                stack.append((v, f"{where}[{label}]", depth + 1))
        elif isinstance(item, _Unreadable):
            _fail(ctx, where, item.problem)


def _check_step(step: Step, ctx: str) -> None:
    if step.repeat < 1:
        _fail(ctx, "repeat", f"must be at least 1 (got {step.repeat})")
    if step.rank is not None and step.rank < 0:
        _fail(ctx, "rank", f"must be a rank number, 0 or more (got {step.rank})")
    if step.device is not None and not _DEVICE.fullmatch(step.device):
        _fail(ctx, "device", f"must name a device as torch does, like 'cuda:1' (got {step.device!r})")
    for i, pair in enumerate(step.invalidated):
        if len(pair) != 2:
            _fail(ctx, f"invalidated[{i}]", f"must be a [node, output] pair (got {pair!r})")


def _check_graphs(graphs: list[GraphView], steps: list[Step]) -> None:
    """The graphs' ids are distinct, their counts sane and their kernels [name, count] pairs; every
    step that names a graph names one of them."""
    ids: set[int] = set()
    for i, g in enumerate(graphs):
        ctx = f"graph {i}"
        if g.id in ids:
            _fail(ctx, "id", f"is used by another graph too (got {g.id})")
        ids.add(g.id)
        for name in ("stream", "pool", "memory", "replays", "used", "padded"):
            _check_count(getattr(g, name), ctx, name)
        if g.pool_bytes is not None:
            _check_count(g.pool_bytes, ctx, "pool_bytes")
        if g.batch is not None:
            _check_positive(g.batch, ctx, "batch")
        if g.used > g.padded:
            _fail(ctx, "used", f"counts more rows in use ({g.used}) than were replayed ({g.padded})")
        for name in ("replay_us", "capture_ms"):
            value = getattr(g, name)
            if value is not None and value < 0:
                _fail(ctx, name, f"must be a duration, 0 or more (got {value})")
        for k, entry in enumerate(g.kernels or []):
            if not (type(entry) is list and len(entry) == 2 and type(entry[0]) is str and type(entry[1]) is int
                    and entry[1] >= 1):
                _fail(ctx, f"kernels[{k}]", f"must be a [kernel name, count] pair (got {_short(entry)})")
    for i, step in enumerate(steps):
        if step.graph is not None and step.graph not in ids:
            _fail(f"step {i}", "graph", f"names graph {step.graph}, which the trace's graphs do not hold")


# -- the free-form fields cgviz reads: meta's keys with a structure, an output's values ------------
# Each is checked as the views and commands use it, after the free-form check (so numbers here
# are finite and text is valid); keys cgviz does not read are left as they are.
def _check_meta(meta: dict, ctx: str) -> None:
    """The keys of a trace's meta (or a rank's meta in a merged trace) that cgviz reads."""
    for key, check in _META_CHECKS.items():
        if key in meta:
            check(meta[key], ctx, key)


def _check_profile(profile: Any, ctx: str, name: str) -> None:
    """`meta["profile"]` (Tree(profile=True), observe_torch): per node id (text), an entry of its
    function, kind, kernels ([[name, count], ...]) and times in µs (see cgviz/engine/profile.py)."""
    if type(profile) is not dict:
        _fail(ctx, name, f"must be an object of profile entries by node id, not {_kind(profile)}")
    for node, entry in profile.items():
        where = f"{ctx} {name} entry {json.dumps(node, ensure_ascii=False)}"
        if type(entry) is not dict:
            raise TraceFormatError(f"{where}: must be an object, not {_kind(entry)}")
        for key in ("function", "kind", "clock"):
            if key in entry and type(entry[key]) is not str:
                _fail(where, key, f"must be a string, not {_kind(entry[key])}")
        for key in ("replay_us", "eager_us"):
            value = entry.get(key)
            if value is not None and (type(value) not in (int, float) or value < 0):
                _fail(where, key, f"must be null or a number of microseconds, 0 or more, {_not(value)}")
        for key in ("replays_timed", "eager_runs_timed"):
            if key in entry:
                _check_count(entry[key], where, key)
        if "eager_is_first_call" in entry and type(entry["eager_is_first_call"]) is not bool:
            _fail(where, "eager_is_first_call", f"must be true or false, not {_kind(entry['eager_is_first_call'])}")
        kernels = entry.get("kernels")
        if kernels is None:
            continue
        if type(kernels) is not list:
            _fail(where, "kernels", f"must be null or an array of [kernel name, count] pairs, not {_kind(kernels)}")
        for i, pair in enumerate(kernels):
            if not (type(pair) is list and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is int
                    and pair[1] >= 0):
                _fail(where, f"kernels[{i}]", f"must be a [kernel name, count] pair (got {_short(pair)})")


def _check_ranks(ranks: Any, ctx: str, name: str) -> None:
    """`meta["ranks"]` of a merged trace (cgviz/trace/ranks.py): each rank's meta, checked as a meta."""
    if type(ranks) is not list:
        _fail(ctx, name, f"must be an array of objects (each rank's meta), not {_kind(ranks)}")
    for i, meta in enumerate(ranks):
        where = f"{ctx} {name}[{i}]"
        if type(meta) is not dict:
            raise TraceFormatError(f"{where}: must be an object, not {_kind(meta)}")
        _check_meta(meta, where)


def _check_strings(value: Any, ctx: str, name: str) -> None:
    if type(value) is not list:
        _fail(ctx, name, f"must be an array of strings, not {_kind(value)}")
    for i, item in enumerate(value):
        if type(item) is not str:
            _fail(ctx, f"{name}[{i}]", f"must be a string, not {_kind(item)}")


def _check_count(value: Any, ctx: str, name: str) -> None:
    if type(value) is not int or value < 0:
        _fail(ctx, name, f"must be a count (0 or more), {_not(value)}")


def _check_positive(value: Any, ctx: str, name: str) -> None:
    if type(value) is not int or value < 1:
        _fail(ctx, name, f"must be a positive count, {_not(value)}")


_META_CHECKS: dict[str, Callable[[Any, str, str], None]] = {
    "profile": _check_profile,
    "ranks": _check_ranks,
    "rank": _check_count,
    "local_rank": _check_count,
    "world_size": _check_positive,
    "devices": _check_strings,  # trees on several devices of one process: their names
    "compiled_before_observing": _check_strings,  # graph names
    "cudagraph_skips_before_observing": _check_count,
}
# What profile.value_summary writes for a number that is not finite.
_NOT_FINITE_TEXT = ("nan", "inf", "-inf")


def _check_values(values: dict, ctx: str) -> None:
    """An output's `values` (Tree(values=True); cgviz/engine/profile.py's value_summary)."""
    for key in ("n", "true", "nan", "inf"):
        if key in values:
            _check_count(values[key], ctx, f"values.{key}")
    head = values.get("head", [])
    if type(head) is not list:
        _fail(ctx, "values.head", f"must be an array, not {_kind(head)}")
    for i, v in enumerate(head):
        if type(v) not in (int, float, bool) and v not in _NOT_FINITE_TEXT:
            _fail(ctx, f"values.head[{i}]", f"must be a number or true or false, not {_kind(v)}")
    for key in ("min", "max", "mean"):
        v = values.get(key, 0)
        if type(v) not in (int, float) and v not in _NOT_FINITE_TEXT:
            _fail(ctx, f"values.{key}", f"must be a number, not {_kind(v)}")


def _not(value: Any) -> str:
    """'not a string' for a value of the wrong type, '(got -1)' for one out of range."""
    return f"not {_kind(value)}" if type(value) not in (int, float) else f"(got {value!r})"


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


_DEVICE = re.compile(r"[a-z]+(:\d+)?")
_EXPECTED = {int: "an integer", str: "a string", bool: "true or false"}


def _wrong_type(value: Any, expected: str) -> str:
    """Why `value` cannot be a field's value: its own problem for an unreadable number."""
    if isinstance(value, _Unreadable):
        return value.problem
    return f"must be {expected}, not {_kind(value)}"


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number",
             str: "a string", list: "an array", dict: "an object"}
    if isinstance(value, _Unreadable):
        return value.kind
    return names.get(type(value), type(value).__name__)


def _fail(ctx: str, name: str, problem: str) -> typing.NoReturn:
    where = f"{ctx}: " if ctx else ""
    raise TraceFormatError(f"{where}field {name!r} {problem}")
