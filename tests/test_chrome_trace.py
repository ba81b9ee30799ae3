"""The Perfetto / Chrome trace export: valid Trace Event Format, every decision on its function's
track at its start time (measured, or estimated and marked), pool counters, merging into a torch
profiler trace on its clock, step start times saved and loaded, and `cgviz export`."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import cgviz
from cgviz.cli import main
from cgviz.data import gpu_trace, gpu_trace_names, torch_trace, torch_trace_names
from cgviz.scenarios import SCENARIOS, run_scenario
from cgviz.trace import io
from cgviz.trace.chrome_trace import to_chrome_trace
from cgviz.trace.io import TraceFormatError
from cgviz.trace.model import Step, Trace
from cgviz.trace.profiler_trace import ProfilerTraceError, load_profiler_trace
from helpers import ROOT

CALL_KINDS = ("warmup", "record", "execute", "eager", "error")
METADATA = {"process_name": "name", "thread_name": "name", "process_labels": "labels",
            "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}


# -- a Trace Event Format validator -------------------------------------------------------------
def _number(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def check_trace_events(data: dict, ours=lambda e: True) -> list[dict]:
    """Check `data` against the Trace Event Format (JSON object form); return the events `ours`
    selects, whose X slices must also start in order and not overlap on each track."""
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    json.dumps(data, allow_nan=False)  # serialisable, and standard JSON (no NaN or Infinity)
    assert data.get("displayTimeUnit", "ms") in ("ms", "ns")
    selected = []
    for e in data["traceEvents"]:
        assert isinstance(e, dict), e
        ph = e.get("ph")
        assert isinstance(ph, str) and ph, e
        if ph in ("X", "i", "I", "C", "M", "B", "E"):
            for key in ("name", "ph", "ts", "pid", "tid"):
                assert key in e, (key, e)
            assert isinstance(e["name"], str), e
            assert _number(e["ts"]), e
        if ph == "X":
            assert _number(e["dur"]) and e["dur"] >= 0, e
        elif ph == "C":
            assert isinstance(e["args"], dict) and e["args"], e
            assert all(_number(v) and type(v) is not bool for v in e["args"].values()), e
        elif ph == "M":
            assert e["name"] in METADATA, e
            assert METADATA[e["name"]] in e["args"], e
        elif ph in ("i", "I"):
            assert e.get("s", "t") in ("g", "p", "t"), e
        if ours(e):
            selected.append(e)
    ends: dict = {}
    for e in selected:
        if e["ph"] != "X":
            continue
        track = (e["pid"], e["tid"])
        if track in ends:
            last_ts, last_end = ends[track]
            assert e["ts"] >= last_ts, ("slices out of order on a track", e)
            assert e["ts"] >= last_end - 1e-3, ("slices overlap on a track", e)
        ends[track] = (e["ts"], e["ts"] + e["dur"])
    return selected


def cgviz_events(data: dict) -> list[dict]:
    return [e for e in data["traceEvents"] if e.get("cat") == "cgviz"]


def decisions(data: dict) -> list[dict]:
    """cgviz's slices and instants, one per decision, in the trace's order."""
    return sorted((e for e in cgviz_events(data) if e["ph"] in ("X", "i")), key=lambda e: e["args"]["decision"])


# -- sim scenarios ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_exports_are_valid_and_draw_every_decision(scenario_traces, name):
    trace = scenario_traces[name]
    data = trace.to_chrome_trace()
    events = check_trace_events(data)
    assert set(data) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert data["displayTimeUnit"] == "ms"
    shown = [e for e in events if e["ph"] in ("X", "i")]
    assert len(shown) == trace.calls
    counts = trace.counts()
    for kind, n in counts.items():
        assert sum(e["name"] == kind for e in shown) == n, kind
    assert {e["ph"] for e in shown if e["name"] in ("generation", "path_end")} <= {"i"}
    assert all(e["s"] == ("p" if e["name"] == "generation" else "t") for e in shown if e["ph"] == "i")
    # one track per function, named; slices on their function's track
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for e in shown:
        function = e["args"].get("function")
        if e["ph"] == "X" and function is not None:
            assert names[e["tid"]] == function
    process = [e for e in events if e["name"] == "process_name"]
    assert len(process) == 1 and "sim tree" in process[0]["args"]["name"] and name in process[0]["args"]["name"]
    assert len({e["pid"] for e in events}) == 1
    # every step of a sim tree has a measured start: only later occurrences of folded repeats are estimated
    assert all(s.start is not None for s in trace.steps)
    for e in shown:
        assert e["args"].get("estimated", False) == (e["args"].get("occurrence", 1) > 1)
    other = data["otherData"]
    assert other["clock"] == "unix" and other["decisions"] == trace.calls
    assert other["start_unix_s"] == pytest.approx(min(s.start for s in trace.steps), abs=1e-6)
    assert min(e["ts"] for e in shown) == 0


def test_scenario_slices_start_at_their_steps_measured_start(scenario_traces):
    trace = scenario_traces["chain"]
    data = trace.to_chrome_trace()
    origin = data["otherData"]["start_unix_s"]
    for e in decisions(data):
        if e["args"].get("occurrence", 1) == 1:
            step = trace.steps[e["args"]["step"]]
            assert e["ts"] == pytest.approx((step.start - origin) * 1e6, abs=0.01)
            if e["ph"] == "X" and step.repeat == 1:
                assert e["dur"] <= step.duration * 1e6 + 0.01


def test_pool_counters_follow_the_snapshots(scenario_traces):
    trace = scenario_traces["branching"]
    events = check_trace_events(trace.to_chrome_trace())
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"pool reserved", "pool allocated", "live outputs"}
    last = trace.last_snapshot()
    final = {e["name"]: e["args"]["bytes"] for e in sorted(counters, key=lambda e: e["ts"])}
    assert final["pool reserved"] == last.reserved_bytes
    assert final["pool allocated"] == last.allocated_bytes
    live = sum(o.nbytes for n in last.nodes for o in n.outputs if o.state == "live" and o.alias_of is None)
    assert final["live outputs"] == live
    assert max(e["args"]["bytes"] for e in counters if e["name"] == "pool reserved") > 0


def test_trace_without_snapshots_has_no_counters():
    tree = cgviz.Tree("sim", trace="events")
    f = tree.wrap(lambda x: x + 1, name="f")
    for _ in range(4):
        f(torch.ones(3))
    events = check_trace_events(tree.trace.to_chrome_trace())
    assert not [e for e in events if e["ph"] == "C"]
    assert sum(e["name"] == "execute" for e in events) == tree.trace.counts()["execute"]


# -- traces saved without start times, and shipped ones with them ---------------------------------------------------------
SHIPPED = [("gpu", n) for n in gpu_trace_names()] + [("torch", n) for n in torch_trace_names()]
# traces saved before steps had start times (kept as test data of the old layout)
OLD = sorted((Path(__file__).parent / "data" / "old_layout").glob("*.cgtrace.json"))


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.name)
def test_traces_without_start_times_are_laid_out_back_to_back(path):
    trace = Trace.load(path)
    source = "torch" if path.name.startswith("torch_") else "gpu"
    assert all(s.start is None for s in trace.steps)
    data = to_chrome_trace(trace)
    events = check_trace_events(data)
    other = data["otherData"]
    assert other["clock"] == "none" and "back to back from 0" in other["timing"]
    assert "start_unix_s" not in other
    shown = decisions(data)
    assert len(shown) == trace.calls
    assert sum(e["name"] == "execute" for e in shown) == trace.counts()["execute"]
    clock = 0.0
    for e in shown:  # each decision after the one before it, back to back
        assert e["ts"] >= clock - 0.01
        assert e["args"]["estimated"] is True
        clock = e["ts"] + e.get("dur", 0.0)
    assert shown[0]["ts"] == 0
    total = sum(s.duration for s in trace.steps) * 1e6  # instants take their step's time too
    last = shown[-1]
    assert last["ts"] + last.get("dur", trace.steps[last["args"]["step"]].duration * 1e6) == pytest.approx(total, abs=1)
    if trace.last_snapshot() is not None:
        assert any(e["name"] == "live outputs" for e in events)
    if source == "gpu":
        assert any(e["name"] == "pool reserved" for e in events)
        assert "cuda tree" in [e for e in events if e["name"] == "process_name"][0]["args"]["name"]


@pytest.mark.parametrize("source,name", SHIPPED)
def test_shipped_traces_are_placed_at_their_measured_starts(source, name):
    trace = gpu_trace(name) if source == "gpu" else torch_trace(name)
    starts = [s.start for s in trace.steps if s.start is not None]
    assert starts, "traces recorded with this version carry start times"
    data = to_chrome_trace(trace)
    check_trace_events(data)
    measured = [e for e in decisions(data) if not e["args"].get("estimated")]
    assert measured
    t0 = min(starts)
    for e in measured:  # a measured slice sits where its step began, on the trace's own clock
        step = trace.steps[e["args"]["step"]]
        assert e["ts"] == pytest.approx((step.start - t0) * 1e6, abs=1.0) or step.start is None


# -- folded repeats -----------------------------------------------------------------------------
def folded_trace(start: float = 1_700_000_000.0) -> Trace:
    """record f, then [path_end, execute f] 5 times (folded, first occurrence at start + 1 s),
    then a generation at start + 11 s."""
    return Trace([
        Step(0, "record", "recording f", 1, "f", 0, duration=0.5, start=start),
        Step(1, "path_end", "all outputs dead", 1, duration=0.0, start=start + 1.0),
        Step(2, "execute", "f replays node 0", 1, "f", 0, duration=5 * 0.4, repeat=5, span=2, start=start + 1.0),
        Step(3, "generation", "mark_step()", 2, start=start + 11.0),
    ], meta={"backend": "sim"})


def test_folded_repeats_expand_evenly_between_the_first_occurrence_and_the_next_step():
    trace = folded_trace()
    data = to_chrome_trace(trace)
    check_trace_events(data)
    executes = [e for e in decisions(data) if e["name"] == "execute"]
    assert len(executes) == trace.counts()["execute"] == 5
    assert [e["args"]["occurrence"] for e in executes] == [1, 2, 3, 4, 5]
    assert all(e["args"]["folded"] is True and e["args"]["repeat"] == 5 for e in executes)
    assert [e["args"].get("estimated", False) for e in executes] == [False, True, True, True, True]
    assert all(e["dur"] == pytest.approx(0.4e6) for e in executes)  # the average
    # first at its measured start (1 s after the record); the rest one period (2 s) apart: the 10 s from the
    # first occurrence to the generation, as a steady loop would have run them
    assert [e["ts"] for e in executes] == pytest.approx([1e6, 3e6, 5e6, 7e6, 9e6], abs=1)
    path_ends = [e for e in decisions(data) if e["name"] == "path_end"]
    assert len(path_ends) == 5 and path_ends[0]["ts"] == pytest.approx(1e6)
    assert all(p["ts"] <= x["ts"] for p, x in zip(path_ends, executes))
    generation = [e for e in decisions(data) if e["name"] == "generation"][0]
    assert generation["ts"] == pytest.approx(11e6) and "estimated" not in generation["args"]
    assert "expanded" in data["otherData"]["folded_repeats"]


def test_folded_repeats_collapse_into_one_slice_per_step():
    trace = folded_trace()
    for data in (trace.to_chrome_trace(folded="collapse"), to_chrome_trace(trace, max_slices=5)):
        check_trace_events(data)
        executes = [e for e in decisions(data) if e["name"] == "execute"]
        assert len(executes) == 1
        assert executes[0]["dur"] == pytest.approx(2e6) and executes[0]["args"]["repeat"] == 5
        assert executes[0]["args"]["folded"] is True and "occurrence" not in executes[0]["args"]
        assert "collapsed" in data["otherData"]["folded_repeats"]
    with pytest.raises(ValueError, match="folded must be one of"):
        to_chrome_trace(trace, folded="fold")
    with pytest.raises(ValueError, match="max_slices must be a positive integer"):
        trace.to_chrome_trace(max_slices=0)


def test_a_long_replay_loop_is_collapsed_above_max_slices():
    trace = Trace([Step(0, "execute", "r", 1, "f", 0, duration=1.0, repeat=10**9, start=1.0)])
    data = to_chrome_trace(trace)
    assert len(decisions(data)) == 1 and decisions(data)[0]["args"]["repeat"] == 10**9


def test_steps_without_a_start_are_spread_between_their_measured_neighbours():
    """As torch.compile's observer leaves replays noted on the replay loop."""
    steps = [Step(0, "record", "r", 1, "f", 0, duration=1.0, start=100.0)]
    steps += [Step(i, "execute", "x", 1, "f", 0, duration=1.0) for i in (1, 2, 3)]
    steps += [Step(4, "record", "r", 1, "g", 1, duration=1.0, start=110.0)]
    data = to_chrome_trace(Trace(steps))
    check_trace_events(data)
    shown = decisions(data)
    # after the first record's end (1 s) and before the next (10 s): 9 s, 3 s of it busy, 1.5 s idle before
    # each and after the last
    assert [e["ts"] for e in shown] == pytest.approx([0, 2.5e6, 5e6, 7.5e6, 10e6])
    assert [e["args"].get("estimated", False) for e in shown] == [False, True, True, True, False]


