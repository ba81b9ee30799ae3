"""The tree decides as the torch release it is given does (cgviz/_torch/rules.py), on sim.

Each test runs one call sequence under the releases where the rule differs and checks the
decisions (step kinds, nodes), the values and the reasons' key words. The facts come from
torch's cudagraph_trees.py / config.py of 2.11.0, 2.12.1, 2.13.0, 2.14.1 and 2.15.0.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import cgviz
from cgviz._torch.rules import RELEASES, Rules, configure, rules_for
from cgviz.engine.tree import OVERWRITTEN


# -- helpers ----------------------------------------------------------------------------------
def last(tree):
    return tree.trace.steps[-1]


def decisions(tree, start: int) -> list:
    """The call decisions (not path ends or restores) recorded from step `start` on."""
    return [s for s in tree.trace.expanded()[start:] if s.kind in ("warmup", "record", "execute", "eager")]


@contextlib.contextmanager
def inlining(on: bool):
    """torch._dynamo.config.inline_inbuilt_nn_modules, which torch 2.11's re-record limit reads
    (deprecated, always True, from 2.12: setting it only warns)."""
    import torch._dynamo.config as dynamo_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with dynamo_config.patch(inline_inbuilt_nn_modules=on):
            yield


def moving_path_output(rules, calls: int = 12, **options):
    """g recorded on a row of f's output, then given the next row at every call: an input that
    is an output of the path and moves every time (torch's CudagraphManagedIdxMismatch)."""
    tree = cgviz.Tree("sim", rules=rules, **options)
    tf = tree.wrap(lambda x: x + 1, name="f")
    tg = tree.wrap(lambda r: r * 2, name="g")
    x = torch.arange(4.0 * (calls + 2)).reshape(calls + 2, 4)
    for _ in range(2):  # warm up, record: g's graph takes row 0
        y = tf(x)
        z = tg(y[0])
        del y, z
    start = len(tree.trace.expanded())
    for row in range(1, calls + 1):
        y = tf(x)
        z = tg(y[row])
        assert torch.equal(z, (x[row] + 1) * 2)
        del y, z
    g_steps = [s for s in decisions(tree, start) if s.function == "g"]
    assert len(g_steps) == calls
    return tree, g_steps


def moving_static_input(rules, moves: int = 4, **options):
    """A parameter (static input 1) at a new address at every call (StaticInputIdxMismatch)."""
    tree = cgviz.Tree("sim", rules=rules, **options)
    tf = tree.wrap(lambda x, w: x @ w, static=(1,), name="f")
    x, w = torch.ones(2, 3), torch.ones(3, 3)
    for _ in range(2):
        y = tf(x, w)
        del y
    weights = [w * (k + 2) for k in range(moves)]  # all kept: every address is new
    start = len(tree.trace.expanded())
    for wi in weights:
        y = tf(x, wi)
        assert torch.equal(y, x @ wi)
        del y
    return tree, decisions(tree, start)


def dead_output_live_again(rules, **options):
    """B recorded while A's second output was dead, then called with it live
    (ExpectedDeadIndicesBeforeGraphMismatch)."""
    tree = cgviz.Tree("sim", rules=rules, **options)
    a = tree.wrap(lambda x: (x + 1, x * 2), name="A")
    b = tree.wrap(lambda p: p * 3, name="B")
    x = torch.ones(4)
    for keep in (False, False, True):
        p, q = a(x)
        if not keep:
            del q
        r = b(p)
        assert torch.equal(r, (x + 1) * 3)
        del p, r
    return tree, last(tree)


# -- choosing the rules -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "given, chosen",
    [
        ("2.11", "2.11"), ("2.12.1", "2.12"), ("2.13.0+cpu", "2.13"), ("2.14.0.dev20260101", "2.14"),
        ("2.15.0rc1", "2.15"), ("2.9.1", "2.11"), ("1.13", "2.11"), ("2.16.0a0+git1234", "2.15"), ("3.0", "2.15"),
    ],
)
def test_a_release_string_picks_its_rules_and_outside_the_range_the_nearest(given, chosen):
    assert rules_for(given).release == chosen
    tree = cgviz.Tree("sim", rules=given)
    assert tree.rules.release == chosen and tree.trace.meta["rules"] == chosen


