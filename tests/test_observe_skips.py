"""torch's reasons for running a compiled graph without CUDA graphs, joined to the calls they
affect and named after the graph they are about.

torch's tree manager needs a GPU to warm up, record or replay, but the calls it runs eagerly
need none: these tests run torch's own manager code (add_function, run, _run and its mutation
check) on a manager object made without a device, with a graph and stack traces that torch's
own tracing made from the functions below. A graph whose CUDA graphs torch turns off at compile
time is played by a stand-in with the compiled graph's method names, fed a message made by
torch's own check. tests/gpu/test_observe_findings.py runs the same on a GPU.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import re
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._guards import CompileContext, CompileId, compile_context
from torch._inductor import cudagraph_trees as trees
from torch._inductor.cudagraph_utils import check_multiple_devices_or_any_cpu_nodes, get_placeholder_info
from torch._inductor.utils import BoxedBool

import cgviz
from cgviz.data import torch_trace
from cgviz.observe import _torch_layout as layout
from cgviz.observe import torch_compile as tc
from cgviz.trace.diagnose import stack_frames, torch_skip
from cgviz.trace.model import Step, Trace
from helpers import line_of

HERE = Path(__file__).name


def bump(x):
    x.add_(1)
    return x * 2


def scaled(x, scale):
    return (x * 2).sum(0) + scale.to(x.device)


def traced(fn, *inputs):
    """The graph torch's AOT tracing makes of fn (as inductor receives it): nodes keep the
    stack trace of the user code they came from."""
    captured = {}

    def keep(gm, example_inputs):
        captured["gm"] = gm
        return gm

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=aot_autograd(fw_compiler=keep))(*inputs)
    finally:
        torch._dynamo.reset()
    return captured["gm"]


@pytest.fixture(scope="module")
def bump_graph():
    return traced(bump, torch.zeros(4))


@pytest.fixture(autouse=True)
def containers_put_back(hold_manager):
    """cpu_manager's managers are held by device 0's container; torch's table is put back."""


def cpu_manager():
    """torch's tree manager without its CUDA parts (the state __init__ gives it otherwise), held
    by device 0's container as torch holds the manager it makes."""
    m = object.__new__(trees.CUDAGraphTreeManager)
    trees.get_container(0).tree_manager = m
    m.roots, m.ids_to_funcs, m.ids_to_stack_traces = defaultdict(list), {}, {}
    m.warmed_up_functions, m.warned_functions, m.warned_mutation = set(), set(), set()
    m.graph, m.cuda_graphs_thread_pool, m.device_index = object(), None, 0
    m.graph_counter, m.func_counter = itertools.count(0), itertools.count(0)
    m.warmup_node_counter = itertools.count(-1, -1)
    m.non_cudagraph_managed_mutation_hint = defaultdict(dict)
    m.num_rerecord = defaultdict(lambda: defaultdict(int))
    m.path_state, m.current_node, m.current_gen = trees.ExecutionState.NONE, None, -1
    m.id_to_mode, m.id_to_compile_id = {}, {}
    m.running_forwards_with_pending_backwards, m.mode = False, None
    return m


