"""Addresses outside a sim tree's pool: its decisions must not depend on where the C library's
allocator puts a CPU tensor, so a storage keeps one address while it lives and a new storage
never gets a freed one's."""

from __future__ import annotations

import numpy as np
import torch

import cgviz
from cgviz.engine._torch_compat import storage_id
from helpers import last_step


def matmul(x, w):
    return torch.tanh(x @ w)


def over(buffer: np.ndarray) -> torch.Tensor:
    """A new tensor, with a storage of its own, over `buffer`'s memory: the CPU address a
    freed tensor had, handed to a new one."""
    return torch.from_numpy(buffer)


def test_a_new_parameter_where_a_freed_one_was_records_again(tree):
    f = tree.wrap(matmul, static=(1,), name="f")
    x = torch.randn(4, 8)
    memory = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    w = over(memory)
    for _ in range(3):  # warmup, record, replay
        y = f(x, w)
        del y
    recorded = tree.backend.address(w)
    del w  # the parameter's storage dies; its memory stays with `memory`
    w = over(memory)
    assert w.data_ptr() == memory.ctypes.data  # the CPU put it where the freed one was
    y = f(x, w)
    step = last_step(tree)
    assert step.kind == "record" and step.parent is None, step.reason
    assert f"static input 1 moved from {hex(recorded)} to {hex(tree.backend.address(w))}" in step.reason
    del y


def test_a_storage_keeps_its_address_while_it_lives_and_views_add_their_offset(tree):
    w = torch.randn(8, 8)
    address = tree.backend.address
    first = address(w)
    tree.backend.collect()
    assert address(w) == first
    assert address(w[2]) == first + 2 * 8 * w.element_size()
    assert address(w.view(-1)[5:]) == first + 5 * w.element_size()


def test_addresses_are_the_same_on_every_run_and_never_reused():
    def addresses() -> list[int]:
        backend = cgviz.Tree("sim").backend
        seen = []
        for size in (16, 1000, 3):
            t = torch.empty(size)
            seen.append(backend.address(t))
            del t
            backend.collect()
        return seen

    first, second = addresses(), addresses()
    assert first == second
    assert len(set(first)) == 3 and all(a % 512 == 0 for a in first)


def test_a_resized_storage_gets_new_memory_and_a_new_address(tree):
    w = torch.randn(4)
    before = tree.backend.address(w)
    w.untyped_storage().resize_(1 << 20)
    assert tree.backend.address(w) != before


def test_outside_addresses_never_reach_the_pool(tree):
    f = tree.wrap(lambda x: x * 2, name="f")
    x = torch.randn(1 << 16)
    for _ in range(2):
        y = f(x)
    pool_starts = [s.address for s in tree.backend.segments()]
    assert pool_starts and tree.backend.address(x) < min(pool_starts)
    assert tree.backend.address(y) >= min(pool_starts)


def test_a_dead_storages_id_is_not_handed_to_a_new_one_while_its_address_is_known(tree):
    """The id of a storage is the address of torch's object for it; the weak reference the sim
    keeps holds that object's memory, so a new storage cannot take the id and its address."""
    t = torch.empty(8)
    address, sid = tree.backend.address(t), storage_id(t.untyped_storage())
    del t
    new = [torch.empty(8) for _ in range(64)]
    assert all(storage_id(n.untyped_storage()) != sid for n in new)
    assert address not in {tree.backend.address(n) for n in new}
