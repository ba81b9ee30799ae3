"""cgviz.observe_graphs on real CUDA graphs: torch.cuda.graph, make_graphed_callables, a long
replay loop, a shared pool, a graph of torch.compile's trees, and the serving example."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
import torch

import cgviz
from cgviz.trace.io import load_trace
from helpers import ROOT

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _capture(fn, x, pool=None):
    """torch's documented recipe: warm up on a side stream, then capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = fn(x)  # captured here
    return graph, out


def _fn(x):
    return (x * 2 + 1).relu() @ x.T


# This file as a trace names it: relative to the directory pytest runs in (the repository's
# root, or tests/gpu), as a site inside the current directory is kept.
HERE = os.path.relpath(os.path.abspath(__file__)).replace(os.sep, "/")


def _kinds(trace):
    return [(s.kind, s.graph, s.repeat) for s in trace.steps]


def test_torch_cuda_graph_capture_replay_and_destroy():
    x = torch.randn(64, 64, device="cuda")
    with cgviz.observe_graphs(timed=True) as trace:
        graph, out = _capture(_fn, x)
        for _ in range(5):
            x.copy_(torch.randn_like(x))
            graph.replay()
        expected = _fn(x)
        torch.cuda.synchronize()
        assert torch.allclose(out, expected, atol=1e-3)
        del graph
        gc.collect()
    (view,) = trace.graphs
    assert view.origin == "torch.cuda.graph"
    assert view.site.startswith(f"{HERE}:") and "_capture" in view.site
    assert view.replays == 5 and view.destroyed
    if trace.meta["graph_events_from"] == "hooks":  # torch 2.14+: read while the cudaGraph_t is live
        assert view.kernels and sum(n for _, n in view.kernels) >= 2  # the elementwise kernel and the matmul
    else:
        assert view.kernels is None  # before 2.14, capture_end destroys the graph's template at once
    assert view.replay_us is not None and view.replay_us > 0
    assert view.pool_bytes and view.pool_bytes >= out.nbytes
    kinds = [s.kind for s in trace.expanded()]
    assert kinds == ["capture"] + ["replay"] * 5 + ["destroy"]
    assert "captured graph 1" in trace.steps[0].reason and "(its own)" in trace.steps[0].reason


def test_results_and_memory_are_the_same_observed_or_not():
    def run():
        torch.manual_seed(0)
        x = torch.randn(256, 256, device="cuda")
        graph, out = _capture(_fn, x)
        outs = []
        for i in range(20):
            x.mul_(0.5)
            graph.replay()
            outs.append(out.clone())
        torch.cuda.synchronize()
        before_free = torch.cuda.memory_allocated()
        del graph, out
        gc.collect()
        return torch.stack(outs).cpu(), before_free - torch.cuda.memory_allocated()

    run()  # the first run makes what every later one finds made (cuBLAS workspaces, cached blocks)
    plain, freed_plain = run()
    with cgviz.observe_graphs():
        observed, freed_observed = run()
    assert torch.equal(plain, observed)
    assert freed_observed == freed_plain > 0  # the pool's memory is given back as without observing


