"""What once corrupted a cuda tree's pool or returned wrong values, on real CUDA graphs:
exceptions right after replays, cuBLAS workspaces, mutation decided per place, host syncs
while capturing, inference mode, threads, nested calls, and memory given back when a tree is
deleted. Expanded inputs and the user's exceptions told apart from capture failures run on sim
and cuda alike, in tests/test_engine_reliability.py."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

import cgviz
from cgviz._torch.allocator import pool_segments
from helpers import calls

DEV = "cuda"


def unowned_live_blocks(tree) -> list:
    """Allocated pool blocks that no live output or input buffer owns."""
    snap = tree.snapshot()
    return [
        (hex(b.address), b.size, b.owner)
        for seg in snap.segments
        for b in seg.blocks
        if b.allocated and b.node is None
    ]


def pool_left(pool) -> list:
    """The segments left in a private pool once its tree was deleted and collected
    (the pool's memory goes back to the device only when none are left)."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return pool_segments(torch.cuda.current_device(), pool)


def test_exception_right_after_replays_keeps_the_pool_sound():
    t = cgviz.Tree(DEV)
    state = {"raised": False}

    def g_fn(y):
        if not state["raised"]:
            state["raised"] = True
            raise ValueError("first call fails")
        return y * 3

    f = t.wrap(lambda x: x * 2 + 1, name="f")
    g = t.wrap(g_fn, name="g")
    x = torch.randn(8, device=DEV)
    for _ in range(3):
        y = f(x)
        del y
    y = f(x)
    with pytest.raises(ValueError, match="first call fails"):
        g(y)
    z = g(y)
    assert torch.equal(z, (x * 2 + 1) * 3)
    t.mark_step()
    for i in range(4):
        a = torch.randn(8, device=DEV)
        y = f(a)
        z = g(y)
        assert torch.equal(z, (a * 2 + 1) * 3)
        del y, z
        t.mark_step()
    assert calls(t)[-2:] == ["execute", "execute"]
    assert unowned_live_blocks(t) == []
    pool = t.backend.pool
    del f, g, t
    assert pool_left(pool) == []


def test_matmuls_keep_no_cublas_workspace_in_the_pool():
    t = cgviz.Tree(DEV)
    f = t.wrap(lambda x: x * 2, name="f")
    g = t.wrap(lambda a, w: torch.relu(a @ w), static=(1,), name="g")
    w = torch.randn(256, 256, device=DEV)
    x = torch.randn(256, device=DEV)
    for _ in range(3):
        y = f(x)
        del y
    for step in range(4):
        t.mark_step()
        a = torch.randn(64, 256, device=DEV)
        out = g(a, w)
        torch.testing.assert_close(out, torch.relu(a @ w))
        del out
    assert "execute" in calls(t)[-2:]
    w = torch.randn(256, 256, device=DEV)  # moves: a new recording
    t.mark_step()
    out = g(a, w)
    torch.testing.assert_close(out, torch.relu(a @ w))
    assert unowned_live_blocks(t) == []
    pool = t.backend.pool
    del out, f, g, t
    assert pool_left(pool) == []


def test_mutating_function_is_eager_where_its_input_is_a_plain_tensor():
    t = cgviz.Tree(DEV)

    def bump(x):
        x.add_(1)
        return x * 2

    make = t.wrap(lambda x: x + 0, name="make")
    b = t.wrap(bump, name="bump")
    for _ in range(3):
        m = make(torch.zeros(4, device=DEV))
        y = b(m)
        assert torch.equal(m, torch.ones(4, device=DEV)) and torch.equal(y, torch.full((4,), 2.0, device=DEV))
        del m, y
    assert calls(t)[-1] == "execute"
    plain = torch.zeros(4, device=DEV)
    y = b(plain)
    assert torch.equal(plain, torch.ones(4, device=DEV)), "the caller's tensor was not mutated"
    assert torch.equal(y, torch.full((4,), 2.0, device=DEV)) and calls(t)[-1] == "eager"


def test_host_sync_only_while_capturing_falls_back_with_eager_values_and_tree_works():
    t = cgviz.Tree(DEV)
    ran = []

    def fn(x):  # logs a value on its second call only: the call that records
        ran.append(1)
        if len(ran) == 2:
            ran.append(x.sum().item())
        return x * 2

    f = t.wrap(fn, name="f")
    g = t.wrap(lambda x: x + 1, name="g")
    x = torch.randn(8, device=DEV)
    assert torch.equal(f(x), x * 2)
    stream = torch.cuda.current_stream()
    y = f(x)
    assert torch.equal(y, x * 2)
    assert torch.cuda.current_stream() == stream, "the capture stream was left current"
    assert calls(t) == ["warmup", "eager"]
    assert "capturing it failed" in t.trace.steps[-1].reason and "_local_scalar_dense" in t.trace.steps[-1].reason
    assert torch.equal(f(x), x * 2) and calls(t)[-1] == "eager"
    for i in range(3):
        a = torch.randn(8, device=DEV)
        z = g(a)
        assert torch.equal(z, a + 1)
        del z
    assert calls(t)[-3:] == ["warmup", "record", "execute"]
    pool = t.backend.pool
    del f, g, y, t
    assert pool_left(pool) == []


@pytest.mark.parametrize("fn", [lambda x: x[x > 0] * 2, lambda x: torch.unique(x) + 1])
def test_data_dependent_shapes_decide_as_on_sim(fn):
    trees = {dev: cgviz.Tree(dev) for dev in ("sim", DEV)}
    for dev, t in trees.items():
        f = t.wrap(fn, name="f")
        for i in range(3):
            x = torch.randn(32, generator=torch.Generator().manual_seed(i))
            x = x.to("cpu" if dev == "sim" else DEV)
            torch.testing.assert_close(f(x), fn(x))
    assert calls(trees["sim"]) == calls(trees[DEV]) == ["warmup", "eager", "eager"]


def test_inference_mode_is_graphed():
    t = cgviz.Tree(DEV)
    f = t.wrap(lambda x, w: torch.relu(x @ w), static=(1,), name="f")
    with torch.inference_mode():
        w = torch.randn(64, 64, device=DEV)
        for _ in range(4):
            x = torch.randn(8, 64, device=DEV)
            y = f(x, w)
            torch.testing.assert_close(y, torch.relu(x @ w))
            del y
    assert calls(t) == ["warmup", "record", "execute", "execute"]


def test_nested_call_is_captured_in_the_outer_graph():
    t = cgviz.Tree(DEV)
    inner = t.wrap(lambda x: x * 3, name="inner")
    outer = t.wrap(lambda x: inner(x) + 1, name="outer")
    for _ in range(50):
        x = torch.randn(8, device=DEV)
        y = outer(x)
        assert torch.equal(y, x * 3 + 1)
        del y
    assert [n.variant.label for n in t.nodes if n.kind == "graph"] == ["outer"]


def test_two_threads_on_one_tree_never_get_wrong_values():
    t = cgviz.Tree(DEV)
    f = t.wrap(lambda x, w: torch.tanh(x @ w), static=(1,), name="f")
    w = torch.randn(128, 128, device=DEV)
    barrier = threading.Barrier(2)
    # Every CUDA call the threads make goes through the tree (copies too, through a function
    # that always runs eagerly: it takes a list), so none runs beside another thread's capture.
    # Inputs are drawn before the threads start: during a capture CUDA's random generator
    # belongs to it, and cuBLAS workspaces are cleared around warmups and captures, so other
    # threads must not draw random numbers or run matmuls of their own meanwhile.
    inputs = [[torch.randn(16, 128, device=DEV) for _ in range(300)] for _ in range(2)]
    results: list[list] = [[], []]
    keep = t.wrap(lambda y, into: into.append(y.clone()), name="keep")

    def worker(k: int) -> None:
        barrier.wait()
        for x in inputs[k]:
            y = f(x, w)
            keep(y, results[k])
            del y

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wrong = [
        (k, i)
        for k in range(2)
        for i, (x, y) in enumerate(zip(inputs[k], results[k]))
        if not torch.allclose(y, torch.tanh(x @ w), atol=1e-5)
    ]
    assert [len(r) for r in results] == [300, 300] and wrong == []
    graph_calls = [s for s in t.trace.expanded() if s.function == "f" and s.kind != "path_end"]
    assert len(graph_calls) == 600 and unowned_live_blocks(t) == []


def test_capture_broken_inside_cuda_falls_back_and_says_the_pool_is_done():
    """An op cgviz cannot see breaks the capture (a device synchronize while recording): that
    call runs eagerly with its value right; torch leaves its host allocator recording into the
    pool, so later recordings run eagerly saying so; warmups and values stay right, and the pool
    is given back when the tree goes."""
    t = cgviz.Tree(DEV)
    ran = []

    def fn(x):
        ran.append(1)
        if len(ran) == 2:
            torch.cuda.synchronize()
        return x * 2

    f = t.wrap(fn, name="f")
    g = t.wrap(lambda x: x + 1, name="g")
    x = torch.randn(8, device=DEV)
    assert torch.equal(f(x), x * 2)
    assert torch.equal(f(x), x * 2)
    assert calls(t) == ["warmup", "eager"] and "capturing it failed" in t.trace.steps[-1].reason
    torch.randn(4, device=DEV)  # the random generator is usable again
    for _ in range(3):
        a = torch.randn(8, device=DEV)
        z = g(a)
        assert torch.equal(z, a + 1)
        del z
    assert calls(t)[-3:] == ["warmup", "eager", "eager"]
    assert "no more captures" in t.trace.steps[-1].reason
    pool = t.backend.pool
    del f, g, t
    assert pool_left(pool) == []