def add(manager, gm, frame=0, recompile=0):
    """Hand gm to the manager as inductor does (the call runs it once); returns the function."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    assert trees.get_container(manager.device_index).get_tree_manager() is manager  # as cudagraphify_impl asks

    def partition_0(inputs):  # torch's name for the code of a compiled graph
        return list(gm(*inputs))

    since_2_14 = {"kernel_free_cudagraph": False, "user_visible_output_idxs": tuple(range(len(output.args[0])))}
    arguments = inspect.signature(trees.CUDAGraphTreeManager.add_function).parameters
    fn, _ = manager.add_function(
        partition_0, [torch.zeros(4)], [], [a.meta.get("stack_trace") for a in output.args[0]],
        trees.CompilationMode.INFERENCE, (), tuple(get_placeholder_info(gm.graph)), (0,),
        compile_id=CompileId(frame_id=frame, frame_compile_id=recompile),
        **{name: value for name, value in since_2_14.items() if name in arguments},
    )
    return fn


# -- a graph that writes its input in place: torch decides at its first call ------------------------
def test_the_skip_message_is_joined_to_every_call_it_affected(bump_graph):
    manager = cpu_manager()
    with tc.observe_torch("events") as trace:
        fn = add(manager, bump_graph)  # its first call
        for _ in range(3):
            fn([torch.zeros(4)])
    eager = [s for s in trace.expanded() if s.kind == "eager"]
    assert len(eager) == 4 and {s.function for s in eager} == {"bump [0/0] (inference)"}
    line = line_of(bump, "x.add_(1)")
    for step in eager:  # torch's whole message, the stack it names included, on each call
        assert "skipping cudagraphs due to mutated inputs (1 instances)" in step.reason
        assert f'{HERE}", line {line}, in bump' in step.reason and "x.add_(1)" in step.reason
    assert "compiled_before_observing" not in trace.meta

    diagnosis = cgviz.diagnose(trace)
    assert diagnosis.text().splitlines()[0].startswith("error: no call of this run was replayed")
    (finding,) = diagnosis.of("eager")
    assert finding.evidence == [s.index for s in trace.steps if s.kind == "eager"]
    assert finding.numbers["calls"] == 4 and finding.numbers["cause"] == "mutated inputs (1 instances)"
    source = finding.numbers["source"]
    assert Path(source["file"]).name == HERE and source["line"] == line
    assert source["function"] == "bump" and source["code"] == "x.add_(1)"
    assert f"{HERE}:{line} in bump: x.add_(1)" in finding.title
    assert "static" in finding.suggestion


def test_a_graph_compiled_before_observing_gets_no_invented_reason(bump_graph):
    manager = cpu_manager()
    fn = add(manager, bump_graph)  # compiled, called and decided on before observing
    with tc.observe_torch("events") as trace:
        for _ in range(3):
            fn([torch.zeros(4)])
    (step,) = trace.steps
    assert step.kind == "eager" and step.repeat == 3 and step.function == "bump [0/0] (inference)"
    # what torch's state says now, and that its message came before: no source line is made up
    assert "mutates an input in place that is neither static" in step.reason
    assert "before observing began" in step.reason and not re.search(r"line \d", step.reason)
    assert trace.meta["compiled_before_observing"] == ["bump [0/0] (inference)"]

    diagnosis = cgviz.diagnose(trace)
    (eager,) = diagnosis.of("eager")
    assert eager.numbers == {"function": "bump [0/0] (inference)", "calls": 3, "decided": "before observing"}
    assert "enter cgviz.observe_torch() before the first call" in eager.suggestion
    assert "torch._dynamo.reset()" in eager.suggestion and "static" in eager.suggestion
    (late,) = diagnosis.of("before_observing")
    assert late.numbers == {"functions": ["bump [0/0] (inference)"]} and late.evidence == [0]


def test_a_second_graph_of_the_function_keeps_its_own_message(bump_graph):
    """Messages are kept per graph: a recompilation that runs eagerly says its own."""
    manager = cpu_manager()
    with tc.observe_torch("events") as trace:
        first = add(manager, bump_graph, recompile=0)
        again = add(manager, bump_graph, recompile=1)
        first([torch.zeros(4)])
        again([torch.zeros(4)])
    names = [s.function for s in trace.expanded() if s.kind == "eager"]
    assert names == ["bump [0/0] (inference)", "bump [0/1] (inference)"] * 2
    assert all("Found from" in s.reason for s in trace.steps)


# -- names: the compile id tells torch's graphs apart ---------------------------------------------
def function(manager, name, frame, recompile, mode, stacks):
    fid = trees.FunctionID(len(manager.ids_to_funcs))
    manager.ids_to_funcs[fid] = trees.WrappedFunction(
        type("Code", (), {"__name__": name})(), [], fid, (), (), ())
    manager.id_to_mode[fid] = getattr(trees.CompilationMode, mode.upper())
    manager.id_to_compile_id[fid] = CompileId(frame_id=frame, frame_compile_id=recompile)
    manager.ids_to_stack_traces[fid] = stacks
    return fid


def test_graphs_of_a_graph_break_get_different_names():
    manager = cpu_manager()
    before = '  File "model.py", line 3, in fn\n    y = torch.relu(x @ x.T)\n'
    after = '  File "model.py", line 5, in fn\n    return torch.tanh(y) + 1\n'
    observer = tc.start_observing("events")
    try:
        names = [observer.label(manager, fid) for fid in (
            function(manager, "partition_0", 0, 0, "inference", [before]),
            function(manager, "partition_0", 1, 0, "inference", [after]),
            function(manager, "partition_0", 1, 1, "inference", [None, after]),  # a recompilation
            function(manager, "partition_1", 1, 1, "inference", [after]),  # its second partition
            function(manager, "partition_0", 2, 0, "forward", [before]),
            function(manager, "partition_0", 2, 0, "backward", [None]),  # no stack: its frame's name
            function(manager, "partition_0", 3, 0, "inference", []),  # none at all: torch's name
        )]
    finally:
        tc.stop_observing(observer)
    assert names == [
        "fn [0/0] (inference)", "fn [1/0] (inference)", "fn [1/1] (inference)", "fn partition_1 [1/1] (inference)",
        "fn [2/0] (forward)", "fn [2/0] (backward)", "partition_0 [3/0] (inference)",
    ]


def step(index, kind, function=None, node=None, reason="", parent=None):
    return Step(index=index, kind=kind, reason=reason, generation=1, function=function, node=node, parent=parent)


def test_diagnose_keeps_graphs_of_a_break_apart_and_counts_recompiles_per_frame():
    a0, a1, b0 = "fn [0/0] (inference)", "fn [0/1] (inference)", "fn [1/0] (inference)"
    trace = Trace(steps=[
        step(0, "record", a0, 0, f"recording {a0} as a new root (compile id 0/0)"),
        step(1, "record", b0, 1, f"recording {b0} as a child of node 0 (compile id 1/0)", parent=0),
        step(2, "record", a1, 2, f"recording {a1} as a new root (compile id 0/1)"),
        step(3, "execute", a0, 0), step(4, "execute", b0, 1, parent=0), step(5, "execute", a1, 2),
    ], meta={"backend": "torch.compile"})
    diagnosis = cgviz.diagnose(trace)
    (coverage,) = diagnosis.of("coverage")
    assert sorted(coverage.numbers["per_function"]) == [a0, a1, b0]
    (recompiled,) = diagnosis.of("shapes")
    assert recompiled.numbers == {"function": "fn (inference)", "frame": 0, "compilations": 2, "records": 2}
    assert recompiled.evidence == [0, 2]
    assert not diagnosis.of("rerecord")  # each compilation is a graph of its own, recorded once


def test_graphs_of_a_break_recorded_under_one_name_are_told_apart_by_compile_id():
    """Traces recorded before graphs were named apart call both sides of a break partition_0:
    their record and execute steps are told apart by the compile id of their recording; warmups
    name no graph and keep the name. Recompilations of one frame alone are left as they were."""
    old = "partition_0 (inference)"
    trace = Trace(steps=[
        step(0, "warmup", old, 0), step(1, "warmup", old, 1, parent=0),
        step(2, "record", old, 2, f"recording {old} as a new root (compile id 0/0)"),
        step(3, "record", old, 3, f"recording {old} as a child of node 2 (compile id 1/0)", parent=2),
        step(4, "execute", old, 2), step(5, "execute", old, 3, parent=2),
    ], meta={"backend": "torch.compile"})
    (coverage,) = cgviz.diagnose(trace).of("coverage")
    assert coverage.numbers["per_function"] == {
        "partition_0 (inference)": {"warmup": 2},
        "partition_0 [0/0] (inference)": {"record": 1, "execute": 1},
        "partition_0 [1/0] (inference)": {"record": 1, "execute": 1},
    }
    assert [s.function for s in trace.steps] == [old] * 6  # the trace itself is left as it is
    recompiled = Trace(steps=[
        step(0, "record", old, 0, f"recording {old} as a new root (compile id 0/0)"),
        step(1, "record", old, 1, f"recording {old} as a new root (compile id 0/1)"),
    ])
    (graphed, *_) = cgviz.diagnose(recompiled).findings  # nothing replayed: said first, per function
    assert graphed.kind == "graphed" and list(graphed.numbers["per_function"]) == [old]


def test_shipped_graph_break_trace_shows_its_two_graphs_apart():
    (coverage,) = cgviz.diagnose(torch_trace("torch_graph_break")).of("coverage")
    graphs = {name for name, calls in coverage.numbers["per_function"].items() if calls.get("record")}
    assert len(graphs) == 2 and [n for n in graphs if "[0/0]" in n] and [n for n in graphs if "[1/0]" in n]


# -- a graph whose CUDA graphs torch turns off while compiling it -----------------------------------
class CompiledGraph:
    """Plays torch's compiled graph: its __init__ logs why CUDA graphs are skipped (as torch's
    does for a reason found while lowering), post_compile turns the graph's cudagraphs box off,
    and each call goes through current_callable."""

    def __init__(self, reason, mode="inference"):
        self.fx_kwargs = {"is_backward": mode == "backward", "is_inference": mode == "inference"}
        self.current_callable = self.run
        self.reason = reason
        if reason:
            importlib.import_module(layout.OUTPUT_CODE_MODULE).log_cudagraph_skip_and_bump_counter(
                f"skipping cudagraphs due to {reason}")

    @staticmethod
    def run(inputs):
        return [inputs[0] * 2]

    def post_compile(self, example_inputs, constants, graph_kwargs):
        if self.reason or graph_kwargs["off"]:
            BoxedBool.disable(graph_kwargs["cudagraphs"])

    def __call__(self, inputs):
        return self.current_callable(inputs)


def compile_graph(frame, reason, mode="inference", box=None, off=False):
    with compile_context(CompileContext(CompileId(frame_id=frame, frame_compile_id=0))):
        graph = CompiledGraph(reason, mode)
        graph.post_compile([], None, {"cudagraphs": BoxedBool(True) if box is None else box, "off": off})
    return graph


@pytest.fixture
def cpu_reason(monkeypatch):
    """torch's own message for a graph with a CPU input, and the compiled graph class played."""
    gm = traced(scaled, torch.randn(8, 8), torch.ones(8))
    scale = [n for n in gm.graph.nodes if n.op == "placeholder"][1]
    monkeypatch.setattr(importlib.import_module(layout.OUTPUT_CODE_MODULE), layout.COMPILED_GRAPH_CLASS, CompiledGraph)
    return check_multiple_devices_or_any_cpu_nodes({torch.device("cpu"): scale})


