"""The observer's state: torch's tree-manager activity, told through public event methods, made
into a Trace's steps.

The hooks (`_hooks.py`) read torch and call one event method each; nothing else writes this
state. torch's managers and nodes are held only weakly (a node's id and its replay step are
forgotten when torch frees it), so observing never keeps torch's memory alive: a reset inside an
observation frees the pool exactly as without one.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from functools import partial
from typing import Any, Optional

import torch

from cgviz.observe import _torch_layout as layout
from cgviz.observe import naming
from cgviz.trace.diagnose import BEFORE_OBSERVING, OBSERVE_FIRST_CALL, PARTITIONED, SILENT, SKIPPED, stack_frames
from cgviz.trace.fold import StepLog, decision_key
from cgviz.trace.paths import portable_paths, source_line
from cgviz.trace.model import NodeView, OutputView, Snapshot, Step, Trace
from cgviz.trace.ranks import device_described
from cgviz.trace.units import plural

# Replay-loop events are noted raw (a replayed torch node, a new generation, (_PATH_END, node),
# an int for a CUDA graph outside the trees: see note_graph_event) and made into steps in batches: whatever a hook on that path does is paid on every call of
# the user's loop, so those hooks only append.
RAW_BATCH = 4096
_NEW_GENERATION = object()
_PATH_END = "path_end"
_GENERATION = decision_key("generation", None, None, None, (), None)  # a generation that invalidated nothing


def make_step(kind: str, reason: str, generation: int, function: Optional[str], node: Optional[int],
              parent: Optional[int], invalidated: list, start: Optional[float] = None) -> Step:
    return Step(index=0, kind=kind, reason=reason, generation=generation, function=function,
                node=node, parent=parent, invalidated=invalidated, start=start)


def _generation_step(ended: int, generation: int, invalidated: list, cloned: list) -> Step:
    """A generation step, worded only when kept (most fold into a repeat count)."""
    return make_step("generation", naming.generation_reason(ended, invalidated, cloned), generation,
                     None, None, None, invalidated)


class TorchObserver:
    """Turns the manager's activity into steps; `trace` grows while it is active.

    `hooked` (set by the session) names the torch methods wrapped now, by role
    (`_torch_layout.HOOKED_METHODS`): what the observer can know depends on it.
    """

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
        self.hooked: frozenset = frozenset()
        self._managers: list[weakref.ref] = []
        self._devices: dict[int, Optional[str]] = {}  # id(manager) -> its device ('cuda:1')
        self._ids: dict[int, int] = {}  # id(torch node) -> cgviz node id, while torch keeps the node
        self._nodes: dict[int, weakref.ref] = {}  # cgviz id -> torch node (weakly: snapshots show it while it lives)
        self._born: dict[int, int] = {}  # cgviz id -> generation it was made in
        self._next_id = 0
        self._replays: Counter = Counter()
        self._invalidated: set[tuple[int, int]] = set()
        self._notes: list[str] = []  # re-record reasons and warnings for the next step
        self._pending_invalidated: list[list[int]] = []
        self._pending_cloned: list[tuple[int, int, int]] = []  # (node, output, bytes) cloned at this generation
        self._depth = 0
        self._events = 0
        self.log = StepLog(self.trace.steps)
        self._pool_reads: dict[int, tuple] = {}  # device -> (allocator counters, (pool, its segments))
        self._labels: dict[tuple, str] = {}
        self._parents: dict[int, Optional[int]] = {}  # cgviz node id -> parent's
        self._replay_steps: dict[int, tuple] = {}  # id(torch node) -> what its replay steps say
        # replay-loop events not yet made into steps (see catch_up), as plain data: a replay's step
        # parts, _NEW_GENERATION, or (_PATH_END, node id); nothing of torch's is held in them
        self._raw: list = []
        self._raw_id: Optional[int] = None  # id() of the manager those events are from, while it lives
        self._raw_ref: Any = None  # a weak reference to it
        # torch's skip messages ("skipping cudagraphs due to ..."), joined to the calls they affect
        self._skips: dict[tuple, str] = {}  # (id(manager), function id, cause or None) -> message
        self._run_skips: list[str] = []  # logged during the call in progress (see call_ended)
        self._compile_skips: dict[str, list[str]] = {}  # compile id -> logged while compiling it
        self._last_error = ""  # the overwritten-output error a call raised (error_raised does not repeat it)
        self._dynamo_frames: dict[str, str] = {}  # compile id -> the function dynamo compiled ("Net.forward")
        self._skipped_compiles: dict[str, str] = {}  # compile id -> the message that turned its CUDA graphs off
        # graphs added to a tree while observed (add_function), to tell those torch decided on earlier
        self._adding: list[int] = []  # id() of the managers inside add_function (a new graph's first call)
        self._added: set[tuple] = set()  # (id(manager), function id)
        self._functions: dict[tuple, str] = {}  # (id(manager), function id) -> name, of every function seen
        self._frames: dict[str, str] = {}  # frame part of a compile id ("0" of "0/1") -> its function's name
        self.graph_sink: Any = None  # a GraphObserver sharing this trace (observe_torch(graphs=True))
        skips = layout.skip_count()
        if skips:
            self.trace.meta["cudagraph_skips_before_observing"] = skips

    # -- what the observer holds -----------------------------------------------------------------
    @property
    def managers(self) -> list:
        """The tree managers seen that torch still keeps."""
        return [m for m in (ref() for ref in self._managers) if m is not None]

    @property
    def decisions(self) -> int:
        """How many decisions were seen (made into steps or noted raw)."""
        return self._events + len(self._raw)

    @property
    def in_call(self) -> bool:
        """Inside the tree manager's run() (its skip messages are about the call's function)."""
        return self._depth > 0

    def node_id(self, node: Any) -> Optional[int]:
        if node is None:
            return None
        key = id(node)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self._next_id
            self._next_id += 1
            self._nodes[found] = weakref.ref(node, partial(self._forget, key))
            self._born[found] = self.generation
        return found

    def _forget(self, key: int, _ref: Any) -> None:
        """torch freed a node: its id() may be reused by a new node, which gets a new cgviz id."""
        self._ids.pop(key, None)
        self._replay_steps.pop(key, None)

    def _parent_of(self, node_id: int, node: Any) -> Optional[int]:
        """A node's parent's id, read from torch once (a replay loop asks at every step it makes)."""
        if node_id not in self._parents:
            self._parents[node_id] = self.node_id(layout.node_parent(node))
        return self._parents[node_id]

    def _live_nodes(self) -> dict[int, Any]:
        return {cg_id: node for cg_id, node in ((i, r()) for i, r in self._nodes.items()) if node is not None}

    # -- steps ---------------------------------------------------------------------------------
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
        parent_id = None if node is None else self._parent_of(node_id, node)
        invalidated = invalidated or []
        key = decision_key(kind, function, node_id, parent_id, invalidated, reason)
        self._add(key, manager, partial(make_step, kind, reason, self.generation, function, node_id, parent_id,
                                        invalidated), start)

    def saw(self, manager: Any) -> None:
        if manager is None or any(ref() is manager for ref in self._managers):
            return
        self._managers = [ref for ref in self._managers if ref() is not None] + [weakref.ref(manager)]
        self._devices[id(manager)] = layout.manager_device(manager)
        devices = sorted({i for i in map(layout.manager_index, self.managers) if i is not None})
        if devices and "device" not in self.trace.meta and torch.cuda.is_available():  # the GPU it was recorded on
            self.trace.meta["device"] = device_described(devices[0])
        if len(devices) > 1:  # trees on several devices: every step says whose it is
            self.trace.meta["devices"] = [device_described(i) for i in devices]
            self.log.name_devices()

    def _add(self, key: tuple, manager: Any, make: Any, start: Optional[float]) -> None:
        """Into the step log, with its tree's device; `start` None: not timed (duration 0)."""
        duration = 0.0 if start is None else time.perf_counter() - start
        if start is not None:  # its start on the wall clock torch's profiler uses (Step.start)
            make = partial(make, start=time.time() - duration)
        device = None if manager is None else self._devices.get(id(manager))
        if self.level == "full" and manager is not None:  # a snapshot, taken when what it shows changed
            self.log.add(key, make, duration, device, state=self._state(manager), snap=partial(self.snapshot, manager))
        else:
            self.log.add(key, make, duration, device)

    # -- the replay loop: noted raw, made into steps in batches ------------------------------------
    def raw_manager(self, manager: Any) -> bool:
        """Can this manager's replay-loop events be noted raw now? (trace level "events", and
        one manager at a time: its events are caught up before another's are noted)."""
        if self.level == "full":
            return False
        if self._raw_id != id(manager):
            self.catch_up()
            self.saw(manager)
            self._raw_id, self._raw_ref = id(manager), weakref.ref(manager, self._raw_manager_gone)
        return True

    def _raw_manager_gone(self, _ref: Any) -> None:
        """The manager of the noted events was freed (its compiled functions died, and torch had
        no manager left to shut down): the events are plain data; a new manager is a new one."""
        self._raw_id = self._raw_ref = None

    def replayed(self, manager: Any, node: Any, start: Optional[float] = None) -> None:
        """torch replayed a node: noted raw at "events" (its step's parts, made at its first
        replay), made into a step at once at "full"."""
        if self._raw_id == id(manager) or self.raw_manager(manager):
            self._note(self._replay_parts(manager, node))
        else:
            self._add_replay(manager, self._replay_parts(manager, node), start)

    def generation_began(self, manager: Any) -> None:
        pending = self._pending_invalidated or self._pending_cloned  # said by its step: made now
        if not pending and (self._raw_id == id(manager) or self.raw_manager(manager)):
            self._note(_NEW_GENERATION)
        else:
            self.catch_up()
            self._new_generation(manager)

    def path_ended(self, manager: Any, before: Any) -> None:
        if self.raw_manager(manager):
            self._note((_PATH_END, self.node_id(before)))
        else:
            self._path_end(manager, self.node_id(before))

    def _note(self, event: Any) -> None:
        """A replay-loop event, noted raw; a full batch is made into steps."""
        self._raw.append(event)
        if len(self._raw) >= RAW_BATCH:
            self.catch_up()

    def note_graph_event(self, event: int) -> None:
        """A replay or destruction of a CUDA graph outside the trees (`graph_sink` makes it a
        step), noted among the trees' own events so that the steps keep their order."""
        self._note(event)

    def catch_up(self) -> None:
        """Make the noted replay-loop events into steps (in order, before anything else)."""
        if not self._raw:
            return
        raw, self._raw = self._raw, []
        manager = self._raw_ref() if self._raw_ref is not None else None
        for event in raw:
            if type(event) is int:
                self.graph_sink.noted(event)
            elif event is _NEW_GENERATION:
                self._new_generation(manager)
            elif len(event) == 2:
                self._path_end(manager, event[1])
            else:
                self._add_replay(manager, event, None)

    def manager_shutting_down(self, manager: Any) -> None:
        """torch resets its trees (torch._dynamo.reset()): the events noted are made into steps
        now, and nothing of that manager is held any longer."""
        self.catch_up()
        if self._raw_id == id(manager):
            self._raw_id = self._raw_ref = None

    def _replay_parts(self, manager: Any, node: Any) -> tuple:
        """What a node's replay steps say, made at its first replay (forgotten with the node)."""
        replay = self._replay_steps.get(id(node))
        if replay is None:
            replay = self._replay_steps[id(node)] = self._replay_step(manager, node)
        return replay

    def _add_replay(self, manager: Any, replay: tuple, start: Optional[float]) -> None:
        key, cg_id, label, parent, reason = replay
        self._replays[cg_id] += 1
        if self._notes:
            self._notes.clear()  # children that failed their checks before this one matched
        if self._invalidated:
            self._invalidated = {k for k in self._invalidated if k[0] != cg_id}
        self._events += 1
        self._add(key, manager, partial(make_step, "execute", reason, self.generation, label, cg_id, parent, []), start)

    def _replay_step(self, manager: Any, node: Any) -> tuple:
        """(step key, node id, label, parent id, reason) of a node's replay, made at its first replay."""
        self.saw(manager)
        cg_id = self.node_id(node)
        label = self.label(manager, layout.node_function(node))
        reason = f"{label} replays node {cg_id}: its invariants hold"
        if layout.is_kernel_free(node):
            reason += f" ({naming.KERNEL_FREE})"
        parent = self._parent_of(cg_id, node)
        return decision_key("execute", label, cg_id, parent, (), reason), cg_id, label, parent, reason

    def _new_generation(self, manager: Any) -> None:
        invalidated, self._pending_invalidated = self._pending_invalidated, []
        cloned, self._pending_cloned = self._pending_cloned, []
        old = self.generation
        self.generation += 1
        self._events += 1
        key = decision_key("generation", None, None, None, invalidated, None) if invalidated else _GENERATION
        self._add(key, manager, partial(_generation_step, old, self.generation, invalidated, cloned), None)

    def _path_end(self, manager: Any, before: Optional[int]) -> None:
        self.step("path_end", f"all outputs of the path ending at node {before} "
                  "are dead; the next call starts from the roots", manager)

    # -- decisions off the loop --------------------------------------------------------------------
    def warmed_up(self, manager: Any, function_id: Any, node: Any, start: Optional[float]) -> None:
        label = self.label(manager, function_id)
        already = getattr(node, "already_warm", False)
        reason = (f"{label} runs eagerly again: the path is warming up" if already
                  else f"first call of {label}: warm up eagerly, allocations in the tree's pool")
        self.step("warmup", reason, manager, function=label, node=node, start=start)

    def recorded(self, manager: Any, function_id: Any, parent: Any, node: Any, mismatches: list,
                 kernels: Optional[list], start: Optional[float]) -> None:
        """torch recorded `node` (under `parent`); `mismatches`: (child, status, why) of the children
        that could not replay, asked before the recording."""
        self.catch_up()  # replays noted before this recording come first
        self._notes[:0] = [f"node {self.node_id(child)} could not replay: {why}{naming.rerecord_count_note(status)}"
                           for child, status, why in mismatches]
        if layout.is_kernel_free(node):
            self._notes.append(naming.KERNEL_FREE)
        label = self.label(manager, function_id)
        where = "a new root" if parent is None else f"a child of node {self.node_id(parent)}"
        cid = layout.compile_id(manager, function_id)
        reason = f"recording {label} as {where}" + (f" (compile id {cid})" if cid else "")
        self._invalidated = {k for k in self._invalidated if k[0] != self.node_id(node)}
        self.step("record", reason, manager, function=label, node=node, start=start)
        if self.read_kernels and kernels is not None:
            profile = self.trace.meta.setdefault("profile", {})
            profile[str(self.node_id(node))] = {"function": label, "kind": "graph", "kernels": kernels}

    def checkpoint_restored(self, manager: Any, node: Any, start: Optional[float]) -> None:
        self.step("checkpoint_restore", f"allocator state saved after recording node {self.node_id(node)} "
                  "restored, keeping the path's live outputs", manager, node=node, start=start)

    def path_deallocating(self, manager: Any, current: Any) -> None:
        """torch is about to free the path's live outputs (a new generation while warming up or
        recording): those outputs become invalid; outputs cloned out of the pool first stay valid."""
        self.catch_up()
        cloned = {(n, o) for n, o, _ in self._pending_cloned}
        node = current
        while node is not None:
            cg_id = self.node_id(node)
            for i, ref in enumerate(layout.output_refs(node)):
                if layout.is_live(ref) and (cg_id, i) not in cloned:
                    self._pending_invalidated.append([cg_id, i])
                    self._invalidated.add((cg_id, i))
            node = layout.node_parent(node)

    def outputs_cloning(self, found: list[tuple[Any, int, int]]) -> None:
        """torch 2.14+ (cudagraph_trees_generation_cloning): live user-visible outputs are copied
        out of the pool at this generation boundary; the generation step says which."""
        self.catch_up()
        self._pending_cloned += [(self.node_id(node), index, nbytes) for node, index, nbytes in found]

    def pending_backward_warned(self) -> None:
        self.catch_up()
        self._notes.append("torch warns: unable to hit the fast path because outputs from a previous "
                           "step still require backward (a pending backward)")

    def warmup_incomplete(self) -> None:
        """torch 2.14+: the function warming up asked for another warmup."""
        self.catch_up()
        self._notes.append(naming.WARMUP_INCOMPLETE)

    def managed_inputs_limited(self, inputs: list[int], action: str, limit: Any) -> None:
        """torch 2.15: inputs that are outputs of the path kept moving on this edge."""
        self.catch_up()
        self._notes.append(naming.demoted_note(inputs, action, limit))

    def dynamic_shape_limit(self, compile_id: str, mode: str, limit: str) -> None:
        """torch 2.15: a compiled graph stopped recording new shapes (they run eagerly, unseen)."""
        frame = self.frame_name(compile_id, [])
        label = portable_paths(naming.compiled_graph_name("", compile_id, mode, frame))
        self.step("eager", naming.dynamic_shape_limit_reason(label, limit), function=label)

    def error_raised(self, exc: BaseException) -> None:
        """An "overwritten by a subsequent run" error left the observed block."""
        if str(exc) == self._last_error:  # its call's error step says it already
            return
        managers = self.managers
        self.step("error", naming.overwritten_reason(exc), managers[-1] if managers else None)

    # -- a call of the manager's run() ---------------------------------------------------------------
    def call_began(self) -> int:
        """The outermost run() of a call begins; returns the decisions seen so far."""
        self._depth += 1
        return self.decisions

    def call_ended(self, manager: Any, function_id: Any, decisions_before: int, start: Optional[float],
                   error: Optional[BaseException] = None) -> None:
        """After the outermost run() of a call: an error, or a call torch ran without a decision."""
        self._depth -= 1
        if self._adding and self._adding[-1] == id(manager) and function_id is not None:
            self._added.add((id(manager), function_id))  # its first call, inside add_function (it may raise)
        if error is None and self.decisions != decisions_before:
            return
        self.saw(manager)
        label = self.label(manager, function_id)
        logged, self._run_skips = self._run_skips, []
        for message in logged:  # torch's skip messages of this call: they are about this function
            self._remember_skip(manager, function_id, message)
        if error is not None:
            where = ""
            if naming.OVERWRITTEN in str(error):  # an input it was handed had been overwritten: whose call
                site = naming.caller_site()
                where = f" (its call at {site})," if site else ""
                self._last_error = str(error)
            self.step("error", f"{label} raised {type(error).__name__}{where}: {error}", manager, function=label,
                      start=start)
        else:
            self.step("eager", self.eager_reason(manager, function_id, label), manager, function=label, start=start)

    # -- graphs entering the tree ---------------------------------------------------------------------
    def adding(self, manager: Any) -> None:
        self._adding.append(id(manager))

    def added(self, manager: Any, function_id: Any) -> None:
        self._adding.pop()
        if function_id is not None:
            self._added.add((id(manager), function_id))

    # -- names -----------------------------------------------------------------------------------------
    def label(self, manager: Any, function_id: Any) -> str:
        """A function's name in the trace (see naming.compiled_graph_name), made once."""
        key = (id(manager), id(function_id))
        label = self._labels.get(key)
        if label is None:
            name, mode = layout.function_label(manager, function_id)
            cid = layout.compile_id(manager, function_id)
            frame = self.frame_name(cid, layout.stack_traces(manager, function_id))
            label = self._labels[key] = portable_paths(naming.compiled_graph_name(name, cid, mode, frame))
            self._functions[id(manager), function_id] = label
        return label

    def frame_name(self, compile_id: str, stacks: list[str]) -> str:
        """The function torch.compile compiled a graph from: the frame dynamo compiled, where it was
        seen compiling; else the outermost frame of the stacks
        torch keeps for the graph (its outputs' or its skip message's). A graph without one (a
        backward may have none) takes the name found for another graph of its frame."""
        if compile_id in self._dynamo_frames:
            return self._dynamo_frames[compile_id]
        frame = compile_id.rsplit("/", 1)[0] if compile_id else None
        for text in stacks:
            frames = stack_frames(text)
            if frames:
                if frame is not None:
                    self._frames.setdefault(frame, frames[0]["function"])
                return frames[0]["function"]
        return self._frames.get(frame, "") if frame is not None else ""

    # -- snapshots ------------------------------------------------------------------------------------
    def snapshot(self, manager: Any) -> Snapshot:
        """Walk the manager: every recorded graph, warmup nodes seen, outputs, the pool."""
        self.catch_up()
        live = self._live_nodes()
        views = [self._node_view(manager, n, live) for n in self._shown_nodes(manager, live)]
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

    def _shown_nodes(self, manager: Any, live: dict[int, Any]) -> list:
        """The nodes a snapshot of `manager` shows: its recorded graphs, and the warmup nodes of
        its device that are still alive."""
        seen: list[Any] = []
        stack = list(layout.roots(manager))
        while stack:
            node = stack.pop(0)
            seen.append(node)
            stack.extend(layout.node_children(node))
        device = self._devices.get(id(manager))
        for node in live.values():
            if layout.is_warmup(node) and node not in seen and layout.node_device(node) == device:
                seen.append(node)
        return seen

    def _state(self, manager: Any) -> tuple:
        """What a snapshot of `manager` shows, but replay counts and the generation, in a cheap
        form (StepLog takes no new snapshot while it is unchanged): the nodes, their outputs'
        liveness and the path. The pool changes with it: replays allocate nothing."""
        shown = []
        for node in self._shown_nodes(manager, self._live_nodes()):
            shown.append(id(node))
            shown.extend(map(layout.is_live, layout.output_refs(node)))
        path_state = getattr(layout.read(manager, "path_state"), "name", None)
        return id(layout.read(manager, "current_node")), path_state, frozenset(self._invalidated), tuple(shown)

    def _node_view(self, manager: Any, node: Any, live: dict[int, Any]) -> NodeView:
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
        children += [i for i, n in live.items() if layout.is_warmup(n) and layout.node_parent(n) is node]
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
        from cgviz._torch.allocator import allocator_counters, pool_segments
        from cgviz.trace.ownership import owned_segments

        # read again only when the allocator's cumulative counters moved (its snapshot costs ms)
        counters, kept = self._pool_reads.get(device, (None, None))
        now = allocator_counters(device)
        if kept is None or counters != now or kept[0] != tuple(pool):
            kept = (tuple(pool), pool_segments(device, pool))
            self._pool_reads[device] = (now, kept)
        return owned_segments(kept[1], views, {})

    # -- torch's skip messages, joined to the calls they affect --------------------------------------
    def _remember_skip(self, manager: Any, function_id: Any, message: str) -> None:
        cause = (layout.EAGER_RERECORD_LIMIT if "re-recording limit" in message
                 else layout.EAGER_MANAGED_INPUT_LIMIT if "managed input re-recording threshold" in message
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
        what = naming.EAGER_WORDS.get(cause, "torch's tree neither warmed it up, recorded nor replayed it")
        if cause == layout.EAGER_RERECORD_LIMIT:
            what += f" (torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit = {layout.rerecord_limit()})"
        new = key in self._added or (self._adding and self._adding[-1] == id(manager))
        if "add" in self.hooked and not new:
            return (f"{label} ran eagerly: {what}; {BEFORE_OBSERVING} (the graph was compiled and first called "
                    f"before, and torch says why once), so its message is not in this trace: {OBSERVE_FIRST_CALL}")
        return f"{label} ran eagerly: {what}"

    def skip_logged(self, message: str) -> None:
        """torch logged "skipping cudagraphs due to ...": during a call of the tree manager (about
        that call's function, see call_ended), or while compiling a graph (about that graph: joined
        to its calls when its post_compile ends, see compiled); otherwise a step of its own."""
        message = naming.one_skip_prefix(message)
        if self.in_call:
            self._run_skips.append(message)
        elif "post_compile" in self.hooked:
            self._compile_skips.setdefault(layout.current_compile_id(), []).append(message)
        else:
            self.step("compile", SKIPPED + message)

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
            self._dynamo_frames.setdefault(compile_id, frame)
        messages = self._compile_skips.pop(compile_id, [])
        mode = layout.graph_mode(graph)
        if messages:
            label = self._graph_label(compile_id, mode, messages)
            for message in messages[:-1] if turned_off else messages:  # said, but not what turned them off
                self.step("compile", f"while compiling {label}: {SKIPPED}{message}", function=label)
        if not turned_off:
            return None
        why = ""
        if messages:
            self._skipped_compiles[compile_id] = messages[-1]
            said, stacks = SKIPPED + messages[-1], [messages[-1]]
        elif compile_id in self._skipped_compiles:
            message = self._skipped_compiles[compile_id]
            why = " (torch skipped the CUDA graphs of its forward, and so of it)"
            said, stacks = SKIPPED + message, [message]
        elif silent:
            stacks = layout.graph_stacks(graph)
            if stacks:  # where the graph's code is, in torch's words (the doctor reads the line back)
                silent = portable_paths(f"{silent}. Found from :\n{stacks[0]}")
            said = SILENT + silent
        else:  # not asked for CUDA graphs, or a graph with no CUDA work: torch says nothing
            return None
        label = self._graph_label(compile_id, mode, stacks)
        self.step("compile", f"{label} compiled without CUDA graphs{why}, so its calls run eagerly: {said}",
                  function=label)
        return label, f"{label} ran eagerly{why}: {said}"

    def _graph_label(self, compile_id: str, mode: str, stacks: list[str]) -> str:
        """A compiled graph's name, before any call of it reaches a tree (see label)."""
        return portable_paths(naming.compiled_graph_name("", compile_id, mode, self.frame_name(compile_id, stacks)))

    def eager_graph_called(self, label: str, reason: str, start: Optional[float]) -> None:
        """A call of a compiled graph whose CUDA graphs torch turned off (it never reaches the tree)."""
        self.step("eager", reason, function=label, start=start)

    def finish(self) -> None:
        """When observing stops: skip messages joined to nothing become steps of their own, the
        graphs torch compiled before observing began are named in the trace's meta, and a
        repetition half done is kept."""
        self.catch_up()
        for message in self._run_skips:
            self.step("eager", SKIPPED + message)
        for message in (m for ms in self._compile_skips.values() for m in ms):
            self.step("compile", SKIPPED + message)
        self._run_skips, self._compile_skips = [], {}
        if "add" in self.hooked:
            before = sorted({name for key, name in self._functions.items() if key not in self._added})
            if before:
                self.trace.meta["compiled_before_observing"] = before
        self._raw_id = self._raw_ref = None
        self.log.flush()
