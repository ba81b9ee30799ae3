"""On the GPU, trace="full" takes a snapshot only when what it shows changed, for cgviz's own
trees and for torch.compile's: the stored trace equals the one a snapshot at every decision
gives (a twin log fed the same decisions at the same moments, pool readings included).

Skipped without CUDA (tests/gpu/conftest.py).
"""

from __future__ import annotations

import pytest
import torch

import cgviz
from cgviz.observe import _torch_layout as layout
from cgviz.observe.tree_snapshots import TreeSnapshots
from cgviz.scenarios import SCENARIOS
from snapshot_twins import observer_twins, same_steps, scenario_with_twin


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
    """The steady steps, noted raw and made into steps in bulk, and the others, logged at once,
    store what a snapshot taken at each decision gives."""
    made = observer_twins(monkeypatch)
    trace = observed_training(30)
    log = next(t for t in made if t.steps is trace.steps)
    log.twin.flush()
    assert same_steps(trace.steps, log.twin.steps)
    assert log.skipped > 20  # the steady steps took no snapshot of their own
    assert trace.counts()["execute"] >= 40


@pytest.mark.usefixtures("fresh_dynamo")
def test_every_state_of_a_training_loop_is_what_asking_every_output_gives(monkeypatch):
    """At "full", a state asks only the outputs it has not found dead: not those of a replay
    torch's execute_node is returning (shown live), nor those torch found dead before the replay
    (the forward's saved outputs, at the backward's), nor those found dead before. At every state
    of a training loop, asking each output (torch's expired(), read as the observer reads it)
    gives the same state; and torch's own finds spared asks."""
    read, found_by_torch = TreeSnapshots.state, layout.FoundDead.found_expired
    checked, marked = [], []

    def state(self, manager, invalidated):
        kept = self._found_dead, self._returning, self._shown
        self._found_dead, self._returning, self._shown = {}, None, {}
        asked = read(self, manager, invalidated)  # every output asked, the tree walked afresh
        self._found_dead, self._returning, self._shown = kept
        shown = read(self, manager, invalidated)
        checked.append(shown == asked)
        return shown

    def found_expired(self, count, indices, rest):
        marked.append(len(indices))
        return found_by_torch(self, count, indices, rest)

    monkeypatch.setattr(TreeSnapshots, "state", state)
    monkeypatch.setattr(layout.FoundDead, "found_expired", found_expired)
    trace = observed_training(20)
    assert trace.counts()["execute"] >= 30
    assert len(checked) >= 50 and all(checked)
    assert len(marked) >= 15 and min(marked) >= 1  # at every backward's replay
