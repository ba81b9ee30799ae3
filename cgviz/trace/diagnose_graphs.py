"""The doctor's findings about plain CUDA graphs (`Trace.graphs`, seen by `cgviz.observe_graphs`):
graphs captured and never replayed, a line that captures again for every batch, a memory pool
that grows, and the padding of a graph per batch size.

Graphs of torch.compile's trees (origin "torch.compile", or linked to a tree node) are the trees'
business and never appear here; nor do graphs captured before observing began (their capture is
not in the trace). Each finding names the capture steps it rests on.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Optional

from cgviz.trace.findings import Finding
from cgviz.trace.graph_groups import Family, PoolGroup, families, pools
from cgviz.trace.model import GraphView, Trace
from cgviz.trace.reasons import source_of
from cgviz.trace.units import format_bytes, format_us, plural

__all__ = ["graph_findings"]

RECAPTURE_MIN = 3  # captures at one line before capturing again and again is a finding
POOL_RISES_MIN = 3  # captures after which a pool was larger, before its growth is a finding
PADDING_WARNING = 0.5  # a family's padding share above which more sizes in between pay
_LISTED = 6  # graphs named in a title; the rest are counted
# a capture site as the observer writes it: "model.py:42 in forward (code)" (paths.source_line)
_SITE = re.compile(r"^(?P<file>[^\s:()]+):(?P<line>\d{1,9}) in (?P<function>[^\s(]+)(?: \((?P<code>.*)\))?$")

REPLAYS_EXACTLY = "a graph replays the exact kernels and addresses it captured"
POOL_RETURNS = (
    "torch releases a pool that no graph uses any longer, but no other allocation takes its memory: it stays "
    "reserved from the device until torch.cuda.empty_cache() (or an allocation that finds no free memory) frees "
    "the segments that no tensor still alive holds"
)
RELEASE_FIX = (
    "release a graph you replace: call its reset() or drop every reference to it, and drop the outputs it "
    "returned; tensors still referenced keep their blocks in the pool, and a graph alive keeps its pool in use; "
    + POOL_RETURNS
)
LARGEST_FIRST_FIX = (
    "capture the largest batch size first: a capture into a shared pool can reuse the memory that earlier captures "
    "freed there, so smaller graphs captured after a larger one need little new memory"
)
UNUSED_FIX = (
    "capture only the batch sizes that are served, or capture a size lazily at its first use; free a graph you do "
    "not need (call its reset() or drop every reference to it): " + POOL_RETURNS
)
RECAPTURE_FIX = (
    "capture once per shape or batch size, keyed by the padded size a batch is padded up to, and replay that graph "
    "for every batch of that size: copy each batch into the static input it was captured with (" + REPLAYS_EXACTLY
    + ", so it reads its inputs from those buffers)"
)


@dataclass
class _Events:
    """Where each graph's capture, first replay and destruction are among the stored steps."""

    captured: dict[int, int]
    first_replay: dict[int, int]
    destroyed: dict[int, int]

    @classmethod
    def of(cls, trace: Trace) -> "_Events":
        found: dict[str, dict[int, int]] = {"capture": {}, "replay": {}, "destroy": {}}
        for step in trace.steps:
            if step.graph is not None and step.kind in found:
                found[step.kind].setdefault(step.graph, step.index)
        return cls(found["capture"], found["replay"], found["destroy"])


def graph_findings(trace: Trace) -> list[Finding]:
    """The findings about the trace's plain CUDA graphs: re-captures, growing pools, graphs never
    replayed, padding. [] for a trace without any."""
    events = _Events.of(trace)
    plain = {g.id for g in trace.graphs
             if g.node is None and g.origin != "torch.compile" and g.id in events.captured}
    if not plain:
        return []
    lines = [Family(f.site, kept) for f in families(trace) if (kept := [g for g in f.graphs if g.id in plain])]
    shared = [PoolGroup(p.pool, kept) for p in pools(trace) if (kept := [g for g in p.graphs if g.id in plain])]
    recaptures = {f.site: again for f in lines if (again := _recaptured(f, events)) and _recapturing(f, again)}
    findings = [_recapture(f, recaptures[f.site], events) for f in lines if f.site in recaptures]
    findings += [found for p in shared if (found := _pool_growth(p, events)) is not None]
    for family in lines:  # a graph replaced before it replayed is the re-capture finding's, where there is one
        replaced = {old.id for old, _ in _replacements(family.graphs, events)} if family.site in recaptures else set()
        unused = [g for g in family.graphs if g.replays == 0 and g.id not in replaced]
        if unused:
            findings.append(_never_replayed(family.site, unused, shared, events))
    findings += [found for f in lines if (found := _padding(f, events)) is not None]
    return findings


