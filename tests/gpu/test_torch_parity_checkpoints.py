"""Parity with torch's own CUDA graph tree manager (tests/gpu/parity.py): checkpoints, invariants,
re-recording."""

from __future__ import annotations

import pytest
import torch

from parity import DEV, E, R, W, assert_parity, rand, run_both
from parity import fresh_trees  # noqa: F401 (an autouse fixture)


# ---------------------------------------------------------------------------------------------
# checkpoints, invariants, re-recording
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("aliased", [False, True], ids=["two_outputs", "aliased_outputs"])
def test_tensor_dies_between_checkpoint(aliased):
    """test_tensor_dies_between_checkpoint / test_aliased_output_checkpoint (with warmups): an
    output that died since foo's recording is freed at the checkpoint restore before foo2's
    warmup and recording; only foo2's output stays allocated."""

    def foo_fn(x):
        if aliased:
            y = x + 2
            return x + 1, y, y[0]
        return x + 1, x + 2

    def work(T):
        foo = T.wrap(foo_fn, name="foo")
        foo2 = T.wrap(lambda x: x * x * x, name="foo2")
        inp = rand(4, 4)
        for i in range(2):
            T.check(f"foo {i}", foo(inp), foo_fn(inp))
        for step in ("warmup", "record"):
            out1, *rest = foo(inp)
            del rest  # foo's other outputs die between its recording and foo2's run
            x = foo2(out1)
            del out1
            T.check(f"foo2 {step}", x, (inp + 1) * (inp + 1) * (inp + 1))
            T.note(f"checkpoints after foo2's {step}", T.checkpoints())
            T.note(f"live blocks after foo2's {step}", T.live_blocks())
            del x
            T.note(f"live blocks after del x ({step})", T.live_blocks())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, W, E, R])
    assert t.final["graphs"] == [("foo", None), ("foo2", 0)]


def test_tensor_no_longer_in_pool_rerecords():
    """test_tensor_no_longer_in_pool (with warmups): foo2 was recorded on foo's output; given a
    tensor outside the pool it records again, after a checkpoint restore."""

    def work(T):
        foo = T.wrap(lambda x: (x + 1, x + 2), name="foo")
        foo2 = T.wrap(lambda x: x * x * x, name="foo2")
        inp = rand(4)
        for i in range(2):
            x1, x2 = foo(inp)
            T.check(f"foo2 {i}", foo2(x1), (inp + 1) * (inp + 1) * (inp + 1))
            del x1, x2
        x1, x2 = foo(inp)
        T.note("checkpoints before", T.checkpoints())
        moved = torch.zeros_like(x1) + 2
        T.check("input not in the pool", foo2(moved), moved * moved * moved)
        T.check("foo's outputs intact", (x1, x2), (inp + 1, inp + 2))

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, R])
    assert t.final["graphs"] == [("foo", None), ("foo2", 0), ("foo2", 0)]
    assert t.final["checkpoints"] == 1


@pytest.mark.parametrize("limit", [8, 0])
def test_output_dead_at_recording_and_live_now(limit):
    """check_invariants' expected_dead_indices_before_graph: B was recorded while A's second
    output was dead; with it live, B's graph cannot replay (it would overwrite it), and torch
    records another B. With a re-record limit of 0, whether this mismatch counts toward
    cudagraph_unexpected_rerecord_limit depends on torch's version (torch 2.13 counts it and runs
    B eagerly); cgviz must do what the installed torch does."""

    def work(T):
        a = T.wrap(lambda x: (x + 1, x * 2), name="A")
        b = T.wrap(lambda p: p * 3, name="B")
        x = rand(16)

        def step(keep_q, i):
            p, q = a(x)
            if not keep_q:
                del q
            r = b(p)
            T.check(f"step {i}", r, (x + 1) * 3)

        step(False, 0)
        step(False, 1)
        step(True, 2)
        step(True, 3)
        step(False, 4)

    t, c = run_both(work, rerecord_limit=limit)
    if limit:
        assert_parity(t, c, expect=[W, W, R, R, E, R, E, E, E, E])
        assert t.final["graphs"] == [("A", None), ("B", 0), ("B", 0)]
    else:
        assert_parity(t, c)


def test_static_input_moved_rerecords_and_reuses_recordings():
    """test_multi_dispatch_single_compile_param_inputs / test_rerecord_if_static_input_address_changed:
    a parameter at a new address records a new root; the old parameter replays its own."""

    def work(T):
        f = T.wrap(lambda x, p: x * p, static=(1,), name="f")
        p1, p2 = rand(2, 2), rand(2, 2)
        for name, p in (("p1", p1), ("p2", p2), ("p1 again", p1)):
            for i in range(3):
                x = torch.ones(2, 2, device=DEV) * (i + 1)
                T.check(f"{name} {i}", f(x, p), x * p)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, R, E, E, E, E, E])
    assert t.final["graphs"] == [("f", None), ("f", None)]


def test_static_input_moving_every_call_with_a_rerecord_limit():
    """test_fallback_to_eager_if_recompiling_too_many_times: a parameter at a new address at
    every call, with a re-record limit of 1: every call records a new root. torch never lets
    static-input moves reach its limit (2.11 applies the limit only with dynamo's nn-module
    inlining off, its default being on; 2.13 does not count these moves); neither does cgviz."""

    def work(T):
        f = T.wrap(lambda x, p: x * p, static=(1,), name="f")
        params = [rand(2, 2) for _ in range(5)]  # all kept: every call sees a new address
        x = torch.ones(2, 2, device=DEV)
        for i, p in enumerate(params):
            T.check(f"param {i}", f(x, p), x * p)

    t, c = run_both(work, rerecord_limit=1)
    assert_parity(t, c)


def test_rerecord_limit_for_a_moved_cudagraph_managed_input():
    """test_fallback_to_eager_if_recompiling_too_many_times_due_to_cudagraph_managed_tensor:
    goo was recorded on foo's output, then is given a clone instead, with a re-record limit of 0:
    goo runs eagerly there from then on. torch 2.11 applies its limit only when dynamo does not
    inline nn modules (exceed_rerecord_limit returns False otherwise, its default); torch 2.13
    applies it always. cgviz applies it always, so torch runs here with inlining off."""

    def work(T):
        foo = T.wrap(lambda x: x + 1, name="foo")
        goo = T.wrap(lambda x: x * 2, name="goo")
        for i in range(3):
            T.mark_step()
            inp = rand(2, 3)
            y = foo(inp)
            z = goo(y)
            T.check(f"graphed {i}", z, (inp + 1) * 2)
        for i in range(3):
            T.mark_step()
            inp = rand(2, 3)
            y = foo(inp)
            y_clone = y.clone()
            z = goo(y_clone)
            T.check(f"clone {i}", z, (inp + 1) * 2)

    with torch._dynamo.config.patch(inline_inbuilt_nn_modules=False):
        t, c = run_both(work, rerecord_limit=0)
    assert_parity(t, c)
