"""More of what a shared trace file, a command line or a magic's arguments may hold, beyond
test_hostile_files.py and test_trace_robustness.py: a small file whose snapshot deltas ask for
gigabytes, folded blocks that overlap, reasons whose numbers are too long for int() or whose text
makes a pattern scan it again and again, a trace of several trees where a step names none,
empty and NUL-holding paths, a symbolic link to a pipe, a FIFO given as the program to run, a byte
order mark, and what Graphviz prints when it fails.

Each is refused in one line naming the problem, or read and shown as it is. Where the failure
was a hang, the check runs in a process of its own under a timeout only a hang reaches.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cgviz.cli import main
from cgviz.trace.chrome_trace import to_chrome_trace
from cgviz.trace.diagnose import diagnose
from cgviz.trace.io import TraceFormatError, check_save_target, load_trace, loads
from cgviz.trace.lanes import tree_keys
from cgviz.trace.model import Step, Trace
from cgviz.trace.reasons import OVERWRITTEN, SKIPPED
from cgviz.views.page_data import page_data
from test_trace_io import hand_trace, v1_dict, write_json

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "cgviz" / "data"
TIMEOUT = 60  # seconds: what each command here takes is a second or two; only a hang reaches it
LONG = "9" * 5000  # more digits than int() converts (4300)


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    """`python -c code args` in a process of its own, under TIMEOUT."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=TIMEOUT, env=env)


def one_line_error(capsys: Any, command: str, *words: str) -> str:
    """What a command printed on stderr: one line, 'cgviz COMMAND: ...', holding `words`."""
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cgviz {command}: ") and "\n" not in err and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


# -- snapshot deltas: a few bytes of file must not ask for gigabytes -------------------------------
def delta_bomb(refs: int, snapshots: int) -> dict:
    """A layout-2 trace whose first snapshot lists one node `refs` times and whose every later
    snapshot entry copies that whole run ([0, refs]): the file grows by bytes, memory by `refs`."""
    node = {"id": 0, "function": "f", "kind": "warmup", "parent": None, "children": [], "generation": 1,
            "replays": 0, "outputs": []}
    first = {"nodes": [0] * refs, "current_node": None, "path": [], "state": "none", "generation": 1}
    later = {"nodes": [[0, refs]], "current_node": None, "path": [], "state": "none", "generation": 1}
    steps = [{"index": i, "kind": "warmup", "reason": "r", "generation": 1, "snapshot": i} for i in range(snapshots)]
    return {"format": "cgviz-trace", "schema_version": 2, "meta": {},
            "tables": {"snapshots": [first] + [later] * (snapshots - 1), "nodes": [node], "outputs": [],
                       "segments": [], "blocks": []}, "steps": steps}


def test_snapshot_deltas_holding_more_than_a_file_within_the_limit_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CGVIZ_MAX_FILE_MB", "1")  # 131,072 references at most: a 1 MiB file's worth
    path = write_json(tmp_path / "bomb.cgtrace.json", delta_bomb(20_000, 10))  # 200,000 from 200 kB
    with pytest.raises(TraceFormatError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: step 6 snapshot: field 'nodes[0]' makes the snapshots hold more than "
                              "131,072 nodes"), message
    assert "CGVIZ_MAX_FILE_MB" in message
    assert main(["info", str(path)]) == 1
    one_line_error(capsys, "info", "131,072")
    loaded = loads(json.dumps(delta_bomb(20_000, 6)))  # 120,000: within the limit
    assert len(loaded.steps[-1].snapshot.nodes) == 20_000


def test_a_run_too_long_in_one_snapshot_is_refused_before_it_is_copied(monkeypatch):
    monkeypatch.setenv("CGVIZ_MAX_FILE_MB", "1")
    data = delta_bomb(1_000, 2)
    data["tables"]["snapshots"][1] = dict(data["tables"]["snapshots"][1], nodes=[[0, 1_000]] * 10_000)  # 10 million
    with pytest.raises(TraceFormatError, match=r"step 1 snapshot: field 'nodes\[130\]' makes the snapshots hold"):
        loads(json.dumps(data))


