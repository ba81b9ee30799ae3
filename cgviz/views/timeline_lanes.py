"""The timeline's lanes: which there are, which step goes in which, and where each sits.

A trace of one tree is drawn in one lane. A merged multi-rank trace (`cgviz.merge`: its steps
carry a rank) gets one lane per rank, "rank N" on its left, rank 0 on top; so does a trace of
trees on several devices of one process ("cuda:1"), and of both ("rank 1 · cuda:1"). Steps of
CUDA graphs made outside the trees (`cgviz.observe_graphs`) beside tree steps get one more lane,
"CUDA graphs", under the trees' (one tree's lane is then named "tree").

The lanes share the axes' height: `lane_rows` gives each its band of y, and room over it for its
"×N" and "gen N" labels where the lanes are tall enough (`Rows`). The artists in the lanes are
drawn by `cgviz.views.timeline_draw`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Optional, Union

from cgviz.trace.lanes import TreeKey, in_tree_order, tree_name

from cgviz.views.style import TEXT_COLOR
from cgviz.views.text import GRAPHS_LANE, TREE_LANE, shown
from cgviz.views.timeline_data import LANE_GRAPHS, LANE_TREE

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Lanes of a merged trace (one per rank), at 100 dpi: the ▲'s room under them, the gap over a
# lane that holds its "×N" and "gen N", the lane height from which they get one, the names' size.
_LANE_BELOW_PX = 12
_LANE_LABEL_PX = 12
_LANE_LABELS_MIN_PX = 25
_LANE_NAME_PT = 7.0
_LANE_NAME_MIN_PT = 5.0
# The most characters of a lane's name drawn ("rank 12 · cuda:3" is 16): the names take room on the
# left of the axes, so a device name of thousands of characters would leave the axes none.
_LANE_NAME_MAX = 40
#: A lane: None (the only one), a tree's (rank, device), `LANE_TREE` (the one tree where a trace
#: also holds CUDA graphs' steps; several trees keep their (rank, device) keys) or `LANE_GRAPHS`.
Lane = Union[None, TreeKey, str]


class Rows(NamedTuple):
    """The vertical layout, in data units: lane k (tree ``ranks[k]``: rank and device) has its ticks from
    ``bases[k]`` to ``bases[k] + 1``; ``band`` and ``gen_span``: a fold band's and a generation
    line's extent around them; ``fold_y``, ``gen_y``: where "×N" and "gen N" go (None: no room);
    ``marker_y``: the current step's ▲; ``names``: ticks tall enough for a function's name."""

    ranks: list[Lane]
    bases: list[float]
    ylim: tuple[float, float]
    band: tuple[float, float]
    gen_span: tuple[float, float]
    fold_y: Optional[float]
    gen_y: Optional[float]
    marker_y: float
    names: bool


#: A trace of one rank: one lane, its labels over it and "gen N" above the axes.
ONE_LANE = Rows([None], [0.0], (-0.42, 1.62), (-0.1, 1.38), (-0.3, 1.62), 1.07, 1.64, -0.2, True)


def lanes_of(items: list[dict]) -> list[Lane]:
    """The lanes, top to bottom: [None] (one lane) unless the steps carry ranks or devices
    (`cgviz.trace.lanes`: a lane per tree) or hold both tree steps and CUDA graphs' (the graphs'
    lane last)."""
    trees = [it for it in items if it["lane"] == LANE_TREE]
    keys = in_tree_order((it["rank"], it["device"]) for it in trees)
    lanes: list[Lane] = [None] if keys in ([], [(None, None)]) else list(keys)
    if not trees or len(trees) == len(items):
        return lanes
    return ([LANE_TREE] if lanes == [None] else lanes) + [LANE_GRAPHS]


def _item_lane(item: dict, lanes: list[Lane]) -> Lane:
    """The lane an item is drawn in, among `lanes` (`lanes_of`)."""
    if lanes == [None]:
        return None
    if item["lane"] == LANE_GRAPHS:
        return LANE_GRAPHS
    return LANE_TREE if LANE_TREE in lanes else (item["rank"], item["device"])


def _lane_name(key: Lane) -> str:
    if key == LANE_GRAPHS:
        return GRAPHS_LANE
    if key == LANE_TREE:
        return TREE_LANE
    name = shown(tree_name(key or (None, None)))
    return name if len(name) <= _LANE_NAME_MAX else name[: _LANE_NAME_MAX - 1] + "…"


def margins(ranks: list[Lane], current: Optional[int]) -> tuple[float, float, float, float]:
    """Left, right, top, bottom margins in inches. Lanes take room on the left for their names;
    their labels sit between them, so only the title (and headline) needs room on top."""
    if ranks == [None]:
        return 0.35, 0.25, 0.72, 0.72
    chars = max(len(_lane_name(r)) for r in ranks)
    return 0.14 + chars * _LANE_NAME_PT * 0.6 / 72, 0.25, 0.3 + (0.22 if current is not None else 0), 0.72


def lane_rows(ranks: list[Lane], height_px: float) -> Rows:
    """Lanes sharing `height_px` (the axes' height at 100 dpi): the ▲'s room under them, then each
    lane's ticks with a gap over them, tall enough for labels where the lanes are."""
    lane_px = max(1.0, (height_px - _LANE_BELOW_PX) / len(ranks))
    labels = lane_px >= _LANE_LABELS_MIN_PX
    tick_px = max(1.0, lane_px - (_LANE_LABEL_PX if labels else max(2.0, 0.3 * lane_px)))
    pitch = lane_px / tick_px  # data units: a tick is 1 high
    bases = [(len(ranks) - 1 - k) * pitch for k in range(len(ranks))]
    label_y = 1.07 if labels else None
    return Rows(ranks, bases, (-_LANE_BELOW_PX / tick_px, len(ranks) * pitch), (-0.08, 1.08), (-0.15, 1.06),
                label_y, label_y, -_LANE_BELOW_PX / 2 / tick_px, tick_px >= 10)


def lane_items(items: list[dict], rows: Rows) -> list[list[dict]]:
    """The items of each lane, in order."""
    if rows.ranks == [None]:
        return [items]
    return [[it for it in items if _item_lane(it, rows.ranks) == key] for key in rows.ranks]


def name_lanes(ax: "Axes", rows: Rows) -> None:
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
