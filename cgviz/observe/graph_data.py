"""Reading the kernels of each CUDA graph as it is instantiated, through a hook that a caller
registers: the graph's template is still live there (torch 2.14+)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

from cgviz._torch.graphs import graph_dot
from cgviz._torch.kernels import kernel_counts, kernel_counts_from_data


def instantiated_kernels(graph: Any) -> Optional[list]:
    """A graph's kernels ([name, count]) read inside its instantiate hook, or None: from
    get_graph_data() where torch answers (it needs cuda.bindings and a CUDA driver 13.1 or
    later, for cudaGraphNodeGetToolsId), else from the DOT text CUDA writes for the template,
    which the hook still sees (debug_dump; cuda.bindings of any version)."""
    try:
        return kernel_counts_from_data(graph.get_graph_data())
    except Exception:  # no cuda.bindings, or bindings or a driver older than 13.1
        pass
    try:
        dot = graph_dot(graph)
    except Exception:  # no cuda.bindings at all: nothing to read the graph with
        return None
    return kernel_counts(dot) if dot else None


@contextlib.contextmanager
def collected(register: Callable[[Callable[[Any], None]], Any]) -> Iterator[list]:
    """Registers a hook that keeps each graph's kernels (`instantiated_kernels`; a graph read
    neither way adds nothing) and yields the list it fills; the hook's handle is removed after."""
    seen: list = []

    def read_kernels(graph: Any) -> None:
        kernels = instantiated_kernels(graph)
        if kernels is not None:
            seen.append(kernels)

    handle = register(read_kernels)
    try:
        yield seen
    finally:
        handle.remove()
