"""The graph observer's state: every CUDA graph captured or replayed in the process (plain
`torch.cuda.graph`, `make_graphed_callables`, a serving engine's graph per batch size), told
through public event methods and made into a Trace's steps and graphs.

The hooks (`_graph_hooks.py`) call one event method each. Graphs are held only weakly (a
finalizer notes a graph's destruction and holds nothing of it), so observing never keeps a
graph or its pool alive. Replays are noted as plain graph ids at trace level "events" and made
into steps in batches, so a replay pays an append.

Sharing a trace with torch.compile's observer (`observe_torch(graphs=True)`), graphs that are
nodes of its trees are linked to their node and make no steps of their own (the trees' record
and execute steps already show them); the replay ids go into that observer's queue, so the
steps of both keep their order.
"""

from __future__ import annotations

import statistics
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import torch

from cgviz.observe import _torch_layout as layout
from cgviz.observe import graph_batch, naming
from cgviz.observe.graph_data import graph_kernels
from cgviz.trace.fold import StepLog, decision_key
from cgviz.trace.model import GraphView, Step, Trace
from cgviz.trace.ranks import device_described
from cgviz.trace.units import format_bytes, plural

if TYPE_CHECKING:
    from cgviz.observe.observer import TorchObserver

RAW_BATCH = 4096
# What torch's caching allocator does with a pool no graph uses any longer (releasePool): it
# becomes freeable, and only release_cached_blocks (empty_cache(), or an allocation's last try
# before running out of memory) gives its unused segments back; no other allocation takes them.
RELEASED_POOL = ("no other allocation takes its memory, which stays reserved from the device until "
                 "torch.cuda.empty_cache() (or an allocation that finds no free memory) frees the segments "
                 "no live tensor holds")
_GRAPHS_FILE = "torch/cuda/graphs.py"


class _Capture(NamedTuple):
    """What a capture began with, until it ends."""

    start: float
    site: str
    origin: str
    device: int
    stream: int
    reserved: int
    batch: Optional[graph_batch.Batch]
    tree: Optional[str]  # "node" or "pool" for a graph of torch.compile's trees
    owner: Any  # a weak reference to the tree's node (or manager) capturing it: a failed capture keeps nothing


def block_error(frame: Any) -> Optional[BaseException]:
    """The exception that ends a `with torch.cuda.graph(...)` block, read from the `__exit__`
    just up the stack that ends its capture; None where the block ended normally, or the
    capture was ended another way."""
    for _ in range(4):  # capture_end's caller, or (hook route) torch's hook runner's
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "__exit__" and code.co_filename.replace("\\", "/").endswith(_GRAPHS_FILE):
            args = frame.f_locals.get("args") or ()
            error = args[1] if len(args) > 1 else None
            return error if isinstance(error, BaseException) else None
        frame = frame.f_back
    return None


def capture_origin(frame: Any) -> str:
    """Which of torch's APIs captured: 'make_graphed_callables', 'torch.cuda.graph' or 'CUDAGraph'
    (capture_begin called directly)."""
    origin = "CUDAGraph"
    while frame is not None:
        code = frame.f_code
        if code.co_filename.replace("\\", "/").endswith(_GRAPHS_FILE):
            if "make_graphed_callables" in code.co_name:
                return "make_graphed_callables"
            if code.co_name == "__enter__":
                origin = "torch.cuda.graph"
        frame = frame.f_back
    return origin