# -- folded blocks -----------------------------------------------------------------------------------
def steps_trace(*spans: tuple[int, int]) -> dict:
    """A layout-1 trace of steps without snapshots, each (repeat, span)."""
    steps = [{"index": i, "kind": "execute", "reason": "r", "generation": 1, "function": "f", "repeat": r, "span": s}
             for i, (r, s) in enumerate(spans)]
    return {"format": "cgviz-trace", "schema_version": 1, "meta": {}, "steps": steps}


@pytest.mark.parametrize("spans, step, reached", [
    (((2, 1), (3, 2)), 1, 0),  # a block of two reaching the block of one before it
    (((1, 1), (5, 2), (1, 1), (2, 4)), 3, 1),
    (((4, 1), (4, 2), (4, 3), (4, 4)), 1, 0),  # every step a block reaching back to step 0
])
def test_folded_blocks_that_overlap_are_refused(tmp_path, spans, step, reached):
    path = write_json(tmp_path / "t.json", steps_trace(*spans))
    with pytest.raises(TraceFormatError) as caught:
        load_trace(path)
    assert str(caught.value) == (f"{path}: step {step}: field 'span' reaches step {reached}, which ends a folded "
                                 f"block of its own: blocks cannot overlap (got {spans[step][1]}, so at most "
                                 f"{step - reached})")


def test_blocks_side_by_side_load_and_count_as_they_unroll():
    trace = loads(json.dumps(steps_trace((1, 1), (3, 2), (1, 1), (2, 2), (4, 1))))
    assert trace.repeats() == [3, 3, 2, 2, 4]
    assert trace.calls == len(trace.expanded()) == 6 + 4 + 4


def test_the_span_of_a_step_that_is_not_repeated_counts_for_nothing():
    """As in `expanded` (and every view): an unrepeated step's span reaching into a block before
    it neither undoes that block's repeats nor costs a pass over its steps."""
    steps = [Step(0, "execute", "r", 1), Step(1, "execute", "r", 1, repeat=3, span=2), Step(2, "execute", "r", 1, span=3)]
    trace = Trace(steps)
    assert trace.repeats() == [3, 3, 1]
    assert trace.calls == len(trace.expanded()) == 7
    assert loads(json.dumps(steps_trace((1, 1), (3, 2), (1, 3)))).calls == 7


# -- reasons: numbers too long for int(), patterns that would scan without end -----------------------
def with_steps(**changes: Any) -> dict:
    """The hand-built trace (layout 1) with step fields changed: {index: {field: value}}."""
    data = v1_dict(hand_trace())
    for i, fields in changes.items():
        data["steps"][int(i.removeprefix("s"))].update(fields)
    return data


LONG_NUMBERS = {
    "tree-invalidated": with_steps(s4={"reason": f"g raised: {OVERWRITTEN}: output {LONG} of g (node {LONG}, generation "
                                                 f"1) was invalidated when mark_step() began generation {LONG}"}),
    "user-line": with_steps(s4={"reason": f"{OVERWRITTEN} (read at model.py:{LONG} in step (y.sum())), which"}),
    "compile-id": with_steps(s0={"kind": "record", "reason": f"(compile id {LONG}/0)"},
                             s1={"kind": "record", "function": "f", "reason": f"(compile id {LONG}/1)"}),
    "compile-count": with_steps(s0={"kind": "record", "reason": f"(compile id 0/{LONG}1)"},
                                s1={"kind": "record", "function": "f", "reason": f"(compile id 0/{LONG}2)"}),
    "torch-version": with_steps(s4={"reason": f"g raised: {OVERWRITTEN}", "function": None}),
}
LONG_NUMBERS["torch-version"]["meta"]["torch"] = f"{LONG}.1"


