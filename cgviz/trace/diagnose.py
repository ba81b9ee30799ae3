"""Diagnose a trace: what went wrong in a run, where, and the change that fixes it.

Pure functions over a Trace (cgviz's own trees and observed torch.compile runs alike): every
finding rests on steps of the trace (their indices, so a viewer can jump there) and on numbers
counted from them, never on a guess. The reasons the producers recorded are grouped, not
reworded: they already say what the tree decided and why.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from cgviz.trace.diff import format_bytes
from cgviz.trace.model import Snapshot, Step, Trace

SEVERITIES = ("error", "warning", "info")
CALL_KINDS = ("warmup", "record", "execute", "eager", "error")
OVERWRITTEN = "overwritten by a subsequent run"
# addresses, sizes, ids and counts vary between otherwise identical reasons
_VARYING = re.compile(r"0x[0-9a-f]+|\b\d+\b")

# (words in a reason, what to change): the first match suggests the fix for an eager fallback
_FIXES = (
    (("cpu device", "is on cpu", "cpu scalar"), "move the inputs to the GPU before the call (x.cuda()); keep "
     "CPU scalars as Python numbers"),
    (("mutates input", "mutated inputs", "mutation"), "pass inputs the function writes in place as static "
     "(parameters, buffers), or clone them inside the function instead of writing them"),
    (("output shape depends on the data", "dynamic_output_shape", "nonzero", "masked_select"),
     "avoid outputs whose shape depends on the data (boolean masks, nonzero, unique): keep a fixed shape "
     "with torch.where or a mask multiply"),
    (("copies device memory to the host", "_local_scalar_dense", ".item()", "host"),
     "move .item(), .cpu() and .tolist() out of the graphed function, after the call"),
    (("rerecord_limit", "re-recording limit", "re-recorded"), "keep the inputs that feed one graph in "
     "place between calls (reuse buffers with copy_ instead of new tensors)"),
    (("shape_limit", "input signatures already have graphs"), "pad or bucket inputs to a few shapes, or "
     "mark the varying dimension dynamic (torch._dynamo.mark_dynamic)"),
    (("requires grad",), "run inference under torch.no_grad(), or graph the forward and the backward "
     "as two functions"),
    (("keyword arguments", "not a tensor"), "bind constants with functools.partial and pass tensors "
     "positionally"),
)


@dataclass
class Finding:
    """One thing worth knowing about a run, with the steps it rests on."""

    severity: str  # "error" | "warning" | "info"
    kind: str  # "graphed", "coverage", "eager", "rerecord", "overwritten", "pending_backward", "shapes", "pool"
    title: str
    evidence: list[int]  # indices of the stored steps it rests on, the first one to look at first
    numbers: dict = field(default_factory=dict)
    suggestion: str = ""

    def text(self) -> str:
        where = f" (step {self.evidence[0] + 1})" if self.evidence else ""  # counted from 1, as the explorer shows
        out = f"{self.severity}: {self.title}{where}"
        if self.suggestion:
            out += f"\n    fix: {self.suggestion}"
        return out


@dataclass
class Diagnosis:
    """The findings of one trace, the most important first."""

    findings: list[Finding]

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def text(self) -> str:
        if not self.findings:
            return "no findings: nothing was called through a tree"
        return "\n".join(f.text() for f in self.findings)

    def to_dict(self) -> dict:
        return {"findings": [asdict(f) for f in self.findings]}


def diagnose(trace: Trace) -> Diagnosis:
    """Every finding of `trace`, the most severe first ('nothing was graphed' always first)."""
    steps = trace.steps
    times = trace.repeats()
    findings: list[Finding] = []
    findings += _coverage(steps, times)
    findings += _eager_groups(steps, times)
    findings += _rerecords(steps)
    findings += _overwritten(steps)
    findings += _pending_backward(steps)
    findings += _shapes(trace)
    findings += _pool(trace)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (f.kind != "graphed", order[f.severity]))
    return Diagnosis(findings)


def _calls(steps: list[Step], times: list[int]) -> dict[str, Counter]:
    """Per function, how many calls each kind of decision took (repeats counted)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for step, n in zip(steps, times):
        if step.kind in CALL_KINDS and step.function:
            out[step.function][step.kind] += n
    return out


