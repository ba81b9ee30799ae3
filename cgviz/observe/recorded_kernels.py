"""The two ways the kernels of a CUDA graph that torch's tree records are read, while it records.

torch 2.14+ has a public hook that sees each graph as it is instantiated: the kernels are read
from it, and torch makes its graphs as it always does. On older torch, the graph torch makes is
of a class that keeps its cudaGraph_t, so that the kernels can be read after the capture. Both
use only public names of torch; the release that has the hook is `_torch_layout.SINCE`'s.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch

from cgviz.observe import _torch_layout as layout
from cgviz.observe import graph_data


@contextlib.contextmanager
def instantiated_graph_data() -> Any:
    """torch 2.14+: while a node records, a public global hook (torch.cuda.graphs.
    register_graph_instantiate_hook) sees each CUDA graph as torch instantiates it, with its
    template still live, and reads its kernels there (`graph_data.graph_kernels`): they
    are read without changing how torch makes its graphs. Yields the list of each graph's
    kernels, or None where this torch has no such hook (then `graphs_kept` is the way). A graph
    read neither way (no cuda.bindings) adds nothing."""
    graphs = sys.modules.get("torch.cuda.graphs")
    register = getattr(graphs, "register_graph_instantiate_hook", None) if layout.has_since(
        "graphs.register_graph_instantiate_hook") else None
    if register is None:
        yield None
        return
    with graph_data.collected(register) as seen:
        yield seen


@contextlib.contextmanager
def graphs_kept() -> Any:
    """While torch's manager records a node: the CUDA graph it makes (``torch.cuda.CUDAGraph()``)
    keeps its cudaGraph_t, so that its kernels can be read after the capture
    (`cgviz._torch.graphs.graph_dot`). torch instantiates such a graph at its first replay,
    which torch's recording does at once, so what the node runs is unchanged."""
    from cgviz._torch.graphs import inspectable_graph_class

    kept, saved = inspectable_graph_class(), torch.cuda.CUDAGraph
    torch.cuda.CUDAGraph = kept
    try:
        yield
    finally:
        torch.cuda.CUDAGraph = saved
