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

A merged multi-rank trace (`cgviz.merge`: its steps carry a rank) gets one lane per rank,
"rank N" on its left, rank 0 on top: each step's tick is in its rank's lane at the same x (its
position in the merged order), each lane has its own generation lines, bands and labels (the
labels where lanes are tall enough for them), and the ▲ goes under the lanes. So does a trace of trees
on several devices of one process (its steps carry a device: "cuda:1" names the lane), and of
both ("rank 1 · cuda:1"). A trace that holds steps of CUDA graphs made outside the trees
(capture, replay, destroy: `cgviz.observe_graphs`) beside tree steps gets one more lane, "CUDA
graphs", under the trees' (one tree's lane is then named "tree"); no generation line or label is
drawn in a lane of such steps alone, since a plain CUDA graph has no generations.

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

import math
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence, Union

from cgviz.trace.lanes import TreeKey, in_tree_order, tree_name
from cgviz.trace.model import GRAPH_STEP_KINDS

from cgviz.views.style import MUTED_TEXT, STEP_COLORS, STEP_LABELS, TEXT_COLOR, step_color, text_color_on
from cgviz.views.svg_output import figure_png, figure_svg, literal_texts
from cgviz.views.text import GRAPHS_LANE, TREE_LANE, shown

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes
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
_DENSE_PRIORITY = ("error", "eager", "compile", "record", "capture", "warmup", "checkpoint_restore", "execute",
                   "replay", "destroy", "generation", "path_end")
# Lanes of a merged trace (one per rank), at 100 dpi: the ▲'s room under them, the gap over a
# lane that holds its "×N" and "gen N", the lane height from which they get one, the names' size.
_LANE_BELOW_PX = 12
_LANE_LABEL_PX = 12
_LANE_LABELS_MIN_PX = 25
_LANE_NAME_PT = 7.0
_LANE_NAME_MIN_PT = 5.0
# an item's "lane": the steps of CUDA graphs made outside the trees, or of a tree; and the lane key
# of the one tree where a trace holds both (several trees keep their (rank, device) keys)
_GRAPHS = "graphs"
_TREE = "tree"
#: A lane: None (the only one), a tree's (rank, device), `_TREE` or `_GRAPHS`.
_Lane = Union[None, TreeKey, str]


def _steps(trace: Union["Trace", Sequence["Step"], None]) -> Sequence["Step"]:
    if trace is None:
        return []
    return trace.steps if hasattr(trace, "steps") else trace


