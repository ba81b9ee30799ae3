"""torch.compile(mode="reduce-overhead") runs that go wrong in the ways users ask about, observed
and diagnosed: re-recording for many shapes, a mutated input, an op with a data-dependent shape,
two forwards before their backwards, an output used after the next training step, a graph break.
With CGVIZ_TRACE_DIR set, each trace is kept as data (cgviz/data/torch) for machines without a GPU."""

import pytest
import torch

import cgviz
from cgviz.observe.torch_compile import observe_torch
from test_observe_torch import fresh_dynamo, save  # noqa: F401  (fresh_dynamo: autouse fixture)

DEV = "cuda"


def keep(trace, name):
    """Save the trace as data (see test_observe_torch.save) and show its diagnosis."""
    save(trace, name)
    diagnosis = cgviz.diagnose(trace)
    print(f"\n== {name}\n{diagnosis.text()}")
    return diagnosis


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(DEV)


def test_many_shapes():
    model = mlp()
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    with torch.no_grad(), observe_torch() as trace:
        for rnd in range(3):
            for n in (2, 3, 5, 7, 11, 13):
                compiled(torch.randn(n, 32, device=DEV))
    d = keep(trace, "many_shapes")
    assert d.of("shapes") or d.of("rerecord")


def test_mutated_input():
    def bump(x):
        x.add_(1)
        return x * 2

    compiled = torch.compile(bump, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            compiled(torch.zeros(8, device=DEV))
    d = keep(trace, "mutated_input")
    assert len(d) > 0


def test_data_dependent_shape():
    def positive(x):
        return x[x > 0] * 2

    compiled = torch.compile(positive, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            compiled(torch.randn(64, device=DEV))
    d = keep(trace, "data_dependent_shape")
    assert len(d) > 0


def test_two_forwards_before_their_backwards():
    model = mlp()
    compiled = torch.compile(model, mode="reduce-overhead")
    with observe_torch() as trace:
        for _ in range(4):
            a = compiled(torch.randn(16, 32, device=DEV)).sum()
            b = compiled(torch.randn(16, 32, device=DEV)).sum()
            (a + b).backward()
    keep(trace, "pending_backward")
    forwards = [s for s in trace.steps if s.kind == "record" and "(forward)" in (s.function or "")]
    assert len(forwards) == 2 and forwards[1].parent == forwards[0].node  # the second under the first


def test_output_used_after_the_next_training_step():
    model = mlp()
    compiled = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=DEV)
    with pytest.raises(RuntimeError, match="overwritten"):
        with observe_torch() as trace:
            previous = None
            for _ in range(4):
                opt.zero_grad(set_to_none=True)
                out = compiled(x)
                out.sum().backward()
                opt.step()
                if previous is not None:
                    print(previous.sum())  # last step's output, overwritten by this step
                previous = out
    d = keep(trace, "training_overwritten")
    assert d.of("overwritten")


def test_graph_break_splits_the_model():
    def fn(x):
        y = torch.relu(x @ x.T)
        torch._dynamo.graph_break()
        return torch.tanh(y) + 1

    compiled = torch.compile(fn, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            compiled(torch.randn(16, 16, device=DEV))
    keep(trace, "graph_break")
    records = [s for s in trace.steps if s.kind == "record"]
    # two compiled graphs, one on each side of the break (torch names both partition_0)
    assert {s.reason.split("compile id ")[-1] for s in records} == {"0/0)", "1/0)"}
