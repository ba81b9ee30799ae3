"""What torch.compile says and decides about a graph apart from its tree's run, made into steps.

torch logs "skipping cudagraphs due to ..." while it compiles a graph or runs a call: each
message is joined to the calls it is about, or becomes a step of its own. Graph partitioning,
graph breaks, graphs compiled without CUDA graphs and the dynamic-shape limit become compile or
eager steps. The names of compiled graphs are made here too: a graph is named by the frame dynamo
compiled it from, which is seen while compiling. The observer owns one `CompileEvents` and hands
it its `step`; nothing of torch's is held here but ids.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from cgviz.observe import _torch_layout as layout
from cgviz.observe import naming
from cgviz.trace.diagnose import BEFORE_OBSERVING, OBSERVE_FIRST_CALL, PARTITIONED, SILENT, SKIPPED, stack_frames
from cgviz.trace.paths import portable_paths, source_line
from cgviz.trace.units import plural


class CompileEvents:
    """torch's skip messages, compile-time decisions and the names of compiled graphs.

    `step(kind, reason, manager=None, *, function=None, start=None)` is the observer's: it makes
    a step (after the replay-loop events noted before it).
    """

    def __init__(self, step: Callable[..., None]) -> None:
        self.step = step
        # torch's skip messages ("skipping cudagraphs due to ..."), joined to the calls they affect
        self.skips: dict[tuple, str] = {}  # (id(manager), function id, cause or None) -> message
        self.run_skips: list[str] = []  # logged during the call in progress (see call_skips)
        self.compile_skips: dict[str, list[str]] = {}  # compile id -> logged while compiling it
        self.skipped_compiles: dict[str, str] = {}  # compile id -> the message that turned its CUDA graphs off
        self.dynamo_frames: dict[str, str] = {}  # compile id -> the function dynamo compiled ("Net.forward")
        self.frames: dict[str, str] = {}  # frame part of a compile id ("0" of "0/1") -> its function's name
        self.labels: dict[tuple, str] = {}  # (id(manager), id(function id)) -> its name
        self.functions: dict[tuple, str] = {}  # (id(manager), function id) -> name, of every function seen

    # -- names -----------------------------------------------------------------------------------------
    def label(self, manager: Any, function_id: Any) -> str:
        """A function's name in the trace (see naming.compiled_graph_name), made once."""
        key = (id(manager), id(function_id))
        label = self.labels.get(key)
        if label is None:
            name, mode = layout.function_label(manager, function_id)
            cid = layout.compile_id(manager, function_id)
            frame = self.frame_name(cid, layout.stack_traces(manager, function_id))
            label = self.labels[key] = portable_paths(naming.compiled_graph_name(name, cid, mode, frame))
            self.functions[id(manager), function_id] = label
        return label

    def frame_name(self, compile_id: str, stacks: list[str]) -> str:
        """The function torch.compile compiled a graph from: the frame dynamo compiled, where it was
        seen compiling; else the outermost frame of the stacks
        torch keeps for the graph (its outputs' or its skip message's). A graph without one (a
        backward may have none) takes the name found for another graph of its frame."""
        if compile_id in self.dynamo_frames:
            return self.dynamo_frames[compile_id]
        frame = compile_id.rsplit("/", 1)[0] if compile_id else None
        for text in stacks:
            frames = stack_frames(text)
            if frames:
                if frame is not None:
                    self.frames.setdefault(frame, frames[0]["function"])
                return frames[0]["function"]
        return self.frames.get(frame, "") if frame is not None else ""

    def graph_label(self, compile_id: str, mode: str, stacks: list[str]) -> str:
        """A compiled graph's name, before any call of it reaches a tree (see label)."""
        return portable_paths(naming.compiled_graph_name("", compile_id, mode, self.frame_name(compile_id, stacks)))

    def compiled_before(self, added: set[tuple]) -> list[str]:
        """The names of the functions seen that were not added to a tree while observed."""
        return sorted({name for key, name in self.functions.items() if key not in added})

    # -- torch's skip messages, joined to the calls they affect --------------------------------------
    def remember_skip(self, manager: Any, function_id: Any, message: str) -> None:
        cause = (layout.EAGER_RERECORD_LIMIT if "re-recording limit" in message
                 else layout.EAGER_MANAGED_INPUT_LIMIT if "managed input re-recording threshold" in message
                 else layout.EAGER_MUTATION if "mutat" in message.lower() else "")
        self.skips[id(manager), function_id, cause] = self.skips[id(manager), function_id, None] = message

    def call_skips(self, manager: Any, function_id: Any) -> None:
        """A call ended: torch's skip messages logged during it are about its function."""
        logged, self.run_skips = self.run_skips, []
        for message in logged:
            self.remember_skip(manager, function_id, message)

    def eager_reason(self, manager: Any, function_id: Any, label: str, first_call_unseen: bool) -> str:
        """Why torch's manager ran a call eagerly: torch's own message for the function (it says
        it once per function, the re-record limit once per place in the tree), joined by what torch's state says now; without one, what that
        state says, and, where the function's first call was not seen (`first_call_unseen`),
        that torch said why before observing began."""
        cause = layout.eager_cause(manager, function_id)
        message = self.skips.get((id(manager), function_id, cause or None))
        if message:
            return f"{label} ran eagerly: {SKIPPED}{message}"
        what = naming.EAGER_WORDS.get(cause, "torch's tree neither warmed it up, recorded nor replayed it")
        if cause == layout.EAGER_RERECORD_LIMIT:
            what += f" (torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit = {layout.rerecord_limit()})"
        if first_call_unseen:
            return (f"{label} ran eagerly: {what}; {BEFORE_OBSERVING} (the graph was compiled and first called "
                    f"before, and torch says why once), so its message is not in this trace: {OBSERVE_FIRST_CALL}")
        return f"{label} ran eagerly: {what}"

    def skip_logged(self, message: str, in_call: bool, compiles_seen: bool) -> None:
        """torch logged "skipping cudagraphs due to ...": during a call of the tree manager (about
        that call's function, see call_skips), or, where graphs' compilations are seen
        (`compiles_seen`), while compiling a graph (about that graph: joined to its calls when its
        post_compile ends, see compiled); otherwise a step of its own."""
        message = naming.one_skip_prefix(message)
        if in_call:
            self.run_skips.append(message)
        elif compiles_seen:
            self.compile_skips.setdefault(layout.current_compile_id(), []).append(message)
        else:
            self.step("compile", SKIPPED + message)

    def finish(self) -> None:
        """Skip messages joined to nothing become steps of their own."""
        for message in self.run_skips:
            self.step("eager", SKIPPED + message)
        for message in (m for ms in self.compile_skips.values() for m in ms):
            self.step("compile", SKIPPED + message)
        self.run_skips, self.compile_skips = [], {}

    # -- compile-time decisions ------------------------------------------------------------------------
    def partitioned(self, compile_id: str, frame: str, graphed: int, cuts: list[tuple[str, str, str]]) -> None:
        """inductor kept ops of the graph it compiles out of CUDA graphs (graph partitioning): a
        compile step saying which, why, and where in the user's code (the first of them)."""
        reasons = sorted({reason for reason, _, _ in cuts})
        ops = sorted({target for _, target, _ in cuts if target})
        stack = next((st for _, _, st in cuts if st), "")
        name = f"{frame or 'a compiled graph'} [{compile_id}]" if compile_id else (frame or "a compiled graph")
        said = (f"while compiling {name}, graph partitioning kept {plural(len(cuts), 'op')} out of "
                f"CUDA graphs ({', '.join(reasons)}{': ' + ', '.join(ops[:6]) if ops else ''}); they run eagerly "
                f"between {plural(graphed, 'CUDA graph')}: {PARTITIONED}{', '.join(reasons)}")
        if stack:
            said += f". Found from :\n{stack}"
        self.step("compile", portable_paths(said))

    def graph_break(self, function: str, reason: str, site: Optional[tuple]) -> None:
        """dynamo broke the graph of `function` while compiling it: a compile step saying where
        (the user's line) and why; the function then runs as several graphs with Python between."""
        where = f" (the graph breaks at {source_line(*site)})," if site else ","
        why = reason.strip()
        self.step("compile", f"{naming.GRAPH_BREAK} {function or 'a compiled function'}{where} so torch.compile "
                  f"runs it as separate graphs with Python between them: {why}")

    def compiled(self, graph: Any, compile_id: str, turned_off: bool,
                 silent: Optional[str] = None, frame: str = "") -> Optional[tuple[str, str]]:
        """A graph's compilation ended: (its name, the reason of its calls) when torch turned its
        CUDA graphs off and said why (for it, or for the forward of this backward) or turned them
        off without a message for a reason the graph shows (`silent`), else None."""
        if frame and compile_id:  # the function dynamo compiled: it names this graph and its backward
            self.dynamo_frames.setdefault(compile_id, frame)
        messages = self.compile_skips.pop(compile_id, [])
        mode = layout.graph_mode(graph)
        if messages:
            label = self.graph_label(compile_id, mode, messages)
            for message in messages[:-1] if turned_off else messages:  # said, but not what turned them off
                self.step("compile", f"while compiling {label}: {SKIPPED}{message}", function=label)
        if not turned_off:
            return None
        why = ""
        if messages:
            self.skipped_compiles[compile_id] = messages[-1]
            said, stacks = SKIPPED + messages[-1], [messages[-1]]
        elif compile_id in self.skipped_compiles:
            message = self.skipped_compiles[compile_id]
            why = " (torch skipped the CUDA graphs of its forward, and so of it)"
            said, stacks = SKIPPED + message, [message]
        elif silent:
            stacks = layout.graph_stacks(graph)
            if stacks:  # where the graph's code is, in torch's words (the doctor reads the line back)
                silent = portable_paths(f"{silent}. Found from :\n{stacks[0]}")
            said = SILENT + silent
        else:  # not asked for CUDA graphs, or a graph with no CUDA work: torch says nothing
            return None
        label = self.graph_label(compile_id, mode, stacks)
        self.step("compile", f"{label} compiled without CUDA graphs{why}, so its calls run eagerly: {said}",
                  function=label)
        return label, f"{label} ran eagerly{why}: {said}"

    def dynamic_shape_limit(self, compile_id: str, mode: str, limit: str) -> None:
        """torch 2.15: a compiled graph stopped recording new shapes (they run eagerly, unseen)."""
        label = self.graph_label(compile_id, mode, [])
        self.step("eager", naming.dynamic_shape_limit_reason(label, limit), function=label)
