"""The inference loop's shortcut (cgviz/engine/steady.py) on sim: a steady loop's calls skip
the decision path, and every sequence around it (outputs held, views and storages held, other
functions and signatures, generations, reset, keywords, grad, several outputs, static inputs,
nested calls, a failing replay, threads) gives the same steps, outputs and tree as without it."""

from __future__ import annotations

import pytest

from steady_scripts import SCRIPTS, run, run_both, same_values

SEEDS = range(40)


@pytest.mark.parametrize("trace", [None, "events"])
def test_a_steady_loop_takes_the_decision_path_only_until_it_is_steady(trace):
    done = run("plain_loop", "sim", trace)
    assert done["decided"] == 4  # warmup, record, the first replay, the replay that keeps the shortcut
    assert done["nodes"][-1][3] == 10  # 12 calls: the root replayed 10 times


def test_a_tree_that_keeps_snapshots_takes_the_decision_path_at_every_call():
    assert run("plain_loop", "sim", "full")["decided"] == 12


@pytest.mark.parametrize("trace", [None, "events"])
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_the_shortcut_changes_nothing_the_tree_does(script, trace):
    with_it, without = run_both(script, "sim", trace)
    assert with_it["steps"] == without["steps"]
    assert same_values(with_it["values"], without["values"])
    assert with_it["nodes"] == without["nodes"]
    assert with_it["where"] == without["where"]
    assert with_it["decided"] < without["decided"] or script in ("static_input", "grad_inputs")


@pytest.mark.parametrize("trace", [None, "events"])
@pytest.mark.parametrize("seed", SEEDS)
def test_random_breaks_of_the_loop_give_what_the_tree_gives_without_the_shortcut(seed, trace):
    with_it, without = run_both(seed, "sim", trace)
    assert with_it["steps"] == without["steps"], f"random_script({seed})"
    assert same_values(with_it["values"], without["values"])
    assert (with_it["nodes"], with_it["where"]) == (without["nodes"], without["where"])


def test_the_random_scripts_take_the_shortcut():
    """Most of them, many times: the comparison above is not of two trees that never take it."""
    saved = [run_both(seed, "sim", None) for seed in SEEDS]
    taken = [without["decided"] - with_it["decided"] for with_it, without in saved]
    assert sum(t > 0 for t in taken) > len(SEEDS) // 2 and sum(taken) > 3 * len(SEEDS)
