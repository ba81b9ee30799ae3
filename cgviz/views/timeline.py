"""The timeline view: a trace's steps as a strip of ticks, one per step (matplotlib).

    fig = timeline_figure(trace, current=12)
    svg = timeline_svg(trace, current=12)   # deterministic SVG text
    png = timeline_png(trace)               # PNG bytes

Each stored step is a thin bar at its index, coloured by kind (`STEP_COLORS`: warmup
orange, record blue, execute green, …; the legend lists the kinds present). A folded
block of repeated steps (a replay loop stored once with a repeat count) is not expanded:
its stored steps sit on a hatched band labelled "×N" (and the generations it covers, when
the loop starts new ones). A dashed vertical line with "gen N" marks where generation N
begins. The current step gets a dark outline and a ▲ under it, and its headline goes in
the title.

A merged multi-rank trace, a trace of trees on several devices, and one that holds steps of
CUDA graphs made outside the trees beside tree steps, get a lane per tree (and one for the
graphs): `cgviz.views.timeline_lanes`. Each lane has its own generation lines, bands and
labels (the labels where lanes are tall enough for them), and the ▲ goes under the lanes; no
generation line or label is drawn in a lane of CUDA graphs' steps alone, since a plain CUDA
graph has no generations.

This module puts the figure together. What is drawn for each step is data first
(`cgviz.views.timeline_data`: `timeline_items`, `timeline_folds`, `timeline_generations`); the
artists (a handful of collections however many steps, an image row per lane when steps are
under two pixels wide) are `cgviz.views.timeline_draw`'s, the title and legend
`cgviz.views.timeline_legend`'s. In the SVG each tick is a `<g id="step-<index>">` with the
step's headline as its `<title>`, while steps are drawn one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Union

from cgviz.views.style import MUTED_TEXT, STEP_COLORS, TEXT_COLOR
from cgviz.views.svg_output import figure_png, figure_svg, literal_texts
from cgviz.views.timeline_data import timeline_folds, timeline_items, trace_steps
from cgviz.views.timeline_draw import (
    MAX_STEP_IDS,
    Taken,
    draw_current,
    draw_dense,
    draw_folds,
    draw_generations,
    draw_ticks,
    x_axis,
)
from cgviz.views.timeline_lanes import ONE_LANE, lane_items, lane_rows, lanes_of, margins, name_lanes
from cgviz.views.timeline_legend import draw_legend, step_headline, timeline_title

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cgviz.trace.model import Step, Trace

__all__ = ["timeline_figure", "timeline_svg", "timeline_png"]

_MIN_VISIBLE_STEPS = 10  # a short trace is drawn on at least this many step slots


def timeline_figure(
    trace: Union["Trace", Sequence["Step"], None],
    current: Optional[int] = None,
    *,
    figsize: Optional[tuple[float, float]] = None,
) -> "Figure":
    """The steps of `trace` as a matplotlib Figure (made directly, no pyplot state).

    `current` is a position in ``trace.steps`` (the step shown now); None: no marker. The
    drawn ticks are `timeline_items(trace)`, also kept as ``fig.cgviz_items``. Artists
    carry gids: ``timeline-steps`` (a PolyCollection, one rectangle per step; or, when
    steps are under two pixels wide, ``timeline-steps-dense``: an image with one pixel
    column per group of steps, showing the most notable kind in it, errors first),
    ``timeline-folds``, ``timeline-generations``, ``timeline-current``; their axes is
    ``timeline-axes`` (x: step index, ticks between y = 0 and 1; in a merged trace, one lane
    per rank, "rank N" its y tick label at the middle of its ticks).
    """
    from matplotlib.figure import Figure

    steps = trace_steps(trace)
    items = timeline_items(steps)
    n = len(items)
    if current is not None and not 0 <= current < n:
        raise ValueError(f"current step {current} is out of range: the trace has {n} step{'s' * (n != 1)}")
    width_in, height_in = figsize if figsize else (10.0, 2.2)
    fig = Figure(figsize=(width_in, height_in))
    fig.cgviz_items = items  # type: ignore[attr-defined]
    if n == 0:
        ax = fig.add_axes((0, 0, 1, 0.8))
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no steps yet: call a function of the tree to record one", ha="center", va="center",
                fontsize=10, color=MUTED_TEXT, transform=ax.transAxes)
        fig.text(0.02, 0.95, "Timeline: 0 steps", fontsize=10, color=TEXT_COLOR, va="top", ha="left")
        return literal_texts(fig)

    ranks = lanes_of(items)
    left_in, right_in, top_in, bottom_in = margins(ranks, current)
    axis_w_in = width_in - left_in - right_in
    axis_h = max(0.1, (height_in - top_in - bottom_in) / height_in)
    ax = fig.add_axes((left_in / width_in, bottom_in / height_in, axis_w_in / width_in, axis_h))
    ax.set_gid("timeline-axes")  # the steps' axes, dense or not (x: step index, ticks at y 0..1)
    rows = ONE_LANE if ranks == [None] else lane_rows(ranks, axis_h * height_in * 100)
    slots = max(n, _MIN_VISIBLE_STEPS)
    ax.set_ylim(*rows.ylim)
    name_lanes(ax, rows)
    x_axis(ax, n, slots)
    px_per_step = axis_w_in * 100 / slots  # at 100 dpi
    dense = px_per_step < 2
    lanes = lane_items(items, rows)
    lane_of = [0] * n
    for k, lane in enumerate(lanes):
        for it in lane:
            lane_of[it["index"]] = k
    taken: Taken = {}

    folds = timeline_folds(items)
    if folds:
        draw_folds(ax, folds, lane_of, rows, px_per_step, dense, taken)
    pad = 0.36 if px_per_step >= 4 else 0.5
    if not dense:
        draw_ticks(ax, items, lane_of, rows, pad, px_per_step)
    else:
        draw_dense(ax, lanes, rows, max(1, int(round(axis_w_in * 100))), slots)
    gens = draw_generations(ax, lanes, rows, px_per_step, axis_w_in * 100, dense, taken)
    if current is not None:
        draw_current(ax, current, rows.bases[lane_of[current]], rows, pad, px_per_step)

    fig.text(left_in / width_in, 1 - 0.08 / height_in, timeline_title(items, folds, ranks), fontsize=10,
             color=TEXT_COLOR, va="top", ha="left")
    if current is not None:
        fig.text(left_in / width_in, 1 - 0.32 / height_in, f"step {current + 1}: {step_headline(steps[current])}",
                 fontsize=8, color=TEXT_COLOR, va="top", ha="left")
    kinds = {it["kind"] for it in items}
    present = [k for k in STEP_COLORS if k in kinds] + sorted(kinds - set(STEP_COLORS))
    draw_legend(fig, present, bool(folds), gens, left_in / width_in)
    return literal_texts(fig)  # names from the trace drawn as they are: "$x^2$" is no formula


def timeline_svg(trace: Union["Trace", Sequence["Step"], None], current: Optional[int] = None, **kw) -> str:
    """`timeline_figure(trace, current, **kw)` as SVG text (deterministic).

    While steps are drawn one by one (and up to 2,000 of them), each is a
    `<g id="step-<index>">` whose `<title>` is the step's headline.
    """
    steps = trace_steps(trace)
    titles = {}
    if len(steps) <= MAX_STEP_IDS:
        titles = {f"step-{i}": f"step {i + 1}: {step_headline(s)}" for i, s in enumerate(steps)}  # counted from 1
    return figure_svg(timeline_figure(trace, current, **kw), titles)


def timeline_png(trace: Union["Trace", Sequence["Step"], None], current: Optional[int] = None, *,
                 dpi: float = 100, **kw) -> bytes:
    """`timeline_figure(trace, current, **kw)` as PNG bytes."""
    return figure_png(timeline_figure(trace, current, **kw), dpi=dpi)
