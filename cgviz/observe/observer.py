"""The observer's state: torch's tree-manager activity, told through public event methods, made
into a Trace's steps.

The hooks (`_hooks.py`) read torch and call one event method each; nothing else writes this
state. torch's managers and nodes are held only weakly (a node's id and its replay step are
forgotten when torch frees it), so observing never keeps torch's memory alive: a reset inside an
observation frees the pool exactly as without one. The observer's class takes its replay-loop
events from `replay_loop.py`, and owns the parts that have a job of their own: the replay loop's
raw events (`raw_events.py`), torch's skip messages, compile-time decisions and graph names
(`compile_events.py`), and snapshots (`tree_snapshots.py`).
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from functools import partial
from typing import Any, Callable, Optional

import torch

from cgviz.observe import _torch_layout as layout
from cgviz.observe import naming
from cgviz.observe.compile_events import CompileEvents
from cgviz.observe.raw_events import RawEvents
from cgviz.observe.replay_loop import UNREAD, ReplayLoop, make_step
from cgviz.observe.tree_snapshots import TreeSnapshots
from cgviz.trace.fold import StepLog, decision_key
from cgviz.trace.paths import portable_paths
from cgviz.trace.model import Snapshot, Trace
from cgviz.trace.ranks import device_described

class TorchObserver(ReplayLoop):
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
            "backend": "torch.compile", "source": layout.TREES_MODULE,
            "torch": str(torch.__version__), "trace_level": trace,
        })
        self.generation = 1
        self.hooked: frozenset = frozenset()
        self._managers: list[weakref.ref] = []
        self._devices: dict[int, Optional[str]] = {}  # id(manager) -> its device ('cuda:1')
        self._ids: dict[int, int] = {}  # id(torch node) -> cgviz node id, while torch keeps the node
        self._nodes: dict[int, weakref.ref] = {}  # cgviz id -> torch node (weakly: snapshots show it while it lives)
        self._freed: list[int] = []  # cgviz ids of nodes torch freed, still in _nodes (see live_nodes)
        self._born: dict[int, int] = {}  # cgviz id -> generation it was made in
        self._next_id = 0
        self.replays: Counter = Counter()  # cgviz id -> how often torch replayed it
        self._invalidated: set[tuple[int, int]] = set()
        self._notes: list[str] = []  # re-record reasons and warnings for the next step
        # (id(manager), function id) of functions that asked for another warmup during theirs, and
        # of those whose next warmup is the one they asked for (torch 2.14+)
        self._asked: set[tuple[int, Any]] = set()
        self._rewarm: set[tuple[int, Any]] = set()
        self._pending_invalidated: list[list[int]] = []
        self._pending_cloned: list[tuple[int, int, int]] = []  # (node, output, bytes) cloned at this generation
        self.depth = 0  # run() calls of the tree manager under way (torch's run() calls itself)
        self._events = 0
        self.log = StepLog(self.trace.steps)
        self._parents: dict[int, Optional[int]] = {}  # cgviz node id -> parent's
        self._replay_steps: dict[int, tuple] = {}  # id(torch node) -> what its replay steps say
        self._path_end_keys: dict[Optional[int], tuple] = {}  # node id -> the key of the path ending there
        self.raw = RawEvents(self._make_raw)  # replay-loop events not yet made into steps (see catch_up)
        self.full = trace == "full"
        # at "full": where the step log's repeating block stands (StepLog.expected), kept up to
        # date as decisions are noted raw; None when no block repeats
        self._expect: Optional[list] = None
        self.compile = CompileEvents(self.step)  # skip messages, compile-time decisions, graph names
        self.snapshots = TreeSnapshots(self.node_id, self.live_nodes, self.label, self._devices, self.replays,
                                       self._born)
        self._last_error = ""  # the overwritten-output error a call raised (error_raised does not repeat it)
        # graphs added to a tree while observed (add_function), to tell those torch decided on earlier
        self._adding: list[int] = []  # id() of the managers inside add_function (a new graph's first call)
        self._added: set[tuple] = set()  # (id(manager), function id)
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
        return self._events + len(self.raw.events)

    @property
    def in_call(self) -> bool:
        """Inside the tree manager's run() (its skip messages are about the call's function)."""
        return self.depth > 0

    def node_id(self, node: Any) -> Optional[int]:
        if node is None:
            return None
        key = id(node)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self._next_id
            self._next_id += 1
            self._nodes[found] = weakref.ref(node, partial(self._forget, key, found))
            self._born[found] = self.generation
            self.snapshots.changed()
        return found

    def _forget(self, key: int, cg_id: int, _ref: Any) -> None:
        """torch freed a node: its id() may be reused by a new node, which gets a new cgviz id.
        Its entry in _nodes goes at the next live_nodes() (this may run inside its loop, from
        the garbage collector)."""
        self._ids.pop(key, None)
        self._replay_steps.pop(key, None)
        self._freed.append(cg_id)

    def _parent_of(self, node_id: int, node: Any) -> Optional[int]:
        """A node's parent's id, read from torch once (a replay loop asks at every step it makes)."""
        if node_id not in self._parents:
            self._parents[node_id] = self.node_id(layout.node_parent(node))
        return self._parents[node_id]

    def live_nodes(self) -> dict[int, Any]:
        """The nodes torch still keeps, by cgviz id (each snapshot, and each walk of the tree at
        "full", goes over these: the nodes freed are let go first, so a long run does not walk its
        history)."""
        freed, nodes = self._freed, self._nodes
        while freed:
            nodes.pop(freed.pop(), None)
        return {cg_id: node for cg_id, node in ((i, r()) for i, r in nodes.items()) if node is not None}

    # -- steps ---------------------------------------------------------------------------------
    def step(self, kind: str, reason: str, manager: Any = None, *, function: Optional[str] = None,
             node: Any = None, invalidated: Optional[list] = None, start: Optional[float] = None,
             state: Any = UNREAD) -> None:
        """A decision off the replay loop's hot path: the events noted before it come first."""
        if self.raw.events:
            self.catch_up()
        self._events += 1
        self.saw(manager)
        self.snapshots.changed()  # off the replay loop, the trees may have changed: walked again
        if self._notes and kind in ("record", "eager", "warmup"):
            reason = reason + "; " + "; ".join(self._notes)
            self._notes.clear()
        reason = portable_paths(reason)
        node_id = self.node_id(node)
        parent_id = None if node is None else self._parent_of(node_id, node)
        invalidated = invalidated or []
        key = decision_key(kind, function, node_id, parent_id, invalidated, reason)
        self._add(key, manager, partial(make_step, kind, reason, self.generation, function, node_id, parent_id,
                                        invalidated), start, state)

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

    def _add(self, key: tuple, manager: Any, make: Any, start: Optional[float], state: Any = UNREAD) -> None:
        """Into the step log, with its tree's device; `start` None: not timed (duration 0);
        `state` (at "full"): what a snapshot would show, where the caller read it already."""
        duration = 0.0 if start is None else time.perf_counter() - start
        if start is not None:  # its start on the wall clock torch's profiler uses (Step.start)
            make = partial(make, start=time.time() - duration)
        device = None if manager is None else self._devices.get(id(manager))
        if self.full and manager is not None:  # a snapshot, taken when what it shows changed
            if state is UNREAD:
                state = self.snapshots.state(manager, self._invalidated)
            self.log.add(key, make, duration, device, state=state, snap=partial(self.snapshot, manager))
            self._expect = self.log.expected()
        else:
            self.log.add(key, make, duration, device)

    # -- decisions off the loop --------------------------------------------------------------------
    def warmed_up(self, manager: Any, function_id: Any, node: Any, start: Optional[float]) -> None:
        label = self.label(manager, function_id)
        key = (id(manager), function_id)
        if layout.already_warm(node):
            reason = f"{label} runs eagerly again: the path is warming up"
        elif key in self._rewarm:
            reason = f"{label} {naming.WARMED_UP_AGAIN}"
        else:
            reason = f"first call of {label}: warm up eagerly, allocations in the tree's pool"
        self._rewarm.discard(key)
        if key in self._asked:  # it asked during this warmup: the next one is the warmup it asked for
            self._asked.discard(key)
            self._rewarm.add(key)
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
        for node in layout.path_to(current):
            cg_id = self.node_id(node)
            for i, live in enumerate(layout.outputs_live(node)):
                if live and (cg_id, i) not in cloned:
                    self._pending_invalidated.append([cg_id, i])
                    self._invalidated.add((cg_id, i))

    def outputs_cloning(self, found: list[tuple[Any, int, int]]) -> None:
        """torch 2.14+ (cudagraph_trees_generation_cloning): live user-visible outputs are copied
        out of the pool at this generation boundary; the generation step says which."""
        self.catch_up()
        self._pending_cloned += [(self.node_id(node), index, nbytes) for node, index, nbytes in found]

    def pending_backward_warned(self) -> None:
        self.catch_up()
        self._notes.append("torch warns: unable to hit the fast path because outputs from a previous "
                           "step still require backward (a pending backward)")

    def warmup_incomplete(self, manager: Any, function_id: Any) -> None:
        """torch 2.14+: the function warming up asked for another warmup (torch forgets that it
        warmed up: its next warmup is that one, not a first call)."""
        self.catch_up()
        self._notes.append(naming.WARMUP_INCOMPLETE)
        self._asked.add((id(manager), function_id))

    def managed_inputs_limited(self, inputs: list[int], action: str, limit: Any) -> None:
        """torch 2.15: inputs that are outputs of the path kept moving on this edge."""
        self.catch_up()
        self._notes.append(naming.demoted_note(inputs, action, limit))

    def error_raised(self, exc: BaseException) -> None:
        """An "overwritten by a subsequent run" error left the observed block."""
        if str(exc) == self._last_error:  # its call's error step says it already
            return
        managers = self.managers
        self.step("error", naming.overwritten_reason(exc), managers[-1] if managers else None)

    # -- a call of the manager's run() ---------------------------------------------------------------
    def watch_call(self, run: Callable, manager: Any, args: tuple, kwargs: dict) -> Any:
        """torch's outermost run() of a call (`run(manager, *args, **kwargs)`), watched: a call
        that raised, or that torch ran without a decision, becomes a step. Every call of the
        user's loop comes through here, in place of several small calls: below "full" it reads
        no clock."""
        function_id = args[1] if len(args) > 1 else kwargs.get("function_id")
        start = time.perf_counter() if self.full else None
        before = self._events + len(self.raw.events)  # self.decisions
        self.depth += 1
        try:
            out = run(manager, *args, **kwargs)
        except Exception as exc:
            self.call_ended(manager, function_id, before, start, exc)
            raise
        except BaseException:
            self.call_ended(manager, function_id, before - 1, start)  # nothing to say: only unwind
            raise
        if self._adding or self._events + len(self.raw.events) == before:
            self.call_ended(manager, function_id, before, start)  # inside add_function, or no decision
        else:
            self.depth -= 1  # call_ended's quick return, inline: the loop's every call ends here
        return out

    def call_ended(self, manager: Any, function_id: Any, decisions_before: int, start: Optional[float],
                   error: Optional[BaseException] = None) -> None:
        """After the outermost run() of a call: an error, or a call torch ran without a decision."""
        self.depth -= 1
        if self._adding and self._adding[-1] == id(manager) and function_id is not None:
            self._added.add((id(manager), function_id))  # its first call, inside add_function (it may raise)
        if error is None and self._events + len(self.raw.events) != decisions_before:
            return
        self.saw(manager)
        label = self.label(manager, function_id)
        self.compile.call_skips(manager, function_id)  # torch's skip messages of this call
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

    # -- names, snapshots, and what torch.compile says apart from the tree's run (compile_events) ---
    def label(self, manager: Any, function_id: Any) -> str:
        """A function's name in the trace (see naming.compiled_graph_name), made once."""
        return self.compile.label(manager, function_id)

    def frame_name(self, compile_id: str, stacks: list[str]) -> str:
        """The function torch.compile compiled a graph from (see CompileEvents.frame_name)."""
        return self.compile.frame_name(compile_id, stacks)

    def snapshot(self, manager: Any) -> Snapshot:
        """Walk the manager: every recorded graph, warmup nodes seen, outputs, the pool."""
        self.catch_up()
        return self.snapshots.snapshot(manager, self.generation, self._invalidated)

    def eager_reason(self, manager: Any, function_id: Any, label: str) -> str:
        """Why torch's manager ran a call eagerly (see CompileEvents.eager_reason): whether torch
        said why before observing began depends on whether the function's first call was seen."""
        key = (id(manager), function_id)
        new = key in self._added or (self._adding and self._adding[-1] == id(manager))
        return self.compile.eager_reason(manager, function_id, label, "add" in self.hooked and not new)

    def skip_logged(self, message: str) -> None:
        """torch logged "skipping cudagraphs due to ..." (see CompileEvents.skip_logged)."""
        self.compile.skip_logged(message, self.in_call, "post_compile" in self.hooked)

    def partitioned(self, compile_id: str, frame: str, graphed: int, cuts: list[tuple[str, str, str]]) -> None:
        """inductor kept ops out of CUDA graphs (see CompileEvents.partitioned)."""
        self.compile.partitioned(compile_id, frame, graphed, cuts)

    def graph_break(self, function: str, reason: str, site: Optional[tuple]) -> None:
        """dynamo broke a function's graph (see CompileEvents.graph_break)."""
        self.compile.graph_break(function, reason, site)

    def compiled(self, graph: Any, compile_id: str, turned_off: bool,
                 silent: Optional[str] = None, frame: str = "") -> Optional[tuple[str, str]]:
        """A graph's compilation ended (see CompileEvents.compiled)."""
        return self.compile.compiled(graph, compile_id, turned_off, silent, frame)

    def dynamic_shape_limit(self, compile_id: str, mode: str, limit: str) -> None:
        """torch 2.15: a compiled graph stopped recording new shapes (see CompileEvents.dynamic_shape_limit)."""
        self.compile.dynamic_shape_limit(compile_id, mode, limit)

    def eager_graph_called(self, label: str, reason: str, start: Optional[float]) -> None:
        """A call of a compiled graph whose CUDA graphs torch turned off (it never reaches the tree)."""
        self.step("eager", reason, function=label, start=start)

    def finish(self) -> None:
        """When observing stops: skip messages joined to nothing become steps of their own, the
        graphs torch compiled before observing began are named in the trace's meta, and a
        repetition half done is kept."""
        self.catch_up()
        self.compile.finish()
        if "add" in self.hooked:
            before = self.compile.compiled_before(self._added)
            if before:
                self.trace.meta["compiled_before_observing"] = before
        self.raw.drop_manager()
        self.log.flush()
