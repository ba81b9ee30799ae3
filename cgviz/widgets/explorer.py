"""The Explorer: step through a trace in Jupyter, or follow a live tree as it runs.

    explorer = cgviz.Explorer(tree)               # live: new steps appear as the tree runs
    explorer = cgviz.Explorer(trace)              # a finished or loaded trace
    explorer = cgviz.Explorer(tree, workload=fn)  # adds "run next call": fn() runs the next call
    explorer                                      # (last expression of a cell) shows it

One stop per stored step (`trace.steps`): a folded replay loop is one stop, shown "×N".
For each step it shows the headline and the reason, a banner when a generation begins,
the tree after the step (the step's node highlighted), the selected node's outputs, the
pool with the selected node's blocks highlighted, and the timeline with the step marked.

Stepping is cheap on large traces, and no widget is rebuilt: tree pictures are remembered
per step and selected node; pool pictures per pool content, a pool being drawn once for
all the steps that differ only in which outputs are live (a replay loop: `pool_svg`
writes each step's totals into it), with the selected node highlighted by a style sheet
over the picture; the timeline is drawn once per trace length and only its marker moves.
In Jupyter a pool picture not drawn yet follows the step change instead of holding it up,
and the neighbouring steps are drawn ahead while the kernel is idle. While a live tree
runs inside a cell, the pictures are redrawn at most every `live_interval` seconds (and
once more when the cell ends); the headline and the slider follow every step.
"""

from __future__ import annotations

import html
import itertools
import operator
import re
import time
import traceback
from collections import OrderedDict
from typing import Any, Callable, Optional

from cgviz.trace.diff import format_bytes
from cgviz.trace.model import NodeView, Snapshot, Step, Trace

__all__ = ["Explorer", "output_table_html", "NO_STEPS", "NO_SNAPSHOT"]

NO_STEPS = "no steps yet"
NO_SNAPSHOT = "snapshots need trace=\"full\""

# folded blocks span at most this many steps (cgviz.engine.recorder.MAX_SPAN is 8); a fold
# rewrites only the last steps of a trace, so caches before (length - _REWRITE) stay valid
_REWRITE = 16

_RENDERERS = ("auto", "graphviz", "builtin")

# trees with more nodes than this take tens of milliseconds to draw
_BIG_TREE = 150

_MUTED = "#52606d"
_ALERT = "#c62828"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _note(text: str, kind: str = "note") -> str:
    """A grey (or red, for errors) message box in place of a picture."""
    color = _ALERT if kind == "error" else _MUTED
    return (
        f'<div class="cgviz-{kind}" style="padding:10px 12px;margin:4px 0;border:1px dashed {color};'
        f'border-radius:4px;color:{color};background:#f8f9fa;font-size:13px">{text}</div>'
    )


def _pane(body: str, css_class: str, max_height: Optional[str] = None) -> str:
    start = body.find("<svg")
    if start > 0:
        body = body[start:]  # no XML prolog or DOCTYPE inside HTML
    limit = f"max-height:{max_height};" if max_height else ""
    return f'<div class="{css_class}" style="overflow:auto;{limit}max-width:100%">{body}</div>'


_SVG_WIDTH = re.compile(r'<svg\b[^>]*?\bwidth="([0-9.]+)(pt|px)?"')


def _svg_width_px(svg: str) -> Optional[float]:
    m = _SVG_WIDTH.search(svg)
    if m is None:
        return None
    return float(m.group(1)) * (4 / 3 if m.group(2) == "pt" else 1)


def _fit(svg: str, stretch: bool = False) -> str:
    """The SVG scaled down to the width it is shown in (never up, unless `stretch`)."""
    size = "width:100%;height:auto;display:block" if stretch else "max-width:100%;height:auto"
    return svg.replace("<svg ", f'<svg style="{size}" ', 1)


def _address(address: Optional[int]) -> str:
    return "—" if address is None else f"{address:#x}"


