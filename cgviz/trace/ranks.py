"""Traces of a multi-rank job: one per rank, merged into one, and where the ranks diverged.

torch keeps one CUDA graph tree manager per device, so a DDP or FSDP job compiled with
mode="reduce-overhead" grows one tree per rank. Each rank saves its own trace (a `{rank}`
placeholder in the path keeps the files apart), and `merge` makes them one Trace:

    with cgviz.observe_torch(path="run-{rank}.cgtrace.json"):   # on every rank
        train()
    merged = cgviz.merge(["run-0.cgtrace.json", "run-1.cgtrace.json"])
    divergence(merged)                                         # where ranks decided differently

A merged trace holds every rank's steps, each with its `rank`, ordered by start time where the
steps have one (else rank by rank), and `meta["ranks"]`: each rank's own meta. Node ids,
generations and snapshots stay per rank: (rank, node) names a node. A trace of one rank has
no `rank` on its steps and no `meta["ranks"]`, so it is written exactly as before.

Pure data, no torch: the rank is read from `torch.distributed` only where a program has
imported and initialised it already.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import re
import sys
from collections import Counter, defaultdict
from pathlib import PurePath
from typing import Iterable, NamedTuple, Optional, Union

from cgviz.trace.diagnose import SEVERITIES, Diagnosis, Finding, fix_for
from cgviz.trace.model import Step, Trace

__all__ = [
    "PLACEHOLDERS", "RankError", "MergeError", "RankInfo", "current_rank", "rank_path", "merge", "is_merged",
    "RankPart", "rank_traces", "call_key", "divergence", "diagnose_merged",
]

PLACEHOLDERS = ("{rank}", "{world_size}")
CALL_KINDS = ("warmup", "record", "execute", "eager", "error")
# What a rank did with a call, in words: "rank 1 warmed up f while rank 0 replayed it".
_DID = {"warmup": "warmed up", "record": "recorded", "execute": "replayed", "eager": "ran eagerly",
        "error": "raised an error"}
# Meta keys that belong to one rank: never lifted to a merged trace's top level.
_OWN_KEYS = ("rank", "world_size", "local_rank", "ranks")
# Addresses, sizes, shapes and line numbers vary between otherwise identical reasons.
_VARYING = re.compile(r"0x[0-9a-f]+|\b\d+\b")
_MAX_EVIDENCE = 20
SAME_SHAPES = (
    "give every rank the same input shapes: pad the last batch or pass drop_last=True to the DataLoader (with a "
    "DistributedSampler a rank's last batch can be shorter); a new shape makes a rank warm up or record a CUDA "
    "graph (also where the dimension is marked dynamic), and a rank that warms up or records while the others "
    "replay holds them up at the next collective"
)


class RankError(ValueError):
    """A `{rank}` or `{world_size}` placeholder that cannot be filled, or a rank that makes no sense."""


class MergeError(ValueError):
    """Traces that cannot be merged into one (the message names them and says why)."""


# -- which rank is this process ------------------------------------------------------------------
class RankInfo(NamedTuple):
    rank: int
    world_size: Optional[int]
    source: str  # "torch.distributed" or "environment"


def current_rank() -> Optional[RankInfo]:
    """This process's rank: from torch.distributed when its default process group is initialised,
    else from the RANK (and WORLD_SIZE) environment variables torchrun sets, else None."""
    dist = sys.modules.get("torch.distributed")  # a process group exists only where it was imported
    if dist is not None and dist.is_available() and dist.is_initialized():
        return RankInfo(dist.get_rank(), dist.get_world_size(), "torch.distributed")
    rank = _env_number("RANK")
    if rank is None:
        return None
    return RankInfo(rank, _env_number("WORLD_SIZE"), "environment")


def _env_number(name: str) -> Optional[int]:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise RankError(f"the {name} environment variable is {os.environ[name]!r}, not a rank number (0, 1, ...)")
    return value


def rank_path(path: Union[str, os.PathLike], trace: Optional[Trace] = None) -> Union[str, PurePath]:
    """`path` with `{rank}` and `{world_size}` filled in for this process (see `current_rank`);
    a path without them is returned as it is. A pathlib path stays one.

    With `trace`, the rank is also written into its meta (`rank`, `world_size`, `local_rank`,
    and `device` where the trace has none and CUDA is initialised), so the file says which rank
    it is from: `merge` reads it. Raises RankError naming the placeholder when no rank is known.
    """
    text = os.fsdecode(os.fspath(path))
    wanted = [p for p in PLACEHOLDERS if p in text]
    try:
        info = current_rank() if wanted or trace is not None else None
    except RankError:
        if wanted:
            raise
        info = None  # a RANK that is no number keeps nothing from being saved where no rank is asked for
    for placeholder in wanted:
        if info is None:
            raise RankError(
                f"cannot fill {placeholder} in {text!r}: torch.distributed's default process group is not "
                "initialised and the RANK environment variable is not set (call torch.distributed."
                "init_process_group() first, or run under torchrun, which sets RANK and WORLD_SIZE)")
        if placeholder == "{world_size}" and info.world_size is None:
            raise RankError(f"cannot fill {{world_size}} in {text!r}: RANK is set but WORLD_SIZE is not")
    if wanted:
        text = text.replace("{rank}", str(info.rank)).replace("{world_size}", str(info.world_size))
    if trace is not None and info is not None:
        _stamp(trace.meta, info)
    return type(path)(text) if isinstance(path, PurePath) else text


def _stamp(meta: dict, info: RankInfo) -> None:
    meta["rank"] = info.rank
    if info.world_size is not None:
        meta["world_size"] = info.world_size
    local = os.environ.get("LOCAL_RANK", "").strip()
    if local.isdigit():
        meta["local_rank"] = int(local)
    torch = sys.modules.get("torch")
    if "device" not in meta and torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        meta["device"] = device_described(torch.cuda.current_device())


def device_described(index: int) -> str:
    """'cuda:1 (NVIDIA H100 80GB HBM3)': a CUDA device as a trace's meta names it."""
    import torch

    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


