"""Parity with torch's own CUDA graph tree manager (tests/gpu/parity.py runs each workload through
both): warmup, record, replay; roots and children. The other ports, one subject a module:
test_torch_parity_checkpoints.py (checkpoints, invariants, re-recording),
test_torch_parity_generations.py (generations and stale outputs), test_torch_parity_aliasing.py,
test_torch_parity_inputs.py (expanded, other devices, mutation) and
test_torch_parity_resources.py (cuBLAS, exceptions, forward/backward, the pool's lifetime)."""

from __future__ import annotations

import gc

import torch

from parity import DEV, E, R, W, assert_parity, rand, run_both
from parity import fresh_trees  # noqa: F401 (an autouse fixture)


# ---------------------------------------------------------------------------------------------
# warmup, record, replay; roots and children
# ---------------------------------------------------------------------------------------------
def test_run_simple_two_shapes_are_two_roots():
    """test_run_simple: each input shape warms up and records its own root, no children."""

    def work(T):
        foo = T.wrap(lambda x: x * x * x, name="foo")
        for inp in (torch.ones(4, 4, device=DEV), torch.zeros(5, 5, device=DEV)):
            for i in range(2):
                T.check(f"foo {i}", foo(inp), inp * inp * inp)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, W, R])
    assert t.final["graphs"] == [("foo", None), ("foo", None)]


def test_warmup_record_replay_values_and_pool():
    """test_peristed_output_livenes (first part) / tearDown's pool checks: warmup, record, replays;
    nothing left allocated in the pool once the outputs are dead; the same reserved bytes."""

    def work(T):
        f = T.wrap(lambda x: (x * 2 + 1).relu(), name="f")
        for i in range(4):
            x = torch.randn(1024, device=DEV)
            T.check(f"call {i}", f(x), (x * 2 + 1).relu())
        T.note("live blocks once the outputs are dead", T.live_blocks())
        T.note("reserved bytes", T.reserved())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E])


def test_dynamic_warmup_new_shape_warms_up_again():
    """test_dynamic_warmup: a new shape warms up again (after a checkpoint restore, as the path
    was replaying); replays do not run the Python function."""

    def work(T):
        counter = {"n": 0}

        def f(x):
            counter["n"] += 1
            return x * 2

        g = T.wrap(f, name="f")
        for n in (2, 3):
            x = torch.randn(n, device=DEV)
            for i in range(3):
                T.check(f"size {n} call {i}", g(x), x * 2)
            T.note(f"python calls after size {n}", counter["n"])

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, W, R, E])
    assert t.final["checkpoints"] == 1


def test_function_called_twice_in_a_step_is_root_and_child():
    """test_function_compiled_multiple_times: foo2 runs twice per step; one root with two
    descendants."""

    def work(T):
        foo2 = T.wrap(lambda x: x * x * x, name="foo2")
        add = T.wrap(lambda y, y2: y + y2, name="add")

        def foo(x):
            y = foo2(x)
            y2 = foo2(y)
            return add(y, y2)

        x = rand(4, 4) + 0.5
        y = x * x * x
        want = y + y * y * y
        for i in range(3):
            T.check(f"step {i}", foo(x), want)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, W, R, R, R, E, E, E])
    assert t.final["graphs"] == [("foo2", None), ("foo2", 0), ("add", 1)]


def test_end_recording_early_separate_roots():
    """test_end_recording_early: once foo's outputs are dead, foo2 records its own root."""

    def work(T):
        part1 = T.wrap(lambda x: x * x * x, name="foo_part1")
        part2 = T.wrap(lambda x, y: x + y, name="foo_part2")
        foo2 = T.wrap(lambda x: x + 4, name="foo2")

        def foo(x):
            y = part1(x)
            return part2(x, y)

        for i in range(3):
            x = torch.ones(4, 4, device=DEV) * 2
            out = foo(x)
            T.check(f"foo {i}", out, x * x * x + x)
            del out
            out = foo2(x)
            T.check(f"foo2 {i}", out, x + 4)
            del out
        x = torch.ones(4, 4, device=DEV) * 3
        T.check("foo again", foo(x), x * x * x + x)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, W, R, R, R, E, E, E, E, E])
    assert t.final["graphs"] == [("foo_part1", None), ("foo_part2", 0), ("foo2", None)]


def test_execution_into_recording():
    """test_execution_into_recording: a branch taken for the first time after replays warms up,
    then records; live pool blocks at each point. Every foo() call is a new generation, as every
    torch.compile invocation is."""

    def work(T):
        p = T.wrap(lambda x: x + x, name="p")
        q = T.wrap(lambda y: y + 10, name="q")
        r = T.wrap(lambda y: y - 10, name="r")

        def foo(x):
            T.mark_step()
            y = p(x)
            return q(y) if y.sum() > 0 else r(y)

        def eager(x):
            y = x + x
            return y + 10 if y.sum() > 0 else y - 10

        inp = torch.zeros(4, 4, device=DEV)
        T.check("zeros 0", foo(inp), eager(inp))
        T.check("zeros 1", foo(inp), eager(inp))
        inp.add_(1)
        out_warmup = foo(inp)
        T.check("warmup of q", out_warmup, eager(inp))
        T.note("live blocks after q's warmup", T.live_blocks())
        out_live = foo(inp)
        T.check("recording of q", out_live, eager(inp))
        T.note("live blocks after q's recording", T.live_blocks())
        T.note("q's warmup output stale", T.is_stale(out_warmup))
        del out_warmup
        T.note("live blocks after del out_warmup", T.live_blocks())
        del out_live
        T.note("live blocks after del out_live", T.live_blocks())
        T.check("replay", foo(inp), eager(inp))
        T.note("live blocks after the replay", T.live_blocks())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, W, E, R, E, E])
    assert t.final["graphs"] == [("p", None), ("r", 0), ("q", 0)]


