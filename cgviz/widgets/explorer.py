"""The Explorer: step through a trace in Jupyter, or follow a live tree as it runs.

    explorer = cgviz.Explorer(tree)               # live: new steps appear as the tree runs
    explorer = cgviz.Explorer(trace)              # a finished or loaded trace
    explorer = cgviz.Explorer(tree, workload=fn)  # adds "run next call": fn() runs the next call
    explorer.step = 12                            # moves the view; a click in it updates .step

An anywidget whose front end is the HTML export's own module (views/page/explorer*.js), so a
notebook and an exported page show the same thing the same way. The kernel sends the head
(step list, timeline) at once and the pictures a window of steps at a time, as the front end
asks for them: a long trace opens at once, and stepping within what arrived needs no kernel.
"""

from __future__ import annotations

import numbers
import operator
import time
import traceback
import uuid
from typing import Any, Callable, Optional

import anywidget
import traitlets

from cgviz.trace.model import Step, Trace
from cgviz.views.html import explorer_module, page_css
from cgviz.views.page_data import PageData
from cgviz.views.static_view import STILL_CLASS, static_html

__all__ = ["Explorer"]

# steps whose pictures go with the first view, around the step shown
FIRST_WINDOW = 24


def _resolve(source: Any) -> tuple[Any, Trace]:
    """(live source or None, trace) of a Tree (anything with a `trace` and a `subscribe`), a
    Trace, or something holding one (a ScenarioRun)."""
    if isinstance(source, Trace):
        return None, source
    if callable(getattr(source, "subscribe", None)) and isinstance(getattr(source, "trace", None), Trace):
        return source, source.trace
    inner = getattr(source, "tree", None)
    if inner is not None and callable(getattr(inner, "subscribe", None)):
        return _resolve(inner)
    trace = getattr(source, "trace", None)
    if isinstance(trace, Trace):
        return None, trace
    raise TypeError(f"Explorer needs a cgviz.Tree or a cgviz.Trace, not {type(source).__name__}")


def _index(step: Any) -> int:
    """`step` as an int (a numpy integer too); anything else, a bool included, is refused."""
    try:
        if not isinstance(step, bool):
            return operator.index(step)
    except TypeError:
        pass
    raise TypeError(f"step must be a step index (an int) or None, not {step!r}")