# -- merging ---------------------------------------------------------------------------------------
class RankPart(NamedTuple):
    """One rank's part of a merged trace: its steps as a Trace of their own (indices from 0,
    meta: the rank's own), and where each of them is in the merged trace."""

    rank: int
    trace: Trace
    indices: list[int]


def is_merged(trace: Trace) -> bool:
    """Does `trace` hold several ranks (made by `merge`)?"""
    return isinstance(trace.meta.get("ranks"), list)


def merge(traces: Union[Iterable[Union[str, os.PathLike, Trace]], str, os.PathLike, Trace], *,
          names: Optional[list[str]] = None) -> Trace:
    """One Trace of the traces of several ranks (paths, Traces, or merged traces).

    Each trace's rank is its `meta["rank"]` (written by `rank_path` and `observe_torch(path=...)`);
    a trace without one takes its place in the list (0, 1, ...). The steps are copied with their
    `rank` set and their `index` their place in the merged trace; they keep their snapshots, node
    ids and generations. They are ordered by start time where every rank has start times (a rank's
    own order kept, a folded block kept whole), else rank by rank. `meta["ranks"]` lists each
    rank's meta, by rank; the meta values every rank shares are also at the top level.

    Raises MergeError for two traces of one rank, traces of different schema versions, backends
    or world sizes; loading errors (FileNotFoundError, TraceFormatError) as `Trace.load` raises
    them. `names` name the traces in messages (default: their paths, or "trace 2").
    """
    items = [traces] if isinstance(traces, (str, os.PathLike, Trace)) else list(traces)
    if not items:
        raise MergeError("nothing to merge: give the traces of the ranks (paths or Traces)")
    if names is not None and len(names) != len(items):
        raise ValueError(f"{len(names)} names for {len(items)} traces")
    loaded: list[tuple[Trace, str]] = []
    given: dict[object, str] = {}
    for position, item in enumerate(items):
        if not isinstance(item, (Trace, str, os.PathLike)):
            raise TypeError(f"merge() takes paths or cgviz Traces, not {type(item).__name__} (item {position + 1})")
        is_path = not isinstance(item, Trace)
        name = names[position] if names is not None else (
            os.fsdecode(os.fspath(item)) if is_path else f"trace {position + 1}")
        key = os.path.realpath(item) if is_path else id(item)
        if key in given:
            raise MergeError(f"{name} is given twice (as {given[key]} too): give each rank's trace once")
        given[key] = name
        if is_path:
            from cgviz.trace.io import load_trace

            item = load_trace(item)
        loaded.append((item, name))
    _same("schema version", [(t.schema_version, n) for t, n in loaded], "written by different cgviz versions; "
          "load and save the older one again (cgviz.Trace.load(path).save(path)) to merge it")
    _same("backend", [(t.meta.get("backend"), n) for t, n in loaded if t.meta.get("backend") is not None],
          "the ranks of one job are recorded alike")
    parts: list[tuple[int, Trace, str]] = []
    for position, (trace, name) in enumerate(loaded):
        if is_merged(trace):
            parts += [(p.rank, p.trace, f"{name} (rank {p.rank})") for p in rank_traces(trace).values()]
        else:
            parts.append((_rank_of(trace, name, position), trace, name))
    seen: dict[int, str] = {}
    for rank, _, name in parts:
        if rank in seen:
            raise MergeError(f"rank {rank} is in two traces: {seen[rank]} and {name} (each rank's trace once; a trace "
                             "with no rank in its meta takes its place in the list)")
        seen[rank] = name
    sizes = [(t.meta["world_size"], n) for _, t, n in parts if _is_count(t.meta.get("world_size"))]
    _same("world size", sizes, "they are from different runs")
    world = sizes[0][0] if sizes else None
    for rank, _, name in parts:
        if world is not None and rank >= world:
            raise MergeError(f"{name} is rank {rank}, but the world size is {world}")
    parts.sort(key=lambda p: p[0])
    return _merged(parts, world)


