"""The GPU traces shipped with cgviz: they load anywhere, and sim still decides as the GPU did."""

import pytest

from cgviz.data import gpu_trace, gpu_trace_names
from cgviz.scenarios import SCENARIOS, run_scenario
from cgviz.trace.diff import decisions


def test_every_scenario_has_a_gpu_trace():
    assert gpu_trace_names() == sorted(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_sim_makes_the_decisions_recorded_on_the_gpu(name):
    recorded = gpu_trace(name)
    assert recorded.meta["backend"] == "cuda"
    assert recorded.meta["device"].startswith("cuda") and "NVIDIA" in recorded.meta["device"]
    sim = run_scenario(name, "sim")
    assert sim.mismatches == []
    assert decisions(sim.trace) == decisions(recorded)


def test_gpu_trace_pool_blocks_name_live_outputs():
    trace = gpu_trace("branching")
    owned = [b for s in trace.steps if s.snapshot for seg in s.snapshot.segments for b in seg.blocks if b.node is not None]
    assert owned, "a GPU snapshot maps pool blocks to node outputs"


def test_unknown_gpu_trace_is_a_clear_error():
    with pytest.raises(KeyError, match="no GPU trace named 'nope'"):
        gpu_trace("nope")
