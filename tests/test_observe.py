"""cgviz.observe_torch: the traces it recorded on a GPU read back,
hold no machine's absolute paths and say what torch's warmup ids mean."""

import json
import re
from pathlib import Path

import pytest

import cgviz.data
from cgviz.data import torch_trace, torch_trace_names
from cgviz.observe import _torch_layout as layout
from cgviz.observe.torch_compile import portable_path, portable_paths, start_observing, stop_observing


def test_bad_trace_level_is_a_clear_error():
    with pytest.raises(ValueError, match="'events' or 'full'"):
        start_observing("verbose")


def test_recorded_training_trace_has_the_backward_under_the_forward():
    trace = torch_trace("torch_training")
    records = [s for s in trace.steps if s.kind == "record"]
    fwd = [s for s in records if "(forward)" in s.function]
    bwd = [s for s in records if "(backward)" in s.function]
    assert fwd and bwd and bwd[0].parent == fwd[0].node
    assert trace.meta["backend"] == "torch.compile"


def test_recorded_traces_cover_the_cases():
    assert torch_trace_names() == [
        "torch_cpu_input", "torch_data_dependent_shape", "torch_dynamic_shapes", "torch_graph_break",
        "torch_inference", "torch_kernels", "torch_many_shapes", "torch_mutated_input", "torch_overwritten",
        "torch_pending_backward", "torch_replayed_generation", "torch_training", "torch_training_overwritten",
        "torch_two_devices",
    ]
    assert torch_trace("torch_overwritten").steps[-1].kind == "error"
    assert any(s.kind == "eager" and "skipping cudagraphs" in s.reason.lower() for s in torch_trace("torch_cpu_input").steps)
    # torch hands back the tensor a replay returned, holding the next replay's values, and raises
    # nothing: the generation that followed invalidated no output (measured on the GPU that recorded it)
    replayed = torch_trace("torch_replayed_generation")
    assert replayed.meta["measured"] == {"y1_before": [8.0] * 4, "y1_after": [27.0] * 4, "y1_is_y2": True}
    steps = replayed.steps
    last_replay = max(i for i, s in enumerate(steps) if s.kind == "execute")
    assert not any(s.kind == "error" for s in steps)
    assert all(not s.invalidated for s in steps if s.kind == "generation")
    assert any(s.kind == "generation" for s in steps[:last_replay]) and steps[last_replay].snapshot is not None
    dyn = torch_trace("torch_dynamic_shapes").last_snapshot()
    assert len([n for n in dyn.nodes if n.kind == "graph" and n.parent is None]) >= 3


def test_recorded_graphs_of_the_shipped_traces_say_their_kernels():
    """observe_torch at trace "full" read each graph torch recorded (tests/gpu/test_observe_kernels.py
    checks them against torch's profiler): every recorded node has its kernels, and the page's
    node panel gets them."""
    from cgviz.views.page_data import PageData

    trace = torch_trace("torch_training")
    recorded = {s.node for s in trace.steps if s.kind == "record"}
    profile = trace.meta["profile"]
    assert recorded and recorded == {int(k) for k in profile}
    for entry in profile.values():
        assert entry["kind"] == "graph" and sum(count for _, count in entry["kernels"]) > 0
    shown = PageData(trace, renderer="builtin").head()["profile"]
    backward = next(k for k, e in profile.items() if "(backward)" in e["function"])
    assert [k[1] for k in shown[backward]["kernels"]] == [count for _, count in profile[backward]["kernels"]]
    assert any(name.startswith("triton_") for name, _ in profile[backward]["kernels"])


def test_new_generation_check_agrees_with_torchs_own():
    """The observer reads the generation counters itself; torch's method must agree in every state."""
    import itertools

    from torch._inductor import cudagraph_trees as trees

    from cgviz.observe import _hooks
    from cgviz.observe import _torch_layout as layout

    own = trees.CUDAGraphTreeManager.__dict__
    names = ("can_start_new_generation", "in_new_torch_compile_invocation", "get_curr_generation", "user_invoked_mark_step")
    # torch's own methods (static ones included), on an object without a GPU behind it
    Manager = type("Manager", (), {name: own[name] for name in names})

    ended = []

    class Observer:  # what the wrapper tells the active observers
        def generation_began(self, manager):
            ended.append("generation")

        def path_ended(self, manager, before):
            ended.append(f"path end after {before}")

    hook = _hooks.wrap_path_clear(lambda m, *args, **kwargs: setattr(m, "current_node", None))
    saved = trees.MarkStepBox.mark_step_counter, trees.GenerationTracker.generation
    seen = set()
    _hooks.ACTIVE.append(Observer())
    try:
        for counter, generation, current, pending in itertools.product((0, -1, -2), (0, 3), (-2, -1, 0, 3), (False, True)):
            trees.MarkStepBox.mark_step_counter, trees.GenerationTracker.generation = counter, generation
            m = Manager()
            m.current_gen, m.running_forwards_with_pending_backwards = current, pending
            expected = m.can_start_new_generation()
            seen.add(expected)
            assert layout.starts_new_generation(m) == expected, (counter, generation, current, pending)
            m.current_node = "node 4"
            hook(m)  # the wrapper of clear_current_path_state_and_set_to_none reads the counters itself
            assert m.current_node is None
            assert ended.pop() == ("generation" if expected else "path end after node 4")
    finally:
        _hooks.ACTIVE.pop()
        trees.MarkStepBox.mark_step_counter, trees.GenerationTracker.generation = saved
    assert seen == {True, False}