def _running_loop() -> Any:
    """The loop of the Jupyter kernel running this code, or None (plain Python, where another
    library may have left an asyncio loop marked running in this thread)."""
    import asyncio
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if getattr(shell, "kernel", None) is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Explorer(anywidget.AnyWidget):
    """The explorer of `tree_or_trace`: a `cgviz.Tree` (live: its new steps stream in; `close()`
    stops following it), a `cgviz.Trace`, or an object with a `.tree` or `.trace`.

    `step`: the index of the step shown (clamped to the trace; negative counts from the end at
    construction). `selected`: the node pinned in the view, or None. Both follow the browser.
    `workload`: called with no arguments by "run next call" (or `run_next()`).
    `live_interval`: while a cell drives a live tree, send new steps at most this often
    (seconds); what arrived last is sent when the cell ends."""

    _esm = explorer_module()
    _css = page_css()
    step = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Int(None, allow_none=True).tag(sync=True)
    _head = traitlets.Dict().tag(sync=True)
    _first = traitlets.Dict().tag(sync=True)
    _runnable = traitlets.Bool(False).tag(sync=True)
    _still = traitlets.Unicode("").tag(sync=True)  # the class of the still picture shown with it
    # set in __init__; here too, so that closing one whose construction failed has nothing to undo
    _unsubscribe: Optional[Callable[[], None]] = None
    _handle: Any = None

    def __init__(self, tree_or_trace: Any, workload: Optional[Callable[[], Any]] = None, *, step: Optional[int] = None,
                 renderer: str = "auto", live_interval: float = 0.2) -> None:
        if workload is not None and not callable(workload):
            raise TypeError(f"workload must be callable (it is called with no arguments), not {type(workload).__name__}")
        if step is not None:
            step = _index(step)
        if (not isinstance(live_interval, numbers.Real) or isinstance(live_interval, bool)
                or not 0 <= live_interval < float("inf")):
            raise ValueError(f"live_interval must be a number of seconds, 0 or more, not {live_interval!r}")
        self.tree, self.trace = _resolve(tree_or_trace)
        self.workload = workload
        self.live_interval = float(live_interval)
        self.last_error: Optional[BaseException] = None
        self._data = PageData(self.trace, renderer=renderer)
        self._nodes: set[int] = set()
        self._known = 0  # steps whose node ids are in _nodes
        self._sent_n = len(self.trace.steps)
        self._changed: Optional[int] = None  # the first step not sent since the last flush
        self._last_flush = float("-inf")
        self._handle: Any = None
        n = len(self.trace.steps)
        start = (n - 1 if self.tree is not None else 0) if step is None else (step + n if step < 0 else step)
        start = max(0, min(start, n - 1))
        super().__init__(step=start, _runnable=workload is not None, _head=self._data.head(),
                         _still=f"{STILL_CLASS}-{uuid.uuid4().hex}",
                         _first=self._data.window(range(start - FIRST_WINDOW // 2, start + FIRST_WINDOW)))
        self.on_msg(self._on_msg)
        self._unsubscribe = self.tree.subscribe(self._on_step) if self.tree is not None else None

    def _ipython_display_(self) -> None:
        """A still picture of the step shown (HTML), then the widget. Where widgets do not run
        (nbconvert's HTML, GitHub, nbviewer, the docs) the picture is what the reader sees; where
        the widget runs, it hides the picture (both carry `_still`)."""
        from IPython.display import HTML, display

        display(HTML(static_html(self.trace, self.step, self._still)))
        bundle = self._repr_mimebundle_()
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        display(data, metadata=metadata, raw=True)

    def __repr__(self) -> str:
        where = "live tree" if self.tree is not None else "trace"
        return f"<cgviz.Explorer of a {where}: step {self.step + 1}/{len(self.trace.steps)}>"

    # -- the traits --------------------------------------------------------------------------------
    @traitlets.validate("step")
    def _valid_step(self, proposal: dict) -> int:
        value = proposal["value"]
        if isinstance(value, bool):
            raise traitlets.TraitError(f"step must be a step index (an int), not {value!r}")
        return max(0, min(value, len(self.trace.steps) - 1))

    @traitlets.validate("selected")
    def _valid_selected(self, proposal: dict) -> Optional[int]:
        node = proposal["value"]
        if node is None:
            return None
        if isinstance(node, bool) or node not in self._node_ids():
            known = ", ".join(map(str, sorted(self._node_ids()))) or "none yet"
            raise traitlets.TraitError(f"no node {node!r} in this trace (its nodes: {known})")
        return node

    def _node_ids(self) -> set[int]:
        steps = self.trace.steps
        for s in steps[self._known:]:
            if s.node is not None:
                self._nodes.add(s.node)
            if s.snapshot is not None:
                self._nodes.update(n.id for n in s.snapshot.nodes)
        self._known = len(steps)
        return self._nodes

    # -- messages ----------------------------------------------------------------------------------
    def _on_msg(self, _widget: Any, content: dict, _buffers: Any) -> None:
        reply = self.answer(content)
        if reply is not None:
            self.send(reply)

    def answer(self, content: dict) -> Optional[dict]:
        """The reply to a message from the front end: ``{"type": "steps", "steps": [i, ...]}``
        gets those steps' pictures (a `PageData.window` piece); ``{"type": "run"}`` runs the
        workload."""
        kind = content.get("type")
        if kind == "steps":
            self.flush()  # the front end must know every step before pictures of new ones
            asked = content.get("steps")
            steps = [i for i in (asked if isinstance(asked, list) else []) if isinstance(i, int) and not isinstance(i, bool)]
            return {"type": "piece", "piece": self._data.window(steps)}
        if kind == "run":
            error = self.run_next()
            return {"type": "ran", "error": None if error is None else "".join(traceback.format_exception_only(error))}
        return None

    def run_next(self) -> Optional[BaseException]:
        """Call the workload once and show the last step. What it raises is returned (and kept
        in `last_error`), not raised; the steps it made stay in the trace."""
        if self.workload is None:
            raise RuntimeError("this Explorer has no workload: Explorer(tree, workload=fn) adds 'run next call'")
        self.last_error = None
        try:
            self.workload()
        except Exception as exc:  # shown in the widget: the UI stays usable
            self.last_error = exc
        self.flush()
        self.step = len(self.trace.steps) - 1
        return self.last_error

    # -- a live tree -------------------------------------------------------------------------------
    def _on_step(self, step: Step) -> None:
        """A live tree's listener: new steps go out at once, or at most every `live_interval`
        while a cell runs (the kernel's loop then sends the rest when the cell ends)."""
        n = len(self.trace.steps)
        changed = n - step.span if step.repeat > 1 else n - 1
        self._changed = min(changed, self._sent_n if self._changed is None else self._changed)
        loop = _running_loop()
        if loop is None or time.perf_counter() - self._last_flush >= self.live_interval:
            self.flush()
        elif self._handle is None:
            self._handle = loop.call_later(self.live_interval, self.flush)

    def flush(self) -> None:
        """Send the steps that arrived since the last flush; the view follows them when it
        showed the last step."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        start, self._changed = self._changed, None
        if start is None:
            return
        follow = self.step >= self._sent_n - 1
        if self.tree is not None:
            self.trace = self.tree.trace  # the same trace, its profile brought up to date
        start = max(0, min(start, self._sent_n))
        self._data.grow(start)
        self._known = min(self._known, start)
        self._sent_n = len(self.trace.steps)
        self.send({"type": "head", "head": self._data.head(start)})
        self._last_flush = time.perf_counter()
        if follow:
            self.step = self._sent_n - 1

    def close(self) -> None:
        """Stop following the tree and close the widget."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        super().close()
