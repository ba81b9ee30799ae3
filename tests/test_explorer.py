"""The Explorer widget without a browser: its traits, the pieces it sends, a live tree's steps."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("anywidget")

import torch  # noqa: E402
import traitlets  # noqa: E402

import cgviz  # noqa: E402
from cgviz.scenarios import run_scenario  # noqa: E402
from cgviz.views.html import explorer_module  # noqa: E402
from cgviz.views.page_data import page_data  # noqa: E402
from cgviz.widgets.explorer import FIRST_WINDOW, Explorer  # noqa: E402


@pytest.fixture(scope="module")
def trace():
    return run_scenario("branching", "sim").trace


class Sent(list):
    """The custom messages an Explorer sends to its front end."""

    def __call__(self, content, buffers=None):
        self.append(content)


def explorer_of(source, **kw) -> tuple[Explorer, Sent]:
    ex = Explorer(source, **kw)
    ex.send = sent = Sent()
    return ex, sent


def test_step_clamps_and_says_what_it_wants(trace):
    ex, _ = explorer_of(trace)
    n = len(trace.steps)
    assert ex.step == 0
    ex.step = 12
    assert ex.step == 12
    ex.step = n + 50
    assert ex.step == n - 1
    ex.step = -3
    assert ex.step == 0
    with pytest.raises(traitlets.TraitError, match="step must be a step index"):
        ex.step = True
    with pytest.raises(traitlets.TraitError):
        ex.step = "3"
    assert Explorer(trace, step=-1).step == n - 1


def test_selected_is_a_node_of_the_trace_or_none(trace):
    ex, _ = explorer_of(trace)
    ex.selected = 2
    assert ex.selected == 2
    with pytest.raises(traitlets.TraitError, match=r"no node 99 in this trace \(its nodes: 0, 1, 2, 3, 4, 5\)"):
        ex.selected = 99
    assert ex.selected == 2
    ex.selected = None
    assert ex.selected is None


def test_the_first_view_is_a_window_and_a_far_jump_is_answered_on_demand(trace):
    ex, sent = explorer_of(trace)
    first = ex._first
    assert sorted(map(int, first["at"])) == list(range(min(FIRST_WINDOW, len(trace.steps))))
    assert ex._head["n"] == len(trace.steps)
    assert [r[1] for r in ex._head["rows"]] == [s.headline() for s in trace.steps]
    whole = page_data(trace, renderer=ex._data.renderer)
    ex._on_msg(ex, {"type": "steps", "steps": [18, 17, 400, "x"]}, [])
    (reply,) = sent
    assert reply["type"] == "piece" and sorted(reply["piece"]["at"]) == ["17", "18"]
    # the pieces rebuild what page_data gives for the same steps
    lines = first["lines"] + reply["piece"]["lines"]
    nodes = first["nodes"] + reply["piece"]["nodes"]
    for i in (0, 17, 18):
        rec = {**first["at"], **reply["piece"]["at"]}[str(i)]
        assert rec[3] == whole["steps"][i][3] and rec[4] >= -1
        snaps = first["snaps"] + reply["piece"]["snaps"]
        ids = [nodes[j][0] for a, k in zip(snaps[rec[2]]["n"][::2], snaps[rec[2]]["n"][1::2]) for j in range(a, a + k)]
        assert ids == [n.id for n in trace.steps[i].snapshot.nodes]
    assert len(lines) == len(set(lines))  # nothing sent twice
    sent.clear()
    ex._on_msg(ex, {"type": "steps", "steps": [17]}, [])
    assert sent[0]["piece"]["lines"] == [] and sent[0]["piece"]["at"]["17"] == reply["piece"]["at"]["17"]


def test_a_long_trace_opens_without_drawing_every_step(trace):
    steps = list(trace.steps) * 200
    long = cgviz.Trace(steps=steps, meta=dict(trace.meta))
    ex, _ = explorer_of(long, step=2000)
    assert sorted(map(int, ex._first["at"])) == list(range(2000 - FIRST_WINDOW // 2, 2000 + FIRST_WINDOW))
    assert ex._head["n"] == len(steps) and len(ex._head["tx"]) == len(steps)


def test_a_live_trees_new_steps_reach_the_widget():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    ex, sent = explorer_of(tree)
    for _ in range(5):
        f(torch.ones(3))
    heads = [m["head"] for m in sent if m["type"] == "head"]
    assert heads and heads[-1]["n"] == len(tree.trace.steps)
    assert ex.step == len(tree.trace.steps) - 1  # it follows the last step
    rows = []
    for h in heads:
        rows[h["start"]:] = h["rows"]
    assert [r[1] for r in rows] == [s.headline() for s in tree.trace.steps]
    ex.close()
    told = len(sent)
    f(torch.ones(3, 2))  # a new signature: new steps, which a closed explorer no longer hears of
    assert len(sent) == told
    f(torch.ones(3))
    assert len([m for m in sent if m["type"] == "head"]) == len(heads)


def test_run_next_call_runs_the_workload_and_reports_its_error():
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x + 1, name="f")
    calls = []

    def workload():
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("boom")
        f(torch.ones(2))

    ex, sent = explorer_of(tree, workload=workload)
    assert ex._runnable
    ex._on_msg(ex, {"type": "run"}, [])
    assert sent[-1] == {"type": "ran", "error": None} and ex.step == len(tree.trace.steps) - 1
    ex._on_msg(ex, {"type": "run"}, [])
    assert sent[-1]["type"] == "ran" and "ValueError: boom" in sent[-1]["error"]
    with pytest.raises(RuntimeError, match="no workload"):
        Explorer(tree).run_next()
    ex.close()


def test_the_widget_runs_the_pages_module_and_stays_small():
    page = Path(cgviz.__file__).parent / "views" / "page"
    parts = [(page / name).read_text(encoding="utf-8") for name in ("explorer_logic.js", "explorer_panels.js", "explorer.js")]
    assert Explorer._esm == "\n".join(parts) == explorer_module()
    assert "export default { render }" in Explorer._esm and "getElementById" not in Explorer._esm
    source = Path(cgviz.__file__).parent / "widgets" / "explorer.py"
    assert len(source.read_text(encoding="utf-8").splitlines()) < 300


@pytest.mark.parametrize("kwargs, error, words", [
    ({"step": 1.5}, TypeError, "step must be a step index (an int) or None, not 1.5"),
    ({"step": "3"}, TypeError, "step must be a step index (an int) or None, not '3'"),
    ({"live_interval": "x"}, ValueError, "live_interval must be a number of seconds, 0 or more, not 'x'"),
    ({"live_interval": float("nan")}, ValueError, "live_interval must be a number of seconds"),
    ({"live_interval": -1}, ValueError, "live_interval must be a number of seconds"),
])
def test_bad_arguments_are_named_and_leave_nothing_to_undo(trace, kwargs, error, words):
    import gc
    import sys

    said = []
    hook, sys.unraisablehook = sys.unraisablehook, said.append
    try:
        with pytest.raises(error) as raised:
            Explorer(trace, **kwargs)
        del raised
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert said == []  # no "Exception ignored in ... __del__" from the half-made widget
    with pytest.raises(error, match=__import__("re").escape(words)):
        Explorer(trace, **kwargs)


def test_a_numpy_integer_is_a_step(trace):
    import numpy as np

    assert Explorer(trace, step=np.int64(2)).step == 2


def test_a_message_asking_for_steps_in_another_shape_gets_no_pictures(trace):
    explorer = Explorer(trace)
    for asked in (5, "1,2", None, {"0": 1}):
        reply = explorer.answer({"type": "steps", "steps": asked})
        assert reply["type"] == "piece"
        assert reply == explorer.answer({"type": "steps", "steps": []})
    explorer.close()
