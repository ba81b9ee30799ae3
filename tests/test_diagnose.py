"""cgviz.diagnose: findings with their evidence steps, numbers and fixes, on traces of cgviz's
own trees (sim workloads built for each finding), on the shipped GPU and torch.compile traces,
and from the command line."""

from __future__ import annotations

import json
import re

import pytest
import torch

import cgviz
from cgviz.cli import main
from cgviz.data import TORCH_DIR, gpu_trace, torch_trace


def data(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_a_healthy_run_gets_no_warning():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    for i in range(6):
        y = f(data(8, seed=i))
        del y
    diagnosis = cgviz.diagnose(tree)
    assert [f.severity for f in diagnosis] == ["info"] * len(diagnosis)
    coverage = diagnosis.of("coverage")[0]
    assert coverage.numbers["calls"] == 6 and coverage.numbers["replayed"] == 4
    assert coverage.numbers["per_function"] == {"f": {"warmup": 1, "record": 1, "execute": 4}}


def test_nothing_graphed_is_the_first_line():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * x.sum().item(), name="f")  # a host sync: never graphed
    for i in range(4):
        f(data(8, seed=i))
    diagnosis = cgviz.diagnose(tree)
    first = diagnosis.findings[0]
    assert first.kind == "graphed" and first.severity == "error"
    assert first.numbers["calls"] == 4 and first.numbers["replayed"] == 0
    assert diagnosis.text().splitlines()[0].startswith("error: no call of this run was replayed")
    assert ".item()" in first.suggestion


def test_eager_fallbacks_grouped_by_reason_with_every_call_as_evidence():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x, n: x * n, name="f")
    for i in range(3):
        f(data(4, seed=i), 3)  # a Python int argument: eager, the same reason every time
    eager = cgviz.diagnose(tree).of("eager")
    assert len(eager) == 1
    assert eager[0].numbers == {"function": "f", "calls": 3, "cause": eager[0].numbers["cause"]}
    assert eager[0].numbers["cause"].startswith("input 1 is an int, not a tensor")
    assert eager[0].evidence == [s.index for s in tree.trace.steps if s.kind == "eager"]
    assert "input 1 is an int" in eager[0].title and "functools.partial" in eager[0].suggestion


def test_rerecords_from_a_moved_static_input_name_the_cause_and_count():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x, w: x @ w, static=(1,), name="f")
    x = data(4, 8)
    weights = [data(8, 8, seed=s) for s in range(4)]
    for w in [weights[0], weights[0]] + weights[1:]:
        y = f(x, w)
        del y
    (finding,) = cgviz.diagnose(tree).of("rerecord")
    records = [s.index for s in tree.trace.steps if s.kind == "record"]
    assert finding.evidence == records and finding.numbers["records"] == 4
    assert finding.numbers["causes"] == {"a static input moved": 3}
    assert "copy_" in finding.suggestion


def test_output_held_across_steps_points_at_the_use_and_the_step_that_overwrote_it():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x + 1, name="f")
    kept = None
    for i in range(4):
        tree.mark_step()
        y = f(data(4, seed=i))
        if kept is not None:
            with pytest.raises(RuntimeError):
                f(kept)  # the previous step's output, passed on
        kept = y
    (finding, *_) = cgviz.diagnose(tree).of("overwritten")
    error = next(s for s in tree.trace.steps if s.kind == "error")
    began = max(s.index for s in tree.trace.steps[: error.index] if s.kind == "generation")
    assert finding.severity == "error" and finding.evidence == [error.index, began]
    assert "clone" in finding.suggestion


def test_pending_backward_is_found():
    tree = cgviz.Tree("sim")
    fwd = tree.wrap(lambda x: x * 2, name="fwd", mode="forward")
    bwd = tree.wrap(lambda g: g * 2, name="bwd", mode="backward")
    for i in range(3):
        a = fwd(data(4, seed=i))
        b = fwd(data(4, seed=i + 10))  # a second forward before the first backward
        bwd(a)
        bwd(b)
        del a, b
        tree.mark_step()
    (finding,) = cgviz.diagnose(tree).of("pending_backward")
    hits = [s.index for s in tree.trace.steps if "pending backward" in s.reason]
    assert finding.evidence == hits[:20] and finding.numbers["steps"] == len(hits)


