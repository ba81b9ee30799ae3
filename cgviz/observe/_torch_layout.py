"""Reading torch's tree manager: the one module that knows its private attributes.

Private attributes of `torch._inductor.cudagraph_trees` move between torch releases. Every
read goes through `read()`, which on a missing attribute says which one, once, and returns a
default, so an observed program keeps running on a torch whose layout is new to cgviz.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Any, Callable

import torch

_MISSING_REPORTED: set[str] = set()
_SENTINEL = object()

# -- every private name of torch that cgviz.observe relies on ------------------------------------
# tests/test_torch_layout.py checks each one against the installed torch. An entry that is a
# tuple of names lists alternatives (one of them is enough; the first one present is used).
TREES_MODULE = "torch._inductor.cudagraph_trees"
MANAGER_CLASS = "CUDAGraphTreeManager"
# The manager's method that every call of a compiled function goes through, looked up at call
# time (torch 2.2+; older torch has only run()).
RUN_METHODS = ("_run", "run")
# The manager's methods that the observer wraps, by the role the wrapper plays.
HOOKED_METHODS = {
    "warmup": "run_eager",
    "record": "record_function",
    "execute": "execute_node",
    "checkpoint": "apply_checkpoint_execution_state_in_allocator",
    "path_clear": "clear_current_path_state_and_set_to_none",
    "end_warmup": "try_end_curr_warmup",
    "dealloc": "dealloc_current_path_weakrefs",
    "warn": "check_warn_on_unable_to_start_executing",
}
# Members of the module's classes that are read or called (instance attributes included).
CLASS_MEMBERS: dict[str, tuple] = {
    MANAGER_CLASS: (
        RUN_METHODS, *HOOKED_METHODS.values(), "get_func_name", "can_start_new_generation",
        "current_node", "current_gen", "running_forwards_with_pending_backwards", "in_recording",
        "roots", "path_state", "id_to_mode", "id_to_compile_id", "warned_functions",
        "cuda_graphs_thread_pool", "device_index",
    ),
    "CUDAGraphNode": ("id", "wrapped_function", "parent", "children", "outputs_weakrefs", "outputs_metadata",
                      "check_invariants"),
    "CUDAWarmupNode": ("id", "wrapped_function", "parent", "outputs_weakrefs", "already_warm"),
    "GraphID": ("id",),
    "FunctionID": ("id",),
    "WrappedFunction": ("id",),
    "MarkStepBox": ("mark_step_counter",),
    "GenerationTracker": ("generation",),
}
WARMUP_NODE_CLASS = "CUDAWarmupNode"
# Compile-time "skipping cudagraphs due to ..." goes through this function; it is wrapped in
# each of these modules that has it (they import it by name).
SKIP_LOGGER = "log_cudagraph_skip_and_bump_counter"
SKIP_LOGGER_MODULES = (
    "torch._inductor.cudagraph_utils", "torch._inductor.cudagraph_trees",
    "torch._inductor.output_code", "torch._inductor.compile_fx",
)


def manager_class() -> Any:
    """torch's CUDAGraphTreeManager class (importing its module)."""
    from torch._inductor import cudagraph_trees

    return getattr(cudagraph_trees, MANAGER_CLASS)


def run_method(manager_cls: Any) -> str:
    """The first of RUN_METHODS that this torch's manager has."""
    return next((name for name in RUN_METHODS if hasattr(manager_cls, name)), RUN_METHODS[-1])


def read(obj: Any, name: str, default: Any = None) -> Any:
    """obj.name, or `default` with a one-time warning naming the missing attribute."""
    value = getattr(obj, name, _SENTINEL)
    if value is _SENTINEL:
        key = f"{type(obj).__name__}.{name}"
        if key not in _MISSING_REPORTED:
            _MISSING_REPORTED.add(key)
            warnings.warn(
                f"cgviz.observe_torch: torch {torch.__version__} has no {key}; "
                "that part of the trace is left out",
                RuntimeWarning,
                stacklevel=3,
            )
        return default
    return value


def function_label(manager: Any, function_id: Any) -> tuple[str, str]:
    """(name, mode) of a function of the manager: 'forward', 'backward' or 'inference'."""
    name = None
    getter = getattr(manager, "get_func_name", None)
    if getter is not None:
        try:
            name = getter(function_id)
        except Exception:
            name = None
    if not name:
        name = f"function {getattr(function_id, 'id', function_id)}"
    modes = read(manager, "id_to_mode", {}) or {}
    mode = getattr(modes.get(function_id), "name", "")
    return name, mode.lower()


def compile_id(manager: Any, function_id: Any) -> str:
    ids = read(manager, "id_to_compile_id", {}) or {}
    value = ids.get(function_id)
    return "" if value is None else str(value)


def node_function(node: Any) -> Any:
    wrapped = read(node, "wrapped_function")
    return getattr(wrapped, "id", None)


def node_parent(node: Any) -> Any:
    return read(node, "parent")


def node_children(node: Any) -> list:
    children = getattr(node, "children", None) or {}
    return [c for nodes in children.values() for c in nodes]