def test_no_rules_means_the_installed_torch():
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    expected = min(max((major, minor), (2, 11)), (2, 15))
    tree = cgviz.Tree("sim")
    assert tree.rules.release == f"{expected[0]}.{expected[1]}"
    assert tree.trace.meta["rules"] == tree.rules.release
    assert tree.rules == rules_for(None) == rules_for(torch.__version__)


@pytest.mark.parametrize("bad", ["abc", "3", "", "2.x", "two.thirteen"])
def test_a_bad_release_string_names_the_supported_range(bad):
    with pytest.raises(ValueError, match=r"not a torch release.*2\.11 to 2\.15"):
        cgviz.Tree("sim", rules=bad)


@pytest.mark.parametrize("bad", [3, 2.13, ("2", "13"), True])
def test_rules_of_another_type_raise_type_error(bad):
    with pytest.raises(TypeError, match=r"rules must be a torch release"):
        cgviz.Tree("sim", rules=bad)


def test_a_rules_object_is_taken_as_is_and_options_go_on_top():
    base = rules_for("2.15").configured(managed_input_action="skip")
    tree = cgviz.Tree("sim", rules=base, managed_input_rerecord_limit=2)
    assert isinstance(tree.rules, Rules)
    assert (tree.rules.release, tree.rules.managed_input_action, tree.rules.managed_input_rerecord_limit) == (
        "2.15", "skip", 2
    )
    assert rules_for("2.15").managed_input_action == "copy"  # the table is not changed


@pytest.mark.parametrize(
    "release, option, value",
    [
        ("2.13", "generation_cloning", "user_visible"),
        ("2.14", "managed_input_rerecord_limit", 3),
        ("2.14", "managed_input_action", "skip"),
        ("2.14", "dynamic_shape_rerecord_limit", 4),
    ],
)
def test_an_option_the_release_does_not_have_raises_naming_the_release(release, option, value):
    with pytest.raises(ValueError, match=rf"{option}=.*torch {release} has no cudagraph_\w+ \(it came in torch 2\.1[45]\)"):
        cgviz.Tree("sim", rules=release, **{option: value})


@pytest.mark.parametrize(
    "option, value, error, words",
    [
        ("generation_cloning", "all", ValueError, "generation_cloning must be one of 'user_visible'"),
        ("managed_input_action", "copy_all", ValueError, "managed_input_action must be one of 'copy', 'skip'"),
        ("managed_input_rerecord_limit", -1, ValueError, "managed_input_rerecord_limit must be a non-negative int"),
        ("dynamic_shape_rerecord_limit", 2.0, TypeError, "dynamic_shape_rerecord_limit must be an int, not float"),
        ("rerecord_limit", "8", TypeError, "rerecord_limit must be an int, not str"),
    ],
)
def test_bad_option_values_name_the_option(option, value, error, words):
    with pytest.raises(error, match=words):
        cgviz.Tree("sim", rules="2.15", **{option: value})
    with pytest.raises(TypeError, match="unknown rules option"):
        configure("2.15", rerecord_limits=3)


