"""Decisions torch.compile makes while compiling are steps of their own ("compile"), and an
"overwritten" error says who read the output: dynamo's real graph breaks (traced on the CPU with
the eager backend: dynamo breaks the graph whatever the backend) and real autograd backwards.
GPU-recorded traces of the same (examples/surprises) are tested in test_surprises.py.
"""

from __future__ import annotations

import torch

import cgviz
from cgviz.observe import naming
from cgviz.observe import torch_compile as tc
from cgviz.trace.diagnose import user_source
from helpers import line_of

HERE = __file__.rsplit("/", 1)[-1]


def branchy(x):
    y = x * 2
    if y.sum().item() > 0:
        return y + 1
    return y - 1


def test_a_graph_break_is_a_compile_step_with_the_users_line_and_dynamos_reason():
    torch._dynamo.reset()
    compiled = torch.compile(branchy, backend="eager")
    with tc.observe_torch() as trace:
        for _ in range(3):
            compiled(torch.ones(4))
    (step,) = [s for s in trace.steps if s.kind == "compile"]
    line = line_of(branchy, "if y.sum().item() > 0:")
    source = user_source(step.reason)
    assert source is not None and source["file"].endswith(HERE) and source["line"] == line
    assert source["function"] == "branchy" and source["code"] == "if y.sum().item() > 0:"
    assert step.reason.startswith("graph break in branchy") and "Tensor.item()" in step.reason

    (finding,) = cgviz.diagnose(trace).of("graph_break")
    assert finding.severity == "warning" and finding.evidence == [step.index]
    assert finding.numbers["graphs"] == 2 and finding.numbers["source"]["line"] == line
    assert "Tensor.item()" in finding.numbers["cause"]
    assert f"at {source['file']}:{line}" in finding.title and finding.title.startswith("branchy runs as 2 graphs")
    assert "torch.where" in finding.suggestion and "torch.cond" in finding.suggestion
    torch._dynamo.reset()


def test_the_graph_break_hook_goes_in_once_and_stays():
    """dynamo's translator class is changed once per process, not at every observation (see
    test_observe_classes_untouched.py); while nothing is observed the hook passes straight on."""
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    with tc.observe_torch():
        hooked = InstructionTranslatorBase.log_graph_break
    assert hooked.__module__ == "cgviz.observe._hooks"
    assert InstructionTranslatorBase.log_graph_break is hooked
    with tc.observe_torch():
        assert InstructionTranslatorBase.log_graph_break is hooked


def read_after_overwrite(y):
    raise RuntimeError("Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run.")


class ReadsInBackward(torch.autograd.Function):
    """A backward that fails the way torch's invalidated storage does when autograd reads it."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        read_after_overwrite(grad)


def test_an_overwritten_output_read_by_the_program_names_the_line():
    try:
        y = torch.ones(2)
        read_after_overwrite(y)  # the reading line
    except RuntimeError as exc:
        reason = naming.overwritten_reason(exc)
    source = user_source(reason)
    assert source["file"].endswith(HERE) and source["function"] == "read_after_overwrite"
    assert "the program read it" in reason and naming.OVERWRITTEN in reason


def test_an_overwritten_output_read_by_a_backward_says_autograd_read_it():
    x = torch.ones(2, requires_grad=True)
    loss = ReadsInBackward.apply(x).sum()
    try:
        loss.backward()
    except RuntimeError as exc:
        reason = naming.overwritten_reason(exc)
    assert "autograd's backward read it" in reason
    # the user's innermost frame: the backward they wrote (called from autograd's engine)
    assert user_source(reason)["function"] == "read_after_overwrite"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


def test_graphs_are_named_after_the_function_dynamo_compiled():
    """torch names every graph's code alike (partition_0); the frame dynamo compiled names it."""
    from cgviz.observe import _hooks

    torch._dynamo.reset()
    model, fn = torch.compile(Net()), torch.compile(branchy)
    with tc.observe_torch():
        observer = _hooks.ACTIVE[-1]
        model(torch.ones(4))
        fn(torch.ones(4))
        names = [observer.frame_name(f"{frame}/0", []) for frame in range(3)]
    assert names == ["Net.forward", "branchy", "torch_dynamo_resume_in_branchy_at_" + str(line_of(branchy, "if y"))]
    torch._dynamo.reset()


def test_two_compiled_modules_are_named_apart():
    """dynamo compiles every module's call through one code object (compile ids 0/0, 0/1, ...):
    each graph is named after its module."""
    from cgviz.observe import _hooks

    torch._dynamo.reset()
    encoder = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    head = torch.compile(torch.nn.Linear(4, 2))
    with tc.observe_torch():
        observer = _hooks.ACTIVE[-1]
        head(encoder(torch.ones(4)))
        names = [observer.frame_name(cid, []) for cid in ("0/0", "0/1")]
    assert names == ["Sequential.forward", "Linear.forward"]
    torch._dynamo.reset()
