"""Reading what a CUDA graph holds (its kernels), and each graph's as it is instantiated, through
a hook that a caller registers: the graph's template is still live there (torch 2.14+)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

from cgviz._torch.graphs import graph_dot
from cgviz._torch.kernels import kernel_counts, kernel_counts_from_data


def graph_kernels(graph: Any) -> Optional[list]:
    """What a CUDA graph holds ([name, count]), or None when there is nothing to read: from
    torch's get_graph_data() where it answers (2.13+; it needs cuda.bindings and a CUDA driver
    13.1 or later, for cudaGraphNodeGetToolsId), else from the DOT text CUDA writes for the
    captured graph (debug_dump: on 2.14+ with cuda.bindings of any version, and only while the
    graph's template is live: kept, or inside a capture-end or instantiate hook)."""
    if graph is None:
        return None
    get_data = getattr(graph, "get_graph_data", None)
    if get_data is not None:
        try:
            return kernel_counts_from_data(get_data())
        except Exception:  # no cuda.bindings, bindings or a driver older than 13.1, or no graph kept
            pass
    try:
        dot = graph_dot(graph)
    except Exception:  # the template is gone, or nothing to read it with
        return None
    return kernel_counts(dot) if dot else None


@contextlib.contextmanager
def collected(register: Callable[[Callable[[Any], None]], Any]) -> Iterator[list]:
    """Registers a hook that keeps each graph's kernels (`graph_kernels`, read while the template
    is live; a graph read neither way adds nothing) and yields the list it fills; the hook's
    handle is removed after."""
    seen: list = []

    def read_kernels(graph: Any) -> None:
        kernels = graph_kernels(graph)
        if kernels is not None:
            seen.append(kernels)

    handle = register(read_kernels)
    try:
        yield seen
    finally:
        handle.remove()