def test_the_table_records_what_each_release_has():
    table = {r: rules_for(r) for r in RELEASES}
    assert [table[r].rerecord_limit_applies for r in RELEASES] == [
        "without_inlining", "never", "always", "always", "always"
    ]
    assert [table[r].counts_static_input_rerecords for r in RELEASES] == [True, True, False, False, False]
    assert [table[r].counts_dead_output_rerecords for r in RELEASES] == [False, False, True, True, True]
    assert all(table[r].counts_managed_input_rerecords and table[r].unexpected_rerecord_limit == 128 for r in RELEASES)
    assert [table[r].generation_cloning_available for r in RELEASES] == [False, False, False, True, True]
    assert [table[r].kernel_free_graphs for r in RELEASES] == [False, False, False, True, True]
    assert [table[r].warmup_incomplete_available for r in RELEASES] == [False, False, False, True, True]
    assert [table[r].managed_input_rerecord_limit for r in RELEASES] == [None, None, None, None, 5]
    assert [table[r].managed_input_action for r in RELEASES] == [None, None, None, None, "copy"]
    assert [table[r].dynamic_shape_limit_available for r in RELEASES] == [False, False, False, False, True]
    assert all(table[r].dynamic_shape_rerecord_limit is None and table[r].generation_cloning is None for r in RELEASES)


# -- the re-record limit ----------------------------------------------------------------------
@pytest.mark.parametrize("release, limit", [("2.11", None), ("2.12", None), ("2.13", 128), ("2.14", 128), ("2.15", 128)])
def test_the_default_rerecord_limit_comes_from_the_release(release, limit):
    tree = cgviz.Tree("sim", rules=release)
    assert tree.rerecord_limit == limit and tree.rules.rerecord_limit == limit


def test_torch_2_11_applies_the_limit_only_while_dynamo_does_not_inline_nn_modules():
    assert cgviz.Tree("sim", rules="2.11").rerecord_limit is None
    with inlining(False):
        assert cgviz.Tree("sim", rules="2.11").rerecord_limit == 128
        assert cgviz.Tree("sim", rules="2.12").rerecord_limit is None


@pytest.mark.parametrize("release", ["2.13", "2.14", "2.15"])
def test_a_moving_path_output_runs_eagerly_past_the_limit_from_2_13(release):
    tree, g = moving_path_output(release, rerecord_limit=2)
    assert [s.kind for s in g] == ["record", "record"] + ["eager"] * 10
    assert "2 of cudagraph_unexpected_rerecord_limit=2 re-records under node" in g[1].reason
    assert "rerecord_limit=2" in g[2].reason and "torch 2.13+" in g[2].reason
    assert "inputs that were outputs of the path moved" in g[2].reason
    assert "the limit was reached here before" in g[3].reason


@pytest.mark.parametrize("release, words", [
    ("2.12", "no re-record limit in torch 2.12"),
    ("2.11", "no re-record limit in torch 2.11 while torch._dynamo.config.inline_inbuilt_nn_modules is on"),
])
def test_a_moving_path_output_records_again_every_time_where_no_limit_applies(release, words):
    tree, g = moving_path_output(release, rerecord_limit=2)
    assert [s.kind for s in g] == ["record"] * 12
    assert len({s.node for s in g}) == 12
    assert all(words in s.reason for s in g)


def test_torch_2_11_without_inlining_applies_the_limit():
    with inlining(False):
        tree, g = moving_path_output("2.11", rerecord_limit=2)
    assert [s.kind for s in g] == ["record", "record"] + ["eager"] * 10
    assert "torch 2.11" in g[2].reason and "rerecord_limit=2" in g[2].reason


@pytest.mark.parametrize("release", ["2.13", "2.14", "2.15"])
def test_static_input_moves_do_not_count_from_2_13(release):
    tree, steps = moving_static_input(release, rerecord_limit=1)
    assert [s.kind for s in steps] == ["record"] * 4
    assert all("static input 1 moved" in s.reason for s in steps)
    assert all("torch 2.13+ does not count a moved static input toward cudagraph_unexpected_rerecord_limit" in s.reason
               for s in steps)


def test_static_input_moves_count_in_2_11():
    with inlining(False):  # so that 2.11 applies its limit at all
        tree, steps = moving_static_input("2.11", rerecord_limit=1)
    assert [s.kind for s in steps] == ["record", "eager", "eager", "eager"]
    assert "1 of cudagraph_unexpected_rerecord_limit=1 re-records as a root" in steps[0].reason
    assert "static inputs moved" in steps[1].reason and "static input 1 moved" in steps[1].reason