def test_overlapping_slices_of_one_track_are_cut_where_the_next_begins():
    steps = [Step(0, "warmup", "w", 1, "f", 0, duration=5.0, start=10.0),
             Step(1, "record", "r", 1, "f", 1, duration=1.0, start=12.0)]
    shown = decisions(to_chrome_trace(Trace(steps)))
    assert [(e["ts"], e["dur"]) for e in shown] == [(0, 2e6), (2e6, 1e6)]


def test_text_with_lone_surrogates_is_exported():
    trace = Trace([Step(0, "eager", "bad \udcff byte", 1, "f\udcff", start=1.0)])
    data = to_chrome_trace(trace)
    text = json.dumps(data)
    assert "\\\\udcff" in text  # its escape text, as saved traces keep it
    check_trace_events(data)


# -- start times: recorded, saved, loaded -------------------------------------------------------
def test_engine_steps_start_on_the_wall_clock():
    before = time.time()
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    for _ in range(3):
        f(torch.ones(4))
    tree.mark_step()
    after = time.time()
    assert tree.trace.steps
    for step in tree.trace.steps:
        assert before - 1e-3 <= step.start <= step.start + step.duration <= after + 1e-3


CLOCKS = {time.perf_counter, time.perf_counter_ns, time.time, time.time_ns, time.monotonic, time.monotonic_ns}


