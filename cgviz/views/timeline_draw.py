"""The timeline's artists on its axes: the ticks, the fold bands, the generation lines, the
current step's outline and the x axis.

Each is drawn as one collection, not one artist per step: one `PolyCollection` of ticks, one of
bands and one `LineCollection` of generation lines, so 10,000 steps cost a handful of artists.
When steps get narrower than two pixels (over ~470 steps at the default width) the ticks become
one image row per lane, one pixel column per group of steps showing the most notable kind among
them (`error` first, then `eager`, `record`, `warmup`, …; see `_DENSE_PRIORITY`): a lone error in
10,000 steps stays visible. Labels ("×N", "gen N") are thinned so that they never overlap, and
when generation boundaries are closer than six pixels only the labelled ones get a line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cgviz.views.style import MUTED_TEXT, TEXT_COLOR, step_color, text_color_on
from cgviz.views.text import shown
from cgviz.views.timeline_data import LANE_GRAPHS, timeline_generations
from cgviz.views.timeline_lanes import Rows

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.axes import Axes

FOLD_FACE = "#eef1f4"
FOLD_HATCH_COLOR = "#9aa5b1"
GEN_LINE = "#3e4c59"
_CURRENT = "#111111"
_MAX_FOLD_LABELS = 20
MAX_STEP_IDS = 2000  # per-step SVG ids only up to this many steps
#: When steps are under two pixels wide, the kind shown for a pixel's steps: the first here.
_DENSE_PRIORITY = ("error", "eager", "compile", "record", "capture", "warmup", "checkpoint_restore", "execute",
                   "replay", "destroy", "generation", "path_end")

#: (lane, label y) -> the x spans that labels there take up.
Taken = dict[tuple[int, float], list[tuple[float, float]]]


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


def _rects(x0: "np.ndarray", x1: "np.ndarray", y0: "np.ndarray", y1: "np.ndarray") -> "np.ndarray":
    """Rectangles as a PolyCollection's vertices."""
    import numpy as np

    return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)


def _free(taken: list[tuple[float, float]], a: float, b: float) -> bool:
    return not any(x < b and a < y for x, y in taken)


def draw_folds(ax: "Axes", folds: list[dict], lane_of: list[int], rows: Rows, px_per_step: float, dense: bool,
               taken: Taken) -> None:
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
    bands = PolyCollection(_rects(s0, s1, low + rows.band[0], high + rows.band[1]), facecolors=FOLD_FACE,
                           edgecolors=FOLD_HATCH_COLOR, linewidths=0.6, zorder=1,
                           **({} if dense else {"hatch": "////"}))
    if not dense and hasattr(bands, "set_hatchcolor"):  # matplotlib >= 3.10
        bands.set_hatchcolor(FOLD_HATCH_COLOR)
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


def draw_ticks(ax: "Axes", items: list[dict], lane_of: list[int], rows: Rows, pad: float,
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
    if n <= MAX_STEP_IDS:
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


def draw_dense(ax: "Axes", lanes: list[list[dict]], rows: Rows, cols: int, slots: int) -> None:
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


def draw_generations(ax: "Axes", lanes: list[list[dict]], rows: Rows, px_per_step: float, columns: float,
                     dense: bool, taken: Taken) -> bool:
    """A dashed line where each lane's generation changes, "gen N" over the lines that have room;
    when boundaries are closer than 6 pixels, only the labelled ones are drawn. Whether any line
    was drawn."""
    from matplotlib.collections import LineCollection

    segs = []
    for k, lane in enumerate(lanes):
        if all(it["lane"] == LANE_GRAPHS for it in lane):  # plain CUDA graphs have no generations
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
    lines = LineCollection(segs, colors=GEN_LINE, linewidths=0.9 if not dense else 0.6, linestyles=(0, (3, 2)),
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
            ax.text(g["x"], y, g["label"], ha="center", va="bottom", fontsize=6.5, color=GEN_LINE, zorder=4,
                    clip_on=False)
    x0 = lane[0]["index"] - 0.5
    label = f"gen {lane[0]['generation']}"
    end = x0 + _label_steps(px_per_step, len(label), 6.5)
    first = min((g["x"] for g in labelled), default=None)
    if (first is None or first - x0 > _label_steps(px_per_step, 12, 6.5)) and _free(taken, x0, end):
        taken.append((x0, end))
        ax.text(x0, y, label, ha="left", va="bottom", fontsize=6.5, color=MUTED_TEXT, zorder=4, clip_on=False)


def draw_current(ax: "Axes", current: int, base: float, rows: Rows, pad: float, px_per_step: float) -> None:
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


def x_axis(ax: "Axes", n: int, slots: int) -> None:
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