def _coverage(steps: list[Step], times: list[int]) -> list[Finding]:
    per_function = _calls(steps, times)
    total = sum(sum(c.values()) for c in per_function.values())
    if not total:
        return []
    replayed = sum(c["execute"] for c in per_function.values())
    numbers = {
        "calls": total,
        "replayed": replayed,
        "per_function": {name: dict(c) for name, c in sorted(per_function.items())},
    }
    first_call = next(s.index for s in steps if s.kind in CALL_KINDS and s.function)
    if replayed == 0:
        recorded = sum(c["record"] for c in per_function.values())
        calls = "1 call" if total == 1 else f"{total} calls"
        title = f"no call of this run was replayed from a CUDA graph: {calls}, {recorded} recorded"
        if max(sum(c.values()) for c in per_function.values()) < 3:  # a warmup and a record come first
            return [Finding("info", "graphed", title + " (a function replays from its third call)", [first_call], numbers)]
        return [Finding("error", "graphed", title, [first_call], numbers, _fix_for_functions(steps, per_function))]
    out = [Finding(
        "info", "coverage",
        f"{replayed} of {total} calls replayed a CUDA graph ({100 * replayed / total:.0f} %); the rest warmed up, "
        "recorded or ran eagerly", [first_call], numbers,
    )]
    for name, counts in sorted(per_function.items()):
        calls = sum(counts.values())
        if counts["execute"] == 0 and calls >= 3 and counts["eager"] < calls:  # all eager: see its eager finding
            evidence = [s.index for s in steps if s.function == name and s.kind in CALL_KINDS]
            out.append(Finding(
                "warning", "coverage", f"{name} never replayed in {calls} calls ({_kinds(counts)})",
                evidence[:1] + evidence[-1:], {"function": name, **dict(counts)},
                _fix_for_functions(steps, {name: counts}),
            ))
    return out


def _kinds(counts: Counter) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)


def _fix_for_functions(steps: list[Step], functions: dict) -> str:
    """The fix suggested by the latest eager or record reason of these functions."""
    for step in reversed(steps):
        if step.function in functions and step.kind in ("eager", "record", "warmup"):
            fix = fix_for(step.reason)
            if fix:
                return fix
    return "call each function at least three times with the same input shapes: warmup, record, then replays"


def fix_for(reason: str) -> str:
    """The change suggested for a decision with this reason, or ''."""
    text = reason.lower()
    for words, fix in _FIXES:
        if any(w in text for w in words):
            return fix
    if "dead at recording and is live now" in text or "pending backward" in text:
        return (
            "start each iteration with torch.compiler.cudagraph_mark_step_begin() (tree.mark_step()), or let go of "
            "outputs you no longer need before the next call"
        )
    return ""


def _eager_groups(steps: list[Step], times: list[int]) -> list[Finding]:
    """Eager fallbacks grouped by function and reason (addresses and counts aside)."""
    groups: dict[tuple, list[tuple[Step, int]]] = defaultdict(list)
    for step, n in zip(steps, times):
        if step.kind == "eager":
            groups[step.function, _VARYING.sub("#", step.reason.split("\n")[0])].append((step, n))
    out = []
    for (function, _), members in groups.items():
        calls = sum(n for _, n in members)
        first = members[0][0]
        who = function or "a call"
        why = first.reason.splitlines()[0]
        why = why.split(" runs eagerly: ", 1)[-1] if function and why.startswith(function) else why
        out.append(Finding(
            "warning", "eager", f"{who} ran eagerly {calls} time{'s' if calls != 1 else ''}: {why}",
            [s.index for s, _ in members][:20], {"function": function, "calls": calls},
            fix_for(first.reason),
        ))
    return out


def _rerecords(steps: list[Step]) -> list[Finding]:
    """Functions recorded more than once at one place of the tree, and why."""
    records: dict[tuple, list[Step]] = defaultdict(list)
    for step in steps:
        if step.kind == "record" and step.function:
            records[step.function, step.parent].append(step)
    out = []
    for (function, parent), recs in records.items():
        again = [s for s in recs[1:]]
        if not again:
            continue
        where = "as a root" if parent is None else f"under node {parent}"
        why = Counter(_record_cause(s.reason) for s in again)
        causes = "; ".join(f"{n}× {cause}" for cause, n in why.most_common())
        out.append(Finding(
            "warning", "rerecord", f"{function} was recorded {len(recs)} times {where}: {causes}",
            [s.index for s in recs], {"function": function, "parent": parent, "records": len(recs),
                                       "causes": dict(why)},
            fix_for(again[-1].reason) or _CAUSE_FIX.get(why.most_common(1)[0][0], ""),
        ))
    return out


_CAUSE_FIX = {
    "a static input moved": "keep parameters and buffers in place (update them with copy_ or in-place ops, "
    "not by assigning new tensors)",
    "an input that was an output of the path moved": "pass the outputs of the previous call on as they are",
    "an output dead at recording is live now": "start each iteration with torch.compiler.cudagraph_mark_step_begin() "
    "(tree.mark_step()), or let go of outputs you no longer need before the next call",
    "a new input shape or compile": "pad or bucket inputs to a few shapes, or mark the varying dimension dynamic",
}


def _record_cause(reason: str) -> str:
    text = reason.lower()
    if "static input" in text and ("moved" in text or "data pointer changed" in text):
        return "a static input moved"
    if "was output" in text and "now it is at" in text:
        return "an input that was an output of the path moved"
    if "dead at recording and is live now" in text:
        return "an output dead at recording is live now"
    if "compile id" in text or "has no root graph yet" in text:
        return "a new input shape or compile"
    return "no recorded graph could take the call"


