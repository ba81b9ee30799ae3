"""A Trace as a Chrome Trace Event Format file, for ui.perfetto.dev and chrome://tracing.

The tree's decisions become slices on a timeline, one track per function, so they can be
read beside what the program did at the same time: alone, or merged into a torch profiler
trace of the same run (`torch.profiler.profile(...).export_chrome_trace(path)`), where each
replay lies over the aten ops and kernels it ran.

Clock. `Step.start` is `time.time()` (seconds since the Unix epoch): the clock of torch's
profiler, whose events' `ts` are microseconds since `baseTimeNanoseconds` (a Unix time in
nanoseconds, written in the file; profilers that write none use microseconds since the
epoch). A merged file places cgviz's slices on that base, so both line up.

This module is the export: `to_chrome_trace` (the object, merged or not: one process for the
trace, or one per rank of a merged multi-rank trace) and `write_chrome_trace` (the file). When
each decision happened, measured or estimated where a step's start was not measured (folded
repeats, steps without a clock; a trace with no start at all is laid out back to back from 0,
and `otherData` says so), is `cgviz.trace.chrome_timing`; the events drawn,
`cgviz.trace.chrome_events`; reading the profiler's file, `cgviz.trace.profiler_trace`.

It reads JSON only; it imports no torch.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional, Union

from cgviz.trace.chrome_events import export_info, layout_events
from cgviz.trace.chrome_timing import Layout, expanded_length
from cgviz.trace.io import with_safe_text, write_atomic
from cgviz.trace.model import Trace, require_trace
from cgviz.trace.profiler_trace import load_profiler_trace, profiler_dict

# Above this many decisions, folded blocks are not expanded (one slice per folded step).
MAX_SLICES = 200_000
FOLDED = ("expand", "collapse")


def to_chrome_trace(
    trace: Trace,
    profiler_trace: Union[None, dict, list, str, os.PathLike] = None,
    *,
    folded: str = "expand",
    max_slices: int = MAX_SLICES,
) -> dict:
    """`trace` as a Trace Event Format object; with `profiler_trace` (its dict, or a path),
    that trace with cgviz's events added on its clock, in a process of their own.

    `folded`: "expand" (one slice per occurrence of a folded repeat, while the decisions
    number at most `max_slices`) or "collapse" (one slice per folded step). Raises ValueError
    when merging a trace that has no start times (nothing places it on the profiler's clock),
    ProfilerTraceError for a profiler trace that is not one.
    """
    require_trace(trace, "to_chrome_trace()")
    if folded not in FOLDED:
        raise ValueError(f"folded must be one of {', '.join(map(repr, FOLDED))}, not {folded!r}")
    if type(max_slices) is not int or max_slices < 1:
        raise ValueError(f"max_slices must be a positive integer, not {max_slices!r}")
    trace = with_safe_text(trace)
    if isinstance(profiler_trace, (str, os.PathLike)):
        profiler = load_profiler_trace(profiler_trace)
    elif profiler_trace is not None:
        profiler = profiler_dict(profiler_trace)
    else:
        profiler = None
    expand = folded == "expand" and expanded_length(trace.steps) <= max_slices
    layout = Layout(trace, expand)
    ranks = _rank_layouts(trace, expand) if layout.timed else []
    if profiler is None:
        origin = layout.ref + layout.earliest if layout.timed else None
        offset_us = -layout.earliest * 1e6
        pid, first_tid = 1, 1
        if ranks:  # a merged trace of several ranks: a process per rank, on one clock
            origin = min(r.ref + r.earliest for r in ranks)
            events = [e for k, r in enumerate(ranks)
                      for e in layout_events(r, pid + k, first_tid, (r.ref - origin) * 1e6)]
            return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": export_info(layout, origin)}
    else:
        if trace.steps and not layout.timed:
            raise ValueError(
                "this trace has no step start times (it was saved before cgviz recorded them), so nothing "
                "places its steps on the profiler's clock; export it without a profiler trace"
            )
        base_ns = profiler.get("baseTimeNanoseconds") or 0
        # microseconds from the profiler's base to the reference start, in two parts (exact seconds,
        # then the rest), so that no Unix time is multiplied into a number too large for a float's precision
        whole, rest = divmod(int(base_ns), 1_000_000_000)
        offset_us = ((layout.ref - whole) - rest / 1e9) * 1e6
        origin = None
        pid, first_tid = _free_ids(profiler["traceEvents"])
        if ranks:
            events = [e for k, r in enumerate(ranks)
                      for e in layout_events(r, pid + k, first_tid, ((r.ref - whole) - rest / 1e9) * 1e6)]
            return _merged(profiler, events, export_info(layout, origin))
    events = layout_events(layout, pid, first_tid, offset_us)
    info = export_info(layout, origin)
    if profiler is None:
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": info}
    return _merged(profiler, events, info)


def _rank_layouts(trace: Trace, expand: bool) -> list[Layout]:
    """A layout per rank of a merged multi-rank trace (`cgviz.merge`) whose ranks all have start
    times, in rank order; [] for any other trace."""
    if not isinstance(trace.meta.get("ranks"), list):
        return []
    from cgviz.trace.ranks import rank_traces

    layouts = [Layout(part.trace, expand) for _, part in sorted(rank_traces(trace).items())]
    return layouts if layouts and all(r.timed for r in layouts) else []


def _free_ids(events: list) -> tuple[int, int]:
    """A pid and a first tid that no event of the profiler's uses (its ids are the OS's)."""
    pids = [e["pid"] for e in events if isinstance(e, dict) and type(e.get("pid")) is int]
    tids = [e["tid"] for e in events if isinstance(e, dict) and type(e.get("tid")) is int]
    pid = max(pids, default=0) + 1
    return pid, max(tids + [pid], default=0) + 1


def _merged(profiler: dict, events: list[dict], info: dict) -> dict:
    """The profiler's trace, its fields kept, with cgviz's events after its own."""
    out = dict(profiler)
    out["traceEvents"] = list(profiler["traceEvents"]) + events
    out.setdefault("displayTimeUnit", "ms")
    low, high = _time_range(profiler["traceEvents"])
    ours = [e for e in events if e["ph"] in ("X", "i")]
    if low is not None and ours:
        first, last = min(e["ts"] for e in ours), max(e["ts"] + e.get("dur", 0) for e in ours)
        if last < low or first > high:
            apart = (low - last) if last < low else (first - high)
            seconds = apart / 1e6  # a profiler trace's times may be any number: a huge one in a few digits
            shown = f"{seconds:.3f}" if seconds < 1e9 else f"{seconds:.3g}"
            info["warning"] = (f"cgviz's steps lie {shown} s outside the profiler trace's time range: "
                               "were both recorded in the same run?")
    other = profiler.get("otherData")
    out["otherData"] = {**(other if isinstance(other, dict) else {}), "cgviz": info}
    return out


def _time_range(events: list) -> tuple[Optional[float], Optional[float]]:
    """The first and last microsecond the profiler's events cover (metadata left out)."""
    low = high = None
    for e in events:
        if not isinstance(e, dict) or e.get("ph") == "M":
            continue
        ts, dur = e.get("ts"), e.get("dur", 0)
        if type(ts) not in (int, float) or not math.isfinite(ts):
            continue
        end = ts + (dur if type(dur) in (int, float) and math.isfinite(dur) else 0)
        low = ts if low is None else min(low, ts)
        high = end if high is None else max(high, end)
    return low, high