def test_a_graph_skipped_at_compile_time_has_its_calls_joined(cpu_reason):
    with tc.observe_torch("events") as trace:
        box = BoxedBool(True)  # one box for a graph's forward and backward, as torch makes it
        forward = compile_graph(0, cpu_reason, "forward", box)
        backward = compile_graph(0, None, "backward", box)  # torch says nothing more for it
        quiet = compile_graph(1, None, off=True)  # no CUDA graphs asked for: torch says nothing
        assert forward.current_callable != forward.run and quiet.current_callable == quiet.run
        for _ in range(3):
            forward([torch.ones(2)])
            backward([torch.ones(2)])
            quiet([torch.ones(2)])
    expanded = [s for s in trace.expanded() if s.kind == "eager"]
    assert [s.function for s in expanded] == ["scaled [0/0] (forward)", "scaled [0/0] (backward)"] * 3
    line = line_of(scaled, "scale.to(x.device)")
    assert all(f'{HERE}", line {line}, in scaled' in s.reason for s in expanded)
    assert "its forward" in expanded[1].reason
    # the graphs' own callables are back once observing stops
    assert forward.current_callable == forward.run and backward.current_callable == backward.run

    (first, *_) = cgviz.diagnose(trace).findings
    assert first.kind == "graphed" and first.severity == "error"
    eager = cgviz.diagnose(trace).of("eager")
    assert [f.numbers["function"] for f in eager] == ["scaled [0/0] (forward)", "scaled [0/0] (backward)"]
    assert all(f.numbers["input"] == "arg1_1" and f.numbers["source"]["line"] == line for f in eager)
    assert eager[0].evidence == [s.index for s in trace.steps
                                 if s.function == "scaled [0/0] (forward)" and s.kind == "eager"]
    # torch's decision is a compile-time step of its own, before the graph's first call
    (decided, backward_off) = [s for s in trace.steps if s.kind == "compile"]
    assert decided.function == "scaled [0/0] (forward)" and "compiled without CUDA graphs" in decided.reason
    assert backward_off.function == "scaled [0/0] (backward)" and "its forward" in backward_off.reason
    assert decided.index < eager[0].evidence[0] and first.evidence[0] == decided.index
    assert "cpu device (arg1_1)" in first.title and first.numbers["source"]["line"] == line
    assert "GPU" in eager[0].suggestion


