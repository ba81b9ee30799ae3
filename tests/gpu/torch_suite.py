"""Helpers for tests/gpu/test_torch_suite_observed.py: torch's own CUDA graph tree tests, run
unobserved and inside cgviz.observe_torch().

The small functions marked "from torch's ..." copy the logic of helpers and of setUp/tearDown in
pytorch's test/inductor/test_cudagraph_trees.py (BSD-3-Clause, Copyright (c) Meta Platforms,
Inc. and affiliates; see https://github.com/pytorch/pytorch/blob/main/LICENSE).

`run_ported(body, variant)` is torch's setUp, the test body and torch's tearDown checks, in one
of `VARIANTS`:

- "unobserved": as torch runs it;
- "events-inside", "full-inside": the body inside `cgviz.observe_torch(trace=level)`, and torch's
  tearDown (reset, then no tree manager, no live block, no cudagraph segment) done INSIDE the
  with-block: observing must keep nothing of torch's alive;
- "full-after": the body observed, the tearDown done after the block has ended.

Every variant must give the same outcome. On top of torch's checks, the nodes of the trees that
the body left must be garbage once torch's tearDown reset them.

Imports cleanly without CUDA (nothing here touches the device at import).
"""

from __future__ import annotations

import contextlib
import gc
import os
import traceback
import warnings
import weakref
from typing import Any, Callable, Iterable, Optional

import torch
import torch._dynamo.config as dynamo_config
from torch._inductor import config

VARIANTS = ("unobserved", "events-inside", "full-inside", "full-after")

# the device index the current test runs on (torch's setUp: self.device_idx)
_DEVICE: dict[str, Optional[int]] = {"index": None}


# -- torch's helpers ------------------------------------------------------------------------------

def cdata(t: torch.Tensor) -> int:
    # from torch's test/inductor/test_cudagraph_trees.py (cdata), BSD-3-Clause
    return t.untyped_storage()._cdata


def get_all_cudagraph_segments() -> list:
    # from torch's test/inductor/test_cudagraph_trees.py (get_all_cudagraph_segments), BSD-3-Clause
    segments = torch.cuda.memory_snapshot()
    return [segment for segment in segments if segment["segment_pool_id"] != (0, 0)]


def get_cudagraph_segments(pool_id: Any) -> list:
    # from torch's test/inductor/test_cudagraph_trees.py (get_cudagraph_segments), BSD-3-Clause
    segments = torch.cuda.memory_snapshot()
    return [segment for segment in segments if segment["segment_pool_id"] == pool_id]


def all_live_blocks() -> list:
    # from torch's test/inductor/test_cudagraph_trees.py (all_live_blocks), BSD-3-Clause
    blocks_addrs = []
    for segment in get_all_cudagraph_segments():
        addr = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                blocks_addrs.append(addr)
            addr += block["size"]
    return blocks_addrs


def all_live_block_count() -> int:
    # from torch's test/inductor/test_cudagraph_trees.py (all_live_block_count), BSD-3-Clause
    return len(all_live_blocks())


def device_index() -> int:
    """The device torch's setUp found (`torch.rand([0], device="cuda").device.index`)."""
    if _DEVICE["index"] is None:
        _DEVICE["index"] = torch.rand([0], device="cuda").device.index
    return _DEVICE["index"]


def get_manager(device_index_: Optional[int] = None) -> Any:
    # from torch's test/inductor/test_cudagraph_trees.py (CudaGraphTreeTests.get_manager), BSD-3-Clause
    return torch._inductor.cudagraph_trees.get_container(
        device_index() if not device_index_ else device_index_
    ).tree_manager


def get_roots() -> Any:
    # from torch's test/inductor/test_cudagraph_trees.py (get_roots), BSD-3-Clause
    return get_manager().get_roots()


def curr_node() -> Any:
    # from torch's test/inductor/test_cudagraph_trees.py (curr_node), BSD-3-Clause
    return get_manager().current_node


def get_root_children() -> list:
    # from torch's test/inductor/test_cudagraph_trees.py (get_root_children), BSD-3-Clause
    return [root.num_descendants() for root in get_roots()]


def num_checkpoints() -> int:
    # from torch's test/inductor/test_cudagraph_trees.py (num_checkpoints), BSD-3-Clause
    return get_manager().debug_checkpointing_counter


