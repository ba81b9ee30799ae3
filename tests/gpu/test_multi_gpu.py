"""Trees on a second GPU and on several at once: cgviz.Tree("cuda:1") while cuda:0 is current,
two trees on two devices side by side, observe_torch seeing torch's manager of each device, and
a two-rank DDP training on two GPUs (NCCL) through torchrun, observed, merged and checked.

Skipped where fewer than two CUDA devices are visible.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cgviz
from cgviz.observe.torch_compile import observe_torch
from cgviz.trace.lanes import tree_keys
from cgviz.views.page_data import page_data
from helpers import ROOT, keep_trace


pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def kinds(trace):
    return [s.kind for s in trace.expanded() if s.kind != "path_end"]


@pytest.fixture(autouse=True)
def cuda0_current():
    """cuda:0 stays the current device: the trees must not rely on it being theirs."""
    before = torch.cuda.current_device()
    torch.cuda.set_device(0)
    yield
    torch.cuda.set_device(before)


def test_a_tree_on_cuda1_records_and_replays_there_while_cuda0_is_current():
    tree = cgviz.Tree("cuda:1")
    f = tree.wrap(lambda x: (x @ x.T + 1).relu(), name="f")
    gc.collect()  # what earlier tests left on cuda:0 is freed now, not while this one runs
    on_cuda0, reserved1 = torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(1)
    for _ in range(4):
        x = torch.randn(64, 64, device="cuda:1")
        y = f(x)
        assert y.device == torch.device("cuda:1")
        torch.testing.assert_close(y, (x @ x.T + 1).relu())
        del y
    assert kinds(tree.trace) == ["warmup", "record", "execute", "execute"]
    assert torch.cuda.current_device() == 0
    assert torch.cuda.memory_allocated(0) <= on_cuda0, "the tree on cuda:1 allocated on cuda:0"
    assert torch.cuda.memory_reserved(1) > reserved1  # its pool is there
    assert tree.trace.meta["device"].startswith("cuda:1 (")
    y = f(torch.randn(64, 64, device="cuda:1"))
    assert y.data_ptr() == tree.nodes[1].leaves[0].address  # the replay's output, in the tree's pool
    owned = [b for seg in tree.snapshot().segments for b in seg.blocks if b.node == 1 and b.output == 0]
    assert len(owned) == 1 and owned[0].address <= y.data_ptr() < owned[0].address + owned[0].size
    tree.mark_step()
    f(torch.randn(64, 64, device="cuda:1"))
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
        print(y)


def test_a_tree_on_cuda1_runs_a_cuda0_input_eagerly_saying_why():
    tree = cgviz.Tree("cuda:1")
    f = tree.wrap(lambda x: x * 2, name="f")
    y = f(torch.ones(3, device="cuda:0"))
    assert torch.equal(y, torch.full((3,), 2.0, device="cuda:0"))
    step = tree.trace.steps[-1]
    assert step.kind == "eager" and "is on cuda:0, but the tree is on cuda:1" in step.reason


def test_trees_on_two_devices_interleaved_keep_their_own_pools_and_values():
    trees = {d: cgviz.Tree(f"cuda:{d}") for d in (0, 1)}
    fns = {d: trees[d].wrap(lambda x, d=d: x * (d + 2) - 1, name=f"f{d}") for d in (0, 1)}
    for _ in range(5):
        for d in (0, 1):
            x = torch.randn(1024, device=f"cuda:{d}")
            y = fns[d](x)
            assert y.device.index == d
            torch.testing.assert_close(y, x * (d + 2) - 1)
            del y
    for d, tree in trees.items():
        assert kinds(tree.trace) == ["warmup", "record", "execute", "execute", "execute"], d
        node = tree.nodes[1]
        assert node.replays == 3
        assert tree.snapshot().segments, d
    addresses = [{seg.address for seg in trees[d].snapshot().segments} for d in (0, 1)]
    assert not addresses[0] & addresses[1]


def test_observe_torch_sees_each_devices_manager_and_names_every_steps_device():
    torch._dynamo.reset()

    def f(x):
        return (x * 2 + 1).relu().sum(0)

    compiled = torch.compile(f, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            for d in (0, 1):
                x = torch.randn(64, 8, device=f"cuda:{d}")
                y = compiled(x)
                assert y.device.index == d
                torch.testing.assert_close(y, f(x))
                del y
    torch._dynamo.reset()
    keep_trace(trace, "torch_two_devices")
    assert [d.split(" ")[0] for d in trace.meta["devices"]] == ["cuda:0", "cuda:1"]
    steps = trace.expanded()
    assert {s.device for s in steps} == {"cuda:0", "cuda:1"}
    nodes = {"cuda:0": set(), "cuda:1": set()}
    for s in steps:
        if s.snapshot is not None:
            nodes[s.device] |= {n.id for n in s.snapshot.nodes}
        if s.node is not None:
            assert s.node in {n.id for n in s.snapshot.nodes}, s
    assert nodes["cuda:0"] and nodes["cuda:1"] and not nodes["cuda:0"] & nodes["cuda:1"]
    for device in nodes:
        mine = [s.kind for s in steps if s.device == device]
        assert "record" in mine and "execute" in mine, (device, mine)
    assert tree_keys(trace.steps) == [(None, "cuda:0"), (None, "cuda:1")]
    data = page_data(trace, range(len(trace.steps)))
    assert "cuda:0" in data["timeline"] and "cuda:1" in data["timeline"]  # a lane each
    assert all(row[1].startswith(f"{s.device} · ") for row, s in zip(data["rows"], trace.steps))


@pytest.mark.parametrize("plant", [True, False], ids=["planted", "clean"])
def test_ddp_on_two_gpus_with_nccl_is_observed_merged_and_checked(plant, tmp_path):
    """tests/gpu/ddp_reduce_overhead.py under torchrun, one GPU a rank: it exits 0 when each rank
    recorded and replayed its tree and the merged trace flags the planted batch (or, clean,
    nothing)."""
    out = Path(os.environ.get("CGVIZ_TRACE_DIR") or tmp_path) / ("ddp-planted" if plant else "ddp-clean")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "tests" / "gpu" / "ddp_reduce_overhead.py"), str(out), "--backend", "nccl"]
    done = subprocess.run(cmd + (["--plant"] if plant else []), env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    merged = cgviz.Trace.load(out / "all.cgtrace.json")
    devices = sorted(p["device"].split(" ")[0] for p in merged.meta["ranks"])
    assert devices == ["cuda:0", "cuda:1"]


def test_timed_replays_of_graphs_on_two_devices_each_time_their_own():
    """Timing events are per device: a replay on cuda:1 while cuda:0 is current is timed on
    cuda:1's stream, and an event first recorded on one device is never reused on the other."""
    graphs = {}
    with cgviz.observe_graphs(timed=True) as trace:
        for device in (0, 1):
            with torch.cuda.device(device):
                x = torch.randn(256, 256, device=f"cuda:{device}")
                x @ x
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                # torch.cuda.graph's default capture stream is one for the class, made on the
                # device current at its first use: each device needs a stream of its own
                with torch.cuda.graph(graph, stream=torch.cuda.Stream(device)):
                    y = x @ x
                graphs[device] = (graph, x, y)
        for _ in range(5):
            for device in (0, 1):
                graphs[device][0].replay()  # cuda:0 current throughout
        torch.cuda.synchronize()
    for device in (0, 1):
        _, x, y = graphs[device]
        torch.testing.assert_close(y, x @ x)
    seen = [(g.device, g.replays) for g in trace.graphs]
    assert seen == [("cuda:0", 5), ("cuda:1", 5)], seen
    assert all(g.replay_us and g.replay_us > 0 for g in trace.graphs)
