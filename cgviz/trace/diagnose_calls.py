"""The doctor's findings about what the calls did: how many replayed (and where none did, why),
eager fallbacks grouped by function and reason, functions recorded again at one place of a tree,
decisions made while a forward waited for its backward, and errors torch's trees raised."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Optional

from cgviz.trace.findings import CALL_KINDS, Finding
from cgviz.trace.model import Step
from cgviz.trace.reasons import (
    BEFORE_OBSERVING, CAUSE_FIXES, OBSERVE_FIRST_CALL, OVERWRITTEN, SKIPPED, at_source, fix_for, replay_cause,
    torch_skip, torch_skipped, user_source,
)
from cgviz.trace.units import plural


# addresses, sizes, ids and counts vary between otherwise identical reasons
_VARYING = re.compile(r"0x[0-9a-f]+|\b\d+\b")


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
    skips = [s for s in steps if (s.kind == "eager" and not s.function) or (s.kind == "compile" and torch_skipped(s.reason))]
    title = "no call of this run was replayed from a CUDA graph"
    if skips:
        n = len(skips)
        skip = torch_skip(skips[-1].reason) or {}
        said = f": {skip['cause']}{at_source(skip.get('source'))}" if skip.get("cause") else ""
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


def coverage(steps: list[Step], times: list[int], meta: dict, eager: list[Finding], again: list[Finding],
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
        off = [s for s in steps if s.kind == "compile" and torch_skipped(s.reason) and s.function in per_function]
        if off:  # torch decided while compiling: its reason and source line come first
            skip = torch_skip(off[0].reason) or {}
            title += (f"; torch.compile compiled {off[0].function} without CUDA graphs: {skip.get('cause')}"
                      f"{at_source(skip.get('source'))}")
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
        f"{replayed} of {plural(total, 'call')} replayed a CUDA graph ({100 * replayed / total:.0f} %); the rest warmed up, "
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


def eager_fallbacks(steps: list[Step], times: list[int]) -> list[Finding]:
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
            what = f"{said} {skip['cause']}{at_source(skip['source'])}"
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


def rerecords(steps: list[Step]) -> list[Finding]:
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


_CAUSE_FIX = CAUSE_FIXES | {
    "a new input shape or compile": "pad or bucket inputs to a few fixed shapes: torch records a CUDA graph per input "
    "shape (marking the dimension dynamic saves recompilations, not recordings)",
}


def _record_cause(reason: str) -> str:
    text = reason.lower()
    cause = replay_cause(text)
    if cause is not None:
        return cause
    if "compile id" in text or "has no root graph yet" in text:
        return "a new input shape or compile"
    return "no recorded graph could take the call"


def pending_backward(steps: list[Step]) -> list[Finding]:
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
                 "so torch never starts a new generation and never leaves warm-up while their outputs live")
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


# torch's own errors raised from its trees, by words in them: what happened, and what to change
_RAISED = (
    ("input tensor deallocate during graph", "an input of the graph was freed while torch recorded it, which no "
     "replay repeats (seen with non-reentrant activation checkpointing around a compiled submodule, pytorch #154306)",
     "checkpoint the compiled submodules with use_reentrant=True (torch.utils.checkpoint.checkpoint(module, x, "
     "use_reentrant=True))"),
)


def raised_errors(steps: list[Step]) -> list[Finding]:
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