def write_chrome_trace(data: dict, path: Union[str, os.PathLike]) -> int:
    """Write an exported trace as JSON, atomically (see trace/io.py's write_atomic). A number
    that is NaN or infinite (a profiler trace's, or a time too large for a float) is written as
    null, so the file is JSON whatever it holds; returns how many were."""
    try:
        text, nulls = _json_text(data), 0
    except ValueError as exc:
        if "Out of range float" not in str(exc):  # a circular reference: not ours to mend
            raise
        data, nulls = _finite(data)
        text = _json_text(data)
    write_atomic(path, lambda fh: fh.write(text), "Chrome trace")
    return nulls


def _json_text(data: Any) -> str:
    # ASCII: valid whatever the profiler's strings hold; no NaN or Infinity, which are not JSON
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


def _finite(data: Any) -> tuple[Any, int]:
    """A copy of `data` with each NaN or infinite float as None, and how many there were.
    Iterative: a profiler trace may nest as deep as its reader allowed."""
    nulls = 0
    root = [data]
    stack: list[tuple[Any, Any, Any]] = [(data, root, 0)]
    while stack:
        value, holder, key = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            holder[key] = None
            nulls += 1
        elif isinstance(value, dict):
            holder[key] = copy = dict.fromkeys(value)  # keys in their order; values filled in below
            stack += ((v, copy, k) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            holder[key] = copy = [None] * len(value)
            stack += ((v, copy, i) for i, v in enumerate(value))
        else:
            holder[key] = value
    return root[0], nulls
