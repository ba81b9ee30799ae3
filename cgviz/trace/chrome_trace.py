"""A Trace as a Chrome Trace Event Format file, for ui.perfetto.dev and chrome://tracing.

The tree's decisions become slices on a timeline, one track per function, so they can be
read beside what the program did at the same time: alone, or merged into a torch profiler
trace of the same run (`torch.profiler.profile(...).export_chrome_trace(path)`), where each
replay lies over the aten ops and kernels it ran.

Clock. `Step.start` is `time.time()` (seconds since the Unix epoch): the clock of torch's
profiler, whose events' `ts` are microseconds since `baseTimeNanoseconds` (a Unix time in
nanoseconds, written in the file; profilers that write none use microseconds since the
epoch). A merged file places cgviz's slices on that base, so both line up.

Where a step's start was not measured, it is estimated (arg `"estimated": true`):

- Folded repeats (`folded="expand"`, the default) are expanded, one slice per occurrence
  (args `"folded": true`, `occurrence`, `repeat`). A folded block keeps only its first
  occurrence's start, so that one is measured; each later occurrence is laid out as the
  first one was, its steps lasting their average duration, and the occurrences are spread
  evenly (the same idle time before each) between the end of the first and the next step
  with a measured start. A steady loop comes out as it ran; an irregular one does not,
  which is why they are marked. With `folded="collapse"` (and above
  `max_slices` decisions) each folded step is one slice lasting its total duration, the
  block's steps one after another from its first start.
- Other steps without a start (replays torch.compile's observer notes without a clock) are
  spread the same way between their measured neighbours.
- A trace with no start at all (saved before starts were recorded) is laid out back to back
  from 0 by the steps' durations; `otherData` says so.

This module reads JSON only; it imports no torch.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, NamedTuple, Optional, Union

from cgviz.trace.io import decompressed, read_file, with_safe_text, write_atomic
from cgviz.trace.model import Snapshot, Step, Trace

# Above this many decisions, folded blocks are not expanded (one slice per folded step).
MAX_SLICES = 200_000
FOLDED = ("expand", "collapse")
_INSTANTS = {"generation": "p", "path_end": "t"}  # kind -> instant scope: the whole tree, or its track
_TREE_TRACK = "tree (generations, path ends, checkpoints)"
_CATEGORY = "cgviz"


class ProfilerTraceError(ValueError):
    """A file given as a profiler trace that is not a Chrome trace; the message says why."""


# -- the profiler's file ------------------------------------------------------------------------
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
        data = json.loads(raw.decode("utf-8"), parse_constant=as_null)
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
        return _profiler_dict(data), nulls[0]
    except ProfilerTraceError as exc:
        raise ProfilerTraceError(f"{path}: {exc}") from None


def _profiler_dict(data: Any) -> dict:
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


# -- the export ---------------------------------------------------------------------------------
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
    if folded not in FOLDED:
        raise ValueError(f"folded must be one of {', '.join(map(repr, FOLDED))}, not {folded!r}")
    if type(max_slices) is not int or max_slices < 1:
        raise ValueError(f"max_slices must be a positive integer, not {max_slices!r}")
    trace = with_safe_text(trace)
    if isinstance(profiler_trace, (str, os.PathLike)):
        profiler = load_profiler_trace(profiler_trace)
    elif profiler_trace is not None:
        profiler = _profiler_dict(profiler_trace)
    else:
        profiler = None
    expand = folded == "expand" and _expanded_length(trace.steps) <= max_slices
    layout = _Layout(trace, expand)
    ranks = _rank_layouts(trace, expand) if layout.timed else []
    if profiler is None:
        origin = layout.ref + layout.earliest if layout.timed else None
        offset_us = -layout.earliest * 1e6
        pid, first_tid = 1, 1
        if ranks:  # a merged trace of several ranks: a process per rank, on one clock
            origin = min(r.ref + r.earliest for r in ranks)
            events = [e for k, r in enumerate(ranks) for e in r.events(pid + k, first_tid, (r.ref - origin) * 1e6)]
            return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": layout.describe(origin)}
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
                      for e in r.events(pid + k, first_tid, ((r.ref - whole) - rest / 1e9) * 1e6)]
            return _merged(profiler, events, layout.describe(origin))
    events = layout.events(pid, first_tid, offset_us)
    info = layout.describe(origin)
    if profiler is None:
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": info}
    return _merged(profiler, events, info)


def _rank_layouts(trace: Trace, expand: bool) -> list["_Layout"]:
    """A layout per rank of a merged multi-rank trace (`cgviz.merge`) whose ranks all have start
    times, in rank order; [] for any other trace."""
    if not isinstance(trace.meta.get("ranks"), list):
        return []
    from cgviz.trace.ranks import rank_traces

    layouts = [_Layout(part.trace, expand) for _, part in sorted(rank_traces(trace).items())]
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
            info["warning"] = (f"cgviz's steps lie {apart / 1e6:.3f} s outside the profiler trace's time range: "
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


# -- the layout: every decision's time ------------------------------------------------------------
class _Layout:
    """Each decision of the trace (folded repeats expanded) with its start and duration in
    seconds, relative to `ref` (the first measured start), measured or estimated."""

    def __init__(self, trace: Trace, expand: bool) -> None:
        self.trace = trace
        steps = trace.steps
        self.expanded = expand
        idx, groups = _decisions(steps, expand)
        count = [0] * len(steps)
        occurrence = []
        for i in idx:
            occurrence.append(count[i])
            count[i] += 1
        self.idx, self.occurrence, self.count = idx, occurrence, count
        self.times = trace.repeats()  # how many times each step happened
        starts = [s.start if s.start is not None and math.isfinite(s.start) else None for s in steps]
        if not expand:  # a block's steps follow its first one: only that one's start stands
            for end, step in enumerate(steps):
                if step.repeat > 1:
                    for i in range(max(0, end - step.span + 2), end + 1):
                        starts[i] = None
        known = [s for s in starts if s is not None]
        self.timed = bool(known)
        self.ref = known[0] if known else 0.0
        dur = [_seconds(steps[i].duration) / count[i] for i in idx]
        at: list[Optional[float]] = [
            None if k or starts[i] is None else starts[i] - self.ref for i, k in zip(idx, occurrence)
        ]
        self.estimated = [t is None for t in at]
        self.t, self.dur = _place(at, dur, groups)
        self.earliest = min(self.t, default=0.0)
        self.measured = sum(not e for e in self.estimated)

    def describe(self, origin: Optional[float]) -> dict:
        """What `otherData` says about the export: the clock, the estimates, the folding."""
        from cgviz._version import __version__

        trace, n = self.trace, len(self.idx)
        if not self.timed:
            timing = ("no step start times (a trace saved before cgviz recorded them): steps are laid out "
                      "back to back from 0 by their durations")
        elif self.measured == n:
            timing = "every slice starts at its step's measured start"
        else:
            timing = (f"{self.measured} of {n} slices start at their step's measured start; the others "
                      "(folded repeats, steps recorded without a clock) are estimated: args.estimated")
        folded = any(s.repeat > 1 for s in trace.steps)
        info: dict[str, Any] = {
            "generator": f"cgviz {__version__}",
            "clock": "unix" if self.timed else "none",
            "timing": timing,
            "steps": len(trace.steps),
            "decisions": trace.calls,
            "decisions_drawn": n,
        }
        if origin is not None:
            info["start_unix_s"] = origin  # the time of ts 0
        if folded:
            info["folded_repeats"] = (
                "expanded: one slice per occurrence; the first at its measured start, the others laid out as "
                "it was and spread evenly up to the next measured step, each of its step's average duration"
                if self.expanded else
                "collapsed: one slice per folded step, of its total duration, a block's steps one after another "
                "from its first start"
            )
        info["meta"] = trace.meta
        return info

    # -- events ----------------------------------------------------------------------------------
    def events(self, pid: int, first_tid: int, offset_us: float) -> list[dict]:
        """Metadata, slices, instants and counters, in time order."""
        steps = self.trace.steps
        tids: dict[Optional[str], int] = {None: first_tid}
        for i in self.idx:
            function = steps[i].function
            if function is not None and steps[i].kind not in _INSTANTS and function not in tids:
                tids[function] = first_tid + len(tids)
        ts = [round(t * 1e6 + offset_us, 3) for t in self.t]
        dur = [round(d * 1e6, 3) for d in self.dur]
        body: list[dict] = []
        last = [0] * len(steps)  # each step's last decision: where its snapshot is shown
        for k, i in enumerate(self.idx):
            last[i] = k
        for k, i in enumerate(self.idx):
            step = steps[i]
            args = self._args(step, i, k)
            scope = _INSTANTS.get(step.kind)
            if scope is not None:
                body.append({"name": step.kind, "cat": _CATEGORY, "ph": "i", "s": scope, "ts": ts[k],
                             "pid": pid, "tid": tids[None], "args": args})
            else:
                body.append({"name": step.kind, "cat": _CATEGORY, "ph": "X", "ts": ts[k], "dur": dur[k],
                             "pid": pid, "tid": tids.get(step.function, tids[None]), "args": args})
        body.sort(key=lambda e: e["ts"])  # stable: decisions at one time keep their order
        _cut_overlaps(body)
        counters = self._counters(ts, dur, last, pid, tids[None])
        meta_ts = body[0]["ts"] if body else 0
        head = [{"name": "process_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0,
                 "args": {"name": _process_name(self.trace.meta)}},
                {"name": "process_sort_index", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0,
                 "args": {"sort_index": -1}}]  # above the profiler's processes
        for order, (function, tid) in enumerate(tids.items()):
            head.append({"name": "thread_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid,
                         "args": {"name": _TREE_TRACK if function is None else function}})
            head.append({"name": "thread_sort_index", "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid,
                         "args": {"sort_index": order}})
        return head + sorted(body + counters, key=lambda e: e["ts"])

    def _args(self, step: Step, i: int, k: int) -> dict:
        """What Perfetto shows for decision `k` (of step `i`) when it is selected."""
        args: dict[str, Any] = {"kind": step.kind, "step": i, "decision": k}
        if step.function is not None:
            args["function"] = step.function
        if step.node is not None:
            args["node"] = step.node
        if step.parent is not None:
            args["parent"] = step.parent
        args["generation"] = step.generation
        args["reason"] = step.reason
        if step.invalidated:
            args["invalidated"] = [f"output {o} of node {n}" for n, o in step.invalidated]
        repeat = self.count[i] if self.expanded else self.times[i]
        args["repeat"] = repeat
        if repeat > 1:
            args["folded"] = True
            if self.expanded:
                args["occurrence"] = self.occurrence[k] + 1
            args["duration_total_s"] = step.duration
        if self.estimated[k]:
            args["estimated"] = True
        return args

    def _counters(self, ts: list[float], dur: list[float], last: list[int], pid: int, tid: int) -> list[dict]:
        """Pool reserved and allocated bytes and the bytes of live outputs, after each step with a
        snapshot (a folded step's: after its last occurrence), where they change."""
        steps = self.trace.steps
        shown = [i for i, s in enumerate(steps) if s.snapshot is not None and self.count[i]]
        if not shown:
            return []
        pool = any(steps[i].snapshot.segments for i in shown)  # type: ignore[union-attr]
        values: dict[int, tuple[int, int, int]] = {}
        out: list[dict] = []
        previous: dict[str, Optional[int]] = {}
        for i in sorted(shown, key=lambda i: last[i]):
            snap = steps[i].snapshot
            assert snap is not None
            key = id(snap)
            if key not in values:
                values[key] = (snap.reserved_bytes, snap.allocated_bytes, _live_bytes(snap))
            reserved, allocated, live = values[key]
            at = ts[last[i]] + dur[last[i]]
            # named so that Perfetto's track ("name" and the arg) reads "pool reserved bytes"
            series = [("live outputs", live)]
            if pool:
                series[:0] = [("pool reserved", reserved), ("pool allocated", allocated)]
            for name, value in series:
                if previous.get(name) != value:
                    previous[name] = value
                    out.append({"name": name, "cat": _CATEGORY, "ph": "C", "ts": round(at, 3),
                                "pid": pid, "tid": tid, "args": {"bytes": value}})
        return out


def _seconds(value: float) -> float:
    """A duration fit to draw: a negative or non-finite one (a trace built by hand) as 0."""
    return value if math.isfinite(value) and value > 0 else 0.0


def _expanded_length(steps: list[Step]) -> int:
    """len(Trace.expanded()) without building it."""
    n = 0
    for step in steps:
        n += 1
        if step.repeat > 1:
            n += min(step.span, n) * (step.repeat - 1)
    return n


def _decisions(steps: list[Step], expand: bool) -> tuple[list[int], list[tuple[int, int, Optional[int]]]]:
    """The index of the step each decision is, in order (as Trace.expanded(), or one per step
    when not `expand`), and the groups drawn as one unit: (first decision, length, the first
    decision of the occurrence it repeats), or None there for a collapsed block."""
    out: list[int] = []
    groups: list[tuple[int, int, Optional[int]]] = []
    for i, step in enumerate(steps):
        out.append(i)
        if step.repeat <= 1:
            continue
        span = min(step.span, len(out))
        first = len(out) - span
        if not expand:
            groups.append((first, span, None))
            continue
        block = out[first:]
        for _ in range(step.repeat - 1):
            groups.append((len(out), span, first))
            out.extend(block)
    return out, groups


class _Unit(NamedTuple):
    """Decisions placed together: `offsets` from the unit's start, `length` from its start to
    its last end, `at` its measured start (None: to be estimated)."""

    first: int
    offsets: list[float]
    length: float
    at: Optional[float]


def _units(at: list[Optional[float]], dur: list[float], groups: list[tuple[int, int, Optional[int]]]) -> list[_Unit]:
    """Every decision in a unit: a later occurrence of a folded block is one, laid out as its first
    occurrence was measured (back to back where it was not); a collapsed block is one, its steps
    back to back from its first start; any other decision is a unit of its own."""
    starts = {g[0]: g for g in groups}
    units: list[_Unit] = []
    k, n = 0, len(at)
    while k < n:
        group = starts.get(k)
        if group is None:
            units.append(_Unit(k, [0.0], dur[k], at[k]))
            k += 1
            continue
        first, span, template = group
        model = [at[template + j] for j in range(span)] if template is not None else [None]
        if template is not None and all(a is not None for a in model):
            low = min(model)  # type: ignore[type-var]
            offsets = [a - low for a in model]  # type: ignore[operator]
        else:
            offsets, clock = [], 0.0
            for j in range(span):
                offsets.append(clock)
                clock += dur[first + j]
        length = max(o + dur[first + j] for j, o in enumerate(offsets))
        units.append(_Unit(first, offsets, length, at[first] if template is None else None))
        k += span
    return units


def _place(at: list[Optional[float]], dur: list[float], groups: list[tuple[int, int, Optional[int]]]
           ) -> tuple[list[float], list[float]]:
    """A start and a duration for every decision: measured where `at` has one, estimated between
    the measured ones around it where not.

    A run of units without a measured start between two units with one is spread over the time
    between the first one's end and the second one's start, the idle time shared evenly before
    each and after the last (a steady loop comes out as it ran); where they do not fit, they are
    shortened to fit. Before the first measured unit they end at it, back to back; after the
    last, and in a trace with none measured, they follow back to back.
    """
    units = _units(at, dur, groups)
    t_unit = [0.0] * len(units)
    scale = [1.0] * len(units)
    known = [u for u, unit in enumerate(units) if unit.at is not None]
    for u in known:
        t_unit[u] = units[u].at  # type: ignore[assignment]
    lengths = [unit.length for unit in units]
    if not known:
        _back_to_back(t_unit, lengths, 0, len(units), 0.0)
    else:
        clock = t_unit[known[0]]
        for u in range(known[0] - 1, -1, -1):  # the leading run, ending at the first measured start
            clock -= lengths[u]
            t_unit[u] = clock
        for p, q in zip(known, known[1:]):
            if q - p > 1:
                begin = min(t_unit[p] + lengths[p], t_unit[q])
                _spread(t_unit, lengths, scale, p + 1, q, begin, t_unit[q])
        last = known[-1]
        _back_to_back(t_unit, lengths, last + 1, len(units), t_unit[last] + lengths[last])
    t = [0.0] * len(at)
    d = list(dur)
    for unit, start, factor in zip(units, t_unit, scale):
        for j, offset in enumerate(unit.offsets):
            k = unit.first + j
            t[k] = start + offset * factor
            d[k] = dur[k] * factor
    return t, d


def _back_to_back(t: list[float], length: list[float], lo: int, hi: int, clock: float) -> None:
    for u in range(lo, hi):
        t[u] = clock
        clock += length[u]


def _spread(t: list[float], length: list[float], scale: list[float], lo: int, hi: int,
            begin: float, end: float) -> None:
    """Place units lo..hi-1 in [begin, end]: the spare time shared out before each and after the
    last; no spare time: shortened in proportion, back to back."""
    room = max(0.0, end - begin)
    busy = sum(length[lo:hi])
    factor = 1.0
    if busy <= room:
        gap = (room - busy) / (hi - lo + 1)
    else:
        factor, gap = room / busy, 0.0
    clock = begin
    for u in range(lo, hi):
        clock += gap
        t[u] = clock
        scale[u] = factor
        clock += length[u] * factor


def _cut_overlaps(events: list[dict]) -> None:
    """End each slice where the next slice of its track begins (sorted events), so slices of a
    track never overlap: one decision at a time per function."""
    following: dict[Any, dict] = {}
    for e in reversed(events):
        if e["ph"] != "X":
            continue
        nxt = following.get(e["tid"])
        if nxt is not None and e["ts"] + e["dur"] > nxt["ts"]:
            e["dur"] = round(max(0.0, nxt["ts"] - e["ts"]), 3)
        following[e["tid"]] = e


def _live_bytes(snap: Snapshot) -> int:
    """Bytes of live outputs in the pool (aliases of inputs or of other outputs not counted twice)."""
    return sum(o.nbytes for n in snap.nodes for o in n.outputs if o.state == "live" and o.alias_of is None)


def _process_name(meta: dict) -> str:
    """'cgviz · sim tree · cpu (simulated CUDA pool) · chain' (· rank 1 for one rank of several)."""
    backend = meta.get("backend")
    parts = ["cgviz"]
    if isinstance(backend, str) and backend:
        parts.append("torch.compile trees" if backend == "torch.compile" else f"{backend} tree")
    for key in ("device", "scenario", "name"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            parts.append(value)
    rank = meta.get("rank")
    if type(rank) is int:
        parts.append(f"rank {rank}")
    return " · ".join(parts)