def test_static_input_moves_never_stop_recording_in_2_12():
    tree, steps = moving_static_input("2.12", rerecord_limit=1)
    assert [s.kind for s in steps] == ["record"] * 4
    assert all("no re-record limit in torch 2.12" in s.reason for s in steps)


@pytest.mark.parametrize("release, kind", [("2.11", "record"), ("2.12", "record"), ("2.13", "eager"), ("2.15", "eager")])
def test_an_output_live_that_was_dead_at_recording_counts_from_2_13(release, kind):
    with inlining(False):  # 2.11 applies its limit only then
        tree, step = dead_output_live_again(release, rerecord_limit=0)
    assert step.function == "B" and step.kind == kind
    assert "output 1 of node" in step.reason and "was dead at recording and is live now" in step.reason
    if kind == "eager":
        assert "outputs dead at recording were live again" in step.reason and "rerecord_limit=0" in step.reason
    elif release == "2.11":
        assert "torch 2.11–2.12 does not count an output of the path live that was dead at recording" in step.reason
    else:
        assert "no re-record limit in torch 2.12" in step.reason


# -- torch 2.15: inputs that are outputs of the path and keep moving --------------------------
def test_a_moving_path_output_is_copied_after_five_moves_in_2_15():
    tree, g = moving_path_output("2.15")
    assert [s.kind for s in g] == ["record"] * 5 + ["execute"] * 7
    copying = g[4].node
    assert all(s.node == copying for s in g[5:])  # replays with the input at a new address each time
    assert "input 0 (output 0 of node" in g[4].reason and "moved 5 times under node" in g[4].reason
    assert "torch 2.15+ copies it from now on (cudagraph_managed_input_rerecord_limit=5, action 'copy')" in g[4].reason
    assert "move 4 of 5" in g[3].reason
    node = next(n for n in tree.nodes if n.id == copying)
    assert node.copy_inputs == (0,) and not node.managed_addresses
    older = next(n for n in tree.nodes if n.id == g[0].node)
    assert 0 in older.managed_addresses and older.copy_inputs == ()


def test_a_moving_path_output_runs_eagerly_after_five_moves_with_skip_in_2_15():
    tree, g = moving_path_output("2.15", managed_input_action="skip")
    assert [s.kind for s in g] == ["record"] * 4 + ["eager"] * 8
    assert "an input that is an output of the path kept moving there" in g[4].reason and "moved 5 times" in g[4].reason
    assert "cudagraph_managed_input_rerecord_limit=5, action 'skip'" in g[4].reason and "torch 2.15+" in g[4].reason
    assert all(s.reason == g[4].reason for s in g[5:])  # decided once for that place
    eager = cgviz.diagnose(tree).of("eager")
    assert eager and "cudagraph_managed_input_rerecord_action" in eager[0].suggestion


def test_the_managed_input_limit_is_an_option_in_2_15():
    tree, g = moving_path_output("2.15", managed_input_rerecord_limit=2)
    assert [s.kind for s in g] == ["record", "record"] + ["execute"] * 10
    assert "moved 2 times under node" in g[1].reason


def test_a_limit_of_one_move_is_said_in_the_singular():
    tree, g = moving_path_output("2.15", managed_input_rerecord_limit=1)
    said = next(s.reason for s in g if "cudagraph_managed_input_rerecord_limit=1" in s.reason)
    assert "moved 1 time under node" in said


@pytest.mark.parametrize("release", ["2.13", "2.14"])
def test_no_managed_input_demotion_before_2_15(release):
    tree, g = moving_path_output(release)
    assert [s.kind for s in g] == ["record"] * 12
    assert not any("cudagraph_managed_input_rerecord_limit" in s.reason for s in g)
    assert all(n.copy_inputs == () for n in tree.nodes if n.kind == "graph" and n.variant.label == "g")


