"""The inference loop's shortcut on CUDA (cgviz/engine/steady.py, CudaBackend.steady_replay): the
loop's calls launch the graph without the decision path or the backend's replay(), and every
sequence of tests/steady_scripts.py gives the same steps, outputs and tree as without it."""

from __future__ import annotations

import pytest
import torch

from steady_scripts import SCRIPTS, TREES, Calls, Counted, run_both, same_values

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEV = "cuda"


@pytest.mark.parametrize("trace", [None, "events"])
def test_the_loop_launches_the_graph_without_the_decision_path_or_replay(trace):
    tree = Counted(DEV, trace=trace)
    c = Calls(tree, DEV)
    replays = []
    replay = tree.backend.replay
    tree.backend.replay = lambda *args: replays.append(1) or replay(*args)
    c.loop(c.f, 12)
    assert tree.decided == 4 and len(replays) == 2  # the first replays decided; the other eight not
    assert tree.nodes[-1].replays == 10
    assert all(torch.equal(v[0], ((x * 2 + 1).relu()).cpu()) for v, x in zip(
        c.values, [torch.randn(8, generator=torch.Generator().manual_seed(s)) for s in range(1, 13)]))


@pytest.mark.parametrize("tree_kind", list(TREES))
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_the_shortcut_changes_nothing_the_tree_does_on_cuda(script, tree_kind):
    with_it, without = run_both(script, DEV, tree_kind)
    assert with_it["steps"] == without["steps"]
    assert same_values(with_it["values"], without["values"])
    assert with_it["nodes"] == without["nodes"]
    assert with_it["where"] == without["where"]
    assert with_it["decided"] < without["decided"] or script in ("static_input", "grad_inputs")


@pytest.mark.parametrize("tree_kind", list(TREES))
@pytest.mark.parametrize("seed", range(12))
def test_random_breaks_of_the_loop_on_cuda_give_what_the_tree_gives_without_the_shortcut(seed, tree_kind):
    with_it, without = run_both(seed, DEV, tree_kind)
    assert with_it["steps"] == without["steps"], f"random_script({seed})"
    assert same_values(with_it["values"], without["values"])
    assert (with_it["nodes"], with_it["where"]) == (without["nodes"], without["where"])
