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


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_gpu_trace_pool_blocks_name_live_outputs(name):
    """In every snapshot a GPU recorded, the pool blocks owned by node outputs are exactly the live
    outputs with memory of their own, one block each, allocated and holding the output's address."""
    owned_any = False
    for step in gpu_trace(name).steps:
        snap = step.snapshot
        if snap is None:
            continue
        nodes = {n.id: n for n in snap.nodes}
        owned = [b for seg in snap.segments for b in seg.blocks if b.node is not None]
        live = [(n.id, o.index) for n in snap.nodes for o in n.outputs if o.state == "live" and o.alias_of is None]
        assert sorted((b.node, b.output) for b in owned) == sorted(live), f"step {step.index}"
        for b in owned:
            out = nodes[b.node].outputs[b.output]
            assert b.allocated and b.address <= out.address < b.address + b.size, f"step {step.index}: {b}"
            assert b.owner == f"node {b.node} output {b.output}"
        owned_any = owned_any or bool(owned)
    assert owned_any, "no snapshot of this GPU trace maps a pool block to a node output"


def test_unknown_gpu_trace_is_a_clear_error():
    with pytest.raises(KeyError, match="no GPU trace named 'nope'"):
        gpu_trace("nope")