def clock_reads(run) -> list[str]:
    """The functions that read a clock while `run()` runs (Python's profile hook sees C calls)."""
    reads = []

    def hook(frame, event, arg):
        if event == "c_call" and arg in CLOCKS:
            reads.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}: {frame.f_code.co_name}")

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return reads


def test_untraced_tree_reads_no_clock():
    """Durations live only in steps: with trace=None nothing reads a clock, on any decision."""
    def run(tree):
        f = tree.wrap(lambda x: x + 1, name="f")
        g = tree.wrap(lambda x: x * 2, name="g")
        for _ in range(4):  # warmup, record, replays, path ends
            f(x)
        y = f(x)
        g(x)  # under f's live output: a checkpoint restore, then g's warmup
        tree.mark_step()  # a generation that invalidates y
        del y
        tree.reset()

    x = torch.ones(2)
    traced = cgviz.Tree("sim", trace="events")
    run(traced)
    assert [s.kind for s in traced.trace.steps] == [
        "warmup", "path_end", "record", "path_end", "execute", "checkpoint_restore", "warmup", "generation", "path_end"
    ]
    tree = cgviz.Tree("sim", trace=None)
    assert clock_reads(lambda: run(tree)) == []
    assert tree.trace.steps == []
    assert clock_reads(lambda: run(cgviz.Tree("sim", trace="events")))  # the probe sees a traced tree's clock


