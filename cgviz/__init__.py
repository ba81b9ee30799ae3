"""cgviz: run CUDA graph trees, record every decision with its reason, and see them.

`import cgviz` stays light: the engine (and torch) load on first use of an attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from cgviz._version import __version__

__all__ = [
    "Tree", "Trace", "Explorer", "graphed", "default_tree", "to_html", "observe_torch", "observe_graphs",
    "graph_batch", "diagnose", "merge", "__version__",
]

if TYPE_CHECKING:
    from cgviz.engine.tree import Tree
    from cgviz.trace.model import Trace
    from cgviz.widgets.explorer import Explorer

_default_tree = None


def default_tree() -> "Tree":
    """The session's default tree (device='auto'), made on first use."""
    global _default_tree
    if _default_tree is None:
        from cgviz.engine.tree import Tree

        _default_tree = Tree(device="auto", name="default")
    return _default_tree


def graphed(fn: Callable | None = None, **options: Any):
    """Wrap `fn` into the default tree: `@cgviz.graphed` or `@cgviz.graphed(static=(1,))`."""
    return default_tree().graphed(fn, **options)


def diagnose(trace_or_tree: Any):
    """What went wrong in a run, where (step indices) and the change that fixes it."""
    from cgviz.trace.diagnose import diagnose_any

    return diagnose_any(trace_or_tree)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext cgviz`: registers the %%cudagraph and %cgviz magics (IPython loads here only)."""
    from cgviz.magics import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str) -> Any:
    if name == "Tree":
        from cgviz.engine.tree import Tree

        return Tree
    if name == "Trace":
        from cgviz.trace.model import Trace

        return Trace
    if name == "Explorer":
        from cgviz.widgets.explorer import Explorer

        return Explorer
    if name == "to_html":
        from cgviz.views.html import to_html

        return to_html
    if name == "observe_torch":
        from cgviz.observe.torch_compile import observe_torch

        return observe_torch
    if name == "observe_graphs":  # every CUDA graph of the process, not only torch.compile's trees
        from cgviz.observe.graphs import observe_graphs

        return observe_graphs
    if name == "graph_batch":  # the batch size a graph serves, the rows of a replay in use
        from cgviz.observe.graph_batch import graph_batch

        return graph_batch
    if name == "merge":  # the traces of a multi-rank job's ranks as one Trace
        from cgviz.trace.ranks import merge

        return merge
    raise AttributeError(f"module 'cgviz' has no attribute {name!r}")
