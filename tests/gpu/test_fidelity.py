"""Every scenario makes the same decisions on sim and on a real GPU, with results equal to eager."""

import pytest
import torch

from cgviz.scenarios import SCENARIOS, run_scenario


def decisions(trace):
    """Step kinds, node ids, parents and each step's output liveness, backend-neutral."""
    out = []
    for s in trace.steps:
        live = None
        if s.snapshot is not None:
            live = sorted((n.id, o.index, o.state) for n in s.snapshot.nodes for o in n.outputs)
        out.append((s.kind, s.function, s.node, s.parent, s.repeat, s.generation, len(s.invalidated), live))
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_same_decisions_on_sim_and_cuda(name):
    sim = run_scenario(name, "sim")
    cuda = run_scenario(name, "cuda")
    assert cuda.mismatches == [], cuda.mismatches
    assert sim.mismatches == []
    assert decisions(cuda.trace) == decisions(sim.trace)
    parents_sim = [(n.id, n.parent, n.kind) for n in sim.trace.last_snapshot().nodes]
    parents_cuda = [(n.id, n.parent, n.kind) for n in cuda.trace.last_snapshot().nodes]
    assert parents_cuda == parents_sim
    assert cuda.trace.meta["backend"] == "cuda"