def test_start_times_round_trip_and_default_to_none(tmp_path):
    trace = run_scenario("generations", device="sim").trace
    path = tmp_path / "run.cgtrace.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert [s.start for s in loaded.steps] == [s.start for s in trace.steps]
    assert all(s.start is not None for s in loaded.steps)
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 2 and "start" in raw["steps"][0]
    for step in raw["steps"]:  # as written before steps had a start
        del step["start"]
    path.write_text(json.dumps(raw))
    assert all(s.start is None for s in Trace.load(path).steps)


@pytest.mark.parametrize("value,problem", [
    ('"soon"', "must be a number, not a string"),
    ("true", "must be a number, not a boolean"),
    ("NaN", "is NaN"),
    ("[1]", "must be a number, not an array"),
])
def test_corrupt_start_is_a_clear_error(value, problem):
    text = io.dumps(Trace([Step(0, "warmup", "w", 1, "f", start=12.5)]))
    assert '"start":12.5' in text
    with pytest.raises(TraceFormatError, match=f"step 0: field 'start' {problem}"):
        io.loads(text.replace('"start":12.5', f'"start":{value}'))


def test_old_traces_still_load_without_start_times():
    old = sorted((ROOT / "tests" / "data" / "old_layout").glob("*.cgtrace.json"))
    assert old
    for path in old:
        trace = Trace.load(path)
        assert trace.schema_version == 1 and all(s.start is None for s in trace.steps)


