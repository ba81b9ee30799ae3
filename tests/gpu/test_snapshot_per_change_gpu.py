"""On the GPU, trace="full" takes a snapshot only when what it shows changed, for cgviz's own
trees and for torch.compile's: the stored trace equals the one a snapshot at every decision
gives (a twin log fed the same decisions at the same moments, pool readings included).

Skipped without CUDA (tests/gpu/conftest.py).
"""

from __future__ import annotations

import pytest
import torch

import cgviz
from cgviz.observe import observer
from cgviz.observe.tree_snapshots import TreeSnapshots
from cgviz.scenarios import SCENARIOS
from snapshot_twins import TwinLog, same_steps, scenario_with_twin


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_cuda_scenario_stores_the_trace_a_snapshot_per_decision_gives(name, monkeypatch):
    steps, twin = scenario_with_twin(name, "cuda", monkeypatch)
    assert same_steps(steps, twin)


def observed_training(steps: int):
    """A small MLP's training loop under torch.compile's CUDA graphs, observed at "full"."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(16, 32, device="cuda")
    with cgviz.observe_torch(trace="full") as trace:
        for _ in range(steps):
            torch.compiler.cudagraph_mark_step_begin()
            loss = step(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    return trace


@pytest.mark.usefixtures("fresh_dynamo")
def test_an_observed_training_loop_stores_the_trace_a_snapshot_per_decision_gives(monkeypatch):
    TwinLog.made = []
    monkeypatch.setattr(observer, "StepLog", TwinLog)
    trace = observed_training(30)
    log = next(t for t in TwinLog.made if t.steps is trace.steps)
    log.twin.flush()
    assert trace.steps == log.twin.steps
    assert log.skipped > 20  # the steady steps took no snapshot of their own
    assert trace.counts()["execute"] >= 40


@pytest.mark.usefixtures("fresh_dynamo")
def test_the_outputs_a_replay_is_returning_are_live_as_torch_would_ask_them(monkeypatch):
    """At "full", the state read while torch's execute_node returns a replay's outputs shows each
    output torch tracks live without asking: at every such read of a training loop, asking each
    output (torch's expired(), read as the observer reads it) gives the same state."""
    read = TreeSnapshots.state
    checked = []

    def state(self, manager, invalidated):
        returning = self._returning
        if returning is None:
            return read(self, manager, invalidated)
        self._returning = None
        asked = read(self, manager, invalidated)  # every output asked
        self._returning = returning
        self._found_dead.pop(returning, None)
        shown = read(self, manager, invalidated)
        checked.append(shown == asked)
        return shown

    monkeypatch.setattr(TreeSnapshots, "state", state)
    trace = observed_training(20)
    assert trace.counts()["execute"] >= 30
    assert len(checked) >= 30 and all(checked)
