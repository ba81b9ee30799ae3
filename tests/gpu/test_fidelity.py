"""Every scenario makes the same decisions on sim and on a real GPU, with results equal to eager."""

import pytest

from cgviz.scenarios import SCENARIOS, run_scenario
from cgviz.trace.diff import decisions


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
