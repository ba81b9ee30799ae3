"""Where the graph observer hears of CUDA graphs: torch's global graph hooks where torch has
them (2.14+: `torch.cuda.graphs.register_graph_*_hook`), else `torch.cuda.CUDAGraph`'s own
methods, wrapped; its `reset()` is wrapped on both routes. Either way every graph of the process is seen, whoever made it; each hook
only calls the observers in ACTIVE, and is removed when the last one stops."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable

from cgviz.observe import _torch_layout as layout

if TYPE_CHECKING:
    from cgviz.observe.graph_observer import GraphObserver

ACTIVE: list["GraphObserver"] = []
#: torch's global CUDA graph hooks (torch.cuda.graphs, 2.14+) cgviz registers, by the event.
HOOK_FUNCTIONS = {
    "capture_start": "register_graph_capture_start_hook",
    "capture_end": "register_graph_capture_end_hook",
    "replay_start": "register_graph_replay_start_hook",
    "replay_end": "register_graph_replay_end_hook",
}
#: The methods of torch.cuda.CUDAGraph wrapped where torch has no global hooks (2.11 to 2.13).
WRAPPED_METHODS = ("capture_begin", "capture_end", "replay")
#: Wrapped on every route: torch has no hook for it (2.14's destroy hook hands over exec ids, not the graph).
RESET_METHOD = "reset"
_HANDLES: list[Any] = []
_ORIGINALS: list[tuple[type, str, Callable]] = []
_PENDING = threading.local()  # .began: what each replay under way on this thread began with (hook route)


def route() -> str:
    """'hooks' where torch has its global graph hooks, else 'methods'."""
    graphs = sys.modules.get("torch.cuda.graphs")
    if layout.has_since("graphs.register_graph_instantiate_hook") and all(
            hasattr(graphs, name) for name in HOOK_FUNCTIONS.values()):
        return "hooks"
    return "methods"


def install() -> str:
    """Start hearing of graphs; returns the route taken."""
    import torch.cuda.graphs as graphs

    way = route()
    cls = graphs.CUDAGraph
    wraps = [(RESET_METHOD, _wrap_reset)]
    if way == "hooks":
        for event, name in HOOK_FUNCTIONS.items():
            _HANDLES.append(getattr(graphs, name)(_HOOKS[event]))
    else:
        wraps += zip(WRAPPED_METHODS, (_wrap_capture_begin, _wrap_capture_end, _wrap_replay))
    for name, wrap in wraps:
        original = cls.__dict__[name]
        _ORIGINALS.append((cls, name, original))
        setattr(cls, name, wrap(original))
    return way


def uninstall() -> None:
    while _HANDLES:
        _HANDLES.pop().remove()
    while _ORIGINALS:
        cls, name, original = _ORIGINALS.pop()
        setattr(cls, name, original)
    _PENDING.began = []


# -- the hook route --------------------------------------------------------------------------------
def _capture_start(graph: Any) -> None:
    frame = sys._getframe(1)
    for obs in ACTIVE:
        obs.capture_began(graph, frame)


def _capture_end(graph: Any) -> None:
    frame = sys._getframe(1)
    for obs in ACTIVE:
        obs.capture_ended(graph, frame)


def _replay_start(graph: Any) -> None:
    began = [obs.replay_began(graph) for obs in ACTIVE]
    if any(b is not None for b in began):  # timed: the end hook records the end events
        stack = getattr(_PENDING, "began", None)
        if stack is None:
            stack = _PENDING.began = []
        stack.append((graph, began))


def _replay_end(graph: Any) -> None:
    stack = getattr(_PENDING, "began", None)
    if stack and stack[-1][0] is graph:
        for obs, began in zip(ACTIVE, stack.pop()[1]):
            obs.replay_ended(began)


_HOOKS = {"capture_start": _capture_start, "capture_end": _capture_end,
          "replay_start": _replay_start, "replay_end": _replay_end}


# -- the method route --------------------------------------------------------------------------------
def _wrap_capture_begin(original: Callable) -> Callable:
    def capture_begin(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if ACTIVE:
            frame = sys._getframe(1)
            for obs in ACTIVE:
                obs.capture_began(self, frame)

    return capture_begin


def _wrap_capture_end(original: Callable) -> Callable:
    def capture_end(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if ACTIVE:
            frame = sys._getframe(1)
            for obs in ACTIVE:
                obs.capture_ended(self, frame)

    return capture_end


def _wrap_replay(original: Callable) -> Callable:
    def replay(self, *args, **kwargs):
        if not ACTIVE:
            return original(self, *args, **kwargs)
        began = [obs.replay_began(self) for obs in ACTIVE]
        try:
            return original(self, *args, **kwargs)
        finally:
            for obs, token in zip(ACTIVE, began):
                obs.replay_ended(token)

    return replay


# -- every route -------------------------------------------------------------------------------------
def _wrap_reset(original: Callable) -> Callable:
    def reset(self, *args, **kwargs):
        original(self, *args, **kwargs)
        for obs in ACTIVE:
            obs.graph_reset(self)

    return reset
