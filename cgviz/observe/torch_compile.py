"""Observe torch.compile's own CUDA graph trees into a Trace: the session.

While an observer is active, the methods of torch's tree managers
(`torch._inductor.cudagraph_trees.CUDAGraphTreeManager`) that warm up, record, replay, end
paths, start generations and restore allocator checkpoints tell it of each call (`_hooks.py`:
wrapped on torch's class at the first observation of the process, they pass each call straight
on while nothing observes): each call still does exactly what torch does, and also becomes a
Step (`observer.py`). torch's skip messages ("skipping cudagraphs due to ...") are joined to the
calls they affect. Nothing here creates a manager
or synchronises the device, except the pool snapshot at trace level "full"; nothing of torch's
is held strongly, so a reset inside an observation frees torch's pool as without one.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from cgviz.observe import _hooks
from cgviz.observe.naming import OVERWRITTEN, compiled_graph_name
from cgviz.observe.observer import TorchObserver
from cgviz.observe.session import leave, save, save_target
from cgviz.trace.model import Trace
from cgviz.trace.paths import portable_path, portable_paths

__all__ = ["observe_torch", "start_observing", "stop_observing", "TorchObserver", "compiled_graph_name",
           "portable_path", "portable_paths"]


def start_observing(trace: str = "full", kernels: Optional[bool] = None) -> TorchObserver:
    """Begin recording torch.compile's CUDA graph trees; returns the observer (its .trace grows)."""
    observer = TorchObserver(trace, kernels)
    import torch._inductor.compile_fx  # noqa: F401  (so the skip logger's importers are patched too)

    if not _hooks.ACTIVE:
        _hooks.install()
    _hooks.ACTIVE.append(observer)
    observer.hooked = _hooks.hooked_roles()
    return observer


def stop_observing(observer: TorchObserver) -> Trace:
    """Stop one observer; what observing put in place for this observation alone (the skip
    logger, eager graphs' callables) is put back when none is left."""
    return leave(observer, _hooks.ACTIVE, _hooks.uninstall)


@contextlib.contextmanager
def observe_torch(trace: str = "full", path: str | os.PathLike | None = None, *,
                  kernels: Optional[bool] = None, graphs: bool = False, timed: bool = False) -> Iterator[Trace]:
    """`with cgviz.observe_torch() as trace:` — torch.compile(mode="reduce-overhead") activity
    inside the block becomes the Trace's steps (replays are made into steps in batches: inside
    the block the newest few thousand may not show yet; after it, all do). An "overwritten by a subsequent run" error
    leaving the block is recorded as an error step, then raised as usual.

    `trace`: "full" times each decision and snapshots the tree where it changed, reading every
    output's liveness at each decision (on a resnet18 training loop, about a tenth of a step's
    time); "events" keeps the decisions alone (about 1 % of that step): use it to keep observing a
    long run, "full" to look at a few steps.

    With `path`, the trace is saved there when the block ends (also when it raises). On each rank
    of a torch.distributed job, `{rank}` and `{world_size}` in it are filled in and the trace's
    meta names the rank (`path="run-{rank}.cgtrace.json"`; see cgviz.trace.ranks.rank_path): a
    placeholder that cannot be filled, or a path that cannot be written, is refused here, before
    anything runs.

    `kernels` (default: on at trace "full"): each graph torch records keeps its CUDA graph
    after capture, and its kernels, copies and sets go into ``trace.meta["profile"]`` (shown in
    the node panel); torch then instantiates the graph at its first replay, which its recording
    does at once.

    `graphs`: every other CUDA graph of the process goes into the trace too (see
    `cgviz.observe_graphs`; `timed` times their replays); the trees' own graphs are linked to
    their nodes (`trace.graphs`), not shown twice."""
    if not isinstance(graphs, bool):
        raise TypeError(f"graphs must be True or False, not {graphs!r}")
    target = save_target(path)
    observer = start_observing(trace, kernels)
    plain = None
    try:
        if graphs:
            from cgviz.observe.graphs import start_observing_graphs

            plain = start_observing_graphs(trace, kernels, timed, tree=observer)
        yield observer.trace
    except RuntimeError as exc:
        if OVERWRITTEN in str(exc):
            observer.error_raised(exc)
        raise
    finally:
        if plain is not None:
            from cgviz.observe.graphs import stop_observing_graphs

            stop_observing_graphs(plain)
        stop_observing(observer)
        save(observer.trace, target)
