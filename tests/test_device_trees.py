"""One process, trees on two devices (torch keeps a manager per device): the observed trace
recorded on two GPUs (cgviz/data/torch/torch_two_devices) names each step's device, and the
views give each device a lane, a drawing and a line of their own."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import cgviz
from cgviz.cli import main
from cgviz.data import torch_trace
from cgviz.trace.io import TraceFormatError, load_trace, save_trace
from cgviz.trace.lanes import tree_id_prefix, tree_keys, tree_name
from cgviz.trace.model import Step
from cgviz.views.page_data import page_data
from cgviz.views.text import devices_summary, headline
from cgviz.views.timeline import timeline_svg


@pytest.fixture(scope="module")
def trace() -> cgviz.Trace:
    return torch_trace("torch_two_devices")


def _tree_svg(data: dict, i: int) -> str:
    runs = data["trees"][data["steps"][i][0]]
    return "\n".join(data["lines"][j] for a, b in zip(runs[::2], runs[1::2]) for j in range(a, a + b))


def test_every_step_of_the_recorded_run_names_its_device_and_shows_only_that_devices_tree(trace):
    assert [d.split(" (")[0] for d in trace.meta["devices"]] == ["cuda:0", "cuda:1"]
    seen: dict[str, set] = {"cuda:0": set(), "cuda:1": set()}
    for step in trace.steps:
        assert step.device in seen, step
        if step.snapshot is not None:
            seen[step.device] |= {n.id for n in step.snapshot.nodes}
    assert seen["cuda:0"] and seen["cuda:1"] and not seen["cuda:0"] & seen["cuda:1"]
    records = {s.device for s in trace.steps if s.kind == "record"}
    assert records == {"cuda:0", "cuda:1"}


def test_the_page_has_a_lane_a_headline_and_a_drawing_per_device(trace):
    data = page_data(trace, range(len(trace.steps)))
    assert all(row[1].startswith(f"{s.device} · ") for row, s in zip(data["rows"], trace.steps))
    assert "on 2 devices" in data["timeline"]
    assert [v for k, v in data["header"]["meta"] if k == "devices"] == ["2 devices on NVIDIA H200: cuda:0 · cuda:1"]
    last = len(trace.steps) - 1
    own, other = trace.steps[last].device, ({"cuda:0", "cuda:1"} - {trace.steps[last].device}).pop()
    svg = _tree_svg(data, last)
    labels = re.findall(r">(cuda:\d) · ([^<]+)<", svg)
    assert labels[0] == (own, "this step's device") and labels[1][0] == other
    prefix = tree_id_prefix((None, other))
    theirs = {n.id for s in trace.steps if s.device == other and s.snapshot for n in s.snapshot.nodes}
    assert {int(m) for m in re.findall(rf'id="{prefix}node-(\d+)"', svg)} <= theirs
    assert re.findall(rf'id="{prefix}node-\d+"', svg), "the other device's tree is not drawn"
    mine = {int(m) for m in re.findall(r'id="node-(\d+)"', svg)}
    assert mine == {n.id for n in trace.steps[last].snapshot.nodes}


def test_the_timeline_names_a_lane_per_device(trace):
    svg = timeline_svg(trace, current=3)
    assert re.findall(r"Timeline[^<]*", svg) == ["Timeline: 10 steps (14 with repeats) on 2 devices"]
    lanes = re.findall(r">(cuda:\d)</text>", svg)
    assert lanes == ["cuda:0", "cuda:1"] and "rank" not in svg


def test_cgviz_info_counts_each_devices_calls(trace, tmp_path, capsys):
    path = tmp_path / "two.cgtrace.json"
    save_trace(trace, path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 devices on NVIDIA H200: cuda:0 · cuda:1" in out
    for device in ("cuda:0", "cuda:1"):
        calls = [s for s in trace.expanded() if s.device == device]
        replays = sum(s.kind == "execute" for s in calls)
        assert re.search(rf"^  {device}: {len(calls)} calls · 1 graph recorded · {replays} replays?$", out, re.M), out


def test_a_device_survives_saving_and_a_bad_one_is_refused_naming_it(trace, tmp_path):
    path = tmp_path / "t.cgtrace.json"
    save_trace(trace, path)
    assert [s.device for s in load_trace(path).steps] == [s.device for s in trace.steps]
    text = path.read_text(encoding="utf-8").replace('"cuda:1"', '"gpu one"', 1)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"device.*like 'cuda:1'.*'gpu one'"):
        load_trace(path)


def test_names_and_order_of_trees():
    keys = tree_keys([Step(0, "execute", "", 1, device=d) for d in ("cuda:10", "cuda:2", "cuda:0")])
    assert keys == [(None, "cuda:0"), (None, "cuda:2"), (None, "cuda:10")]
    assert [tree_name(k) for k in [(1, None), (None, "cuda:1"), (1, "cuda:1"), (None, None)]] == [
        "rank 1", "cuda:1", "rank 1 · cuda:1", "no rank"]
    assert tree_id_prefix((1, "cuda:1")) == "rank1-cuda1-"
    assert headline(Step(0, "record", "", 2, function="g", node=3, rank=1, device="cuda:1")) == \
        "rank 1 · cuda:1 · record g → node 3 · generation 2"
    assert devices_summary(["cuda:0 (NVIDIA A100)", "cuda:1 (NVIDIA H100)"]) == \
        "2 devices: cuda:0 (NVIDIA A100) · cuda:1 (NVIDIA H100)"


def test_a_function_compiled_once_per_device_is_no_recompilation_finding(trace):
    """torch compiles f for cuda:0 (0/0) and again for cuda:1 (0/1): that is not a shape problem."""
    assert not [f for f in cgviz.diagnose(trace).findings if f.kind == "shapes"]
    one_device = cgviz.Trace(meta=trace.meta, steps=[replace(s, device="cuda:0") for s in trace.steps])
    found = [f for f in cgviz.diagnose(one_device).findings if f.kind == "shapes"]
    assert len(found) == 1 and "on cuda:0 was compiled 2 times" in found[0].title
