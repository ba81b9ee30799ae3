"""The findings of `cgviz.diagnose` in the explorer's head: plain data, most severe first, each
with the steps it rests on (the panel's links)."""

from __future__ import annotations

import json

import cgviz
from cgviz.data import gpu_trace, torch_trace
from cgviz.views.page_data import PageData, page_data


def test_an_overwritten_output_is_an_error_that_points_at_the_failing_use_then_the_generation():
    trace = torch_trace("torch_training_overwritten")
    found = page_data(trace)["findings"]
    assert [f["severity"] for f in found] == sorted((f["severity"] for f in found), key=["error", "warning", "info"].index)
    err = found[0]
    assert err["severity"] == "error" and "overwrote" in err["title"]
    (want,) = cgviz.diagnose(trace).of("overwritten")
    assert err["steps"] == want.evidence and err["step"] == want.evidence[0]
    assert trace.steps[err["step"]].kind == "error"
    assert trace.steps[err["steps"][1]].kind == "generation"
    assert err["suggestion"].startswith("clone")


def test_a_moved_static_input_is_a_warning_with_every_record_step():
    trace = gpu_trace("static_move")
    found = PageData(trace).head()["findings"]
    warn = found[0]
    assert warn["severity"] == "warning" and "recorded 5 times" in warn["title"]
    assert warn["steps"] == [i for i, s in enumerate(trace.steps) if s.kind == "record"]
    assert warn["step"] == warn["steps"][0]
    assert warn["suggestion"]
    assert {f["severity"] for f in found[1:]} == {"info"}
    json.dumps(found)  # plain data


def test_the_head_of_a_growing_trace_has_its_findings_again():
    data = PageData(gpu_trace("static_move"))
    assert data.head(5)["findings"] == data.head()["findings"]
    assert PageData(cgviz.Trace()).head()["findings"] == []
