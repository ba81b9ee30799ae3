"""The doctor's findings about what a run cost: the pool's reserved and allocated bytes and the nodes
that own the most, and from a profile (Tree(profile=True)) what a replay costs on the device against
an eager run of the same function and against the whole call on the host."""

from __future__ import annotations

import statistics
from collections import Counter

from cgviz.trace.findings import Finding
from cgviz.trace.model import Snapshot, Step, Trace
from cgviz.trace.profile import profile_entries, timed_graphs
from cgviz.trace.units import format_bytes, format_us


def pool_usage(trace: Trace) -> list[Finding]:
    """The pool's reserved and allocated bytes over the run, and the nodes that own the most."""
    snaps = [(s.index, s.snapshot) for s in trace.steps if s.snapshot is not None]
    if not snaps:
        return []
    peak_index, peak = max(snaps, key=lambda p: p[1].reserved_bytes)
    last = snaps[-1][1]
    owners = _owner_bytes(last)
    return [Finding(
        "info", "pool",
        f"the pool reserved at most {format_bytes(peak.reserved_bytes)}; at the end {format_bytes(last.allocated_bytes)} of "
        f"{format_bytes(last.reserved_bytes)} are allocated",
        [peak_index], {"peak_reserved": peak.reserved_bytes, "reserved": last.reserved_bytes,
                       "allocated": last.allocated_bytes, "top_owners": dict(owners.most_common(3))},
    )]


def _owner_bytes(snap: Snapshot) -> Counter:
    """Bytes of allocated pool blocks owned by each node in `snap`."""
    owners: Counter = Counter()
    for seg in snap.segments:
        for b in seg.blocks:
            if b.allocated and b.node is not None:
                owners[b.node] += b.size
    return owners


def replay_times(steps: list[Step], meta: dict) -> list[Finding]:
    """Per function, from a profile (Tree(profile=True)): what a replay costs on the device
    against an eager run of the same function, and against the whole call on the host (the
    tree's own checks and the launch), where that is large."""
    out = []
    for fn, entries in timed_graphs(profile_entries(meta)).items():
        replay = statistics.median(e.replay_us for e in entries)
        eager_entries = [e for e in entries if e.eager_us is not None and not e.eager_is_first_call]
        eager = statistics.median(e.eager_us for e in eager_entries) if eager_entries else None
        host = [s.duration / max(s.repeat, 1) * 1e6 for s in steps if s.kind == "execute" and s.function == fn]
        call = statistics.median(host) if host else None
        numbers = {"replay_us": round(replay, 3), "eager_us": eager, "call_us": None if call is None else round(call, 3),
                   "clock": entries[0].clock}
        evidence = [s.index for s in steps if s.kind == "execute" and s.function == fn][:1]
        sim = "" if entries[0].measured else " (sim: CPU wall clock, not a GPU)"
        if eager is not None:
            ratio = eager / replay if replay > 0 else float("inf")
            numbers["speedup"] = round(ratio, 2)
            title = f"{fn}: a replay takes {format_us(replay)} against {format_us(eager)} eager ({ratio:.1f}×){sim}"
            severity, fix = "info", ""
            if ratio < 1.0:
                severity = "warning"
                fix = (f"graphing {fn} does not pay: its kernels are long enough that launching them one by one "
                       "costs little; leave it out of the graphed region or give it larger work per call")
        else:
            title = f"{fn}: a replay takes {format_us(replay)}{sim}; no eager run after its first was timed"
            severity, fix = "info", ""
        if call is not None and call > 2 * replay and call - replay > 20:
            title += f"; the call takes {format_us(call)} on the host"
            fix = fix or ("the call costs more on the host than its replay on the device: graph more work per call "
                          "(fewer, larger graphed functions), or check that inputs are static where they can be")
        out.append(Finding(severity, "time", title, evidence, numbers, fix))
    return out