def timeline_items(trace: Union["Trace", Sequence["Step"], None]) -> list[dict]:
    """One dict per stored step, in order: what the timeline draws for it.

    ``index`` (position in ``trace.steps``, the x coordinate), ``step_index`` (the step's
    own index field), ``kind``, ``color`` (`STEP_COLORS`), ``repeat`` and ``span`` (a
    folded block ends at this step), ``generation``, ``function``, ``node``, ``rank`` (None
    but in a merged multi-rank trace), ``device`` (None but where one process ran trees on
    several devices), ``graph`` (the CUDA graph a capture, replay or destroy step is about, else
    None) and ``lane``: "graphs" for such a step, "tree" for the others.
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
            "rank": s.rank,
            "device": s.device,
            "graph": s.graph,
            "lane": _GRAPHS if s.kind in GRAPH_STEP_KINDS else _TREE,
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
        return shown(step.headline())
    except Exception:  # a view never fails on a step it cannot describe
        return step.kind


class _Rows(NamedTuple):
    """The vertical layout, in data units: lane k (tree ``ranks[k]``: rank and device) has its ticks from
    ``bases[k]`` to ``bases[k] + 1``; ``band`` and ``gen_span``: a fold band's and a generation
    line's extent around them; ``fold_y``, ``gen_y``: where "×N" and "gen N" go (None: no room);
    ``marker_y``: the current step's ▲; ``names``: ticks tall enough for a function's name."""

    ranks: list[_Lane]
    bases: list[float]
    ylim: tuple[float, float]
    band: tuple[float, float]
    gen_span: tuple[float, float]
    fold_y: Optional[float]
    gen_y: Optional[float]
    marker_y: float
    names: bool


#: A trace of one rank: one lane, its labels over it and "gen N" above the axes.
_ONE_LANE = _Rows([None], [0.0], (-0.42, 1.62), (-0.1, 1.38), (-0.3, 1.62), 1.07, 1.64, -0.2, True)


def _lanes(items: list[dict]) -> list[_Lane]:
    """The lanes, top to bottom: [None] (one lane) unless the steps carry ranks or devices
    (`cgviz.trace.lanes`: a lane per tree) or hold both tree steps and CUDA graphs' (the graphs'
    lane last)."""
    trees = [it for it in items if it["lane"] == _TREE]
    keys = in_tree_order((it["rank"], it["device"]) for it in trees)
    lanes: list[_Lane] = [None] if keys in ([], [(None, None)]) else list(keys)
    if not trees or len(trees) == len(items):
        return lanes
    return ([_TREE] if lanes == [None] else lanes) + [_GRAPHS]


def _item_lane(item: dict, lanes: list[_Lane]) -> _Lane:
    """The lane an item is drawn in, among `lanes` (`_lanes`)."""
    if lanes == [None]:
        return None
    if item["lane"] == _GRAPHS:
        return _GRAPHS
    return _TREE if _TREE in lanes else (item["rank"], item["device"])


def _lane_name(key: _Lane) -> str:
    if key == _GRAPHS:
        return GRAPHS_LANE
    if key == _TREE:
        return TREE_LANE
    return shown(tree_name(key or (None, None)))


def _margins(ranks: list[_Lane], current: Optional[int]) -> tuple[float, float, float, float]:
    """Left, right, top, bottom margins in inches. Lanes take room on the left for their names;
    their labels sit between them, so only the title (and headline) needs room on top."""
    if ranks == [None]:
        return 0.35, 0.25, 0.72, 0.72
    chars = max(len(_lane_name(r)) for r in ranks)
    return 0.14 + chars * _LANE_NAME_PT * 0.6 / 72, 0.25, 0.3 + (0.22 if current is not None else 0), 0.72


def _lane_rows(ranks: list[_Lane], height_px: float) -> _Rows:
    """Lanes sharing `height_px` (the axes' height at 100 dpi): the ▲'s room under them, then each
    lane's ticks with a gap over them, tall enough for labels where the lanes are."""
    lane_px = max(1.0, (height_px - _LANE_BELOW_PX) / len(ranks))
    labels = lane_px >= _LANE_LABELS_MIN_PX
    tick_px = max(1.0, lane_px - (_LANE_LABEL_PX if labels else max(2.0, 0.3 * lane_px)))
    pitch = lane_px / tick_px  # data units: a tick is 1 high
    bases = [(len(ranks) - 1 - k) * pitch for k in range(len(ranks))]
    label_y = 1.07 if labels else None
    return _Rows(ranks, bases, (-_LANE_BELOW_PX / tick_px, len(ranks) * pitch), (-0.08, 1.08), (-0.15, 1.06),
                 label_y, label_y, -_LANE_BELOW_PX / 2 / tick_px, tick_px >= 10)


def _lane_items(items: list[dict], rows: _Rows) -> list[list[dict]]:
    """The items of each lane, in order."""
    if rows.ranks == [None]:
        return [items]
    return [[it for it in items if _item_lane(it, rows.ranks) == key] for key in rows.ranks]


def _name_lanes(ax: "Axes", rows: _Rows) -> None:
    """"rank N" left of each lane, as y tick labels (every other one, or fewer, where lanes are
    thinner than the smallest readable name); none for a trace of one rank."""
    if rows.ranks == [None]:
        ax.set_yticks([])
        return
    spacing_pt = (rows.bases[0] - rows.bases[1]) * _px_per_unit(ax) * 0.72 if len(rows.bases) > 1 else _LANE_NAME_PT
    size = min(_LANE_NAME_PT, max(_LANE_NAME_MIN_PT, spacing_pt))
    every = math.ceil(size / spacing_pt)
    named = range(0, len(rows.ranks), every)
    ax.set_yticks([rows.bases[k] + 0.5 for k in named], [_lane_name(rows.ranks[k]) for k in named])
    ax.tick_params(axis="y", length=0, pad=3, labelsize=size, labelcolor=TEXT_COLOR)


def _px_per_unit(ax: "Axes") -> float:
    """Pixels (at 100 dpi) per data unit of y."""
    y0, y1 = ax.get_ylim()
    return ax.get_position().height * ax.figure.get_figheight() * 100 / (y1 - y0)


def _rects(x0: "np.ndarray", x1: "np.ndarray", y0: "np.ndarray", y1: "np.ndarray") -> "np.ndarray":
    """Rectangles as a PolyCollection's vertices."""
    import numpy as np

    return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)