def output_table_html(node: NodeView) -> str:
    """The outputs of `node` as an HTML table: index, shape, dtype, bytes, address, state, alias.

    Each row is `<tr class="cgviz-output cgviz-<state>" data-index="i">`.
    """
    from cgviz.views.tree import MARKS, STYLE

    children = ", ".join(map(str, node.children)) or "none"
    parent = "a root" if node.parent is None else f"parent {node.parent}"
    caption = (
        f"node {node.id} · {_e(node.function)} · {node.kind} · generation {node.generation} · "
        f"{node.replays} replay{'s' if node.replays != 1 else ''} · {parent} · children {children}"
    )
    if node.signature:
        caption += f'<br><span style="color:{_MUTED}">{_e(node.signature)}</span>'
    head = "".join(
        f'<th style="text-align:left;padding:2px 8px;border-bottom:1px solid #cbd2d9">{h}</th>'
        for h in ("output", "shape", "dtype", "bytes", "address", "state", "alias")
    )
    rows = []
    for out in node.outputs:
        color = STYLE.get(out.state, _MUTED)
        described = out.described  # torch keeps no metadata for the outputs of its warmup runs
        cells = (
            str(out.index),
            "(" + ", ".join(map(str, out.shape)) + ("," if len(out.shape) == 1 else "") + ")" if described
            else "not recorded",
            _e(out.dtype) if described else "—",
            format_bytes(out.nbytes) if described else "—",
            _address(out.address),
            f'<span style="color:{color};font-weight:600">{MARKS.get(out.state, "")} {_e(out.state)}</span>',
            _e(out.alias_of) if out.alias_of else "—",
        )
        tds = "".join(f'<td style="padding:2px 8px;font-family:monospace">{c}</td>' for c in cells)
        rows.append(f'<tr class="cgviz-output cgviz-{_e(out.state)}" data-index="{out.index}">{tds}</tr>')
    if not rows:
        rows.append(f'<tr class="cgviz-no-outputs"><td colspan="7" style="padding:2px 8px;color:{_MUTED}">'
                    "no tensor outputs</td></tr>")
    return (
        f'<table class="cgviz-outputs" data-node="{node.id}" style="border-collapse:collapse;font-size:12px">'
        f'<caption style="caption-side:top;text-align:left;padding:2px 0 4px;font-size:12px">{caption}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


class _LRU:
    """Pictures by (step index, selected node): bounded by entries and by characters."""

    def __init__(self, max_entries: int = 128, max_chars: int = 48_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[tuple, str] = OrderedDict()
        self._chars = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> Optional[str]:
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return value

    def put(self, key: tuple, value: str) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._chars -= len(old)
        self._items[key] = value
        self._chars += len(value)
        while self._items and (len(self._items) > self.max_entries or self._chars > self.max_chars):
            _, dropped = self._items.popitem(last=False)
            self._chars -= len(dropped)

    def drop_from(self, index: int) -> None:
        """Forget the pictures of steps >= index (those steps changed or went away)."""
        for key in [k for k in self._items if k[0] >= index]:
            self._chars -= len(self._items.pop(key))

    def clear(self) -> None:
        self._items.clear()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: tuple) -> bool:
        return key in self._items


def _resolve(source: Any) -> tuple[Any, Trace]:
    """(live tree or None, trace) of a Tree, a Trace, or something holding one (a ScenarioRun)."""
    recorder = getattr(source, "_recorder", None)
    if recorder is not None and hasattr(recorder, "listeners") and hasattr(source, "trace"):
        return source, source.trace
    if isinstance(source, Trace):
        return None, source
    inner = getattr(source, "tree", None)
    if inner is not None and getattr(inner, "_recorder", None) is not None:
        return _resolve(inner)
    trace = getattr(source, "trace", None)
    if isinstance(trace, Trace):
        return None, trace
    raise TypeError(f"Explorer needs a cgviz.Tree or a cgviz.Trace, not {type(source).__name__}")


def _running_loop():
    """The asyncio loop running this code (a Jupyter kernel's), or None (plain Python)."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Explorer:
    """An ipywidgets UI over a trace: ⏮ ◀ ▶ ⏭, a step slider, headline and reason, a
    generation banner, the tree, the selected node's outputs, the pool and the timeline.

    `tree_or_trace`: a `cgviz.Tree` (live: its new steps appear, and the view follows them
    when it shows the last step; `close()` stops listening), a `cgviz.Trace`, or an object
    with a `.tree` or `.trace` (a `cgviz.scenarios.ScenarioRun`).
    `workload`: called with no arguments by the "run next call" button (or `run_next()`);
    it should run the next call on the tree. What it raises is shown in the widget.
    `renderer`: the tree view's renderer ("auto", "graphviz" or "builtin").
    `pool_highlight`: "overlay" (default) draws each pool once and highlights the selected
    node's blocks with a style sheet; "redraw" draws the pool again for each selected node
    (`pool_svg(snapshot, highlight_node=...)`: also marks the node in the legend, slower).
    `live_interval`: while a cell drives a live tree, redraw the pictures at most this often
    (seconds; also at least 4× the time one redraw takes); the last state is drawn when the
    cell ends. Outside a running event loop every step is drawn at once.

    Child widgets: `headline`, `reason`, `banner`, `error_html`, `tree_html`, `node_select`,
    `table_html`, `pool_html`, `timeline_html`, `slider`, `first_button`, `prev_button`,
    `next_button`, `last_button`, `run_button`; `widget` is the top VBox.
    Navigation: `index`, `step`, `selected`, `go(i)`, `next()`, `prev()`, `first()`,
    `last()`, `select(node_id)`, `refresh()`, `run_next()`, `prefetch(i)`, `close()`;
    `timings` holds the seconds each part of the last step change took.
    """

    def __init__(
        self,
        tree_or_trace: Any,
        workload: Optional[Callable[[], Any]] = None,
        *,
        renderer: str = "auto",
        pool_highlight: str = "overlay",
        live_interval: float = 0.2,
    ) -> None:
        if workload is not None and not callable(workload):
            raise TypeError(f"workload must be callable (it is called with no arguments), not {type(workload).__name__}")
        if renderer not in _RENDERERS:
            raise ValueError(f"unknown renderer {renderer!r}: use 'auto', 'graphviz' or 'builtin'")
        if pool_highlight not in ("overlay", "redraw"):
            raise ValueError(f"pool_highlight must be 'overlay' or 'redraw', not {pool_highlight!r}")
        import ipywidgets as w

        self.tree, self.trace = _resolve(tree_or_trace)
        self.workload = workload
        self.renderer = renderer
        self.pool_highlight = pool_highlight
        self.live_interval = float(live_interval)
        self.last_error: Optional[BaseException] = None

        self._index: Optional[int] = None
        self._selected: Optional[int] = None
        self._known = 0  # steps the widgets know about
        self._options: tuple = ()
        self._syncing = 0
        self._closed = False
        self._dirty = False  # pictures lag behind the step shown (throttled live updates)
        self._flush_handle = None
        self._last_draw = float("-inf")
        self._draw_cost = 0.0
        self._tree_cache = _LRU()
        self._pool_keys: dict[int, int] = {}  # step index -> hash of its pool's content
        self._pool_by_content = _LRU(max_entries=64)
        self._pool_handle = None
        self._uid = f"cgviz-x{next(_IDS)}"
        self._prefetch_handle = None
        self._prefetch_queue: list[tuple[int, str]] = []
        self._timeline_key: Optional[tuple] = None
        self._timeline_base = ""
        self._timeline_geometry: Optional[tuple] = None
        self._functions: dict[int, str] = {}
        self._functions_upto = 0
        self.timings: dict[str, float] = {}  # seconds of the last step change, per part

        self._build(w)
        self._listener = None
        if self.tree is not None:
            self._listener = self._on_step
            self.tree._recorder.listeners.append(self._listener)
        n = len(self.trace.steps)
        self._known = n
        self._sync_slider()
        if n == 0:
            self._show_empty()
        else:
            self._show(n - 1 if self.tree is not None else 0)

    # -- widgets -----------------------------------------------------------------------------
    def _build(self, w) -> None:
        def button(label: str, tip: str):
            b = w.Button(description=label, tooltip=tip, layout=w.Layout(width="42px"))
            b.add_class("cgviz-nav")
            return b

        self.first_button = button("⏮", "first step")
        self.prev_button = button("◀", "previous step")
        self.next_button = button("▶", "next step")
        self.last_button = button("⏭", "last step")
        self.first_button.on_click(lambda _b: self._guard(self.first))
        self.prev_button.on_click(lambda _b: self._guard(self.prev))
        self.next_button.on_click(lambda _b: self._guard(self.next))
        self.last_button.on_click(lambda _b: self._guard(self.last))
        self.slider = w.IntSlider(
            value=0, min=0, max=0, step=1, description="step", readout=False, continuous_update=True,
            layout=w.Layout(flex="1 1 auto", min_width="160px"),
        )
        self.slider.observe(self._on_slider, names="value")
        self.run_button = w.Button(
            description="run next call", icon="play", button_style="primary",
            tooltip="call the workload once and follow the new steps",
            layout=w.Layout(width="auto", display=None if self.workload is not None else "none"),
        )
        self.run_button.on_click(lambda _b: self.run_next())
        self.headline = w.HTML()
        self.reason = w.HTML()
        self.banner = w.HTML(layout=w.Layout(display="none"))
        self.error_html = w.HTML(layout=w.Layout(display="none"))
        self.tree_html = w.HTML(layout=w.Layout(flex="3 1 0", min_width="320px"))
        self.node_select = w.Dropdown(options=[], description="node", layout=w.Layout(width="auto"))
        self.node_select.observe(self._on_select, names="value")
        self.table_html = w.HTML()
        self.pool_html = w.HTML()
        self.timeline_html = w.HTML()
        controls = w.HBox(
            [self.first_button, self.prev_button, self.next_button, self.last_button, self.slider, self.run_button],
            layout=w.Layout(align_items="center"),
        )
        side = w.VBox([self.node_select, self.table_html], layout=w.Layout(flex="2 1 0", min_width="300px"))
        body = w.HBox([self.tree_html, side], layout=w.Layout(align_items="flex-start", width="100%"))
        self.widget = w.VBox(
            [controls, self.headline, self.reason, self.banner, self.error_html, body, self.pool_html,
             self.timeline_html],
            layout=w.Layout(width="100%"),
        )
        self.widget.add_class("cgviz-explorer")

    def _repr_mimebundle_(self, **kwargs: Any):
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        where = "live tree" if self.tree is not None else "trace"
        at = "no steps" if self._index is None else f"step {self._index + 1}/{len(self.trace.steps)}"
        return f"<cgviz.Explorer of a {where}: {at}>"

    # -- navigation --------------------------------------------------------------------------
    @property
    def index(self) -> Optional[int]:
        """The index (into `trace.steps`) of the step shown; None while the trace is empty."""
        return self._index

    @property
    def step(self) -> Optional[Step]:
        return None if self._index is None else self.trace.steps[self._index]

    @property
    def selected(self) -> Optional[int]:
        """The node whose outputs the table shows (and the pool highlights)."""
        return self._selected

    def go(self, i: int) -> None:
        """Show step i (negative counts from the end)."""
        self._catch_up()
        n = len(self.trace.steps)
        if n == 0:
            raise IndexError("the trace has no steps yet")
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"step index must be an int, not {type(i).__name__}") from None
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"no step {i}: the trace has {n} step{'s' if n != 1 else ''} (0..{n - 1})")
        self._show(k)

    def next(self) -> None:
        self._catch_up()
        if self._index is not None and self._index < len(self.trace.steps) - 1:
            self._show(self._index + 1)

    def prev(self) -> None:
        self._catch_up()
        if self._index is not None and self._index > 0:
            self._show(self._index - 1)

    def first(self) -> None:
        self._catch_up()
        if self.trace.steps:
            self._show(0)

    def last(self) -> None:
        self._catch_up()
        if self.trace.steps:
            self._show(len(self.trace.steps) - 1)

    def select(self, node_id: Optional[int]) -> None:
        """Show the outputs of node `node_id` (in the current step's snapshot)."""
        step = self.step
        if node_id is not None:
            if step is None or step.snapshot is None:
                raise KeyError(f"no node {node_id} to select: this step has no snapshot ({NO_SNAPSHOT})")
            if all(n.id != node_id for n in step.snapshot.nodes):
                n = len(self.trace.steps)
                raise KeyError(f"no node {node_id} in the snapshot of this step (step {self._index + 1}/{n})")
        with self._sync():
            self.node_select.value = node_id
        self._selected = node_id
        if step is not None:
            self._draw_selection(self._index, step)

    def refresh(self, follow: Optional[bool] = None) -> None:
        """Catch up with the trace (steps added other than through a live tree's listener).

        `follow`: go to the last step (default: when the last known step is shown)."""
        n = len(self.trace.steps)
        if follow is None:
            follow = self._index is None or self._index >= self._known - 1
        if n != self._known:
            self._forget_from(max(0, min(self._known, n) - _REWRITE))
            self._known = n
        self._sync_slider()
        if n == 0:
            self._show_empty()
        elif follow or self._index is None:
            self._show(n - 1)
        else:
            self._show(min(self._index, n - 1))

    def close(self) -> None:
        """Stop following the tree and close the widgets."""
        if self._closed:
            return
        self._closed = True
        if self.tree is not None and self._listener is not None:
            listeners = self.tree._recorder.listeners
            if self._listener in listeners:
                listeners.remove(self._listener)
        for handle in (self._flush_handle, self._prefetch_handle, self._pool_handle):
            if handle is not None:
                handle.cancel()
        self._flush_handle = self._prefetch_handle = self._pool_handle = None
        self._prefetch_queue = []
        stack = [self.widget]
        while stack:
            widget = stack.pop()
            stack.extend(getattr(widget, "children", ()))
            widget.close()

    # -- the workload ------------------------------------------------------------------------
    def run_next(self) -> Optional[BaseException]:
        """Call the workload once and show the last step. What it raises is shown in the
        widget (and kept in `last_error`), not raised; the steps it made stay in the trace."""
        if self.workload is None:
            raise RuntimeError("this Explorer has no workload: Explorer(tree, workload=fn) adds 'run next call'")
        error: Optional[BaseException] = None
        self.run_button.disabled = True
        try:
            self.workload()
        except Exception as exc:  # shown in the widget: the UI stays usable
            error = exc
        finally:
            self.run_button.disabled = False
        self.refresh(follow=True)
        if error is not None:
            self._show_error("run next call: the workload raised", error)
        else:
            self._clear_error()
        return error

    # -- live updates ------------------------------------------------------------------------
    def _on_step(self, step: Step) -> None:
        """Listener of a live tree: called after each recorded step (a fold passes the block's
        last step). Never raises into the tree: problems are shown in the widget."""
        if self._closed:
            return
        try:
            n = len(self.trace.steps)
            follow = self._index is None or self._index >= self._known - 1
            changed = n - step.span if step.repeat > 1 else n - 1
            self._forget_from(max(0, min(changed, self._known)))
            self._known = n
            self._sync_slider()
            if n == 0:
                self._show_empty()
                return
            if follow:
                target = n - 1
            else:
                target = min(self._index, n - 1)
            if not follow and target < changed:
                self._draw_light(target, self.trace.steps[target])  # "step i/n" changed
                self._update_buttons()
                self._schedule_pictures()  # the timeline has new steps
                return
            self._show(target, pictures=self._pictures_due(), prefetch=False)
            if self._dirty:
                self._schedule_pictures()
        except Exception as exc:  # a drawing problem must not break the user's tree
            self._show_error("the explorer could not show the new step", exc)

    def _pictures_due(self) -> bool:
        if _running_loop() is None:
            return True
        interval = max(self.live_interval, 4 * self._draw_cost)
        return time.perf_counter() - self._last_draw >= interval

    def _schedule_pictures(self) -> None:
        self._dirty = True
        loop = _running_loop()
        if loop is None:
            self._flush()
            return
        if self._flush_handle is None:
            interval = max(self.live_interval, 4 * self._draw_cost)
            self._flush_handle = loop.call_later(interval, self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self._closed or not self._dirty or self._index is None:
            return
        try:
            self._draw_pictures(self._index, self.trace.steps[self._index])
        except Exception as exc:
            self._show_error("the explorer could not draw the step", exc)

    # -- drawing ahead ------------------------------------------------------------------------
    def prefetch(self, i: int, parts: tuple[str, ...] = ("tree", "pool")) -> None:
        """Draw step i's tree and/or pool into the caches without showing it."""
        step = self.trace.steps[i]
        snap = step.snapshot
        if snap is None:
            return
        sel = self._default_node(step)
        if "tree" in parts and (i, sel) not in self._tree_cache:
            self._tree_cache.put((i, sel), self._tree_picture(snap, step, sel))
        if "pool" in parts:
            self._pool_for(i, snap, sel)

    def _schedule_prefetch(self, i: int) -> None:
        """In Jupyter: draw the neighbours of step i while the kernel is idle, one picture
        per turn of the event loop, so that the next ▶ or ◀ finds them ready. Outside an
        event loop nothing is drawn ahead."""
        loop = _running_loop()
        if loop is None or self._closed:
            return
        n = len(self.trace.steps)
        self._prefetch_queue = [(j, part) for j in (i + 1, i - 1) if 0 <= j < n for part in ("tree", "pool")]
        if self._prefetch_handle is None and self._prefetch_queue:
            self._prefetch_handle = loop.call_later(0.02, self._prefetch_next)

    def _prefetch_next(self) -> None:
        self._prefetch_handle = None
        if self._closed or not self._prefetch_queue:
            return
        j, part = self._prefetch_queue.pop(0)
        try:
            if j < len(self.trace.steps):
                self.prefetch(j, (part,))
        except Exception:  # noqa: S110 - a drawing problem shows when that step is shown
            pass
        if self._prefetch_queue:
            self._prefetch_handle = _running_loop().call_later(0.0, self._prefetch_next)

    def _catch_up(self) -> None:
        """Before navigating: know about steps added since (a trace growing outside a tree)."""
        n = len(self.trace.steps)
        if n == self._known:
            return
        self._forget_from(max(0, min(self._known, n) - _REWRITE))
        self._known = n
        self._sync_slider()
        if n == 0:
            self._show_empty()
        elif self._index is None or self._index >= n:
            self._show(n - 1)

    def _forget_from(self, index: int) -> None:
        self._tree_cache.drop_from(index)
        for k in [k for k in self._pool_keys if k >= index]:
            del self._pool_keys[k]
        if index < self._functions_upto:
            self._functions.clear()
            self._functions_upto = 0

    # -- showing a step ----------------------------------------------------------------------
    def _show(self, i: int, pictures: bool = True, prefetch: bool = True) -> None:
        t0 = time.perf_counter()
        step = self.trace.steps[i]
        self._index = i
        if self.slider.value != i:
            with self._sync():
                self.slider.value = i
        self._update_buttons()
        self._draw_light(i, step)
        self._choose_node(step)
        # a big tree takes a while to draw: then the slider moves on release, not while dragged
        big = step.snapshot is not None and len(step.snapshot.nodes) > _BIG_TREE
        if self.slider.continuous_update == big:
            self.slider.continuous_update = not big
        if pictures:
            self._draw_pictures(i, step, defer_pool=prefetch and _running_loop() is not None)
        else:
            self._dirty = True
        self.timings["total"] = time.perf_counter() - t0
        if pictures and prefetch:
            self._schedule_prefetch(i)

    def _draw_light(self, i: int, step: Step) -> None:
        t0 = time.perf_counter()
        n = len(self.trace.steps)
        self.headline.value = (
            f'<div class="cgviz-headline" style="font-size:15px;font-weight:600;padding:2px 0">'
            f"step {i + 1}/{n} · {_e(self._headline(i, step))}</div>"
        )
        color = _ALERT if step.kind == "error" else "#1f2933"
        took = f' <span style="color:{_MUTED}">({_duration(step)})</span>' if step.duration else ""
        self.reason.value = (
            f'<div class="cgviz-reason" style="color:{color};font-size:13px;padding:0 0 4px">'
            f"<b>why:</b> {_e(step.reason)}{took}</div>"
        )
        text = self._banner_text(i, step)
        if text is None:
            self.banner.value = ""
            self.banner.layout.display = "none"
        else:
            self.banner.value = (
                f'<div class="cgviz-generation-banner" style="padding:6px 10px;margin:2px 0;border-radius:4px;'
                f'background:#fff4e5;border-left:4px solid #e8590c;font-size:13px">{_e(text)}</div>'
            )
            self.banner.layout.display = None
        self.timings["light"] = time.perf_counter() - t0

    def _headline(self, i: int, step: Step) -> str:
        text = step.headline()
        if step.repeat > 1:
            return text
        block = self._block_of(i)
        if block is not None:
            end, times = block
            span = self.trace.steps[end].span
            text += f" · ×{times} (step {i - (end - span)} of a {span}-step block)"
        return text

    def _block_of(self, i: int) -> Optional[tuple[int, int]]:
        """(end index, repeat) of the folded block step i belongs to, if any."""
        steps = self.trace.steps
        for j in range(i, min(len(steps), i + _REWRITE)):
            s = steps[j]
            if s.repeat > 1:
                # blocks do not overlap: the first one ending at or after i covers i, or none does
                return (j, s.repeat) if j - s.span < i else None
        return None

    def _banner_text(self, i: int, step: Step) -> Optional[str]:
        if step.kind != "generation":
            return None
        text = f"generation {step.generation} begins: "
        if step.invalidated:
            names = self._function_names(i, step)
            parts = []
            for node, out in step.invalidated:
                fn = names.get(node)
                parts.append(f"output {out} of node {node}" + (f" ({fn})" if fn else ""))
            text += "invalidated " + ", ".join(parts)
        else:
            text += "nothing live was invalidated"
        block = self._block_of(i)
        if block is not None:
            text += f" (this step repeats ×{block[1]}: a new generation each time)"
        return text

    def _function_names(self, i: int, step: Step) -> dict[int, str]:
        if step.snapshot is not None:
            return {n.id: n.function for n in step.snapshot.nodes}
        steps = self.trace.steps
        for s in steps[self._functions_upto : len(steps)]:
            if s.node is not None and s.function and s.kind in ("warmup", "record"):
                self._functions[s.node] = s.function
        self._functions_upto = len(steps)
        return self._functions

    def _default_node(self, step: Step) -> Optional[int]:
        """The node a step selects: its own node, else the node selected before (if it is
        still there), else the current node."""
        snap = step.snapshot
        if snap is None:
            return None
        ids = {n.id for n in snap.nodes}
        for candidate in (step.node, self._selected, snap.current_node):
            if candidate is not None and candidate in ids:
                return candidate
        return None

    def _choose_node(self, step: Step) -> None:
        """The node selector's options and value for this step (see `_default_node`)."""
        snap = step.snapshot
        options: tuple = () if snap is None else tuple((_node_label(n), n.id) for n in snap.nodes)
        chosen = self._default_node(step)
        with self._sync():
            if options != self._options:
                self.node_select.options = options
                self._options = options
            self.node_select.disabled = not options
            if self.node_select.value != chosen:
                self.node_select.value = chosen
        self._selected = chosen

    def _draw_pictures(self, i: int, step: Step, defer_pool: bool = False) -> None:
        t0 = time.perf_counter()
        self._draw_selection(i, step, defer_pool)
        t1 = time.perf_counter()
        self._draw_timeline(i)
        t2 = time.perf_counter()
        self.timings["timeline"] = t2 - t1
        self._dirty = False
        self._last_draw = t2
        self._draw_cost = t2 - t0

    def _draw_selection(self, i: int, step: Step, defer_pool: bool = False) -> None:
        """What depends on the step and the selected node: tree, table, pool. `defer_pool`:
        a pool picture not drawn yet is drawn once the event loop is free."""
        t0 = time.perf_counter()
        snap = step.snapshot
        sel = self._selected
        if snap is None:
            recorded = self._recorded_level()
            self.tree_html.value = _note(self._no_snapshot_text())
            self.table_html.value = _note(f"No outputs to show: {_e(NO_SNAPSHOT)}{_e(recorded)}.")
            self.pool_html.value = _note(f"No pool to show: {_e(NO_SNAPSHOT)}{_e(recorded)}.")
            self.timings.update(tree=0.0, table=0.0, pool=0.0)
            return
        self.tree_html.value = self._cached(self._tree_cache, (i, sel), lambda: self._tree_picture(snap, step, sel))
        t1 = time.perf_counter()
        if sel is None:
            self.table_html.value = _note("no node selected" if snap.nodes else "no nodes yet: no function has run")
        else:
            self.table_html.value = _pane(output_table_html(snap.node(sel)), "cgviz-table-pane")
        t2 = time.perf_counter()
        picture = self._pool_for(i, snap, sel, draw=not defer_pool)
        if picture is None:  # drawn right after this step change is sent (Jupyter)
            self.pool_html.value = _note(f"drawing the pool of step {i + 1}…") + _strip_style(self.pool_html.value)
            self._defer_pool(i)
        else:
            self.pool_html.value = picture
        t3 = time.perf_counter()
        self.timings.update(tree=t1 - t0, table=t2 - t1, pool=t3 - t2)

    @staticmethod
    def _cached(cache: _LRU, key: tuple, make: Callable[[], str]) -> str:
        value = cache.get(key)
        if value is None:
            value = make()
            cache.put(key, value)
        return value

    def _pool_for(self, i: int, snap: Snapshot, sel: Optional[int], draw: bool = True) -> Optional[str]:
        """The pool of step i with node `sel` highlighted; None when not drawn yet and not `draw`.

        The picture is kept per pool content (segments, blocks, live outputs). A pool
        changes on recordings, warmups and deaths, not on replays, and `pool_svg` draws it
        once for the steps that differ only in what is live, so a step of a replay loop
        costs the totals written into its title. With pool_highlight="overlay" the
        selected node's blocks are outlined, and the others faded, by a style sheet over
        that picture (no redraw when the selection changes); with "redraw" pool_svg draws
        the highlight itself.
        """
        key = self._pool_keys.get(i)
        if key is None:  # the content's hash, computed once per step (not kept: it is big)
            key = self._pool_keys[i] = hash(_pool_content(snap))
        if self.pool_highlight == "redraw":
            key = (sel, key)
        picture = self._pool_by_content.get(key)
        if picture is None:
            if not draw:
                return None
            picture = self._pool_picture(snap, sel if self.pool_highlight == "redraw" else None)
            self._pool_by_content.put(key, picture)
        if self.pool_highlight == "overlay":
            return self._pool_overlay(snap, sel) + picture
        return picture

    def _pool_overlay(self, snap: Snapshot, sel: Optional[int]) -> str:
        """A scoped style sheet that highlights node `sel`'s blocks, and a line saying so."""
        if sel is None:
            return ""
        from cgviz.views.colors import HIGHLIGHT_EDGE

        ids = [f"block-{b.address:x}" for seg in snap.segments for b in seg.blocks if b.allocated and b.node == sel]
        scope = f".{self._uid}-pool"
        rules = [f"{scope} #pool-blocks-{c} path{{fill-opacity:0.3}}" for c in ("output", "input", "unowned")]
        rules += [f"{scope} g#{b} path{{fill-opacity:1 !important;stroke:{HIGHLIGHT_EDGE} !important;"
                  "stroke-width:1.8 !important}" for b in ids]
        function = next((n.function for n in snap.nodes if n.id == sel), "")
        what = f"{len(ids)} block{'s' * (len(ids) != 1)} outlined" if ids else "no blocks in the pool"
        return (
            f"<style>{''.join(rules)}</style>"
            f'<div class="cgviz-pool-highlight" style="font-size:12px;color:{_MUTED};padding:2px 0">'
            f"node {sel}{' · ' + _e(function) if function else ''}: {what}</div>"
        )

    def _defer_pool(self, i: int) -> None:
        loop = _running_loop()
        if self._pool_handle is not None:
            self._pool_handle.cancel()
        self._pool_handle = loop.call_later(0.0, self._draw_deferred_pool)

    def _draw_deferred_pool(self) -> None:
        self._pool_handle = None
        i = self._index
        if self._closed or i is None or i >= len(self.trace.steps):
            return
        snap = self.trace.steps[i].snapshot
        if snap is None:
            return
        try:
            self.pool_html.value = self._pool_for(i, snap, self._selected)
        except Exception as exc:
            self._show_error("the explorer could not draw the pool", exc)

    def _tree_picture(self, snap: Snapshot, step: Step, sel: Optional[int]) -> str:
        try:
            from cgviz.views.tree import tree_svg

            svg = tree_svg(snap, step=step, selected=sel, renderer=self.renderer)
        except Exception as exc:
            return _note(f"tree view failed: {_e(type(exc).__name__)}: {_e(exc)}", "error")
        return _pane(svg, "cgviz-tree-pane", "620px")

    def _pool_picture(self, snap: Snapshot, sel: Optional[int]) -> str:
        try:
            from cgviz.views.pool import pool_svg

            svg = pool_svg(snap, highlight_node=sel)
        except Exception as exc:
            return _note(f"pool view failed: {_e(type(exc).__name__)}: {_e(exc)}", "error")
        return _pane(_fit(svg), f"cgviz-pool-pane {self._uid}-pool", "480px")

    def _recorded_level(self) -> str:
        level = self.trace.meta.get("trace_level")
        if level is None and self.tree is not None:
            level = getattr(self.tree, "trace_level", None)
        return f" (this trace was recorded with trace={level!r})" if level and level != "full" else ""

    def _no_snapshot_text(self) -> str:
        return (
            f"No snapshot for this step: {_e(NO_SNAPSHOT)}{_e(self._recorded_level())}. "
            "The headline, the reason and the timeline still work; record with "
            "<code>cgviz.Tree(..., trace=\"full\")</code> to see the tree, the outputs and the pool."
        )

    # -- the timeline ------------------------------------------------------------------------
    def _trace_key(self) -> tuple:
        steps = self.trace.steps
        return (len(steps),) + tuple((s.repeat, s.span) for s in steps[-_REWRITE:])

    def _draw_timeline(self, i: Optional[int]) -> None:
        key = self._trace_key()
        if key != self._timeline_key:
            self._timeline_base, self._timeline_geometry = self._timeline_picture()
            self._timeline_key = key
        self.timeline_html.value = self._mark_timeline(i)

    def _timeline_picture(self) -> tuple[str, Optional[tuple]]:
        """The timeline drawn with no step marked, and where its steps are: (x0, y_top,
        width, height) of the tick area in fractions of the picture, and the x limits."""
        try:
            from cgviz.views.svg_output import figure_svg
            from cgviz.views.timeline import timeline_figure

            fig = timeline_figure(self.trace, None)
            steps = self.trace.steps
            n = len(steps)
            # tooltips on the ticks, as timeline_svg gives them (it draws a group per step up to ~2000)
            titles = {f"step-{i}": f"step {i + 1}/{n}: {s.headline()}" for i, s in enumerate(steps)} if n <= 2000 else {}
            svg = figure_svg(fig, titles)
        except Exception as exc:
            return _note(f"timeline view failed: {_e(type(exc).__name__)}: {_e(exc)}", "error"), None
        geometry = None
        for ax in fig.axes:
            if any(str(c.get_gid()).startswith("timeline-steps") for c in ax.get_children()):
                x0, y0, w, h = (float(v) for v in ax.get_position().bounds)
                lo, hi = (float(v) for v in ax.get_xlim())
                ylo, yhi = (float(v) for v in ax.get_ylim())
                geometry = (x0, y0, w, h, lo, hi, ylo, yhi)
                break
        start = svg.find("<svg")
        return (svg[start:] if start > 0 else svg), geometry

    def _mark_timeline(self, i: Optional[int]) -> str:
        """The timeline with step i marked: an outline and a ▲ laid over the picture, which
        is drawn once per trace length (so a step change only moves the marker)."""
        base, geometry = self._timeline_base, self._timeline_geometry
        if i is None or geometry is None:
            return _pane(base, "cgviz-timeline-pane")
        x0, y0, w, h, lo, hi, ylo, yhi = geometry

        def x(v: float) -> float:  # percent of the picture's width
            return 100.0 * (x0 + (v - lo) / (hi - lo) * w)

        def y(v: float) -> float:  # percent of the picture's height, from the top
            return 100.0 * (1.0 - (y0 + (v - ylo) / (yhi - ylo) * h))

        step_w = x(i + 0.5) - x(i - 0.5)
        top, bottom = y(1.06), y(-0.06)
        marker = (
            f'<div class="cgviz-timeline-marker" data-step="{i}" title="step {i + 1}" style="position:absolute;'
            f"left:{x(i):.4f}%;top:{top:.3f}%;height:{bottom - top:.3f}%;width:max(4px,{step_w:.4f}%);"
            f'transform:translateX(-50%);border:1.6px solid #111;box-sizing:border-box;pointer-events:none"></div>'
            f'<div class="cgviz-timeline-marker-arrow" style="position:absolute;left:{x(i):.4f}%;top:{bottom:.3f}%;'
            f'transform:translateX(-50%);font-size:10px;line-height:10px;color:#111;pointer-events:none">▲</div>'
        )
        natural = _svg_width_px(base)
        limit = f"max-width:{natural:.0f}px;" if natural else ""
        return (
            '<div class="cgviz-timeline-pane" style="max-width:100%">'
            f'<div style="position:relative;{limit}line-height:0">{_fit(base, stretch=True)}{marker}</div></div>'
        )

    # -- states without a step ---------------------------------------------------------------
    def _show_empty(self) -> None:
        self._index = None
        self._selected = None
        with self._sync():
            self.slider.value = 0
            if self._options:
                self.node_select.options = ()
                self._options = ()
            self.node_select.disabled = True
        self._update_buttons()
        if self.tree is not None and getattr(self.tree, "trace_level", "full") is None:
            hint = "this tree records nothing (trace=None): make it with trace=\"full\" to explore it"
        elif self.workload is not None:
            hint = "press “run next call”"
        elif self.tree is not None:
            hint = "call a function of the tree: its steps appear here"
        else:
            hint = "this trace is empty"
        self.headline.value = (
            f'<div class="cgviz-headline" style="font-size:15px;font-weight:600;padding:2px 0">{NO_STEPS}</div>'
        )
        self.reason.value = f'<div class="cgviz-reason" style="color:{_MUTED};font-size:13px">{_e(hint)}</div>'
        self.banner.value = ""
        self.banner.layout.display = "none"
        message = _note(NO_STEPS)
        self.tree_html.value = message
        self.table_html.value = message
        self.pool_html.value = message
        self.timeline_html.value = message
        self._timeline_key = None
        self._dirty = False

    def _sync_slider(self) -> None:
        n = len(self.trace.steps)
        with self._sync():
            top = max(0, n - 1)
            if self.slider.value > top:
                self.slider.value = top
            self.slider.max = top
            self.slider.disabled = n <= 1
        self._update_buttons()

    def _update_buttons(self) -> None:
        n = len(self.trace.steps)
        i = self._index
        at_start = i is None or i <= 0
        at_end = i is None or i >= n - 1
        self.first_button.disabled = at_start
        self.prev_button.disabled = at_start
        self.next_button.disabled = at_end
        self.last_button.disabled = at_end

    # -- errors ------------------------------------------------------------------------------
    def _show_error(self, title: str, exc: BaseException) -> None:
        self.last_error = exc
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.error_html.value = (
            f'<div class="cgviz-error" style="padding:6px 10px;margin:2px 0;border-radius:4px;background:#fdecea;'
            f'border-left:4px solid {_ALERT};font-size:13px;color:#611a15"><b>{_e(title)}</b>: '
            f"{_e(type(exc).__name__)}: {_e(exc)}"
            f'<details><summary style="cursor:pointer">traceback</summary>'
            f'<pre style="font-size:11px;white-space:pre-wrap">{_e(tb)}</pre></details></div>'
        )
        self.error_html.layout.display = None

    def _clear_error(self) -> None:
        self.error_html.value = ""
        self.error_html.layout.display = "none"

    def _guard(self, action: Callable[[], Any]) -> None:
        try:
            action()
        except Exception as exc:
            self._show_error("the explorer could not show that step", exc)

    # -- widget events -----------------------------------------------------------------------
    def _sync(self):
        explorer = self

        class _Sync:
            def __enter__(self):
                explorer._syncing += 1

            def __exit__(self, *exc):
                explorer._syncing -= 1

        return _Sync()

    def _on_slider(self, change: dict) -> None:
        if self._syncing or not self.trace.steps:
            return
        self._guard(lambda: self.go(int(change["new"])))

    def _on_select(self, change: dict) -> None:
        if self._syncing:
            return
        self._guard(lambda: self.select(change["new"]))


_IDS = itertools.count(1)

_STYLE_RE = re.compile(r"<style>.*?</style>|<div class=\"cgviz-(?:note|pool-highlight)\".*?</div>", re.S)


def _strip_style(picture: str) -> str:
    """A pool pane without its highlight and notes (kept on screen while the next is drawn)."""
    return _STYLE_RE.sub("", picture)


def _pool_content(snap: Snapshot) -> tuple:
    """Everything the pool view draws from a snapshot: segments and blocks, which outputs
    exist and are live, and the nodes' functions (for the legend)."""
    segments = tuple(
        (s.address, s.size, s.kind, tuple((b.address, b.size, b.allocated, b.requested, b.owner, b.node, b.output)
                                          for b in s.blocks))
        for s in snap.segments
    )
    nodes = tuple((n.id, n.function, tuple(o.state == "live" for o in n.outputs)) for n in snap.nodes)
    return segments, nodes


def _node_label(node: NodeView) -> str:
    return f"node {node.id} · {node.function} ({node.kind})"


def _duration(step: Step) -> str:
    seconds = step.duration
    if seconds >= 1:
        return f"took {seconds:.2f} s"
    if seconds >= 1e-3:
        return f"took {seconds * 1e3:.1f} ms"
    return f"took {seconds * 1e6:.0f} µs"