def _source(site: str) -> Optional[dict]:
    """The capture site as a source location (file, line, function, code), as findings give it."""
    found = _SITE.match(site)
    return None if found is None else source_of(found)


def _named(graphs: list[GraphView]) -> str:
    """'graph 1 (batch 64), graph 7': the first few graphs' names, and a count of the rest."""
    more = len(graphs) - _LISTED
    return ", ".join(g.name for g in graphs[:_LISTED]) + (f" and {more} more" if more > 0 else "")


def _for_sizes(graphs: list[GraphView]) -> str:
    """' for batch sizes 64, 1' where the caller said each graph's size, else ''."""
    sizes = [g.batch for g in graphs]
    if None in sizes:
        return ""
    return f" for batch size{'s' if len(sizes) > 1 else ''} {', '.join(str(s) for s in sizes)}"


def _captures(graphs: list[GraphView], events: _Events) -> list[GraphView]:
    return sorted(graphs, key=lambda g: events.captured[g.id])


def _replacements(graphs: list[GraphView], events: _Events) -> list[tuple[GraphView, GraphView]]:
    """(old, new) pairs: a graph, and the next graph captured at its line for its batch size."""
    last: dict[tuple[str, int], GraphView] = {}
    out = []
    for g in _captures(graphs, events):
        if g.batch is None:
            continue
        key = (g.site, g.batch)
        if key in last:
            out.append((last[key], g))
        last[key] = g
    return out


def _recaptured(family: Family, events: _Events) -> list[GraphView]:
    """The graphs a line captured again: for a batch size it had captured already, or, where the
    caller did not say the size, after the line's graphs had begun replaying."""
    began = min((events.first_replay[g.id] for g in family.graphs if g.id in events.first_replay), default=None)
    again = {new.id for _, new in _replacements(family.graphs, events)}
    return [g for g in _captures(family.graphs, events)
            if g.id in again or (g.batch is None and began is not None and events.captured[g.id] > began)]


def _recapturing(family: Family, again: list[GraphView]) -> bool:
    """Captured again and again: enough captures, at least as many as replays, two of them repeats."""
    return len(family.graphs) >= RECAPTURE_MIN and family.replays <= len(family.graphs) and len(again) >= 2


def _recapture(family: Family, again: list[GraphView], events: _Events) -> Finding:
    """A line that captures a graph for (nearly) every batch and replays each about once."""
    graphs = family.graphs
    took = [g.capture_ms for g in graphs]
    median, total = statistics.median(took), sum(took)
    by_size = sum(1 for g in again if g.batch is not None)
    late = len(again) - by_size
    which = []
    if by_size:
        which.append(f"{by_size} of them for a batch size it had captured already")
    if late:
        which.append(f"{late} of them after its graphs had begun replaying (their batch size was not said)")
    replay = [g.replay_us for g in graphs if g.replay_us is not None]
    against = f", against {format_us(statistics.median(replay))} a replay on the GPU" if replay else ""
    title = (f"{family.site} captured a CUDA graph again and again: {plural(len(graphs), 'capture')} and "
             f"{plural(family.replays, 'replay')} in all, {' and '.join(which)}; each batch paid for a capture "
             f"({format_us(median * 1e3)} median on the host, {format_us(total * 1e3)} in all{against}) on top of "
             "its replay, where a graph captured once for its size would only be replayed")
    if graphs[0].origin == "torch.cuda.graph":
        title += ("; torch.cuda.graph also calls torch.cuda.synchronize() and torch.cuda.empty_cache() before "
                  "each capture")
    numbers = {"site": family.site, "captures": len(graphs), "replays": family.replays, "recaptures": len(again),
               "graphs": [g.id for g in again], "capture_ms_median": median, "capture_ms_total": total,
               "cause": "a new CUDA graph captured for each batch", "source": _source(family.site)}
    return Finding("error", "recapture", title, [events.captured[g.id] for g in again][:20], numbers, RECAPTURE_FIX)


def _kept_alive(old: GraphView, new: GraphView, pool: PoolGroup, events: _Events) -> bool:
    """Did `old` outlive its replacement `new`: still alive at `new`'s first replay or at the
    next capture into the pool (or at the end, where neither came)?"""
    gone = events.destroyed.get(old.id)
    after = events.captured[new.id]
    later = [events.captured[g.id] for g in pool.graphs if events.captured[g.id] > after]
    if new.id in events.first_replay:
        later.append(events.first_replay[new.id])
    if not later:
        return gone is None
    return gone is None or gone > min(later)