def test_observer_steps_carry_a_start_and_a_folded_one_keeps_its_first():
    from cgviz.observe.torch_compile import TorchObserver

    for level in ("events", "full"):
        obs = TorchObserver(level)
        before = time.time()
        obs.step("warmup", "first call of f", function="f", start=time.perf_counter())
        firsts = []
        for _ in range(4):
            firsts.append(time.time())
            obs.step("eager", "f runs eagerly", function="f", start=time.perf_counter())
        obs.step("path_end", "untimed")
        obs.log.flush()
        steps = obs.trace.steps
        assert [(s.kind, s.repeat) for s in steps] == [("warmup", 1), ("eager", 4), ("path_end", 1)]
        assert before - 1e-3 <= steps[0].start <= steps[1].start <= time.time() + 1e-3
        assert steps[1].start <= firsts[1] + 1e-3  # the first occurrence's start
        assert steps[2].start is None


# -- merging with a torch profiler trace --------------------------------------------------------
def _work(x):
    """About 40 ms with an aten op every 4 ms: long calls, each with ops all along it, so that a slice with
    a measured start, moved onto the profiler's clock, lies over its own call's ops."""
    y = x * 2
    for _ in range(10):
        time.sleep(0.004)
        y = y + 1
    return y


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """A sim tree run under torch's CPU profiler: each call annotated `call i`."""
    from torch.profiler import ProfilerActivity, profile, record_function

    tree = cgviz.Tree("sim")
    f = tree.wrap(_work, name="work")
    x = torch.randn(16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(7):
            with record_function(f"call {i}"):
                f(x)
        tree.mark_step()
    path = tmp_path_factory.mktemp("prof") / "profile.json"
    prof.export_chrome_trace(str(path))
    return tree.trace, path


def test_merge_puts_cgviz_on_the_profilers_clock(profiled):
    trace, path = profiled
    profile = json.loads(path.read_text())
    merged = trace.to_chrome_trace(str(path))
    ours = check_trace_events(merged, lambda e: e.get("cat") == "cgviz")
    theirs = [e for e in merged["traceEvents"] if e.get("cat") != "cgviz" and e.get("pid") != ours[0]["pid"]]
    assert len(theirs) == len(profile["traceEvents"])  # the profiler's events, all kept
    assert merged["baseTimeNanoseconds"] == profile["baseTimeNanoseconds"]
    assert merged["otherData"]["cgviz"]["decisions"] == trace.calls
    assert "warning" not in merged["otherData"]["cgviz"]
    # its own process: a pid and tids no profiler event uses
    their_pids = {e.get("pid") for e in profile["traceEvents"]}
    their_tids = {e.get("tid") for e in profile["traceEvents"]}
    assert {e["pid"] for e in ours}.isdisjoint(their_pids)
    assert {e["tid"] for e in ours if e["ph"] != "M"}.isdisjoint(their_tids)
    # inside the profiler's time range
    timed = [e for e in profile["traceEvents"] if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    low, high = min(e["ts"] for e in timed), max(e["ts"] + e.get("dur", 0) for e in timed)
    shown = decisions(merged)
    assert len(shown) == trace.calls
    for e in shown:
        assert low <= e["ts"] and e["ts"] + e.get("dur", 0) <= high
    # each call's slice (warmup, record, execute) with a measured start overlaps the aten ops of
    # that call; a folded block's later occurrences are estimated, laid out evenly between their
    # measured neighbours (where they land depends on how evenly the calls ran, so only their
    # order is asserted)
    calls = {e["name"]: e for e in profile["traceEvents"] if e.get("cat") == "user_annotation"}
    ops = [e for e in profile["traceEvents"] if e.get("cat") == "cpu_op"]
    slices = [e for e in shown if e["name"] in CALL_KINDS]
    assert [e["name"] for e in slices] == ["warmup", "record"] + ["execute"] * 5
    assert sum(e["name"] == "execute" for e in slices) == trace.counts()["execute"]
    table = [(e["name"], e["ts"], e["dur"], calls[f"call {i}"]["ts"], calls[f"call {i}"]["dur"])
             for i, e in enumerate(slices)]
    estimated = [e["args"].get("estimated", False) for e in slices]
    assert estimated[:3] == [False] * 3 and any(estimated)  # warmup, record, the first replay measured
    for i, e in enumerate(slices):
        call = calls[f"call {i}"]
        in_call = [o for o in ops if call["ts"] <= o["ts"] and o["ts"] + o["dur"] <= call["ts"] + call["dur"]]
        assert sum(o["name"] == "aten::add" for o in in_call) >= 10
        if estimated[i]:
            continue
        begin, end = e["ts"], e["ts"] + e["dur"]
        assert begin < call["ts"] + call["dur"] and end > call["ts"], (i, table)
        assert any(begin < o["ts"] + o["dur"] and end > o["ts"] for o in in_call), (i, e["args"])
    # the estimated occurrences: in order, after the measured calls and before mark_step()'s generation
    guessed = [e["ts"] for e, x in zip(slices, estimated) if x]
    generation = next(e for e in shown if e["name"] == "generation")
    assert guessed == sorted(guessed), table
    assert max(e["ts"] for e, x in zip(slices, estimated) if not x) < guessed[0]
    assert guessed[-1] < generation["ts"], table


def test_merge_accepts_the_profile_as_a_dict_and_gzipped(profiled, tmp_path):
    trace, path = profiled
    profile = json.loads(path.read_text())
    from_dict = trace.to_chrome_trace(profile)
    gz = tmp_path / "profile.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert trace.to_chrome_trace(gz) == from_dict == trace.to_chrome_trace(str(path))
    assert profile == json.loads(path.read_text())  # left unchanged


def test_merge_of_another_run_warns():
    trace = folded_trace(start=1_000_000_000.0)  # 2001: not this profile's run
    profile = {"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 10.0, "dur": 5.0, "pid": 7, "tid": 7}],
               "baseTimeNanoseconds": 1_700_000_000 * 10**9}
    merged = to_chrome_trace(trace, profile)
    assert "outside the profiler trace's time range" in merged["otherData"]["cgviz"]["warning"]
    ours = [e for e in merged["traceEvents"] if e.get("cat") == "cgviz"]
    assert all(e["pid"] == 8 for e in ours)


def test_merge_without_a_base_time_uses_microseconds_since_the_epoch():
    trace = folded_trace()
    profile = [{"ph": "X", "name": "op", "ts": 1_700_000_000.0 * 1e6, "dur": 12e6, "pid": 1, "tid": 1}]
    merged = to_chrome_trace(trace, profile)
    record = [e for e in merged["traceEvents"] if e.get("cat") == "cgviz" and e["name"] == "record"][0]
    assert record["ts"] == pytest.approx(1_700_000_000.0 * 1e6)
    assert "warning" not in merged["otherData"]["cgviz"]


def test_merge_errors_are_clear(tmp_path):
    trace = folded_trace()
    with pytest.raises(FileNotFoundError, match="profiler trace not found"):
        to_chrome_trace(trace, tmp_path / "missing.json")
    cases = {
        "truncated.json": ('{"traceEvents": [', "truncated or not JSON"),
        "other.json": ('{"format": "cgviz-trace"}', "no 'traceEvents'"),
        "scalar.json": ("3", "the top level is int"),
        "base.json": ('{"traceEvents": [], "baseTimeNanoseconds": "x"}', "'baseTimeNanoseconds' must be a number"),
        "broken.json.gz": (b"\x1f\x8b\x08\x00garbage", "damaged gzip"),
    }
    for name, (content, problem) in cases.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(ProfilerTraceError, match=problem) as info:
            load_profiler_trace(path)
        assert str(path) in str(info.value)
    old = Trace.load(OLD[0])  # saved before steps had start times
    with pytest.raises(ValueError, match="no step start times"):
        to_chrome_trace(old, {"traceEvents": []})


# -- cgviz export -------------------------------------------------------------------------------
@pytest.fixture()
def saved(tmp_path, profiled):
    trace, profile = profiled
    path = tmp_path / "run.cgtrace.json"
    trace.save(path)
    return path, profile


def test_cli_export_writes_the_same_file_for_perfetto_and_chrome(saved, capsys):
    path, _ = saved
    assert main(["export", str(path), "--format", "perfetto"]) == 0
    default = path.with_name("run.perfetto.json")
    out = capsys.readouterr().out
    assert str(default) in out and "ui.perfetto.dev" in out
    chrome = path.with_name("chrome.json")
    assert main(["export", str(path), "--format", "chrome", "-o", str(chrome)]) == 0
    data = json.loads(default.read_text())
    assert data == json.loads(chrome.read_text())
    check_trace_events(data)
    assert data == json.loads(json.dumps(Trace.load(path).to_chrome_trace()))
    assert not list(path.parent.glob(".*.tmp"))


def test_cli_export_merges_a_profiler_trace(saved, capsys):
    path, profile = saved
    out = path.with_name("merged.json")
    assert main(["export", str(path), "--merge", str(profile), "-o", str(out)]) == 0
    assert "merged into" in capsys.readouterr().out
    merged = json.loads(out.read_text())
    ours = check_trace_events(merged, lambda e: e.get("cat") == "cgviz")
    assert len([e for e in ours if e["ph"] in ("X", "i")]) == Trace.load(path).calls
    assert len(merged["traceEvents"]) > len(ours)


def test_cgviz_export_command_runs(saved):
    """The installed entry point's module, in a process of its own."""
    path, profile = saved
    out = path.with_name("merged-cli.json")
    done = subprocess.run([sys.executable, "-m", "cgviz.cli", "export", str(path), "--format", "chrome",
                           "--merge", str(profile), "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "merged into" in done.stdout and done.stderr.strip() == ""
    check_trace_events(json.loads(out.read_text()), lambda e: e.get("cat") == "cgviz")


def test_cli_export_collapse_and_max_slices(saved, capsys):
    path, _ = saved
    out = path.with_name("collapsed.json")
    assert main(["export", str(path), "--folded", "collapse", "-o", str(out)]) == 0
    assert "collapsed" in json.loads(out.read_text())["otherData"]["folded_repeats"]
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(path), "--max-slices", "0"])
    assert exit_info.value.code == 2
    assert "must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["missing trace", "not a trace", "missing profile", "corrupt profile",
                                  "no start times", "missing directory", "output is the trace"])
