"""The timeline view: a trace's steps as a strip of ticks, one per step (matplotlib).

    items = timeline_items(trace)           # what is drawn for each step, as data
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

`timeline_items` is the single source of truth for the ticks (`timeline_folds` and
`timeline_generations` derive the bands and lines from it): the figure draws exactly
those, as one `PolyCollection` of ticks, one of bands and one `LineCollection` of
generation lines, so 10,000 steps cost a handful of artists. When steps get narrower
than two pixels (over ~470 steps at the default width) the ticks become one image row,
one pixel column per group of steps showing the most notable kind among them (`error`
first, then `eager`, `record`, `warmup`, …; see `_DENSE_PRIORITY`): a lone error in
10,000 steps stays visible. Labels ("×N", "gen N") are thinned so that they never
overlap, and when generation boundaries are closer than six pixels only the labelled
ones get a line. In the SVG each tick is a `<g id="step-<index>">` with the step's headline as
its `<title>`, while steps are drawn one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Union

from cgviz.views.style import MUTED_TEXT, STEP_COLORS, STEP_LABELS, TEXT_COLOR, step_color, text_color_on
from cgviz.views.svg_output import figure_png, figure_svg

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cgviz.trace.model import Step, Trace

__all__ = [
    "timeline_items",
    "timeline_folds",
    "timeline_generations",
    "timeline_figure",
    "timeline_svg",
    "timeline_png",
]

_FOLD_FACE = "#eef1f4"
_FOLD_HATCH_COLOR = "#9aa5b1"
_GEN_LINE = "#3e4c59"
_CURRENT = "#111111"
_MIN_VISIBLE_STEPS = 10  # a short trace is drawn on at least this many step slots
_MAX_FOLD_LABELS = 20
_MAX_STEP_IDS = 2000  # per-step SVG ids only up to this many steps
#: When steps are under two pixels wide, the kind shown for a pixel's steps: the first here.
_DENSE_PRIORITY = ("error", "eager", "record", "warmup", "checkpoint_restore", "execute", "generation", "path_end")


def _steps(trace: Union["Trace", Sequence["Step"], None]) -> Sequence["Step"]:
    if trace is None:
        return []
    return trace.steps if hasattr(trace, "steps") else trace


def timeline_items(trace: Union["Trace", Sequence["Step"], None]) -> list[dict]:
    """One dict per stored step, in order: what the timeline draws for it.

    ``index`` (position in ``trace.steps``, the x coordinate), ``step_index`` (the step's
    own index field), ``kind``, ``color`` (`STEP_COLORS`), ``repeat`` and ``span`` (a
    folded block ends at this step), ``generation``, ``function``, ``node``.
    """
    return [
        {
            "index": i,
            "step_index": s.index,
            "kind": s.kind,
            "color": step_color(s.kind),
            "repeat": s.repeat,
            "span": s.span,
            "generation": s.generation,
            "function": s.function,
            "node": s.node,
        }
        for i, s in enumerate(_steps(trace))
    ]


def timeline_folds(items: list[dict]) -> list[dict]:
    """The folded blocks: ``start``..``end`` (step positions, inclusive), ``repeat``,
    ``span``, ``generations`` (first, last) the repeats cover, and the ``label`` drawn."""
    folds = []
    for it in items:
        if it["repeat"] <= 1:
            continue
        end = it["index"]
        start = max(0, end - it["span"] + 1)
        inside = items[start : end + 1]
        first = inside[0]["generation"]
        new_gens = sum(1 for x in inside if x["kind"] == "generation")
        last = max(x["generation"] for x in inside) + new_gens * (it["repeat"] - 1)
        label = f"×{it['repeat']}"
        if last != first:
            label += f" · gen {first}–{last}"
        folds.append({"start": start, "end": end, "repeat": it["repeat"], "span": it["span"],
                      "generations": (first, last), "label": label})
    return folds


def timeline_generations(items: list[dict]) -> list[dict]:
    """Generation boundaries: a new generation begins at step ``index`` (the line is drawn
    at ``x`` = index - 0.5), labelled ``label`` = 'gen N'."""
    out = []
    for prev, it in zip(items, items[1:]):
        if it["generation"] != prev["generation"]:
            out.append({"index": it["index"], "x": it["index"] - 0.5, "generation": it["generation"],
                        "label": f"gen {it['generation']}"})
    return out


def _thin(xs: list[float], min_gap: float) -> list[int]:
    """Indices of xs (sorted) to label so that labels are at least min_gap apart."""
    keep = []
    last = None
    for i, x in enumerate(xs):
        if last is None or x - last >= min_gap:
            keep.append(i)
            last = x
    return keep


def _label_steps(px_per_step: float, chars: int, points: float) -> float:
    """How many steps a label of `chars` characters at `points` covers (at 100 dpi)."""
    return (chars + 1) * points * 0.68 / 72 * 100 / px_per_step


def _headline(step: "Step") -> str:
    try:
        return step.headline()
    except Exception:  # a view never fails on a step it cannot describe
        return step.kind


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
    ``timeline-axes`` (x: step index, ticks between y = 0 and 1).
    """
    import numpy as np
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.colors import to_rgba_array
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    steps = _steps(trace)
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
        return fig

    folds = timeline_folds(items)
    gens = timeline_generations(items)
    kinds = [it["kind"] for it in items]
    present = [k for k in STEP_COLORS if k in set(kinds)] + sorted(set(kinds) - set(STEP_COLORS))

    # vertical layout, in data units: ticks 0..1, fold bands and their "×N" above them,
    # generation lines with "gen N" over the top, the current-step ▲ under the ticks
    left_in, right_in, top_in, bottom_in = 0.35, 0.25, 0.72, 0.72
    axis_w_in = width_in - left_in - right_in
    ax = fig.add_axes((left_in / width_in, bottom_in / height_in, axis_w_in / width_in,
                       max(0.1, (height_in - top_in - bottom_in) / height_in)))
    ax.set_gid("timeline-axes")  # the steps' axes, dense or not (x: step index, ticks at y 0..1)
    slots = max(n, _MIN_VISIBLE_STEPS)
    ax.set_xlim(-0.5, slots - 0.5)
    ax.set_ylim(-0.42, 1.62)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.spines["bottom"].set_color("#9aa5b1")
    # x ticks and the axis line only under the steps there are; steps counted from 1, as the
    # explorer's step list and headline count them
    nice = [int(v) for v in MaxNLocator(nbins=12, integer=True, min_n_ticks=1).tick_values(1, max(n, 2)) if 1 <= v <= n]
    ax.set_xticks([v - 1 for v in nice], [str(v) for v in nice])
    ax.spines["bottom"].set_bounds(-0.5, n - 0.5)
    ax.tick_params(axis="x", labelsize=7.5, colors=MUTED_TEXT, length=3)
    ax.set_xlabel("step", fontsize=7.5, color=MUTED_TEXT, labelpad=1)
    px_per_step = axis_w_in * 100 / slots  # at 100 dpi
    dense = px_per_step < 2

    # folded blocks: a hatched band behind their steps, "×N" on top
    if folds:
        s0 = np.array([f["start"] for f in folds], dtype=float) - 0.5
        s1 = np.array([f["end"] for f in folds], dtype=float) + 0.5
        lo, hi = np.full(len(folds), -0.1), np.full(len(folds), 1.38)
        verts = np.stack([np.stack([s0, lo], 1), np.stack([s1, lo], 1), np.stack([s1, hi], 1),
                          np.stack([s0, hi], 1)], 1)
        bands = PolyCollection(verts, facecolors=_FOLD_FACE, edgecolors=_FOLD_HATCH_COLOR, linewidths=0.6,
                               zorder=1, **({} if dense else {"hatch": "////"}))
        if not dense and hasattr(bands, "set_hatchcolor"):  # matplotlib >= 3.10
            bands.set_hatchcolor(_FOLD_HATCH_COLOR)
            bands.set_hatch_linewidth(0.6)
        bands.set_gid("timeline-folds")
        ax.add_collection(bands)
        # the biggest repeats first (equal ones spread along the strip), never overlapping,
        # at most _MAX_FOLD_LABELS
        stride = -(-len(folds) // _MAX_FOLD_LABELS)
        order = sorted(range(len(folds)), key=lambda i: (-folds[i]["repeat"], i % stride, i))
        taken: list[tuple[float, float]] = []
        for i in order:
            if len(taken) >= _MAX_FOLD_LABELS:
                break
            f = folds[i]
            mid = (f["start"] + f["end"]) / 2
            half = _label_steps(px_per_step, len(f["label"]), 7.0) / 2
            if any(a < mid + half and mid - half < b for a, b in taken):
                continue
            taken.append((mid - half, mid + half))
            ax.text(mid, 1.07, f["label"], ha="center", va="bottom", fontsize=7, fontweight="bold",
                    color=TEXT_COLOR, zorder=4, clip_on=False)

    # the ticks
    pad = 0.36 if px_per_step >= 4 else 0.5
    if not dense:
        x = np.arange(n, dtype=float)
        lo, hi = np.zeros(n), np.ones(n)
        verts = np.stack([np.stack([x - pad, lo], 1), np.stack([x + pad, lo], 1), np.stack([x + pad, hi], 1),
                          np.stack([x - pad, hi], 1)], 1)
        table = {k: c for k, c in zip(present, to_rgba_array([step_color(k) for k in present]))}
        ticks = PolyCollection(verts, facecolors=np.array([table[k] for k in kinds]), edgecolors="none",
                               zorder=2, antialiased=px_per_step >= 4)
        ticks.set_gid("timeline-steps")
        if n <= _MAX_STEP_IDS:
            ticks.set_urls([f"#step-{i}" for i in range(n)])
        ax.add_collection(ticks)
        # the function's name in the tick when there is room (shortened with … if need be)
        if px_per_step >= 24:
            fits = int((2 * pad * px_per_step - 4) / (7 * 0.62 / 72 * 100))
            for it in items:
                name = it["function"]
                if not name or fits < 3:
                    continue
                if len(name) > fits:
                    name = name[: fits - 1] + "…"
                ax.text(it["index"], 0.5, name, ha="center", va="center", fontsize=7, zorder=3,
                        color=text_color_on(it["color"]), clip_on=True)
    else:
        # one pixel column per group of steps: the most notable kind in the group wins
        cols = max(1, int(round(axis_w_in * 100)))
        col = np.minimum(((np.arange(n) + 0.5) * cols / slots).astype(int), cols - 1)
        rank = {k: r for r, k in enumerate(reversed(_DENSE_PRIORITY))}
        prio = np.array([rank.get(k, -1) for k in kinds])
        best = np.full(cols, -2)
        np.maximum.at(best, col, prio)
        palette = to_rgba_array([step_color(k) for k in reversed(_DENSE_PRIORITY)] + ["#7f7f7f", "#ffffff00"])
        image = palette[np.where(best >= 0, best, np.where(best == -1, len(palette) - 2, len(palette) - 1))]
        im = ax.imshow(image[np.newaxis], extent=(-0.5, slots - 0.5, 0, 1), aspect="auto", interpolation="nearest",
                       zorder=2)
        im.set_gid("timeline-steps-dense")

    # generation boundaries
    if gens:
        labelled = _thin([g["x"] for g in gens], _label_steps(px_per_step, max(len(g["label"]) for g in gens), 6.5))
        if dense and len(gens) > axis_w_in * 100 / 6:
            # more boundaries than one per 6 pixels would only be a grey texture: draw the labelled ones
            gens = [gens[i] for i in labelled]
            labelled = list(range(len(gens)))
        gx = np.array([g["x"] for g in gens])
        segs = np.stack([np.stack([gx, np.full(len(gx), -0.3)], 1), np.stack([gx, np.full(len(gx), 1.62)], 1)], 1)
        # over the ticks when they are few; behind them when dense, where the lines would hide them
        lines = LineCollection(segs, colors=_GEN_LINE, linewidths=0.9 if not dense else 0.6,
                               linestyles=(0, (3, 2)), alpha=1.0 if not dense else 0.5, zorder=3 if not dense else 1.5)
        lines.set_gid("timeline-generations")
        ax.add_collection(lines)
        for i in labelled:
            g = gens[i]
            ax.text(g["x"], 1.64, g["label"], ha="center", va="bottom", fontsize=6.5, color=_GEN_LINE, zorder=4,
                    clip_on=False)
    # the generation the trace starts in, unless a boundary label is right there
    if not gens or gens[0]["x"] + 0.5 > _label_steps(px_per_step, 12, 6.5):
        ax.text(-0.5, 1.64, f"gen {items[0]['generation']}", ha="left", va="bottom", fontsize=6.5,
                color=MUTED_TEXT, zorder=4, clip_on=False)

    # the current step
    headline = ""
    if current is not None:
        w = max(pad, 1.5 / px_per_step)  # at least ~3 px wide
        box = Rectangle((current - w - 0.06, -0.05), 2 * w + 0.12, 1.1, facecolor="none", edgecolor=_CURRENT,
                        linewidth=1.6, zorder=5)
        box.set_gid("timeline-current")
        ax.add_patch(box)
        marker = Line2D([current], [-0.2], marker="^", markersize=7, color=_CURRENT, linestyle="none", zorder=5)
        marker.set_gid("timeline-current-marker")
        ax.add_line(marker)
        headline = f"step {current}: {_headline(steps[current])}"

    # titles and legend
    times = [1] * n
    for f in folds:
        for k in range(f["start"], f["end"] + 1):
            times[k] = f["repeat"]
    calls = sum(times)
    title = f"Timeline: {n} step{'s' * (n != 1)}"
    if calls != n:
        title += f" ({calls} with repeats)"
    fig.text(left_in / width_in, 1 - 0.08 / height_in, title, fontsize=10, color=TEXT_COLOR, va="top", ha="left")
    if headline:
        fig.text(left_in / width_in, 1 - 0.32 / height_in, headline, fontsize=8, color=TEXT_COLOR, va="top",
                 ha="left")
    handles = [Patch(facecolor=step_color(k), edgecolor="none", label=STEP_LABELS.get(k, k)) for k in present]
    if folds:
        handles.append(Patch(facecolor=_FOLD_FACE, edgecolor=_FOLD_HATCH_COLOR, hatch="////", linewidth=0.6,
                             label="repeated block"))
    if gens:
        handles.append(Line2D([], [], color=_GEN_LINE, linewidth=0.9, linestyle=(0, (3, 2)),
                              label="generation boundary"))
    ncol = len(handles) if len(handles) <= 6 else (len(handles) + 1) // 2
    legend = fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(left_in / width_in, 0.02), ncol=ncol,
                        fontsize=7.5, frameon=False, handlelength=1.3, handleheight=0.9, columnspacing=1.2,
                        borderaxespad=0, labelspacing=0.3)
    legend.set_gid("timeline-legend")
    return fig


def timeline_svg(trace: Union["Trace", Sequence["Step"], None], current: Optional[int] = None, **kw) -> str:
    """`timeline_figure(trace, current, **kw)` as SVG text (deterministic).

    While steps are drawn one by one (and up to 2,000 of them), each is a
    `<g id="step-<index>">` whose `<title>` is the step's headline.
    """
    steps = _steps(trace)
    titles = {}
    if len(steps) <= _MAX_STEP_IDS:
        titles = {f"step-{i}": f"step {i}: {_headline(s)}" for i, s in enumerate(steps)}
    return figure_svg(timeline_figure(trace, current, **kw), titles)


def timeline_png(trace: Union["Trace", Sequence["Step"], None], current: Optional[int] = None, *,
                 dpi: float = 100, **kw) -> bytes:
    """`timeline_figure(trace, current, **kw)` as PNG bytes."""
    return figure_png(timeline_figure(trace, current, **kw), dpi=dpi)