def _pool_growth(pool: PoolGroup, events: _Events) -> Optional[Finding]:
    """A pool that grew over several captures, or kept graphs alive beside their replacements."""
    captured = _captures(pool.graphs, events)
    sized = [g for g in captured if g.pool_bytes is not None]
    rises = [g for before, g in zip(sized, sized[1:]) if g.pool_bytes > before.pool_bytes]
    kept = [(old, new) for old, new in _replacements(captured, events) if _kept_alive(old, new, pool, events)]
    if len(rises) < POOL_RISES_MIN and not kept:
        return None
    title = f"pool {pool.pool}"
    numbers: dict = {"pool": pool.pool, "captures": len(captured), "kept_alive": [old.id for old, _ in kept]}
    if rises:  # how much it grew, said wherever the pool is a finding
        first, peak = sized[0].pool_bytes, max(g.pool_bytes for g in sized)
        title += (f" grew from {format_bytes(first)} after its first capture to {format_bytes(peak)} over "
                  f"{plural(len(captured), 'capture')} into it (larger after {len(rises)} of them)")
        numbers.update(from_bytes=first, to_bytes=peak, rises=len(rises))
    if kept:
        olds = [old for old, _ in kept]
        title += (f"{'; ' if rises else ': '}{plural(len(kept), 'graph')} stayed alive after a new capture at the "
                  f"same line for the same batch size replaced {'it' if len(kept) == 1 else 'them'} "
                  f"({_named(olds)}; captured at {', '.join(sorted({old.site for old in olds}))})")
    sizes = [g.batch for g in captured]
    ascending = not kept and None not in sizes and sizes == sorted(set(sizes))  # smaller graphs captured first
    numbers["cause"] = ("replaced graphs kept alive" if kept else
                        "captures from the smallest batch size up" if ascending else "a pool that grows")
    fix = LARGEST_FIRST_FIX if ascending else RELEASE_FIX
    evidence = sorted({events.captured[g.id] for g in rises} | {events.captured[new.id] for _, new in kept})
    return Finding("warning", "graph_pool", title, evidence[:20], numbers, fix)


def _never_replayed(site: str, unused: list[GraphView], shared: list[PoolGroup], events: _Events) -> Finding:
    """Graphs of one line captured and never replayed: which, and the memory their captures took."""
    memory = sum(g.memory for g in unused)
    one = len(unused) == 1
    took = (f"the device reserved {format_bytes(memory)} more during {'its capture' if one else 'their captures'}"
            if memory else f"{'its capture' if one else 'their captures'} reserved no new device memory")
    held = []
    for p in shared:
        if any(g.pool == p.pool for g in unused):
            share = f"shared by {plural(len(p.graphs), 'graph')}" if p.shared else "its own"
            size = f"; {format_bytes(p.growth[-1])} after the last capture into it" if p.growth else ""
            held.append(f"pool {p.pool} ({share}{size})")
    if one:
        title = f"{unused[0].name}, captured{_for_sizes(unused)} at {site}, was never replayed"
    else:
        title = (f"{plural(len(unused), 'graph')} captured{_for_sizes(unused)} at {site} were never replayed "
                 f"({_named(unused)})")
    title += f": {took}, into {', '.join(held)}"
    numbers = {"site": site, "graphs": [g.id for g in unused], "sizes": [g.batch for g in unused],
               "memory": memory, "pools": sorted({g.pool for g in unused}),
               "cause": "a CUDA graph captured and never replayed", "source": _source(site)}
    return Finding("warning", "never_replayed", title, [events.captured[g.id] for g in unused][:20], numbers,
                   UNUSED_FIX)


def _padding(family: Family, events: _Events) -> Optional[Finding]:
    """The share of the rows a line's graphs replayed that were padding, where the caller said."""
    share = family.padding
    if not share:
        return None
    padded = sum(g.padded for g in family.graphs)
    used = sum(g.used for g in family.graphs)
    sizes = f" (batch sizes {', '.join(str(s) for s in family.sizes)})" if family.sizes else ""
    percent = f"{100 * share:.0f}%" if share >= 0.01 else "under 1%"
    title = (f"{percent} of the rows replayed by the graphs captured at {family.site}{sizes} were "
             f"padding: {padded - used} of {padded} rows")
    large = share > PADDING_WARNING
    fix = (f"capture graphs for more batch sizes in between: {REPLAYS_EXACTLY}, so a batch padded up to a graph's "
           "size runs every row of that size" if large else "")
    wasted = sorted((g for g in family.graphs if g.padded > g.used), key=lambda g: g.used - g.padded)  # most first
    numbers = {"site": family.site, "sizes": family.sizes, "used": used, "padded": padded, "padding": share,
               "cause": "batches padded up to the size of a captured graph", "source": _source(family.site)}
    return Finding("warning" if large else "info", "padding", title, [events.captured[g.id] for g in wasted][:20],
                   numbers, fix)