def test_accumulate_multiple_recordings():
    """test_accumulate_multiple_recordings: two shapes and a branch; a new generation frees the
    previous one's recorded output (it raises on access)."""

    def work(T):
        part1 = T.wrap(lambda x: x + x + x, name="foo_part1")
        part2 = T.wrap(lambda y: y * 10, name="foo_part2")

        def foo(x):
            T.mark_step()
            y = part1(x)
            if y.sum() <= 0:
                return y
            return part2(y)

        def run_twice(x):
            foo(x)
            return foo(x)

        out1 = run_twice(torch.zeros(5, device=DEV))
        out2 = run_twice(torch.zeros(6, device=DEV))
        T.note("out1 stale after the next generation", T.is_stale(out1))
        T.note("live blocks with out2", T.live_blocks())
        ones = torch.ones(5, device=DEV)
        out3 = run_twice(ones)
        T.check("out3", out3, ones * 30)
        T.note("live blocks with out3", T.live_blocks())
        del out1, out2
        T.note("live blocks after del out1, out2", T.live_blocks())
        del out3
        gc.collect()
        T.note("live blocks after del out3", T.live_blocks())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, W, R, E, W, E, R])
    assert t.final["graphs"] == [("foo_part1", None), ("foo_part1", None), ("foo_part2", 0)]


def test_live_outputs_multiple_graphs_checkpoints():
    """test_live_outputs_multiple_graphs: warming up, then recording, a third graph after
    replays takes two checkpoint restores."""

    def work(T):
        g1 = T.wrap(lambda x: (x + x + x, x + x + x + 1), name="g1")
        g2 = T.wrap(lambda x3: x3 * x3, name="g2")
        g3 = T.wrap(lambda y: y + 1, name="g3")

        def foo(x):
            T.mark_step()
            x3, y = g1(x)
            z = g2(x3)
            if z.sum() > 0:
                return g3(y)
            return y

        for i in range(2):
            T.check(f"zeros {i}", foo(torch.zeros(5, device=DEV)), torch.ones(5, device=DEV))
        T.note("checkpoints after the zeros", T.checkpoints())
        ones = torch.ones(5, device=DEV)
        foo(ones)
        out = foo(ones)
        T.check("ones", out, ones * 3 + 2)
        T.note("live blocks with out", T.live_blocks())
        del out
        T.note("live blocks after del out", T.live_blocks())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, E, W, E, E, R])
    assert t.final["checkpoints"] == 2


def test_outputs_held_across_replays_record_a_child():
    """An output still held when the same function runs again: the new run cannot overwrite it,
    so it records a child (after a checkpoint restore); the pattern then replays."""

    def work(T):
        f = T.wrap(lambda x: x.sin(), name="f")
        x = rand(64)
        for i in range(2):
            T.check(f"call {i}", f(x), x.sin())
        for i in range(2):
            y1 = f(x)
            y2 = f(x)
            T.check(f"pair {i}", (y1, y2), (x.sin(), x.sin()))
            del y1, y2

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, R, E, E])
    assert t.final["graphs"] == [("f", None), ("f", 0)]


def test_branching_siblings_share_the_parents_memory():
    """A→B, then A→B' once B is dead: B' is a sibling of B, recorded into the memory B's output
    had (max, not sum): same pool bytes as torch's."""

    def work(T):
        n = 256 * 1024
        a = T.wrap(lambda x: x.exp(), name="A")
        b = T.wrap(lambda y: (y * 2).sin() + 1, name="B")
        bp = T.wrap(lambda y: (y * 3).cos() - 1, name="Bp")
        b_address = bp_address = None
        for i in range(3):
            x = torch.randn(n, device=DEV)
            ya = a(x)
            yb = b(ya)
            T.check(f"A→B {i}", yb, (x.exp() * 2).sin() + 1)
            b_address = yb.data_ptr()
            del ya, yb
        T.note("reserved bytes after A→B", T.reserved())
        for i in range(3):
            x = torch.randn(n, device=DEV)
            ya = a(x)
            ybp = bp(ya)
            T.check(f"A→B' {i}", ybp, (x.exp() * 3).cos() - 1)
            bp_address = ybp.data_ptr()
            del ya, ybp
        T.note("reserved bytes after A→B'", T.reserved())
        T.note("B' output where B's was", bp_address == b_address)
        T.note("live blocks at the end", T.live_blocks())

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, W, R, R, E, E, E, W, E, R, E, E])
    assert t.final["graphs"] == [("A", None), ("B", 0), ("Bp", 0)]


def test_persisted_output_liveness_through_a_view():
    """test_peristed_output_livenes: a view of a replayed output keeps it live (the next call
    records a child); once the view is dropped the root replays."""

    def work(T):
        foo = T.wrap(lambda x: x + x, name="foo")
        for i in range(3):
            x = rand(2, 2)
            T.check(f"call {i}", foo(x), x + x)
        x = rand(2, 2)
        out = foo(x)
        out_ref = out[0:]
        del out
        y = rand(2, 2)
        T.check("with a view alive", foo(y), y + y)
        T.check("the view", out_ref, x + x)
        del out_ref
        z = rand(2, 2)
        T.check("view dropped", foo(z), z + z)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E, R, E])
    assert t.final["graphs"] == [("foo", None), ("foo", 0)]