class GraphObserver:
    """Turns CUDA graph captures, replays and destructions into steps and `trace.graphs`."""

    def __init__(self, trace: str = "full", kernels: Optional[bool] = None, timed: bool = False,
                 tree: Optional["TorchObserver"] = None) -> None:
        if trace not in ("events", "full"):
            raise ValueError(f"trace must be 'events' or 'full', not {trace!r}")
        if kernels is not None and not isinstance(kernels, bool):
            raise TypeError(f"kernels must be True, False or None (on at trace 'full'), not {kernels!r}")
        if not isinstance(timed, bool):
            raise TypeError(f"timed must be True or False, not {timed!r}")
        self.level = trace
        self.read_kernels = trace == "full" if kernels is None else kernels
        self.timed = timed
        self.tree = tree
        # torch 2.14+ hands its capture-end hook the graph with its cudaGraph_t still live; before,
        # capture_end destroys it at once (unless the graph was made with keep_graph=True)
        self.kernels_readable = False  # set by the session from the hooks' route
        if tree is None:
            self.trace = Trace(meta={"backend": "torch.cuda.graphs", "source": "torch.cuda.CUDAGraph",
                                     "torch": str(torch.__version__), "trace_level": trace})
            self.log = StepLog(self.trace.steps)
        else:
            self.trace, self.log = tree.trace, tree.log
        self.trace.meta["graphs_observed"] = True
        self.active = True
        self._views: dict[int, GraphView] = {}
        self._ids: dict[int, int] = {}  # id(CUDAGraph) -> graph id, while the graph lives
        self._finalizers: list[weakref.finalize] = []
        self._pools: dict[tuple, int] = {}
        self._streams: dict[tuple, int] = {}
        self._capturing: dict[int, _Capture] = {}  # id(CUDAGraph) -> its capture under way
        self._in_tree: set[int] = set()  # graph ids whose replays are the trees' execute steps
        self._in_pool: dict[int, int] = {}  # pool -> its graphs not yet destroyed
        self._pool_released: set[int] = set()  # destroyed graph ids whose pool no other graph used
        self._died_at: dict[int, float] = {}  # destroyed graph id -> when (wall clock), until its step
        self._reset: set[int] = set()  # graph ids destroyed by CUDAGraph.reset()
        self._replay_steps: dict[int, tuple] = {}  # graph id -> (key, name, reason) of its replays
        self._raw: list[int] = []  # replayed graph ids not yet made into steps (trace level "events")
        self._rows: list[tuple[int, int, int]] = []  # (graph id, rows used, rows replayed) said by the caller
        self._timing: list[tuple[int, Any, Any, int]] = []  # (graph id, start, end event, device) not yet read
        self._times: dict[int, list[float]] = {}  # graph id -> replay times in µs
        self._free_events: dict[int, list[Any]] = {}  # device -> timing events read, to reuse
        self._device_index: dict[int, int] = {}  # graph id -> the device it was captured on
        self._next_id = 1

    # -- captures ------------------------------------------------------------------------------
    def capture_began(self, graph: Any, frame: Any) -> None:
        """A capture began on the current stream (`frame`: the stack that began it)."""
        stream = torch.cuda.current_stream()
        device = stream.device.index or 0
        tree = layout.tree_capture(frame)
        origin = "torch.compile" if tree else capture_origin(frame)
        site = naming.site_of(frame) if tree is None else (
            "torch.compile's tree manager, keeping its pool alive" if tree[0] == "pool" else "torch.compile's trees")
        streams = self._streams.setdefault((device, stream.stream_id), len(self._streams) + 1)
        self._capturing[id(graph)] = _Capture(
            time.perf_counter(), site or "an unknown place", origin, device, streams,
            torch.cuda.memory_reserved(device), graph_batch.current(), tree and tree[0],
            tree and weakref.ref(tree[1]))

    def capture_ended(self, graph: Any, frame: Any = None) -> None:
        """Its capture ended: the graph gets its id, its view and its capture step (`frame`:
        the stack that ended it)."""
        began = self._capturing.pop(id(graph), None)
        if began is None:
            return
        capture_ms = (time.perf_counter() - began.start) * 1e3
        earlier = self._ids.get(id(graph))
        if earlier is not None:  # captured again after a reset not heard of (the C++ method called itself)
            self.destroyed(earlier)
        handle = tuple(graph.pool())
        pool = self._pools.setdefault(handle, len(self._pools) + 1)
        gid, self._next_id = self._next_id, self._next_id + 1
        batch = began.batch
        view = GraphView(
            id=gid, site=began.site, origin=began.origin, device=f"cuda:{began.device}", stream=began.stream,
            pool=pool, memory=max(0, torch.cuda.memory_reserved(began.device) - began.reserved),
            capture_ms=round(capture_ms, 3), batch=batch.size if batch else None, label=batch.label if batch else "")
        if self.level == "full":
            view.pool_bytes = _pool_bytes(handle, began.device)
        if self.read_kernels and began.tree is None and self.kernels_readable:
            view.kernels = graph_kernels(graph)
        self._hold(graph, view)
        if "device" not in self.trace.meta:
            self.trace.meta["device"] = device_described(began.device)
        if began.tree is not None and self.tree is not None:
            self._in_tree.add(gid)
            node = began.owner() if began.tree == "node" else None
            if node is not None:
                view.node = self.tree.node_id(node)
            return
        reason = self._capture_reason(view)
        error = block_error(frame)
        if error is not None:
            reason += (f"; its block raised {type(error).__name__}, so the graph holds only the work captured "
                       "before the error")
        self._step("capture", view, reason, capture_ms / 1e3)

    def _capture_reason(self, view: GraphView) -> str:
        sharing = sorted(g.id for g in self._views.values()
                         if g.pool == view.pool and g.id != view.id and not g.destroyed)
        pool = f"pool {view.pool}" + (f", shared with {_graph_list(sharing)}" if sharing else " (its own)")
        batch = f" for batch size {view.batch}" if view.batch else ""
        return (f"{view.origin} captured {view.name}{batch} at {view.site}, on capture stream {view.stream} of "
                f"{view.device}, into {pool}; the device reserved {format_bytes(view.memory)} more for it, and "
                f"its capture took {view.capture_ms:.1f} ms")

    def _hold(self, graph: Any, view: GraphView) -> None:
        """A graph's view goes into the trace; the graph itself is held only weakly."""
        self._views[view.id] = view
        self._device_index[view.id] = int(view.device.partition(":")[2] or 0)
        self.trace.graphs.append(view)
        self._ids[id(graph)] = view.id
        self._in_pool[view.pool] = self._in_pool.get(view.pool, 0) + 1
        self._finalizers.append(weakref.finalize(graph, _graph_freed, weakref.ref(self), view.id, id(graph)))

    def adopted(self, graph: Any) -> Optional[int]:
        """A graph captured before observing began, replayed now: it gets an id and a view that
        says so (what its capture was is not known); a node of torch.compile's trees is one of
        theirs, as if its capture had been seen. None for a graph with no capture: its replay
        raises torch's own error, unobserved."""
        try:
            handle = tuple(graph.pool())
        except Exception:
            return None
        node = layout.tree_replay(sys._getframe(1))
        gid, self._next_id = self._next_id, self._next_id + 1
        view = GraphView(id=gid, site="captured before observing began", origin="CUDAGraph" if node is None else
                         "torch.compile", device=f"cuda:{torch.cuda.current_device()}", stream=0,
                         pool=self._pools.setdefault(handle, len(self._pools) + 1))
        self._hold(graph, view)
        if node is not None and self.tree is not None:  # its replays are the trees' execute steps
            self._in_tree.add(gid)
            view.node = self.tree.node_id(node)
        return gid

    # -- replays: the hot path -------------------------------------------------------------------
    def replay_began(self, graph: Any) -> Optional[tuple]:
        """A replay is launched; returns what `replay_ended` needs when replays are timed."""
        gid = self._ids.get(id(graph))
        if gid is None:
            gid = self.adopted(graph)
            if gid is None:
                return None
        if gid in self._in_tree:  # its execute steps are the trees'; the replay is counted
            self._views[gid].replays += 1
            return None
        batch = graph_batch.current()
        if batch is not None and batch.used is not None:
            self._rows.append((gid, batch.used, batch.size))
        if self.level == "full":
            self.catch_up()
            self.noted(gid)
        else:
            self._note(gid)
        if not self.timed:
            return None
        device = self._device_index[gid]  # torch launches a replay on its capture device's current stream
        start = self._event(device)
        start.record(torch.cuda.current_stream(device))
        return gid, start, device

    def replay_ended(self, began: Optional[tuple]) -> None:
        if began is not None:
            gid, start, device = began
            end = self._event(device)
            end.record(torch.cuda.current_stream(device))
            self._timing.append((gid, start, end, device))
            if len(self._timing) >= RAW_BATCH:
                self._read_times(wait=False)

    def _event(self, device: int) -> Any:
        """A timing event of `device` (an event records on the device it first recorded on),
        reused once read: making one costs more than the replay it times."""
        free = self._free_events.get(device)
        return free.pop() if free else torch.cuda.Event(enable_timing=True)

    def _note(self, event: int) -> None:
        """A replay (a graph id) or a destruction (minus its id), made into a step later: into
        the trees' observer's queue where the trace is shared, so that the order holds."""
        if self.tree is not None:
            self.tree.note_graph_event(event)
            return
        self._raw.append(event)
        if len(self._raw) >= RAW_BATCH:
            self.catch_up()

    def catch_up(self) -> None:
        """Make the noted replays and destructions into steps (in order, before anything else)."""
        if self.tree is not None:
            self.tree.catch_up()
            return
        while self._raw:
            raw, self._raw = self._raw, []
            for event in raw:
                self.noted(event)

    def noted(self, event: int) -> None:
        """A noted event made into a step: a replay of graph `event`, or the destruction of
        graph `-event`."""
        if event < 0:
            self._destroy_step(-event)
            return
        gid = event
        view = self._views[gid]
        view.replays += 1
        parts = self._replay_steps.get(gid)
        if parts is None:
            reason = f"{view.name} replayed: the work captured at {view.site}, launched as one graph"
            parts = self._replay_steps[gid] = (decision_key("replay", view.name, None, None, (), reason), reason)
        key, reason = parts
        generation = self._generation()  # now: the step may be made after the generation moved on
        self.log.add(key, lambda: self._make("replay", view, reason, generation), 0.0)

    def _read_times(self, wait: bool) -> None:
        """The replay times of finished replays (all of them with `wait`: at the end)."""
        left = []
        for gid, start, end, device in self._timing:
            if wait:
                end.synchronize()
            elif not end.query():
                left.append((gid, start, end, device))
                continue
            self._times.setdefault(gid, []).append(start.elapsed_time(end) * 1e3)
            self._free_events.setdefault(device, []).extend((start, end))
        self._timing = left

    # -- destruction -----------------------------------------------------------------------------
    def destroyed(self, gid: int) -> None:
        """Graph `gid` was freed (its CUDAGraph garbage collected, or reset).
        A finalizer may run inside any allocation, so it only notes the event."""
        view = self._views.get(gid)
        if view is None or view.destroyed or not self.active:
            return
        view.destroyed = True
        self._in_pool[view.pool] -= 1
        if gid not in self._in_tree:
            if not self._in_pool[view.pool]:  # decided now: the step is made later, maybe after others died
                self._pool_released.add(gid)
            self._died_at[gid] = time.time()
            self._note(-gid)

    def graph_reset(self, graph: Any) -> None:
        """torch's CUDAGraph.reset() freed the graph and its executable and let go of its pool, as
        its destruction does: the graph it held is destroyed now (the object may capture again,
        as a new graph)."""
        gid = self._ids.pop(id(graph), None)
        if gid is not None:
            self._reset.add(gid)
            self.destroyed(gid)

    def _destroy_step(self, gid: int) -> None:
        view = self._views[gid]
        pool = (f"torch releases pool {view.pool}: {RELEASED_POOL}" if gid in self._pool_released else
                f"pool {view.pool} stays: other graphs still use it")
        how = "was reset (CUDAGraph.reset())" if gid in self._reset else "was destroyed"
        self._step("destroy", view, f"{view.name} {how} after {plural(view.replays, 'replay')}; {pool}", 0.0,
                   catch_up=False, at=self._died_at.pop(gid, None))

    def forget(self, graph_key: int, gid: int) -> None:
        if self._ids.get(graph_key) == gid:
            del self._ids[graph_key]

    # -- steps -----------------------------------------------------------------------------------
    def _generation(self) -> int:
        return self.tree.generation if self.tree is not None else 1

    def _make(self, kind: str, view: GraphView, reason: str, generation: Optional[int] = None) -> Step:
        return Step(index=0, kind=kind, reason=reason,
                    generation=self._generation() if generation is None else generation, function=view.name,
                    graph=view.id)

    def _step(self, kind: str, view: GraphView, reason: str, duration: float, catch_up: bool = True,
              at: Optional[float] = None) -> None:
        """A capture or destroy step: the events noted before it come first. It ended `at`
        (wall clock), or now."""
        end = time.time() if at is None else at
        if catch_up:
            self.catch_up()
        start = end - duration
        step = self._make(kind, view, reason)
        step.start, step.duration = start, duration
        self.log.add(decision_key(kind, view.name, None, None, (), reason), step, duration)

    def finish(self) -> None:
        """When observing stops: the replays noted become steps, replay times and padding are
        added up, and no finalizer reports into this trace any longer."""
        self.catch_up()
        if self.tree is None:
            self.log.flush()
        self._read_times(wait=True)
        for gid, times in self._times.items():
            self._views[gid].replay_us = round(statistics.median(times), 3)
        for gid, used, size in self._rows:
            view = self._views[gid]
            view.used += used
            view.padded += size
        self._rows = []
        self.active = False
        for finalizer in self._finalizers:
            finalizer.detach()
        self._finalizers = []


def _graph_freed(observer_ref: "weakref.ref[GraphObserver]", gid: int, graph_key: int) -> None:
    """A graph's finalizer: it holds the observer weakly and nothing of the graph."""
    observer = observer_ref()
    if observer is not None:
        observer.forget(graph_key, gid)
        observer.destroyed(gid)


def _pool_bytes(handle: tuple, device: int) -> int:
    """The bytes of the segments a pool holds (the allocator's snapshot: read at a capture's end)."""
    total = 0
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") == device and tuple(segment.get("segment_pool_id") or ()) == handle:
            total += int(segment.get("total_size", 0))
    return total


def _graph_list(ids: list[int]) -> str:
    return ("graph " if len(ids) == 1 else "graphs ") + ", ".join(map(str, ids))
