"""The doctor's findings about what torch.compile decided while compiling: graph breaks and the
time spent between the graphs, ops graph partitioning kept out of CUDA graphs, CUDA graphs skipped
while compiling, graphs for several input signatures and recompilations, and graphs compiled before
observing began. Also names apart the graphs of traces recorded before the observer gave each graph
its compile id."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import replace
from typing import Optional

from cgviz.trace.findings import CALL_KINDS, Finding
from cgviz.trace.model import Step, Trace
from cgviz.trace.reasons import (
    GRAPH_BREAK, OBSERVE_FIRST_CALL, PARTITIONED, at_source, fix_for, graph_name, torch_skip, torch_skipped,
    user_source,
)
from cgviz.trace.units import format_us, plural


_BREAK = re.compile(r"^graph break in (?P<function>\S+)")
_BREAK_REASON = re.compile(r"Python between them: (?P<why>.*)", re.DOTALL)
_BREAK_PREAMBLE = "encountered graph break when attempting to trace"
_RESUME = "torch_dynamo_resume_in_{}_at_"
_RESUME_PREFIX = "torch_dynamo_resume_in_"
_RESUMED_FIX = ("the code after a graph break is compiled and recorded again for each way into it (each branch "
                "taken): remove the graph break (its finding says where)")
# the compile id in a record step's reason: "(compile id 0/1)"
_COMPILE_ID = re.compile(r"\(compile id (\d{1,18})/(\d{1,18})\)")  # int() refuses thousands of digits
# the compile id in an observed graph's name: "fn [0/1] (inference)"
_NAME_ID = re.compile(r" \[[^\]]{0,100}\]")  # bounded: an unclosed "[" scans no further


def _base(function: Optional[str]) -> str:
    return (function or "").split(" ", 1)[0]


def graph_breaks(steps: list[Step]) -> list[Finding]:
    """Each place torch.compile broke a function's graph: the user's line, dynamo's reason, how
    many graphs the function runs as, and the time spent between them on each call."""
    breaks = [(s, _BREAK.match(s.reason)["function"]) for s in steps
              if s.kind == "compile" and s.reason.startswith(GRAPH_BREAK)]
    out = []
    seen = set()
    for step, function in breaks:
        source = user_source(step.reason)
        key = (function, None if source is None else (source["file"], source["line"]))
        if key in seen:
            continue
        seen.add(key)
        root = function  # a break in a resume function belongs to the function it resumes
        if function.startswith(_RESUME_PREFIX):
            root = function[len(_RESUME_PREFIX):].rsplit("_at_", 1)[0]
        count = sum(1 for _, f in breaks if f == root or f.startswith(_RESUME.format(root)))
        found = _BREAK_REASON.search(step.reason)
        lines = [ln.strip() for ln in (found["why"] if found else "").splitlines()]
        cause = next((ln for ln in lines if ln and not ln.lower().startswith(_BREAK_PREAMBLE)), "a graph break")
        gaps = _gaps(steps, function)
        numbers = {"function": function, "graphs": count + 1, "cause": cause, "source": source}
        cost = ""
        if gaps:
            numbers["between_graphs_us"] = statistics.median(gaps)
            cost = f"; each call spends {format_us(statistics.median(gaps))} between them (median of {plural(len(gaps), 'call')})"
        where = f" at {source['file']}:{source['line']}" if source else ""
        title = f"{root} runs as {count + 1} graphs with Python between them: a graph break{where} ({cause}){cost}"
        out.append(Finding("warning", "graph_break", title, [step.index], numbers, _break_fix(cause)))
    return out


def _gaps(steps: list[Step], function: str) -> list[float]:
    """µs from the end of a call of `function`'s graph to the start of its resumed graph's call."""
    gaps = []
    prev: Optional[Step] = None
    for step in steps:
        if step.kind not in CALL_KINDS or not step.function:
            continue
        if (prev is not None and _base(prev.function) == function and prev.start is not None
                and step.start is not None and _base(step.function).startswith(_RESUME.format(function))):
            gaps.append(max(0.0, (step.start - prev.start - prev.duration) * 1e6))
        prev = step
    return gaps


def _break_fix(cause: str) -> str:
    text = cause.lower()
    if "item()" in text or "data-dependent" in text or "data dependent" in text or "dynamic control flow" in text:
        return ("keep the branch on the GPU: torch.where (computes both sides) or torch.cond instead of an if on a "
                "tensor's value, or decide on the host outside the compiled function")
    return ("remove what breaks the graph (torch._dynamo.explain(fn)(*args) lists each break with torch's hints), or "
            "compile the pieces as separate functions")


# why inductor kept ops out of CUDA graphs (its graph partitioning reasons), and what to change
_PARTITION_FIXES = (
    ("devicecopy", "do copies between the host and the GPU (x.cpu(), .item(), .to('cuda') of a CPU tensor) before or "
     "after the compiled function, not inside it"),
    ("unbacked", "avoid ops whose output shape depends on the data (nonzero, boolean masks, unique): keep a fixed "
     "shape with torch.where or a mask multiply, and select rows after the call"),
    ("dynamic shape", "let torch record a CUDA graph per input shape: leave torch._inductor.config.triton."
     "cudagraph_skip_dynamic_graphs at False (the default), or pad inputs to a few fixed shapes"),
    ("cudagraph-unsafe", "ops a CUDA graph cannot hold (custom ops tagged cudagraph_unsafe, and ops torch keeps out "
     "of graphs such as .item()) always run eagerly: keep them out of the hot path"),
    ("custom partition op", "remove the op from torch._inductor.config.custom_should_partition_ops if a CUDA graph "
     "can hold it"),
    ("conditional", "torch.cond runs eagerly between CUDA graphs: compute both sides and pick with torch.where"),
    ("cpu ops", "keep the compiled function's work on the GPU: compute the CPU part on the GPU or move it out"),
)


def partitions(steps: list[Step]) -> list[Finding]:
    """Ops inductor's graph partitioning kept out of CUDA graphs: they run eagerly between the
    graph's CUDA graphs on every call. Which, why, where in the user's code, and the fix."""
    out = []
    for step in steps:
        if step.kind != "compile" or PARTITIONED not in step.reason:
            continue
        skip = torch_skip(step.reason) or {}
        head = step.reason.split(": " + PARTITIONED, 1)[0]
        cause = skip.get("cause") or ""
        fix = next((f for words, f in _PARTITION_FIXES if words in cause.lower()), "")
        out.append(Finding("warning", "partition", head + at_source(skip.get("source")),
                           [step.index], {"cause": cause, "source": skip.get("source")}, fix))
    return out


def compile_skips(steps: list[Step]) -> list[Finding]:
    """torch.compile skipped CUDA graphs while compiling, for a graph whose calls the trace does
    not show as eager (a partition, or a message joined to no call); where no call went through
    a tree at all, the first finding says it already."""
    if not any(s.kind in CALL_KINDS and s.function for s in steps):
        return []
    eager = {(s.function, (torch_skip(s.reason) or {}).get("cause")) for s in steps if s.kind == "eager"}
    out = []
    seen = set()
    for step in steps:
        if step.kind != "compile" or not torch_skipped(step.reason):
            continue
        skip = torch_skip(step.reason) or {}
        key = (step.function, skip.get("cause"))
        if key in eager or key in seen:
            continue
        seen.add(key)
        title = (f"torch.compile skipped CUDA graphs while compiling {step.function or 'a graph'}: "
                 f"{skip.get('cause')}{at_source(skip.get('source'))}")
        out.append(Finding("warning", "compile_skip", title, [step.index],
                           {"function": step.function, "cause": skip.get("cause"), "source": skip.get("source")},
                           fix_for(step.reason)))
    return out


def shapes(trace: Trace, steps: list[Step]) -> list[Finding]:
    """Functions with graphs for several input signatures, and the pool memory their outputs hold."""
    snap = trace.last_snapshot()
    if snap is None:
        return _recompiles(steps)
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
        evidence = [s.index for s in steps if s.kind == "record" and s.function == function]
        out.append(Finding(
            "info", "shapes", f"{function} has graphs for {len(by_signature)} input signatures",
            evidence[:20] or [0], {"function": function, "signatures": len(by_signature),
                                   "graphs": sum(len(v) for v in by_signature.values()),
                                   "output_bytes": memory, "first_node": first},
            "pad or bucket inputs to a few shapes if the number keeps growing",
        ))
    return out + _recompiles(steps)


def graphs_told_apart(steps: list[Step]) -> list[Step]:
    """Steps whose function names tell torch.compile's graphs apart.

    The observer names each compiled graph with its compile id ("fn [0/0] (inference)",
    "fn [1/0] (inference)"). Traces recorded before it did gave every graph torch's name for
    its code, so both sides of a graph break read "partition_0 (inference)". Their record
    steps carry the compile id, and execute steps the recorded node: those steps are named
    apart here when one name covers graphs of several frames. Warmup and eager steps name no
    compiled graph and keep the shared name.
    """
    compile_ids: dict[int, str] = {}
    frames: dict[str, set] = defaultdict(set)
    for step in steps:
        m = _COMPILE_ID.search(step.reason) if step.kind == "record" and step.function else None
        if m and "[" not in step.function and step.node is not None:
            compile_ids[step.node] = f"{m.group(1)}/{m.group(2)}"
            frames[step.function].add(m.group(1))
    shared = {function for function, seen in frames.items() if len(seen) > 1}
    if not shared:
        return steps
    return [
        replace(s, function=graph_name(s.function, compile_ids[s.node]))
        if s.function in shared and s.kind in ("record", "execute") and s.node in compile_ids else s
        for s in steps
    ]


def _recompiles(steps: list[Step]) -> list[Finding]:
    """Observed torch.compile runs: one function compiled again (compile ids F/0, F/1, ...), each
    compilation recorded as graphs of its own; a different frame F is another graph (a break).
    Counted per device: torch compiles a function once for each device it is called on."""
    groups: dict[tuple, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step in steps:
        m = _COMPILE_ID.search(step.reason) if step.kind == "record" and step.function else None
        if m:
            groups[_NAME_ID.sub("", step.function), m.group(1), step.device or ""][m.group(2)].append(step.index)
    out = []
    for (function, frame, device), by_recompile in sorted(groups.items()):
        if len(by_recompile) < 2:
            continue
        evidence = sorted(i for steps in by_recompile.values() for i in steps)
        out.append(Finding(
            "warning", "shapes",
            f"{function}{f' on {device}' if device else ''} was compiled {len(by_recompile)} times (compile ids "
            f"{', '.join(f'{frame}/{r}' for r in sorted(by_recompile, key=int))}), each recorded as a graph of its own",
            evidence[:20], {"function": function, "frame": int(frame), "compilations": len(by_recompile),
                            "records": len(evidence)},
            _RESUMED_FIX if function.startswith(_RESUME_PREFIX) else
            "pad or bucket inputs to a few shapes; marking the dimension dynamic (torch._dynamo.mark_dynamic, or "
            "torch.compile(dynamic=True)) saves the recompilations but not the graphs: torch records a CUDA graph "
            "per input shape either way",
        ))
    return out


def before_observing(steps: list[Step], meta: dict) -> list[Finding]:
    """Observed torch.compile runs: graphs compiled and first called before observing began.
    Their warmups, and any decision torch took then, are not in the trace."""
    before = meta.get("compiled_before_observing") or []
    if not before:
        return []
    evidence = [next(s.index for s in steps if s.function == name) for name in before
                if any(s.function == name for s in steps)]
    n = len(before)
    return [Finding(
        "info", "before_observing",
        f"{n} compiled graph{'s were' if n != 1 else ' was'} compiled and first called before observing began "
        f"({', '.join(before)}): {'their' if n != 1 else 'its'} first calls, and any decision torch took then, are "
        "not in this trace", sorted(evidence)[:20], {"functions": list(before)}, OBSERVE_FIRST_CALL,
    )]
