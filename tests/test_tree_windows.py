"""The widget's trees, sent a window of steps at a time (views/tree/windows.py): whatever order
the windows are asked in, each step's tree, rebuilt the way the front end rebuilds it, is the
tree the whole-page export shows for that step."""

from __future__ import annotations

import random
import re

import pytest
import torch

import cgviz
from cgviz.views.page_data import PageData, page_data


def _long_trace() -> cgviz.Trace:
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    g = tree.wrap(lambda x: x + 1, name="g")
    for i in range(40):
        g(f(torch.ones(2 + i % 5)))
        if i % 7 == 6:
            tree.mark_step()
    return tree.trace


@pytest.fixture(scope="module")
def trace() -> cgviz.Trace:
    return _long_trace()


class FrontEnd:
    """What explorer.js keeps of a widget's pieces, and its `stateAt`, in Python."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.trees: list[list[int]] = []
        self.structs: list[list] = []
        self.looks: list[list] = []
        self.keys: dict[int, list[int]] = {}
        self.delta: dict[int, list[int]] = {}
        self.steps: dict[int, list] = {}

    def merge(self, piece: dict) -> None:
        self.lines += piece["lines"]
        self.trees += piece["trees"]
        tree = piece.get("tree") or {}
        self.structs += tree.get("structs", [])
        self.looks += tree.get("looks", [])
        self.keys.update({int(k): v for k, v in tree.get("keys", {}).items()})
        self.delta.update({int(k): v for k, v in tree.get("delta", {}).items()})
        self.steps.update({int(k): v for k, v in piece["at"].items()})

    def state(self, i: int) -> dict[int, tuple[int, int]]:
        k = i
        while k > 0 and k not in self.keys:
            k -= 1
        state = _state_of(self.keys[k])
        for s in range(k + 1, i + 1):
            _apply(state, self.delta[s])
        return state

    def drawing(self, i: int) -> str:
        runs = self.trees[self.structs[self.steps[i][0]][0]]
        return "\n".join(self.lines[j] for a, b in zip(runs[::2], runs[1::2]) for j in range(a, a + b))


def _state_of(flat: list[int]) -> dict[int, tuple[int, int]]:
    return {flat[j]: (flat[j + 1], flat[j + 2]) for j in range(0, len(flat), 3)}


def _apply(state: dict, delta: list[int]) -> None:
    for j in range(0, len(delta), 3):
        if delta[j + 1] < 0:
            state.pop(delta[j], None)
        else:
            state[delta[j]] = (delta[j + 1], delta[j + 2])


def _whole_states(trace: cgviz.Trace) -> tuple[list, list[dict]]:
    """The export's looks and each step's node states (None: no tree)."""
    data = page_data(trace, renderer="builtin")
    tree = data["tree"]
    out, state = [], {}
    for i, rec in enumerate(data["steps"]):
        if i % tree["every"] == 0:
            state = _state_of(tree["keys"][str(i)])
        else:
            _apply(state, tree["delta"][i])
        out.append(dict(state) if rec[0] >= 0 else None)
    return tree["looks"], out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_windows_in_any_order_rebuild_the_exported_trees(trace: cgviz.Trace, seed: int) -> None:
    looks, want = _whole_states(trace)
    n = len(trace.steps)
    data = PageData(trace, renderer="builtin")
    front = FrontEnd()
    rng = random.Random(seed)
    asked: set[int] = set()
    while len(asked) < n:  # windows as the front end asks: one step, then chunks of neighbours
        i = rng.randrange(n)
        chunk = [i] if rng.random() < 0.5 else [k for k in range(i - rng.randrange(9), i + rng.randrange(9)) if 0 <= k < n]
        chunk = [k for k in chunk if k not in asked]
        if not chunk:
            continue
        asked.update(chunk)
        front.merge(data.window(chunk))
    for i in range(n):
        if want[i] is None:
            assert front.steps[i][0] == -1
            continue
        got = front.state(i)
        assert set(got) == set(want[i]), f"step {i}: nodes differ"
        for node, (look, replays) in got.items():
            assert front.looks[look] == looks[want[i][node][0]], f"step {i}, node {node}: another look"
            assert replays == want[i][node][1], f"step {i}, node {node}: replays"
        shown = set(map(int, re.findall(r'<g id="node-(\d+)"', front.drawing(i))))
        assert shown == set(want[i]), f"step {i}: the drawing holds nodes {sorted(shown)}"


def test_a_drawing_is_sent_once_and_reused(trace: cgviz.Trace) -> None:
    data = PageData(trace, renderer="builtin")
    n = len(trace.steps)
    last = data.window([n - 1])
    assert len(last["tree"]["structs"]) == 1
    again = data.window(range(n - 6, n - 1))  # the same structure, same boxes: no new drawing
    assert again["tree"]["structs"] == [] and again["lines"] == []
    assert {rec[0] for rec in again["at"].values()} == {last["at"][str(n - 1)][0]}
    assert set(again["tree"]["delta"]) == {str(i) for i in range(n - 5, n - 1)}
    assert set(again["tree"]["keys"]) == {str(n - 6)}


def test_a_box_that_grows_past_its_drawing_gets_a_new_drawing(trace: cgviz.Trace) -> None:
    data = PageData(trace, renderer="builtin")
    first = data.window([len(trace.steps) - 1])
    index = first["at"][str(len(trace.steps) - 1)][0]
    # make every box of that drawing too small for what was seen: the next new frame redraws
    windows = data._windows
    structure_index = next(k for k, (i, _) in windows._drawn.items() if i == index)
    for sizes in windows._drawn[structure_index][1].values():
        sizes[0] = 1.0
    later = data.window([len(trace.steps) - 2])
    assert later["tree"]["structs"], "no new drawing for boxes that no longer fit"


def test_the_widget_sends_its_first_trees_as_states(trace: cgviz.Trace) -> None:
    ex = cgviz.Explorer(trace, renderer="builtin")
    first = ex._first
    assert first["tree"]["structs"] and first["tree"]["keys"]
    reply = ex.answer({"type": "steps", "steps": [len(trace.steps) - 1]})
    assert "tree" in reply["piece"] and reply["piece"]["at"]
    ex.close()


def test_graphviz_trees_stay_pictures() -> None:
    pytest.importorskip("graphviz")
    from cgviz.views.tree import dot_available

    if not dot_available():
        pytest.skip("Graphviz's dot is not installed")
    data = PageData(_long_trace(), renderer="graphviz")
    piece = data.window([0, 1, 2])
    assert "tree" not in piece and piece["trees"]


@pytest.mark.parametrize("name", ["generations", "training", "branching"])
def test_each_structure_is_drawn_once_whatever_order_the_windows_come_in(name):
    """Boxes are drawn with room for every badge a step may add (invalidated by mark_step()
    included) and for more replays, so a jump far ahead does not make the kernel draw a structure
    again (a new 1,000-node drawing is what makes a jump slow in the browser)."""
    from cgviz.scenarios import run_scenario
    from cgviz.views.tree.windows import TreeWindows

    steps = run_scenario(name, "sim").trace.steps
    windows = TreeWindows(lambda lines: 0)
    order = list(range(0, len(steps), 4))
    random.Random(1).shuffle(order)
    for start in order:
        windows.piece(steps, range(start, min(start + 4, len(steps))))
    assert len(windows.structs) == len(windows._states.structures())
