"""Observe torch.compile's own CUDA graph trees into a Trace.

While an observer is active, the methods of torch's tree manager
(`torch._inductor.cudagraph_trees.CUDAGraphTreeManager`) that warm up, record, replay, end
paths, start generations and restore allocator checkpoints are wrapped: each call still does
exactly what torch does, and also becomes a Step. torch's skip messages ("skipping cudagraphs
due to ...") are joined to the calls they affect: the eager calls of the function they were
logged for, or every call of a graph whose CUDA graphs torch turned off while compiling it.
The wrapping is removed when the last observer stops, also on an exception. Nothing here
creates a manager or synchronises the device, except the pool snapshot at trace level "full".
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import weakref
from collections import Counter
from typing import Any, Callable, Iterator, Optional

import torch

from cgviz.engine import _torch_compat as compat
from cgviz.engine.kernels import kernel_counts
from cgviz.trace.diagnose import BEFORE_OBSERVING, OBSERVE_FIRST_CALL, SKIPPED, graph_name, stack_frames
from cgviz.trace.fold import fold_repeats
from cgviz.observe import _torch_layout as layout
from cgviz.trace.model import NodeView, OutputView, Snapshot, Step, Trace
from cgviz.trace.io import check_save_target
from cgviz.trace.ranks import device_described, rank_path

OVERWRITTEN = "overwritten by a subsequent run"
# An absolute path in torch's messages: quoted (it may hold spaces), or bare with at least two
# components (so "warmup/record" or a URL is left alone); POSIX or with a Windows drive.
_SEP = r"[\\/]"
_WORD = r"[^\s\"'<>:,;()\[\]\\/]+"
_ABSOLUTE_PATH = re.compile(
    rf"""(?P<q>["'])(?P<quoted>(?:[A-Za-z]:)?{_SEP}[^"'\n]+)(?P=q)"""
    rf"""|(?<![\w./\\:])(?P<bare>(?:[A-Za-z]:)?(?:{_SEP}{_WORD}){{2,}})"""
)
_ACTIVE: list["TorchObserver"] = []
_GENERATION = ("generation", None, None, None, (), None)  # the key of a generation step that invalidated nothing
# Replay-loop events are noted raw (a replayed torch node, a new generation, (_PATH_END, node))
# and made into steps in batches: whatever a hook on that path does is paid on every call of
# the user's loop, so those hooks only append.
RAW_BATCH = 4096
_NEW_GENERATION = object()
_PATH_END = "path_end"
_ORIGINALS: list[tuple[Any, str, Any]] = []
# Compiled graphs whose CUDA graphs torch skipped while observed: (the graph, or a weak
# reference to it; its own current_callable; the wrapper that sees its calls), put back at uninstall.
_EAGER_GRAPHS: list[tuple[Callable[[], Any], Any, Any]] = []
# torch names the code of each compiled graph alike ("partition_0"); past the first, a graph's
# partitions keep their number in its name
_PARTITION = re.compile(r"partition_[1-9]\d*")
# what torch's manager state says about a call it ran eagerly (layout.eager_cause)
_EAGER_WORDS = {
    layout.EAGER_MUTATION: "it mutates inputs the tree does not manage (torch's tree marked it so at this place of "
    "the tree)",
    layout.EAGER_RERECORD_LIMIT: "it passed torch's re-recording limit at this place of the tree",
}


def portable_path(path: str) -> str:
    """`path` as a trace keeps it. Traces are shared between machines, and an absolute path
    names the recording machine's directories (and user) while meaning nothing elsewhere:
    inside a site-packages or dist-packages directory it becomes the part after it
    (torch/_inductor/cudagraph_trees.py), inside the current directory relative to it, and
    anywhere else its last two components."""
    norm = re.sub(r"^[A-Za-z]:", "", path.replace("\\", "/"))
    for packages in ("/site-packages/", "/dist-packages/"):
        if packages in norm:
            return norm.rsplit(packages, 1)[1]
    cwd = os.getcwd().replace("\\", "/").rstrip("/") + "/"
    if cwd != "/" and norm.startswith(cwd):
        return norm[len(cwd):]
    return "/".join([part for part in norm.split("/") if part][-2:])


def portable_paths(text: str) -> str:
    """`text` (a reason: torch's messages carry stack traces) with every absolute path made
    portable (see portable_path)."""
    if "/" not in text and "\\" not in text:
        return text

    def shorten(match: re.Match) -> str:
        if match["quoted"] is not None:
            return match["q"] + portable_path(match["quoted"]) + match["q"]
        return portable_path(match["bare"])

    return _ABSOLUTE_PATH.sub(shorten, text)


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


class TorchObserver:
    """Turns the manager's activity into steps; `trace` grows while it is active."""

    def __init__(self, trace: str = "full", kernels: Optional[bool] = None) -> None:
        if trace not in ("events", "full"):
            raise ValueError(f"trace must be 'events' or 'full', not {trace!r}")
        if kernels is not None and not isinstance(kernels, bool):
            raise TypeError(f"kernels must be True, False or None (on at trace 'full'), not {kernels!r}")
        self.level = trace
        self.read_kernels = trace == "full" if kernels is None else kernels
        self.trace = Trace(meta={
            "backend": "torch.compile", "source": "torch._inductor.cudagraph_trees",
            "torch": str(torch.__version__), "trace_level": trace,
        })
        self.generation = 1
        self.managers: list = []
        self._devices: dict[int, Optional[str]] = {}  # id(manager) -> its device ('cuda:1')
        self._ids: dict[int, int] = {}  # id(torch node) -> cgviz node id
        self._nodes: dict[int, Any] = {}  # cgviz id -> torch node (kept so snapshots can show it)
        self._born: dict[int, int] = {}  # cgviz id -> generation it was made in
        self._replays: Counter = Counter()
        self._invalidated: set[tuple[int, int]] = set()
        self._notes: list[str] = []  # re-record reasons and warnings for the next step
        self._pending_invalidated: list[list[int]] = []
        self._depth = 0
        self._events = 0
        self.log = FoldingLog(self.trace.steps)
        self._labels: dict[tuple, str] = {}
        self._parents: dict[int, Optional[int]] = {}  # cgviz node id -> parent's
        self._replay_steps: dict[int, tuple] = {}  # id(torch node) -> what its replay steps say
        self._raw: list = []  # replay-loop events not yet made into steps (see catch_up)
        self._raw_manager: Any = None  # the manager those events are from
        # torch's skip messages ("skipping cudagraphs due to ..."), joined to the calls they affect
        self._skips: dict[tuple, str] = {}  # (id(manager), function id, cause or None) -> message
        self._run_skips: list[str] = []  # logged during the call in progress (see ran)
        self._compile_skips: dict[str, list[str]] = {}  # compile id -> logged while compiling it
        self._skipped_compiles: dict[str, str] = {}  # compile id -> the message that turned its CUDA graphs off
        # graphs added to a tree while observed (add_function), to tell those torch decided on earlier
        self._adding: list = []  # the managers inside add_function (a new graph's first call)
        self._added: set[tuple] = set()  # (id(manager), function id)
        self._functions: dict[tuple, str] = {}  # (id(manager), function id) -> name, of every function seen
        self._frames: dict[str, str] = {}  # frame part of a compile id ("0" of "0/1") -> its function's name
        skips = layout.skip_count()
        if skips:
            self.trace.meta["cudagraph_skips_before_observing"] = skips

    # -- ids and steps -------------------------------------------------------------------------
    def node_id(self, node: Any) -> Optional[int]:
        if node is None:
            return None
        key = id(node)
        if key not in self._ids:
            self._ids[key] = len(self._ids)
            self._nodes[self._ids[key]] = node
            self._born[self._ids[key]] = self.generation
        return self._ids[key]

    def step(self, kind: str, reason: str, manager: Any = None, *, function: Optional[str] = None,
             node: Any = None, invalidated: Optional[list] = None, start: Optional[float] = None) -> None:
        """A decision off the replay loop's hot path: the events noted before it come first."""
        if self._raw:
            self.catch_up()
        self._events += 1
        self.saw(manager)
        if self._notes and kind in ("record", "eager", "warmup"):
            reason = reason + "; " + "; ".join(self._notes)
            self._notes.clear()
        reason = portable_paths(reason)
        node_id = self.node_id(node)
        parent_id = self._parents.get(node_id) if node is not None else None
        if node is not None and node_id not in self._parents:
            parent_id = self._parents[node_id] = self.node_id(layout.node_parent(node))
        invalidated = invalidated or []
        key = (kind, function, node_id, parent_id, tuple(map(tuple, invalidated)),
               None if kind == "generation" else reason)
        self._log(key, manager, kind, reason, function, node_id, parent_id, invalidated, start)

    def saw(self, manager: Any) -> None:
        if manager is not None and manager not in self.managers:
            self.managers.append(manager)
            self._devices[id(manager)] = layout.manager_device(manager)
            devices = sorted({i for i in map(layout.manager_index, self.managers) if i is not None})
            if len(devices) > 1:  # trees on several devices: every step says whose it is
                self.trace.meta["devices"] = [device_described(i) for i in devices]
                self.log.name_devices()

    # -- the replay loop's events: noted raw, made into steps in batches -------------------------
    def raw_manager(self, manager: Any) -> bool:
        """Can this manager's replay-loop events be noted raw now? (trace level "events", and
        one manager at a time: its events are caught up before another's are noted)."""
        if self.level == "full":
            return False
        if self._raw_manager is not manager:
            self.catch_up()
            self.saw(manager)
            self._raw_manager = manager
        return True

    def replayed(self, manager: Any, node: Any, start: Optional[float] = None) -> None:
        """A replay seen by the hook: noted raw at "events" (the hook appends itself once
        this returned True for its manager), made into a step at once at "full"."""
        if self.raw_manager(manager):
            self._note(node)
        else:
            self._replay(manager, node, start)

    def generation_began(self, manager: Any) -> None:
        raw = self._raw
        if self._raw_manager is manager and not self._pending_invalidated:  # the replay loop
            raw.append(_NEW_GENERATION)
            if len(raw) >= RAW_BATCH:
                self.catch_up()
            return
        if not self._pending_invalidated and self.raw_manager(manager):
            self._note(_NEW_GENERATION)
        else:
            self.catch_up()
            self._new_generation(manager)

    def path_ended(self, manager: Any, before: Any) -> None:
        if self.raw_manager(manager):
            self._note((_PATH_END, before))
        else:
            self._path_end(manager, before)

    def _note(self, event: Any) -> None:
        self._raw.append(event)
        if len(self._raw) >= RAW_BATCH:
            self.catch_up()

    def catch_up(self) -> None:
        """Make the noted replay-loop events into steps (in order, before anything else)."""
        if not self._raw:
            return
        raw, self._raw = self._raw, []
        manager = self._raw_manager
        for event in raw:
            if event is _NEW_GENERATION:
                self._new_generation(manager)
            elif type(event) is tuple:
                self._path_end(manager, event[1])
            else:
                self._replay(manager, event)

    def _replay(self, manager: Any, node: Any, start: Optional[float] = None) -> None:
        replay = self._replay_steps.get(id(node))
        if replay is None:
            replay = self._replay_steps[id(node)] = self._replay_step(manager, node)
        key, cg_id, label, parent, reason = replay
        self._replays[cg_id] += 1
        if self._notes:
            self._notes.clear()  # children that failed their checks before this one matched
        if self._invalidated:
            self._invalidated = {k for k in self._invalidated if k[0] != cg_id}
        self._events += 1
        self._add(key, manager, ("execute", reason, self.generation, label, cg_id, parent, []), start)

    def _replay_step(self, manager: Any, node: Any) -> tuple:
        """(step key, node id, label, parent id, reason) of a node's replay, made at its first replay."""
        self.saw(manager)
        cg_id = self.node_id(node)
        label = self.label(manager, layout.node_function(node))
        reason = f"{label} replays node {cg_id}: its invariants hold"
        parent = self._parents.get(cg_id)
        if cg_id not in self._parents:
            parent = self._parents[cg_id] = self.node_id(layout.node_parent(node))
        return ("execute", label, cg_id, parent, (), reason), cg_id, label, parent, reason

    def _new_generation(self, manager: Any) -> None:
        invalidated, self._pending_invalidated = self._pending_invalidated, []
        old = self.generation
        self.generation += 1
        self._events += 1
        key = ("generation", None, None, None, tuple(map(tuple, invalidated)), None) if invalidated else _GENERATION
        fields = ("generation", old, self.generation, None, None, None, invalidated)  # reason made with the Step
        self._add(key, manager, fields, None)

    def _path_end(self, manager: Any, before: Any) -> None:
        self.step("path_end", f"all outputs of the path ending at node {self.node_id(before)} "
                  "are dead; the next call starts from the roots", manager)

    def _log(self, key: tuple, manager: Any, kind: str, reason: str, function: Optional[str],
             node_id: Optional[int], parent_id: Optional[int], invalidated: list, start: Optional[float]) -> None:
        self._add(key, manager, (kind, reason, self.generation, function, node_id, parent_id, invalidated), start)

    def _add(self, key: tuple, manager: Any, fields: tuple, start: Optional[float]) -> None:
        """Into the folding log, with its tree's device; `start` None: not timed (duration 0)."""
        duration = 0.0 if start is None else time.perf_counter() - start
        if start is not None:  # its start on the wall clock torch's profiler uses (Step.start)
            fields += (time.time() - duration,)
        device = None if manager is None else self._devices.get(id(manager))
        if self.level != "full":
            self.log.add(key + (device,), fields, duration, device)
            return
        step = make_step(fields, duration)
        if manager is not None:
            step.snapshot = self.snapshot(manager)
        self.log.add(key + (device,), step, duration, device)

    def kernels_read(self, node: Any, label: str, kernels: list) -> None:
        """A recorded node's CUDA graph nodes (kernels, copies, sets: [name, count]), kept in the
        trace's profile as the cuda backend keeps its own (no times: torch replays the graph)."""
        profile = self.trace.meta.setdefault("profile", {})
        profile[str(self.node_id(node))] = {"function": label, "kind": "graph", "kernels": kernels}

    def label(self, manager: Any, function_id: Any) -> str:
        """A function's name in the trace (see compiled_graph_name), made once."""
        key = (id(manager), id(function_id))
        label = self._labels.get(key)
        if label is None:
            name, mode = layout.function_label(manager, function_id)
            cid = layout.compile_id(manager, function_id)
            frame = self.frame_name(cid, layout.stack_traces(manager, function_id))
            label = self._labels[key] = portable_paths(compiled_graph_name(name, cid, mode, frame))
            self._functions[id(manager), function_id] = label
        return label

    def frame_name(self, compile_id: str, stacks: list[str]) -> str:
        """The function torch.compile compiled a graph from: the outermost frame of the stacks
        torch keeps for the graph (its outputs' or its skip message's). A graph without one (a
        backward may have none) takes the name found for another graph of its frame."""
        frame = compile_id.rsplit("/", 1)[0] if compile_id else None
        for text in stacks:
            frames = stack_frames(text)
            if frames:
                if frame is not None:
                    self._frames.setdefault(frame, frames[0]["function"])
                return frames[0]["function"]
        return self._frames.get(frame, "") if frame is not None else ""

    # -- snapshots -----------------------------------------------------------------------------
    def snapshot(self, manager: Any) -> Snapshot:
        """Walk the manager: every recorded graph, warmup nodes seen, outputs, the pool."""
        self.catch_up()
        seen: list[Any] = []
        stack = list(layout.roots(manager))
        while stack:
            node = stack.pop(0)
            seen.append(node)
            stack.extend(layout.node_children(node))
        device = self._devices.get(id(manager))
        for cg_id, node in self._nodes.items():  # the warmup nodes of this manager's device
            if layout.is_warmup(node) and node not in seen and layout.node_device(node) == device:
                seen.append(node)
        views = [self._node_view(manager, n) for n in seen]
        views.sort(key=lambda v: v.id)
        current = layout.read(manager, "current_node")
        path = []
        n = current
        while n is not None:
            path.append(self.node_id(n))
            n = layout.node_parent(n)
        path.reverse()
        state = getattr(layout.read(manager, "path_state"), "name", "none").lower()
        return Snapshot(views, self.node_id(current), path, state, self.generation, self._segments(manager, views))

    def _node_view(self, manager: Any, node: Any) -> NodeView:
        cg_id = self.node_id(node)
        fid = layout.node_function(node)
        meta = layout.output_metadata(node)
        outputs = []
        for i, ref in enumerate(layout.output_refs(node)):
            m = meta[i] if i < len(meta) and isinstance(meta[i], dict) else {}
            if (cg_id, i) in self._invalidated:
                state = "invalid"
            else:
                state = "live" if layout.is_live(ref) else "dead"
            address = ref.data_ptr() if ref is not None else m.get("data_ptr")
            dtype = str(m.get("dtype", "")).removeprefix("torch.")
            outputs.append(OutputView(i, list(m.get("size", ())), dtype, int(m.get("nbytes", 0) or 0), address, state,
                                      None if ref is not None else "untracked"))
        children = [self.node_id(c) for c in layout.node_children(node)]
        children += [i for i, n in self._nodes.items() if layout.is_warmup(n) and layout.node_parent(n) is node]
        return NodeView(
            id=cg_id, function=self.label(manager, fid), kind="warmup" if layout.is_warmup(node) else "graph",
            parent=self.node_id(layout.node_parent(node)), children=sorted(children),
            generation=self._born.get(cg_id, self.generation), replays=self._replays[cg_id], outputs=outputs,
            signature=layout.torch_node_id(node),
        )

    def _segments(self, manager: Any, views: list[NodeView]) -> list:
        pool = layout.pool_of(manager)
        device = layout.manager_index(manager)
        if pool is None or device is None:
            return []
        from cgviz.engine.cuda import pool_segments
        from cgviz.trace.ownership import owned_segments

        return owned_segments(pool_segments(device, pool), views, {})

    # -- the hooks ------------------------------------------------------------------------------
    def ran(self, manager: Any, function_id: Any, decisions_before: int, start: Optional[float],
            error: Optional[BaseException] = None) -> None:
        """After the outermost run() of a call: an error, or a call torch ran without a decision."""
        self.saw(manager)
        label = self.label(manager, function_id)
        logged, self._run_skips = self._run_skips, []
        for message in logged:  # torch's skip messages of this call: they are about this function
            self._remember_skip(manager, function_id, message)
        if error is not None:
            self.step("error", f"{label} raised {type(error).__name__}: {error}", manager, function=label, start=start)
        elif self._events + len(self._raw) == decisions_before:
            self.step("eager", self.eager_reason(manager, function_id, label), manager, function=label, start=start)

    # -- torch's skip messages, joined to the calls they affect -----------------------------------
    def _remember_skip(self, manager: Any, function_id: Any, message: str) -> None:
        cause = (layout.EAGER_RERECORD_LIMIT if "re-recording limit" in message
                 else layout.EAGER_MUTATION if "mutat" in message.lower() else "")
        self._skips[id(manager), function_id, cause] = self._skips[id(manager), function_id, None] = message

    def eager_reason(self, manager: Any, function_id: Any, label: str) -> str:
        """Why torch's manager ran a call eagerly: torch's own message for the function (it says
        it once per function), joined by what torch's state says now; without one, what that
        state says, and whether torch said why before observing began."""
        cause = layout.eager_cause(manager, function_id)
        key = (id(manager), function_id)
        message = self._skips.get(key + (cause or None,))
        if message:
            return f"{label} ran eagerly: {SKIPPED}{message}"
        what = _EAGER_WORDS.get(cause, "torch's tree neither warmed it up, recorded nor replayed it")
        if cause == layout.EAGER_RERECORD_LIMIT:
            what += f" (torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit = {layout.rerecord_limit()})"
        new = key in self._added or (self._adding and self._adding[-1] is manager)
        if _hooked(layout.HOOKED_METHODS["add"]) and not new:
            return (f"{label} ran eagerly: {what}; {BEFORE_OBSERVING} (the graph was compiled and first called "
                    f"before, and torch says why once), so its message is not in this trace: {OBSERVE_FIRST_CALL}")
        return f"{label} ran eagerly: {what}"

    def skip_logged(self, message: str, in_call: bool) -> None:
        """torch logged "skipping cudagraphs due to ...": during a call of the tree manager (about
        that call's function, see ran), or while compiling a graph (about that graph: joined to
        its calls when its post_compile ends, see compiled); otherwise a step of its own."""
        if in_call:
            self._run_skips.append(message)
        elif _hooked(layout.COMPILED_GRAPH_MEMBERS[0]):
            self._compile_skips.setdefault(layout.current_compile_id(), []).append(message)
        else:
            self.step("eager", SKIPPED + message)

    def compiled(self, graph: Any, compile_id: str, turned_off: bool) -> Optional[tuple[str, str]]:
        """A graph's compilation ended: (its name, the reason of its calls) when torch turned its
        CUDA graphs off and said why (for it, or for the forward of this backward), else None."""
        messages = self._compile_skips.pop(compile_id, [])
        for message in messages[:-1] if turned_off else messages:  # said, but not what turned them off
            self.step("eager", SKIPPED + message)
        if not turned_off:
            return None
        mode = layout.graph_mode(graph)
        if messages:
            message = self._skipped_compiles[compile_id] = messages[-1]
            why = ""
        elif compile_id in self._skipped_compiles:
            message = self._skipped_compiles[compile_id]
            why = " (torch skipped the CUDA graphs of its forward, and so of it)"
        else:  # not asked for CUDA graphs, or a graph with no CUDA work: torch says nothing
            return None
        label = portable_paths(compiled_graph_name("", compile_id, mode, self.frame_name(compile_id, [message])))
        return label, f"{label} ran eagerly{why}: {SKIPPED}{message}"

    def finish(self) -> None:
        """When observing stops: skip messages joined to nothing become steps of their own, and
        the graphs torch compiled before observing began are named in the trace's meta."""
        for message in self._run_skips + [m for ms in self._compile_skips.values() for m in ms]:
            self.step("eager", SKIPPED + message)
        self._run_skips, self._compile_skips = [], {}
        if _hooked(layout.HOOKED_METHODS["add"]):
            before = sorted({name for key, name in self._functions.items() if key not in self._added})
            if before:
                self.trace.meta["compiled_before_observing"] = before


class FoldingLog:
    """The observed steps, with repeated work folded as it happens.

    While a folded block repeats (a compiled model called in a loop), a decision that
    matches the block's next step is only counted: no Step is made. The steps of a
    repetition in progress are made only if it breaks off, or at `flush()`; `trace.steps`
    is exact whenever no repetition is half done (after each call of a steady loop) and
    once observing stops.
    """

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.keys: list[tuple] = []
        self.devices: list[Optional[str]] = []  # each step's tree's device, written into it once there are several
        self.named = False  # do the steps say their device (see name_devices)?
        self.pending: list[tuple[tuple, Any, float, Optional[str]]] = []

    def add(self, key: tuple, step: Any, duration: float, device: Optional[str] = None) -> None:
        """`step`: a Step, or the fields of one (see `make_step`), made only if it is kept."""
        steps = self.steps
        if steps and steps[-1].repeat > 1:
            end = steps[-1]
            k, i = end.span, len(self.pending)
            if self.keys[len(self.keys) - k + i] == key:
                self.pending.append((key, step, duration, device))
                if i + 1 == k:  # one more repetition of the whole block
                    for kept, (_, _, d, _) in zip(steps[-k:], self.pending):
                        kept.duration += d
                    end.repeat += 1
                    self.pending = []
                return
        self.flush()
        self._append(key, step, duration, device)

    def name_devices(self) -> None:
        """Trees on a second device: from now on every step says its device, and so do those
        made before (a trace of one device says it once, in its meta)."""
        if not self.named:
            self.named = True
            for step, device in zip(self.steps, self.devices):
                step.device = device

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for key, step, duration, device in pending:
            self._append(key, step, duration, device)

    def _append(self, key: tuple, step: Any, duration: float, device: Optional[str]) -> None:
        if not isinstance(step, Step):
            step = make_step(step, duration)
        step.index = len(self.steps)
        if self.named:
            step.device = device
        self.steps.append(step)
        self.keys.append(key)
        self.devices.append(device)
        if fold_repeats(self.steps, self.keys) is not None:
            del self.devices[len(self.steps):]


def make_step(fields: tuple, duration: float) -> Step:
    """A Step from (kind, reason, generation, function, node, parent, invalidated[, start]).

    A generation step's reason is the number of the generation that ended: most are
    folded into a repeat count, so their text is only written for the steps kept.
    """
    kind, reason, generation, function, node, parent, invalidated, *start = fields
    if kind == "generation" and isinstance(reason, int):
        names = ", ".join(f"output {o} of node {n}" for n, o in invalidated) if invalidated else "nothing live"
        reason = (f"generation {reason} ends (a new torch.compile invocation or cudagraph_mark_step_begin()); "
                  f"invalidated: {names}")
    return Step(index=0, kind=kind, reason=reason, generation=generation, function=function,
                node=node, parent=parent, duration=duration, invalidated=invalidated,
                start=start[0] if start else None)


def _hook(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    original = getattr(owner, name, None)
    if original is None:
        layout.read(owner, name)  # says once that this torch lacks it
        return
    _ORIGINALS.append((owner, name, original))
    setattr(owner, name, make(original))


def _install() -> None:
    manager_cls = layout.manager_class()

    def wrap_run(original):
        def run(self, new_inputs, function_id):
            if not _ACTIVE or _ACTIVE[-1]._depth:  # torch's run() calling itself: the outer call watches
                return original(self, new_inputs, function_id)
            obs = _ACTIVE[-1]
            start = time.perf_counter() if obs.level == "full" else None  # no clock on the replay loop
            decisions = obs._events + len(obs._raw)
            obs._depth += 1
            try:
                out = original(self, new_inputs, function_id)
            except Exception as exc:
                obs.ran(self, function_id, decisions, start, exc)
                raise
            finally:
                obs._depth -= 1
            if obs._events + len(obs._raw) == decisions:
                obs.ran(self, function_id, decisions, start)
            return out
        return run

    def after(describe: Callable) -> Callable:
        """A wrapper that runs the original, then records a step built by describe()."""
        def make(original):
            def method(self, *args, **kwargs):
                if not _ACTIVE:
                    return original(self, *args, **kwargs)
                start = time.perf_counter()
                before = self.current_node
                out = original(self, *args, **kwargs)
                for obs in _ACTIVE:
                    describe(obs, self, args, before, start)
                return out
            return method
        return make

    def on_warmup(obs, manager, args, before, start):
        node = layout.read(manager, "current_node")
        label = obs.label(manager, args[1])
        already = getattr(node, "already_warm", False)
        reason = (f"{label} runs eagerly again: the path is warming up" if already
                  else f"first call of {label}: warm up eagerly, allocations in the tree's pool")
        obs.step("warmup", reason, manager, function=label, node=node, start=start)

    def make_record(original):
        def method(self, new_inputs, function_id, *args, **kwargs):
            if not _ACTIVE:
                return original(self, new_inputs, function_id, *args, **kwargs)
            start = time.perf_counter()
            parent = self.current_node
            # why the existing children could not replay (asked again only now, off the replay path)
            notes = [] if layout.read(self, "in_recording", False) else layout.replay_mismatches(
                self, parent, new_inputs, function_id)
            keep = any(obs.read_kernels for obs in _ACTIVE)
            with layout.graphs_kept() if keep else contextlib.nullcontext():
                out = original(self, new_inputs, function_id, *args, **kwargs)
            node = layout.read(self, "current_node")
            kernels = graph_kernels(layout.read(node, "graph")) if keep else None
            for obs in _ACTIVE:
                obs.catch_up()  # replays noted before this recording come first
                obs._notes[:0] = [f"node {obs.node_id(child)} could not replay: {why}" for child, why in notes]
                label = obs.label(self, function_id)
                where = "a new root" if parent is None else f"a child of node {obs.node_id(parent)}"
                cid = layout.compile_id(self, function_id)
                reason = f"recording {label} as {where}" + (f" (compile id {cid})" if cid else "")
                obs._invalidated = {k for k in obs._invalidated if k[0] != obs.node_id(node)}
                obs.step("record", reason, self, function=label, node=node, start=start)
                if obs.read_kernels and kernels is not None:
                    obs.kernels_read(node, label, kernels)
            return out
        return method

    def make_execute(original):
        def execute_node(self, node, new_inputs):
            if not _ACTIVE:
                return original(self, node, new_inputs)
            start = None if _ACTIVE[-1]._raw_manager is self else time.perf_counter()
            out = original(self, node, new_inputs)
            for obs in _ACTIVE:
                if obs._raw_manager is self:  # the replay loop: note it, nothing more
                    obs._raw.append(node)
                    if len(obs._raw) >= RAW_BATCH:
                        obs.catch_up()
                else:
                    obs.replayed(self, node, start)
            return out
        return execute_node

    def on_checkpoint(obs, manager, args, before, start):
        node = layout.read(manager, "current_node")
        obs.step("checkpoint_restore", f"allocator state saved after recording node {obs.node_id(node)} "
                 "restored, keeping the path's live outputs", manager, node=node, start=start)

    def make_try_end_warmup(original):
        """A warming-up path ends without clear_current_path_state_and_set_to_none()."""
        def method(self, *args, **kwargs):
            if not _ACTIVE:
                return original(self, *args, **kwargs)
            before = self.current_node
            new_generation = layout.starts_new_generation(self)
            out = original(self, *args, **kwargs)
            if before is not None and self.current_node is None:
                for obs in _ACTIVE:
                    if new_generation:
                        obs.generation_began(self)
                    else:
                        obs.path_ended(self, before)
            return out
        return method

    def make_dealloc(original):
        def method(self, *args, **kwargs):
            if _ACTIVE:
                current = layout.read(self, "current_node")
                for obs in _ACTIVE:
                    obs.catch_up()
                    node = current
                    while node is not None:
                        cg_id = obs.node_id(node)
                        for i, ref in enumerate(layout.output_refs(node)):
                            if layout.is_live(ref):
                                obs._pending_invalidated.append([cg_id, i])
                                obs._invalidated.add((cg_id, i))
                        node = layout.node_parent(node)
            return original(self, *args, **kwargs)
        return method

    def make_warn(original):
        def method(self, function_id, *args, **kwargs):
            warned = set(layout.read(self, "warned_functions", set()) or ())
            out = original(self, function_id, *args, **kwargs)
            if _ACTIVE and function_id in (layout.read(self, "warned_functions", set()) or ()) and function_id not in warned:
                for obs in _ACTIVE:
                    obs.catch_up()
                    obs._notes.append("torch warns: unable to hit the fast path because outputs from a previous "
                                      "step still require backward (a pending backward)")
            return out
        return method

    def make_skip(original):
        def log_skip(msg, *args, **kwargs):
            in_call = bool(_ACTIVE) and _ACTIVE[-1]._depth > 0  # inside the tree manager's run()
            for obs in _ACTIVE:
                obs.skip_logged(str(msg), in_call)
            return original(msg, *args, **kwargs)
        return log_skip

    def make_add(original):
        """A new compiled graph enters the tree (and runs its first call): observed from its start."""
        def add_function(self, *args, **kwargs):
            observers = list(_ACTIVE)
            for obs in observers:
                obs._adding.append(self)
            try:
                out = original(self, *args, **kwargs)
            finally:
                for obs in observers:
                    obs._adding.pop()
            function_id = layout.added_function_id(out)
            for obs in observers:
                obs._added.add((id(self), function_id))
            return out
        return add_function

    def make_post_compile(original):
        """A compiled graph is made ready: if torch turned its CUDA graphs off, see its calls."""
        def post_compile(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            if _ACTIVE:
                turned_off = layout.cudagraphs_turned_off(args, kwargs)
                compile_id = layout.current_compile_id()
                joined = [j for j in (obs.compiled(self, compile_id, turned_off) for obs in _ACTIVE) if j]
                if joined:
                    _watch_eager_graph(self, *joined[0])
            return out
        return post_compile

    # _run, where torch has it: run() is bound into each compiled function when torch first
    # calls it, so a model compiled before observing began would bypass a hook on run().
    _hook(manager_cls, layout.run_method(manager_cls), wrap_run)
    wrappers = {
        "warmup": after(on_warmup),
        "record": make_record,
        "execute": make_execute,
        "checkpoint": after(on_checkpoint),
        "path_clear": lambda original: layout.path_clear_hook(
            original, _ACTIVE, TorchObserver.generation_began, TorchObserver.path_ended),
        "end_warmup": make_try_end_warmup,
        "dealloc": make_dealloc,
        "warn": make_warn,
        "add": make_add,
    }
    for role, name in layout.HOOKED_METHODS.items():
        _hook(manager_cls, name, wrappers[role])
    for module_name in layout.SKIP_LOGGER_MODULES:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, layout.SKIP_LOGGER):
            _hook(module, layout.SKIP_LOGGER, make_skip)
    graph_cls = layout.compiled_graph_class()
    if graph_cls is not None:
        _hook(graph_cls, layout.COMPILED_GRAPH_MEMBERS[0], make_post_compile)


def _hooked(name: str) -> bool:
    """Is torch's `name` wrapped now (this torch has it)?"""
    return any(hooked == name for _, hooked, _ in _ORIGINALS)


def _watch_eager_graph(graph: Any, label: str, reason: str) -> None:
    """Each call of a compiled graph whose CUDA graphs torch turned off becomes an eager step
    (its calls never reach the tree manager); the graph's own callable is put back at uninstall."""
    attribute = layout.COMPILED_GRAPH_MEMBERS[1]
    original = getattr(graph, attribute, None)
    if original is None:
        return

    def current_callable(inputs):
        if not _ACTIVE:
            return original(inputs)
        start = time.perf_counter()
        out = original(inputs)
        for obs in _ACTIVE:
            obs.step("eager", reason, function=label, start=start)
        return out

    setattr(graph, attribute, current_callable)
    try:
        ref: Callable[[], Any] = weakref.ref(graph)
    except TypeError:
        ref = lambda: graph  # noqa: E731  (kept until uninstall)
    _EAGER_GRAPHS.append((ref, original, current_callable))


def _uninstall() -> None:
    while _ORIGINALS:
        owner, name, original = _ORIGINALS.pop()
        setattr(owner, name, original)
    attribute = layout.COMPILED_GRAPH_MEMBERS[1]
    while _EAGER_GRAPHS:
        ref, original, wrapper = _EAGER_GRAPHS.pop()
        graph = ref()
        if graph is not None and getattr(graph, attribute, None) is wrapper:
            setattr(graph, attribute, original)


def graph_kernels(graph: Any) -> Optional[list]:
    """What a CUDA graph torch recorded holds ([name, count], `kernel_counts`), or None when
    the graph kept nothing to read."""
    if graph is None:
        return None
    try:
        dot = compat.graph_dot(graph)
    except Exception:  # a graph that did not keep its cudaGraph_t: debug_dump refuses
        return None
    return kernel_counts(dot) if dot else None


def start_observing(trace: str = "full", kernels: Optional[bool] = None) -> TorchObserver:
    """Begin recording torch.compile's CUDA graph trees; returns the observer (its .trace grows)."""
    observer = TorchObserver(trace, kernels)
    import torch._inductor.compile_fx  # noqa: F401  (so the skip logger's importers are patched too)

    if not _ACTIVE:
        _install()
    _ACTIVE.append(observer)
    return observer


def stop_observing(observer: TorchObserver) -> Trace:
    """Stop one observer; the wrapping is removed when none is left."""
    observer.catch_up()
    observer.finish()
    observer.log.flush()
    if observer in _ACTIVE:
        _ACTIVE.remove(observer)
    if not _ACTIVE:
        _uninstall()
    return observer.trace


@contextlib.contextmanager
def observe_torch(trace: str = "full", path: str | os.PathLike | None = None, *,
                  kernels: Optional[bool] = None) -> Iterator[Trace]:
    """`with cgviz.observe_torch() as trace:` — torch.compile(mode="reduce-overhead") activity
    inside the block becomes the Trace's steps (replays are made into steps in batches: inside
    the block the newest few thousand may not show yet; after it, all do). An "overwritten by a subsequent run" error
    leaving the block is recorded as an error step, then raised as usual.

    With `path`, the trace is saved there when the block ends (also when it raises). On each rank
    of a torch.distributed job, `{rank}` and `{world_size}` in it are filled in and the trace's
    meta names the rank (`path="run-{rank}.cgtrace.json"`; see cgviz.trace.ranks.rank_path): a
    placeholder that cannot be filled, or a path that cannot be written, is refused here, before
    anything runs.

    `kernels` (default: on at trace "full"): each graph torch records keeps its CUDA graph
    after capture, and its kernels, copies and sets go into ``trace.meta["profile"]`` (shown in
    the node panel); torch then instantiates the graph at its first replay, which its recording
    does at once."""
    target = None if path is None else rank_path(path)
    if target is not None:
        check_save_target(target, "trace")
    observer = start_observing(trace, kernels)
    try:
        yield observer.trace
    except RuntimeError as exc:
        steps = observer.trace.steps
        already = steps and steps[-1].kind == "error" and str(exc) in steps[-1].reason
        if OVERWRITTEN in str(exc) and not already:
            manager = observer.managers[-1] if observer.managers else None
            observer.step("error", f"an output was used after a later run overwrote it: {exc}", manager)
        raise
    finally:
        stop_observing(observer)
        if target is not None:
            observer.trace.save(rank_path(target, observer.trace))  # the rank (and device) in its meta
