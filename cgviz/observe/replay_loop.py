"""The observer's replay loop: torch's replays, generations and path ends, the decisions a
steady loop makes on every call, noted raw and made into steps in batches.

At trace level "events" a decision is noted as its step's parts alone. At "full" a decision
that the step log would only count (the next of its repeating block, in the state that block's
snapshot shows) is noted with its state and duration; any other is made into a step at once,
after the notes before it. `ReplayLoop` is the part of `TorchObserver` that does this; it works
on the observer's state (its step log, node ids, replay counts and generation).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, Optional

from cgviz.observe import _torch_layout as layout
from cgviz.observe import naming, raw_events
from cgviz.observe.raw_events import NEW_GENERATION, PATH_END
from cgviz.trace.fold import decision_key, device_key
from cgviz.trace.model import Step
from cgviz.trace.paths import portable_paths

_GENERATION = decision_key("generation", None, None, None, (), None)  # a generation that invalidated nothing
UNREAD = object()  # a decision's state not read yet (read it when it is logged)
NOTED = object()  # the decision was noted raw (see ReplayLoop._noted)


def _no_snapshot() -> None:
    """The snapshot of a manager torch freed: none (its block's kept snapshot is brought forward)."""
    return None


def make_step(kind: str, reason: str, generation: int, function: Optional[str], node: Optional[int],
              parent: Optional[int], invalidated: list, start: Optional[float] = None) -> Step:
    return Step(index=0, kind=kind, reason=reason, generation=generation, function=function,
                node=node, parent=parent, invalidated=invalidated, start=start)


def _path_end_reason(before: Optional[int]) -> str:
    return f"all outputs of the path ending at node {before} are dead; the next call starts from the roots"


def _generation_step(ended: int, generation: int, invalidated: list, cloned: list) -> Step:
    """A generation step, worded only when kept (most fold into a repeat count)."""
    return make_step("generation", naming.generation_reason(ended, invalidated, cloned), generation,
                     None, None, None, invalidated)


def event_step(event: Any, generation: int) -> Callable[..., Step]:
    """The maker of a replay-loop event's step (a replay's parts, NEW_GENERATION with nothing
    invalidated or cloned, or (PATH_END, node id)), made in `generation`."""
    if event is NEW_GENERATION:
        return partial(_generation_step, generation - 1, generation, [], [])
    if len(event) == 2:
        return partial(make_step, "path_end", portable_paths(_path_end_reason(event[1])), generation,
                       None, None, None, [])
    _, cg_id, label, parent, reason = event
    return partial(make_step, "execute", reason, generation, label, cg_id, parent, [])


class ReplayLoop:
    """The replay-loop events of a `TorchObserver` (see the module): a part of its class, working
    on the observer's own attributes."""

    def raw_manager(self, manager: Any) -> bool:
        """This manager's replay-loop events are the ones noted raw from now on (one manager at
        a time: another's noted before are made into steps first). True, for the loop's hooks
        to write `held or self.raw_manager(manager)`."""
        if self.raw.manager_id != id(manager):
            self.catch_up()
            self.saw(manager)
            self.raw.hold(manager)
        return True

    def replayed(self, manager: Any, node: Any, start: Optional[float] = None) -> None:
        """torch replayed a node: noted raw at "events" (its step's parts, made at its first
        replay); at "full" noted raw with its state where the step log would only count it,
        else made into a step at once."""
        raw = self.raw
        if self.full:
            self.snapshots.returning(node)  # this runs in execute_node's wrapper, which holds the outputs
            part = self._replay_parts(manager, node)
            state = self._noted(manager, part[0], part, start)
            if state is not NOTED:
                if raw.events:  # graphs outside the trees destroyed before it
                    self.catch_up()
                self._add_replay(manager, part, start, state)
        elif raw.manager_id == id(manager) or self.raw_manager(manager):
            part = self._replay_steps.get(id(node)) or self._replay_parts(manager, node)
            events = raw.events  # raw.note(part), inline: this runs on every replay of the loop
            events.append(part)
            if len(events) >= raw_events.RAW_BATCH:
                raw.flush()

    def generation_began(self, manager: Any) -> None:
        pending = self._pending_invalidated or self._pending_cloned  # said by its step: made now
        raw = self.raw
        if pending:
            self.catch_up()
            self._new_generation(manager)
        elif self.full:
            state = self._noted(manager, _GENERATION, NEW_GENERATION, None)
            if state is not NOTED:
                self.catch_up()
                self._new_generation(manager, state)
        elif raw.manager_id == id(manager) or self.raw_manager(manager):
            events = raw.events  # raw.note(...), inline: this runs on every call of the loop
            events.append(NEW_GENERATION)
            if len(events) >= raw_events.RAW_BATCH:
                raw.flush()

    def path_ended(self, manager: Any, before: Any) -> None:
        before_id = self.node_id(before)
        if self.full:
            state = self._noted(manager, self._path_end_key(before_id), (PATH_END, before_id), None)
            if state is not NOTED:
                self.catch_up()
                self._path_end(manager, before_id, state)
        elif self.raw.manager_id == id(manager) or self.raw_manager(manager):
            self.raw.note((PATH_END, before_id))

    def _noted(self, manager: Any, key: tuple, event: Any, start: Optional[float]) -> Any:
        """At "full": a replay-loop decision that the step log would only count (the next of
        its repeating block, in the state that block's snapshot shows) is noted raw, with its
        state and duration, and made into steps in bulk (`_make_noted`). Returns NOTED, or
        the state read (UNREAD where notes or invalidated outputs wait for the decision's
        step, which changes them before its state is read)."""
        if self._invalidated or self._notes:
            return UNREAD
        raw = self.raw
        if raw.manager_id != id(manager):
            self.raw_manager(manager)
        duration = 0.0 if start is None else time.perf_counter() - start
        state = self.snapshots.state(manager, self._invalidated)
        device = self._devices.get(id(manager))
        logged = device_key(key, device)
        if not self.log.would_count(self._expect, logged, state):
            return state
        self._count(event)  # told now; the decision itself is counted when its note is made into a step
        events = raw.events
        events.append((logged, duration, state, event, start, key, self.generation, device))
        if len(events) >= raw_events.RAW_BATCH:
            raw.flush()
        return NOTED

    def note_graph_event(self, event: int) -> None:
        """A replay or destruction of a CUDA graph outside the trees (`graph_sink` makes it a
        step), noted among the trees' own events so that the steps keep their order. Its step
        will come between the trees' steps: no decision is noted until the log says again where
        its block stands (`_noted`)."""
        self._expect = None
        self.raw.note(event)

    def catch_up(self) -> None:
        """Make the noted replay-loop events into steps (in order, before anything else). The
        caller may add steps of its own to the log (a graph outside the trees sharing it): no
        decision is noted until the log says again where its block stands."""
        self.raw.flush()
        self._expect = None

    def _make_noted(self, manager: Any, events: list) -> None:
        """At "full": the decisions noted raw (`_noted`) and graph events, made into steps in
        order: whole repetitions of the block before them are counted in bulk, the rest logged
        with the state each was read in (the log only counts them: no snapshot is taken now; one
        of a manager torch has freed since could not be)."""
        wall = time.time() - time.perf_counter()  # a note's start on the wall clock: its perf_counter() start, shifted
        snap = _no_snapshot if manager is None else partial(self.snapshot, manager)
        i, n = 0, len(events)
        while i < n:
            if type(events[i]) is int:
                self.graph_sink.noted(events[i])
                i += 1
                continue
            end = next((j for j in range(i, n) if type(events[j]) is int), n)
            notes, j = events[i:end], 0
            self._events += len(notes)
            while j < len(notes):
                j = self.log.count_repetitions(notes, j)
                if j < len(notes):
                    _, duration, state, event, start, key, generation, device = notes[j]
                    make = event_step(event, generation)
                    if start is not None:
                        make = partial(make, start=start + wall)
                    self.log.add(key, make, duration, device, state=state, snap=snap)
                    j += 1
            i = end
        self._expect = self.log.expected()

    def _make_raw(self, manager: Any, events: list) -> None:
        """The noted events of `manager` (None where torch freed it), made into steps in order:
        whole repetitions of the block before them are counted in bulk, as one at a time would.
        A loop notes the same few objects over and over: each is keyed once."""
        if self.full:
            self._make_noted(manager, events)
            return
        device = None if manager is None else self._devices.get(id(manager))
        ids = list(map(id, events))
        key_of = {i: self._raw_key(event, device) for i, event in dict(zip(ids, events)).items()}
        keys = list(map(key_of.__getitem__, ids))
        i, n = 0, len(events)
        while i < n:
            counted = self.log.count_key_repetitions(keys, i)
            if counted > i:  # whole repetitions of the log's last block
                span = self.log.steps[-1].span
                self._tally(events[i:i + span], (counted - i) // span)
            i = counted
            if i == n:
                break
            event = events[i]
            if type(event) is int:
                self.graph_sink.noted(event)
            elif event is NEW_GENERATION:
                self._new_generation(manager)
            elif len(event) == 2:
                self._path_end(manager, event[1])
            else:
                self._add_replay(manager, event, None)
            i += 1

    def _raw_key(self, event: Any, device: Optional[str]) -> Optional[tuple]:
        """The step log's key of a noted event, as its step would have it; None for a graph
        outside the trees, never counted. A noted generation invalidates and clones nothing:
        every event method that could give it outputs to say catches up first."""
        if type(event) is int:
            return None
        if event is NEW_GENERATION:
            key = _GENERATION
        elif len(event) == 2:
            key = self._path_end_key(event[1])
        else:
            key = event[0]
        return device_key(key, device)

    def _tally(self, events: list, times: int = 1) -> None:
        """What these replay-loop events, `times` over, change in the observer besides its step
        log: replay counts, the generation, the decisions seen, and what a replay makes current
        again."""
        replayed = {event[1] for event in events if self._count(event, times)}
        self._events += len(events) * times
        if replayed:
            self._notes.clear()  # children that failed their checks before one of these matched
            if self._invalidated:
                self._invalidated = {k for k in self._invalidated if k[0] not in replayed}

    def _count(self, event: Any, times: int = 1) -> bool:
        """What `times` of a replay-loop event change in the observer's counts: the generation,
        or a node's replays (then True)."""
        if event is NEW_GENERATION:
            self.generation += times
            return False
        if len(event) > 2:
            self.replays[event[1]] += times
            return True
        return False

    def manager_shutting_down(self, manager: Any) -> None:
        """torch resets its trees (torch._dynamo.reset()): the events noted are made into steps
        now, and nothing of that manager is held any longer."""
        self.catch_up()
        self.snapshots.changed()
        if self.raw.manager_id == id(manager):
            self.raw.drop_manager()

    def _replay_parts(self, manager: Any, node: Any) -> tuple:
        """What a node's replay steps say, made at its first replay (forgotten with the node)."""
        replay = self._replay_steps.get(id(node))
        if replay is None:
            replay = self._replay_steps[id(node)] = self._replay_step(manager, node)
        return replay

    def _add_replay(self, manager: Any, replay: tuple, start: Optional[float], state: Any = UNREAD) -> None:
        self._tally([replay])
        self._add(replay[0], manager, event_step(replay, self.generation), start, state)

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

    def _new_generation(self, manager: Any, state: Any = UNREAD) -> None:
        invalidated, self._pending_invalidated = self._pending_invalidated, []
        cloned, self._pending_cloned = self._pending_cloned, []
        old = self.generation
        self.generation += 1
        self._events += 1
        key = decision_key("generation", None, None, None, invalidated, None) if invalidated else _GENERATION
        self._add(key, manager, partial(_generation_step, old, self.generation, invalidated, cloned), None, state)

    def _path_end(self, manager: Any, before: Optional[int], state: Any = UNREAD) -> None:
        self.step("path_end", _path_end_reason(before), manager, state=state)

    def _path_end_key(self, before: Optional[int]) -> tuple:
        key = self._path_end_keys.get(before)
        if key is None:
            key = self._path_end_keys[before] = decision_key(
                "path_end", None, None, None, [], portable_paths(_path_end_reason(before)))
        return key