def _same(what: str, values: list[tuple[object, str]], why: str) -> None:
    first: dict[object, str] = {}
    for value, name in values:
        first.setdefault(value, name)
    if len(first) > 1:
        (a, na), (b, nb) = list(first.items())[:2]
        raise MergeError(f"cannot merge traces of different {what}s: {na} has {a!r}, {nb} has {b!r} ({why})")


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _rank_of(trace: Trace, name: str, position: int) -> int:
    if "rank" in trace.meta:
        rank = trace.meta["rank"]
        if not _is_count(rank):
            raise MergeError(f"{name} has rank {rank!r} in its meta, not a rank number (0, 1, ...)")
        return rank
    ranks = {s.rank for s in trace.steps} - {None}
    return ranks.pop() if len(ranks) == 1 else position


def _units(steps: list[Step]) -> list[list[Step]]:
    """The steps in order, a folded block (a step repeated with its span) kept as one unit."""
    out: list[list[Step]] = []
    i = len(steps) - 1
    while i >= 0:
        end = steps[i]
        span = min(end.span, i + 1) if end.repeat > 1 else 1
        out.append(steps[i - span + 1 : i + 1])
        i -= span
    out.reverse()
    return out


def _timed_units(rank: int, steps: list[Step]) -> list[tuple[float, int, int, list[Step]]]:
    """(start, rank, order, unit) for each unit; a unit without a start time takes the one before
    it (its rank's order is kept), the first ones the first start time of the rank."""
    units = _units(steps)
    starts = [next((s.start for s in unit if s.start is not None), None) for unit in units]
    known = next((t for t in starts if t is not None), 0.0)
    out = []
    for order, (unit, start) in enumerate(zip(units, starts)):
        known = start if start is not None else known
        out.append((known, rank, order, unit))
    return out


def _merged(parts: list[tuple[int, Trace, str]], world: Optional[int]) -> Trace:
    timed = all(any(s.start is not None for s in t.steps) for _, t, _ in parts)
    if timed:
        ordered = heapq.merge(*(_timed_units(rank, t.steps) for rank, t, _ in parts))
        units = [(rank, unit) for _, rank, _, unit in ordered]
    else:
        units = [(rank, unit) for rank, t, _ in parts for unit in _units(t.steps)]
    steps: list[Step] = []
    for rank, unit in units:
        for step in unit:
            steps.append(dataclasses.replace(step, index=len(steps), rank=rank))
    metas = [{**t.meta, "rank": rank} for rank, t, _ in parts]
    shared = {k: v for k, v in metas[0].items()
              if k not in _OWN_KEYS and all(k in m and m[k] == v for m in metas[1:])}
    meta = {**shared, **({"world_size": world} if world is not None else {}), "ranks": metas}
    return Trace(steps=steps, meta=meta)


def rank_traces(trace: Trace) -> dict[int, RankPart]:
    """Each rank's part of a merged trace, by rank (steps without a rank are left out). A trace
    of one rank (not merged) gives one part: its rank from its meta (0 without one)."""
    if not is_merged(trace):
        rank = trace.meta.get("rank")
        rank = rank if _is_count(rank) else 0
        return {rank: RankPart(rank, trace, list(range(len(trace.steps))))}
    metas = {m.get("rank"): m for m in trace.meta["ranks"] if isinstance(m, dict)}
    by_rank: dict[int, list[int]] = defaultdict(list)
    for i, step in enumerate(trace.steps):
        if step.rank is not None:
            by_rank[step.rank].append(i)
    out = {}
    for rank in sorted(set(by_rank) | {r for r in metas if _is_count(r)}):
        indices = by_rank.get(rank, [])
        steps = [dataclasses.replace(trace.steps[i], index=k) for k, i in enumerate(indices)]
        meta = {k: v for k, v in metas.get(rank, {"rank": rank}).items() if k != "ranks"}  # one rank's
        out[rank] = RankPart(rank, Trace(steps=steps, meta=meta), indices)
    return out