def test_a_skip_message_joined_to_no_graph_is_a_step_of_its_own(cpu_reason):
    with tc.observe_torch("events") as trace:
        with compile_context(CompileContext(CompileId(frame_id=0, frame_compile_id=0))):
            CompiledGraph(cpu_reason)  # its compilation never finishes
    (step,) = trace.steps
    assert step.kind == "compile" and step.function is None and "cpu device (arg1_1)" in step.reason
    (first, *_) = cgviz.diagnose(trace).findings
    assert first.kind == "graphed" and first.severity == "error" and first.evidence == [0]
    assert first.numbers["cause"] == "cpu device (arg1_1)"
    assert first.numbers["source"]["line"] == line_of(scaled, "scale.to(x.device)")
    assert "GPU" in first.suggestion


def test_the_compiled_graph_members_the_observer_uses_exist():
    graph_cls = getattr(importlib.import_module(layout.OUTPUT_CODE_MODULE), layout.COMPILED_GRAPH_CLASS)
    source = inspect.getsource(graph_cls)
    for name in layout.COMPILED_GRAPH_MEMBERS:
        assert hasattr(graph_cls, name) or f"self.{name} =" in source, name
    assert "cudagraphs" in inspect.getsource(graph_cls.post_compile)
    assert isinstance(layout.skip_count(), int)
    with compile_context(CompileContext(CompileId(frame_id=4, frame_compile_id=2))):
        assert layout.current_compile_id() == "4/2"
    assert layout.current_compile_id() == ""


