"""Trace JSON: exact round trips, atomic saves, and clear errors for bad files."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import pathlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cgviz
from cgviz.scenarios import run_scenario
from cgviz.trace import io
from cgviz.trace.io import TraceFormatError, from_dict, load_trace, save_trace, to_dict
from cgviz.trace.model import SCHEMA_VERSION, STEP_KINDS, Block, NodeView, OutputView, Segment, Snapshot, Step, Trace

MiB = 1 << 20
ROOT = pathlib.Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "cgviz" / "data").glob("*/*.cgtrace.json"))
# traces written in the old layout (schema 1), kept so to test loading it: shipped ones, and
# GPU scenario traces recorded by an earlier version
SHIPPED_V1 = [p for p in SHIPPED if json.loads(p.read_text())["schema_version"] == 1] + sorted(
    (ROOT / "tests" / "data" / "old_layout").glob("*.cgtrace.json")
)


def hand_trace() -> Trace:
    """Five steps covering every field: snapshots, aliases, blocks with owners, repeats, invalidations."""
    base = 0x7F00_0000_0000
    out0 = OutputView(0, [4, 8], "float32", 128, base + 512, "live")
    out1 = OutputView(1, [4, 8], "float32", 128, base, "dead", alias_of="input 0")
    root = NodeView(0, "f", "warmup", None, [1], 1, 0, [out0], signature="(float32[4, 8])")
    child = NodeView(1, "g", "graph", 0, [], 1, 7, [out0, out1])
    blocks = [
        Block(base, 512, True, 400, owner="node 1 input 0 buffer", node=1),
        Block(base + 512, 512, True, 128, owner="node 0 output 0", node=0, output=0),
        Block(base + 1024, 2 * MiB - 1024, False),
    ]
    seg = Segment(base, 2 * MiB, "small", blocks)
    snap1 = Snapshot([root], 0, [0], "warmup", 1, [seg])
    snap2 = Snapshot([root, child], 1, [0, 1], "execution", 1, [seg])
    gone = copy.deepcopy(child)
    gone.outputs[0] = OutputView(0, [4, 8], "float32", 128, base + 512, "invalid")
    snap3 = Snapshot([root, gone], None, [], "none", 2, [])
    steps = [
        Step(0, "warmup", "first call of f", 1, function="f", node=0, duration=0.1 + 0.2, snapshot=snap1),
        Step(1, "record", "no child for g under node 0", 1, function="g", node=1, parent=0, snapshot=snap2),
        Step(2, "execute", "g replays node 1", 1, "g", 1, 0, duration=3.5, repeat=7, snapshot=snap2),
        Step(3, "generation", "mark_step(): output 0 of node 1 invalidated", 2, invalidated=[[1, 0]], snapshot=snap3),
        Step(4, "error", "g raised RuntimeError: accessing tensor output …", 2, function="g"),
    ]
    return Trace(steps, meta={"backend": "sim", "device": "cpu", "nested": {"a": [1, 2.5, None, True]}})


def engine_trace(level: str = "full") -> Trace:
    tree = cgviz.Tree("sim", trace=level)
    f = tree.wrap(lambda x: x * 2 + 1, name="f")
    x = torch.ones(4)
    for _ in range(3):
        y = f(x)
        del y
    tree.mark_step()
    y = f(x)  # kept live across the step: invalidated
    tree.mark_step()
    z = f(x)
    del y, z
    return tree.trace


def v1_dict(trace: Trace) -> dict:
    """The trace in layout 1, as cgviz wrote schema 1: every step's snapshot written out in full."""
    steps = [dataclasses.asdict(s) for s in trace.steps]
    return {"format": "cgviz-trace", "schema_version": 1, "meta": trace.meta, "steps": steps}


