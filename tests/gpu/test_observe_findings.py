"""torch.compile(mode="reduce-overhead") runs that go wrong in the ways users ask about, observed
and diagnosed: re-recording for many shapes, a mutated input (observed from its first call, and
compiled before observing began), an op with a data-dependent shape, two forwards before their
backwards, an output used after the next training step, a graph break.
With CGVIZ_TRACE_DIR set, each trace is kept as data (cgviz/data/torch) for machines without a GPU."""

from pathlib import Path

import pytest
import torch

import cgviz
from cgviz.observe.torch_compile import observe_torch
from helpers import keep_trace, line_of, mlp

DEV = "cuda"
pytestmark = pytest.mark.usefixtures("fresh_dynamo")
HERE = Path(__file__).name


def keep(trace, name):
    """Save the trace as data (helpers.keep_trace) and show its diagnosis."""
    keep_trace(trace, f"torch_{name}")
    diagnosis = cgviz.diagnose(trace)
    print(f"\n== {name}\n{diagnosis.text()}")
    return diagnosis


def test_many_shapes():
    model = mlp(DEV)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    with torch.no_grad(), observe_torch() as trace:
        for rnd in range(3):
            for n in (2, 3, 5, 7, 11, 13):
                compiled(torch.randn(n, 32, device=DEV))
    d = keep(trace, "many_shapes")
    # six input shapes and dynamic=False: six compilations, each recording a graph of its own
    (shapes,) = d.of("shapes")
    assert shapes.numbers["compilations"] == 6 and shapes.numbers["records"] == 6
    assert not d.of("rerecord")


def bump(x):
    x.add_(1)
    return x * 2


def test_mutated_input():
    compiled = torch.compile(bump, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            compiled(torch.zeros(8, device=DEV))
    d = keep(trace, "mutated_input")
    assert d.text().splitlines()[0].startswith("error: no call of this run was replayed")
    # torch's message, with the source line it names, joined to every call it affected
    (skip,) = d.of("eager")
    eager = [s for s in trace.steps if s.kind == "eager"]
    assert skip.evidence == [s.index for s in eager] and skip.numbers["calls"] == 4
    assert skip.numbers["function"].startswith("bump [0/0]") and "mutated inputs" in skip.numbers["cause"]
    line = line_of(bump, "x.add_(1)")
    assert Path(skip.numbers["source"]["file"]).name == HERE and skip.numbers["source"]["line"] == line
    assert f"{HERE}:{line} in bump: x.add_(1)" in skip.title
    assert "compiled_before_observing" not in trace.meta


def test_mutated_input_compiled_before_observing_says_so():
    compiled = torch.compile(bump, mode="reduce-overhead")
    with torch.no_grad():
        compiled(torch.zeros(8, device=DEV))  # compiled, and torch's decision said, before observing
        with observe_torch() as trace:
            for _ in range(3):
                compiled(torch.zeros(8, device=DEV))
    eager = [s for s in trace.steps if s.kind == "eager"]
    assert eager and all("before observing began" in s.reason and "Found from" not in s.reason for s in eager)
    assert "neither static (a parameter, a buffer, a tensor marked static) nor an output" in eager[0].reason
    assert trace.meta["compiled_before_observing"] == [eager[0].function]
    d = cgviz.diagnose(trace)
    (skip,) = d.of("eager")
    assert skip.numbers["decided"] == "before observing"
    assert "enter cgviz.observe_torch() before the first call" in skip.suggestion
    assert d.of("before_observing")


def test_cpu_input_compiled_before_observing_is_counted():
    def fn(x, scale):
        return x * 2 + scale.to(x.device)

    compiled = torch.compile(fn, mode="reduce-overhead")
    x = torch.randn(8, device=DEV)
    patch = {"graph_partition": False} if hasattr(torch._inductor.config, "graph_partition") else {}
    with torch._inductor.config.patch(patch), torch.no_grad():
        compiled(x, torch.ones(8))  # torch skips CUDA graphs for it here, before observing
        with observe_torch() as trace:
            compiled(x, torch.ones(8))
    assert trace.steps == [] and trace.meta["cudagraph_skips_before_observing"] >= 1
    first = cgviz.diagnose(trace).findings[0]
    assert first.kind == "graphed" and "before observing began" in first.title
    assert "before the first call" in first.suggestion


def test_data_dependent_shape():
    def positive(x):
        return x[x > 0] * 2

    compiled = torch.compile(positive, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            compiled(torch.randn(64, device=DEV))
    d = keep(trace, "data_dependent_shape")
    # dynamo breaks the graph at the op whatever the values: two graphs, the break at its line
    (graph_break,) = d.of("graph_break")
    assert graph_break.numbers["graphs"] == 2
    source = graph_break.numbers["source"]
    assert Path(source["file"]).name == HERE and source["line"] == line_of(positive, "x[x > 0]")


def test_two_forwards_before_their_backwards():
    model = mlp(DEV)
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
    model = mlp(DEV)
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
    (overwritten,) = d.of("overwritten")
    line = line_of(test_output_used_after_the_next_training_step, "print(previous.sum())")
    assert f"{HERE}:{line}" in overwritten.title


def test_graph_break_splits_the_model():
    def fn(x):
        y = torch.relu(x @ x.T)
        torch._dynamo.graph_break()
        return torch.tanh(y) + 1

    compiled = torch.compile(fn, mode="reduce-overhead")
    with torch.no_grad(), observe_torch() as trace:
        for _ in range(4):
            compiled(torch.randn(16, 16, device=DEV))
    d = keep(trace, "graph_break")
    records = [s for s in trace.steps if s.kind == "record"]
    # two compiled graphs, one on each side of the break (torch names the code of both partition_0)
    assert {s.reason.split("compile id ")[-1] for s in records} == {"0/0)", "1/0)"}
    names = {s.function for s in records}
    assert len(names) == 2 and {n for n in names if "[0/0]" in n} and {n for n in names if "[1/0]" in n}
    # every call is of one of the two graphs, by name, warmups included
    calls = {s.function for s in trace.steps if s.kind in ("warmup", "record", "execute")}
    assert calls == names
    (coverage,) = d.of("coverage")
    assert set(coverage.numbers["per_function"]) == names
    assert not d.of("shapes") and not d.of("rerecord")