@pytest.mark.parametrize("case", sorted(LONG_NUMBERS))
def test_a_number_too_long_for_int_in_a_reason_is_not_read_as_one(tmp_path, capsys, case):
    path = write_json(tmp_path / "t.json", LONG_NUMBERS[case])
    text = diagnose(load_trace(path)).text()
    assert "Traceback" not in text
    assert main(["doctor", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_a_capture_site_whose_line_number_is_too_long_for_int_is_shown_as_text(tmp_path, capsys):
    data = json.loads((DATA / "graphs" / "serving_runner.cgtrace.json").read_text(encoding="utf-8"))
    for graph in data["graphs"]:
        graph["site"] = f"serving_runner.py:{LONG} in capture (graph.replay())"
    path = write_json(tmp_path / "t.json", data)
    assert main(["doctor", str(path)]) == 0
    assert f"serving_runner.py:{LONG}" in capsys.readouterr().out


def two_devices(device: Any) -> dict:
    """The shipped trace of trees on two devices, its steps on cuda:1 named `device` instead."""
    data = json.loads((DATA / "torch" / "torch_two_devices.cgtrace.json").read_text(encoding="utf-8"))
    for step in data["steps"]:
        if step.get("device") == "cuda:1":
            step["device"] = device
    return data


def test_a_device_number_too_long_is_refused_and_a_long_one_within_bounds_is_a_lane_of_its_own(tmp_path, capsys):
    path = write_json(tmp_path / "t.json", two_devices(f"cuda:{LONG}"))  # more digits than int() converts
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "field 'device' must name a device as torch does" in err and "… (5,005 characters))" in err, err
    assert "\n" not in err and len(err) < len(str(path)) + 300
    path = write_json(tmp_path / "u.json", two_devices("cuda:999999"))
    assert main(["info", str(path)]) == 0
    assert "cuda:999999" in capsys.readouterr().out
    data = page_data(load_trace(path), range(2), renderer="builtin")  # the timeline names both lanes
    assert data["n"] == len(load_trace(path).steps)


def test_steps_of_a_tree_named_by_no_device_beside_named_ones_render(tmp_path, capsys):
    """torch names the device of each step once a process runs trees on several; a step that names
    none beside those that do is a tree of its own, not a crash sorting None among names."""
    path = write_json(tmp_path / "t.json", two_devices(None))
    trace = load_trace(path)
    assert tree_keys(trace.steps) == [(None, "cuda:0"), (None, None)]
    data = page_data(trace, renderer="builtin")
    assert len(data["trees"]) > 0
    assert main(["render", str(path), "-o", str(tmp_path / "t.html"), "--renderer", "builtin"]) == 0


# One process runs every reading of a reason built to be slow, then prints "done": each is text of
# 0.5 to 1 MB that a pattern starting at each of its words would read to the end (minutes to days
# each, before the patterns were bounded).
SLOW_REASONS = r"""
import sys
from cgviz.trace.diagnose import diagnose
from cgviz.trace.model import Step, Trace
from cgviz.trace.ranks import call_key
from cgviz.trace.reasons import OVERWRITTEN, SKIPPED, torch_skip, user_source

N, M = 40_000, 300_000
reasons = {
    "blanks before no stack": SKIPPED + "cpu device" + " " * N + "end",
    "user lines never closed": " at model.py:1 in f (" * N,
    "outputs of names never closed": OVERWRITTEN + " output 1 of " * N,
}
assert torch_skip(reasons["blanks before no stack"])["cause"] == "cpu device" + " " * N + "end"
assert user_source(reasons["user lines never closed"]) is None
steps = [Step(0, "eager", reasons["blanks before no stack"], 1, function="f"),
         Step(1, "error", reasons["outputs of names never closed"] + reasons["user lines never closed"], 1, function="f"),
         Step(2, "record", "(compile id 0/0)", 1, function="g" + " [" * M, node=1),
         Step(3, "record", "(compile id 0/1)", 1, function="g" + " [" * M, node=2)]
diagnose(Trace(steps)).text()
assert call_key("g" + " [0" * M) == "g" + " [0" * M
print("done")
"""


def test_reasons_built_to_be_slow_to_read_are_read_in_one_pass():
    done = python(SLOW_REASONS)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_torch_skip_messages_still_split_at_their_stack():
    """The stack's start, found without the blanks and full stop before it: the cause and the
    source line read as before."""
    message = (f'{SKIPPED}skipping cudagraphs due to cpu device (arg0_1) .  \n Found from : \n'
               f'   File "model.py", line 7, in forward\n    return x.cpu()\n')
    step = Step(0, "eager", message, 1, function="f")
    from cgviz.trace.reasons import torch_skip

    skip = torch_skip(step.reason)
    assert skip["cause"] == "cpu device (arg0_1)"
    assert skip["input"] == "arg0_1"
    assert skip["source"] == {"file": "model.py", "line": 7, "function": "forward", "code": "return x.cpu()"}


# -- paths -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, flag", [("render", "-o"), ("export", "-o"), ("merge", "-o")])
def test_an_empty_output_path_is_refused_not_taken_for_the_default(tmp_path, capsys, monkeypatch, command, flag):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.cgtrace.json").write_text((DATA / "gpu" / "chain.cgtrace.json").read_text(encoding="utf-8"),
                                               encoding="utf-8")
    assert main([command, "run.cgtrace.json", flag, ""]) == 1
    one_line_error(capsys, command, "the path is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.cgtrace.json"]


@pytest.mark.parametrize("flag", ["--trace-out", "--html"])
def test_cgviz_run_refuses_an_empty_output_path_before_running(tmp_path, capsys, flag):
    script = tmp_path / "s.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n", encoding="utf-8")
    assert main(["run", flag, "", str(script)]) == 2
    assert "the path is empty" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()