# -- divergence ------------------------------------------------------------------------------------
class _Run(NamedTuple):
    """Calls of one function on one rank: `kinds` (with the merged steps `steps`) `times` times over."""

    kinds: tuple[str, ...]
    steps: tuple[int, ...]
    times: int

    @property
    def length(self) -> int:
        return len(self.kinds) * self.times


# torch.compile's graphs are named with their compile id, "fn [0/1] (forward)": frame 0, compiled a
# second time. Calls are aligned per frame ("fn [0/*] (forward)"), so that a rank that recompiled
# for a new shape shows where it warmed up and recorded while the others replayed.
_RECOMPILE = re.compile(r" \[([^/\]]{1,100})/[^\]]{1,100}\]")  # bounded: an unclosed "[" scans no further


def call_key(function: str) -> str:
    """The name calls are aligned by: the function, any recompilation of one frame the same."""
    return _RECOMPILE.sub(r" [\1/*]", function) if "[" in function else function


def _call_runs(part: RankPart) -> dict[str, list[_Run]]:
    """Per function (`call_key`), the rank's calls in order, as runs: a folded block is not unrolled."""
    runs: dict[str, list[_Run]] = defaultdict(list)
    position = {id(s): i for i, s in enumerate(part.trace.steps)}
    for unit in _units(part.trace.steps):
        times = unit[-1].repeat
        calls: dict[str, list[Step]] = defaultdict(list)
        for step in unit:
            if step.kind in CALL_KINDS and step.function:
                calls[call_key(step.function)].append(step)
        for function, steps in calls.items():
            kinds = tuple(s.kind for s in steps)
            merged = tuple(part.indices[position[id(s)]] for s in steps)
            runs[function].append(_Run(kinds, merged, times))
    return runs


class _Split(NamedTuple):
    """Call `call` (counted from 1) of a function, where the ranks decided differently, and
    `calls` calls from there alike; `decided`: rank -> (kind, merged step index)."""

    call: int
    calls: int
    decided: dict[int, tuple[str, int]]


def _splits(runs: dict[int, list[_Run]]) -> list[_Split]:
    """Where the ranks' calls of one function differ in kind, position by position (the k-th call
    of the function on each rank); stretches where every rank repeats one kind are taken whole.
    Positions past a rank's last call are not compared (`_call_counts` says so)."""
    cursor = {r: [0, 0] for r in runs}  # rank -> [run, offset in it]
    out: list[_Split] = []
    call = 1
    while True:
        here: dict[int, tuple[str, int, int]] = {}  # rank -> kind, step, calls left alike
        for r, (i, offset) in cursor.items():
            if i < len(runs[r]):
                run = runs[r][i]
                m = len(run.kinds)
                uniform = len(set(run.kinds)) == 1
                here[r] = (run.kinds[offset % m], run.steps[offset % m], run.length - offset if uniform else 1)
        if len(here) < 2:
            return out
        step = min(left for _, _, left in here.values())
        if len({kind for kind, _, _ in here.values()}) > 1:
            out.append(_Split(call, step, {r: (k, s) for r, (k, s, _) in here.items()}))
        for r in here:
            c = cursor[r]
            c[1] += step
            if c[1] >= runs[r][c[0]].length:
                c[0], c[1] = c[0] + 1, 0
        call += step


def divergence(trace: Trace) -> list[Finding]:
    """Where the ranks of a merged trace (see `merge`) went different ways: a call where one rank
    warmed up, recorded or ran eagerly while the others replayed (calls aligned per function:
    the k-th call of f on each rank), functions called a different number of times, different
    numbers of graphs recorded, eager fallbacks some ranks took and others did not. Evidence:
    steps of the merged trace. Empty for a trace of one rank."""
    parts = rank_traces(trace) if is_merged(trace) else {}
    if len(parts) < 2:
        return []
    runs = {r: _call_runs(p) for r, p in parts.items()}
    return _decisions(trace, parts, runs) + _call_counts(parts, runs) + _graph_counts(parts) + _eager_reasons(parts)


