"""Diagnose a trace: what went wrong in a run, where, and the change that fixes it.

Pure functions over a Trace (cgviz's own trees and observed torch.compile runs alike, and plain
CUDA graphs: diagnose_graphs.py): every finding rests on steps of the trace (their indices, so a
viewer can jump there) and on numbers counted from them, never on a guess. The reasons the
producers recorded are grouped, not reworded: they already say what the tree decided and why.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterator, Optional

from cgviz.trace.units import format_bytes, format_us, plural
from cgviz.trace.model import Snapshot, Step, Trace

SEVERITIES = ("error", "warning", "info")
CALL_KINDS = ("warmup", "record", "execute", "eager", "error")
OVERWRITTEN = "overwritten by a subsequent run"
# addresses, sizes, ids and counts vary between otherwise identical reasons
_VARYING = re.compile(r"0x[0-9a-f]+|\b\d+\b")
# How the observer of torch.compile words what torch decided (cgviz/observe/torch_compile.py):
# torch's own skip message follows SKIPPED; BEFORE_OBSERVING marks a call of a graph torch said
# why about before observing began (it says it once), so its message is not in the trace.
SKIPPED = "torch.compile skipped CUDA graphs: "
# ... and where torch turned them off without a message, what the compiled graph shows
SILENT = "torch turned them off without a message: "
# ... and the ops inductor's graph partitioning kept out of CUDA graphs (the rest are graphed)
PARTITIONED = "kept out of CUDA graphs: "
BEFORE_OBSERVING = "torch said why before observing began"
OBSERVE_FIRST_CALL = (
    "observe from the first call: enter cgviz.observe_torch() before the first call of the compiled function "
    "(or call torch._dynamo.reset() first), so torch's message and the source line it names are in the trace"
)
# One frame of a Python stack as torch writes it ('File "x.py", line 3, in fn' and the code line under it)
_FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d+), in (?P<function>[^\s,]+)[^\n]*(?:\n(?P<code>[^\n]*))?')
_STACK_START = re.compile(r"\s*\.?\s*(?:Found from\s*:?|input stack trace\s*:)", re.IGNORECASE)
_SKIP_PREFIX = re.compile(r"^(?:(?:skipping|disabling) cudagraphs? due to\s*)+", re.IGNORECASE)
_INPUT = re.compile(r"cpu device \((\w+)\)|input name: (\w+)")
_OPERATION = re.compile(r"incompatible op (\S+)|control flow operator: (\S+?)\.?(?:\s|$)")

# (words in a reason, what to change): the first match suggests the fix for an eager fallback
_FIXES = (
    (("cudagraph_skip_dynamic_graphs",), "let torch record a CUDA graph per input shape: leave "
     "torch._inductor.config.triton.cudagraph_skip_dynamic_graphs at False (the default), or pad inputs to a few "
     "fixed shapes and compile without dynamic=True"),
    (("left no part of the graph to record",), "give the compiled function GPU work that a CUDA graph can hold: "
     "move CPU work, host reads and ops on data-dependent shapes out of it"),
    (("cpu device", "is on cpu", "cpu scalar"), "move the inputs to the GPU before the call (x.cuda()); keep "
     "CPU scalars as Python numbers"),
    (("mutates input", "mutated inputs", "mutation"), "make the tensor the function writes in place static: "
     "torch._dynamo.mark_static_address(t) before the first call, or keep it as a module's buffer "
     "(register_buffer)"),
    (("output shape depends on the data", "dynamic_output_shape", "nonzero", "masked_select"),
     "avoid outputs whose shape depends on the data (boolean masks, nonzero, unique): keep a fixed shape "
     "with torch.where or a mask multiply"),
    (("copies device memory to the host", "_local_scalar_dense", ".item()", "host"),
     "move .item(), .cpu() and .tolist() out of the graphed function, after the call"),
    (("cudagraph_dynamic_shape_rerecord_limit",), "pad or bucket inputs to a few shapes (torch._inductor.config."
     "triton.cudagraph_capture_sizes names the shapes to graph), or raise cudagraph_dynamic_shape_rerecord_limit"),
    (("managed input re-recording threshold", "an input that is an output of the path kept moving"),
     "keep the outputs one compiled function passes to the next in place (reuse them, or copy_ into a fixed "
     "buffer), or let torch copy them: torch._inductor.config.triton.cudagraph_managed_input_rerecord_action = "
     "'copy' (torch 2.15)"),
    (("rerecord_limit", "re-recording limit", "re-recorded"), "keep the inputs that feed one graph in "
     "place between calls (reuse buffers with copy_ instead of new tensors)"),
    (("shape_limit", "input signatures already have graphs"), "pad or bucket inputs to a few shapes: CUDA graphs "
     "are recorded per input shape, also where torch.compile compiled the dimension dynamic"),
    (("requires grad",), "run inference under torch.no_grad(), or graph the forward and the backward "
     "as two functions"),
    (("keyword arguments", "not a tensor"), "bind constants with functools.partial and pass tensors "
     "positionally"),
)


@dataclass
class Finding:
    """One thing worth knowing about a run, with the steps it rests on."""

    severity: str  # "error" | "warning" | "info"
    kind: str  # "graphed", "coverage", "eager", "rerecord", "overwritten", "pending_backward", "shapes",
    # "before_observing", "pool", "time", "graph_break", "compile_skip", "raised", "partition";
    # plain CUDA graphs (diagnose_graphs.py): "recapture", "graph_pool", "never_replayed", "padding"
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


# the user's line in a reason the engine wrote ("... at model.py:5 in step (if y.item() > 0:)), which ...")
_USER_LINE = re.compile(r" at (?P<file>[^\s:()]+):(?P<line>\d+) in (?P<function>[^\s(]+)(?: \((?P<code>.*?)\))?\),")


def user_source(reason: str) -> Optional[dict]:
    """The user's source line a reason names (file, line, function, code), or None."""
    found = _USER_LINE.search(reason)
    if found is None:
        return None
    return {"file": found["file"], "line": int(found["line"]), "function": found["function"],
            "code": found["code"] or ""}