def test_empty_paths_given_to_read_say_so(tmp_path, capsys):
    assert main(["info", ""]) == 1
    one_line_error(capsys, "info", "trace file not found: '' (an empty path)")
    trace_path = DATA / "gpu" / "chain.cgtrace.json"
    assert main(["export", str(trace_path), "--merge", "", "-o", str(tmp_path / "x.json")]) == 1
    one_line_error(capsys, "export", "profiler trace not found: '' (an empty path)")


@pytest.mark.parametrize("path", ["", "run\0.cgtrace.json"])
def test_saving_to_an_empty_path_or_one_holding_nul_names_the_problem(tmp_path, path):
    trace = load_trace(DATA / "gpu" / "chain.cgtrace.json")
    problem = "the path is empty" if not path else "a file name cannot hold a NUL character"
    with pytest.raises((OSError, ValueError), match=problem):
        trace.save(path)
    with pytest.raises((OSError, ValueError), match=problem):
        check_save_target(path, "HTML")


def test_reading_a_path_holding_nul_names_it():
    with pytest.raises(ValueError, match=r"cannot read trace 'run\\x00\.json': a file name cannot hold a NUL"):
        load_trace("run\0.json")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc's links to open files")
def test_a_link_to_a_pipe_is_refused_as_a_fifo(tmp_path):
    """/dev/stdout in a pipeline: a link to /proc/self/fd/1, whose target ('pipe:[...]') has no
    file of that name, so it was taken for a new file and writing it failed after the work."""
    read, write = os.pipe()
    try:
        link = tmp_path / "out.json"
        os.symlink(f"/proc/self/fd/{write}", link)
        with pytest.raises(OSError, match=f"cannot save trace to {link}: it is a FIFO, not a regular file"):
            check_save_target(link, "trace")
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_cgviz_run_refuses_a_fifo_as_the_program_instead_of_waiting_for_it(tmp_path):
    fifo = tmp_path / "program.py"
    os.mkfifo(fifo)
    ran = python("import sys; from cgviz.cli import main; sys.exit(main(sys.argv[1:]))", "run", str(fifo))
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.strip() == f"cgviz run: {fifo} is a FIFO, not a Python script (a regular file)"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_cgviz_run_names_a_device_as_reading_a_trace_does():
    """One wording for a file that is not regular, whether cgviz would run it or read it."""
    from cgviz.run import UsageError, _check_script
    from cgviz.trace.io import load_trace

    with pytest.raises(UsageError, match="^/dev/zero is a character device, not a Python script"):
        _check_script("/dev/zero")
    with pytest.raises(OSError, match="it is a character device, not a regular file"):
        load_trace("/dev/zero")


# -- a byte order mark ---------------------------------------------------------------------------------
def test_a_trace_and_a_profiler_trace_with_a_byte_order_mark_load(tmp_path, capsys):
    text = (DATA / "gpu" / "chain.cgtrace.json").read_text(encoding="utf-8")
    path = tmp_path / "bom.cgtrace.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert len(load_trace(path).steps) == len(loads(text).steps)
    start = min(s.start for s in load_trace(path).steps if s.start is not None)
    profiler = tmp_path / "profiler.json"
    profiler.write_bytes(b"\xef\xbb\xbf" + json.dumps({"traceEvents": [], "baseTimeNanoseconds": int(start * 1e9)})
                         .encode("utf-8"))
    assert main(["export", str(path), "--merge", str(profiler), "-o", str(tmp_path / "out.json")]) == 0
    capsys.readouterr()


