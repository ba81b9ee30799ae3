"""Parity with torch's own CUDA graph tree manager (tests/gpu/parity.py): outputs aliasing
parameters, inputs and each other."""

from __future__ import annotations

import torch

from parity import E, R, W, assert_parity, cdata, rand, run_both
from parity import fresh_trees  # noqa: F401 (an autouse fixture)


# ---------------------------------------------------------------------------------------------
# aliasing
# ---------------------------------------------------------------------------------------------
def test_aliased_static_parameter_output():
    """test_aliased_static_parameter: an output that is a view of a static input is that input's
    storage at every call, and does not keep the path live."""

    def work(T):
        inp = rand(20, 20)
        foo = T.wrap(lambda x: x[0], static=(0,), name="foo")
        out = None
        for i in range(3):
            out = foo(inp)  # the previous output is still held during the call
            T.note(f"call {i}: output shares the parameter's storage", cdata(out) == cdata(inp))
            T.check(f"call {i}", out, inp[0])

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E])


def test_alias_of_parameter_does_not_keep_the_path_live():
    """test_alias_of_parameter: outputs that are the parameter or its view are not the tree's;
    holding only them, the next call replays the root instead of recording a child."""

    def work(T):
        p = rand(20, 20)
        foo = T.wrap(lambda p, x: (p[0], p, p + x), static=(0,), name="foo")
        x = rand(20, 20)
        for i in range(4):
            outs = foo(p, x)
            T.check(f"call {i}", outs, (p[0], p, p + x))
            T.note(f"call {i}: parameter outputs share its storage", cdata(outs[1]) == cdata(p))
            keep = outs[:2]
            del outs
        del keep

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E])
    assert t.final["graphs"] == [("foo", None)]


def test_output_alias_of_a_non_static_input():
    """test_output_alias: outputs x and x[0] share one storage and die together. Documented in
    docs/engine.md: cgviz's outputs that alias a non-static input alias the caller's tensor, as
    in eager; torch's alias the graph's copy of the input (its input buffer in the pool)."""

    def work(T):
        inp = rand(20, 20)
        foo = T.wrap(lambda x: (x, x[0]), name="foo")
        for i in range(3):
            out_1, out_2 = foo(inp)
            T.note(f"call {i}: outputs share one storage", cdata(out_1) == cdata(out_2))
            T.note(f"call {i}: output 0 is the caller's memory", out_1.data_ptr() == inp.data_ptr())
            T.check(f"call {i}", (out_1, out_2), (inp, inp[0]))
            del out_1, out_2

    t, c = run_both(work)
    assert_parity(
        t,
        c,
        expect=[W, R, E],
        differ={
            "call 1: output 0 is the caller's memory": (False, True),
            "call 2: output 0 is the caller's memory": (False, True),
        },
    )


def test_aliased_outputs_share_one_storage_each():
    """test_aliased_storage_single_weakref: five outputs on two storages; once all are deleted
    nothing is live and the root replays."""

    def foo_fn(x):
        x = x * 20
        y = x * 10
        return x, x[0], x[4:], y[0], y[4:]

    def work(T):
        foo = T.wrap(foo_fn, name="foo")
        for i in range(4):
            x = rand(20, 20)
            outs = foo(x)
            T.note(f"call {i}: storages", len({o.untyped_storage().data_ptr() for o in outs}))
            T.check(f"call {i}", outs, foo_fn(x))
            del outs

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E])


def test_empty_outputs_do_not_keep_the_path_live():
    """test_empty_storage: an output with no memory (torch.zeros(0)) is not tracked; holding it
    does not stop the next call from recording, then replaying."""

    def foo_fn(x):
        return x + x + x, torch.zeros(0, device=x.device), torch.zeros(100, device=x.device)[0:0]

    def work(T):
        foo = T.wrap(foo_fn, name="foo")
        inp = rand(4)
        kept = None
        for i in range(4):
            a, e1, e2 = foo(inp)
            T.check(f"call {i}", (a, e1, e2), foo_fn(inp))
            kept = e1  # only the empty output stays
            del a, e1, e2
        del kept

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E])


def test_inplace_change_of_an_output_before_passing_it_on():
    """In-place ops on outputs: the caller changes f's replayed output before g reads it."""

    def work(T):
        f = T.wrap(lambda x: x * 2, name="f")
        g = T.wrap(lambda y: y + 1, name="g")
        x = rand(32)
        for i in range(4):
            y = f(x)
            y.add_(1)
            T.check(f"step {i}", g(y), x * 2 + 2)
            del y

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, E, E, E])
    assert t.final["graphs"] == [("f", None), ("g", 0)]