def roots(manager: Any) -> list:
    by_function = read(manager, "roots", {}) or {}
    return [n for nodes in by_function.values() for n in nodes]


def output_refs(node: Any) -> list:
    return list(read(node, "outputs_weakrefs", []) or [])


def output_metadata(node: Any) -> list:
    """Per output: a dict with size/dtype/nbytes/data_ptr, or None (warmup nodes keep none)."""
    return list(getattr(node, "outputs_metadata", None) or [])


def is_live(ref: Any) -> bool:
    return ref is not None and ref() is not None


def torch_node_id(node: Any) -> str:
    """How torch itself names the node, for its signature (see torch_id_words)."""
    return torch_id_words(is_warmup(node), getattr(getattr(node, "id", None), "id", None))


def torch_id_words(warmup: bool, number: Any) -> str:
    """torch's id of a node in plain words.

    Recorded graphs get ids 0, 1, 2, ... (GraphID). A warmup node runs the function eagerly
    and records no CUDA graph, so it has no graph id: torch numbers warmups on a counter of
    their own, -1, -2, ..., which here reads "torch warmup run 1 (eager, no CUDA graph)".
    """
    if not isinstance(number, int):
        return "torch warmup run (eager, no CUDA graph)" if warmup else "torch graph (id unknown)"
    if warmup:
        return f"torch warmup run {abs(number)} (eager, no CUDA graph)"
    return f"torch graph id {number}"


def is_warmup(node: Any) -> bool:
    return type(node).__name__ == WARMUP_NODE_CLASS


def pool_of(manager: Any) -> Any:
    return read(manager, "cuda_graphs_thread_pool")


_TREES: Any = None


def _trees_module() -> Any:
    global _TREES
    _TREES = sys.modules.get(TREES_MODULE)
    return _TREES


def starts_new_generation(manager: Any) -> bool:
    """Would torch's manager begin a new generation now (its can_start_new_generation())?

    Read straight from the generation counters, as torch 2.4 to 2.13 compute it: this runs
    at every path end of an observed loop, where torch's own four method calls would be
    most of the observer's cost. A layout without those counters asks torch instead.
    """
    trees = _TREES or _trees_module()
    try:
        counter = trees.MarkStepBox.mark_step_counter
        generation = counter if counter != 0 else trees.GenerationTracker.generation
        if manager.current_gen == generation:
            return False
        return counter != 0 or not manager.running_forwards_with_pending_backwards
    except AttributeError:
        pass
    check = getattr(manager, "can_start_new_generation", None)
    if check is None:
        read(manager, "can_start_new_generation")  # says once that this torch lacks it
        return False
    try:
        return bool(check())
    except Exception:
        return False


def replay_mismatches(manager: Any, parent: Any, new_inputs: list, function_id: Any) -> list[tuple[Any, str]]:
    """Why each recorded graph of this function under `parent` (a root when None) can't replay.

    Asks the nodes' check_invariants again, on a copy of the inputs (a passing check clears
    the managed inputs it is given), when torch is about to record: off the replay path.
    """
    siblings = read(manager, "roots", {}) if parent is None else getattr(parent, "children", None)
    found = []
    for child in (siblings or {}).get(function_id, ()):
        try:
            result = child.check_invariants(list(new_inputs))
        except Exception:
            continue
        status, describe = result if isinstance(result, tuple) else (result, None)
        why = getattr(status, "name", "SUCCESS")
        if why == "SUCCESS":
            continue
        if callable(describe):
            with contextlib.suppress(Exception):
                why = describe() or why
        found.append((child, why))
    return found


def path_clear_hook(original: Callable, active: list, on_generation: Callable, on_path_end: Callable) -> Callable:
    """The wrapper of the manager's clear_current_path_state_and_set_to_none().

    Torch calls it when an executing or recording path ends: for a new generation (a new
    invocation or a mark_step) or because all the path's outputs are dead. In an observed
    loop this runs on every call, so it reads the generation counters inline (as
    `starts_new_generation` does) rather than through another call.
    """
    trees = _TREES or _trees_module()
    box, tracker = getattr(trees, "MarkStepBox", None), getattr(trees, "GenerationTracker", None)
    inline = hasattr(box, "mark_step_counter") and hasattr(tracker, "generation")

    def clear_current_path_state_and_set_to_none(manager: Any) -> Any:
        if not active:
            return original(manager)
        if inline:
            counter = box.mark_step_counter
            try:
                new_generation = manager.current_gen != (counter or tracker.generation) and (
                    counter != 0 or not manager.running_forwards_with_pending_backwards)
            except AttributeError:
                new_generation = starts_new_generation(manager)
        else:
            new_generation = starts_new_generation(manager)
        if new_generation:
            out = original(manager)
            for observer in active:
                on_generation(observer, manager)
            return out
        before = manager.current_node
        out = original(manager)
        for observer in active:
            on_path_end(observer, manager, before)
        return out

    return clear_current_path_state_and_set_to_none
