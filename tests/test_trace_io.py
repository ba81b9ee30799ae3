"""Trace JSON: exact round trips, atomic saves, and clear errors for bad files."""

from __future__ import annotations

import copy
import json
import os
import pathlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cgviz
from cgviz.trace import io
from cgviz.trace.io import TraceFormatError, from_dict, load_trace, save_trace, to_dict
from cgviz.trace.model import SCHEMA_VERSION, STEP_KINDS, Block, NodeView, OutputView, Segment, Snapshot, Step, Trace

MiB = 1 << 20


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


def test_string_variants():
    trace = hand_trace()
    text = io.dumps(trace)
    assert io.loads(text) == trace
    assert "…" in text and "\n" not in text  # readable and compact
    assert from_dict(json.loads(text)) == trace


def test_to_dict_layout_and_defaults_omitted():
    data = to_dict(hand_trace())
    assert list(data) == ["format", "schema_version", "meta", "steps"]
    assert data["format"] == "cgviz-trace" and data["schema_version"] == SCHEMA_VERSION
    warmup, record, execute, generation, error = data["steps"]
    assert "repeat" not in warmup and "invalidated" not in warmup and "parent" not in warmup
    assert execute["repeat"] == 7 and generation["invalidated"] == [[1, 0]]
    assert "snapshot" not in error and "node" not in error
    out0, out1 = record["snapshot"]["nodes"][1]["outputs"]
    assert "alias_of" not in out0 and out1["alias_of"] == "input 0"
    free = record["snapshot"]["segments"][0]["blocks"][2]
    assert set(free) == {"address", "size", "allocated"}
    json.dumps(data, allow_nan=False)  # plain JSON types only


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


@pytest.mark.parametrize("broken", ["json.dump", "os.replace", "os.fsync"])
def test_failed_save_keeps_old_file(tmp_path, monkeypatch, broken):
    path = tmp_path / "t.json"
    save_trace(hand_trace(), path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    module, name = broken.split(".")
    monkeypatch.setattr({"json": io.json, "os": io.os}[module], name, boom)
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
STATE = ("steps", 0, "snapshot", "nodes", 0, "outputs", 0, "state")

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
    "bad output state": (
        _set(STATE, "zombie"),
        ["step 0 snapshot node 0 output 0: field 'state' must be one of 'live', 'dead', 'invalid'", "'zombie'"],
    ),
    "bad list item": (
        _set(("steps", 1, "snapshot", "path", 1), "1"),
        ["step 1 snapshot: field 'path[1]' must be an integer"],
    ),
    "bad block": (
        _set(("steps", 1, "snapshot", "segments", 0, "blocks", 1, "allocated"), 1),
        ["step 1 snapshot segment 0 block 1: field 'allocated' must be true or false, not an integer"],
    ),
    "snapshot not object": (_set(("steps", 2, "snapshot"), [1]), ["step 2 snapshot: must be an object, not an array"]),
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


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_content_names_file_and_problem(tmp_path, case):
    mutate, expected = BAD[case]
    data = to_dict(hand_trace())
    mutate(data)
    path = write_json(tmp_path / "bad.json", data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for part in expected:
        assert part in message, message


def test_top_level_not_object(tmp_path):
    path = write_json(tmp_path / "t.json", [1, 2])
    with pytest.raises(TraceFormatError, match="top level is an array"):
        load_trace(path)


def test_engine_file_with_bad_state_names_step(tmp_path):
    data = to_dict(engine_trace())
    k = len(data["steps"]) - 1
    data["steps"][k]["snapshot"]["nodes"][1]["outputs"][0]["state"] = "gone"
    path = write_json(tmp_path / "t.json", data)
    with pytest.raises(TraceFormatError, match=f"step {k} snapshot node 1 output 0: field 'state'"):
        load_trace(path)
