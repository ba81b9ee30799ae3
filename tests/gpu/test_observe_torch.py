"""cgviz.observe_torch on real torch.compile(mode="reduce-overhead") trees."""

import inspect
from pathlib import Path

import pytest
import torch

import cgviz
from cgviz.observe import _torch_layout as layout
from cgviz.observe.torch_compile import observe_torch
from helpers import keep_trace, mlp

DEV = "cuda"
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def manager():
    from torch._inductor import cudagraph_trees as trees

    return trees.get_container(torch.cuda.current_device()).get_tree_manager()


def walk_shape(mgr):
    """(depth, number of children) of every recorded graph, walking torch's manager directly."""
    out = []
    stack = [(n, 0) for n in layout.roots(mgr)]
    while stack:
        node, depth = stack.pop()
        children = layout.node_children(node)
        out.append((depth, len(children)))
        stack.extend((c, depth + 1) for c in children)
    return sorted(out)


def trace_shape(snapshot):
    graphs = {n.id: n for n in snapshot.nodes if n.kind == "graph"}

    def depth(n):
        d = 0
        while n.parent is not None and n.parent in graphs:
            n, d = graphs[n.parent], d + 1
        return d

    return sorted((depth(n), len([c for c in n.children if c in graphs])) for n in graphs.values())


def kinds(trace):
    return [s.kind for s in trace.steps]


def test_inference_under_no_grad():
    model = mlp(DEV)
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(16, 32, device=DEV)
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(5):
            y = compiled(x)
            assert torch.allclose(y, model(x), atol=1e-5)
    keep_trace(trace, "torch_inference")
    ks = kinds(trace)
    assert ks.index("warmup") < ks.index("record") < ks.index("execute")
    assert all("(inference)" in s.function for s in trace.steps if s.kind in ("warmup", "record", "execute"))
    assert trace_shape(trace.steps[-1].snapshot) == walk_shape(manager())
    assert trace.steps[-1].snapshot.segments, "the pool's segments are in the snapshot"


