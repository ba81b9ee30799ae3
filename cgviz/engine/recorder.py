"""Turns the tree's decisions into Trace steps and snapshots, at the level asked for.

Level None records nothing (the replay path pays one attribute test); "events" records
steps; "full" adds what the tree looks like after each step (a Snapshot, taken only when what it
shows changed). Repeated work is stored once (trace/fold.py),
so a replay loop of any length stays a few steps long; pool blocks are named after their
owners by trace/ownership.py.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Optional

from cgviz.trace.fold import StepLog, decision_key
from cgviz.trace.model import NodeView, OutputView, Segment, Snapshot, Step, Trace, safe_text
from cgviz.trace.ownership import owned_segments

# What torch checks before it replays a node (CUDAGraphNode.check_invariants): the static inputs
# and the inputs that are outputs of the path at their recorded addresses, and every output of the
# path that was dead at recording still dead (outputs live then may have died since).
REPLAY_RULE = ("its static inputs and the inputs that are outputs of the path are where they were at recording, "
               "and no output of the path that was dead at recording is live")

RAW_BATCH = 4096  # replay-loop decisions noted before they are logged
_NOW = object()  # a decision's state not given: read it when it is logged

if TYPE_CHECKING:
    from cgviz.engine.node import Node
    from cgviz.engine.tree import Tree


class Recorder:
    def __init__(self, tree: "Tree", level: Optional[str]) -> None:
        self.tree = tree
        self.level = level
        self._trace = Trace(meta={"trace_level": level})
        self.listeners: list = []  # callables(step), e.g. a live Explorer
        self.log = StepLog(self._trace.steps)
        self._snap = self.snapshot if level == "full" else None
        self._replays: dict[int, tuple] = {}  # node id -> (key, reason) of its replay step
        self._path_ends: dict[int, tuple] = {}  # last node id -> (key, reason) of its path's end
        # replay-loop decisions noted, not yet in the log: (key, duration, state, parts, generation, start)
        self._raw: list[tuple] = []
        # at "full": where the log's repeating block stands (StepLog.expected), kept up to date as
        # decisions are noted; None when no block repeats
        self._expect: Optional[list] = None
        self._outputs: tuple = ((), None)  # (every node's outputs as (node, index, leaf), the last node then)

    @property
    def trace(self) -> Trace:
        """The trace, exact: the replay-loop decisions noted are logged, and those of a
        repetition half done are kept as steps."""
        self.catch_up()
        self.log.flush()
        self._expect = self.log.expected()
        return self._trace

    def catch_up(self) -> None:
        """Log the replay-loop decisions noted raw, in order (before any other decision): whole
        repetitions of the block before them are counted in bulk."""
        raw, self._raw = self._raw, []
        # a note's start on the wall clock: its perf_counter() start on that clock now
        wall = time.time() - time.perf_counter()
        i, n = 0, len(raw)
        while i < n:
            i = self.log.count_repetitions(raw, i)
            if i < n:
                key, duration, state, parts, generation, start = raw[i]
                self._append(key, step_maker(parts, generation, duration, start + wall), duration, state)
                i += 1
        self._expect = self.log.expected()

    def subscribe(self, fn: Callable[[Step], None]) -> Callable[[], None]:
        """Call `fn(step)` after each recorded step (a fold passes the block's last step, once
        per repetition), e.g. a live Explorer; returns the function that stops it. The
        decisions noted before are logged first: a new listener hears only of new steps."""
        self.catch_up()
        self.listeners.append(fn)

        def unsubscribe() -> None:
            if fn in self.listeners:
                self.listeners.remove(fn)
        return unsubscribe

    @property
    def meta(self) -> dict:
        return self._trace.meta

    def step(
        self,
        kind: str,
        reason: str,
        *,
        start: float,
        function: Optional[str] = None,
        node: Optional[int] = None,
        parent: Optional[int] = None,
        invalidated: Optional[list] = None,
    ) -> None:
        if self.level is None:
            return
        reason = safe_text(reason)  # user text (exception messages, names) may not be valid UTF-8
        function = None if function is None else safe_text(function)
        invalidated = invalidated or []
        duration = time.perf_counter() - start
        make = step_maker((kind, reason, function, node, parent), self.tree.generation, duration,
                          time.time() - duration, invalidated)
        self._log(decision_key(kind, function, node, parent, invalidated, reason), make, duration)

    def execute(self, node: "Node", start: float) -> None:
        """A replay, in torch's rule for one (CUDAGraphNode.check_invariants)."""
        parts = self._replays.get(node.id)
        if parts is None:
            parent = None if node.parent is None else node.parent.id
            where = "a root" if parent is None else f"under node {parent}"
            label = safe_text(node.variant.label)
            reason = safe_text(f"{node.variant.label} replays node {node.id} ({where}): {REPLAY_RULE}")
            parts = self._replays[node.id] = (decision_key("execute", label, node.id, parent, (), reason),
                                              ("execute", reason, label, node.id, parent))
        self._add(parts[0], parts[1], start)

    def path_end(self, ended: "Node", start: float) -> None:
        """The path ending at `ended` is over: all its outputs are dead."""
        parts = self._path_ends.get(ended.id)
        if parts is None:
            ids = "→".join(str(n.id) for n in ended.path)
            reason = f"all outputs of path {ids} are dead; the next call starts from the roots"
            parts = self._path_ends[ended.id] = (decision_key("path_end", None, None, None, (), reason),
                                                 ("path_end", reason, None, None, None))
        self._add(parts[0], parts[1], start)

    def _add(self, key: tuple, parts: tuple, start: float) -> None:
        """A replay-loop decision (`parts`: kind, reason, function, node, parent). With nobody
        listening it is only noted, and logged in batches (`catch_up`), at "events", and at
        "full" where the log would only count it (the next decision of its repeating block, in
        the state that block's snapshot shows): a steady loop pays a tuple per decision, and
        its state at "full"."""
        duration = time.perf_counter() - start
        if self._snap is None:
            if not self.listeners:
                self._note((key, duration, None, parts, self.tree.generation, start))
                return
            state = None
        else:
            state = self._state()
            expect = self._expect
            if expect is not None and not self.listeners:  # StepLog.would_count, inline: on every replay
                keys, states, at = expect
                if keys[at] == key and state is not None and states[at] == state:
                    expect[2] = (at + 1) % len(keys)
                    self._note((key, duration, state, parts, self.tree.generation, start))
                    return
        self._log(key, step_maker(parts, self.tree.generation, duration, time.time() - duration), duration, state)

    def _note(self, note: tuple) -> None:
        """A decision kept as a tuple (key, duration, state, parts, generation, start) until the
        next catch-up."""
        self._raw.append(note)
        if len(self._raw) >= RAW_BATCH:
            self.catch_up()

    def _log(self, key: tuple, make: Callable[[], Step], duration: float, state: Any = _NOW) -> None:
        """A decision logged as it is made, after the decisions noted before it. `state`: what
        the tree showed when it was made (by default, now)."""
        if self._raw:
            self.catch_up()
        self._append(key, make, duration, state)

    def _append(self, key: tuple, make: Callable[[], Step], duration: float, state: Any = _NOW) -> None:
        """One decision into the log: its Step is made only if it is kept (a repetition of the
        block before it is only counted), its snapshot only if what it shows changed."""
        snap = self._snap
        if snap is None:
            state = None
        elif state is _NOW:
            state = self._state()
        shown = self.log.add(key, make, duration, state=state, snap=snap)
        if snap is not None:
            self._expect = self.log.expected()
        if shown is not None:
            for listener in self.listeners:
                listener(shown)

    def _state(self) -> Optional[tuple]:
        """What a snapshot shows, but replay counts and the generation, in a cheap form: two
        decisions with equal states have equal snapshots but for the replays and generations
        between them (see StepLog). The pool is taken to
        change only with it: replays allocate nothing, and what they free is an output's death.
        None (never equal): `values=True` keeps new values at every run."""
        tree = self.tree
        if tree.values:
            return None
        nodes = tree.nodes
        outputs, of = self._outputs
        last = nodes[-1] if nodes else None
        if of is not last:  # nodes came or went (ids never repeat: the last node tells)
            outputs = tuple([(n, i, leaf) for n in nodes for i, leaf in enumerate(n.leaves)])
            self._outputs = (outputs, last)
        live = tuple([0 if leaf.ref is None else 2 if i in n.invalid else leaf.ref.alive() for n, i, leaf in outputs])
        current = tree.current
        return None if current is None else current.id, tree.state, len(nodes), live

    # -- snapshots ----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        tree = self.tree
        nodes = [_node_view(n) for n in tree.nodes]
        path = [n.id for n in tree.current.path] if tree.current is not None else []
        return Snapshot(
            nodes=nodes,
            current_node=None if tree.current is None else tree.current.id,
            path=path,
            state=tree.state,
            generation=tree.generation,
            segments=self._segments(nodes, path),
        )

    def _segments(self, nodes: list[NodeView], path: list[int]) -> list[Segment]:
        on_path = set(path)
        buffers = {address: (n.id, i) for n in self.tree.nodes if n.id in on_path for i, address in n.input_buffers.items()}
        return owned_segments(self.tree.backend.segments(), nodes, buffers)