def test_pending_backward_is_not_found_once_each_step_begins_with_mark_step():
    """The finding's own fix: forwards whose backward never runs (evaluation with grad on), each
    iteration begun with mark_step(). The generation steps say the saved outputs went invalid;
    no forward recorded a child of a waiting one."""
    tree = cgviz.Tree("sim")
    fwd = tree.wrap(lambda x: x * 2, name="fwd", mode="forward")
    for i in range(4):
        tree.mark_step()
        fwd(data(4, seed=i))
    assert any(s.kind == "generation" and "pending backward" in s.reason for s in tree.trace.steps)
    assert [s.kind for s in tree.trace.expanded() if s.function == "fwd"] == ["warmup", "record", "execute", "execute"]
    assert cgviz.diagnose(tree).of("pending_backward") == []


def test_several_shapes_count_graphs_and_their_memory():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    for n in (4, 8, 16):
        for _ in range(3):
            y = f(data(n))
            del y
    (finding,) = cgviz.diagnose(tree).of("shapes")
    assert finding.numbers["signatures"] == 3 and finding.numbers["graphs"] == 3
    assert sorted(finding.numbers["output_bytes"].values()) == [16, 32, 64]


def test_shipped_gpu_traces():
    static = cgviz.diagnose(gpu_trace("static_move"))
    (finding,) = static.of("rerecord")
    assert finding.numbers["records"] == 5 and finding.numbers["causes"] == {"a static input moved": 4}
    generations = cgviz.diagnose(gpu_trace("generations"))
    (over,) = generations.of("overwritten")
    trace = gpu_trace("generations")
    assert trace.steps[over.evidence[0]].kind == "error" and trace.steps[over.evidence[1]].kind == "generation"
    assert all(f.severity == "info" for f in cgviz.diagnose(gpu_trace("chain")))


def test_shipped_torch_compile_traces():
    cpu = cgviz.diagnose(torch_trace("torch_cpu_input"))
    # no call went through a tree: said first, with the fix from torch's message
    assert cpu.findings[0].kind == "graphed" and cpu.findings[0].severity == "error"
    assert cpu.text().startswith("error: no call of this run was replayed from a CUDA graph")
    assert "GPU" in cpu.findings[0].suggestion
    (skip,) = cpu.of("eager")  # torch's message, with the input and the source line it names
    assert "cpu device" in skip.title and skip.numbers["input"] and "GPU" in skip.suggestion
    assert skip.numbers["source"]["file"] == "tests/gpu/test_observe_torch.py"
    assert f"test_observe_torch.py:{skip.numbers['source']['line']} in " in skip.title
    over = cgviz.diagnose(torch_trace("torch_overwritten"))
    assert over.findings[0].kind == "graphed"  # nothing of that run replayed: said first
    (finding,) = over.of("overwritten")
    assert finding.evidence == [3, 1]
    dynamic = cgviz.diagnose(torch_trace("torch_dynamic_shapes"))
    (shapes,) = dynamic.of("shapes")  # torch's own node signatures ("torch graph id 3") are not counted
    assert shapes.numbers["compilations"] == 3


def test_diagnose_rejects_what_is_not_a_trace():
    with pytest.raises(TypeError, match="needs a cgviz Trace or Tree, not int"):
        cgviz.diagnose(5)


