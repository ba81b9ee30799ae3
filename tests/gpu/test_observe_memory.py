"""cgviz.observe_torch keeps nothing of torch's alive, leaves torch as it found it, and changes no
result.

- Inside an observation, torch._dynamo.reset() and the user's cleanup free torch's tree manager
  and every cudagraph segment, as they do unobserved (compared in the same test).
- A long observation over models compiled and reset one after another does not accumulate
  device memory, and the managers it saw are garbage after each reset.
- Leaving the block (normally, by an exception, nested observations) puts back torch's own
  methods and functions: compared by identity with what they were before.
- An observed program computes the same tensors as the same program unobserved (torch.equal).

Skipped without CUDA (tests/gpu/conftest.py).
"""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch

import cgviz
from torch_suite import all_live_block_count, get_all_cudagraph_segments

DEV = "cuda"
pytestmark = pytest.mark.usefixtures("fresh_dynamo")
SKIP_LOGGER = "log_cudagraph_skip_and_bump_counter"
LEVELS = [("events", False), ("events", True), ("full", False), ("full", True)]
# what torch leaves after torch._dynamo.reset() and the user's cleanup
CLEAN = {"tree manager is None": True, "manager collected": True, "cudagraph segments": 0,
         "live cudagraph blocks": 0}


def reproducible():
    """One kernel configuration per kernel (no timing-based choice between configurations): the
    same program compiles to the same kernels in both runs of a comparison. torch's own CUDA graph
    tree tests set this too."""
    return torch._inductor.config.patch({"triton.autotune_pointwise": False})


def device_index() -> int:
    return torch.cuda.current_device()  # DEV = "cuda": the current device


def tree_manager(index: int):
    """torch's tree manager of the device, or None; never makes one."""
    from torch._inductor import cudagraph_trees as trees

    try:
        return trees.get_manager(index, create_if_none_exists=False)
    except TypeError:  # a torch without the keyword: what torch's own tests read
        return trees.get_container(index).tree_manager


