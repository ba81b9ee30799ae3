"""A step log that also keeps a twin taking a snapshot at every decision: what `trace="full"`
stored before it paid per change. Both get the same decisions at the same moments, so their
steps must be equal, snapshots, durations and start times included."""

from __future__ import annotations

from cgviz.engine import recorder
from cgviz.scenarios import run_scenario
from cgviz.trace.fold import StepLog


class TwinLog(StepLog):
    """The producer's log (snapshots per change), with `twin` (a snapshot per decision)."""

    made: list["TwinLog"] = []

    def __init__(self, steps: list) -> None:
        super().__init__(steps)
        self.twin = StepLog([])
        self.skipped = 0  # decisions that took no snapshot of their own
        TwinLog.made.append(self)

    def add(self, key, step, duration, device=None, *, state=None, snap=None):
        taken = []
        counting = snap if snap is None else (lambda: taken.append(1) or snap())
        self.twin.add(key, step, duration, device, snap=snap)  # state None: never equal, always taken
        shown = super().add(key, step, duration, device, state=state, snap=counting)
        self.skipped += snap is not None and not taken
        return shown

    def flush(self) -> None:
        self.twin.flush()
        super().flush()


def scenario_with_twin(name: str, device: str, monkeypatch) -> tuple[list, list]:
    """A scenario run at trace "full" on `device`: the steps the tree stored, and its twin's."""
    TwinLog.made = []
    monkeypatch.setattr(recorder, "StepLog", TwinLog)
    steps = run_scenario(name, device, trace="full").tree.trace.steps
    (log,) = TwinLog.made
    log.twin.flush()
    return steps, log.twin.steps