def test_cli_doctor_text_and_json(capsys):
    path = str(TORCH_DIR / "torch_overwritten.cgtrace.json")
    assert main(["doctor", path]) == 0
    text = capsys.readouterr().out
    assert text.startswith("info: no call of this run was replayed from a CUDA graph: 2 calls, 1 recorded")
    # steps counted from 1 in text, as the explorer shows them (evidence holds indices)
    assert "error: an output was used after a later run overwrote it: step 2 began generation 2 (before the call of cube [0/0] (inference)) (step 4)" in text
    assert main(["doctor", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["kind"] for f in data["findings"]][:2] == ["graphed", "overwritten"]


def test_cli_doctor_on_a_missing_file_is_one_line(capsys, tmp_path):
    assert main(["doctor", str(tmp_path / "nope.json")]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"cgviz doctor: trace file not found: {tmp_path / 'nope.json'}"


# -- torch.compile runs recorded on a GPU for each finding (tests/gpu/test_observe_findings.py) ----
def record_steps(trace, function=None):
    return [s.index for s in trace.steps if s.kind == "record" and (function is None or s.function == function)]


def test_torch_many_shapes_is_found_as_recompiles_with_every_record():
    trace = torch_trace("torch_many_shapes")
    (finding,) = [f for f in cgviz.diagnose(trace).of("shapes") if "compiled" in f.title]
    # one function, whatever compile id its graphs' names carry
    (function,) = {re.sub(r" \[[^\]]*\]", "", s.function) for s in trace.steps if s.kind == "record"}
    assert finding.numbers == {"function": function, "frame": 0, "compilations": 6, "records": 6}
    assert finding.evidence == record_steps(trace)
    assert "pad or bucket" in finding.suggestion and "saves the recompilations but not the graphs" in finding.suggestion


def test_torch_mutated_input_says_nothing_was_graphed_and_why():
    diagnosis = cgviz.diagnose(torch_trace("torch_mutated_input"))
    first = diagnosis.findings[0]
    assert first.kind == "graphed" and first.severity == "error" and first.numbers["replayed"] == 0
    assert diagnosis.text().startswith("error: no call of this run was replayed from a CUDA graph")
    skip = [f for f in diagnosis.of("eager") if "mutated inputs" in f.title]
    assert skip and "static" in skip[0].suggestion


def test_torch_pending_backward_is_seen_in_the_tree_shape():
    trace = torch_trace("torch_pending_backward")
    (finding,) = cgviz.diagnose(trace).of("pending_backward")
    forwards = [s for s in trace.steps if s.kind == "record" and "(forward)" in s.function]
    assert finding.evidence == [forwards[1].index] and forwards[1].parent == forwards[0].node


def test_torch_training_output_used_after_the_next_step():
    trace = torch_trace("torch_training_overwritten")
    (finding,) = cgviz.diagnose(trace).of("overwritten")
    error, began = (trace.steps[i] for i in finding.evidence)
    assert error.kind == "error" and began.kind == "generation" and began.index < error.index


def test_torch_graph_break_gets_no_false_recompile_finding():
    diagnosis = cgviz.diagnose(torch_trace("torch_graph_break"))
    assert all(f.severity == "info" for f in diagnosis), diagnosis.text()
    assert not diagnosis.of("shapes")


def test_rerecords_in_torchs_words_name_their_cause():
    """An observed trace words a failed check as torch does (its CheckInvariantStatus), beside the
    compile id of the graph: the cause is read from torch's words, not taken for a new compile."""
    from cgviz.trace.model import Step, Trace

    def record(i: int, node: int, why: str) -> Step:
        return Step(index=i, kind="record", generation=1, function="f [0/0] (inference)", node=node, parent=1,
                    reason=f"recording f [0/0] (inference) as a child of node 1 (compile id 0/0){why}")

    steps = [record(0, 2, ""),
             record(1, 3, "; node 2 could not replay: cudagraph managed tensor data pointer changed.\ninput name: "
                          "arg0_1. data pointer changed from 1024 to 2048. input stack trace: None"),
             record(2, 4, "; node 2 could not replay: expected dead indices before graph are live"),
             record(3, 5, "; node 2 could not replay: static input data pointer changed.\ninput name: arg1_1. "
                          "data pointer changed from 4096 to 8192. input stack trace: None")]
    (finding,) = cgviz.diagnose(Trace(steps=steps, meta={"backend": "torch.compile"})).of("rerecord")
    assert finding.numbers["causes"] == {"an input that was an output of the path moved": 1,
                                         "an output dead at recording is live now": 1, "a static input moved": 1}


def test_past_the_rerecord_limit_the_fix_is_that_of_what_made_it_record_again():
    """From torch 2.13 an output dead at recording and live again counts toward the re-record
    limit too: past it, the fix is to let go of outputs (or mark the step), not to keep inputs in
    place; and so for torch's own message, by the cause it names."""
    from cgviz.trace.reasons import CAUSE_FIXES, DEAD_LIVE, MANAGED_MOVED, MARK_STEP_FIX, STATIC_MOVED, fix_for

    tree = cgviz.Tree("sim", rules="2.15", rerecord_limit=0)
    f = tree.wrap(lambda x: (x + 1, x * 2), name="f")
    g = tree.wrap(lambda a: a - 1, name="g")
    x = data(4)
    for i in range(5):
        a, b = f(x)
        if i < 3:
            del b  # g is recorded while f's second output is dead ...
        g(a)
        del a
        b = None  # ... and later called while it is live
    eager = [e for e in cgviz.diagnose(tree).of("eager") if "was dead at recording and is live now" in e.numbers["cause"]]
    assert len(eager) == 1 and eager[0].suggestion == MARK_STEP_FIX
    limit = "skipping cudagraph due to function 0 exceeding max re-recording limit (=128) on cudagraph node 2 due to "
    assert fix_for(limit + "expected dead indices before graph are live.") == MARK_STEP_FIX
    assert fix_for(limit + "cudagraph managed tensor data pointer changed.\ninput name: x") == CAUSE_FIXES[MANAGED_MOVED]
    assert fix_for(limit + "static input data pointer changed.\ninput name: w") == CAUSE_FIXES[STATIC_MOVED]
    assert CAUSE_FIXES[DEAD_LIVE] == MARK_STEP_FIX
    assert "pass the outputs of an earlier graph on" in fix_for(limit.removesuffix(" due to ") + ".")


def test_an_output_fed_back_after_mark_step_names_mark_step_as_what_invalidated_it():
    """In a cgviz tree only mark_step() begins a generation: the finding says so, not that the
    call did."""
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x + 1, name="f")
    y = f(data(4))
    tree.mark_step()
    with pytest.raises(RuntimeError, match="overwritten by a subsequent run"):
        f(y)
    (finding,) = cgviz.diagnose(tree).of("overwritten")
    assert "mark_step() (step 2, generation 2) invalidated it" in finding.title
    assert "each call of a compiled function" not in finding.title
    assert finding.numbers["cause"] == "an output fed back into the next call was invalidated by the mark_step() before it"


@pytest.mark.parametrize("where", ["sim", "gpu"])
def test_an_output_kept_across_mark_steps_is_said_invalidated_by_the_mark_step_that_did_it(where):
    """The generations scenario keeps g's output of generation 4 and hands it to g after two more
    mark_step()s: the one that began generation 5 invalidated it, at a repeat of a folded block;
    not the last one, and not f's output that the last one invalidated."""
    from cgviz.scenarios import run_scenario

    trace = run_scenario("generations", device="sim").trace if where == "sim" else gpu_trace("generations")
    (found,) = cgviz.diagnose(trace).of("overwritten")
    began = trace.steps[found.evidence[1]]
    assert began.kind == "generation" and began.generation == 4 and trace.steps[began.index + 2].repeat == 2
    assert found.numbers["generation"] == 5 and found.numbers["cause"] == "an output kept across calls was overwritten"
    assert f"step {began.index + 1} (at a repeat of its block) began generation 5" in found.title
    assert "node 2" not in found.title
