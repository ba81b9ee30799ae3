"""Static and copied inputs on the sim backend: a static input is read in place and records again
when it moves; any other input is copied into the graph."""

from __future__ import annotations

import re

import pytest
import torch

import cgviz
from helpers import data, last_step, same, steps_of


# -- static and copied inputs -----------------------------------------------------------------
def matmul(x, w):
    return torch.tanh(x @ w)


def test_static_input_in_place_replays_and_reads_its_current_values(tree):
    tf = tree.wrap(matmul, static=(1,), name="f")
    x, w = data(4, 8, seed=1), data(8, 8, seed=2)
    for _ in range(2):
        y = tf(x, w)
        del y
    with torch.no_grad():
        w.mul_(0.5)  # same address, new values (an optimizer step)
    y = tf(x, w)
    assert last_step(tree).kind == "execute"
    assert same(y, matmul(x, w))


def test_moved_static_input_rerecords_and_names_both_addresses(tree):
    tf = tree.wrap(matmul, static=(1,), name="f")
    x, w = data(4, 8, seed=1), data(8, 8, seed=2)
    for _ in range(3):
        y = tf(x, w)
        del y
    w2 = w.clone()  # same values, new address
    y = tf(x, w2)
    rec = last_step(tree)
    assert rec.kind == "record" and rec.parent is None and rec.node == 2
    address = tree.backend.address
    assert f"static input 1 moved from {hex(address(w))} to {hex(address(w2))}" in rec.reason
    assert re.search(r"static input 1 moved from 0x[0-9a-f]+ to 0x[0-9a-f]+", rec.reason)
    assert same(y, matmul(x, w2))
    del y
    y = tf(x, w2)
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", 2)
    del y
    y = tf(x, w)  # back at the first address: the first graph replays again  # noqa: F841  (held: a live output)
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", 1)


def test_static_input_moving_every_call_records_again_without_limit():
    """As torch's trees: a replaced parameter is recorded again at each new address; moves of
    static inputs do not count towards rerecord_limit."""
    tree = cgviz.Tree("sim", rerecord_limit=1)
    tf = tree.wrap(matmul, static=(1,), name="f")
    x, w = data(4, 8, seed=1), data(8, 8, seed=2)
    for _ in range(2):
        y = tf(x, w)
        del y
    weights = [w.clone() for _ in range(4)]  # all kept alive: each address is new
    for wi in weights:
        y = tf(x, wi)
        assert last_step(tree).kind == "record" and "static input 1 moved" in last_step(tree).reason
        assert same(y, matmul(x, wi))
        del y
    assert not steps_of(tree, "eager")


def moved_path_output_decisions(release: str) -> list:
    """g recorded on a row of f's output, then given rows 1, 2 and 3 (other addresses in the
    path's memory): the steps of g's three calls, in a tree deciding as `release`."""
    tree = cgviz.Tree("sim", rerecord_limit=1, rules=release)
    tf = tree.wrap(lambda x: x + 1, name="f")
    tg = tree.wrap(lambda r: r * 2, name="g")
    x = data(4, 8, seed=3)
    for _ in range(3):
        y = tf(x)
        z = tg(y[0])
        del y, z
    assert last_step(tree).kind == "execute"
    decisions = []
    for row in (1, 2, 3):
        y = tf(x)
        z = tg(y[row])
        assert same(z, (x[row] + 1) * 2)
        decisions.append(last_step(tree))
        del y, z
    return decisions


@pytest.mark.parametrize("release", ["2.13", "2.14", "2.15"])
def test_moved_path_output_past_rerecord_limit_runs_eagerly_there(release):
    """Each move of a path output counts; past rerecord_limit g runs eagerly under that node."""
    decisions = moved_path_output_decisions(release)
    assert [d.kind for d in decisions] == ["record", "eager", "eager"]
    assert "was output 0 of node" in decisions[0].reason
    assert "rerecord_limit=1" in decisions[1].reason and "under node" in decisions[1].reason


def test_moved_path_output_records_again_where_torch_has_no_limit():
    """torch 2.12 ignores cudagraph_unexpected_rerecord_limit (exceed_rerecord_limit returns
    False): g records again at each move."""
    decisions = moved_path_output_decisions("2.12")
    assert [d.kind for d in decisions] == ["record", "record", "record"]
    assert all("was output 0 of node" in d.reason for d in decisions)


def test_non_static_input_is_copied_so_later_mutation_does_not_change_the_output(tree):
    tf = tree.wrap(lambda x: x * 3, name="f")
    x = torch.ones(4)
    y = tf(x)
    del y
    for kind in ("record", "execute"):
        y = tf(x)
        assert last_step(tree).kind == kind
        x.fill_(5)  # the graph computed from its own copy
        assert same(y, torch.full((4,), 3.0))
        del y
        x.fill_(1)


def test_another_tensor_of_the_same_shape_replays_with_its_values(tree):
    tf = tree.wrap(lambda x: x * 3, name="f")
    for _ in range(2):
        y = tf(torch.ones(4))
        del y
    x2 = torch.arange(4.0)
    y = tf(x2)
    assert (last_step(tree).kind, last_step(tree).node) == ("execute", 1)
    assert same(y, x2 * 3)