def test_warmup_outputs_without_metadata_say_so_in_every_view():
    """torch keeps no shape or dtype for its warmup runs' outputs: no view may show '[] 0 B'."""
    from cgviz.views.html import to_html
    from cgviz.views.tree import builtin_tree_svg, to_dot
    from cgviz.views.page_data import page_data

    trace = torch_trace("torch_training")
    step = next(s for s in reversed(trace.steps) if s.snapshot and any(n.kind == "warmup" for n in s.snapshot.nodes))
    snap = step.snapshot
    warmups = [n for n in snap.nodes if n.kind == "warmup"]
    assert warmups and all(not o.described for n in warmups for o in n.outputs)
    graphs = [n for n in trace.last_snapshot().nodes if n.kind == "graph"]
    assert graphs and all(o.described for n in graphs for o in n.outputs)
    for text in (builtin_tree_svg(snap), to_dot(snap)):
        assert "0: shape not recorded" in text and "[] 0 B" not in text
    data = page_data(trace, [step.index])
    rows = [n[8] for n in data["nodes"] if n[0] == warmups[0].id][-1]
    assert rows and all(r[2] == "not recorded" and r[4] == "" for r in rows)
    page = to_html(trace, renderer="builtin")
    assert "not recorded" in page and "0: [] 0 B" not in page


# -- what the traces say: portable paths, torch's ids in plain words -------------------------------
DATA = Path(cgviz.data.__file__).parent
# an absolute path: a whole string or a word starting with "/", a directory that names the
# recording machine, an installed package's directory, or a Windows drive
MACHINE_DIRS = ("home", "usr", "root", "tmp")
LOOKS_ABSOLUTE = re.compile(
    r"""^/|(?:^|[\s"'(\[=,])/\w|/(?:""" + "|".join(MACHINE_DIRS)
    + r""")/|site-packages/|dist-packages/|\b[A-Za-z]:[\\/]"""
)


def strings_in(value):
    """Every string in a JSON value, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, str):
        yield value


def shipped_traces() -> list[Path]:
    files = sorted(DATA.glob("**/*.json"))
    assert {p.parent.name for p in files} == {"ddp", "gpu", "graphs", "surprises", "torch"} and len(files) >= 12
    return files


def test_no_shipped_trace_holds_an_absolute_path():
    found = [(p.name, s[:120]) for p in shipped_traces()
             for s in strings_in(json.loads(p.read_text(encoding="utf-8"))) if LOOKS_ABSOLUTE.search(s)]
    assert found == []


def test_the_absolute_path_check_sees_the_paths_torch_writes():
    for text in ('File "/srv/x/test_a.py", line 3', "/opt/conda/lib/python3.11/site-packages/torch/a.py",
                 "at C:\\Users\\me\\a.py", "(/srv/run/a.py)"):
        assert LOOKS_ABSOLUTE.search(text), text
    for text in ("torch/_inductor/cudagraph_trees.py:123", "warmup/record", "see https://pytorch.org/docs/x", "a / b"):
        assert not LOOKS_ABSOLUTE.search(text), text


def test_portable_path_keeps_what_means_something_on_another_machine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert portable_path("/opt/env/lib/python3.11/site-packages/torch/_inductor/cudagraph_trees.py") == (
        "torch/_inductor/cudagraph_trees.py")
    assert portable_path("/usr/lib/python3/dist-packages/torch/fx/graph.py") == "torch/fx/graph.py"
    assert portable_path(str(tmp_path / "tests" / "gpu" / "test_a.py")) == "tests/gpu/test_a.py"
    assert portable_path("/srv/someone/project/models/net.py") == "models/net.py"
    assert portable_path("C:\\Users\\someone\\project\\net.py") == "project/net.py"


def test_portable_paths_rewrites_paths_inside_a_reason(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reason = (f'skipping cudagraphs due to cpu device. Found from :\n   File "{tmp_path}/my model/net.py", line 9, in fn\n'
              "   at /opt/env/lib/python3.11/site-packages/torch/_inductor/cudagraph_trees.py:123 (warmup/record; "
              "see https://pytorch.org/docs/x)")
    out = portable_paths(reason)
    assert 'File "my model/net.py", line 9' in out
    assert "at torch/_inductor/cudagraph_trees.py:123 (warmup/record; see https://pytorch.org/docs/x)" in out
    assert not LOOKS_ABSOLUTE.search(out)


def test_observer_records_reasons_with_portable_paths(tmp_path):
    observer = start_observing("events")
    try:
        observer.step("eager", f'torch.compile skipped CUDA graphs: found from File "{tmp_path}/a/b/net.py", line 3')
    finally:
        trace = stop_observing(observer)
    (step,) = trace.steps
    assert str(tmp_path) not in step.reason and 'File "b/net.py", line 3' in step.reason


def test_shipped_traces_say_what_torchs_warmup_ids_mean():
    texts = [p.read_text(encoding="utf-8") for p in shipped_traces()]
    assert not [t for t in texts if "warmup id" in t]
    warmups = [n for name in torch_trace_names() for s in torch_trace(name).steps if s.snapshot
               for n in s.snapshot.nodes if n.kind == "warmup"]
    assert warmups and all("no CUDA graph" in n.signature and "-" not in n.signature for n in warmups)


def test_torch_node_id_words_warmups_as_runs_without_a_graph():
    from torch._inductor import cudagraph_trees as trees

    warmup = object.__new__(trees.CUDAWarmupNode)
    warmup.id = trees.GraphID(-2)  # torch counts warmup nodes down from -1: no graph id
    text = layout.torch_node_id(warmup)
    assert "warmup run 2" in text and "no CUDA graph" in text and "-2" not in text and "id" not in text
    graph = object.__new__(trees.CUDAGraphNode)
    graph.id = trees.GraphID(3)
    assert layout.torch_node_id(graph).endswith("graph id 3")
