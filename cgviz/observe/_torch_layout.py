"""Reading torch's tree manager: the one module that knows its private attributes.

Private attributes of `torch._inductor.cudagraph_trees` move between torch releases. Every
read goes through `read()`, which on a missing attribute says which one, once, and returns a
default, so an observed program keeps running on a torch whose layout is new to cgviz.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

_MISSING_REPORTED: set[str] = set()
_SENTINEL = object()


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
    kind = "warmup" if is_warmup(node) else "graph"
    return f"torch {kind} id {getattr(getattr(node, 'id', None), 'id', '?')}"


def is_warmup(node: Any) -> bool:
    return type(node).__name__ == "CUDAWarmupNode"


def pool_of(manager: Any) -> Any:
    return read(manager, "cuda_graphs_thread_pool")