def mlp(seed: int, width: int = 64) -> torch.nn.Module:
    """No bias: no reduction is compiled (a Linear's bias gradient would be one); matmuls (cuBLAS)
    and pointwise kernels compute the same bits on every run."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(32, width, bias=False), torch.nn.ReLU(), torch.nn.Linear(width, 8, bias=False),
    ).to(DEV)


def workload(held: dict, seed: int = 0) -> tuple[list, dict]:
    """A model compiled with mode="reduce-overhead": training steps with backward, then inference
    under no_grad (two batch sizes). The user's objects go into `held` (the last output of each
    kind too, as a user's loop leaves it); returns clones of every result and weak references to
    the tree manager and the model."""
    index = device_index()
    model = held["model"] = mlp(seed)
    compiled = held["compiled"] = torch.compile(model, mode="reduce-overhead")
    opt = held["opt"] = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator(device=DEV).manual_seed(1000 + seed)
    x = held["x"] = torch.randn(16, 32, device=DEV, generator=gen)
    results = []
    for _ in range(4):
        opt.zero_grad(set_to_none=True)  # no .grad from the last backward graph kept across steps
        out = held["train_out"] = compiled(x)
        loss = out.sum()
        loss.backward()
        opt.step()
        results.append(loss.detach().clone())
    with torch.no_grad():
        for n in (16, 8, 16, 8, 16):
            y = held["infer_out"] = compiled(x[:n])
            results.append(y.clone())
    results.extend(p.detach().clone() for p in model.parameters())
    manager = tree_manager(index)
    assert manager is not None, "the compiled model ran without torch's CUDA graph trees"
    refs = {"manager": weakref.ref(manager), "model": weakref.ref(model)}
    return results, refs


# The user's cleanup, in either order: "reset-first" resets dynamo, then drops the model and
# tensors (torch's tree manager is still in use when torch shuts it down); "delete-first" drops
# them first, as a function going out of scope does (the tree manager's last compiled function
# dies inside torch._dynamo.reset(), which then finds no manager to shut down: torch's own
# tests' tearDown meets this order).
ORDERS = ("reset-first", "delete-first")


def cube(x):
    return x * x * x


def function_workload(held: dict, seed: int = 0) -> tuple[list, dict]:
    """As torch's test_run_simple: a function compiled with mode="reduce-overhead", called twice
    (a warmup and a recording, no replay), under no_grad."""
    index = device_index()
    compiled = held["compiled"] = torch.compile(cube, mode="reduce-overhead")
    x = held["x"] = torch.full([4, 4], float(seed + 1), device=DEV)
    with torch.no_grad():
        results = [compiled(x).clone() for _ in range(2)]
    manager = tree_manager(index)
    assert manager is not None, "the compiled function ran without torch's CUDA graph trees"
    refs = {"manager": weakref.ref(manager), "model": weakref.ref(compiled)}
    return results, refs


WORKLOADS = {"model": workload, "function": function_workload}


def cleanup(held: dict, order: str = "reset-first") -> None:
    """The user's cleanup: reset dynamo and drop the model and tensors (in `order`), free the
    cached blocks."""
    if order == "reset-first":
        torch._dynamo.reset()
        held.clear()
    else:
        held.clear()
        gc.collect()
        torch._dynamo.reset()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def leftovers(refs: dict) -> dict:
    """What torch still holds after `cleanup` (CLEAN when nothing)."""
    gc.collect()
    return {
        "tree manager is None": tree_manager(device_index()) is None,
        "manager collected": refs["manager"]() is None,
        "cudagraph segments": len(get_all_cudagraph_segments()),
        "live cudagraph blocks": all_live_block_count(),
    }


def cycle(seed: int = 0, order: str = "reset-first", kind: str = "model") -> tuple[list, dict, dict]:
    """A workload (WORKLOADS[kind]) + cleanup: (results, leftovers, refs)."""
    held: dict = {}
    results, refs = WORKLOADS[kind](held, seed)
    cleanup(held, order)
    return results, leftovers(refs), refs


# -- a reset inside the observation frees what it frees unobserved ---------------------------------

@pytest.mark.parametrize("kind", list(WORKLOADS))
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level,kernels", LEVELS)
def test_reset_inside_observation_frees_like_unobserved(level, kernels, order, kind):
    with reproducible():
        _, unobserved, unobserved_refs = cycle(order=order, kind=kind)
        with cgviz.observe_torch(trace=level, kernels=kernels) as trace:
            _, observed, observed_refs = cycle(order=order, kind=kind)
            model_gone = observed_refs["model"]() is None
    assert unobserved == CLEAN, f"torch itself leaves {unobserved} (not an observation effect)"
    assert observed == unobserved, f"inside observe_torch({level!r}, kernels={kernels}): {observed}"
    assert model_gone == (unobserved_refs["model"]() is None), "the observation kept the model alive"
    kinds = {s.kind for s in trace.steps}
    assert {"warmup", "record"} <= kinds, sorted(kinds)
    functions = {s.function for s in trace.steps if s.kind == "record"}
    for mode in ("(forward)", "(backward)", "(inference)") if kind == "model" else ("(inference)",):
        assert any(mode in f for f in functions), (mode, functions)


# -- a long observation over several models -----------------------------------------------------------

@pytest.mark.parametrize("kind", list(WORKLOADS))
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("level", ["events", "full"])
def test_long_observation_does_not_accumulate(level, order, kind):
    models = 5
    with reproducible():
        # what torch makes once per process and keeps (cuBLAS handles and workspaces, ...) is made
        # before the measure, by the same cycle unobserved, twice
        for seed in range(2):
            left = cycle(seed, order, kind)[1]
            assert left == CLEAN, f"torch itself leaves {left} (not an observation effect)"
        reserved_before = torch.cuda.memory_reserved()
        allocated_before = torch.cuda.memory_allocated()
        reserved, allocated, lefts, refs, alive = [], [], [], [], []
        with cgviz.observe_torch(trace=level) as trace:
            for seed in range(models):
                left, cycle_refs = cycle(seed, order, kind)[1:]  # the results (clones) are not kept
                lefts.append(left)
                refs.append(cycle_refs["manager"])
                # every manager seen so far, not only the last one
                alive.append([i for i, ref in enumerate(refs) if ref() is not None])
                reserved.append(torch.cuda.memory_reserved())
                allocated.append(torch.cuda.memory_allocated())
    assert sum(s.kind == "record" for s in trace.steps) >= models
    # not growing with the number of models
    assert reserved[-1] <= reserved[0] and allocated[-1] <= allocated[0], (reserved, allocated)
    # nor more than before the observation: nothing of the models is kept, not even the last
    assert max(reserved) <= reserved_before, (reserved_before, reserved)
    assert max(allocated) <= allocated_before, (allocated_before, allocated)
    assert lefts == [CLEAN] * models, f"inside the observation, after each model's cleanup: {lefts}"
    assert alive == [[]] * models, f"tree managers (by model) alive after each model's cleanup: {alive}"


# -- torch's own methods again after the block ---------------------------------------------------------

def scaled(x, scale):
    return (x * 2).sum(0) + scale.to(x.device)


def first_fn(x):
    return x * 3 + 1


def second_fn(x):
    return (x - 2) * x


def third_fn(x):
    return x.relu() + 5


def fourth_fn(x):
    return x.sin() * 2


def surface() -> dict:
    """Everything observe_torch may replace, by (owner, name): the class dicts of torch's tree
    manager and compiled graph (hooked once, at the first observation),
    torch.cuda.CUDAGraph, and the skip logger in every torch._inductor module that has one."""
    import torch._inductor.compile_fx  # noqa: F401
    from torch._inductor import cudagraph_trees, output_code

    out = {}
    for cls in (cudagraph_trees.CUDAGraphTreeManager, output_code.CompiledFxGraph):
        for name, value in vars(cls).items():
            if name != "__slotnames__":  # copyreg's cache, set when torch first pickles one (its FX graph cache)
                out[(cls.__qualname__, name)] = value
    out[("torch.cuda", "CUDAGraph")] = torch.cuda.CUDAGraph
    out[("torch.cuda.graphs", "CUDAGraph")] = torch.cuda.graphs.CUDAGraph
    for name, module in list(sys.modules.items()):
        if name.startswith("torch._inductor") and module is not None:
            fn = getattr(module, "__dict__", {}).get(SKIP_LOGGER)
            if fn is not None:
                out[(name, SKIP_LOGGER)] = fn
    return out


def changed(before: dict, after: dict) -> list:
    """Keys whose value is not the same object. A torch._inductor module imported meanwhile must
    hold torch's own skip logger (the one cudagraph_utils had before)."""
    missing = object()
    own_logger = before[("torch._inductor.cudagraph_utils", SKIP_LOGGER)]
    out = []
    for key in sorted(before.keys() | after.keys(), key=repr):
        expected = before.get(key, own_logger if key[1] == SKIP_LOGGER else missing)
        if after.get(key, missing) is not expected:
            out.append(key)
    return out