def step_maker(parts: tuple, generation: int, duration: float, wall: float,
               invalidated: Optional[list] = None) -> Callable[[], Step]:
    """How a decision's Step is made if the log keeps it (`parts`: kind, reason, function, node,
    parent). `wall` is its start on the wall clock torch's profiler uses: decisions are timed on
    perf_counter() (durations need a steady clock), and the wall clock now less the time since."""
    kind, reason, function, node, parent = parts
    return partial(Step, 0, kind, reason, generation, function, node, parent, duration,
                   invalidated=invalidated or [], start=wall)


def _node_view(n: "Node") -> NodeView:
    outputs = []
    for i, leaf in enumerate(n.leaves):
        if leaf.ref is None:
            state = "dead"
        elif i in n.invalid:
            state = "invalid"
        else:
            state = "live" if leaf.ref.alive() else "dead"
        values = n.values[i] if n.values is not None and i < len(n.values) else None
        outputs.append(OutputView(i, list(leaf.shape), leaf.dtype, leaf.nbytes, leaf.address, state, leaf.alias_of,
                                  values))
    return NodeView(
        id=n.id,
        function=n.variant.label,
        kind=n.kind,
        parent=None if n.parent is None else n.parent.id,
        children=[c.id for c in n.child_list()],
        generation=n.generation,
        replays=n.replays,
        outputs=outputs,
        signature=n.variant.signature,
    )
