"""The inference loop's shortcut (cgviz/engine/steady.py) on sim: a steady loop's calls skip
the decision path, and every sequence around it (outputs held, views and storages held, other
functions and signatures, generations, reset, keywords, grad, several outputs, static inputs,
nested calls, a failing replay, threads, and random breaks of the loop) gives the same steps,
snapshots, outputs and tree as without it, at every trace level, with a profile, and under
torch 2.14's and 2.15's rules."""

from __future__ import annotations

import pytest
import torch

import cgviz
from steady_scripts import RULE_TREES, SCRIPTS, TREES, run, run_both, same_values, shortcut_off

KINDS = list(TREES) + list(RULE_TREES)

SEEDS = range(40)


@pytest.mark.parametrize("tree_kind", list(TREES))
def test_a_steady_loop_takes_the_decision_path_only_until_it_is_steady(tree_kind):
    done = run("plain_loop", "sim", tree_kind)
    assert done["decided"] == 4  # warmup, record, the first replay, the replay that keeps the shortcut
    assert done["nodes"][-1][3] == 10  # 12 calls: the root replayed 10 times


def same_run(with_it: dict, without: dict, what: str) -> None:
    assert with_it["steps"] == without["steps"], what
    assert same_values(with_it["values"], without["values"]), what
    assert (with_it["nodes"], with_it["where"]) == (without["nodes"], without["where"]), what


@pytest.mark.parametrize("tree_kind", KINDS)
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_the_shortcut_changes_nothing_the_tree_does(script, tree_kind):
    with_it, without = run_both(script, "sim", tree_kind)
    same_run(with_it, without, script)
    assert with_it["decided"] < without["decided"] or script in ("static_input", "grad_inputs")


@pytest.mark.parametrize("tree_kind", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_random_breaks_of_the_loop_give_what_the_tree_gives_without_the_shortcut(seed, tree_kind):
    same_run(*run_both(seed, "sim", tree_kind), f"random_script({seed})")


def test_the_random_scripts_take_the_shortcut():
    """Most of them, many times: the comparison above is not of two trees that never take it."""
    saved = [run_both(seed, "sim", "None") for seed in SEEDS]
    taken = [without["decided"] - with_it["decided"] for with_it, without in saved]
    assert sum(t > 0 for t in taken) > len(SEEDS) // 2 and sum(taken) > 3 * len(SEEDS)


EXTERNAL = torch.ones(8)
ODD_OUTPUTS = {
    "a tensor and a number": lambda x: (x * 2, 3), "a list": lambda x: [x + 1, x - 1], "a dict": lambda x: {"a": x * 2},
    "its input": lambda x: x, "a view of its input": lambda x: x[:4], "a tensor of its own": lambda x: EXTERNAL,
    "all of them": lambda x: (x * 2, EXTERNAL, x[:2], None),
}


@pytest.mark.parametrize("tree_kind", list(TREES))
@pytest.mark.parametrize("returns", list(ODD_OUTPUTS))
def test_a_loop_whose_outputs_are_not_one_new_tensor_gives_what_it_gives_without_the_shortcut(returns, tree_kind):
    def loop() -> tuple:
        tree = cgviz.Tree("sim", **TREES[tree_kind])
        f = tree.wrap(ODD_OUTPUTS[returns], name="f")
        shown = [repr(f(torch.full((8,), float(i)))) for i in range(10)]
        steps = [] if tree.trace_level is None else [(s.kind, s.reason, s.node, s.repeat) for s in tree.trace.steps]
        return shown, steps, [(n.id, n.kind, n.replays) for n in tree.nodes]

    with_it = loop()
    with shortcut_off():
        assert loop() == with_it
    assert with_it[2][-1] == (1, "graph", 8)
