"""Collecting each CUDA graph's get_graph_data() as it is instantiated, through a hook that a
caller registers: its kernels are read while the graph's template is still live."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from typing import Any, Callable, Iterator


@functools.cache
def has_cuda_bindings() -> bool:
    """Is NVIDIA's cuda.bindings package installed (get_graph_data needs it)? Asked once."""
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def collected(register: Callable[[Callable[[Any], None]], Any]) -> Iterator[list]:
    """Registers a hook that keeps each graph's get_graph_data() (a graph whose data cannot be
    read adds nothing) and yields the list it fills; the hook's handle is removed after."""
    seen: list = []

    def read_data(graph: Any) -> None:
        try:
            seen.append(graph.get_graph_data())
        except Exception:
            pass

    handle = register(read_data)
    try:
        yield seen
    finally:
        handle.remove()
