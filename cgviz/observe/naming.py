"""How the observer names things and words its reasons: compiled graphs, the decisions torch's
tree manager makes (generations, clones, eager runs), the user's line an error came from."""

from __future__ import annotations

import os
import re
import sysconfig
from typing import Any, Optional

import torch

from cgviz.observe import _torch_layout as layout
from cgviz.trace.diagnose import GRAPH_BREAK, graph_name  # noqa: F401  (GRAPH_BREAK: the observer's words)
from cgviz.trace.paths import code_dirs, frames_from, traceback_frames, user_line
from cgviz.trace.units import format_bytes, plural

OVERWRITTEN = "overwritten by a subsequent run"
# frames in these directories are not the user's code: torch, cgviz, Python's own library (and
# the code inductor generates: see _not_users)
_NOT_USERS = code_dirs(os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       sysconfig.get_paths()["stdlib"])
_AUTOGRAD = code_dirs(os.path.join(os.path.dirname(torch.__file__), "autograd"))
# torch names the code of each compiled graph alike ("partition_0"); past the first, a graph's
# partitions keep their number in its name
_PARTITION = re.compile(r"partition_[1-9]\d*")
# what torch's manager state says about a call it ran eagerly (layout.eager_cause)
EAGER_WORDS = {
    layout.EAGER_MUTATION: "it mutates an input in place that is neither static (a parameter, a buffer, a tensor "
    "marked static) nor an output of a graph on the tree's current path (torch's tree marked it so at this place "
    "of the tree)",
    layout.EAGER_RERECORD_LIMIT: "it passed torch's re-recording limit at this place of the tree",
    layout.EAGER_MANAGED_INPUT_LIMIT: "an input that is an output of the path kept moving here, and torch runs this "
    "function eagerly at this place of the tree from now on (torch._inductor.config.triton."
    "cudagraph_managed_input_rerecord_action = 'skip')",
}


def compiled_graph_name(torch_name: str, compile_id: str, mode: str, frame: str = "") -> str:
    """A compiled graph's name in a trace: the function torch.compile compiled (dynamo's frame),
    torch's compile id and the mode, as in "forward [0/0] (forward)".

    torch names the code of every graph alike (partition_0), so the compile id tells graphs
    apart: the two sides of a graph break ([0/0], [1/0]), each recompilation ([0/1]). A graph
    split into partitions keeps partition_N past the first. Without a frame, torch's own name
    stands first.
    """
    name = frame or torch_name or "compiled graph"
    if frame and _PARTITION.fullmatch(torch_name or ""):
        name += f" {torch_name}"
    label = f"{name} ({mode})" if mode else name
    return graph_name(label, compile_id) if compile_id else label


def outputs_named(outputs: list) -> str:
    """'output 0 of node 1, output 2 of node 3' for [[node, output], ...]."""
    return ", ".join(f"output {o} of node {n}" for n, o, *_ in outputs)


def generation_reason(ended: int, invalidated: list, cloned: Optional[list] = None) -> str:
    """A new generation's reason: what ended it, what torch cloned out of the pool (2.14+, with
    cudagraph_trees_generation_cloning) and which outputs it invalidated."""
    said = (f"generation {ended} ends (cudagraph_mark_step_begin(), or, where it was never called, a new "
            "torch.compile invocation with no backward pending)")
    if cloned:
        total = sum(nbytes for _, _, nbytes in cloned)
        said += ("; cloned out of the pool, so they stay valid (torch._inductor.config.triton."
                 "cudagraph_trees_generation_cloning = 'user_visible'): "
                 + ", ".join(f"output {o} of node {n} ({format_bytes(b)})" for n, o, b in cloned)
                 + f", {format_bytes(total)} in all")
    return said + "; invalidated: " + (outputs_named(invalidated) if invalidated else "nothing")


def rerecord_count_note(status: str) -> str:
    """What a re-record caused by a failed check of `status` does to torch's re-record limit,
    in this release's rules, as the record step's note ('' where it counts as it always did)."""
    note = layout.rerecord_note(status)
    return f" ({note})" if note else ""


KERNEL_FREE = ("it launches no kernels, so torch keeps no CUDA graph for it: a replay copies its inputs in "
               "and hands back its outputs (torch 2.14+)")
WARMED_UP_AGAIN = ("asked for another warmup (torch.compiler.cudagraph_mark_warmup_incomplete()): it runs eagerly "
                   "again, allocations in the tree's pool")
WARMUP_INCOMPLETE = ("it asked for another warmup (torch.compiler.cudagraph_mark_warmup_incomplete()): "
                     "its next call warms up again")


def demoted_note(inputs: list[int], action: str, limit: object) -> str:
    """torch 2.15 gave up on re-recording for inputs that are outputs of the path and keep moving."""
    which = ", ".join(str(i) for i in inputs)
    what = ("torch records this graph copying it in, so later moves replay instead of recording again"
            if action == "copy"
            else "torch runs this function eagerly at this place of the tree from now on")
    return (f"input {which} (an output of the path) moved {plural(limit, 'time')} here: {what} "
            f"(cudagraph_managed_input_rerecord_limit = {limit}, action '{action}')")


def dynamic_shape_limit_reason(label: str, limit: str) -> str:
    return (f"{label} reached torch's cudagraph_dynamic_shape_rerecord_limit = {limit}: the shapes already recorded "
            "keep replaying, every new shape runs eagerly without reaching the tree (so its calls are not steps)")


_REPEATED_SKIP = re.compile(r"^(skipping cudagraphs due to )(?:skipping cudagraphs due to )+", re.IGNORECASE)


def one_skip_prefix(message: str) -> str:
    """torch's skip message with its "skipping cudagraphs due to" said once (torch 2.11-2.15 wrap
    some of their reasons in it twice)."""
    return _REPEATED_SKIP.sub(r"\1", message)


def overwritten_reason(exc: BaseException) -> str:
    """An "overwritten by a subsequent run" error's reason: the user's line that read the
    output, whether autograd's backward read it (an activation saved for it, or a gradient it
    accumulates into), and torch's message."""
    frames = traceback_frames(exc.__traceback__)
    site = user_line(frames, _not_users(), skip_def_lines=True)
    where = f" (raised at {site})," if site else ","
    reader = ("autograd's backward read it" if any(os.path.realpath(f[0]).startswith(_AUTOGRAD) for f in frames)
              else "the program read it")
    return f"an output was used after a later run overwrote it{where} {reader}: {exc}"


def caller_site() -> str:
    """Where the user's code made the call under way: the innermost frame of theirs on the stack."""
    import sys

    return user_line(frames_from(sys._getframe(1)), _not_users(), skip_def_lines=True) or ""


def site_of(frame: Any) -> str:
    """The user's line on a live stack (a CUDA graph's capture), '' where none is the user's."""
    return user_line(frames_from(frame), _not_users()) or ""


def _not_users() -> tuple[str, ...]:
    """_NOT_USERS and the folder inductor writes its code to (TORCHINDUCTOR_CACHE_DIR may move it)."""
    generated = layout.inductor_cache_dir()
    return _NOT_USERS + (code_dirs(generated) if generated else ())