def test_training_backward_is_a_child_of_the_forward():
    model = mlp(DEV)
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(16, 32, device=DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with observe_torch() as trace:
        for _ in range(5):
            opt.zero_grad(set_to_none=True)  # .grad from the last backward graph is not kept across steps
            loss = compiled(x).sum()
            loss.backward()
            opt.step()
    keep_trace(trace, "torch_training")
    records = [s for s in trace.steps if s.kind == "record"]
    fwd = [s for s in records if "(forward)" in s.function]
    bwd = [s for s in records if "(backward)" in s.function]
    assert fwd and bwd
    assert bwd[0].parent == fwd[0].node
    assert "execute" in kinds(trace)
    assert trace_shape(trace.steps[-1].snapshot) == walk_shape(manager())


def test_dynamic_shapes_make_several_roots_and_rerecord_reasons():
    model = mlp(DEV)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(3):
            for n in (4, 8, 16):
                compiled(torch.randn(n, 32, device=DEV))
        # a parameter moved to a new address: the recorded graph's static input moved
        model[0].weight.data = model[0].weight.data.clone()
        for _ in range(3):
            compiled(torch.randn(4, 32, device=DEV))
    keep_trace(trace, "torch_dynamic_shapes")
    snap = trace.steps[-1].snapshot
    roots = [n for n in snap.nodes if n.kind == "graph" and n.parent is None]
    assert len(roots) >= 3
    assert any("could not replay" in s.reason for s in trace.steps if s.kind == "record"), [
        s.reason for s in trace.steps if s.kind == "record"
    ]
    assert trace_shape(snap) == walk_shape(manager())


def scaled(x, scale):
    return (x * 2).sum(0) + scale.to(x.device)


def test_cpu_input_skip_reason_is_recorded():
    compiled = torch.compile(scaled, mode="reduce-overhead")
    x = torch.randn(8, 8, device=DEV)
    # without graph partitioning (newer torch splits CPU work out of the graph), torch skips
    # CUDA graphs for a function with a CPU input, and says why
    patch = {"graph_partition": False} if hasattr(torch._inductor.config, "graph_partition") else {}
    with torch._inductor.config.patch(patch), torch.no_grad(), observe_torch() as trace:
        for _ in range(3):
            compiled(x, torch.ones(8))
    keep_trace(trace, "torch_cpu_input")
    eager = [s for s in trace.steps if s.kind == "eager"]
    assert eager and "skipping cudagraphs" in eager[0].reason.lower(), [s.reason for s in trace.steps]
    # torch decided while compiling; each of the three calls is joined to its message
    assert sum(s.repeat for s in eager) == 3 and {s.function for s in eager} == {"scaled [0/0] (inference)"}
    lines, first = inspect.getsourcelines(scaled)
    line = first + next(i for i, text in enumerate(lines) if "scale.to(x.device)" in text)
    diagnosis = cgviz.diagnose(trace)
    assert diagnosis.text().startswith("error: no call of this run was replayed")
    (skip,) = diagnosis.of("eager")
    assert skip.numbers["calls"] == 3 and skip.numbers["input"]
    assert Path(skip.numbers["source"]["file"]).name == Path(__file__).name and skip.numbers["source"]["line"] == line
    assert f":{line} in scaled" in skip.title


def test_use_after_overwrite_is_an_error_step():
    def cube(x):
        return x * x * x

    compiled = torch.compile(cube, mode="reduce-overhead")
    x = torch.rand(4, device=DEV)
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
        with observe_torch() as trace:
            out = compiled(x)
            compiled(x)  # a new invocation: a new generation overwrites `out`
            print(out + out)
    keep_trace(trace, "torch_overwritten")
    assert trace.steps[-1].kind == "error"
    assert "overwritten" in trace.steps[-1].reason
    assert any(s.kind == "generation" and s.invalidated for s in trace.steps)


def test_a_replay_in_a_new_generation_hands_back_the_same_tensor():
    """torch ends a replayed path without invalidating its outputs (try_end_curr_execution): an
    output kept from an earlier replay is the very tensor the next replay hands back, now holding
    the new values, and nothing raises. cgviz's own engine raises there on purpose."""
    def cube(x):
        return x * x * x

    compiled = torch.compile(cube, mode="reduce-overhead")
    with observe_torch() as trace:
        for _ in range(3):  # warm up, record, replay
            compiled(torch.full((4,), 1.0, device=DEV))
        y1 = compiled(torch.full((4,), 2.0, device=DEV))
        first = y1.tolist()
        y2 = compiled(torch.full((4,), 3.0, device=DEV))
        same, after = y1 is y2, y1.tolist()
    trace.meta["measured"] = {"y1_before": first, "y1_after": after, "y1_is_y2": same}
    keep_trace(trace, "torch_replayed_generation")
    assert same and first == [8.0] * 4 and after == [27.0] * 4
    assert not any(s.kind == "error" for s in trace.steps)
    replays = [s for s in trace.expanded() if s.kind == "execute"]
    assert len(replays) >= 3 and all(not s.invalidated for s in trace.expanded() if s.kind == "generation")


def test_a_first_call_after_replays_warms_up_on_the_replayed_path_and_the_next_generation_marks_it():
    """A function's first call after replays warms up under the node that replayed (a checkpoint
    restore, no path end), so the path has warmed up: the next generation invalidates its outputs,
    the replayed one included, and touching it raises (notebooks 4 and 7 teach this)."""
    producer = torch.compile(torch.cos, mode="reduce-overhead")
    consumer = torch.compile(torch.sin, mode="reduce-overhead")
    with observe_torch() as trace:
        for _ in range(3):  # warm up, record, replay
            x = producer(torch.randn(64, device=DEV))
        expected = torch.sin(x).sum().item()
        read = consumer(x).sum().item()  # consumer's first call
        producer(torch.randn(64, device=DEV))  # a new generation
        with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
            x.sum()
    assert abs(read - expected) < 1e-3
    steps = trace.expanded()
    warm = max(i for i, s in enumerate(steps) if s.kind == "warmup")
    replay, restore = steps[warm - 2], steps[warm - 1]
    assert (replay.kind, restore.kind) == ("execute", "checkpoint_restore"), [s.kind for s in steps]
    assert not any(s.kind == "path_end" for s in steps[warm - 2:])
    generation = next(s for s in steps[warm:] if s.kind == "generation")
    assert [replay.node, 0] in generation.invalidated, generation.invalidated


def test_events_level_adds_no_snapshots_and_no_manager_is_created():
    from torch._inductor import cudagraph_trees as trees

    with observe_torch(trace="events") as trace:
        torch.randn(4, device=DEV) + 1  # no compiled code: torch makes no manager, nor do we
    assert trace.steps == []
    container = trees.get_container(torch.cuda.current_device())
    assert container.tree_manager is None