def test_make_graphed_callables_forward_and_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).cuda()
    sample = torch.randn(16, 32, device="cuda", requires_grad=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cgviz.observe_graphs() as trace:
        graphed = torch.cuda.make_graphed_callables(model, (sample,))
        for _ in range(4):
            x = torch.randn(16, 32, device="cuda", requires_grad=True)
            graphed(x).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
    assert len(trace.graphs) == 2  # its forward graph and its backward graph
    assert {g.origin for g in trace.graphs} == {"make_graphed_callables"}
    assert all(g.site.startswith(f"{HERE}:") for g in trace.graphs)
    assert trace.graphs[0].pool == trace.graphs[1].pool  # the backward graph captures into the forward's pool
    assert [g.replays for g in trace.graphs] == [4, 4]


def test_ten_thousand_replays_fold_into_one_block_and_memory_stays_flat():
    x = torch.randn(16, device="cuda")
    graph, out = _capture(lambda t: (t * 2 + 1).relu(), x)
    with cgviz.observe_graphs(trace="events") as trace:
        graph.replay()
        torch.cuda.synchronize()
        allocated = torch.cuda.memory_allocated()
        for _ in range(10_000):
            graph.replay()
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == allocated
    (view,) = trace.graphs
    assert view.site == "captured before observing began" and view.replays == 10_001
    assert len(trace.steps) <= 2 and trace.steps[-1].repeat >= 10_000
    assert trace.counts()["replay"] == 10_001


def test_two_graphs_share_a_pool():
    pool = torch.cuda.graph_pool_handle()
    x = torch.randn(64, 64, device="cuda")
    with cgviz.observe_graphs() as trace:
        g1, _ = _capture(_fn, x, pool)
        g2, _ = _capture(lambda t: t.sin() + 1, x, pool)
        g3, _ = _capture(lambda t: t.cos(), x)
        g1.replay(), g2.replay(), g3.replay()
    a, b, c = trace.graphs
    assert a.pool == b.pool != c.pool
    assert "shared with graph 1" in trace.steps[1].reason
    from cgviz.trace.graph_groups import pools

    assert [(p.pool, p.shared) for p in pools(trace)] == [(a.pool, True), (c.pool, False)]


def test_graphs_of_a_shared_pool_destroyed_together_each_say_what_became_of_the_pool():
    """Only the last graph of a pool to die releases it; the steps are made after all died."""
    from cgviz.observe.graph_observer import RELEASED_POOL

    pool = torch.cuda.graph_pool_handle()
    x = torch.randn(64, 64, device="cuda")
    with cgviz.observe_graphs() as trace:
        g1, _ = _capture(_fn, x, pool)
        g2, _ = _capture(lambda t: t.sin() + 1, x, pool)
        g2.replay()
        del g1, g2  # both die before their destructions are made into steps
        gc.collect()
    reasons = [s.reason for s in trace.steps if s.kind == "destroy"]
    assert reasons == ["graph 1 was destroyed after 0 replays; pool 1 stays: other graphs still use it",
                       f"graph 2 was destroyed after 1 replay; torch releases pool 1: {RELEASED_POOL}"]


def test_a_released_pool_s_memory_is_taken_by_no_other_allocation_until_empty_cache():
    """What cgviz says of a released pool (RELEASED_POOL), as this torch does it."""
    mib = 1 << 20
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = torch.empty(16 * mib, device="cuda")  # 64 MiB, in the graph's own pool
        y.fill_(1)
    del y, graph
    gc.collect()
    released = torch.cuda.memory_reserved()
    z = torch.empty(16 * mib, device="cuda")  # as large: it does not go where the pool's block was
    assert torch.cuda.memory_reserved() == released + 64 * mib
    del z
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() <= released - 64 * mib


def test_a_reset_graph_is_destroyed_at_its_reset_and_its_object_captures_a_new_graph():
    """CUDAGraph.reset() frees the graph and lets go of its pool, as its destruction does (the
    pool's memory goes back at empty_cache while the object lives): the destroy step comes at the
    reset; a replay then raises torch's own error; the object's next capture is a new graph."""
    from cgviz.observe.graph_observer import RELEASED_POOL

    mib = 1 << 20
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    with cgviz.observe_graphs() as trace:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = torch.empty(16 * mib, device="cuda")  # 64 MiB, in the graph's own pool
            y.fill_(1)
        graph.replay()
        del y
        reserved = torch.cuda.memory_reserved()
        graph.reset()
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() <= reserved - 64 * mib  # the pool let go, the object alive
        with pytest.raises(Exception) as raised:
            graph.replay()
        error = str(raised.value)
        del raised  # its traceback holds the graph
        x = torch.randn(64, 64, device="cuda")
        with torch.cuda.graph(graph):
            x.sin() + 1  # elementwise: no library handle made inside the capture
        graph.replay()
        del graph
        gc.collect()
    assert "capture" in error  # torch's own words: no capture to replay
    assert _kinds(trace) == [("capture", 1, 1), ("replay", 1, 1), ("destroy", 1, 1), ("capture", 2, 1),
                             ("replay", 2, 1), ("destroy", 2, 1)]
    destroys = [s.reason for s in trace.steps if s.kind == "destroy"]
    assert destroys == [f"graph 1 was reset (CUDAGraph.reset()) after 1 replay; torch releases pool 1: {RELEASED_POOL}",
                        f"graph 2 was destroyed after 1 replay; torch releases pool 2: {RELEASED_POOL}"]


def _compiled_tree():
    """A function of torch.compile's trees (reset first), and its input."""
    torch._dynamo.reset()
    return torch.compile(lambda t: (t @ t).relu() * 3, mode="reduce-overhead"), torch.randn(64, 64, device="cuda")


def test_a_tree_graph_is_linked_to_its_node_not_doubled():
    fn, x = _compiled_tree()
    with cgviz.observe_torch(graphs=True) as trace:
        for _ in range(6):
            fn(x)
    with cgviz.observe_torch() as plain:
        for _ in range(6):
            fn(x)
    tree_graphs = [g for g in trace.graphs if g.origin == "torch.compile"]
    assert any(g.node is not None for g in tree_graphs)
    assert not [s for s in trace.steps if s.kind in ("capture", "replay")]  # shown as the tree's own steps
    records = [s for s in trace.steps if s.kind == "record"]
    assert {g.node for g in tree_graphs if g.node is not None} <= {s.node for s in records}
    assert plain.counts()["execute"] == 6
    (node_graph,) = [g for g in tree_graphs if g.node is not None]
    assert node_graph.replays == trace.counts()["execute"] + 1  # torch replays it once as it records
    torch._dynamo.reset()


def test_a_tree_recorded_before_observing_is_adopted_as_the_trees():
    fn, x = _compiled_tree()
    for _ in range(3):  # warmed up and recorded before observing
        fn(x)
    with cgviz.observe_torch(graphs=True) as trace:
        for _ in range(4):
            fn(x)
    assert not [s for s in trace.steps if s.kind == "replay"]
    (view,) = trace.graphs
    assert (view.origin, view.replays) == ("torch.compile", 4) and view.node is not None
    assert trace.counts()["execute"] == 4
    torch._dynamo.reset()


def test_a_plain_graph_destroyed_between_tree_replays_is_said_between_them():
    """At trace level "full" too, a destruction noted while the trees run comes before the
    tree's next step."""
    fn, x = _compiled_tree()
    with cgviz.observe_torch(graphs=True) as trace:
        for _ in range(3):
            fn(x)
        graph, _ = _capture(_fn, x)
        graph.replay()
        del graph
        gc.collect()
        fn(x)
    kinds = [s.kind for s in trace.steps]
    assert kinds.index("destroy") < len(kinds) - 1 and kinds[-1] == "execute", kinds
    torch._dynamo.reset()


def test_a_capture_whose_block_raised_says_so():
    x = torch.randn(64, 64, device="cuda")
    with cgviz.observe_graphs() as trace:
        graph = torch.cuda.CUDAGraph()
        _fn(x)
        torch.cuda.synchronize()
        with pytest.raises(ValueError, match="no batch"):
            with torch.cuda.graph(graph):
                _fn(x)
                raise ValueError("no batch")
        ok, _ = _capture(_fn, x)
    first, second = [s.reason for s in trace.steps if s.kind == "capture"]
    assert first.endswith("; its block raised ValueError, so the graph holds only the work captured before the error")
    assert "raised" not in second


def test_replaying_a_graph_never_captured_raises_torch_s_own_error():
    def error():
        with pytest.raises(Exception) as raised:
            torch.cuda.CUDAGraph().replay()
        return type(raised.value), str(raised.value)

    plain = error()
    with cgviz.observe_graphs() as trace:
        observed = error()
    assert observed == plain
    assert trace.graphs == []


def test_serving_example_trace(tmp_path):
    out = tmp_path / "serving.cgtrace.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "serving_runner.py"), "--batches", "60",
                    "--trace-out", str(out), "--timed"], check=True, cwd=ROOT, env=env, timeout=300)
    trace = load_trace(out)
    from cgviz.trace.graph_groups import families, pools

    (family,) = families(trace)
    assert family.sizes == [1, 2, 4, 8, 16, 32, 64]
    assert 0 < family.padding < 1
    assert len(pools(trace)) == 1 and pools(trace)[0].shared
    never = [g for g in trace.graphs if g.replays == 0]
    assert [g.batch for g in never] == [64]
    assert sum(g.replays for g in trace.graphs) == 60


def test_cgviz_run_graphs_records_the_program_unchanged(tmp_path):
    out = tmp_path / "run.cgtrace.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runner = os.path.join(ROOT, "examples", "serving_runner.py")
    plain = subprocess.run([sys.executable, runner, "--batches", "20"], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=300, check=True)
    run = subprocess.run([sys.executable, "-m", "cgviz", "run", "--graphs", "--timed", "--trace-out", str(out),
                          runner, "--batches", "20"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == plain.stdout  # the same logits, observed or not
    trace = load_trace(out)
    assert trace.meta["backend"] == "torch.compile" and trace.meta["graphs_observed"]
    assert sorted(g.batch for g in trace.graphs) == [1, 2, 4, 8, 16, 32, 64]
    assert sum(g.replays for g in trace.graphs) == 20 and all(g.replay_us for g in trace.graphs if g.replays)
    assert "graph capture" in run.stderr and "never replayed" in run.stderr
