"""The reasons producers record, read back: how the observer of torch.compile words what torch
decided, torch's skip message and the stack under it, the user's source line a reason names, a
compiled graph's name, and the change a reason suggests. The doctor's findings quote these; they
never reword them."""

from __future__ import annotations

import re
from typing import Optional


# how a producer words an output used after a later run overwrote it
OVERWRITTEN = "overwritten by a subsequent run"
# how cgviz's engine begins a generation step's reason: only its tree.mark_step() begins one
MARK_STEP = "mark_step():"
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
# the observer's words for a graph break (observe/naming.py): "graph break in fn (at x.py:5 in fn (code)), so ..."
GRAPH_BREAK = "graph break in"

# Reasons come from whoever wrote the trace: each pattern here reads a number of at most 9 digits
# (int() refuses numbers of thousands) and scans a bounded stretch from where it may start, so no
# reason makes reading it cost its length squared.
# One frame of a Python stack as torch writes it ('File "x.py", line 3, in fn' and the code line under it)
_FRAME = re.compile(r'File "(?P<file>[^"\n]+)", line (?P<line>\d{1,9}), in (?P<function>[^\s,]+)[^\n]*(?:\n(?P<code>[^\n]*))?')
# Where torch's stack begins ("... . Found from : File ..."); the blank and the full stop before it are
# left out of the message by `_before_stack` (a pattern starting with them costs a run of blanks cubed).
_STACK_START = re.compile(r"Found from\s*:?|input stack trace\s*:", re.IGNORECASE)
_SKIP_PREFIX = re.compile(r"^(?:(?:skipping|disabling) cudagraphs? due to\s*)+", re.IGNORECASE)
_INPUT = re.compile(r"cpu device \((\w+)\)|input name: (\w+)")
_OPERATION = re.compile(r"incompatible op (\S+)|control flow operator: (\S+?)\.?(?:\s|$)")
# the user's line in a reason the engine wrote ("... at model.py:5 in step (if y.item() > 0:)), which ...");
# its code is at most 80 characters (paths.source_line)
_USER_LINE = re.compile(
    r" at (?P<file>[^\s:()]+):(?P<line>\d{1,9}) in (?P<function>[^\s(]+)(?: \((?P<code>.{0,200}?)\))?\),")


# Why a recorded graph could not take a call, in the engine's words and in torch's (its
# CheckInvariantStatus), and the change that lets it replay
STATIC_MOVED = "a static input moved"
MANAGED_MOVED = "an input that was an output of the path moved"
DEAD_LIVE = "an output dead at recording is live now"
_REPLAY_CAUSES = (
    (re.compile(r"static input \d+ moved from|static input data pointer changed"), STATIC_MOVED),
    (re.compile(r"was output \d+ of node \d+ at \S+ when recorded, now it is at|cudagraph managed tensor data pointer "
                r"changed"), MANAGED_MOVED),
    (re.compile(r"was dead at recording and is live now|expected dead indices before graph are live"), DEAD_LIVE),
)
MARK_STEP_FIX = (
    "start each iteration with torch.compiler.cudagraph_mark_step_begin() (tree.mark_step()), or let go of "
    "outputs you no longer need before the next call"
)
CAUSE_FIXES = {
    STATIC_MOVED: "keep parameters and buffers in place (update them with copy_ or in-place ops, not by assigning "
    "new tensors)",
    MANAGED_MOVED: "pass the outputs of the previous call on as they are (not a copy or a new tensor)",
    DEAD_LIVE: MARK_STEP_FIX,
}


def replay_cause(reason: str) -> Optional[str]:
    """Why a graph could not replay, where a reason says (the first of the causes it names, in
    torch's check order but static inputs first), or None."""
    text = reason.lower()
    for pattern, cause in _REPLAY_CAUSES:
        if pattern.search(text):
            return cause
    return None


# past the re-record limit, where the reason does not say what made the graph record again
_LIMIT_FIX = (
    "keep what a graph reads in place between calls: pass the outputs of an earlier graph on as they are, and "
    "update parameters and buffers in place (copy_); inputs of your own are copied in and never cause a recording"
)
# (words in a reason, what to change): the first match suggests the fix for an eager fallback
_FIXES = (
    (("cudagraph_skip_dynamic_graphs",), "let torch record a CUDA graph per input shape: leave "
     "torch._inductor.config.triton.cudagraph_skip_dynamic_graphs at False (the default), or pad inputs to a few "
     "fixed shapes and compile without dynamic=True"),
    (("left no part of the graph to record",), "give the compiled function GPU work that a CUDA graph can hold: "
     "move CPU work, host reads and ops on data-dependent shapes out of it"),
    (("cpu device", "is on cpu", "cpu scalar"), "move the inputs to the GPU before the call (x.cuda()); keep "
     "CPU scalars as Python numbers"),
    (("mutates input", "mutates an input", "mutated inputs", "mutation"), "make the tensor the function writes in place static: "
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
     "'copy', set before compiling (torch 2.15)"),
    (("rerecord_limit", "re-recording limit", "re-recorded"), _LIMIT_FIX),
    (("shape_limit", "input signatures already have graphs"), "pad or bucket inputs to a few shapes: CUDA graphs "
     "are recorded per input shape, also where torch.compile compiled the dimension dynamic"),
    (("requires grad",), "run inference under torch.no_grad(), or graph the forward and the backward "
     "as two functions"),
    (("keyword arguments", "not a tensor"), "bind constants with functools.partial and pass tensors "
     "positionally"),
)


def user_source(reason: str) -> Optional[dict]:
    """The user's source line a reason names (file, line, function, code), or None."""
    found = _USER_LINE.search(reason)
    return None if found is None else source_of(found)


def source_of(found: re.Match) -> dict:
    """A source location (file, line, function, code) from a match of a pattern with those groups,
    as findings give it: the same fields wherever the doctor read the location from."""
    return {"file": found["file"], "line": int(found["line"]), "function": found["function"],
            "code": found["code"] or ""}


def fix_for(reason: str) -> str:
    """The change suggested for a decision with this reason, or ''."""
    text = reason.lower()
    for words, fix in _FIXES:
        if any(w in text for w in words):
            if fix is _LIMIT_FIX:  # past the re-record limit: the fix of what made it record again
                return CAUSE_FIXES.get(replay_cause(text) or "", fix)
            return fix
    if replay_cause(text) == DEAD_LIVE or "pending backward" in text:
        return MARK_STEP_FIX
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


def torch_skipped(reason: str) -> bool:
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
    head, stack = (_before_stack(message[: found.start()]), message[found.end():]) if found else (message, "")
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


def _before_stack(head: str) -> str:
    """`head` (a message up to where its stack begins) without the blanks and the one full stop
    that end it."""
    head = head.rstrip()
    return head[:-1].rstrip() if head.endswith(".") else head


def at_source(source: Optional[dict]) -> str:
    """', at file:line in function: code' for a title, or '' where no source line is known."""
    if not source:
        return ""
    code = f": {source['code']}" if source["code"] else ""
    return f", at {source['file']}:{source['line']} in {source['function']}{code}"


def graph_name(function: str, compile_id: str) -> str:
    """A compiled graph's name as the observer of torch.compile writes it: its function's name,
    torch's compile id in brackets, then the mode ("fn [1/0] (inference)")."""
    name, paren, mode = function.partition(" (")
    return f"{name} [{compile_id}]" + (f" ({mode}" if paren else "")