def _overwritten(steps: list[Step]) -> list[Finding]:
    """Outputs used after the next step overwrote them: the use, and the step that began it."""
    out = []
    for step in steps:
        if step.kind != "error" or OVERWRITTEN not in step.reason:
            continue
        began = next(
            (s for s in reversed(steps[: step.index]) if s.kind == "generation" and s.invalidated), None
        ) or next((s for s in reversed(steps[: step.index]) if s.kind == "generation"), None)
        evidence = [step.index] + ([began.index] if began is not None else [])
        when = f": step {began.index + 1} began generation {began.generation}" if began is not None else ""
        out.append(Finding(
            "error", "overwritten", f"an output was used after a later run overwrote it{when}",
            evidence, {"generation": None if began is None else began.generation},
            "clone an output you keep across steps (y = y.clone()) before the next step, or use it before "
            "calling the function again",
        ))
    return out


def _pending_backward(steps: list[Step]) -> list[Finding]:
    """Decisions made while a forward waited for its backward: said so in cgviz's reasons, and
    seen in torch's trees as a forward recorded as a child of a forward."""
    recorded = {s.node: s.function or "" for s in steps if s.kind == "record"}
    hits = [
        s for s in steps
        if "pending backward" in s.reason
        or (s.kind == "record" and "(forward)" in (s.function or "") and "(forward)" in recorded.get(s.parent, ""))
    ]
    if not hits:
        return []
    return [Finding(
        "warning", "pending_backward",
        f"{len(hits)} decision(s) were made while a forward waited for its backward: its saved outputs keep "
        "the path live, so the next forward records a child instead of replaying",
        [s.index for s in hits][:20], {"steps": len(hits)},
        "run each backward before the next forward, or start each iteration with "
        "torch.compiler.cudagraph_mark_step_begin()",
    )]


def _shapes(trace: Trace) -> list[Finding]:
    """Functions with graphs for several input signatures, and the pool memory their outputs hold."""
    snap = trace.last_snapshot()
    if snap is None:
        return []
    graphs: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for node in snap.nodes:
        if node.kind == "graph" and node.signature.startswith("("):  # cgviz's "(float32[2, 8], ...)"
            graphs[node.function][node.signature].append(node)
    out = []
    for function, by_signature in sorted(graphs.items()):
        if len(by_signature) < 2:
            continue
        memory = {
            sig: sum(o.nbytes for n in nodes for o in n.outputs if o.alias_of is None) for sig, nodes in by_signature.items()
        }
        first = min(n.id for nodes in by_signature.values() for n in nodes)
        evidence = [s.index for s in trace.steps if s.kind == "record" and s.function == function]
        out.append(Finding(
            "info", "shapes", f"{function} has graphs for {len(by_signature)} input signatures",
            evidence[:20] or [0], {"function": function, "signatures": len(by_signature),
                                   "graphs": sum(len(v) for v in by_signature.values()),
                                   "output_bytes": memory, "first_node": first},
            "pad or bucket inputs to a few shapes if the number keeps growing",
        ))
    return out + _recompiles(trace)


_COMPILE_ID = re.compile(r"\(compile id (\d+)/(\d+)\)")


def _recompiles(trace: Trace) -> list[Finding]:
    """Observed torch.compile runs: one function compiled again (compile ids F/0, F/1, ...), each
    compilation recorded as graphs of its own; a different frame F is another graph (a break)."""
    groups: dict[tuple, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step in trace.steps:
        m = _COMPILE_ID.search(step.reason) if step.kind == "record" and step.function else None
        if m:
            groups[step.function, m.group(1)][m.group(2)].append(step.index)
    out = []
    for (function, frame), by_recompile in sorted(groups.items()):
        if len(by_recompile) < 2:
            continue
        evidence = sorted(i for steps in by_recompile.values() for i in steps)
        out.append(Finding(
            "warning", "shapes",
            f"{function} was compiled {len(by_recompile)} times (compile ids {frame}/0 to "
            f"{frame}/{max(map(int, by_recompile))}), each recorded as a graph of its own",
            evidence[:20], {"function": function, "frame": int(frame), "compilations": len(by_recompile),
                            "records": len(evidence)},
            "mark the dimension that varies dynamic (torch._dynamo.mark_dynamic, or torch.compile(dynamic=True)), "
            "or pad or bucket inputs to a few shapes",
        ))
    return out


def _pool(trace: Trace) -> list[Finding]:
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


def diagnose_any(source: Any) -> Diagnosis:
    """Diagnose a Trace, or anything with a `.trace` (a Tree)."""
    trace = getattr(source, "trace", source)
    if not isinstance(trace, Trace):
        raise TypeError(f"diagnose() needs a cgviz Trace or Tree, not {type(source).__name__}")
    return diagnose(trace)


def _owner_bytes(snap: Snapshot) -> Counter:
    """Bytes of allocated pool blocks owned by each node in `snap`."""
    owners: Counter = Counter()
    for seg in snap.segments:
        for b in seg.blocks:
            if b.allocated and b.node is not None:
                owners[b.node] += b.size
    return owners
