"""Parity with torch's own CUDA graph tree manager (tests/gpu/parity.py): generations and stale
outputs."""

from __future__ import annotations

import torch

from parity import DEV, E, R, W, assert_parity, format_calls, rand, run_both
from parity import fresh_trees  # noqa: F401 (an autouse fixture)


# ---------------------------------------------------------------------------------------------
# generations and stale outputs
# ---------------------------------------------------------------------------------------------
def test_error_on_dealloc_use():
    """test_error_on_dealloc_use (a mark_step where torch.compile ticks a generation): once the
    next generation has run, the previous warmup's and recording's outputs raise on access."""

    def work(T):
        foo = T.wrap(lambda x: x * x * x, name="foo")
        inp = rand(4)
        T.mark_step()
        out = foo(inp)
        T.mark_step()
        out2 = foo(inp)
        T.note("warmup output stale after the next generation's call", T.is_stale(out))
        T.mark_step()
        out3 = foo(inp)
        T.note("recorded output stale after the next generation's call", T.is_stale(out2))
        T.check("replay", out3, inp * inp * inp)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E])


def test_mark_step_lets_a_held_output_be_overwritten():
    """test_mark_step: with a mark_step before each call, holding the previous output does not
    stop the next call from recording, then replaying, the root."""

    def work(T):
        foo = T.wrap(lambda x: x * x * x, name="foo")
        out = None
        for i in range(3):
            T.mark_step()
            x = rand(4, 4)
            out = foo(x)
            T.check(f"step {i}", out, x * x * x)

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E])
    assert t.final["graphs"] == [("foo", None)]


def test_mark_step_invalidation_timing_is_a_documented_difference():
    """Documented in docs/engine.md ("Invalidation happens at mark_step() itself (torch does it
    lazily, at the next run)"): cgviz raises on any use of an output from an ended generation as
    soon as mark_step() returns. torch invalidates warmup and recorded outputs at the next call,
    and never invalidates a replayed output: its next replay hands out the same tensor."""

    def work(T):
        foo = T.wrap(lambda x: x * 3, name="foo")
        x = torch.ones(4, device=DEV)
        T.mark_step()
        y = foo(x)
        T.mark_step()
        T.note("warmup output stale right after mark_step", T.is_stale(y))
        y2 = foo(x)
        T.note("warmup output stale after the next call", T.is_stale(y))
        T.mark_step()
        y3 = foo(x)
        T.note("recorded output stale after the next call", T.is_stale(y2))
        T.mark_step()
        T.note("replayed output stale right after mark_step", T.is_stale(y3))
        y4 = foo(x)
        T.note("replayed output stale after the next replay", T.is_stale(y3))
        T.note("the next replay hands out the same tensor", y4 is y3)
        T.check("replay", y4, x * 3)

    t, c = run_both(work)
    assert_parity(
        t,
        c,
        expect=[W, R, E, E],
        differ={
            "warmup output stale right after mark_step": (False, True),
            "replayed output stale right after mark_step": (False, True),
            "replayed output stale after the next replay": (False, True),
            "the next replay hands out the same tensor": (True, False),
        },
    )


def test_a_new_function_after_replays_while_an_ended_generations_output_is_held():
    """Documented in docs/engine.md: torch never invalidates a replayed output and counts it
    live, and a function first called in the next generation right after the path replayed
    warms up under that path: it keeps warming up while the user holds the output. cgviz
    invalidated the output at mark_step(), so the path has ended: the function records, then
    replays. Once the output is let go, torch records it too."""

    def work(T):
        f = T.wrap(lambda x: x * 2, name="f")
        g = T.wrap(lambda x: x + 1, name="g")
        x = rand(8)
        for _ in range(3):  # warmup, record, replay
            T.mark_step()
            y = f(x)
        T.mark_step()
        for i in range(3):
            T.check(f"g {i} while y is held", g(x), x + 1)
        T.note("y is stale", T.is_stale(y))
        del y
        for i in range(2):
            T.check(f"g {i} once y is gone", g(x), x + 1)

    t, c = run_both(work)
    assert [d for _, d in t.calls] == [W, R, E, W, W, W, R, E], f"HARNESS: torch decided {format_calls(t.calls)}"
    assert [d for _, d in c.calls] == [W, R, E, W, R, E, E, E], f"cgviz decided {format_calls(c.calls)}"
    assert dict(t.notes)["y is stale"] is False and dict(c.notes)["y is stale"] is True


def test_a_replayed_path_ends_lazily_in_torch_and_at_mark_step_in_cgviz():
    """Documented in docs/engine.md ("a call in a new generation after replays"): after replays,
    torch first tries the current node's children, even in a new generation, and ends the path
    only when none takes the call; cgviz's mark_step() ends the path at once. With a chain of
    graphs of f recorded under one another, a mark_step() before each call makes torch replay the
    chain's nodes in turn (each with its own output memory), and cgviz replay the root."""

    def work(T):
        f = T.wrap(lambda x: x * 2 + 1, name="f")
        x = rand(8)
        T.mark_step()
        for _ in range(3):  # warmup, record, replay: the root, node 1
            y = f(x)
            del y
        for _ in range(4):  # the previous output held: a replay of node 1, then a chain of three children
            y = f(x)
        del y
        addresses = []
        for i in range(4):
            T.mark_step()
            y = f(x)
            addresses.append(y.data_ptr())
            T.check(f"step {i}", y, x * 2 + 1)
        # torch's chain nodes were each recorded while the previous one's output was live: no two
        # in a row share memory (every other one may: a node reuses the memory of one dead then)
        T.note("an iteration's output in the memory of the one before", any(
            a == b for a, b in zip(addresses, addresses[1:])))

    t, c = run_both(work)
    assert_parity(t, c, expect=[W, R, E, E, R, R, R, E, E, E, E],
                  differ={"an iteration's output in the memory of the one before": (False, True)})