def managers_of_another_class() -> list:
    """The managers torch holds whose class is not torch's own (observing never switches it)."""
    from torch._inductor import cudagraph_trees as trees

    table = trees.get_obj(trees.local, "tree_manager_containers")
    held = [container.tree_manager for container in table.values() if container.tree_manager is not None]
    assert held, "torch holds no tree manager"
    return [m for m in held if type(m) is not trees.CUDAGraphTreeManager]


def exercise():
    """Calls that go through every wrapped path: a training model (forward, backward, replays),
    a function whose CUDA graphs torch skips (a CPU input: the skip logger, post_compile)."""
    model = mlp(0)
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(16, 32, device=DEV)
    for _ in range(3):
        for p in model.parameters():
            p.grad = None
        compiled(x).sum().backward()
    skipped = torch.compile(scaled, mode="reduce-overhead")
    patch = {"graph_partition": False} if hasattr(torch._inductor.config, "graph_partition") else {}
    with torch._inductor.config.patch(patch), torch.no_grad():
        for _ in range(3):
            skipped(x, torch.ones(32))


def call3(fn, x):
    for _ in range(3):
        fn(x)


def warm_surface() -> dict:
    """torch's lazily imported modules are imported, and the compile-time hooks that stay once
    in are in, before `before` is taken."""
    with cgviz.observe_torch(trace="events"):
        pass
    exercise()
    torch._dynamo.reset()
    return surface()


