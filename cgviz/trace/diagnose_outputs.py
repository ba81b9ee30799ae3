"""The doctor's findings about outputs used after a later run overwrote them: which output (of which
graph), the step that began the generation which overwrote it, and who read it (the program, the next
call it was handed to, or autograd: a gradient it accumulates into, a tensor saved for a backward),
each with its fix in the words of the torch release the trace shows."""

from __future__ import annotations

import re
from typing import Optional

from cgviz.trace.findings import CALL_KINDS, Finding
from cgviz.trace.model import Step
from cgviz.trace.reasons import MARK_STEP, OVERWRITTEN, user_source


def _release(meta: dict) -> Optional[tuple[int, int]]:
    """The torch release whose decisions a trace shows: the rules a cgviz tree followed, or the
    torch observed ("2.14.1+cu130" -> (2, 14)); None where the trace does not say."""
    text = meta.get("rules") if isinstance(meta.get("rules"), str) else meta.get("torch")
    found = re.match(r"(\d{1,9})\.(\d{1,9})", text) if isinstance(text, str) else None
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
    "for gradient accumulation, call torch.compiler.cudagraph_mark_step_begin() once per optimizer step, before "
    "its first micro-batch (not before every micro-batch): the micro-batches then share one generation; or give "
    "every parameter a .grad made outside the CUDA graphs before the first compiled backward (run one iteration "
    "eagerly, or p.grad = torch.zeros_like(p) for each parameter) and zero them in place between optimizer steps "
    "(optimizer.zero_grad(set_to_none=False)); without accumulation, set .grad to None before each backward "
    "(optimizer.zero_grad(set_to_none=True))"
)
SAVED_FIX = (
    "run each forward's backward before the next forward begins a new step (and call "
    "torch.compiler.cudagraph_mark_step_begin() only between iterations, never between a forward and its backward)"
)
_CLONE_HANDED_ON = "clone the output before handing it on (head(encoder(x).clone()))"
CHAINED_FIX = (
    "call torch.compiler.cudagraph_mark_step_begin() once at the start of each iteration, before the first compiled "
    "function, so that the chained calls share one generation (then clone what you keep across iterations); or "
    + _CLONE_HANDED_ON
)
TREE_CHAINED_FIX = (
    "call tree.mark_step() once at the start of each iteration, before the first of the chained calls and not "
    "between them; or " + _CLONE_HANDED_ON
)
FEEDBACK_FIX = (
    "clone the output you feed back before the next call (h = h.clone()), or copy it into a tensor you keep "
    "(state.copy_(h)) and pass that"
)
_BACKWARD_READ = "autograd's backward read it"
# cgviz's own tree says which output a call read and which mark_step() invalidated it (engine/path.py);
# numbers of at most 18 digits (int() refuses thousands), a name of at most 1,000 characters (a longer
# scan from each "output N of " would cost a hostile reason its length squared)
_TREE_INVALIDATED = re.compile(r"output (?P<output>\d{1,18}) of .{1,1000}? \(node (?P<node>\d{1,18}), generation "
                               r"\d+\) was invalidated when mark_step\(\) began generation (?P<generation>\d{1,18})(?!\d)")


def overwritten_outputs(steps: list[Step], meta: dict) -> list[Finding]:
    """Outputs used after a later run overwrote them: which output (of which graph), the step
    that began the generation which overwrote it, and who read it: the program, or autograd
    (a gradient it accumulates into, or a tensor saved for a backward)."""
    made = {s.node: s.function or "" for s in steps if s.kind in ("warmup", "record") and s.node is not None}
    out = []
    for step in steps:
        if step.kind != "error" or OVERWRITTEN not in step.reason:
            continue
        before = steps[: step.index]
        named = _TREE_INVALIDATED.search(step.reason)  # a cgviz tree names the output and the generation
        if named:
            generation = int(named["generation"])
            began = next((s for s in reversed(before) if s.kind == "generation" and s.generation <= generation), None)
        else:
            began = next((s for s in reversed(before) if s.kind == "generation" and s.invalidated), None) \
                or next((s for s in reversed(before) if s.kind == "generation"), None)
            generation = None if began is None else began.generation
        evidence = [step.index] + ([began.index] if began is not None else [])
        source = user_source(step.reason)
        numbers: dict = {"generation": generation, "source": source}
        when = ""
        if began is not None:
            by = next((s for s in steps[began.index + 1: step.index] if s.kind in CALL_KINDS and s.function), None)
            repeat = " (at a repeat of its block)" if generation != began.generation else ""
            when = (f" when step {began.index + 1}{repeat} began generation {generation}"
                    + (f" (before the call of {by.function})" if by else ""))
        where = f" at {source['file']}:{source['line']}" if source else ""
        invalid = [(n, o) for n, o, *_ in (began.invalidated if began is not None else [])]
        if named:
            invalid = [(n, o) for n, o in invalid if (n, o) == (int(named["node"]), int(named["output"]))]
        grads = [(n, o) for n, o in invalid if "(backward)" in made.get(n, "")]
        calls_between = [s for s in steps[began.index + 1: step.index] if s.kind in CALL_KINDS] if began else []
        handed = [(n, o) for n, o in invalid if made.get(n)]
        if step.function and began is not None and not calls_between and handed:
            n, o = handed[0]  # the generation began right before the call that read an output it invalidated
            numbers["output"] = [n, o]
            fed_back = made[n] == step.function
            if began.reason.startswith(MARK_STEP):  # a cgviz tree: mark_step() began it, not the call
                numbers["cause"] = (f"an output {'fed back into' if fed_back else 'handed to'} the next call was "
                                    "invalidated by the mark_step() before it")
                culprit = f"mark_step() (step {began.index + 1}, generation {began.generation}) invalidated it"
                fix = FEEDBACK_FIX if fed_back else TREE_CHAINED_FIX
            else:
                numbers["cause"] = ("an output fed back into the next call was invalidated by that call" if fed_back
                                    else "an output handed to the next compiled function was invalidated by that call")
                culprit = (f"{'the' if fed_back else 'its own'} call invalidated it: step {began.index + 1} began "
                           f"generation {began.generation} (each call of a compiled function begins a new generation "
                           "when no backward is pending and cudagraph_mark_step_begin() is not used; after "
                           "replays, torch frees a path's outputs only at a call no graph under its current "
                           "node takes)")
                fix = FEEDBACK_FIX if fed_back else CHAINED_FIX
            given = f"fed back its own output {o} of node {n}" if fed_back else f"handed output {o} of node {n} ({made[n]})"
            title = f"{step.function} was {given}{where}, and {culprit}"
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