def _ranks(ranks: Iterable[int]) -> str:
    """'rank 1', 'ranks 0 and 2', 'ranks 0, 1 and 3'."""
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + f" and {rs[-1]}"


def _first_line(reason: str, width: int = 160) -> str:
    line = reason.split("\n", 1)[0].strip()
    return line if len(line) <= width else line[: width - 1] + "…"


def _decisions(trace: Trace, parts: dict[int, RankPart], runs: dict[int, dict[str, list[_Run]]]) -> list[Finding]:
    out = []
    functions = sorted({f for per_rank in runs.values() for f in per_rank})
    for function in functions:
        splits = _splits({r: runs[r][function] for r in parts if function in runs[r]})
        if not splits:
            continue
        first = splits[0]
        groups: dict[str, list[int]] = defaultdict(list)
        for r, (kind, _) in first.decided.items():
            groups[kind].append(r)
        order = sorted(groups, key=lambda k: (len(groups[k]), k == "execute"))  # the odd ones out first
        odd = groups[order[0]]
        said = [f"{_ranks(groups[k])} {_DID.get(k, k)} (step{'s' if len(groups[k]) > 1 else ''} "
                f"{', '.join(str(first.decided[r][1] + 1) for r in sorted(groups[k]))})" for k in order]
        differing = sum(s.calls for s in splits)
        more = (f"; {differing - 1} more call{'s' if differing > 2 else ''} of {function} differ"
                if differing > 1 else "")
        why = trace.steps[first.decided[odd[0]][1]].reason
        title = (f"ranks decided differently at call {first.call} of {function}: {said[0]} while "
                 f"{', '.join(said[1:])}{more}; {_ranks(odd)}: {_first_line(why)}")
        evidence = [first.decided[r][1] for k in order for r in sorted(groups[k])]
        for split in splits[1:]:
            evidence += [split.decided[r][1] for r in sorted(split.decided)]
        out.append(Finding(
            "warning", "divergence", title, list(dict.fromkeys(evidence))[:_MAX_EVIDENCE],
            {"function": function, "call": first.call, "ranks": sorted(first.decided),
             "decisions": {r: k for r, (k, _) in sorted(first.decided.items())},
             "steps": {r: s for r, (_, s) in sorted(first.decided.items())},
             "differing_calls": differing, "first_calls": [s.call for s in splits[:_MAX_EVIDENCE]]},
            fix_for(why) if first.decided[odd[0]][0] == "eager" and fix_for(why) else SAME_SHAPES,
        ))
    return out


def _call_counts(parts: dict[int, RankPart], runs: dict[int, dict[str, list[_Run]]]) -> list[Finding]:
    out = []
    functions = sorted({f for per_rank in runs.values() for f in per_rank})
    for function in functions:
        counts = {r: sum(run.length for run in runs[r].get(function, ())) for r in parts}
        if len(set(counts.values())) < 2:
            continue
        by_count: dict[int, list[int]] = defaultdict(list)
        for r, n in counts.items():
            by_count[n].append(r)
        said = "; ".join(f"{_ranks(rs)}: {n} call{'s' if n != 1 else ''}" if n else f"{_ranks(rs)}: never"
                         for n, rs in sorted(by_count.items(), reverse=True))
        most = max(counts.values())
        evidence = [s for r in sorted(by_count[most]) for run in runs[r][function][-1:] for s in run.steps[-1:]]
        out.append(Finding(
            "warning", "divergence", f"{function} was called a different number of times per rank: {said}",
            evidence, {"function": function, "calls": counts},
            "make every rank run the same steps (the same number of batches: drop_last=True, or a "
            "DistributedSampler that pads); a function only some ranks call (a recompilation with a new "
            "compile id, a branch taken on some ranks) records graphs the others do not",
        ))
    return out