def finding_record(finding: Finding) -> dict:
    """A finding as `cgviz doctor --json` gives it: its fields, and the cause, the source
    location (or null) and the fix as fields of their own."""
    record = asdict(finding)
    numbers = finding.numbers
    record["cause"] = numbers.get("cause") if isinstance(numbers.get("cause"), str) else finding.title
    source = numbers.get("source")
    record["source"] = source if isinstance(source, dict) else None
    record["fix"] = finding.suggestion or None
    return record


@dataclass
class Diagnosis:
    """The findings of one trace, the most important first."""

    findings: list[Finding]
    graphs: int = 0  # CUDA graphs made outside the trees that the trace holds

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def text(self) -> str:
        if not self.findings:
            if self.graphs:
                return f"no findings: nothing looks wrong with the {plural(self.graphs, 'CUDA graph')} of the trace"
            return "no findings: nothing was called through a tree"
        return "\n".join(f.text() for f in self.findings)

    def to_dict(self) -> dict:
        return {"findings": [finding_record(f) for f in self.findings]}


def diagnose(trace: Trace) -> Diagnosis:
    """Every finding of `trace`, the most severe first ('nothing was graphed' always first)."""
    if isinstance(trace.meta.get("ranks"), list):  # a merged multi-rank trace (cgviz.merge): per rank, and divergence
        from cgviz.trace.ranks import diagnose_merged

        return diagnose_merged(trace)
    steps = _graphs_told_apart(trace.steps)
    times = trace.repeats()
    eager, again, waiting = _eager_groups(steps, times), _rerecords(steps), _pending_backward(steps)
    findings: list[Finding] = []
    findings += _coverage(steps, times, trace.meta, eager, again, waiting)
    findings += eager
    findings += again
    findings += _overwritten(steps, trace.meta)
    findings += _raised(steps)
    findings += _graph_breaks(steps)
    findings += _compile_skips(steps)
    findings += _partitions(steps)
    findings += waiting
    findings += _shapes(trace, steps)
    findings += _before_observing(steps, trace.meta)
    findings += _pool(trace)
    findings += _times(steps, trace.meta)
    from cgviz.trace.diagnose_graphs import graph_findings  # it builds on Finding, defined here

    findings += graph_findings(trace)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (f.kind != "graphed", order[f.severity]))
    return Diagnosis(findings, len(trace.graphs))


