"""The Trace Event Format events of a laid-out trace (`cgviz.trace.chrome_timing.Layout`):
each decision a slice (an instant for a new generation or a path's end) on its function's
track, pool and live-output counters, the process and track names, and what `otherData`
says about the export.

Perfetto shows each slice's args when it is selected: the step's kind, function, node,
generation and reason, and for a folded repeat which occurrence it is. `cgviz.trace.chrome_trace`
places these events on a clock and merges them into a profiler's trace.
"""

from __future__ import annotations

from typing import Any, Optional

from cgviz.trace.chrome_timing import Layout
from cgviz.trace.model import Snapshot, Step

_INSTANTS = {"generation": "p", "path_end": "t"}  # kind -> instant scope: the whole tree, or its track
_TREE_TRACK = "tree (generations, path ends, checkpoints)"
_CATEGORY = "cgviz"


def export_info(layout: Layout, origin: Optional[float]) -> dict:
    """What `otherData` says about the export: the clock, the estimates, the folding."""
    from cgviz._version import __version__

    trace, n = layout.trace, len(layout.idx)
    if not layout.timed:
        timing = ("no step start times (a trace saved before cgviz recorded them): steps are laid out "
                  "back to back from 0 by their durations")
    elif layout.measured == n:
        timing = "every slice starts at its step's measured start"
    else:
        timing = (f"{layout.measured} of {n} slices start at their step's measured start; the others "
                  "(folded repeats, steps recorded without a clock) are estimated: args.estimated")
    folded = any(s.repeat > 1 for s in trace.steps)
    info: dict[str, Any] = {
        "generator": f"cgviz {__version__}",
        "clock": "unix" if layout.timed else "none",
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
            if layout.expanded else
            "collapsed: one slice per folded step, of its total duration, a block's steps one after another "
            "from its first start"
        )
    info["meta"] = trace.meta
    return info


def layout_events(layout: Layout, pid: int, first_tid: int, offset_us: float) -> list[dict]:
    """Metadata, slices, instants and counters, in time order."""
    steps = layout.trace.steps
    tids: dict[Optional[str], int] = {None: first_tid}
    for i in layout.idx:
        function = steps[i].function
        if function is not None and steps[i].kind not in _INSTANTS and function not in tids:
            tids[function] = first_tid + len(tids)
    ts = [round(t * 1e6 + offset_us, 3) for t in layout.t]
    dur = [round(d * 1e6, 3) for d in layout.dur]
    body: list[dict] = []
    last = [0] * len(steps)  # each step's last decision: where its snapshot is shown
    for k, i in enumerate(layout.idx):
        last[i] = k
    for k, i in enumerate(layout.idx):
        step = steps[i]
        args = _args(layout, step, i, k)
        scope = _INSTANTS.get(step.kind)
        if scope is not None:
            body.append({"name": step.kind, "cat": _CATEGORY, "ph": "i", "s": scope, "ts": ts[k],
                         "pid": pid, "tid": tids[None], "args": args})
        else:
            body.append({"name": step.kind, "cat": _CATEGORY, "ph": "X", "ts": ts[k], "dur": dur[k],
                         "pid": pid, "tid": tids.get(step.function, tids[None]), "args": args})
    body.sort(key=lambda e: e["ts"])  # stable: decisions at one time keep their order
    _cut_overlaps(body)
    counters = _counters(layout, ts, dur, last, pid, tids[None])
    meta_ts = body[0]["ts"] if body else 0
    head = [{"name": "process_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0,
             "args": {"name": _process_name(layout.trace.meta)}},
            {"name": "process_sort_index", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0,
             "args": {"sort_index": -1}}]  # above the profiler's processes
    for order, (function, tid) in enumerate(tids.items()):
        head.append({"name": "thread_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid,
                     "args": {"name": _TREE_TRACK if function is None else function}})
        head.append({"name": "thread_sort_index", "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid,
                     "args": {"sort_index": order}})
    return head + sorted(body + counters, key=lambda e: e["ts"])

def _args(layout: Layout, step: Step, i: int, k: int) -> dict:
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
    repeat = layout.count[i] if layout.expanded else layout.times[i]
    args["repeat"] = repeat
    if repeat > 1:
        args["folded"] = True
        if layout.expanded:
            args["occurrence"] = layout.occurrence[k] + 1
        args["duration_total_s"] = step.duration
    if layout.estimated[k]:
        args["estimated"] = True
    return args

def _counters(layout: Layout, ts: list[float], dur: list[float], last: list[int], pid: int, tid: int) -> list[dict]:
    """Pool reserved and allocated bytes and the bytes of live outputs, after each step with a
    snapshot (a folded step's: after its last occurrence), where they change."""
    steps = layout.trace.steps
    shown = [i for i, s in enumerate(steps) if s.snapshot is not None and layout.count[i]]
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