# -- what the views and exports print ---------------------------------------------------------------------
def test_a_profiler_trace_far_off_is_warned_about_in_a_few_digits():
    trace = load_trace(DATA / "gpu" / "chain.cgtrace.json")
    data = to_chrome_trace(trace, {"traceEvents": [{"ph": "X", "ts": 1e300, "dur": 1, "pid": 1, "tid": 1}]})
    warning = data["otherData"]["cgviz"]["warning"]
    assert warning.startswith("cgviz's steps lie 1e+294 s outside") and len(warning) < 120, warning


needs_dot = pytest.mark.skipif(
    not any(os.access(os.path.join(d, "dot"), os.X_OK) for d in os.get_exec_path()), reason="needs Graphviz's dot")


@needs_dot
def test_what_dot_says_when_it_fails_goes_in_the_notice_not_on_stderr(capsys):
    """Graphviz refuses a label longer than 16,384 characters; the page draws that tree with the
    built-in layout and says why, and nothing of dot's own output (which quotes the trace) is
    printed on the way."""
    data = copy.deepcopy(v1_dict(hand_trace()))
    for step in data["steps"][:3]:
        for node in step["snapshot"]["nodes"]:
            node["function"] = "f" * 20_000
    page = page_data(loads(json.dumps(data)), renderer="auto")
    assert "Traceback" not in json.dumps(page)
    captured = capsys.readouterr()
    assert "syntax error" not in captured.err and "String starting" not in captured.err, captured.err[:500]


@pytest.mark.parametrize("given, message", [
    (None, "to_html() needs a cgviz.Trace, not NoneType"),
    ("run.cgtrace.json", "to_html() needs a cgviz.Trace, not str: load the file first (cgviz.Trace.load(path))"),
    (SimpleNamespace(trace=Trace()), "to_html() needs a cgviz.Trace, not SimpleNamespace: pass its .trace"),
])
def test_the_exports_given_no_trace_say_what_they_need(given, message):
    from cgviz.views.html import to_html

    with pytest.raises(TypeError) as caught:
        to_html(given)
    assert str(caught.value) == message
    with pytest.raises(TypeError, match=r"to_chrome_trace\(\) needs a cgviz.Trace, not "):
        to_chrome_trace(given)


@pytest.mark.parametrize("title", [5, b"run"])
def test_a_page_title_that_is_no_string_is_refused_naming_it(title):
    from cgviz.views.html import to_html

    with pytest.raises(TypeError, match=f"title must be a string, not {type(title).__name__}"):
        to_html(Trace(), title=title)


# -- a tree thousands of levels deep ------------------------------------------------------------------
def test_a_tree_thousands_of_levels_deep_is_laid_out_in_memory_linear_in_its_nodes():
    """Packing keeps a contour per subtree, one entry per level below it: a chain of 30,000 nodes
    (a 4 MB file) took 7.6 GB. Past MAX_TIDY_WORK the levels are laid out row by row."""
    import tracemalloc

    from cgviz.trace.model import NodeView, Snapshot
    from cgviz.views.tree.layout import boxes

    n = 6_000
    nodes = [NodeView(i, "f", "graph", i - 1 if i else None, [i + 1] if i < n - 1 else [], 1, 0, []) for i in range(n)]
    snapshot = Snapshot(nodes, n - 1, list(range(n)), "execution", 1)
    sizes = {i: (60.0, 30.0) for i in range(n)}
    tracemalloc.start()
    try:
        box, depth, right, bottom = boxes(list(range(n)), sizes, snapshot, 0.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(box) == n and depth[n - 1] == n - 1
    assert [box[i][1] for i in range(3)] == sorted({box[i][1] for i in range(3)})  # a row per level, top down
    assert peak < 40 << 20, f"{peak / (1 << 20):.0f} MiB"  # the contours alone took 288 MiB