def test_cli_export_errors_are_clear(saved, tmp_path, capsys, case):
    path, profile = saved
    out = tmp_path / "out.json"
    args = {
        "missing trace": [str(tmp_path / "nope.cgtrace.json")],
        "not a trace": [str(profile)],
        "missing profile": [str(path), "--merge", str(tmp_path / "nope.json")],
        "corrupt profile": [str(path), "--merge", str(path.with_name("bad.json"))],
        "no start times": [str(OLD[0]), "--merge", str(profile)],
        "missing directory": [str(path), "-o", str(tmp_path / "no" / "such" / "dir.json")],
        "output is the trace": [str(path), "-o", str(path)],
    }[case]
    expected = {
        "missing trace": "trace file not found",
        "not a trace": "not a cgviz trace",
        "missing profile": "profiler trace not found",
        "corrupt profile": "not a Chrome trace (truncated or not JSON",
        "no start times": "no step start times",
        "missing directory": "does not exist",
        "output is the trace": "is the trace being exported",
    }[case]
    path.with_name("bad.json").write_text('{"traceEvents": [{"ph": "X"')
    before = path.read_bytes()
    if "-o" not in args:
        args += ["-o", str(out)]
    assert main(["export", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cgviz export: ") and expected in err, err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert path.read_bytes() == before


def test_cli_export_rejects_an_unknown_format(saved, capsys):
    path, _ = saved
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(path), "--format", "svg"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'svg'" in capsys.readouterr().err


def test_export_module_imports_no_torch():
    probe = ("import sys, cgviz, cgviz.trace.chrome_trace; t = cgviz.Trace(); t.to_chrome_trace(); "
             "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