def synthetic_trace(nodes: int, steps: int) -> Trace:
    """The render benchmark's synthetic trace (snapshots sharing unchanged objects)."""
    spec = importlib.util.spec_from_file_location("render_benchmark", ROOT / "benchmarks" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.synthetic_trace(nodes, steps)[0]


def held(trace: Trace) -> dict[str, list]:
    """The distinct objects (by identity) that the trace's snapshots hold, by table name."""
    out: dict[str, dict] = {"snapshots": {}, "nodes": {}, "outputs": {}, "segments": {}, "blocks": {}}
    for snap in (s.snapshot for s in trace.steps if s.snapshot is not None):
        out["snapshots"][id(snap)] = snap
        for node in snap.nodes:
            out["nodes"][id(node)] = node
            out["outputs"].update((id(o), o) for o in node.outputs)
        for seg in snap.segments:
            out["segments"][id(seg)] = seg
            out["blocks"].update((id(b), b) for b in seg.blocks)
    return {name: list(objects.values()) for name, objects in out.items()}


def distinct_by_value(objects: list) -> int:
    return len({json.dumps(dataclasses.asdict(o), sort_keys=True) for o in objects})


def write_json(path: pathlib.Path, data) -> pathlib.Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# -- round trips --------------------------------------------------------------------------------
def test_round_trip_hand_built(tmp_path):
    trace = hand_trace()
    path = tmp_path / "t.json"
    save_trace(trace, path)
    loaded = load_trace(path)
    assert loaded == trace
    assert loaded.steps[0].duration == 0.1 + 0.2  # floats exactly
    assert loaded.steps[2].repeat == 7 and loaded.steps[3].invalidated == [[1, 0]]
    assert loaded.steps[4].snapshot is None
    assert Trace.load(str(path)) == trace  # the model's own entry points, str path


@pytest.mark.parametrize("level", ["full", "events"])
def test_round_trip_engine(tmp_path, level):
    trace = engine_trace(level)
    assert any(s.invalidated for s in trace.steps)
    trace.save(tmp_path / "e.json")
    loaded = Trace.load(tmp_path / "e.json")
    assert loaded == trace
    assert (loaded.last_snapshot() is None) == (level == "events")
    assert loaded.counts() == trace.counts()


@pytest.mark.parametrize("name", ["branching", "fwd_bwd", "dynamic_shapes", "training"])
def test_round_trip_scenarios(tmp_path, name):
    trace = run_scenario(name, "sim", trace="full").trace
    path = tmp_path / "s.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    tables = json.loads(path.read_text())["tables"]
    original, shared = held(trace), held(loaded)
    assert len(original["nodes"]) > len(tables["nodes"])  # the engine builds new node views for each snapshot
    for name, entries in tables.items():
        assert len(entries) == distinct_by_value(original[name]), name  # each distinct value once
        assert len(shared[name]) == len(entries), name  # and loaded as one object, shared


def test_round_trip_synthetic(tmp_path):
    trace = synthetic_trace(100, 1000)
    path = tmp_path / "big.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    data = json.loads(path.read_text())
    original = held(trace)
    for name, entries in data["tables"].items():
        assert len(entries) == distinct_by_value(original[name]), name
        assert len(held(loaded)[name]) == len(entries), name
    # each snapshot entry costs in proportion to what changed since the previous entry, not to its size
    snaps = {ref: loaded.steps[i].snapshot for i, ref in enumerate(s["snapshot"] for s in data["steps"])}
    for k in range(1, len(snaps)):
        before, now = snaps[k - 1].nodes, snaps[k].nodes
        changed = sum(1 for p, node in enumerate(now) if p >= len(before) or node is not before[p])
        assert len(data["tables"]["snapshots"][k]["nodes"]) <= 2 * changed + 1, k
    assert path.stat().st_size < 1500 * len(trace.steps)


def test_equal_objects_are_stored_once():
    shared, copied = hand_trace(), hand_trace()
    for step in copied.steps:  # every snapshot with objects of its own, as the engine makes them
        step.snapshot = copy.deepcopy(step.snapshot)
    assert copied.steps[1].snapshot is not copied.steps[2].snapshot
    assert io.dumps(copied) == io.dumps(shared)
    tables = to_dict(copied)["tables"]
    assert {name: len(entries) for name, entries in tables.items()} == {
        "snapshots": 3, "nodes": 3, "outputs": 3, "segments": 1, "blocks": 3
    }


def test_loaded_snapshots_share_equal_objects():
    loaded = io.loads(io.dumps(hand_trace()))
    s0, s1, s2, s3 = (loaded.steps[i].snapshot for i in range(4))
    assert s1 is s2  # equal snapshots: one object
    assert s1.nodes[0] is s0.nodes[0] and s3.nodes[0] is s0.nodes[0]  # the unchanged root
    assert s1.segments[0] is s0.segments[0]
    assert s3.nodes[1] is not s1.nodes[1] and s3.nodes[1].outputs[1] is s1.nodes[1].outputs[1]


def test_snapshot_lists_are_deltas_against_the_previous_snapshot():
    nodes = [NodeView(i, f"f{i}", "graph", None, [], 1, 0, [OutputView(0, [4], "float32", 16, 16 * i, "live")])
             for i in range(50)]
    replayed = copy.deepcopy(nodes)  # all objects new, one value changed
    replayed[10].replays = 1
    grown = replayed + [NodeView(50, "g", "graph", 49, [], 1, 0, [])]
    snapshots = [Snapshot(nodes, None, [], "none", 1), Snapshot(replayed, 10, [10], "execution", 1),
                 Snapshot(grown, 50, [49, 50], "recording", 1)]
    trace = Trace([Step(i, "execute", "r", 1, snapshot=snap) for i, snap in enumerate(snapshots)])
    data = to_dict(trace)
    entries = data["tables"]["snapshots"]
    assert entries[0]["nodes"] == list(range(50))
    assert entries[1]["nodes"] == [[0, 10], 50, [11, 39]]
    assert entries[2]["nodes"] == [[0, 50], 51]
    assert len(data["tables"]["nodes"]) == 52 and len(data["tables"]["outputs"]) == 50
    assert from_dict(data) == trace


def test_string_variants():
    trace = hand_trace()
    text = io.dumps(trace)
    assert io.loads(text) == trace
    assert "…" in text and "\n" not in text  # readable and compact
    assert from_dict(json.loads(text)) == trace


def test_to_dict_layout_and_defaults_omitted():
    data = to_dict(hand_trace())
    assert list(data) == ["format", "schema_version", "meta", "tables", "steps"]
    assert data["format"] == "cgviz-trace" and data["schema_version"] == SCHEMA_VERSION == 2
    tables = data["tables"]
    assert list(tables) == ["snapshots", "nodes", "outputs", "segments", "blocks"]
    warmup, record, execute, generation, error = data["steps"]
    assert "repeat" not in warmup and "invalidated" not in warmup and "parent" not in warmup
    assert execute["repeat"] == 7 and generation["invalidated"] == [[1, 0]]
    assert "snapshot" not in error and "node" not in error
    assert [s["snapshot"] for s in (warmup, record, execute, generation)] == [0, 1, 1, 2]  # one snapshot, two steps
    assert tables["snapshots"][1]["nodes"] == [[0, 1], 1]  # the previous snapshot's node, then a new one
    assert tables["snapshots"][1]["segments"] == [[0, 1]]
    assert "segments" not in tables["snapshots"][2]  # none: the default
    out0, out1 = (tables["outputs"][ref] for ref in tables["nodes"][1]["outputs"])
    assert "alias_of" not in out0 and out1["alias_of"] == "input 0"
    free = tables["blocks"][tables["segments"][0]["blocks"][2]]
    assert set(free) == {"address", "size", "allocated"}
    json.dumps(data, allow_nan=False)  # plain JSON types only


# -- the old layout (schema 1) ------------------------------------------------------------------
def test_old_layout_loads():
    loaded = from_dict(v1_dict(hand_trace()))
    assert loaded.schema_version == 1
    assert dataclasses.replace(loaded, schema_version=SCHEMA_VERSION) == hand_trace()


@pytest.mark.parametrize("path", SHIPPED_V1, ids=lambda p: p.parent.name + "/" + p.name)
def test_shipped_old_layout_traces_load_and_resave(tmp_path, path):
    old = load_trace(path)
    assert old.schema_version == 1 and len(old.steps) > 0
    save_trace(old, tmp_path / "new.json")
    assert load_trace(tmp_path / "new.json") == dataclasses.replace(old, schema_version=SCHEMA_VERSION)
    if old.last_snapshot() is not None:
        assert (tmp_path / "new.json").stat().st_size < path.stat().st_size


def test_shipped_traces_include_old_layout_snapshots():
    assert len(SHIPPED_V1) >= 7 and sum(load_trace(p).last_snapshot() is not None for p in SHIPPED_V1) >= 7


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_shipped_trace_loads_and_resaves_unchanged(tmp_path, path):
    trace = load_trace(path)
    save_trace(trace, tmp_path / "again.json")
    assert load_trace(tmp_path / "again.json") == dataclasses.replace(trace, schema_version=SCHEMA_VERSION)


nodes = st.builds(
    NodeView,
    id=st.integers(0, 50),
    function=st.text(max_size=8),
    kind=st.sampled_from(["warmup", "graph"]),
    parent=st.none() | st.integers(0, 50),
    children=st.lists(st.integers(0, 50), max_size=3),
    generation=st.integers(1, 9),
    replays=st.integers(0, 10**6),
    outputs=st.lists(
        st.builds(
            OutputView,
            index=st.integers(0, 9),
            shape=st.lists(st.integers(0, 64), max_size=3),
            dtype=st.sampled_from(["float32", "bfloat16"]),
            nbytes=st.integers(0, 1 << 40),
            address=st.none() | st.integers(0, 1 << 48),
            state=st.sampled_from(["live", "dead", "invalid"]),
            alias_of=st.none() | st.sampled_from(["input 0", "output 1", "external"]),
        ),
        max_size=3,
    ),
    signature=st.text(max_size=8),
)
blocks = st.builds(
    Block,
    address=st.integers(0, 1 << 48),
    size=st.integers(0, 1 << 30),
    allocated=st.booleans(),
    requested=st.integers(0, 1 << 30),
    owner=st.none() | st.text(max_size=10),
    node=st.none() | st.integers(0, 9),
    output=st.none() | st.integers(0, 9),
)
snapshots = st.builds(
    Snapshot,
    nodes=st.lists(nodes, max_size=3),
    current_node=st.none() | st.integers(0, 9),
    path=st.lists(st.integers(0, 9), max_size=4),
    state=st.sampled_from(["none", "warmup", "recording", "execution"]),
    generation=st.integers(1, 9),
    segments=st.lists(
        st.builds(
            Segment, st.integers(0, 1 << 48), st.integers(0, 1 << 30), st.text(max_size=5),
            st.lists(blocks, max_size=3),
        ),
        max_size=2,
    ),
)
steps = st.builds(
    Step,
    index=st.integers(0, 10**6),
    kind=st.sampled_from(STEP_KINDS),
    reason=st.text(),
    generation=st.integers(1, 10**6),
    function=st.none() | st.text(max_size=8),
    node=st.none() | st.integers(0, 99),
    parent=st.none() | st.integers(0, 99),
    duration=st.floats(0, 1e6, allow_nan=False),
    repeat=st.integers(1, 10**6),
    invalidated=st.lists(st.lists(st.integers(0, 99), min_size=2, max_size=2), max_size=3),
    snapshot=st.none() | snapshots,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(steps, max_size=4), st.dictionaries(st.text(max_size=5), st.integers() | st.text() | st.none()))
def test_round_trip_property(step_list, meta):
    trace = Trace(step_list, meta)
    assert io.loads(io.dumps(trace)) == trace
    assert dataclasses.replace(from_dict(v1_dict(trace)), schema_version=SCHEMA_VERSION) == trace


# -- saving -------------------------------------------------------------------------------------
def test_save_accepts_str_and_pathlike_and_leaves_no_temp_files(tmp_path):
    save_trace(hand_trace(), str(tmp_path / "a.json"))
    save_trace(hand_trace(), tmp_path / "b.json")
    trace = engine_trace()
    save_trace(trace, tmp_path / "b.json")  # overwrite
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]
    assert load_trace(tmp_path / "a.json") == hand_trace() and load_trace(tmp_path / "b.json") == trace


