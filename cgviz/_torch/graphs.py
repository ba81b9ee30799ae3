"""A CUDA graph that keeps what it captured, and the DOT text CUDA writes for it (public torch
API: `CUDAGraph(keep_graph=True)`, `debug_dump`); `kernels.py` reads the text.

Not `enable_debug_mode()`: up to torch 2.13 it sets one flag for the whole process, and every
CUDA graph captured after it, whoever made it, keeps its template in memory until it dies."""

from __future__ import annotations

import functools
from typing import Any


def inspectable_graph() -> Any:
    """A CUDAGraph that keeps its cudaGraph_t after instantiation (`keep_graph=True`, this graph
    alone), so that `graph_dot` can print it."""
    return inspectable_graph_class()()


@functools.lru_cache(maxsize=None)
def inspectable_graph_class() -> type:
    """torch's CUDAGraph, made to keep its graph (see `inspectable_graph`): a subclass, so that
    it can stand in for torch.cuda.CUDAGraph where torch's own code makes a graph."""
    from torch.cuda.graphs import CUDAGraph

    class InspectableGraph(CUDAGraph):
        # torch's graph takes keep_graph twice: in __new__ (its Python class) and in __init__
        # (the C++ class); a call with no arguments must pass True to both
        def __new__(cls, keep_graph: bool = False) -> Any:
            return super().__new__(cls, True)

        def __init__(self, keep_graph: bool = False) -> None:
            super().__init__(True)

    return InspectableGraph


def graph_dot(graph: Any) -> str:
    """The DOT text CUDA writes for a captured graph (`cudaGraphDebugDotPrint`), '' if none."""
    import os
    import tempfile
    import warnings

    fd, path = tempfile.mkstemp(suffix=".dot")
    os.close(fd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns "DEBUG: calling debug_dump()" on each call
            graph.debug_dump(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    finally:
        os.unlink(path)
