"""Parity with torch's own CUDA graph tree manager (tests/gpu/parity.py): expanded inputs, inputs on
other devices, mutation, host syncs, inference mode."""

from __future__ import annotations

import pytest
import torch

from parity import DEV, E, EAGER, R, W, assert_parity, rand, run_both
from parity import fresh_trees  # noqa: F401 (an autouse fixture)


# ---------------------------------------------------------------------------------------------
# inputs: expanded, other devices, mutation
# ---------------------------------------------------------------------------------------------
def test_expanded_inputs():
    """test_expanded_inputs: a stride-0 (expanded) input is copied into the graph's buffer along
    its real extent, then replays."""

    def work(T):
        x = torch.rand(1, 512, device=DEV).expand(4, 512)
        foo = T.wrap(lambda x: x + 4 + torch.ones(4, 512, device=x.device), name="foo")
        for i in range(3):
            T.check(f"call {i}", foo(x), x + 5)
        x2 = torch.rand(1, 512, device=DEV).expand(4, 512)
        T.check("new expanded values", foo(x2), x2 + 5)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E])


def test_cpu_input_runs_eagerly():
    """test_multiple_devices_msg: a CPU input ("skipping cudagraphs due to cpu device"): every
    call runs eagerly, nothing is recorded."""

    def work(T):
        foo = T.wrap(lambda x, y: (x + 1, y + 2), name="foo", skip="cpu device (arg1_1)")
        for i in range(3):
            x, y = torch.ones(10, device=DEV) * i, torch.ones(20) * i
            T.check(f"call {i}", foo(x, y), (x + 1, y + 2))

    t, c = run_both(work)
    assert_parity(t, c, expect=[EAGER, EAGER, EAGER])
    assert c.final["graphs"] == []


def test_mutation_of_a_non_static_input_runs_eagerly():
    """test_mutation_on_inp (first part): a function mutating a non-static input runs eagerly
    and mutates the caller's tensor; no graph."""

    def work(T):
        def foo_fn(x):
            x.add_(2)
            return x

        foo = T.wrap(foo_fn, name="foo", mutates=(0,))
        for i in range(3):
            x = torch.ones(10, device=DEV)
            out = foo(x)
            T.check(f"call {i} output", out, torch.full((10,), 3.0, device=DEV))
            T.check(f"call {i} input", x, torch.full((10,), 3.0, device=DEV))
            del out

    t, c = run_both(work)
    assert_parity(t, c, expect=[EAGER, EAGER, EAGER], first_call_eager=("foo",))
    assert c.final["graphs"] == []


def test_mutation_of_a_static_input_is_graphed():
    """test_mutation_on_inp (second part) / test_tensor_constant_mutation: mutating a buffer
    passed as static is graphed, and the buffer changes exactly as in eager."""

    def work(T):
        def foo_fn(buf, x):
            buf.add_(x)
            return buf + x

        buf = torch.ones(10, device=DEV)
        ref = torch.ones(10, device=DEV)
        foo = T.wrap(foo_fn, static=(0,), name="foo", mutates=(0,))
        for i in range(4):
            x = torch.ones(10, device=DEV) * (i + 1)
            out = foo(buf, x)
            want = foo_fn(ref, x)
            T.check(f"call {i}", out, want)
            T.check(f"buffer after call {i}", buf, ref)
            del out

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E])


def test_mutation_of_cudagraph_managed_tensors():
    """test_mutation_cudagraph_managed_tensors: mutating the output of a previous graph is
    graphed; mutating a clone of it (an eager tensor) falls back to eager, and the clone is
    mutated as in eager. Decided per node: the same function is graphed on one input and eager
    on the other."""

    def work(T):
        def mut_fn(x):
            x.add_(2)
            return x

        foo = T.wrap(lambda x: x + 1, name="foo")
        mut = T.wrap(mut_fn, name="mut", mutates=(0,))
        for i in range(3):
            T.mark_step()
            inp = rand(4)
            tmp = foo(inp)
            mut_out = mut(tmp)
            T.check(f"step {i}", mut_out, inp + 3)
        T.mark_step()
        inp = rand(4)
        tmp = foo(inp)
        mut_inp = tmp.clone()
        mut(mut_inp)
        T.check("the eager tensor mutated in place", mut_inp, inp + 3)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, E, E, EAGER])
    assert t.final["graphs"] == [("foo", None), ("mut", 0)]


def test_mutation_of_an_eager_input_next_to_a_graphed_function():
    """test_mutation_cudagraph_managed_tensor_warn: foo mutates a fresh tensor (eager every
    call); fee, fed foo's result, is graphed."""

    def work(T):
        foo = T.wrap(lambda x: x.add_(1), name="foo", mutates=(0,))
        fee = T.wrap(lambda y, z: z.add(3), name="fee")
        for i in range(3):
            T.mark_step()
            a, b = rand(4), rand(4)
            b_ref = b + 1
            out = fee(a, foo(b))
            T.check(f"step {i}", out, b_ref + 3)
            T.check(f"step {i} input", b, b_ref)

    t, c = run_both(work)
    assert_parity(t, c, expect=[EAGER, W, EAGER, R, EAGER, E], first_call_eager=("foo",))
    assert t.final["graphs"] == [("fee", None)]


@pytest.mark.parametrize("op", ["item", "nonzero"])
def test_host_sync_ops_run_eagerly_and_the_tree_stays_usable(op):
    """test_incompatible_cudagraph_ops_item / _nonzero: a function that reads device memory on
    the host is never captured (eager); another function then warms up, records and replays,
    and nothing is left allocated in the pool."""

    def work(T):
        if op == "item":
            foo = T.wrap(lambda x: x.item(), name="foo", skip="cpu device (_local_scalar_dense)")
            for v in (3, 6):
                T.note(f"item {v}", foo(torch.tensor(v, device=DEV)))
        else:
            foo = T.wrap(lambda x: x.nonzero(), name="foo", skip="['incompatible ops']")
            for v, want in (([1, 0, 2], [[0], [2]]), ([1, 0, 0], [[0]])):
                T.check(f"nonzero {v}", foo(torch.tensor(v, device=DEV)), torch.tensor(want, device=DEV))
        g = T.wrap(lambda x: x + 1, name="g")
        for i in range(3):
            x = rand(8)
            T.check(f"g {i}", g(x), x + 1)
        T.note("live blocks at the end", T.live_blocks())

    t, c = run_both(work)
    assert_parity(t, c, expect=[EAGER, EAGER, W, R, E], first_call_eager=("foo",))
    assert t.final["graphs"] == [("g", None)]


def test_inference_mode():
    """torch.inference_mode(): inference tensors go through warmup, record and replay."""

    def work(T):
        f = T.wrap(lambda x: x * 2 + 1, name="f")
        g = T.wrap(lambda y: y.relu(), name="g")
        with torch.inference_mode():
            for i in range(4):
                x = torch.randn(1024, device=DEV)
                T.check(f"step {i}", g(f(x)), (x * 2 + 1).relu())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, E, E, E])
    assert t.final["graphs"] == [("f", None), ("g", 0)]