def _graph_counts(parts: dict[int, RankPart]) -> list[Finding]:
    records = {r: p.trace.counts()["record"] for r, p in parts.items()}
    graphs: dict[int, int] = {}
    for r, p in parts.items():
        snap = p.trace.last_snapshot()
        if snap is not None:
            graphs[r] = sum(1 for n in snap.nodes if n.kind == "graph")
    if len(set(records.values())) < 2 and len(set(graphs.values())) < 2:
        return []
    per_function: dict[str, Counter] = defaultdict(Counter)
    for r, p in parts.items():
        for step, times in zip(p.trace.steps, p.trace.repeats()):
            if step.kind == "record" and step.function:
                per_function[step.function][r] += times
    uneven = {f: {r: c[r] for r in parts} for f, c in sorted(per_function.items())
              if len({c[r] for r in parts}) > 1}
    evidence = []
    for function, counts in uneven.items():
        fewest = min(counts.values())
        for r in sorted(parts):
            if counts[r] > fewest:
                evidence += [i for s, i in zip(parts[r].trace.steps, parts[r].indices)
                             if s.kind == "record" and s.function == function]
    if not evidence:  # as many records, but the trees hold different numbers of graphs
        evidence = [parts[r].indices[-1] for r in sorted(parts) if parts[r].indices]
    said = ", ".join(f"rank {r}: {n}" for r, n in sorted(records.items()))
    title = f"the ranks recorded different numbers of CUDA graphs ({said})"
    if len(set(records.values())) < 2:
        title = ("the ranks' trees hold different numbers of CUDA graphs at the end ("
                 + ", ".join(f"rank {r}: {n}" for r, n in sorted(graphs.items())) + ")")
    elif uneven:
        title += "; " + "; ".join(f"{f}: " + ", ".join(f"{n} on rank {r}" for r, n in c.items())
                                  for f, c in list(uneven.items())[:3])
    return [Finding(
        "warning", "divergence_graphs", title, sorted(evidence)[:_MAX_EVIDENCE],
        {"records": records, "graphs": graphs, "per_function": uneven},
        SAME_SHAPES + "; each graph a rank records alone costs recording time and pool memory on that rank only",
    )]


def _eager_reasons(parts: dict[int, RankPart]) -> list[Finding]:
    groups: dict[tuple, dict[int, list[tuple[int, int, str]]]] = defaultdict(lambda: defaultdict(list))
    for r, p in parts.items():
        for step, times, i in zip(p.trace.steps, p.trace.repeats(), p.indices):
            if step.kind == "eager":
                key = (step.function, _VARYING.sub("#", step.reason.split("\n", 1)[0]))
                groups[key][r].append((i, times, step.reason))
    out = []
    for (function, _), by_rank in groups.items():
        if len(by_rank) == len(parts):
            continue
        ranks = sorted(by_rank)
        others = sorted(set(parts) - set(ranks))
        calls = sum(t for r in ranks for _, t, _ in by_rank[r])
        reason = by_rank[ranks[0]][0][2]
        who = function or "a call"
        out.append(Finding(
            "warning", "divergence_eager",
            f"{who} ran eagerly on {_ranks(ranks)} only ({calls} time{'s' if calls != 1 else ''}), not on "
            f"{_ranks(others)}: {_first_line(reason)}",
            [i for r in ranks for i, _, _ in by_rank[r]][:_MAX_EVIDENCE],
            {"function": function, "ranks": ranks, "not_on": others, "calls": calls},
            fix_for(reason) or "make every rank take the same path through the model (inputs on the same devices, "
            "with the same dtypes and shapes), so every rank graphs the same functions",
        ))
    return out


def diagnose_merged(trace: Trace) -> Diagnosis:
    """The findings of a merged trace: where the ranks diverged first, then each rank's own
    findings (`diagnose` of its part; a finding every rank shares once, naming the ranks), with
    evidence as steps of the merged trace. A trace of one rank: `diagnose(trace)`."""
    from cgviz.trace.diagnose import diagnose

    if not is_merged(trace):
        return diagnose(trace)
    parts = rank_traces(trace)
    grouped: dict[tuple, list[tuple[int, Finding]]] = {}
    for rank, part in parts.items():
        for f in diagnose(part.trace):
            f.evidence = [part.indices[i] for i in f.evidence if 0 <= i < len(part.indices)]
            grouped.setdefault((f.severity, f.kind, f.title, f.suggestion), []).append((rank, f))
    findings = divergence(trace)
    for (severity, kind, title, suggestion), members in grouped.items():
        ranks = [r for r, _ in members]
        who = "every rank" if len(ranks) == len(parts) > 1 else _ranks(ranks)
        evidence = list(dict.fromkeys(i for _, f in members for i in f.evidence))[:_MAX_EVIDENCE]
        numbers = {**members[0][1].numbers, "ranks": ranks}
        if any(f.numbers != members[0][1].numbers for _, f in members[1:]):
            numbers["per_rank"] = {r: f.numbers for r, f in members}
        findings.append(Finding(severity, kind, f"{who}: {title}", evidence, numbers, suggestion))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (f.kind != "graphed", order.get(f.severity, len(order))))
    return Diagnosis(findings)