# -- torch's messages, parsed --------------------------------------------------------------------
@pytest.mark.parametrize("message, cause, name, source", [
    ('skipping cudagraphs due to skipping cudagraphs due to cpu device (arg1_1). Found from : \n'
     '   File "net.py", line 126, in fn\n    return (x * 2).sum(0) + scale.to(x.device)\n',
     "cpu device (arg1_1)", ("input", "arg1_1"), ("net.py", 126, "fn", "return (x * 2).sum(0) + scale.to(x.device)")),
    ('skipping cudagraphs due to disabling cudagraphs due to incompatible op aten.nonzero.default Found from '
     '  File "a/net.py", line 4, in forward\n    y = self.inner(x)\n  File "a/inner.py", line 9, in forward\n'
     '    return x[x > 0]\n           ^^^^^\n',
     "incompatible op aten.nonzero.default", ("operation", "aten.nonzero.default"),
     ("a/inner.py", 9, "forward", "return x[x > 0]")),
    ('skipping cudagraph due to function 3 exceeding max re-recording limit (=50) on cudagraph node 7 due to '
     'static input data pointer changed.\ninput name: arg0_1. data pointer changed from 1 to 2. input stack trace: '
     '  File "train.py", line 20, in step\n    w = w.clone()\n.',
     "function 3 exceeding max re-recording limit (=50) on cudagraph node 7 due to static input data pointer changed",
     ("input", "arg0_1"), ("train.py", 20, "step", "w = w.clone()")),
    ("skipping cudagraphs due to ['non-Tensor inputs']", "['non-Tensor inputs']", ("input", None), None),
])
def test_torchs_skip_messages_are_parsed(message, cause, name, source):
    parsed = torch_skip(f"f [0/0] (inference) ran eagerly: torch.compile skipped CUDA graphs: {message}")
    assert parsed["cause"] == cause and parsed[name[0]] == name[1]
    if source is None:
        assert parsed["source"] is None
    else:
        assert tuple(parsed["source"][k] for k in ("file", "line", "function", "code")) == source
    assert torch_skip("f runs eagerly: input 1 is an int") is None


def test_stack_frames_are_read_outermost_first():
    frames = stack_frames('  File "a.py", line 1, in outer\n    inner()\n  File "b.py", line 2, in inner\n')
    assert [(f["file"], f["line"], f["function"], f["code"]) for f in frames] == [
        ("a.py", 1, "outer", "inner()"), ("b.py", 2, "inner", "")]


def test_nothing_seen_after_torch_skipped_before_observing_is_said_first():
    trace = Trace(steps=[], meta={"backend": "torch.compile", "cudagraph_skips_before_observing": 2})
    diagnosis = cgviz.diagnose(trace)
    assert diagnosis.text().startswith("warning: no call of this run was replayed from a CUDA graph")
    assert "skipped CUDA graphs 2 times" in diagnosis.findings[0].title
    assert "before the first call" in diagnosis.findings[0].suggestion
    assert cgviz.diagnose(Trace(steps=[], meta={"backend": "torch.compile"})).findings == []


def test_the_compiled_graph_class_is_hooked_once_and_the_managers_class_never():
    graph_cls = getattr(importlib.import_module(layout.OUTPUT_CODE_MODULE), layout.COMPILED_GRAPH_CLASS)
    add_function = trees.CUDAGraphTreeManager.add_function
    with pytest.raises(KeyError):
        with tc.observe_torch("events"):
            hooked = graph_cls.post_compile
            assert hooked.__module__ == "cgviz.observe._hooks"
            assert trees.CUDAGraphTreeManager.add_function is add_function
            raise KeyError("user error")
    assert graph_cls.post_compile is hooked and trees.CUDAGraphTreeManager.add_function is add_function