"""On a GPU: a recorded node's kernels are the ones torch's profiler sees for the same function;
replays and eager runs are timed with CUDA events; output values follow the replays."""

from __future__ import annotations

from collections import Counter

import torch

import cgviz


def _profiler_kernels(fn, *args) -> Counter:
    from torch.profiler import ProfilerActivity, profile

    fn(*args)  # warm: lazy initialisation and cuBLAS heuristics outside the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def _graph_entry(tree: cgviz.Tree, function: str) -> dict:
    return next(e for e in tree.trace.meta["profile"].values() if e["kind"] == "graph" and e["function"] == function)


def test_the_kernels_of_a_recorded_node_are_those_the_profiler_reports():
    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")

    def fn(a, b):
        return (torch.relu(a @ b) + 1).sum(0)

    tree = cgviz.Tree("cuda")
    f = tree.wrap(fn, static=(1,), name="f")
    for _ in range(3):
        f(x, w)
    entry = _graph_entry(tree, "f")
    graph = Counter({name: count for name, count in entry["kernels"]})
    assert graph == _profiler_kernels(fn, x, w)


def test_replay_and_eager_times_are_measured_and_a_launch_bound_replay_is_faster():
    x = torch.randn(1024, device="cuda")

    def chain(t):
        for _ in range(50):
            t = t * 1.0001 + 0.5
        return t

    tree = cgviz.Tree("cuda")
    f = tree.wrap(chain, name="chain")
    a = f(x)
    b = f(x)  # eager again, and not a first call: the path is still warming up while `a` lives
    del a, b
    for _ in range(10):
        f(x)
    entry = _graph_entry(tree, "chain")
    assert entry["clock"] == "CUDA events"
    assert entry["replays_timed"] >= 5 and entry["replay_us"] > 0
    assert entry["eager_is_first_call"] is False and entry["eager_us"] > 0
    assert entry["replay_us"] < entry["eager_us"]
    assert sum(c for _, c in entry["kernels"]) == 100  # 50 × (mul, add)
    found = cgviz.diagnose(tree).of("time")
    assert found and found[0].numbers["speedup"] > 1


def test_values_of_an_output_change_as_the_next_replay_writes():
    tree = cgviz.Tree("cuda", values=True)
    f = tree.wrap(lambda t: t * 2, name="double")
    base = torch.arange(8.0, device="cuda")
    seen = []
    for i in range(5):
        y = f(base + i)
        node = tree.current.id
        snap = tree.trace.steps[-1].snapshot
        seen.append(snap.node(node).outputs[0].values["head"])
        assert seen[-1] == y[:4].tolist()
        del y
    assert seen[2] != seen[3] != seen[4]  # each replay wrote new values into the same memory


def test_gpu_scenario_traces_carry_kernels_and_times():
    from cgviz.scenarios import run_scenario

    trace = run_scenario("chain", "cuda").trace
    graphs = [e for e in trace.meta["profile"].values() if e["kind"] == "graph"]
    assert graphs and all(e["kernels"] for e in graphs)
    assert any(e["replay_us"] for e in graphs)
