"""Observe every CUDA graph of the process into a Trace: the session.

`torch.cuda.graph`, `make_graphed_callables`, `CUDAGraph.capture_begin` called directly, a
serving engine's graph per batch size: each capture, replay and destruction becomes a step
(`graph_observer.py`), and each graph a `GraphView` of `trace.graphs`. torch.compile's trees
make their graphs the same way; observed together (`observe_torch(graphs=True)`), those are
linked to their tree node instead of shown twice.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from cgviz.observe import _graph_hooks
from cgviz.observe.graph_observer import GraphObserver
from cgviz.observe.session import leave, save, save_target
from cgviz.trace.model import Trace

__all__ = ["observe_graphs", "start_observing_graphs", "stop_observing_graphs", "GraphObserver"]


def start_observing_graphs(trace: str = "full", kernels: Optional[bool] = None, timed: bool = False,
                           tree=None) -> GraphObserver:
    """Begin recording CUDA graphs; returns the observer (its .trace grows). With `tree` (a
    TorchObserver), into that observer's trace, linking the trees' own graphs to their nodes."""
    observer = GraphObserver(trace, kernels, timed, tree)
    route = _graph_hooks.install() if not _graph_hooks.ACTIVE else _graph_hooks.route()
    observer.trace.meta["graph_events_from"] = route
    observer.kernels_readable = route == "hooks"
    _graph_hooks.ACTIVE.append(observer)
    if tree is not None:
        tree.graph_sink = observer
    return observer


def stop_observing_graphs(observer: GraphObserver) -> Trace:
    """Stop one observer; the hooks are removed when none is left."""
    return leave(observer, _graph_hooks.ACTIVE, _graph_hooks.uninstall)


@contextlib.contextmanager
def observe_graphs(trace: str = "full", path: str | os.PathLike | None = None, *,
                   kernels: Optional[bool] = None, timed: bool = False) -> Iterator[Trace]:
    """`with cgviz.observe_graphs() as trace:` — every CUDA graph captured or replayed inside
    the block becomes part of the Trace: its capture (the user's line, the stream, the pool,
    the memory it took, at "full" its kernels and its pool's size), each replay (folded as
    tree replays are), its destruction. Replays are made into steps in batches: inside the
    block the newest few thousand may not show yet; after it, all do.

    `timed`: each replay is timed with two CUDA events on its stream (the median goes into its
    graph's view); the events are read when done, and waited for when the block ends.
    `kernels` (default: on at trace "full"): each graph's kernels are counted where torch shows
    the captured graph to its capture-end hook (torch 2.14+, with NVIDIA's cuda.bindings); on
    older torch they are not read, so that no graph is made differently. Tell batch sizes and padding with `cgviz.graph_batch`.
    With `path`, the trace is saved there when the block ends (`{rank}` filled in)."""
    target = save_target(path)
    observer = start_observing_graphs(trace, kernels, timed)
    try:
        yield observer.trace
    finally:
        stop_observing_graphs(observer)
        save(observer.trace, target)