def run_twc(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    # from torch's test/inductor/test_cudagraph_trees.py (run_twc), BSD-3-Clause
    fn(*args, **kwargs)
    return fn(*args, **kwargs)


def cudagraphify_impl(*args: Any, is_inference: bool = True, is_backward: bool = False, **kwargs: Any) -> Any:
    # from torch's test/inductor/test_cudagraph_trees.py (CudaGraphTreeTests.cudagraphify_impl), BSD-3-Clause
    from torch._inductor.cudagraph_trees import cudagraphify_impl as tree_cudagraphify_impl

    return tree_cudagraphify_impl(
        *args, **kwargs, device_index=device_index(), is_inference=is_inference, is_backward=is_backward,
    )


def assert_equal(actual: Any, expected: Any) -> None:
    """torch's TestCase.assertEqual for what the ported tests compare: tensors (or sequences of
    them) with torch's default tolerances, anything else with ==."""
    if _has_tensor(actual) or _has_tensor(expected):
        torch.testing.assert_close(actual, expected, check_device=False)
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    return False


def _run_iter(param: torch.Tensor, fn: Callable) -> tuple:
    # from torch's test/inductor/test_cudagraph_trees.py (_run_iter), BSD-3-Clause
    fwd_output = fn(torch.ones(2, 2), param)
    fwd_output.sum().backward()
    grad_output = param.grad.clone().detach()
    param.grad = None
    return fwd_output, grad_output


def _assert_equal_multi_loop(param: torch.Tensor, fn_eager: Callable, fn_compiled: Callable) -> None:
    # from torch's test/inductor/test_cudagraph_trees.py (_assert_equal_multi_loop), BSD-3-Clause
    exp_output, exp_grad = _run_iter(param, fn_eager)
    for _ in range(5):
        compiled_output, compiled_grad = _run_iter(param, fn_compiled)
        assert_equal(exp_output, compiled_output)
        assert_equal(exp_grad, compiled_grad)


def run_static_input_param_test(fn_eager: Callable, num_graphs: int) -> None:
    # from torch's test/inductor/test_cudagraph_trees.py (run_static_input_param_test), BSD-3-Clause
    with torch.device("cuda"):
        fn_compiled = torch.compile(fn_eager, mode="reduce-overhead")

        p1 = torch.nn.Parameter(torch.rand([2, 2]))
        _assert_equal_multi_loop(p1, fn_eager, fn_compiled)

        p2 = torch.nn.Parameter(torch.rand([2, 2]))
        _assert_equal_multi_loop(p2, fn_eager, fn_compiled)

        # Run p1 again to ensure we reuse the previous recording
        _assert_equal_multi_loop(p1, fn_eager, fn_compiled)

        assert get_manager().new_graph_id().id == num_graphs


# -- torch's setUp and tearDown -------------------------------------------------------------------

def set_up() -> contextlib.ExitStack:
    """torch's TestCase.setUpClass + CudaGraphTreeTests.setUp: the config they patch (without
    setUpClass's "debug": True, which only writes inductor's debug files), warnings ignored; and
    torch._inductor.test_case.TestCase.setUp's caches: FX graph and AOTAutograd caches on, in a
    fresh cache directory for each test (INDUCTOR_TEST_DISABLE_FRESH_CACHE=1 keeps the usual
    one, as it does for torch's tests: faster, but a test then may hit what an earlier compiled)."""
    # from torch's test/inductor/test_cudagraph_trees.py (setUpClass, setUp), BSD-3-Clause
    torch._dynamo.reset()
    stack = contextlib.ExitStack()
    # from torch's torch/_inductor/test_case.py (TestCase.setUp), BSD-3-Clause
    from torch._functorch import config as functorch_config

    stack.enter_context(functorch_config.patch({"enable_autograd_cache": True}))
    if "TORCHINDUCTOR_FX_GRAPH_CACHE" not in os.environ and "TORCHINDUCTOR_FX_GRAPH_CACHE_DEFAULT" not in os.environ:
        stack.enter_context(config.patch({"fx_graph_cache": True}))
    if os.environ.get("INDUCTOR_TEST_DISABLE_FRESH_CACHE") != "1" and os.environ.get("TORCH_COMPILE_DEBUG") != "1":
        from torch._inductor import utils as inductor_utils

        fresh = getattr(inductor_utils, "fresh_cache", None) or inductor_utils.fresh_inductor_cache
        stack.enter_context(fresh())
    stack.enter_context(config.patch({
        "cpp.min_chunk_size": 1,
        "triton.autotune_pointwise": False,  # too slow
        "implicit_fallbacks": False,
    }))
    stack.enter_context(config.patch({
        "triton.cudagraphs": True,
        "triton.cudagraph_trees": True,
        "triton.fast_path_cudagraph_asserts": True,  # too slow
        "triton.slow_path_cudagraph_asserts": True,
    }))
    stack.enter_context(dynamo_config.patch(automatic_dynamic_shapes=True))
    _DEVICE["index"] = None
    device_index()
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore")
    return stack


def tear_down(stack: contextlib.ExitStack) -> None:
    """torch's CudaGraphTreeTests.tearDown, in its order (torch.cuda.synchronize() added before
    empty_cache, so that nothing still queued holds a block)."""
    # from torch's test/inductor/test_cudagraph_trees.py (tearDown), BSD-3-Clause
    torch._dynamo.reset()  # super().tearDown(): torch's TestCase.tearDown
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    stack.close()

    assert get_manager() is None
    assert all_live_block_count() == 0
    assert len(get_all_cudagraph_segments()) == 0


def still_clean() -> None:
    """After a with-block whose inside already passed tear_down: leaving the block freed nothing
    that the inside check missed, and left nothing behind."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    assert get_manager() is None
    assert all_live_block_count() == 0
    assert len(get_all_cudagraph_segments()) == 0


# -- what the body left: must be garbage after tear_down ------------------------------------------

def tree_refs() -> list:
    """Weak references to the nodes of the trees of this test's device (roots and their
    descendants), taken after the body returned, before the tearDown.

    Not the manager itself: after torch._dynamo.reset() torch 2.11 itself can keep the shut-down
    manager object alive (seen unobserved in the tests whose functions have a graph break: the
    compiled functions of dynamo's resume functions still refer to it); its trees are gone."""
    manager = get_manager()
    if manager is None:
        return []
    refs = []
    roots = getattr(manager, "roots", None) or {}
    stack = [node for nodes in roots.values() for node in nodes]
    while stack:
        node = stack.pop()
        refs.append((f"tree node {getattr(getattr(node, 'id', None), 'id', '?')}", weakref.ref(node)))
        for children in (getattr(node, "children", None) or {}).values():
            stack.extend(children)
    return refs


def assert_dead(refs: Iterable) -> None:
    """(An addition to torch's tearDown.) Everything `tree_refs` named is garbage."""
    gc.collect()
    alive = [what for what, ref in refs if ref() is not None]
    assert not alive, f"still alive after torch._dynamo.reset() and gc.collect(): {alive}"


# -- one ported test, in one variant --------------------------------------------------------------

class BodyFailed(AssertionError):
    """A ported test's body failed; its traceback, as text."""


def call(body: Callable[[], None]) -> None:
    """body(), whose failure keeps none of its tensors alive: pytest keeps a failed test's
    traceback, and the frames' locals (outputs in the tree's pool) would otherwise count as live
    blocks in the next tests."""
    try:
        body()
    except Exception as exc:
        text = "".join(traceback.format_exception(exc))
        traceback.clear_frames(exc.__traceback__)
        raise BodyFailed(f"the test body failed:\n{text}") from None


def run_ported(body: Callable[[], None], variant: str, *, expect: Iterable[str] = ("record",)) -> Any:
    """torch's setUp, `body()`, torch's tearDown checks, in `variant` (see VARIANTS). Observed:
    the trace must have steps, and a step of each kind in `expect`. Returns the trace (None
    unobserved)."""
    import cgviz

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    stack = set_up()
    try:
        if variant == "unobserved":
            call(body)
            refs = tree_refs()
            tear_down(stack)
            assert_dead(refs)
            return None
        level, where = variant.split("-")
        with cgviz.observe_torch(trace=level) as trace:
            call(body)
            refs = tree_refs()
            if where == "inside":
                tear_down(stack)
                assert_dead(refs)  # observing keeps nothing of torch's alive
        if where == "after":
            tear_down(stack)
            assert_dead(refs)
        else:
            still_clean()
            assert_dead(refs)
        assert trace.steps, "the observed run made no step"
        kinds = {step.kind for step in trace.steps}
        missing = [kind for kind in expect if kind not in kinds]
        assert not missing, f"no {missing} step in the trace; its kinds: {sorted(kinds)}"
        return trace
    finally:
        stack.close()