def test_a_graph_returning_its_path_output_input_is_never_demoted_in_2_15():
    """can_copy_cudagraph_managed_input: an input the graph returns (preserved_aliased_inputs)
    must stay in place, so its moves are not counted toward the managed-input limit."""
    tree = cgviz.Tree("sim", rules="2.15")
    tf = tree.wrap(lambda x: x + 1, name="f")
    tg = tree.wrap(lambda r: (r * 2, r), name="g")
    x = torch.arange(40.0).reshape(10, 4)
    kinds = []
    for row in range(9):
        y = tf(x)
        z, same = tg(y[row])
        assert torch.equal(z, (x[row] + 1) * 2) and torch.equal(same, x[row] + 1)
        kinds.append(last(tree).kind)
        del y, z, same
    assert kinds[:2] == ["warmup", "record"] and kinds[2:] == ["record"] * 7
    assert not any("cudagraph_managed_input_rerecord_limit" in s.reason for s in tree.trace.steps)


# -- torch 2.15: the dynamic-shape limit ------------------------------------------------------
def shapes(tree, sizes):
    f = tree.wrap(lambda x: x * 2, name="f")
    out = []
    for n in sizes:
        x = torch.arange(float(n))
        y = f(x)
        assert torch.equal(y, x * 2)
        out.append(last(tree))
        del y
    return out


def test_new_shapes_past_the_dynamic_shape_limit_run_eagerly_in_2_15():
    steps = shapes(cgviz.Tree("sim", rules="2.15", dynamic_shape_rerecord_limit=2), (2, 3, 2, 3, 4, 2, 4))
    assert [s.kind for s in steps] == ["warmup", "warmup", "record", "record", "eager", "execute", "eager"]
    assert "cudagraph_dynamic_shape_rerecord_limit=2" in steps[4].reason and "torch 2.15+" in steps[4].reason
    assert "(float32[4]) is one more" in steps[4].reason


@pytest.mark.parametrize("release", ["2.14", "2.15"])
def test_without_the_dynamic_shape_limit_only_shape_limit_applies(release):
    steps = shapes(cgviz.Tree("sim", rules=release, shape_limit=3), (2, 3, 4, 5))
    assert [s.kind for s in steps] == ["warmup"] * 3 + ["eager"]
    assert "shape_limit=3" in steps[3].reason and "cudagraph_dynamic_shape_rerecord_limit" not in steps[3].reason


# -- torch 2.14+: generation cloning ----------------------------------------------------------
def held_across_generations(tree, mode: str = "inference"):
    """f replayed in generation after generation, each one's output held; f returns an output
    and a view of it."""
    f = tree.wrap(lambda x: (lambda y: (y, y[1:]))(x * 3), name="f", mode=mode)
    held = []
    for i in range(4):
        tree.mark_step()
        x = torch.full((4,), float(i))
        held.append((i, f(x)))
    tree.mark_step()
    return held


def test_generation_cloning_keeps_held_outputs_with_their_values_in_2_14():
    tree = cgviz.Tree("sim", rules="2.14", generation_cloning="user_visible")
    held = held_across_generations(tree)
    assert [s.kind for s in tree.trace.expanded() if s.kind != "generation"] == ["warmup", "record", "execute", "execute"]
    for i, (y, view) in held:
        assert torch.equal(y, torch.full((4,), 3.0 * i)) and torch.equal(view, torch.full((3,), 3.0 * i))
        assert view.data_ptr() == y.data_ptr() + 4  # still a view of its output
    ends = [s for s in tree.trace.expanded() if s.kind == "generation"][1:]
    assert len(ends) == 4 and all(s.invalidated == [] for s in ends)
    assert all("cudagraph_trees_generation_cloning='user_visible'" in s.reason and "torch 2.14+" in s.reason
               for s in ends)
    assert "cloned out of the pool" in ends[-1].reason and "output 0 of node 1 (16 bytes), 16 bytes in all" in ends[-1].reason
    outputs = {(n.id, o.index): o.state for n in ends[-1].snapshot.nodes for o in n.outputs}
    assert outputs[1, 0] == "dead"  # the tree no longer tracks a cloned output