def test_save_missing_directory_is_clear(tmp_path):
    target = tmp_path / "no" / "such" / "t.json"
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        save_trace(hand_trace(), target)
    assert str(tmp_path / "no" / "such") in str(info.value)


def test_failed_write_keeps_old_file(tmp_path):
    path = tmp_path / "t.json"
    save_trace(hand_trace(), path)
    before = path.read_bytes()

    def half_then_fail(fh):
        fh.write('{"format": "cgviz-trace", ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        io.write_atomic(path, half_then_fail, "trace")
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.json"]


@pytest.mark.parametrize("broken", ["os.replace", "os.fsync"])
def test_failed_save_keeps_old_file(tmp_path, monkeypatch, broken):
    path = tmp_path / "t.json"
    save_trace(hand_trace(), path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    name = broken.split(".")[1]
    monkeypatch.setattr(os, name, boom)
    with pytest.raises(OSError, match="disk full"):
        save_trace(engine_trace(), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["t.json"]
    assert load_trace(path) == hand_trace()


def test_unserialisable_meta_fails_before_replacing(tmp_path):
    path = tmp_path / "t.json"
    save_trace(hand_trace(), path)
    bad = hand_trace()
    bad.meta["device"] = torch.device("cpu")
    with pytest.raises(TypeError):
        save_trace(bad, path)
    assert load_trace(path) == hand_trace() and os.listdir(tmp_path) == ["t.json"]


# -- loading bad files --------------------------------------------------------------------------
def test_missing_file_names_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_trace(tmp_path / "nope.json")


def test_truncated_file(tmp_path):
    path = tmp_path / "t.json"
    save_trace(engine_trace(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="truncated or not JSON") as info:
        load_trace(path)
    assert str(path) in str(info.value) and "line 1 column" in str(info.value)


@pytest.mark.parametrize("content", ["", "hello", "{'format': 1}", "[1, 2"])
def test_not_json(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(TraceFormatError, match="truncated or not JSON") as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_not_utf8(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"format": "\xff\xfe"}')
    with pytest.raises(TraceFormatError, match="not UTF-8"):
        load_trace(path)


def test_error_is_a_value_error():
    assert issubclass(TraceFormatError, ValueError)


def _set(path, value):
    def mutate(data):
        *parents, last = path
        target = data
        for key in parents:
            target = target[key]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value

    return mutate


DELETE = object()
LAYOUTS = {"layout 1": v1_dict, "layout 2": to_dict}

# Problems outside snapshots: the same in both layouts.
BAD = {
    "wrong format marker": (_set(("format",), "chrome-trace"), ["not a cgviz trace", "'chrome-trace'"]),
    "no format marker": (_set(("format",), DELETE), ["not a cgviz trace", "no 'format' marker"]),
    "newer schema": (
        _set(("schema_version",), SCHEMA_VERSION + 1),
        [f"written by a newer cgviz (schema {SCHEMA_VERSION + 1} > {SCHEMA_VERSION}); upgrade cgviz"],
    ),
    "schema not int": (_set(("schema_version",), "1"), ["'schema_version' must be a positive integer"]),
    "steps missing": (_set(("steps",), DELETE), ["missing top-level field 'steps'"]),
    "steps not array": (_set(("steps",), {}), ["field 'steps' must be an array, not an object"]),
    "meta not object": (_set(("meta",), [1]), ["field 'meta' must be an object, not an array"]),
    "unknown top-level": (_set(("extra",), 1), ["unknown top-level field 'extra'"]),
    "missing field": (_set(("steps", 3, "kind"), DELETE), ["step 3: missing field 'kind'"]),
    "wrong type": (
        _set(("steps", 2, "generation"), "2"),
        ["step 2: field 'generation' must be an integer, not a string"],
    ),
    "bool for int": (_set(("steps", 1, "node"), True), ["step 1: field 'node' must be an integer, not a boolean"]),
    "float field": (_set(("steps", 0, "duration"), "slow"), ["step 0: field 'duration' must be a number"]),
    "unknown step kind": (
        _set(("steps", 1, "kind"), "explode"),
        ["step 1: field 'kind' must be one of 'warmup', 'record'", "(got 'explode')"],
    ),
    "step not object": (_set(("steps", 4), "execute"), ["step 4: must be an object, not a string"]),
    "unknown field": (_set(("steps", 4, "colour"), "red"), ["step 4: unknown field 'colour'"]),
    "repeat zero": (_set(("steps", 2, "repeat"), 0), ["step 2: field 'repeat' must be at least 1"]),
    "invalidated not pair": (
        _set(("steps", 3, "invalidated"), [[1, 0, 2]]),
        ["step 3: field 'invalidated[0]' must be a [node, output] pair"],
    ),
    "invalidated item type": (
        _set(("steps", 3, "invalidated"), [[1, "0"]]),
        ["step 3: field 'invalidated[0][1]' must be an integer"],
    ),
}

# Problems inside snapshots: written out in each step (layout 1) or in the tables (layout 2),
# reported alike, at the first step that holds the bad object.
BAD_SNAPSHOT = {
    "bad output state": (
        ("steps", 0, "snapshot", "nodes", 0, "outputs", 0, "state"), ("tables", "outputs", 0, "state"), "zombie",
        ["step 0 snapshot node 0 output 0: field 'state' must be one of 'live', 'dead', 'invalid'", "'zombie'"],
    ),
    "bad list item": (
        ("steps", 1, "snapshot", "path", 1), ("tables", "snapshots", 1, "path", 1), "1",
        ["step 1 snapshot: field 'path[1]' must be an integer"],
    ),
    "bad block": (
        ("steps", 0, "snapshot", "segments", 0, "blocks", 1, "allocated"), ("tables", "blocks", 1, "allocated"), 1,
        ["step 0 snapshot segment 0 block 1: field 'allocated' must be true or false, not an integer"],
    ),
    "node not object": (
        ("steps", 3, "snapshot", "nodes", 1), ("tables", "nodes", 2), 5,
        ["step 3 snapshot node 1: must be an object, not an integer"],
    ),
    "unknown segment field": (
        ("steps", 0, "snapshot", "segments", 0, "colour"), ("tables", "segments", 0, "colour"), "red",
        ["step 0 snapshot segment 0: unknown field 'colour'"],
    ),
    "missing block field": (
        ("steps", 0, "snapshot", "segments", 0, "blocks", 2, "size"), ("tables", "blocks", 2, "size"), DELETE,
        ["step 0 snapshot segment 0 block 2: missing field 'size'"],
    ),
}

# Problems of layout 2's tables and references (hand_trace: snapshots 0 [node 0], 1 [node 0, node 1],
# 2 [node 0, node 2], each of 3 nodes, 3 outputs, 1 segment and 3 blocks).
BAD_TABLES = {
    "no tables": (_set(("tables",), DELETE), ["missing top-level field 'tables'"]),
    "tables not object": (_set(("tables",), []), ["field 'tables' must be an object, not an array"]),
    "missing table": (_set(("tables", "blocks"), DELETE), ["tables: missing table 'blocks'"]),
    "unknown table": (_set(("tables", "edges"), []), ["tables: unknown table 'edges'"]),
    "table not array": (_set(("tables", "nodes"), {}), ["tables: field 'nodes' must be an array, not an object"]),
    "dangling snapshot": (
        _set(("steps", 3, "snapshot"), 3),
        ["step 3: field 'snapshot' refers to entry 3 of the snapshots table, which has 3 entries"],
    ),
    "snapshot written out": (
        _set(("steps", 2, "snapshot"), {"nodes": []}),
        ["step 2: field 'snapshot' must be a reference to an entry of the snapshots table (an integer), not an object"],
    ),
    "bool as reference": (
        _set(("steps", 2, "snapshot"), True),
        ["step 2: field 'snapshot' must be a reference to an entry of the snapshots table (an integer), not a boolean"],
    ),
    "dangling node": (
        _set(("tables", "snapshots", 1, "nodes", 1), 7),
        ["step 1 snapshot: field 'nodes[1]' refers to entry 7 of the nodes table, which has 3 entries"],
    ),
    "node reference not integer": (
        _set(("tables", "snapshots", 0, "nodes", 0), "0"),
        ["step 0 snapshot: field 'nodes[0]' must be a reference to an entry of the nodes table (an integer), "
         "not a string"],
    ),
    "negative output reference": (
        _set(("tables", "nodes", 0, "outputs", 0), -1),
        ["step 0 snapshot node 0: field 'outputs[0]' refers to entry -1 of the outputs table, which has 3 entries"],
    ),
    "output written out": (
        _set(("tables", "nodes", 1, "outputs", 1), {"index": 1}),
        ["step 1 snapshot node 1: field 'outputs[1]' must be a reference to an entry of the outputs table"],
    ),
    "dangling block": (
        _set(("tables", "segments", 0, "blocks", 2), 3),
        ["step 0 snapshot segment 0: field 'blocks[2]' refers to entry 3 of the blocks table, which has 3 entries"],
    ),
    "delta not array": (
        _set(("tables", "snapshots", 1, "nodes"), 1),
        ["step 1 snapshot: field 'nodes' must be an array, not an integer"],
    ),
    "run past the previous snapshot": (
        _set(("tables", "snapshots", 1, "nodes", 0), [0, 2]),
        ["step 1 snapshot: field 'nodes[0]' must be a reference or a run [start, count] within the previous "
         "snapshot's 1 nodes (got [0, 2])"],
    ),
    "run in the first snapshot": (
        _set(("tables", "snapshots", 0, "segments", 0), [0, 1]),
        ["step 0 snapshot: field 'segments[0]' must be a reference or a run [start, count] within the previous "
         "snapshot's 0 segments"],
    ),
    "run not a pair": (
        _set(("tables", "snapshots", 2, "nodes", 0), [0]),
        ["step 3 snapshot: field 'nodes[0]' must be a reference or a run [start, count]", "(got [0])"],
    ),
    "empty run": (
        _set(("tables", "snapshots", 2, "nodes", 0), [0, 0]),
        ["step 3 snapshot: field 'nodes[0]' must be a reference or a run [start, count]", "(got [0, 0])"],
    ),
    "bad unused entry": (
        lambda data: data["tables"]["nodes"].append(dict(data["tables"]["nodes"][0], replays="7")),
        ["nodes table entry 3: field 'replays' must be an integer, not a string"],
    ),
    "bad output of an unused node": (
        lambda data: (data["tables"]["nodes"].append(dict(data["tables"]["nodes"][0], outputs=[3])),
                      data["tables"]["outputs"].append({"index": 0})),
        ["nodes table entry 3 output 0: missing field 'shape'"],
    ),
}


def expect_bad(path: pathlib.Path, data: dict, expected: list[str]) -> None:
    write_json(path, data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for part in expected:
        assert part in message, message


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_content_names_file_and_problem(tmp_path, case, layout):
    mutate, expected = BAD[case]
    data = LAYOUTS[layout](hand_trace())
    mutate(data)
    expect_bad(tmp_path / "bad.json", data, expected)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOT))
def test_bad_snapshot_names_the_step_in_both_layouts(tmp_path, case, layout):
    inline, tabled, value, expected = BAD_SNAPSHOT[case]
    data = LAYOUTS[layout](hand_trace())
    _set(inline if layout == "layout 1" else tabled, value)(data)
    expect_bad(tmp_path / "bad.json", data, expected)


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_bad_tables_name_file_step_and_field(tmp_path, case):
    mutate, expected = BAD_TABLES[case]
    data = to_dict(hand_trace())
    mutate(data)
    expect_bad(tmp_path / "bad.json", data, expected)


def test_old_layout_has_no_tables(tmp_path):
    data = v1_dict(hand_trace())
    data["tables"] = to_dict(hand_trace())["tables"]
    expect_bad(tmp_path / "bad.json", data, ["unknown top-level field 'tables'"])


def test_top_level_not_object(tmp_path):
    path = write_json(tmp_path / "t.json", [1, 2])
    with pytest.raises(TraceFormatError, match="top level is an array"):
        load_trace(path)


def test_engine_file_with_bad_state_names_first_step_holding_it(tmp_path):
    trace = engine_trace()
    data = to_dict(trace)
    last = len(data["tables"]["outputs"]) - 1
    bad = OutputView(**data["tables"]["outputs"][last])
    step, node, output = next((i, j, k) for i, s in enumerate(trace.steps) if s.snapshot
                              for j, n in enumerate(s.snapshot.nodes) for k, o in enumerate(n.outputs) if o == bad)
    data["tables"]["outputs"][last]["state"] = "gone"
    expect_bad(tmp_path / "t.json", data, [f"step {step} snapshot node {node} output {output}: field 'state'"])