@pytest.mark.parametrize("level,kernels", LEVELS)
def test_normal_exit_restores_torch(level, kernels):
    before = warm_surface()
    held = torch.compile(first_fn, mode="reduce-overhead")
    with cgviz.observe_torch(trace=level, kernels=kernels) as trace:
        exercise()
        call3(held, torch.randn(8, device=DEV))
        assert not managers_of_another_class()
        assert not [key for key in changed(before, surface()) if key[1] != SKIP_LOGGER], "a class of torch's changed"
    after = surface()
    assert not managers_of_another_class()
    assert changed(before, after) == []
    assert any(s.kind == "record" for s in trace.steps)
    torch._dynamo.reset()
    assert changed(before, surface()) == []


@pytest.mark.parametrize("error", ["user", "overwritten"])
@pytest.mark.parametrize("level", ["events", "full"])
def test_exception_exit_restores_torch(level, error):
    before = warm_surface()

    def cube(x):
        return x * x * x

    compiled = torch.compile(cube, mode="reduce-overhead")
    expected = ValueError if error == "user" else RuntimeError
    with pytest.raises(expected):
        with cgviz.observe_torch(trace=level) as trace:
            exercise()
            if error == "user":
                raise ValueError("the user's error")
            x = torch.rand(4, device=DEV)
            out = compiled(x)
            compiled(x)  # a new generation overwrites `out`
            print(out + out)  # torch raises: overwritten by a subsequent run
    assert changed(before, surface()) == []
    assert trace.steps
    if error == "overwritten":
        assert trace.steps[-1].kind == "error"


def test_nested_observations():
    before = warm_surface()
    x = torch.randn(8, device=DEV)
    fns = {f.__name__: torch.compile(f, mode="reduce-overhead") for f in (first_fn, second_fn, third_fn, fourth_fn)}
    with torch.no_grad():
        with cgviz.observe_torch() as outer:
            call3(fns["first_fn"], x)
            with cgviz.observe_torch(trace="events") as inner:
                call3(fns["second_fn"], x)
            # the inner exit leaves the outer's observing in place
            call3(fns["third_fn"], x)
            with pytest.raises(ValueError):
                with cgviz.observe_torch(trace="events", kernels=True) as failing:
                    call3(fns["fourth_fn"], x)
                    raise ValueError("the user's error")
            torch.compiler.cudagraph_mark_step_begin()
            call3(fns["third_fn"], x)  # replays after the failing inner exit: still seen
        # the outer exit restores torch's own
        assert changed(before, surface()) == [] and not managers_of_another_class()

    def recorded(trace, name):
        return any(name in (s.function or "") for s in trace.steps if s.kind == "record")

    for name in ("first_fn", "second_fn", "third_fn", "fourth_fn"):
        assert recorded(outer, name), (name, [(s.kind, s.function) for s in outer.steps])
    assert recorded(inner, "second_fn")
    assert not any(recorded(inner, name) for name in ("first_fn", "third_fn", "fourth_fn"))
    assert recorded(failing, "fourth_fn") and not recorded(failing, "third_fn")
    assert any(s.kind == "execute" and "third_fn" in (s.function or "") for s in outer.steps)


# -- the same results observed and unobserved ---------------------------------------------------------

@pytest.mark.parametrize("level,kernels", LEVELS)
def test_observed_results_equal_unobserved(level, kernels):
    with reproducible():
        unobserved, left, _ = cycle(seed=3)
        assert left == CLEAN
        with cgviz.observe_torch(trace=level, kernels=kernels) as trace:
            observed, _, _ = cycle(seed=3)
    assert len(observed) == len(unobserved)
    for i, (a, b) in enumerate(zip(observed, unobserved)):
        assert a.shape == b.shape and a.dtype == b.dtype, i
        assert torch.equal(a, b), f"result {i} differs observed (max |diff| {(a - b).abs().max().item()})"
    assert any(s.kind == "execute" for s in trace.steps), "no replay: the comparison saw no CUDA graph run"
