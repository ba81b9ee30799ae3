"""Twins taking a snapshot at every decision: what `trace="full"` stored before it paid per change.
A twin gets each decision when it is made, so its steps and the producer's must be equal,
snapshots and durations included. `TwinLog` twins a step log that logs each decision at once
(the observer's); `TwinRecorder` twins the tree's recorder, which notes replay-loop decisions
and logs them later."""

from __future__ import annotations

import dataclasses
import functools
import time
import types

import cgviz
from cgviz.engine import recorder
from cgviz.engine import tree as tree_module
from cgviz.observe import observer, raw_events, replay_loop
from cgviz.scenarios import run_scenario
from cgviz.trace.fold import StepLog


class TwinLog(StepLog):
    """The producer's log (snapshots per change), with `twin` (a snapshot per decision)."""

    made: list["TwinLog"] = []

    def __init__(self, steps: list) -> None:
        super().__init__(steps)
        self.twin = StepLog([])
        self.skipped = 0  # decisions that took no snapshot of their own
        self.untwinned = False  # decisions logged now were fed to the twin when they were noted
        TwinLog.made.append(self)

    def add(self, key, step, duration, device=None, *, state=None, snap=None):
        taken = []
        counting = snap if snap is None else (lambda: taken.append(1) or snap())
        if not self.untwinned:
            self.twin.add(key, step, duration, device, snap=snap)  # state None: never equal, always taken
        shown = super().add(key, step, duration, device, state=state, snap=counting)
        self.skipped += snap is not None and not taken
        return shown

    def flush(self) -> None:
        self.twin.flush()
        super().flush()


def observer_twins(monkeypatch) -> list[TwinLog]:
    """Observers made from now on log through a `TwinLog`, whose twin is also fed, when noted,
    each decision the observer notes raw at "full" (made into steps later), with a snapshot
    taken then; the decisions logged from those notes later are not fed again. Returns the
    list of logs made."""
    TwinLog.made = []
    monkeypatch.setattr(observer, "StepLog", TwinLog)
    monkeypatch.setattr(raw_events, "RAW_BATCH", 10**9)  # a note is made into a step at the next catch-up
    noted, make_noted = observer.TorchObserver._noted, observer.TorchObserver._make_noted

    def twin_noted(self, manager, key, event, start):
        result = noted(self, manager, key, event, start)
        if result is replay_loop.NOTED:
            self.log.skipped += 1
            logged, duration, _state, event, start, key, generation, _device = self.raw.events[-1]
            make = replay_loop.event_step(event, generation)
            if start is not None:
                make = functools.partial(make, start=time.time() - duration)
            self.log.twin.add(logged, make, duration, snap=lambda: self.snapshots.snapshot(
                manager, self.generation, self._invalidated))
        return result

    def make_noted_untwinned(self, manager, events):
        self.log.untwinned = True
        try:
            make_noted(self, manager, events)
        finally:
            self.log.untwinned = False

    monkeypatch.setattr(observer.TorchObserver, "_noted", twin_noted)
    monkeypatch.setattr(observer.TorchObserver, "_make_noted", make_noted_untwinned)
    return TwinLog.made


class TwinRecorder(recorder.Recorder):
    """The tree's recorder (snapshots per change; replay-loop decisions noted and logged later),
    with `twin`: a step log fed each decision when it is made, with a snapshot taken then."""

    made: list["TwinRecorder"] = []

    def __init__(self, tree, level) -> None:
        super().__init__(tree, level)
        self.twin = StepLog([])
        self.decisions = self.taken = 0
        snapshot = self._snap

        def counted():
            self.taken += 1
            return snapshot()

        self._snap = counted
        TwinRecorder.made.append(self)

    @property
    def skipped(self) -> int:
        """Decisions that took no snapshot of their own."""
        return self.decisions - self.taken

    def _twin(self, key, make, duration) -> None:
        self.decisions += 1
        self.twin.add(key, make, duration, snap=self.snapshot)  # no state: a snapshot every time

    def _note(self, note: tuple) -> None:
        key, duration, _state, parts, generation, start = note
        self._twin(key, recorder.step_maker(parts, generation, duration, recorder.time.time() - duration), duration)
        super()._note(note)

    def _log(self, key, make, duration, state=recorder._NOW) -> None:
        self._twin(key, make, duration)
        super()._log(key, make, duration, state)

    def twin_steps(self) -> list:
        self.twin.flush()
        return self.twin.steps


def same_steps(steps: list, twin: list) -> bool:
    """Equal steps, snapshots and durations included; start times within 5 s (or both untimed). A noted decision's
    start is put on the wall clock when it is logged, its twin's when it was made; with the
    recorder's wall clock held at a fixed offset from the monotonic one (`steady_wall_clock`) the
    two differ by the time between two nearby readings, a pause of the process at most."""
    if len(steps) != len(twin):
        return False
    for a, b in zip(steps, twin):
        if dataclasses.replace(a, start=0.0) != dataclasses.replace(b, start=0.0):
            return False
        if (a.start is None) != (b.start is None) or (a.start is not None and abs(a.start - b.start) > 5.0):
            return False
    return True


def steady_wall_clock(monkeypatch) -> None:
    """The recorder's wall clock made a fixed offset of its monotonic one, so that the machine's
    clock being set meanwhile cannot move a start time."""
    offset = time.time() - time.perf_counter()
    monkeypatch.setattr(recorder, "time", types.SimpleNamespace(
        perf_counter=time.perf_counter, time=lambda: time.perf_counter() + offset))


def tree_with_twin(monkeypatch, *args, **options) -> tuple:
    """A cgviz.Tree whose recorder keeps a twin (`TwinRecorder`), and that recorder."""
    TwinRecorder.made = []
    monkeypatch.setattr(tree_module, "Recorder", TwinRecorder)
    steady_wall_clock(monkeypatch)
    tree = cgviz.Tree(*args, **options)
    (made,) = TwinRecorder.made
    TwinRecorder.made = []  # the caller holds it: the tree and its pool go with the test
    return tree, made


def scenario_with_twin(name: str, device: str, monkeypatch) -> tuple[list, list]:
    """A scenario run at trace "full" on `device`: the steps the tree stored, and its twin's."""
    TwinRecorder.made = []
    monkeypatch.setattr(tree_module, "Recorder", TwinRecorder)
    steady_wall_clock(monkeypatch)
    steps = run_scenario(name, device, trace="full").tree.trace.steps
    (made,) = TwinRecorder.made
    TwinRecorder.made = []  # the recorder holds its tree: let the tree and its pool go
    return steps, made.twin_steps()