@pytest.mark.parametrize("release", ["2.13", "2.14"])
def test_without_generation_cloning_a_held_output_of_an_ended_generation_raises(release):
    tree = cgviz.Tree("sim", rules=release)
    held = held_across_generations(tree)
    for i, (y, view) in held:
        with pytest.raises(RuntimeError, match=OVERWRITTEN):
            y + 0
    ends = [s for s in tree.trace.expanded() if s.kind == "generation"][1:]
    assert len(ends) == 4 and all(s.invalidated and "cloned" not in s.reason for s in ends)


def test_generation_cloning_leaves_backward_outputs_to_be_invalidated():
    tree = cgviz.Tree("sim", rules="2.15", generation_cloning="user_visible")
    held = held_across_generations(tree, mode="backward")
    with pytest.raises(RuntimeError, match=OVERWRITTEN):
        held[0][1][0] + 0
    end = [s for s in tree.trace.steps if s.kind == "generation"][-1]
    assert end.invalidated == [[1, 0], [1, 1]]
    assert "backward outputs are not cloned" in end.reason


# -- torch 2.14+: mark_warmup_incomplete ------------------------------------------------------
def test_a_function_asking_for_another_warmup_warms_up_again_in_2_14():
    tree = cgviz.Tree("sim", rules="2.14")
    asked = []

    def fn(x):
        if len(asked) < 2:
            asked.append(True)
            tree.mark_warmup_incomplete()
        return x + 1

    f = tree.wrap(fn, name="f")
    x = torch.ones(3)
    for _ in range(4):
        y = f(x)
        assert torch.equal(y, x + 1)
        del y
    steps = [s for s in tree.trace.steps if s.kind in ("warmup", "record", "execute")]
    assert [s.kind for s in steps] == ["warmup", "warmup", "warmup", "record"]
    assert "mark_warmup_incomplete()" in steps[0].reason and "asked for another warmup" in steps[1].reason


def test_mark_warmup_incomplete_outside_a_warmup_does_nothing_and_before_2_14_raises():
    tree = cgviz.Tree("sim", rules="2.15")
    tree.mark_warmup_incomplete()  # no warmup running: nothing to do, as torch
    f = tree.wrap(lambda x: x + 1, name="f")
    for _ in range(2):
        y = f(torch.ones(2))
        del y
    assert [s.kind for s in tree.trace.steps] == ["warmup", "path_end", "record"]
    with pytest.raises(RuntimeError, match=r"torch 2\.13 has no mark_warmup_incomplete \(it came in torch 2\.14\)"):
        cgviz.Tree("sim", rules="2.13").mark_warmup_incomplete()


def test_a_moved_path_output_is_found_before_a_moved_static_input_as_torch_checks():
    """check_invariants tests the path outputs' addresses before the static inputs': when both
    moved, the re-record is a moved path output, which counts from 2.13 on."""
    tree = cgviz.Tree("sim", rules="2.13", rerecord_limit=0)
    tf = tree.wrap(lambda x: x + 1, name="f")
    tg = tree.wrap(lambda r, w: r * w, static=(1,), name="g")
    x = torch.arange(12.0).reshape(3, 4)
    w = torch.ones(4)
    for _ in range(2):
        y = tf(x)
        z = tg(y[0], w)
        del y, z
    w2 = w * 2
    y = tf(x)
    z = tg(y[1], w2)
    assert torch.equal(z, (x[1] + 1) * 2)
    step = last(tree)
    assert step.kind == "eager" and "input 0 was output 0 of node" in step.reason
