"""On a GPU: the graphs torch.compile(mode="reduce-overhead") records, observed, say which
kernels they hold, the same ones torch's profiler sees when the compiled code runs without
CUDA graphs; and keeping the graph for reading changes nothing the model computes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
import torch

import cgviz
from cgviz.observe.torch_compile import observe_torch
from helpers import ROOT, keep_trace

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def fn(a, b):
    return (torch.relu(a @ b) + 1).sum(0)


def _profiled_kernels(compiled, *args) -> Counter:
    from torch.profiler import ProfilerActivity, profile

    compiled(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        compiled(*args)
        torch.cuda.synchronize()
    return Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def test_an_observed_graph_holds_the_kernels_the_compiled_code_runs():
    a = torch.randn(256, 256, device="cuda")
    b = torch.randn(256, 256, device="cuda")
    graphed = torch.compile(fn, mode="reduce-overhead")
    with observe_torch() as trace:
        results = [graphed(a, b).clone() for _ in range(4)]
    graphs = [e for e in trace.meta["profile"].values() if e["kind"] == "graph"]
    assert len(graphs) == 1, trace.meta["profile"]
    held = Counter({name: count for name, count in graphs[0]["kernels"]})
    torch._dynamo.reset()
    plain = torch.compile(fn)  # the same generated code, run without CUDA graphs
    assert held == _profiled_kernels(plain, a, b)
    for r in results:  # the kept graph replays what torch recorded
        torch.testing.assert_close(r, fn(a, b), rtol=1e-3, atol=1e-3)
    assert trace.counts()["execute"] >= 1
    keep_trace(trace, "torch_kernels")


def test_kernels_off_keeps_torch_graph_as_torch_made_it():
    a = torch.randn(64, 64, device="cuda")
    graphed = torch.compile(fn, mode="reduce-overhead")
    with observe_torch(kernels=False) as trace:
        for _ in range(3):
            graphed(a, a)
    assert "profile" not in trace.meta
    from cgviz._torch.graphs import inspectable_graph_class
    from torch._inductor import cudagraph_trees as trees

    manager = trees.get_container(torch.cuda.current_device()).get_tree_manager()
    node = manager.current_node or next(iter(manager.roots.values()))[0]
    graph = getattr(node, "graph", None)
    assert graph is not None and not isinstance(graph, inspectable_graph_class())
    assert torch.cuda.CUDAGraph is torch.cuda.graphs.CUDAGraph  # put back after recording


def test_events_level_reads_no_kernels_unless_asked():
    a = torch.randn(64, 64, device="cuda")
    graphed = torch.compile(fn, mode="reduce-overhead")
    with observe_torch(trace="events") as trace:
        for _ in range(3):
            graphed(a, a)
    assert "profile" not in trace.meta
    torch._dynamo.reset()
    graphed = torch.compile(fn, mode="reduce-overhead")
    with observe_torch(trace="events", kernels=True) as trace:
        for _ in range(3):
            graphed(a, a)
    assert any(e["kernels"] for e in trace.meta["profile"].values())
    cgviz.diagnose(trace)  # a profile with kernels and no times is read as such


# In a fresh process: whether any CUDA graph of the process kept its template is process state.
_LATER_GRAPH = """
import os, tempfile, warnings
import torch
from cgviz._torch.graphs import graph_dot, inspectable_graph

x = torch.ones(8, device="cuda")
kept = inspectable_graph()
with torch.cuda.graph(kept):
    y = x * 2
kept.replay()
print("kept", "digraph" in graph_dot(kept), bool(torch.equal(y, x * 2)))
plain = torch.cuda.CUDAGraph()  # made after cgviz read one: as torch makes it
with torch.cuda.graph(plain):
    z = x + 1
path = os.path.join(tempfile.mkdtemp(), "plain.dot")
with warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    try:
        plain.debug_dump(path)  # up to 2.13 a warning where the graph kept nothing; 2.14+ an error
    except Exception:
        pass
print("plain", os.path.exists(path) and os.path.getsize(path) > 0)
"""


def test_reading_one_graph_s_kernels_leaves_every_other_graph_as_torch_makes_it():
    """cgviz keeps the template of the graph it reads (keep_graph=True), not the process's:
    torch's debug mode, before 2.14, would make every later graph of the process keep its
    template (a plain graph would then dump its DOT text; as torch makes it, it has none)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _LATER_GRAPH], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["kept True True", "plain False"], done.stdout + done.stderr
