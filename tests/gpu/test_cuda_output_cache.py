"""Replays hand out cached output tensors: liveness, invalidation and checkpoints stay exact."""

import pytest
import torch

import cgviz

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEV = "cuda"


def replaying_tree(fn, n_inputs=1):
    tree = cgviz.Tree(DEV)
    f = tree.wrap(fn, name="f")
    args = [torch.randn(64, device=DEV) for _ in range(n_inputs)]
    for _ in range(3):  # warmup, record, first replay
        f(*args)
    return tree, f


def test_a_dead_output_is_handed_out_again_with_the_new_values():
    tree, f = replaying_tree(lambda x: x * 3)
    x = torch.randn(64, device=DEV)
    first = f(x)
    first_id = id(first)
    assert torch.equal(first, x * 3)
    del first
    x2 = torch.randn(64, device=DEV)
    second = f(x2)
    assert id(second) == first_id  # the cached tensor
    assert torch.equal(second, x2 * 3)
    assert tree.nodes[1].replays == 3


@pytest.mark.parametrize("hold", ["tensor", "view", "storage"])
def test_anything_holding_the_output_keeps_it_live(hold):
    tree, f = replaying_tree(lambda x: x + 1)
    node = tree.nodes[1]
    y = f(torch.randn(64, device=DEV))
    held = {"tensor": y, "view": y[:8], "storage": y.untyped_storage()}[hold]
    del y
    assert node.output_alive(0)
    assert tree.current.path_is_live()
    f(torch.randn(64, device=DEV))  # the path is live: recorded as a child, not a replay of node 1
    assert tree.current is not node and tree.current.parent is node
    del held
    assert not node.output_alive(0)


def test_a_held_cached_output_is_invalidated_and_the_next_replay_makes_a_new_one():
    tree, f = replaying_tree(lambda x: x - 1)
    y = f(torch.randn(64, device=DEV))
    tree.mark_step()
    with pytest.raises(RuntimeError, match="overwritten"):
        y + 1
    x = torch.randn(64, device=DEV)
    z = f(x)
    assert z is not y
    assert torch.equal(z, x - 1)
    with pytest.raises(RuntimeError, match="overwritten"):
        y.sum()


def test_multi_output_with_aliases_reuses_every_tensor():
    tree, f = replaying_tree(lambda x: (lambda y: (y, y[:4], x + 5))(x * 2))
    x = torch.randn(64, device=DEV)
    a, b, c = f(x)
    ids = (id(a), id(b), id(c))
    assert torch.equal(a, x * 2) and torch.equal(b, (x * 2)[:4]) and torch.equal(c, x + 5)
    assert b.data_ptr() == a.data_ptr()
    del a, c
    assert tree.nodes[1].output_alive(0)  # b views a's storage
    del b
    assert not tree.current.path_is_live()
    x = torch.randn(64, device=DEV)
    a, b, c = f(x)
    assert (id(a), id(b), id(c)) == ids
    assert torch.equal(a, x * 2) and torch.equal(c, x + 5)


def test_checkpoint_restore_lets_go_of_cached_outputs():
    """A child recorded after replays: the live cached output stays valid and, once dropped,
    its block goes back to the pool; the dead one's block is freed at the restore."""
    tree = cgviz.Tree(DEV)
    f = tree.wrap(lambda x: (x + 1, x + 2), name="f")
    g = tree.wrap(lambda a: a * 10, name="g")
    x = torch.randn(1024, device=DEV)
    for _ in range(3):
        f(x)
    keep, drop = f(x)  # a replay: cached tensors
    del drop
    out = g(keep)  # warmup of g after replays: checkpoint restore
    assert [s.kind for s in tree.trace.expanded()][-2:] == ["checkpoint_restore", "warmup"]
    assert torch.equal(keep, x + 1) and torch.equal(out, (x + 1) * 10)
    node = tree.nodes[1]
    assert node.output_alive(0) and not node.output_alive(1)
    address = keep.data_ptr()
    del keep, out
    assert not node.output_alive(0)
    snap = tree.snapshot()
    block = next(b for s in snap.segments for b in s.blocks if b.address <= address < b.address + b.size)
    assert not block.allocated