#: (lane, label y) -> the x spans that labels there take up.
_Taken = dict[tuple[int, float], list[tuple[float, float]]]


def _free(taken: list[tuple[float, float]], a: float, b: float) -> bool:
    return not any(x < b and a < y for x, y in taken)


def _draw_folds(ax: "Axes", folds: list[dict], lane_of: list[int], rows: _Rows, px_per_step: float, dense: bool,
                taken: _Taken) -> None:
    """A hatched band behind each folded block's steps (in its lane), "×N" over it: the biggest
    repeats first (equal ones spread along the strip), never overlapping, at most
    `_MAX_FOLD_LABELS` per lane."""
    import numpy as np
    from matplotlib.collections import PolyCollection

    # a block of one process's trees on several devices (a loop over them) spans their lanes
    spans = [[rows.bases[lane_of[j]] for j in range(f["start"], f["end"] + 1)] for f in folds]
    low, high = np.array([min(b) for b in spans]), np.array([max(b) for b in spans])
    s0 = np.array([f["start"] for f in folds], dtype=float) - 0.5
    s1 = np.array([f["end"] for f in folds], dtype=float) + 0.5
    bands = PolyCollection(_rects(s0, s1, low + rows.band[0], high + rows.band[1]), facecolors=_FOLD_FACE,
                           edgecolors=_FOLD_HATCH_COLOR, linewidths=0.6, zorder=1,
                           **({} if dense else {"hatch": "////"}))
    if not dense and hasattr(bands, "set_hatchcolor"):  # matplotlib >= 3.10
        bands.set_hatchcolor(_FOLD_HATCH_COLOR)
        bands.set_hatch_linewidth(0.6)
    bands.set_gid("timeline-folds")
    ax.add_collection(bands)
    if rows.fold_y is None:
        return
    stride = -(-len(folds) // _MAX_FOLD_LABELS)
    order = sorted(range(len(folds)), key=lambda i: (-folds[i]["repeat"], i % stride, i))
    count: dict[int, int] = {}
    for i in order:
        f, lane = folds[i], lane_of[folds[i]["end"]]
        row = taken.setdefault((lane, rows.fold_y), [])
        mid = (f["start"] + f["end"]) / 2
        half = _label_steps(px_per_step, len(f["label"]), 7.0) / 2
        if count.get(lane, 0) >= _MAX_FOLD_LABELS or not _free(row, mid - half, mid + half):
            continue
        count[lane] = count.get(lane, 0) + 1
        row.append((mid - half, mid + half))
        ax.text(mid, rows.bases[lane] + rows.fold_y, f["label"], ha="center", va="bottom", fontsize=7,
                fontweight="bold", color=TEXT_COLOR, zorder=4, clip_on=False)


def _draw_ticks(ax: "Axes", items: list[dict], lane_of: list[int], rows: _Rows, pad: float,
                px_per_step: float) -> None:
    """One rectangle per step in its lane, linked to the step; the function's name in it when
    there is room (shortened with … if need be)."""
    import numpy as np
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba_array

    n = len(items)
    x = np.arange(n, dtype=float)
    lo = np.array([rows.bases[k] for k in lane_of], dtype=float)
    kinds = [it["kind"] for it in items]
    present = list(dict.fromkeys(kinds))
    table = {k: c for k, c in zip(present, to_rgba_array([step_color(k) for k in present]))}
    ticks = PolyCollection(_rects(x - pad, x + pad, lo, lo + 1), facecolors=np.array([table[k] for k in kinds]),
                           edgecolors="none", zorder=2, antialiased=px_per_step >= 4)
    ticks.set_gid("timeline-steps")
    if n <= _MAX_STEP_IDS:
        ticks.set_urls([f"#step-{i}" for i in range(n)])
    ax.add_collection(ticks)
    if px_per_step < 24 or not rows.names:
        return
    fits = int((2 * pad * px_per_step - 4) / (7 * 0.62 / 72 * 100))
    for it, base in zip(items, lo):
        name = shown(it["function"] or "")
        if not name or fits < 3:
            continue
        if len(name) > fits:
            name = name[: fits - 1] + "…"
        ax.text(it["index"], base + 0.5, name, ha="center", va="center", fontsize=7, zorder=3,
                color=text_color_on(it["color"]), clip_on=True)


def _dense_row(lane: list[dict], cols: int, slots: int) -> "np.ndarray":
    """One RGBA pixel per column: the most notable kind among the lane's steps in it (errors
    first, `_DENSE_PRIORITY`), grey for a kind not listed, transparent where there is none."""
    import numpy as np
    from matplotlib.colors import to_rgba_array

    col = np.minimum(((np.array([it["index"] for it in lane], dtype=float) + 0.5) * cols / slots).astype(int),
                     cols - 1)
    order = {k: r for r, k in enumerate(reversed(_DENSE_PRIORITY))}
    prio = np.array([order.get(it["kind"], -1) for it in lane])
    best = np.full(cols, -2)
    np.maximum.at(best, col, prio)
    palette = to_rgba_array([step_color(k) for k in reversed(_DENSE_PRIORITY)] + ["#7f7f7f", "#ffffff00"])
    return palette[np.where(best >= 0, best, np.where(best == -1, len(palette) - 2, len(palette) - 1))]


def _draw_dense(ax: "Axes", lanes: list[list[dict]], rows: _Rows, cols: int, slots: int) -> None:
    """Steps under two pixels wide: one image, a pixel column per group of steps in each lane
    (transparent rows between the lanes)."""
    import numpy as np

    if rows.ranks == [None]:
        im = ax.imshow(_dense_row(lanes[0], cols, slots)[np.newaxis], extent=(-0.5, slots - 0.5, 0, 1),
                       aspect="auto", interpolation="nearest", zorder=2)
    else:
        clear = np.zeros((cols, 4))
        image, edges = [], []
        for lane, base in reversed(list(zip(lanes, rows.bases))):  # bottom up
            image += [clear, _dense_row(lane, cols, slots)]
            edges += [base, base + 1]
        im = ax.pcolorfast(np.linspace(-0.5, slots - 0.5, cols + 1), np.array(edges), np.array(image[1:]), zorder=2)
    im.set_gid("timeline-steps-dense")


def _draw_generations(ax: "Axes", lanes: list[list[dict]], rows: _Rows, px_per_step: float, columns: float,
                      dense: bool, taken: _Taken) -> bool:
    """A dashed line where each lane's generation changes, "gen N" over the lines that have room;
    when boundaries are closer than 6 pixels, only the labelled ones are drawn. Whether any line
    was drawn."""
    from matplotlib.collections import LineCollection

    segs = []
    for k, lane in enumerate(lanes):
        if all(it["lane"] == _GRAPHS for it in lane):  # plain CUDA graphs have no generations
            continue
        base, gens = rows.bases[k], timeline_generations(lane)
        labelled = (_thin([g["x"] for g in gens], _label_steps(px_per_step, max(len(g["label"]) for g in gens), 6.5))
                    if gens else [])
        if dense and len(gens) > columns / 6:
            # more boundaries than one per 6 pixels would only be a grey texture: draw the labelled ones
            gens = [gens[i] for i in labelled]
            labelled = list(range(len(gens)))
        segs += [[(g["x"], base + rows.gen_span[0]), (g["x"], base + rows.gen_span[1])] for g in gens]
        if rows.gen_y is not None:
            _label_generations(ax, lane, [gens[i] for i in labelled], base + rows.gen_y, px_per_step,
                               taken.setdefault((k, rows.gen_y), []))
    if not segs:
        return False
    # over the ticks when they are few; behind them when dense, where the lines would hide them
    lines = LineCollection(segs, colors=_GEN_LINE, linewidths=0.9 if not dense else 0.6, linestyles=(0, (3, 2)),
                           alpha=1.0 if not dense else 0.5, zorder=3 if not dense else 1.5)
    lines.set_gid("timeline-generations")
    ax.add_collection(lines)
    return True


def _label_generations(ax: "Axes", lane: list[dict], labelled: list[dict], y: float, px_per_step: float,
                       taken: list[tuple[float, float]]) -> None:
    """"gen N" over the `labelled` boundaries of a lane, and over its start unless a boundary
    label is right there, each where no other label (`taken`) is."""
    for g in labelled:
        half = _label_steps(px_per_step, len(g["label"]), 6.5) / 2
        if _free(taken, g["x"] - half, g["x"] + half):
            taken.append((g["x"] - half, g["x"] + half))
            ax.text(g["x"], y, g["label"], ha="center", va="bottom", fontsize=6.5, color=_GEN_LINE, zorder=4,
                    clip_on=False)
    x0 = lane[0]["index"] - 0.5
    label = f"gen {lane[0]['generation']}"
    end = x0 + _label_steps(px_per_step, len(label), 6.5)
    first = min((g["x"] for g in labelled), default=None)
    if (first is None or first - x0 > _label_steps(px_per_step, 12, 6.5)) and _free(taken, x0, end):
        taken.append((x0, end))
        ax.text(x0, y, label, ha="left", va="bottom", fontsize=6.5, color=MUTED_TEXT, zorder=4, clip_on=False)


def _draw_current(ax: "Axes", current: int, base: float, rows: _Rows, pad: float, px_per_step: float) -> None:
    """A dark outline round the current step's tick (in its lane), a ▲ under the lanes."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    w = max(pad, 1.5 / px_per_step)  # at least ~3 px wide
    box = Rectangle((current - w - 0.06, base - 0.05), 2 * w + 0.12, 1.1, facecolor="none", edgecolor=_CURRENT,
                    linewidth=1.6, zorder=5)
    box.set_gid("timeline-current")
    ax.add_patch(box)
    marker = Line2D([current], [rows.marker_y], marker="^", markersize=7 if rows.ranks == [None] else 6,
                    color=_CURRENT, linestyle="none", zorder=5)
    marker.set_gid("timeline-current-marker")
    ax.add_line(marker)


def _x_axis(ax: "Axes", n: int, slots: int) -> None:
    """x ticks and the axis line only under the steps there are; steps counted from 1, as the
    explorer's step list and headline count them."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(-0.5, slots - 0.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.spines["bottom"].set_color("#9aa5b1")
    nice = [int(v) for v in MaxNLocator(nbins=12, integer=True, min_n_ticks=1).tick_values(1, max(n, 2)) if 1 <= v <= n]
    ax.set_xticks([v - 1 for v in nice], [str(v) for v in nice])
    ax.spines["bottom"].set_bounds(-0.5, n - 0.5)
    ax.tick_params(axis="x", labelsize=7.5, colors=MUTED_TEXT, length=3)
    ax.set_xlabel("step", fontsize=7.5, color=MUTED_TEXT, labelpad=1)


def _title(items: list[dict], folds: list[dict], ranks: list[_Lane]) -> str:
    """'Timeline: 40 steps (130 with repeats) on 2 ranks' (or '2 devices', '4 trees'; the lanes of
    one tree and of CUDA graphs are said by their names alone)."""
    n = len(items)
    times = [1] * n
    for f in folds:
        times[f["start"] : f["end"] + 1] = [f["repeat"]] * (f["end"] - f["start"] + 1)
    calls = sum(times)
    title = f"Timeline: {n} step{'s' * (n != 1)}"
    if calls != n:
        title += f" ({calls} with repeats)"
    trees = [r for r in ranks if isinstance(r, tuple)]
    if len(trees) > 1:
        title += f" on {_trees_in_words(trees)}"
    return title


def _trees_in_words(keys: list[TreeKey]) -> str:
    """'2 ranks', '2 devices', or '4 trees (2 ranks)' where ranks ran trees on several devices."""
    ranks = {k[0] for k in keys if k is not None and k[0] is not None}
    devices = any(k is not None and k[1] is not None for k in keys)
    n = len(keys)
    if not devices:
        return f"{n} rank{'s' * (n != 1)}"
    if not ranks:
        return f"{n} device{'s' * (n != 1)}"
    return f"{n} trees ({len(ranks)} rank{'s' * (len(ranks) != 1)})"


def _legend(fig: "Figure", present: list[str], folds: bool, gens: bool, left: float) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=step_color(k), edgecolor="none", label=STEP_LABELS.get(k, k)) for k in present]
    if folds:
        handles.append(Patch(facecolor=_FOLD_FACE, edgecolor=_FOLD_HATCH_COLOR, hatch="////", linewidth=0.6,
                             label="repeated block"))
    if gens:
        handles.append(Line2D([], [], color=_GEN_LINE, linewidth=0.9, linestyle=(0, (3, 2)),
                              label="generation boundary"))
    ncol = len(handles) if len(handles) <= 6 else (len(handles) + 1) // 2
    legend = fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(left, 0.02), ncol=ncol,
                        fontsize=7.5, frameon=False, handlelength=1.3, handleheight=0.9, columnspacing=1.2,
                        borderaxespad=0, labelspacing=0.3)
    legend.set_gid("timeline-legend")


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
        return literal_texts(fig)

    ranks = _lanes(items)
    left_in, right_in, top_in, bottom_in = _margins(ranks, current)
    axis_w_in = width_in - left_in - right_in
    axis_h = max(0.1, (height_in - top_in - bottom_in) / height_in)
    ax = fig.add_axes((left_in / width_in, bottom_in / height_in, axis_w_in / width_in, axis_h))
    ax.set_gid("timeline-axes")  # the steps' axes, dense or not (x: step index, ticks at y 0..1)
    rows = _ONE_LANE if ranks == [None] else _lane_rows(ranks, axis_h * height_in * 100)
    slots = max(n, _MIN_VISIBLE_STEPS)
    ax.set_ylim(*rows.ylim)
    _name_lanes(ax, rows)
    _x_axis(ax, n, slots)
    px_per_step = axis_w_in * 100 / slots  # at 100 dpi
    dense = px_per_step < 2
    lanes = _lane_items(items, rows)
    lane_of = [0] * n
    for k, lane in enumerate(lanes):
        for it in lane:
            lane_of[it["index"]] = k
    taken: _Taken = {}

    folds = timeline_folds(items)
    if folds:
        _draw_folds(ax, folds, lane_of, rows, px_per_step, dense, taken)
    pad = 0.36 if px_per_step >= 4 else 0.5
    if not dense:
        _draw_ticks(ax, items, lane_of, rows, pad, px_per_step)
    else:
        _draw_dense(ax, lanes, rows, max(1, int(round(axis_w_in * 100))), slots)
    gens = _draw_generations(ax, lanes, rows, px_per_step, axis_w_in * 100, dense, taken)
    if current is not None:
        _draw_current(ax, current, rows.bases[lane_of[current]], rows, pad, px_per_step)

    fig.text(left_in / width_in, 1 - 0.08 / height_in, _title(items, folds, ranks), fontsize=10, color=TEXT_COLOR,
             va="top", ha="left")
    if current is not None:
        fig.text(left_in / width_in, 1 - 0.32 / height_in, f"step {current + 1}: {_headline(steps[current])}", fontsize=8,
                 color=TEXT_COLOR, va="top", ha="left")
    kinds = {it["kind"] for it in items}
    present = [k for k in STEP_COLORS if k in kinds] + sorted(kinds - set(STEP_COLORS))
    _legend(fig, present, bool(folds), gens, left_in / width_in)
    return literal_texts(fig)  # names from the trace drawn as they are: "$x^2$" is no formula


def timeline_svg(trace: Union["Trace", Sequence["Step"], None], current: Optional[int] = None, **kw) -> str:
    """`timeline_figure(trace, current, **kw)` as SVG text (deterministic).

    While steps are drawn one by one (and up to 2,000 of them), each is a
    `<g id="step-<index>">` whose `<title>` is the step's headline.
    """
    steps = _steps(trace)
    titles = {}
    if len(steps) <= _MAX_STEP_IDS:
        titles = {f"step-{i}": f"step {i + 1}: {_headline(s)}" for i, s in enumerate(steps)}  # counted from 1
    return figure_svg(timeline_figure(trace, current, **kw), titles)


def timeline_png(trace: Union["Trace", Sequence["Step"], None], current: Optional[int] = None, *,
                 dpi: float = 100, **kw) -> bytes:
    """`timeline_figure(trace, current, **kw)` as PNG bytes."""
    return figure_png(timeline_figure(trace, current, **kw), dpi=dpi)
