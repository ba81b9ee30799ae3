"""Reading a torch profiler trace: the Chrome trace JSON that
`torch.profiler.profile(...).export_chrome_trace(path)` writes, plain or gzipped.

`cgviz.trace.chrome_trace` merges cgviz's steps into it; this module only reads and checks the
file, with errors that say what is wrong with it (`ProfilerTraceError`), so that the export
never meets a file it cannot use. It reads JSON only; it imports no torch.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Union

from cgviz.trace.io import decompressed, read_file


class ProfilerTraceError(ValueError):
    """A file given as a profiler trace that is not a Chrome trace; the message says why."""


def load_profiler_trace(path: Union[str, os.PathLike]) -> dict:
    """Read a Chrome trace written by torch's profiler (plain or gzipped JSON). NaN and Infinity,
    which Python writes but JSON has not, are read as null (see `read_profiler_trace`)."""
    return read_profiler_trace(path)[0]


def read_profiler_trace(path: Union[str, os.PathLike]) -> tuple[dict, int]:
    """The profiler trace at `path`, and how many of its numbers were NaN or Infinity, read as
    null so that the merged file is JSON. Like a trace, a profiler trace must be a regular file
    of at most `cgviz.trace.io.MAX_FILE_BYTES` (decompressed, for a gzipped one)."""
    path = os.fspath(path)
    try:
        raw = read_file(path, "profiler trace", ProfilerTraceError)
    except FileNotFoundError:
        raise FileNotFoundError(2, "profiler trace not found", path) from None
    if raw[:2] == b"\x1f\x8b":
        raw = decompressed(raw, path, "Chrome trace", ProfilerTraceError)
    nulls = [0]

    def as_null(name: str) -> None:  # NaN, Infinity, -Infinity
        nulls[0] += 1

    try:
        data = json.loads(raw.decode("utf-8-sig"), parse_constant=as_null)  # a byte order mark is not the JSON's
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise ProfilerTraceError(f"{path}: not a Chrome trace ({problem})") from None
    except json.JSONDecodeError as exc:
        raise ProfilerTraceError(
            f"{path}: not a Chrome trace (truncated or not JSON: {exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise ProfilerTraceError(f"{path}: not a Chrome trace (nested too deeply to read)") from None
    except ValueError as exc:  # an integer longer than Python converts
        raise ProfilerTraceError(f"{path}: not a Chrome trace ({exc})") from None
    try:
        return profiler_dict(data), nulls[0]
    except ProfilerTraceError as exc:
        raise ProfilerTraceError(f"{path}: {exc}") from None


def profiler_dict(data: Any) -> dict:
    """The profiler trace in the JSON object form (`traceEvents` holding a list of events)."""
    if isinstance(data, list):  # the JSON array form: the events alone
        data = {"traceEvents": data}
    if not isinstance(data, dict):
        raise ProfilerTraceError(f"not a Chrome trace (the top level is {type(data).__name__}, expected an object)")
    events = data.get("traceEvents")
    if not isinstance(events, list):
        found = "no 'traceEvents'" if "traceEvents" not in data else f"'traceEvents' is {type(events).__name__}"
        raise ProfilerTraceError(f"not a Chrome trace ({found}, expected a list of events)")
    base = data.get("baseTimeNanoseconds")
    if base is not None and (type(base) not in (int, float) or not math.isfinite(base)):
        raise ProfilerTraceError(f"'baseTimeNanoseconds' must be a number, not {base!r}")
    return data
