"""The pool's legend: which node each colour is, and what the hatched and grey blocks are.

Plain texts beside patches in one collection, rather than a matplotlib Legend, whose layout
cost more to draw than all the blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

from cgviz.views.pool_shapes import FONT, rect_verts, stripe_collection
from cgviz.views.style import (
    BLOCK_CATEGORIES,
    FREE_COLOR,
    INPUT_HATCH,
    MUTED_TEXT,
    TEXT_COLOR,
    UNOWNED_COLOR,
    UNOWNED_HATCH,
    node_color,
)
from cgviz.views.svg_output import svg_artists
from cgviz.views.text import shown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cgviz.trace.model import Snapshot

_MAX_LEGEND_NODES = 16
_LEGEND_LINE_IN = 0.13  # a line of legend text
_LEGEND_GAP_IN = 0.035  # between legend entries
_SWATCH_IN = (0.17, 0.115)  # the colour patch of a legend entry
_HATCH_NAMES = {INPUT_HATCH: "input", UNOWNED_HATCH: "unowned"}


class LegendEntry(NamedTuple):
    """One entry of the pool's legend: `kind` is 'node' (with `node`), 'more', or a block category."""

    label: str
    face: str
    edge: str
    hatch: str
    kind: str
    node: Optional[int] = None


def legend_entries(snapshot: "Snapshot", nodes: set, present: set, highlight_node: Optional[int]) -> list[LegendEntry]:
    """Each legend entry, top to bottom, for a pool whose blocks belong to `nodes` and are of the
    categories `present`.

    The first `_MAX_LEGEND_NODES` owning nodes (named with their function, the highlighted
    one marked ◀), then the kinds of block present other than outputs. Face 'none': no patch.
    """
    functions = {n.id: n.function for n in snapshot.nodes}
    nodes = sorted(nodes)
    entries = []
    for node in nodes[:_MAX_LEGEND_NODES]:
        name = shown(functions.get(node) or "")
        label = f"node {node}" + (f" · {name}" if name else "") + ("  ◀" if node == highlight_node else "")
        entries.append(LegendEntry(label, node_color(node), "none", "", "node", node))
    if len(nodes) > _MAX_LEGEND_NODES:
        entries.append(LegendEntry(f"+ {len(nodes) - _MAX_LEGEND_NODES} more nodes", "none", "none", "", "more"))
    if "input" in present:
        entries.append(LegendEntry("input buffer (node colour, hatched)", "#ffffff", MUTED_TEXT, INPUT_HATCH, "input"))
    if "unowned" in present:
        entries.append(LegendEntry("allocated, no live output\n(intermediate or stale)", UNOWNED_COLOR, "#4a4e52",
                                   UNOWNED_HATCH, "unowned"))
    if "free" in present:
        entries.append(LegendEntry(BLOCK_CATEGORIES["free"], FREE_COLOR, "#adb5bd", "", "free"))
    return entries


def legend_height_in(entries: list[tuple]) -> float:
    """The legend's height in inches: the figure is made tall enough for it."""
    return sum((1 + e[0].count("\n")) * _LEGEND_LINE_IN + _LEGEND_GAP_IN for e in entries)


def draw_legend(fig: "Figure", entries: list[tuple], x_in: float, top_in: float) -> None:
    """The legend at `x_in` inches from the left, from `top_in` inches below the top down.

    Texts (gid ``pool-legend-text-<k>``) beside patches in one collection, rather than a
    matplotlib Legend, whose layout cost more to draw than all the blocks.
    """
    import numpy as np
    from matplotlib.colors import to_rgba_array

    Rects, _, Label = svg_artists()
    sw, sh = _SWATCH_IN
    patches: list[tuple] = []  # (x0, x1, y0, y1) in inches from the bottom left, face, edge, hatch
    y = fig.get_figheight() - top_in
    for k, (label, face, edge, hatch, _kind, _node) in enumerate(entries):
        row = (1 + label.count("\n")) * _LEGEND_LINE_IN
        mid = y - row / 2
        if face != "none":
            patches.append(((x_in, x_in + sw, mid - sh / 2, mid + sh / 2), face, edge, hatch))
        fig.add_artist(Label(x_in + sw + 0.08, mid, label, transform=fig.dpi_scale_trans, fontsize=FONT,
                             va="center", color=TEXT_COLOR, linespacing=1.25, gid=f"pool-legend-text-{k}"))
        y -= row + _LEGEND_GAP_IN
    if not patches:
        return
    rects = np.array([p[0] for p in patches])
    edges = to_rgba_array([p[2] for p in patches])
    swatches = Rects(rect_verts(*rects.T), facecolors=[p[1] for p in patches], edgecolors=edges,
                     linewidths=[0.0 if p[2] == "none" else 0.6 for p in patches], transform=fig.dpi_scale_trans)
    swatches.set_gid("pool-legend-patches")
    fig.add_artist(swatches)
    for hatch, name in _HATCH_NAMES.items():
        mine = [i for i, p in enumerate(patches) if p[3] == hatch]
        stripes = stripe_collection(rects[mine], edges[mine], hatch, f"pool-legend-hatch-{name}",
                                     transform=fig.dpi_scale_trans)
        if stripes is not None:
            fig.add_artist(stripes)
