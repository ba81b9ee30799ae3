"""A merged multi-rank trace's pictures: after each step, its rank's tree (the one the node panel
and clicks refer to) and beside it every other rank's tree as that rank last left it."""

from __future__ import annotations

import re

import pytest
import torch

import cgviz
from cgviz.trace.ranks import merge
from cgviz.views.page_data import page_data


def _rank_trace(rank: int, shapes: list[int]) -> cgviz.Trace:
    tree = cgviz.Tree("sim")
    f = tree.wrap(lambda x: x * 2, name="f")
    for n in shapes:
        f(torch.ones(n))
    trace = tree.trace
    trace.meta.update(rank=rank, world_size=2)
    return trace


@pytest.fixture(scope="module")
def merged() -> cgviz.Trace:
    return merge([_rank_trace(0, [4, 4, 4, 4]), _rank_trace(1, [4, 4, 8, 8, 8])])


def _drawing(data: dict, i: int) -> str:
    runs = data["trees"][data["steps"][i][0]]
    return "\n".join(data["lines"][j] for a, b in zip(runs[::2], runs[1::2]) for j in range(a, a + b))


def _clickable(svg: str) -> set[int]:
    return {int(m) for m in re.findall(r'<g id="node-(\d+)"', svg)}


@pytest.mark.parametrize("renderer", ["builtin", "graphviz"])
def test_each_step_shows_every_ranks_tree_its_own_clickable(merged: cgviz.Trace, renderer: str) -> None:
    if renderer == "graphviz":
        from cgviz.views.tree import dot_available

        if not dot_available():
            pytest.skip("Graphviz's dot is not installed")
    data = page_data(merged, renderer=renderer)
    assert "tree" not in data  # no node states across ranks: their node ids collide
    latest: dict[int, object] = {}
    left: dict[int, int] = {}  # rank -> the last step with its snapshot
    for i, step in enumerate(merged.steps):
        if step.snapshot is not None:
            latest[step.rank] = step.snapshot
            left[step.rank] = i
        if step.snapshot is None:
            continue
        svg = _drawing(data, i)
        labels = re.findall(r">rank (\d+) · ([^<]+)<", svg)
        assert [int(r) for r, _ in labels] == [step.rank] + sorted(set(latest) - {step.rank}), f"step {i}"
        assert labels[0][1] == "this step's rank"
        # each other tree says which step it is drawn after (a click on its nodes goes there)
        assert [int(k) for k in re.findall(r'<svg [^>]*data-step="(\d+)"', svg)] == [
            left[r] for r in sorted(set(latest) - {step.rank})], f"step {i}"
        assert _clickable(svg) == {n.id for n in step.snapshot.nodes}, f"step {i}: clickable nodes"
        for other, snap in latest.items():
            if other != step.rank:  # drawn, under ids of its own
                assert {int(m) for m in re.findall(rf'id="rank{other}-node-(\d+)"', svg)} == {n.id for n in snap.nodes}


def test_a_single_rank_trace_draws_one_tree_as_before() -> None:
    trace = _rank_trace(0, [4, 4, 4])
    data = page_data(trace, renderer="builtin")
    assert "tree" in data  # node states, as for any trace of one tree
    assert all(">rank " not in line for line in data["lines"])


def test_many_ranks_cost_in_proportion_to_the_steps_not_steps_times_ranks(monkeypatch) -> None:
    """A step changes one rank's tree: the other ranks' drawings are reused, so a merged trace of
    many ranks draws about one tree per step (it drew every rank's tree at every step)."""
    import cgviz.views.tree as tree_module

    ranks = 24
    traces = [_rank_trace(r, [4, 4, 4]) for r in range(ranks)]
    for t in traces:
        t.meta["world_size"] = ranks
    trace = merge(traces)
    drawn = []
    real = tree_module.tree_svg
    monkeypatch.setattr(tree_module, "tree_svg", lambda *a, **k: drawn.append(1) or real(*a, **k))
    data = page_data(trace, renderer="builtin")
    steps = len(trace.steps)
    assert steps >= 2 * ranks
    assert len(drawn) <= 3 * steps, f"{len(drawn)} tree drawings for {steps} steps of {ranks} ranks"
    last = _drawing(data, steps - 1)
    assert all(f">rank {r} · " in last for r in range(ranks))  # every rank still shown at the end