def _calls(steps: list[Step], times: list[int]) -> dict[str, Counter]:
    """Per function, how many calls each kind of decision took (repeats counted)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for step, n in zip(steps, times):
        if step.kind in CALL_KINDS and step.function:
            out[step.function][step.kind] += n
    return out


def _nothing_called(steps: list[Step], meta: dict) -> list[Finding]:
    """No call went through a tree: said first, when torch skipped CUDA graphs (while observing, or
    before observing began: then only torch's count of its skips is known)."""
    skips = [s for s in steps if (s.kind == "eager" and not s.function) or (s.kind == "compile" and _skipped(s.reason))]
    title = "no call of this run was replayed from a CUDA graph"
    if skips:
        n = len(skips)
        skip = torch_skip(skips[-1].reason) or {}
        said = f": {skip['cause']}{_where(skip.get('source'))}" if skip.get("cause") else ""
        return [Finding(
            "error", "graphed",
            f"{title}: torch.compile skipped CUDA graphs while compiling ({plural(n, 'decision')}){said}; "
            "no call went through a CUDA graph tree", [skips[-1].index],
            {"calls": 0, "replayed": 0, "skips": n, "cause": skip.get("cause"), "source": skip.get("source")},
            fix_for(skips[-1].reason),
        )]
    before = meta.get("cudagraph_skips_before_observing") or 0
    if before and meta.get("backend") == "torch.compile":
        return [Finding(
            "warning", "graphed",
            f"{title}: no call went through torch's CUDA graph trees while observing; torch had skipped CUDA "
            f"graphs {before} time{'s' if before != 1 else ''} in this process before observing began (a graph "
            "it skipped runs eagerly, outside its trees, and is not seen)",
            [], {"calls": 0, "replayed": 0, "skips_before_observing": before}, OBSERVE_FIRST_CALL,
        )]
    return []


def _coverage(steps: list[Step], times: list[int], meta: dict, eager: list[Finding], again: list[Finding],
              waiting: list[Finding]) -> list[Finding]:
    """How many calls replayed. Where none did, the first finding also says why, from the eager,
    re-record and pending-backward findings made for the trace."""
    per_function = _calls(steps, times)
    total = sum(sum(c.values()) for c in per_function.values())
    if not total:
        return _nothing_called(steps, meta)
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
        off = [s for s in steps if s.kind == "compile" and _skipped(s.reason) and s.function in per_function]
        if off:  # torch decided while compiling: its reason and source line come first
            skip = torch_skip(off[0].reason) or {}
            title += (f"; torch.compile compiled {off[0].function} without CUDA graphs: {skip.get('cause')}"
                      f"{_where(skip.get('source'))}")
            numbers.update(cause=skip.get("cause"), source=skip.get("source"))
            return [Finding("error", "graphed", title, [off[0].index, first_call], numbers, fix_for(off[0].reason))]
        skipped = [g for g in eager if g.numbers.get("cause") and g.numbers.get("function")]
        if skipped:  # every call ran eagerly where torch said why
            title += f": {skipped[0].title}"
            numbers.update(cause=skipped[0].numbers["cause"], source=skipped[0].numbers.get("source"))
            return [Finding("error", "graphed", title, [first_call], numbers, skipped[0].suggestion)]
        if waiting:  # forwards waiting for a backward keep the tree warming up
            title += f": {waiting[0].title}"
            numbers["cause"] = waiting[0].numbers["cause"]
            return [Finding("error", "graphed", title, [first_call] + waiting[0].evidence[:1], numbers,
                            waiting[0].suggestion)]
        rerecorded = [f for f in again if f.numbers["function"] in per_function]
        if rerecorded:  # recorded again and again: why, and its fix
            title += f": {rerecorded[0].title}"
            numbers["cause"] = next(iter(rerecorded[0].numbers["causes"]))
            return [Finding("error", "graphed", title, [first_call] + rerecorded[0].evidence[1:2], numbers,
                            rerecorded[0].suggestion)]
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
            failed = next((s for s in steps if s.function == name and s.kind == "error"), None)
            fix = f"see the error it raised (step {failed.index + 1})" if failed is not None \
                else _fix_for_functions(steps, {name: counts})
            out.append(Finding(
                "warning", "coverage", f"{name} never replayed in {calls} calls ({_kinds(counts)})",
                evidence[:1] + evidence[-1:], {"function": name, **dict(counts)}, fix,
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


def stack_frames(text: str) -> list[dict]:
    """The frames of a Python stack in torch's words, outermost first: file, line, function and
    the code line under it ('' where none is written)."""
    frames = []
    for m in _FRAME.finditer(text):
        code = (m["code"] or "").strip()
        if code.startswith("File ") or not code.strip("^~ "):  # the next frame, or a caret line
            code = ""
        frames.append({"file": m["file"], "line": int(m["line"]), "function": m["function"], "code": code})
    return frames


def _skipped(reason: str) -> bool:
    """Does a reason say that torch.compile turned CUDA graphs off (with torch's message or without)?"""
    return SKIPPED in reason or SILENT in reason


def torch_skip(reason: str) -> Optional[dict]:
    """torch's own message in a reason of an observed torch.compile run, parsed, or None.

    torch ends most of its messages with the stack of the operation or input at fault ("Found from :
    File "x.py", line N, in fn"); the innermost frame of it is the source line. Returns the cause
    (torch's words, without its "skipping cudagraphs due to"), the input or operation it names, and
    the source (file, line, function, code) where the message has one.
    """
    marker = next((m for m in (SKIPPED, SILENT, PARTITIONED) if m in reason), SKIPPED)
    at = reason.find(marker)
    if at < 0:
        return None
    message = reason[at + len(marker):]
    found = _STACK_START.search(message)
    head, stack = (message[: found.start()], message[found.end():]) if found else (message, "")
    cause = _SKIP_PREFIX.sub("", head.strip().split("\n")[0]).strip().rstrip(".").strip()
    frames = stack_frames(stack)
    names = _INPUT.search(message)
    operation = _OPERATION.search(head)
    return {
        "cause": cause,
        "input": next((g for g in names.groups() if g), None) if names else None,
        "operation": next((g for g in operation.groups() if g), None) if operation else None,
        "source": frames[-1] if frames else None,
    }


def _where(source: Optional[dict]) -> str:
    if not source:
        return ""
    code = f": {source['code']}" if source["code"] else ""
    return f", at {source['file']}:{source['line']} in {source['function']}{code}"


def _eager_groups(steps: list[Step], times: list[int]) -> list[Finding]:
    """Eager fallbacks grouped by function and reason (addresses and counts aside).

    Where a reason holds torch's own skip message, the group is what torch skipped for and the
    source line it names, and the finding says both. A skip message joined to no call of the
    trace is one decision, not a call. A call whose graph torch said why about before observing
    began says so, and how to see the rest.
    """
    groups: dict[tuple, list[tuple[Step, int, Optional[dict]]]] = defaultdict(list)
    for step, n in zip(steps, times):
        if step.kind != "eager":
            continue
        skip = torch_skip(step.reason)
        if skip is not None:
            source = skip["source"]
            key = (step.function, "skip", _VARYING.sub("#", skip["cause"]),
                   None if source is None else (source["file"], source["line"]))
        else:
            key = (step.function, _VARYING.sub("#", step.reason.split("\n")[0]))
        groups[key].append((step, n, skip))
    out = []
    for key, members in groups.items():
        function = key[0]
        calls = sum(n for _, n, _ in members)
        first, _, skip = members[0]
        evidence = [s.index for s, _, _ in members][:20]
        times_ = f"{calls} time{'s' if calls != 1 else ''}"
        if skip is not None:
            said = "torch skipped CUDA graphs due to" if SKIPPED in first.reason else "torch compiled it without CUDA graphs:"
            what = f"{said} {skip['cause']}{_where(skip['source'])}"
            numbers = {"function": function, "calls": calls if function else 0, "cause": skip["cause"],
                       "input": skip["input"], "operation": skip["operation"], "source": skip["source"]}
            if function:
                title = f"{function} ran eagerly {times_}: {what}"
            else:
                numbers["decisions"] = calls
                title = f"{what} (joined to no call in this trace)"
            out.append(Finding("warning", "eager", title, evidence, numbers, fix_for(first.reason)))
            continue
        who = function or "a call"
        why = first.reason.splitlines()[0]
        for said in (" runs eagerly: ", " ran eagerly: "):
            if function and why.startswith(function + said):
                why = why[len(function + said):]
        if BEFORE_OBSERVING in why:
            known = why.split(BEFORE_OBSERVING, 1)[0].rstrip(" ;.")
            fix = fix_for(known)
            out.append(Finding(
                "warning", "eager",
                f"{who} ran eagerly {times_}: {known}; {BEFORE_OBSERVING}, so its message is not in this trace",
                evidence, {"function": function, "calls": calls, "decided": "before observing"},
                OBSERVE_FIRST_CALL + (f"; then: {fix}" if fix else ""),
            ))
            continue
        numbers = {"function": function, "calls": calls, "cause": why}
        source = user_source(first.reason)
        if source is not None:
            numbers["source"] = source
        out.append(Finding("warning", "eager", f"{who} ran eagerly {times_}: {why}", evidence, numbers,
                           fix_for(first.reason)))
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
            # the cause's own fix first: record reasons also name the re-record options
            # (cudagraph_unexpected_rerecord_limit), whose fix is the general one
            _CAUSE_FIX.get(why.most_common(1)[0][0]) or fix_for(again[-1].reason),
        ))
    return out


_CAUSE_FIX = {
    "a static input moved": "keep parameters and buffers in place (update them with copy_ or in-place ops, "
    "not by assigning new tensors)",
    "an input that was an output of the path moved": "pass the outputs of the previous call on as they are",
    "an output dead at recording is live now": "start each iteration with torch.compiler.cudagraph_mark_step_begin() "
    "(tree.mark_step()), or let go of outputs you no longer need before the next call",
    "a new input shape or compile": "pad or bucket inputs to a few fixed shapes: torch records a CUDA graph per input "
    "shape (marking the dimension dynamic saves recompilations, not recordings)",
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


def _release(meta: dict) -> Optional[tuple[int, int]]:
    """The torch release whose decisions a trace shows: the rules a cgviz tree followed, or the
    torch observed ("2.14.1+cu130" -> (2, 14)); None where the trace does not say."""
    text = meta.get("rules") if isinstance(meta.get("rules"), str) else meta.get("torch")
    found = re.match(r"(\d+)\.(\d+)", text) if isinstance(text, str) else None
    return (int(found[1]), int(found[2])) if found else None


def _overwritten_fix(meta: dict) -> str:
    """What stops an output being overwritten, in the words of the release the trace shows."""
    fix = ("clone an output you keep across calls (y = y.clone()) before the next call, or use it before "
           "calling the function again")
    release = _release(meta)
    if release is None:
        return fix
    if release >= (2, 14):
        return fix + ("; or let torch clone the outputs you still hold at each new generation: "
                      "torch._inductor.config.triton.cudagraph_trees_generation_cloning = 'user_visible' "
                      f"(torch {release[0]}.{release[1]} has it; it costs a copy of each output kept)")
    return fix + (f" (torch {release[0]}.{release[1]} cannot clone them for you: "
                  "cudagraph_trees_generation_cloning comes with torch 2.14)")


GRADIENT_FIX = (
    "for gradient accumulation, give every parameter a .grad made outside the CUDA graphs before the first "
    "compiled backward (run one iteration eagerly, or p.grad = torch.zeros_like(p) for each parameter) and zero "
    "them in place between optimizer steps (optimizer.zero_grad(set_to_none=False)); without accumulation, set "
    ".grad to None before each backward (optimizer.zero_grad(set_to_none=True))"
)
SAVED_FIX = (
    "run each forward's backward before the next forward begins a new step (and call "
    "torch.compiler.cudagraph_mark_step_begin() only between iterations, never between a forward and its backward)"
)
CHAINED_FIX = (
    "call torch.compiler.cudagraph_mark_step_begin() once at the start of each iteration, before the first compiled "
    "function, so that the chained calls share one generation (then clone what you keep across iterations); or "
    "clone the output before handing it on (head(encoder(x).clone()))"
)
FEEDBACK_FIX = (
    "clone the output you feed back before the next call (h = h.clone()), or copy it into a tensor you keep "
    "(state.copy_(h)) and pass that"
)
_BACKWARD_READ = "autograd's backward read it"


def _overwritten(steps: list[Step], meta: dict) -> list[Finding]:
    """Outputs used after a later run overwrote them: which output (of which graph), the step
    that began the generation which overwrote it, and who read it: the program, or autograd
    (a gradient it accumulates into, or a tensor saved for a backward)."""
    made = {s.node: s.function or "" for s in steps if s.kind in ("warmup", "record") and s.node is not None}
    out = []
    for step in steps:
        if step.kind != "error" or OVERWRITTEN not in step.reason:
            continue
        before = steps[: step.index]
        began = next((s for s in reversed(before) if s.kind == "generation" and s.invalidated), None) \
            or next((s for s in reversed(before) if s.kind == "generation"), None)
        evidence = [step.index] + ([began.index] if began is not None else [])
        source = user_source(step.reason)
        numbers: dict = {"generation": None if began is None else began.generation, "source": source}
        when = ""
        if began is not None:
            by = next((s for s in steps[began.index + 1: step.index] if s.kind in CALL_KINDS and s.function), None)
            when = (f" when step {began.index + 1} began generation {began.generation}"
                    + (f" (before the call of {by.function})" if by else ""))
        where = f" at {source['file']}:{source['line']}" if source else ""
        invalid = [(n, o) for n, o, *_ in (began.invalidated if began is not None else [])]
        grads = [(n, o) for n, o in invalid if "(backward)" in made.get(n, "")]
        calls_between = [s for s in steps[began.index + 1: step.index] if s.kind in CALL_KINDS] if began else []
        handed = [(n, o) for n, o in invalid if made.get(n)]
        if step.function and began is not None and not calls_between and handed:
            n, o = handed[0]  # the call that began the generation read an output it invalidated
            began_by = (f"step {began.index + 1} began generation {began.generation} (each call of a compiled function "
                        "begins a new generation when no backward is pending and cudagraph_mark_step_begin() is not "
                        "used)")
            if made[n] == step.function:
                numbers.update(cause="an output fed back into the next call was invalidated by that call", output=[n, o])
                title = (f"{step.function} was fed back its own output {o} of node {n}{where}, and the call "
                         f"invalidated it: {began_by}")
                fix = FEEDBACK_FIX
            else:
                numbers.update(cause="an output handed to the next compiled function was invalidated by that call",
                               output=[n, o])
                title = (f"{step.function} was handed output {o} of node {n} ({made[n]}){where}, and its own call "
                         f"invalidated it: {began_by}")
                fix = CHAINED_FIX
        elif _BACKWARD_READ in step.reason and (grads or "gradient tensor output" in step.reason):
            what = f"output {grads[0][1]} of node {grads[0][0]} ({made[grads[0][0]]})" if grads else "a backward's output"
            numbers.update(cause="gradient accumulation: a .grad held in the CUDA graph pool", output=list(grads[0]) if grads else None)
            title = (f"a gradient was overwritten: {what}, which autograd keeps as a parameter's .grad, was invalidated"
                     f"{when}; the next backward{where} read it to accumulate into it")
            fix = GRADIENT_FIX
        elif _BACKWARD_READ in step.reason:
            saved = [(n, o) for n, o in invalid if made.get(n)]
            what = f"output {saved[0][1]} of node {saved[0][0]} ({made[saved[0][0]]})" if saved else "an output"
            numbers.update(cause="a tensor saved for backward was overwritten before its backward ran",
                           output=list(saved[0]) if saved else None)
            title = (f"a tensor saved for a backward was overwritten: {what} was invalidated{when}, before the "
                     f"backward{where} that needed it ran")
            fix = SAVED_FIX
        else:
            numbers["cause"] = "an output kept across calls was overwritten"
            title = f"an output was used after a later run overwrote it{where}" + (f":{when.replace(' when', '', 1)}" if when else "")
            fix = _overwritten_fix(meta)
        out.append(Finding("error", "overwritten", title, evidence, numbers, fix))
    return out


# the observer's words for a graph break (observe/naming.py): "graph break in fn (at x.py:5 in fn (code)), so ..."
GRAPH_BREAK = "graph break in"
_BREAK = re.compile(r"^graph break in (?P<function>\S+)")
_BREAK_REASON = re.compile(r"Python between them: (?P<why>.*)", re.DOTALL)
_BREAK_PREAMBLE = "encountered graph break when attempting to trace"
_RESUME = "torch_dynamo_resume_in_{}_at_"
_RESUME_PREFIX = "torch_dynamo_resume_in_"


_RESUMED_FIX = ("the code after a graph break is compiled and recorded again for each way into it (each branch "
                "taken): remove the graph break (its finding says where)")


def _base(function: Optional[str]) -> str:
    return (function or "").split(" ", 1)[0]


def _graph_breaks(steps: list[Step]) -> list[Finding]:
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
            cost = f"; each call spends {format_us(statistics.median(gaps))} between them (median of {len(gaps)} calls)"
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
    ("cudagraph-unsafe", "custom ops tagged cudagraph_unsafe always run eagerly: keep them out of the hot path"),
    ("custom partition op", "remove the op from torch._inductor.config.custom_should_partition_ops if a CUDA graph "
     "can hold it"),
    ("conditional", "torch.cond runs eagerly between CUDA graphs: compute both sides and pick with torch.where"),
    ("cpu ops", "keep the compiled function's work on the GPU: compute the CPU part on the GPU or move it out"),
)


def _partitions(steps: list[Step]) -> list[Finding]:
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
        out.append(Finding("warning", "partition", head + _where(skip.get("source")),
                           [step.index], {"cause": cause, "source": skip.get("source")}, fix))
    return out


def _compile_skips(steps: list[Step]) -> list[Finding]:
    """torch.compile skipped CUDA graphs while compiling, for a graph whose calls the trace does
    not show as eager (a partition, or a message joined to no call); where no call went through
    a tree at all, the first finding says it already."""
    if not any(s.kind in CALL_KINDS and s.function for s in steps):
        return []
    eager = {(s.function, (torch_skip(s.reason) or {}).get("cause")) for s in steps if s.kind == "eager"}
    out = []
    seen = set()
    for step in steps:
        if step.kind != "compile" or not _skipped(step.reason):
            continue
        skip = torch_skip(step.reason) or {}
        key = (step.function, skip.get("cause"))
        if key in eager or key in seen:
            continue
        seen.add(key)
        title = (f"torch.compile skipped CUDA graphs while compiling {step.function or 'a graph'}: "
                 f"{skip.get('cause')}{_where(skip.get('source'))}")
        out.append(Finding("warning", "compile_skip", title, [step.index],
                           {"function": step.function, "cause": skip.get("cause"), "source": skip.get("source")},
                           fix_for(step.reason)))
    return out


# torch's own errors raised from its trees, by words in them: what happened, and what to change
_RAISED = (
    ("input tensor deallocate during graph", "an input of the graph was freed while torch recorded it, which no "
     "replay repeats (seen with non-reentrant activation checkpointing around a compiled submodule, pytorch #154306)",
     "checkpoint the compiled submodules with use_reentrant=True (torch.utils.checkpoint.checkpoint(module, x, "
     "use_reentrant=True))"),
)


def _raised(steps: list[Step]) -> list[Finding]:
    """Errors torch's trees raised (other than an overwritten output): what was being done, and,
    for torch errors known here, why and the change that avoids them."""
    out = []
    for step in steps:
        if step.kind != "error" or OVERWRITTEN in step.reason:
            continue
        message = " ".join(step.reason.split(" raised ", 1)[-1].split("\n")[0].split())
        known = next(((what, fix) for words, what, fix in _RAISED if words in step.reason), None)
        before = next((s for s in reversed(steps[: step.index]) if s.function == step.function
                       and s.kind in CALL_KINDS), None)
        doing = f" on its call after a {before.kind} (step {before.index + 1})" if before is not None else ""
        title = f"{step.function or 'a call'} raised {message}{doing}"
        numbers: dict = {"function": step.function, "cause": known[0] if known else message,
                         "source": user_source(step.reason)}
        if known:
            title += f": {known[0]}"
        out.append(Finding("error", "raised", title, [step.index], numbers, known[1] if known else ""))
    return out


def _pending_backward(steps: list[Step]) -> list[Finding]:
    """Decisions made while a forward waited for its backward: said so in cgviz's reasons, and
    seen in torch's trees as a forward recorded as a child of a forward. A mark_step() that ends
    the wait (its reason says the saved outputs are now invalid) is the fix, not a hit."""
    recorded = {s.node: s.function or "" for s in steps if s.kind == "record"}
    hits = [
        s for s in steps
        if (s.kind != "generation" and "pending backward" in s.reason)
        or (s.kind == "record" and "(forward)" in (s.function or "") and "(forward)" in recorded.get(s.parent, ""))
    ]
    if not hits:
        return []
    torch_forwards = any("(forward)" in (s.function or "") for s in hits)  # torch.compile's names say the mode
    never = torch_forwards and not any("(backward)" in (s.function or "") for s in steps)  # no backward ran
    made = f"{plural(len(hits), 'decision')} {'was' if len(hits) == 1 else 'were'} made while "
    if never:
        title = (made + "forwards waited for a backward that never ran in this trace: their outputs require grad, "
                 "so torch never starts a new generation and never leaves warm-up")
        cause = "forwards whose backward never runs"
        fix = ("run evaluation and inference under torch.no_grad() (or torch.inference_mode()): no backward to wait "
               "for; in training, run each backward before the next forward")
    else:
        title = (made + "a forward waited for its backward: its saved outputs keep the path live, so the next "
                 "forward records a child instead of replaying")
        cause = "a forward waiting for its backward"
        fix = "run each backward before the next forward, or start each iteration with torch.compiler.cudagraph_mark_step_begin()"
    return [Finding("warning", "pending_backward", title, [s.index for s in hits][:20],
                    {"steps": len(hits), "cause": cause}, fix)]


def _shapes(trace: Trace, steps: list[Step]) -> list[Finding]:
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


_COMPILE_ID = re.compile(r"\(compile id (\d+)/(\d+)\)")
# the compile id in an observed graph's name: "fn [0/1] (inference)"
_NAME_ID = re.compile(r" \[[^\]]*\]")


def graph_name(function: str, compile_id: str) -> str:
    """A compiled graph's name as the observer of torch.compile writes it: its function's name,
    torch's compile id in brackets, then the mode ("fn [1/0] (inference)")."""
    name, paren, mode = function.partition(" (")
    return f"{name} [{compile_id}]" + (f" ({mode}" if paren else "")


def _graphs_told_apart(steps: list[Step]) -> list[Step]:
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


def _before_observing(steps: list[Step], meta: dict) -> list[Finding]:
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


def timed_graphs(profile: Any) -> dict[str, list[dict]]:
    """The recorded graphs of a profile (`trace.meta["profile"]`) that have a replay time, by function."""
    out: dict[str, list[dict]] = {}
    for entry in (profile.values() if isinstance(profile, dict) else ()):
        if isinstance(entry, dict) and entry.get("kind") == "graph" and entry.get("replay_us") is not None:
            out.setdefault(str(entry.get("function")), []).append(entry)
    return out


def _times(steps: list[Step], meta: dict) -> list[Finding]:
    """Per function, from a profile (Tree(profile=True)): what a replay costs on the device
    against an eager run of the same function, and against the whole call on the host (the
    tree's own checks and the launch), where that is large."""
    out = []
    for fn, entries in timed_graphs(meta.get("profile")).items():
        replay = statistics.median(e["replay_us"] for e in entries)
        eager_entries = [e for e in entries if e.get("eager_us") is not None and not e.get("eager_is_first_call")]
        eager = statistics.median(e["eager_us"] for e in eager_entries) if eager_entries else None
        host = [s.duration / max(s.repeat, 1) * 1e6 for s in steps if s.kind == "execute" and s.function == fn]
        call = statistics.median(host) if host else None
        numbers = {"replay_us": round(replay, 3), "eager_us": eager, "call_us": None if call is None else round(call, 3),
                   "clock": entries[0].get("clock")}
        evidence = [s.index for s in steps if s.kind == "execute" and s.function == fn][:1]
        sim = "" if entries[0].get("clock") == "CUDA events" else " (sim: CPU wall clock, not a GPU)"
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
